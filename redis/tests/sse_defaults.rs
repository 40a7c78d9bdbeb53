//! The SSE endpoint over a Redis stream with every default: no reader limit on the stream, so the
//! endpoint's retention table must grow with the connections instead of being sized by the limit.

mod common;

use std::time::Duration;

use common::RedisServer;
use futures_util::{FutureExt, StreamExt};
use http::{HeaderMap, Method, StatusCode, Uri};
use replay_ring::CloseReason;
use replay_ring_redis::RedisStream;
use replay_ring_sse::axum::{SseConfig, SseProducer, SseStream};
use replay_ring_sse::{PublishError, RetentionConfig, StreamId, StreamIdentity};

const LIMIT: Duration = Duration::from_secs(10);

/// A stream of 64 events named `name`, on a backend with every default.
async fn create(server: &RedisServer, name: &str) -> RedisStream {
    let backend = server.backend().await;
    backend
        .create(&StreamId::new(name).unwrap(), 64)
        .await
        .unwrap()
}

/// The SSE endpoint over a new stream `name`, with this process holding its producer.
async fn producing(
    server: &RedisServer,
    name: &str,
) -> (
    StreamIdentity,
    SseStream<RedisStream>,
    SseProducer<RedisStream>,
) {
    let stream = create(server, name).await;
    let identity = stream.identity();
    let producer = stream.acquire_producer().await.unwrap();
    let (sse, publisher) = SseStream::with_backend(producer, identity, SseConfig::default());
    (identity, sse, publisher)
}

/// The body's next chunk, as text.
async fn next_text<S, E>(body: &mut S) -> String
where
    S: futures_util::Stream<Item = Result<bytes::Bytes, E>> + Unpin,
    E: std::fmt::Debug,
{
    let chunk = tokio::time::timeout(LIMIT, body.next()).await.unwrap();
    String::from_utf8(chunk.unwrap().unwrap().to_vec()).unwrap()
}

/// A new subscription to `sse`: checks its 200 and priming event, then waits for the next chunk
/// on a task (the body drives the tail), so that the caller can act on Redis meanwhile.
async fn next_chunk_after_priming(
    sse: &SseStream<RedisStream>,
) -> tokio::task::JoinHandle<bytes::Bytes> {
    let response = sse.respond_async(&HeaderMap::new()).await;
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body().into_data_stream();
    let priming = tokio::time::timeout(LIMIT, body.next()).await.unwrap();
    assert!(priming.is_some(), "a priming event");
    tokio::spawn(async move {
        let next = tokio::time::timeout(LIMIT, body.next()).await;
        next.expect("a chunk in time")
            .expect("a chunk")
            .expect("no body error")
    })
}

