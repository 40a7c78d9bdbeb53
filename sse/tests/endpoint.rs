//! The axum endpoint over real HTTP (loopback TCP, a hand-written HTTP/1.1 client): the README's
//! snippet as written, strict `Last-Event-ID` handling, refusals, keep-alives, and a connection cut
//! mid-stream that loses nothing.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{get as http_get, Stream};
use replay_ring::CloseReason;
use replay_ring_sse::axum::{SseProducer, MAX_CHUNK_BYTES};
use replay_ring_sse::client::ContinuityVerifier;
use replay_ring_sse::RetentionConfig;
use tokio::net::TcpListener;

// The README's endpoint, compiled here as written: `run(listener)` below.
include!("../src/axum/snippet.rs");

#[test]
fn the_readmes_show_the_tested_snippet() {
    let snippet = include_str!("../src/axum/snippet.rs");
    for (name, readme) in [
        ("README.md", include_str!("../../README.md")),
        ("sse/README.md", include_str!("../README.md")),
    ] {
        assert!(
            readme.contains(snippet),
            "{name} must contain sse/src/axum/snippet.rs verbatim"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_snippet_serves_a_resumable_stream() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let client = async move {
        let hello = http_get(addr, "/", &[]).await;
        assert_eq!((hello.status, hello.text().as_str()), (200, "hello"));

        // Follow the stream for a few events, then hang up.
        let mut first = Stream::open(addr, "/events", &[], None).await;
        let reply = first
            .read_until(|r| r.frames().iter().filter_map(|f| f.event_seq()).count() >= 3)
            .await;
        assert_eq!(reply.status, 200);
        assert_eq!(reply.header("content-type"), Some("text/event-stream"));
        assert_eq!(
            reply.header("cache-control"),
            Some("no-store, no-transform")
        );
        assert_eq!(reply.header("x-accel-buffering"), Some("no"));
        let stream_header = reply.header("replay-stream").unwrap().to_owned();
        let frames = reply.frames();
        let priming = &frames[0];
        assert_eq!(priming.data.as_deref(), Some(""), "priming event first");
        let mut verifier = ContinuityVerifier::with_cursor(priming.seq().unwrap());
        let mut last_id = String::new();
        for f in frames.iter().filter(|f| f.event_seq().is_some()) {
            verifier.on_event(f.seq().unwrap()).unwrap();
            assert!(f.data.as_deref().unwrap().starts_with(r#"{"tick":"#));
            last_id = f.id.clone().unwrap();
        }
        drop(first);

        // Resume: the priming event repeats the cursor and the next event is exactly cursor + 1.
        let mut again = Stream::open(addr, "/events", &[("Last-Event-ID", &last_id)], None).await;
        let reply = again
            .read_until(|r| r.frames().iter().filter_map(|f| f.event_seq()).count() >= 2)
            .await;
        assert_eq!(reply.status, 200);
        assert_eq!(reply.header("replay-stream"), Some(stream_header.as_str()));
        let frames = reply.frames();
        verifier.on_reconnect();
        verifier
            .on_priming(frames[0].seq().unwrap())
            .expect("priming repeats the cursor");
        for f in frames.iter().filter(|f| f.event_seq().is_some()) {
            verifier
                .on_event(f.seq().unwrap())
                .expect("continues at cursor + 1");
        }

        // Strict parsing: a repeated header or a malformed id is a 400 with a JSON body.
        let dup = http_get(
            addr,
            "/events",
            &[("Last-Event-ID", &last_id), ("Last-Event-ID", &last_id)],
        )
        .await;
        assert_eq!(dup.status, 400);
        assert_eq!(dup.header("content-type"), Some("application/json"));
        assert!(dup.header("replay-head").is_some());
        assert!(
            dup.text()
                .starts_with(r#"{"error":"invalid_last_event_id","reason":"duplicate""#),
            "{}",
            dup.text()
        );
        let bad = http_get(addr, "/events", &[("Last-Event-ID", "events.x.1")]).await;
        assert_eq!(bad.status, 400);
        assert!(bad.text().contains(r#""reason":"malformed""#));
    };
    tokio::select! {
        result = run(listener) => panic!("the server stopped: {result:?}"),
        () = client => {}
    }
}

async fn start(config: SseConfig) -> (SocketAddr, SseStream, SseProducer) {
    let me = StreamIdentity::new(StreamId::new("events").unwrap(), Epoch::new(0xabc));
    let (stream, producer) = SseStream::new(me, config).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new().route("/events", get(events).with_state(stream.clone()));
    tokio::spawn(serve(listener, app, ServeConfig::default()));
    (addr, stream, producer)
}

#[tokio::test]
async fn a_full_reader_table_is_an_explicit_503_and_keep_alives_flow_while_idle() {
    let (addr, stream, _producer) = start(SseConfig {
        max_connections: 1,
        keep_alive: Duration::from_millis(50),
        ..SseConfig::default()
    })
    .await;
    let mut only = Stream::open(addr, "/events", &[], None).await;
    let reply = only
        .read_until(|r| r.frames().iter().any(|f| f.comment.is_some()))
        .await;
    assert_eq!(reply.status, 200);
    let frames = reply.frames();
    assert_eq!(frames[0].id.as_deref(), Some("events.abc.0"));
    assert_eq!(frames[1].comment.as_deref(), Some("keep-alive"));

    let busy = http_get(addr, "/events", &[]).await;
    assert_eq!(busy.status, 503);
    assert_eq!(busy.header("retry-after"), Some("1"));
    assert!(busy.text().contains(r#""error":"too_many_readers","#));
    assert_eq!(busy.header("replay-floor"), Some("1"));
    let stats = stream.stats();
    assert_eq!((stats.streams_opened, stats.refused_503), (1, 1));
    assert!(stats.keep_alives >= 1);
}

/// A window of 4,096 events kept replayable for a minute: everything a test publishes stays
/// replayable while it runs.
fn long_window() -> SseConfig {
    SseConfig {
        capacity: 4096,
        retention: RetentionConfig {
            resumption_window: Duration::from_secs(60),
            ..RetentionConfig::default()
        },
        ..SseConfig::default()
    }
}

/// A connection cut mid-stream, after the server read a batch it could not deliver, loses
/// nothing: the client resumes with the last id it received and gets the rest exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_write_mid_stream_loses_nothing() {
    const N: u64 = 2_000;
    let (addr, stream, mut producer) = start(long_window()).await;
    // 2,000 events of 1 KiB are published before anyone connects: the first read lends them all
    // as one batch, far more than the client's small receive buffer takes.
    let payload = Bytes::from(vec![b'x'; 1024]);
    for _ in 0..N {
        producer.send(payload.clone()).await.unwrap();
    }
    producer.close(CloseReason::Completed).await.unwrap();

    let mut first = Stream::open(
        addr,
        "/events",
        &[("Last-Event-ID", "events.abc.0")],
        Some(4096),
    )
    .await;
    let reply = first
        .read_until(|r| r.frames().iter().filter_map(|f| f.event_seq()).count() >= 10)
        .await;
    let received: Vec<u64> = reply
        .frames()
        .iter()
        .filter_map(|f| f.event_seq())
        .collect();
    // The server took the whole backlog from the ring in its first read; wait until it has also
    // encoded events this client has not received, so the reset below fails writes in flight.
    common::wait_for("the server encoded more than the client read", || {
        stream.stats().frames_written > received.len() as u64
    })
    .await;
    // Reset the connection (SO_LINGER 0) with most of the batch still unread: the server's
    // remaining writes fail.
    reset_on_close(&first.socket);
    drop(first);
    let cursor = *received.last().unwrap();
    assert!(
        cursor < N,
        "the cut came mid-stream: {cursor}, {} frames",
        received.len()
    );

    let rest = http_get(
        addr,
        "/events",
        &[("Last-Event-ID", &format!("events.abc.{cursor}"))],
    )
    .await;
    assert_eq!(rest.status, 200);
    let frames = rest.frames();
    assert_eq!(frames[0].seq(), Some(cursor), "priming repeats the cursor");
    let mut all = received.clone();
    all.extend(frames.iter().filter_map(|f| f.event_seq()));
    assert_eq!(all, (1..=N).collect::<Vec<_>>(), "every event exactly once");
    assert_eq!(frames.last().unwrap().event.as_deref(), Some("end"));
}

/// A client that comes back to a large backlog gets it in bounded chunks, in order and complete: a
/// connection never holds the whole catch-up encoded at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_catch_up_is_sent_in_bounded_chunks() {
    const N: u64 = 1_000;
    const PAYLOAD: usize = 1024;
    let (addr, _stream, mut producer) = start(long_window()).await;
    let payload = Bytes::from(vec![b'x'; PAYLOAD]);
    for _ in 0..N {
        producer.send(payload.clone()).await.unwrap();
    }
    producer.close(CloseReason::Completed).await.unwrap();

    // The whole backlog is available to the first read: about 1 MiB of encoded events.
    let mut client =
        Stream::open(addr, "/events", &[("Last-Event-ID", "events.abc.0")], None).await;
    let reply = client.read_to_end().await;
    assert_eq!(reply.status, 200);
    let ids: Vec<u64> = reply
        .frames()
        .iter()
        .filter_map(|f| f.event_seq())
        .collect();
    assert_eq!(
        ids,
        (1..=N).collect::<Vec<_>>(),
        "every event once, in order"
    );

    // One encoded event: `id: events.abc.NNNN\ndata: <payload>\n\n`.
    let one_event = PAYLOAD + 64;
    let sizes = client.chunk_sizes();
    let largest = sizes.iter().copied().max().unwrap();
    assert!(
        largest <= MAX_CHUNK_BYTES + one_event,
        "a chunk of {largest} bytes (limit {MAX_CHUNK_BYTES} + one event)"
    );
    let event_bytes = N as usize * PAYLOAD;
    assert!(
        sizes.len() > event_bytes / (MAX_CHUNK_BYTES + one_event),
        "{} chunks for {event_bytes} bytes of events",
        sizes.len()
    );
}

/// SO_LINGER 0, so that closing sends a reset instead of a graceful end.
fn reset_on_close(socket: &tokio::net::TcpStream) {
    // Deprecated in tokio only because a *non-zero* linger blocks the dropping thread; zero does
    // not block.
    #[allow(deprecated)]
    socket.set_linger(Some(Duration::ZERO)).unwrap();
}

/// Several clients follow one stream. One resumes with a recent cursor; another, disconnected, still
/// holds an older one. By default the first resume releases nothing, so the second client resumes
/// with exactly the events it missed. With `acknowledge_on_resume` (one client per stream), the same
/// sequence releases the older events and the second client gets an explicit 416, never a skip.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_clients_resume_does_not_release_what_another_client_may_resume_from() {
    for acknowledge_on_resume in [false, true] {
        let (addr, stream, mut producer) = start(SseConfig {
            acknowledge_on_resume,
            ..SseConfig::default()
        })
        .await;
        for n in 1..=10u64 {
            assert_eq!(producer.send(format!("{{\"n\":{n}}}")).await.unwrap(), n);
        }
        // Client B resumes from 8 (it had 1..=8) and hangs up.
        let mut b = Stream::open(addr, "/events", &[("Last-Event-ID", "events.abc.8")], None).await;
        let reply = b
            .read_until(|r| r.frames().iter().filter_map(|f| f.event_seq()).count() >= 2)
            .await;
        assert_eq!(reply.status, 200);
        drop(b);
        // Client A, disconnected after id 2, comes back.
        let mut a = Stream::open(addr, "/events", &[("Last-Event-ID", "events.abc.2")], None).await;
        if acknowledge_on_resume {
            let reply = a.read_until(|_| true).await;
            assert_eq!(
                reply.status, 416,
                "released by B's acknowledgement: explicit gap"
            );
            assert_eq!(stream.ring().floor(), 9);
        } else {
            let reply = a
                .read_until(|r| r.frames().iter().filter_map(|f| f.event_seq()).count() >= 8)
                .await;
            assert_eq!(reply.status, 200);
            let seqs: Vec<u64> = reply
                .frames()
                .iter()
                .filter_map(|f| f.event_seq())
                .collect();
            assert_eq!(seqs, (3..=10).collect::<Vec<_>>());
            assert_eq!(stream.ring().floor(), 1, "nothing released by a resume");
        }
    }
}

/// A `HEAD` with a cursor is answered as the `GET` would be, but changes nothing: with
/// `acknowledge_on_resume` on, only the `GET` releases what its cursor acknowledges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_with_a_cursor_acknowledges_nothing() {
    let (addr, stream, mut producer) = start(SseConfig {
        acknowledge_on_resume: true,
        ..SseConfig::default()
    })
    .await;
    for n in 1..=10u64 {
        producer.send(format!("{{\"n\":{n}}}")).await.unwrap();
    }
    let cursor = [("Last-Event-ID", "events.abc.8")];
    let head = common::head(addr, "/events", &cursor).await;
    assert_eq!(head.status, 200);
    assert_eq!(head.header("content-type"), Some("text/event-stream"));
    assert_eq!(head.header("replay-head"), Some("10"));
    assert_eq!(stream.ring().floor(), 1, "released by a HEAD");
    let query = common::head(addr, "/events?lastEventId=events.abc.8", &[]).await;
    assert_eq!(query.status, 200);
    assert_eq!(
        stream.ring().floor(),
        1,
        "released by a HEAD with a query cursor"
    );

    let mut get = Stream::open(addr, "/events", &cursor, None).await;
    let reply = get
        .read_until(|r| r.frames().iter().filter_map(|f| f.event_seq()).count() >= 2)
        .await;
    assert_eq!(reply.status, 200);
    assert_eq!(stream.ring().floor(), 9, "the GET acknowledges 1..=8");
}

/// A `HEAD` holds nothing. A connection's departure claims what came after its cursor for one
/// window, so on a stream nobody follows, a client sending nothing but `HEAD`s with an old cursor
/// would renew that claim on each visit: the window would fill and the stream end for everyone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_with_an_old_cursor_claims_nothing() {
    let window = Duration::from_secs(30);
    let (addr, stream, mut producer) = start(SseConfig {
        retention: RetentionConfig {
            resumption_window: window,
            ..RetentionConfig::default()
        },
        ..SseConfig::default()
    })
    .await;
    // The stream's creation claims everything for one window from before this instant.
    let created_by = Instant::now();
    for n in 1..=10u64 {
        producer.send(format!("{{\"n\":{n}}}")).await.unwrap();
    }
    let head = common::head(addr, "/events", &[("Last-Event-ID", "events.abc.2")]).await;
    assert_eq!(head.status, 200);
    assert_eq!(head.header("replay-head"), Some("10"));
    // As the `GET`'s: a stream has no length.
    assert_eq!(head.header("content-length"), None);
    assert_eq!(stream.stats().streams_opened, 0, "a HEAD opens no stream");
    // One window after the creation nothing is claimed any more: nobody connected, so every
    // event may go. A claim from the HEAD would keep 3..=10 another window from its visit.
    let floor = stream.with_retention(|r| {
        r.release_expired(stream.ring(), created_by + window);
        stream.ring().floor()
    });
    assert_eq!(
        floor, 11,
        "released through the head: the HEAD claimed nothing"
    );
}

/// A `HEAD` opens no reader: it is answered from the window. A reader, even for the moment of
/// the request, takes one of the table's entries, and a `GET` arriving meanwhile would be refused
/// with 503 for a table that `HEAD`s, not connections, filled. Here the one entry is taken by a
/// connection, and `HEAD`s are still answered as their `GET` would be with a free entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_takes_no_reader_entry() {
    let (addr, stream, mut producer) = start(SseConfig {
        max_connections: 1,
        ..SseConfig::default()
    })
    .await;
    for n in 1..=10u64 {
        producer.send(format!("{{\"n\":{n}}}")).await.unwrap();
    }
    stream.ring().release_through(3).unwrap();
    let mut holder = Stream::open(addr, "/events", &[], None).await;
    assert_eq!(
        holder.read_until(|r| !r.frames().is_empty()).await.status,
        200
    );
    let busy = http_get(addr, "/events", &[]).await;
    assert_eq!(busy.status, 503, "the one entry is taken");

    for (cursor, status) in [
        ("events.abc.5", 200),
        ("events.abc.10", 200),
        ("events.abc.2", 416),
        ("events.abc.11", 409),
    ] {
        let head = common::head(addr, "/events", &[("Last-Event-ID", cursor)]).await;
        assert_eq!(head.status, status, "HEAD after {cursor}");
        assert_eq!(
            head.header("replay-floor"),
            Some("4"),
            "HEAD after {cursor}"
        );
        assert_eq!(
            head.header("replay-head"),
            Some("10"),
            "HEAD after {cursor}"
        );
    }
    let live = common::head(addr, "/events", &[]).await;
    assert_eq!(live.status, 200);
    assert_eq!(
        stream.stats().streams_opened,
        1,
        "only the holder's GET opened a stream"
    );
}

/// `EventSource` polyfills that cannot set headers send the cursor as `?lastEventId=`: it resumes
/// exactly as the header does, and a second parameter is a 400. Ignoring it would stream from the
/// head: a silent gap. A request with the header is answered from the header alone: a native
/// `EventSource` opened on a URL with a query cursor keeps that URL on its reconnects and sends
/// its newer cursor in the header.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_in_the_query_string_resumes_like_the_header() {
    let (addr, _stream, mut producer) = start(long_window()).await;
    for n in 1..=6u64 {
        producer.send(format!("{{\"n\":{n}}}")).await.unwrap();
    }
    let seqs_after = |path: &'static str, headers: &'static [(&'static str, &'static str)]| async move {
        let mut s = Stream::open(addr, path, headers, None).await;
        let reply = s
            .read_until(|r| r.frames().iter().filter_map(|f| f.event_seq()).count() >= 3)
            .await;
        assert_eq!(reply.status, 200, "{path}");
        let frames = reply.frames();
        assert_eq!(
            frames[0].id.as_deref(),
            Some("events.abc.3"),
            "{path}: priming"
        );
        frames
            .iter()
            .filter_map(|f| f.event_seq())
            .collect::<Vec<u64>>()
    };
    // Percent-encoded like any query value; other parameters are left alone. Without the exact
    // name between `&`s, the name in any case, and `;` as a separator: a cursor the endpoint
    // did not see would stream from the head. With the exact name, the query is read as it
    // always was: another case, or a `;`-joined copy inside another value, is left alone.
    for path in [
        "/events?lastEventId=events.abc.3",
        "/events?x=1&lastEventId=events%2Eabc%2E3",
        "/events?lasteventid=events.abc.3",
        "/events?LASTEVENTID=events.abc.3",
        "/events?x=1;lastEventId=events.abc.3",
        "/events?x=1;lasteventid=events.abc.3;y=2",
        "/events?lastEventId=events.abc.3&LastEventID=app-data",
        "/events?x=1;lastEventId=events.abc.1&lastEventId=events.abc.3",
    ] {
        assert_eq!(seqs_after(path, &[]).await, [4, 5, 6]);
    }
    let header: &[(&str, &str)] = &[("Last-Event-ID", "events.abc.3")];
    for path in [
        "/events?lastEventId=events.abc.3",
        "/events?lastEventId=events.abc.1",
        "/events?lastEventId=events.abc.1&lastEventId=events.abc.2",
        "/events?lastEventId=garbage",
    ] {
        assert_eq!(seqs_after(path, header).await, [4, 5, 6], "{path}");
    }
    // An empty parameter is no cursor: live from the head.
    let mut live = Stream::open(addr, "/events?lastEventId=", &[], None).await;
    let reply = live.read_until(|r| !r.frames().is_empty()).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.frames()[0].id.as_deref(), Some("events.abc.6"));

    // The header decides even when it is the one that is wrong.
    let bad_header = http_get(
        addr,
        "/events?lastEventId=events.abc.2",
        &[("Last-Event-ID", "garbage")],
    )
    .await;
    assert_eq!(bad_header.status, 400);
    assert!(
        bad_header.text().contains("invalid_last_event_id"),
        "{}",
        bad_header.text()
    );
    // A parameter sent twice is ambiguous like a header sent twice, even with equal values (and,
    // without the exact name, names that differ only in case, or a `;` between them).
    for twice in [
        (
            "/events?LASTEVENTID=events.abc.3&lasteventid=events.abc.3",
            &[][..],
        ),
        (
            "/events?x=1;lastEventId=events.abc.3;lastEventId=events.abc.4",
            &[][..],
        ),
        (
            "/events?lastEventId=events.abc.3&lastEventId=events.abc.3",
            &[][..],
        ),
    ] {
        let refused = http_get(addr, twice.0, twice.1).await;
        assert_eq!(refused.status, 400, "{twice:?}");
        assert!(
            refused.text().contains(r#""reason":"duplicate""#),
            "{twice:?}: {}",
            refused.text()
        );
    }
    for (bad, offset) in [
        ("/events?lastEventId=garbage", 7),
        ("/events?lastEventId=%01", 0),
        // A control character that no header value can carry is still reported where it is.
        ("/events?lastEventId=events.abc.1%7F", 12),
        ("/events?lastEventId=ev%00ents.abc.1", 2),
    ] {
        let refused = http_get(addr, bad, &[]).await;
        assert_eq!(refused.status, 400, "{bad}");
        let text = refused.text();
        assert!(text.contains("invalid_last_event_id"), "{bad}: {text}");
        assert!(
            text.contains(&format!("malformed at offset {offset}:")),
            "{bad}: {text}"
        );
    }
}

/// An app's own handlers, which check something first and then hand the request over with
/// `respond_to_request` (the ring) or `respond_to_request_async` (any backend), read a query
/// cursor as the `events` handler does: a polyfill's reconnect resumes after its cursor instead
/// of getting the stream from the head. A `HEAD` through them acknowledges nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_handlers_read_the_query_cursor_and_answer_head_without_effect() {
    use axum::extract::State;
    use axum::http::{HeaderMap, Method, StatusCode, Uri};
    use axum::response::{IntoResponse, Response};

    async fn checked(
        State(stream): State<SseStream>,
        method: Method,
        uri: Uri,
        headers: HeaderMap,
    ) -> Response {
        if !headers.contains_key("x-token") {
            return StatusCode::UNAUTHORIZED.into_response();
        }
        stream.respond_to_request(&method, &uri, &headers)
    }
    async fn checked_async(
        State(stream): State<SseStream>,
        method: Method,
        uri: Uri,
        headers: HeaderMap,
    ) -> Response {
        stream
            .respond_to_request_async(&method, &uri, &headers)
            .await
    }

    let me = StreamIdentity::new(StreamId::new("events").unwrap(), Epoch::new(0xabc));
    let config = SseConfig {
        acknowledge_on_resume: true,
        ..long_window()
    };
    let (stream, mut producer) = SseStream::new(me, config).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new()
        .route("/checked", get(checked))
        .route("/checked-async", get(checked_async))
        .with_state(stream.clone());
    tokio::spawn(serve(listener, app, ServeConfig::default()));
    for n in 1..=6u64 {
        producer.send(format!("{{\"n\":{n}}}")).await.unwrap();
    }
    let token = [("X-Token", "t")];
    assert_eq!(http_get(addr, "/checked", &[]).await.status, 401);

    for path in ["/checked", "/checked-async"] {
        let query = format!("{path}?lastEventId=events.abc.2");
        let head = common::head(addr, &query, &token).await;
        assert_eq!(head.status, 200, "{path}");
        assert_eq!(head.header("replay-head"), Some("6"), "{path}");
        assert_eq!(stream.ring().floor(), 1, "{path}: released by a HEAD");
    }
    for (path, cursor, first) in [("/checked", 2, 3), ("/checked-async", 4, 5)] {
        let query = format!("{path}?lastEventId=events.abc.{cursor}");
        let mut s = Stream::open(addr, &query, &token, None).await;
        let reply = s
            .read_until(|r| r.frames().iter().filter_map(|f| f.event_seq()).count() >= 2)
            .await;
        assert_eq!(reply.status, 200, "{path}");
        let frames = reply.frames();
        let priming = format!("events.abc.{cursor}");
        assert_eq!(frames[0].id.as_deref(), Some(priming.as_str()), "{path}");
        let seqs: Vec<u64> = frames.iter().filter_map(|f| f.event_seq()).collect();
        assert_eq!(seqs[..2], [first, first + 1], "{path}");
        assert_eq!(
            stream.ring().floor(),
            cursor + 1,
            "{path}: the GET acknowledges"
        );
    }
}