/// The headers of a resume from before the first event of the stream `identity`.
fn resume_from_the_start(identity: StreamIdentity) -> HeaderMap {
    let mut headers = HeaderMap::new();
    let cursor = identity.event_id(0).to_string();
    headers.insert("last-event-id", cursor.parse().unwrap());
    headers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_over_a_default_redis_stream_serves_more_connections_than_its_first_table() {
    let server = RedisServer::start();
    let stream = create(&server, "defaults").await;
    assert_eq!(
        stream.max_readers(),
        usize::MAX,
        "no reader limit by default"
    );
    let identity = stream.identity();
    let producer = stream.acquire_producer().await.unwrap();
    let (sse, mut publisher) = SseStream::with_backend(producer, identity, SseConfig::default());
    // More connections than the retention table starts with (64).
    const CONNECTIONS: usize = 100;
    let mut bodies = Vec::new();
    for _ in 0..CONNECTIONS {
        let response = sse.respond_async(&HeaderMap::new()).await;
        assert_eq!(response.status(), StatusCode::OK);
        let mut body = response.into_body().into_data_stream();
        let priming = tokio::time::timeout(LIMIT, body.next()).await.unwrap();
        assert!(priming.is_some(), "a priming event");
        bodies.push(body);
    }
    assert_eq!(sse.with_retention(|r| r.live_connections()), CONNECTIONS);
    let id = publisher.send("to everyone").await.unwrap();
    for body in &mut bodies {
        let text = next_text(body).await;
        assert!(text.contains(&format!(".{id}\n")), "{text:?}");
        assert!(text.contains("data: to everyone\n"), "{text:?}");
    }
    drop(bodies);
    assert_eq!(sse.with_retention(|r| r.live_connections()), 0);
}

/// A stream that is gone from Redis (deleted, expired, or lost in a restart without persistence)
/// is answered 404 `stream_lost`, with or without a cursor: the stream, not a session, is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_gone_from_redis_is_answered_stream_lost() {
    let server = RedisServer::start();
    let stream = create(&server, "vanishing").await;
    let identity = stream.identity();
    let sse = SseStream::without_producer(stream.clone(), identity, SseConfig::default());
    stream.delete().await.unwrap();
    for headers in [HeaderMap::new(), resume_from_the_start(identity)] {
        let response = sse.respond_async(&headers).await;
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        let text = next_text(&mut response.into_body().into_data_stream()).await;
        assert!(text.contains(r#""error":"stream_lost""#), "{text}");
        // A request without a cursor is not told about a header it never sent.
        assert!(!text.contains("Last-Event-ID"), "{text}");
        // A `HEAD` cannot read the window of a lost stream, and is answered as the `GET` is.
        let head = sse
            .respond_to_request_async(&Method::HEAD, &Uri::from_static("/events"), &headers)
            .await;
        assert_eq!(head.status(), StatusCode::NOT_FOUND);
    }
}

/// A `HEAD` over Redis gets the status and `Replay-*` headers of its `GET`, decided from the
/// stream's window, for a cursor inside it, below its floor and ahead of its head.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_over_redis_is_answered_as_its_get() {
    let server = RedisServer::start();
    let (identity, sse, mut publisher) = producing(&server, "headed").await;
    for n in 1..=5 {
        publisher.send(format!("{n}")).await.unwrap();
    }
    sse.backend().release_through(2).await.unwrap();
    for (cursor, status) in [
        (2, StatusCode::OK),
        (5, StatusCode::OK),
        (1, StatusCode::RANGE_NOT_SATISFIABLE),
        (6, StatusCode::CONFLICT),
    ] {
        let mut headers = HeaderMap::new();
        let id = identity.event_id(cursor).to_string();
        headers.insert("last-event-id", id.parse().unwrap());
        let uri = Uri::from_static("/events");
        let head = sse
            .respond_to_request_async(&Method::HEAD, &uri, &headers)
            .await;
        let get = sse.respond_async(&headers).await;
        assert_eq!(
            (head.status(), get.status()),
            (status, status),
            "after {cursor}"
        );
        for name in ["replay-floor", "replay-head", "replay-stream"] {
            assert_eq!(
                head.headers().get(name),
                get.headers().get(name),
                "after {cursor}: {name}"
            );
        }
    }
}

/// A request dropped after its connection was registered, while the endpoint waits for Redis (a
/// client that closed its socket at that moment), frees its connection slot: dropped requests
/// never fill the stream's table of connections, so later clients are still served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_dropped_while_redis_answers_frees_its_connection_slot() {
    let server = RedisServer::start();
    let stream = create(&server, "abandoned").await;
    let identity = stream.identity();
    let sse = SseStream::without_producer(stream, identity, SseConfig::default());
    let live = || sse.with_retention(|r| r.live_connections());
    let headers = [HeaderMap::new(), resume_from_the_start(identity)];
    let mut dropped_while_waiting = 0;
    for headers in headers.iter().cycle().take(10_000) {
        let mut request = Box::pin(sse.respond_async(headers));
        // The poll that registers the connection goes on to ask Redis for the window, a round
        // trip: it normally returns pending with the connection registered. (When this thread
        // was descheduled for that long, the response is ready instead: it is dropped at once.)
        let answered = loop {
            match request.as_mut().now_or_never() {
                Some(response) => break Some(response),
                None if live() == 1 => break None,
                None => tokio::task::yield_now().await,
            }
        };
        if answered.is_none() {
            dropped_while_waiting += 1;
        }
        drop(answered);
        drop(request);
        assert_eq!(live(), 0, "a dropped request kept its connection entry");
        if dropped_while_waiting == 10 {
            break;
        }
    }
    assert_eq!(dropped_while_waiting, 10);
    let response = sse.respond_async(&HeaderMap::new()).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(live(), 1);
}

/// Closes every client connection Redis has but the caller's, as a restart, a failover,
/// `CLIENT KILL` or Redis's idle `timeout` does.
fn close_client_connections(server: &RedisServer) {
    let closed: i64 = redis::cmd("CLIENT")
        .arg(&["KILL", "TYPE", "normal", "SKIPME", "yes"])
        .query(&mut server.raw())
        .unwrap();
    assert!(closed >= 1, "the backend's connections were closed");
}

/// Redis closed every client connection: the next requests, for a new subscription and for a
/// resume, are served on a new connection instead of failing with 503 (which ends a browser's
/// `EventSource` for good).
///
/// Except in one race of redis-rs (1.8) itself: with other commands in flight on the same
/// connection, a command sent just as Redis closes it is, about once in 400 closes, never failed
/// as dropped but left to run out its response timeout (reproduced with a bare
/// `ConnectionManager` and a `PING` loop). The request then gets a 503 after that timeout, and
/// the connection is replaced for the next one: that case, and only that one, is asked again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_after_redis_closed_the_connections_are_served() {
    let server = RedisServer::start();
    let stream = create(&server, "dropped").await;
    let identity = stream.identity();
    let mut producer = stream.acquire_producer().await.unwrap();
    producer.append(b"one").await.unwrap();
    let sse = SseStream::without_producer(stream.clone(), identity, SseConfig::default());
    let response_timeout = replay_ring_redis::RedisConfig::default().response_timeout;
    for headers in [HeaderMap::new(), resume_from_the_start(identity)] {
        close_client_connections(&server);
        let asked = std::time::Instant::now();
        let mut response = sse.respond_async(&headers).await;
        if response.status() == StatusCode::SERVICE_UNAVAILABLE
            && asked.elapsed() >= response_timeout
        {
            response = sse.respond_async(&headers).await;
        }
        assert_eq!(response.status(), StatusCode::OK);
    }
}

/// A connection waiting for events (its reader blocked in `XREAD`) when Redis closes every client
/// connection, again and again, goes on with the next event, and so does the producer: no
/// `stream-error` frame.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_connection_survives_redis_closing_the_connections() {
    let server = RedisServer::start();
    let (_, sse, mut publisher) = producing(&server, "waiting").await;
    let next = next_chunk_after_priming(&sse).await;
    // Five times, with no event in between: each close hits the read that replaced the one
    // before (a kill storm, or a flapping network path).
    for _ in 0..5 {
        common::eventually(LIMIT, "the reader blocked in XREAD", || async {
            let clients: String = redis::cmd("CLIENT")
                .arg("LIST")
                .query(&mut server.raw())
                .unwrap();
            clients.lines().any(|c| c.contains("cmd=xread"))
        })
        .await;
        close_client_connections(&server);
    }
    let id = publisher.send("after the close").await.unwrap();
    let chunk = next.await.unwrap();
    let text = std::str::from_utf8(&chunk).unwrap();
    assert!(text.contains(&format!(".{id}\n")), "{text:?}");
    assert!(text.contains("data: after the close\n"), "{text:?}");
}

/// Redis holds writes back (`CLIENT PAUSE WRITE`, as a failover does on the old primary) while
/// the producer is appending: new subscriptions and resumes on the producing process are still
/// served, since reads do not queue behind the held-back append, even with no script cached (as
/// after a restart or a failover), when Redis cannot tell a read script's `EVALSHA` from a write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_are_served_while_redis_holds_an_append_back() {
    let server = RedisServer::start();
    let (identity, sse, mut publisher) = producing(&server, "paused").await;
    publisher.send("before").await.unwrap();
    let requests = [HeaderMap::new(), resume_from_the_start(identity)];
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut server.raw())
        .unwrap();
    let _: () = redis::cmd("CLIENT")
        .arg(&["PAUSE", "3000", "WRITE"])
        .query(&mut server.raw())
        .unwrap();
    let held = tokio::spawn(async move { publisher.send("held back").await });
    common::eventually(LIMIT, "the append held back by Redis", || async {
        let clients: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query(&mut server.raw())
            .unwrap();
        clients
            .lines()
            .any(|c| c.contains("cmd=evalsha") && c.contains("flags=b"))
    })
    .await;
    for headers in &requests {
        assert_eq!(sse.respond_async(headers).await.status(), StatusCode::OK);
    }
    let _: () = redis::cmd("CLIENT")
        .arg("UNPAUSE")
        .query(&mut server.raw())
        .unwrap();
    assert_eq!(held.await.unwrap().unwrap(), 2);
}

/// A connection following a stream that is then deleted from Redis (by an operator, or expired)
/// ends with an explicit `stream_lost` frame: resuming it is pointless, the client starts over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_whose_stream_is_deleted_ends_with_stream_lost() {
    let server = RedisServer::start();
    let config = replay_ring_redis::RedisConfig {
        block: Duration::from_millis(200),
        ..Default::default()
    };
    let backend = server.backend_with(config).await;
    let stream = backend
        .create(&StreamId::new("deleted").unwrap(), 64)
        .await
        .unwrap();
    let identity = stream.identity();
    let sse = SseStream::without_producer(stream.clone(), identity, SseConfig::default());
    let next = next_chunk_after_priming(&sse).await;
    stream.delete().await.unwrap();
    let chunk = next.await.unwrap();
    let text = std::str::from_utf8(&chunk).unwrap();
    assert!(text.contains("event: stream-error\n"), "{text:?}");
    assert!(text.contains(r#""error":"stream_lost""#), "{text:?}");
}

/// While Redis holds writes back (`CLIENT PAUSE WRITE`, as a failover does), a resume on a
/// serving replica gets its priming event, its whole replay and its keep-alives: the releases its
/// writer plans (writes, held back with the pause) run beside the response instead of in front of
/// it, and land once Redis takes writes again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_is_written_while_redis_holds_its_releases_back() {
    let server = RedisServer::start();
    // A held-back release waits for its reply this long: far past the limit the test reads with.
    let config = replay_ring_redis::RedisConfig {
        response_timeout: Duration::from_secs(60),
        ..Default::default()
    };
    let stream = server
        .backend_with(config)
        .await
        .create(&StreamId::new("held").unwrap(), 64)
        .await
        .unwrap();
    let identity = stream.identity();
    let mut producer = stream.acquire_producer().await.unwrap();
    for i in 1..=10 {
        producer.append(format!("e{i}").as_bytes()).await.unwrap();
    }
    let sse_config = SseConfig {
        retention: replay_ring_sse::RetentionConfig {
            // What is written to the connection is due for release at once.
            resumption_window: Duration::from_millis(1),
            ..Default::default()
        },
        keep_alive: Duration::from_millis(100),
        ..SseConfig::default()
    };
    let sse = SseStream::without_producer(stream.clone(), identity, sse_config);
    let _: () = redis::cmd("CLIENT")
        .arg(&["PAUSE", "120000", "WRITE"])
        .query(&mut server.raw())
        .unwrap();
    let mut headers = HeaderMap::new();
    headers.insert(
        "last-event-id",
        identity.event_id(5).to_string().parse().unwrap(),
    );
    let response = tokio::time::timeout(LIMIT, sse.respond_async(&headers))
        .await
        .expect("an answer while writes are held back");
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body().into_data_stream();
    let mut text = String::new();
    while text.matches(": keep-alive\n").count() < 2 {
        text.push_str(&next_text(&mut body).await);
    }
    let ids: Vec<&str> = text
        .lines()
        .filter_map(|line| line.strip_prefix("id: "))
        .collect();
    let expected: Vec<String> = (5..=10).map(|i| identity.event_id(i).to_string()).collect();
    assert_eq!(ids, expected, "the priming event, then 6..=10: {text:?}");
    assert_eq!(
        stream.state().await.unwrap().floor,
        1,
        "nothing released yet"
    );
    let _: () = redis::cmd("CLIENT")
        .arg("UNPAUSE")
        .query(&mut server.raw())
        .unwrap();
    // The connection stays open (its writer runs the release) until the floor has moved.
    let reading = tokio::spawn(async move { while body.next().await.is_some() {} });
    common::eventually(LIMIT, "the held-back release", || async {
        stream.state().await.unwrap().floor == 11
    })
    .await;
    reading.abort();
}

/// With `acknowledge_on_resume`, a resume while Redis holds writes back is answered at once and
/// its acknowledgement (a release) lands once Redis takes writes again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acknowledging_resume_is_answered_while_redis_holds_its_release_back() {
    let server = RedisServer::start();
    let config = replay_ring_redis::RedisConfig {
        response_timeout: Duration::from_secs(60),
        ..Default::default()
    };
    let stream = server
        .backend_with(config)
        .await
        .create(&StreamId::new("acked").unwrap(), 64)
        .await
        .unwrap();
    let identity = stream.identity();
    let mut producer = stream.acquire_producer().await.unwrap();
    for i in 1..=10 {
        producer.append(format!("e{i}").as_bytes()).await.unwrap();
    }
    let sse_config = SseConfig {
        acknowledge_on_resume: true,
        ..SseConfig::default()
    };
    let sse = SseStream::without_producer(stream.clone(), identity, sse_config);
    let _: () = redis::cmd("CLIENT")
        .arg(&["PAUSE", "120000", "WRITE"])
        .query(&mut server.raw())
        .unwrap();
    let mut headers = HeaderMap::new();
    headers.insert(
        "last-event-id",
        identity.event_id(5).to_string().parse().unwrap(),
    );
    let response = tokio::time::timeout(LIMIT, sse.respond_async(&headers))
        .await
        .expect("an answer while writes are held back");
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body().into_data_stream();
    let mut text = String::new();
    while !text.contains(&format!("id: {}\n", identity.event_id(10))) {
        text.push_str(&next_text(&mut body).await);
    }
    assert_eq!(
        stream.state().await.unwrap().floor,
        1,
        "nothing released yet"
    );
    let _: () = redis::cmd("CLIENT")
        .arg("UNPAUSE")
        .query(&mut server.raw())
        .unwrap();
    let reading = tokio::spawn(async move { while body.next().await.is_some() {} });
    common::eventually(LIMIT, "the acknowledgement", || async {
        stream.state().await.unwrap().floor == 6
    })
    .await;
    reading.abort();
}

/// A backpressure close that Redis refuses (the lease lapsed while the producer waited for room:
/// a Redis stall or a paused process past the lease) leaves the stream open. The producer must
/// not claim it ended, or the replica would neither produce nor stand by again, and clients would
/// get keep-alives forever: it gives the stream up ([`PublishError::Superseded`]), and the next
/// producer to take the lease continues it and can end it; the old publisher then reports that
/// end, not a close of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backpressure_close_that_redis_refuses_gives_the_stream_up_for_the_next_producer() {
    let server = RedisServer::start();
    let stream = server
        .backend()
        .await
        .create(&StreamId::new("refused-close").unwrap(), 4)
        .await
        .unwrap();
    let producer = stream.acquire_producer().await.unwrap();
    let config = SseConfig {
        retention: RetentionConfig {
            resumption_window: Duration::from_secs(60),
            backpressure_timeout: Duration::from_millis(300),
        },
        ..SseConfig::default()
    };
    let (_sse, mut publisher) = SseStream::with_backend(producer, stream.identity(), config);
    for n in 1..=4 {
        assert_eq!(publisher.send(format!("e{n}")).await.unwrap(), n);
    }
    // The window is full and nothing will be released for a minute; the lease is gone before
    // the backpressure bound is reached.
    let lease = stream.key_names()[3].to_owned();
    let deleted: u64 = redis::cmd("DEL")
        .arg(&lease)
        .query(&mut server.raw())
        .unwrap();
    assert_eq!(deleted, 1);

    let err = publisher.send("e5").await.unwrap_err();
    assert!(matches!(err, PublishError::Superseded), "{err:?}");
    let again = publisher.send("e5").await.unwrap_err();
    assert!(matches!(again, PublishError::Superseded), "{again:?}");
    let state = stream.state().await.unwrap();
    assert_eq!((state.head, state.closed), (4, None), "not closed in Redis");

    // The next producer continues after the head, and its close is recorded.
    let next = stream.acquire_producer().await.unwrap();
    assert_eq!(next.next_id(), 5);
    next.close(CloseReason::Completed).await.unwrap();
    let closed = stream.state().await.unwrap().closed;
    assert_eq!(closed, Some(CloseReason::Completed));
    // The old publisher now says the stream ended, with the other producer's reason; its own
    // refused close did not land, so `close` does not say it did.
    let after = publisher.send("e6").await.unwrap_err();
    assert!(
        matches!(after, PublishError::Closed(Some(CloseReason::Completed))),
        "{after:?}"
    );
    let close = publisher.close(CloseReason::Completed).await;
    assert!(
        matches!(
            close,
            Err(PublishError::Closed(Some(CloseReason::Completed)))
        ),
        "{close:?}"
    );
}

/// An event past the backend's `max_payload_bytes` is refused as `TooLarge` through the SSE
/// layer, before it is sent: no id consumed, nothing pending, the stream stays open, and the next
/// event gets the id the refused one would have had.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_past_the_payload_limit_is_too_large_and_the_stream_goes_on() {
    const MAX: usize = 1024;
    let server = RedisServer::start();
    let backend = server
        .backend_with(replay_ring_redis::RedisConfig {
            max_payload_bytes: MAX,
            ..Default::default()
        })
        .await;
    let stream = backend
        .create(&StreamId::new("too-large").unwrap(), 8)
        .await
        .unwrap();
    let producer = stream.acquire_producer().await.unwrap();
    let (_sse, mut publisher) =
        SseStream::with_backend(producer, stream.identity(), SseConfig::default());
    assert_eq!(publisher.send("first").await.unwrap(), 1);

    let err = publisher.send("x".repeat(MAX + 1)).await.unwrap_err();
    match err {
        PublishError::TooLarge { bytes, limit } => {
            assert_eq!((bytes, limit), (MAX as u64 + 1, MAX as u64));
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
    assert_eq!(publisher.send("x".repeat(MAX)).await.unwrap(), 2);
    let state = stream.state().await.unwrap();
    assert_eq!((state.head, state.closed), (2, None));
}

/// A producer that starts on its first subscriber starts for a client of another replica: the
/// endpoint the client reached records the subscriber in Redis, and the producing replica, which
/// has no client of its own, reads it. The client then gets the events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_of_another_replica_starts_a_producer_waiting_for_its_first() {
    let server = RedisServer::start();
    let name = StreamId::new("first-elsewhere").unwrap();
    let (identity, _producing_endpoint, mut publisher) = producing(&server, name.as_str()).await;
    // Another replica: a connection of its own, serving the stream without producing it.
    let elsewhere = server.backend().await.open(&name).await.unwrap();
    let serving = SseStream::without_producer(elsewhere, identity, SseConfig::default());

    assert!(
        publisher.first_subscriber().now_or_never().is_none(),
        "no subscriber anywhere yet"
    );
    let first_chunk = next_chunk_after_priming(&serving).await;
    tokio::time::timeout(LIMIT, publisher.first_subscriber())
        .await
        .expect("the producer learns of the other replica's subscriber");
    let id = publisher.send("hello").await.unwrap();
    let text = String::from_utf8(first_chunk.await.unwrap().to_vec()).unwrap();
    assert!(text.contains(&format!(".{id}\n")), "{text:?}");
    assert!(text.contains("data: hello\n"), "{text:?}");
    // Once started, it stays started.
    assert!(publisher.first_subscriber().now_or_never().is_some());
}

/// A subscriber recorded for one incarnation of a stream does not start the producer of the
/// next one: the record is the meta hash's, which a new incarnation starts without.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_of_a_deleted_incarnation_does_not_start_the_next_one() {
    let server = RedisServer::start();
    let name = StreamId::new("first-again").unwrap();
    let (identity, _endpoint, publisher) = producing(&server, name.as_str()).await;
    let elsewhere = server.backend().await.open(&name).await.unwrap();
    let serving = SseStream::without_producer(elsewhere.clone(), identity, SseConfig::default());
    let _waiting = next_chunk_after_priming(&serving).await;
    tokio::time::timeout(LIMIT, publisher.first_subscriber())
        .await
        .expect("the first incarnation's producer starts");
    drop(publisher);
    elsewhere.delete().await.unwrap();

    let (_identity, _endpoint, publisher) = producing(&server, name.as_str()).await;
    let waited = tokio::time::timeout(Duration::from_secs(1), publisher.first_subscriber()).await;
    assert!(
        waited.is_err(),
        "started by the old incarnation's subscriber"
    );
}

/// A producer waiting for its first subscriber whose stream is deleted behind it stops waiting,
/// and its next send reports the loss: no subscriber of that incarnation can come any more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_producer_whose_stream_is_deleted_stops_waiting_and_is_told() {
    let server = RedisServer::start();
    let name = StreamId::new("first-gone").unwrap();
    let (_identity, _endpoint, mut publisher) = producing(&server, name.as_str()).await;
    assert!(
        publisher.first_subscriber().now_or_never().is_none(),
        "no subscriber yet"
    );
    let other = server.backend().await.open(&name).await.unwrap();
    other.delete().await.unwrap();

    tokio::time::timeout(LIMIT, publisher.first_subscriber())
        .await
        .expect("the wait ends once the stream is gone");
    match publisher.send("too late").await {
        Err(PublishError::Closed(None)) => {}
        other => panic!("a send to a deleted stream: {other:?}"),
    }
}

/// Sets Redis's `maxmemory` (bytes; 0 is no limit).
fn set_maxmemory(server: &RedisServer, bytes: &str) {
    let _: () = redis::cmd("CONFIG")
        .arg(&["SET", "maxmemory", bytes])
        .query(&mut server.raw())
        .unwrap();
}

/// How many commands Redis refused for being over `maxmemory` (`INFO errorstats`).
fn refused_for_memory(server: &RedisServer) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("errorstats")
        .query(&mut server.raw())
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("errorstat_OOM:count="))
        .map_or(0, |n| n.trim().parse().unwrap())
}

/// An announcement Redis refused (here: over `maxmemory`, which a read-only resume is not) is
/// tried again while its client waits, not only when another client arrives: a serving replica
/// whose only client came while Redis refused writes would otherwise leave the producer waiting
/// for its first subscriber for good, and that client on keep-alives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_announcement_is_tried_again_while_its_client_waits() {
    let server = RedisServer::start();
    let name = StreamId::new("first-refused").unwrap();
    let (identity, _producing_endpoint, mut publisher) = producing(&server, name.as_str()).await;
    let serving_backend = server.backend().await;
    let elsewhere = serving_backend.open(&name).await.unwrap();
    let serving = SseStream::without_producer(elsewhere, identity, SseConfig::default());

    set_maxmemory(&server, "1");
    let first_chunk = next_chunk_after_priming(&serving).await;
    common::eventually(LIMIT, "the announcement refused", || async {
        refused_for_memory(&server) > 0
    })
    .await;
    // The refusal is counted where the endpoint that retries it runs, not only in Redis's stats.
    common::eventually(LIMIT, "the refused announcement counted", || async {
        serving_backend.stats().subscriber_records_failed > 0
    })
    .await;
    set_maxmemory(&server, "0");

    tokio::time::timeout(LIMIT, publisher.first_subscriber())
        .await
        .expect("the producer learns of the subscriber whose announcement was refused once");
    let id = publisher.send("hello").await.unwrap();
    let text = String::from_utf8(first_chunk.await.unwrap().to_vec()).unwrap();
    assert!(text.contains(&format!(".{id}\n")), "{text:?}");
}

/// A producer waiting for its first subscriber keeps reading whether one was recorded while Redis
/// is down, counts each read that fails (nothing else would tell an operator why it waits), and
/// starts once Redis is back and a client of another replica subscribes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_producer_counts_the_checks_that_fail_while_redis_is_down() {
    let mut server = RedisServer::start();
    let name = StreamId::new("first-while-down").unwrap();
    let stream = create(&server, name.as_str()).await;
    let identity = stream.identity();
    let producing_backend = server.backend().await;
    let producer = producing_backend
        .open(&name)
        .await
        .unwrap()
        .acquire_producer()
        .await
        .unwrap();
    let (_producing_endpoint, publisher) =
        SseStream::with_backend(producer, identity, SseConfig::default());
    let waiting = tokio::spawn(async move { publisher.first_subscriber().await });

    server.kill();
    common::eventually(LIMIT, "a failed check counted", || async {
        producing_backend.stats().subscriber_checks_failed > 0
    })
    .await;
    assert!(!waiting.is_finished(), "started with no subscriber");
    server.restart();

    let serving = SseStream::without_producer(stream, identity, SseConfig::default());
    let _first_chunk = next_chunk_after_priming(&serving).await;
    tokio::time::timeout(LIMIT, waiting)
        .await
        .expect("the producer starts once Redis is back and a client subscribed")
        .unwrap();
}

/// The field `subscribed` of the stream's meta hash (`None`: not recorded; the hash may be gone).
fn subscribed_field(server: &RedisServer, stream: &RedisStream) -> Option<String> {
    let [meta, ..] = stream.key_names();
    redis::cmd("HGET")
        .arg(meta)
        .arg("subscribed")
        .query(&mut server.raw())
        .unwrap()
}

/// An announcement through a handle of a deleted incarnation records nothing: not a stray meta
/// hash while the stream is gone, and not a subscriber of the next incarnation (whose producer
/// would then start for a client of the old one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_announcement_through_a_deleted_incarnation_records_nothing() {
    use replay_ring_sse::backend::Backend;
    let server = RedisServer::start();
    let old = create(&server, "announce-old").await;
    old.delete().await.unwrap();
    assert!(Backend::announce_subscriber(&old).await.is_err());
    let exists: bool = redis::cmd("EXISTS")
        .arg(old.key_names()[0])
        .query(&mut server.raw())
        .unwrap();
    assert!(!exists, "a meta hash was created for a stream that is gone");

    let new = create(&server, "announce-old").await;
    assert!(Backend::announce_subscriber(&old).await.is_err());
    assert_eq!(subscribed_field(&server, &new), None);
    Backend::announce_subscriber(&new).await.unwrap();
    assert_eq!(subscribed_field(&server, &new).as_deref(), Some("1"));
    tokio::time::timeout(LIMIT, Backend::subscriber_announced(&new))
        .await
        .expect("the new incarnation's own announcement is read");
}
