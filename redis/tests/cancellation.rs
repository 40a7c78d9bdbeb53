//! Cancelled calls against a real redis-server: an append cancelled while an earlier one is being
//! resent is still sent, once, and so is an append whose earlier event's reply is lost again; a
//! `recv` or an `append_wait` cancelled during its blocking read leaves nothing that makes the
//! next call fail.
//!
//! The SSE writer cancels a reader's `recv` whenever it sends a keep-alive, and `select!` loops and
//! timeouts cancel the others: each of these is what a server does all day.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::RedisServer;
use replay_ring_redis::{Error, ReadItem, RedisConfig, RedisProducer, RedisStream, MAX_ID};
use replay_ring_sse::StreamId;
use tokio::time::timeout;

const LIMIT: Duration = Duration::from_secs(10);

/// Short blocking reads and a short response timeout, so the cases below take about a second.
fn quick() -> RedisConfig {
    RedisConfig {
        block: Duration::from_millis(500),
        response_timeout: Duration::from_millis(200),
        ..RedisConfig::default()
    }
}

/// Every event of the stream, from id 1 to its head, as a reader gets them.
async fn all_events(stream: &RedisStream) -> Vec<(u64, Bytes)> {
    let head = stream.state().await.unwrap().head;
    let mut reader = stream.resume(Some(0)).await.unwrap();
    let mut all = Vec::new();
    while reader.last_id() < head {
        match timeout(LIMIT, reader.recv()).await.unwrap().unwrap() {
            ReadItem::Events(batch) => all.extend(batch),
            closed => panic!("{closed:?} before the head"),
        }
    }
    all
}

/// Redis holds writes back for two seconds (as a primary does during a failover): replies to
/// appends do not come within the response timeout, so their outcome is unknown.
fn hold_writes(server: &RedisServer) {
    let _: () = redis::cmd("CLIENT")
        .arg(&["PAUSE", "2000", "WRITE"])
        .query(&mut server.raw())
        .unwrap();
}

/// Resends the pending events until Redis takes writes again; the last one's id.
async fn resolve_once_writes_resume(p: &mut RedisProducer) -> Option<u64> {
    let deadline = std::time::Instant::now() + LIMIT;
    loop {
        match p.resolve_pending().await {
            Err(Error::Unknown { .. }) if std::time::Instant::now() < deadline => continue,
            other => break other.unwrap(),
        }
    }
}

/// A stream whose producer appended "first" while Redis held writes back: the reply did not
/// come in time, so its outcome is unknown (it stays pending) and writes are still held.
async fn first_append_unanswered(server: &RedisServer, name: &str) -> (RedisStream, RedisProducer) {
    let backend = server.backend_with(quick()).await;
    let stream = backend
        .create(&StreamId::new(name).unwrap(), 64)
        .await
        .unwrap();
    let mut p = stream.acquire_producer().await.unwrap();
    hold_writes(server);
    match p.append(b"first").await {
        Err(Error::Unknown { id: 1, .. }) => {}
        other => panic!("expected Unknown for id 1, got {other:?}"),
    }
    (stream, p)
}

fn first_second_third() -> Vec<(u64, Bytes)> {
    vec![
        (1, Bytes::from("first")),
        (2, Bytes::from("second")),
        (3, Bytes::from("third")),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_cancelled_while_an_earlier_one_is_resent_is_still_sent_once() {
    let server = RedisServer::start();
    let (stream, mut p) = first_append_unanswered(&server, "cancel-append").await;
    // The next append resends the first (still held back) and is cancelled meanwhile.
    let cancelled = timeout(Duration::from_millis(50), p.append(b"second")).await;
    assert!(cancelled.is_err(), "{cancelled:?}");
    assert!(p.has_pending());
    // Once Redis takes writes again, both are stored, in order, once each.
    let last = resolve_once_writes_resume(&mut p).await;
    assert_eq!(last, Some(2));
    assert!(!p.has_pending());
    assert_eq!(p.append(b"third").await.unwrap(), 3);
    assert_eq!(all_events(&stream).await, first_second_third());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_behind_a_reply_lost_again_stays_queued_under_its_own_id() {
    let server = RedisServer::start();
    let (stream, mut p) = first_append_unanswered(&server, "lost-again").await;
    assert_eq!(p.next_id(), 1, "the pending event keeps id 1");
    // The resend of "first" is lost too: "second" was never sent, but `Unknown` tells the caller
    // it is kept (do not append it again), so it must be, under the id after "first".
    match p.append(b"second").await {
        Err(Error::Unknown { id: 2, .. }) => {}
        other => panic!("expected Unknown for id 2, got {other:?}"),
    }
    assert_eq!(p.next_id(), 1, "both are pending");
    let last = resolve_once_writes_resume(&mut p).await;
    assert_eq!(last, Some(2));
    assert_eq!(p.append(b"third").await.unwrap(), 3);
    assert_eq!(all_events(&stream).await, first_second_third());
}

/// At the last id, an append behind a pending event that has taken it is refused at once, as
/// any append past the last id is: it is not queued, and no error promises it an id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_past_the_last_id_behind_a_pending_event_is_refused_not_queued() {
    let server = RedisServer::start();
    let backend = server.backend_with(quick()).await;
    let stream = backend
        .create(&StreamId::new("top").unwrap(), 8)
        .await
        .unwrap();
    server.move_head_to(&stream, MAX_ID - 1);
    let mut p = stream.acquire_producer().await.unwrap();
    hold_writes(&server);
    match p.append(b"last").await {
        Err(Error::Unknown { id, .. }) => assert_eq!(id, MAX_ID),
        other => panic!("expected Unknown for the last id, got {other:?}"),
    }
    assert!(matches!(p.append(b"over").await, Err(Error::IdsExhausted)));
    assert_eq!(p.next_id(), MAX_ID, "only the last one is pending");
    let last = resolve_once_writes_resume(&mut p).await;
    assert_eq!(last, Some(MAX_ID));
    assert!(!p.has_pending());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recv_cancelled_mid_wait_leaves_the_next_one_waiting_not_failing() {
    let server = RedisServer::start();
    let config = quick();
    let backend = server.backend_with(config.clone()).await;
    let stream = backend
        .create(&StreamId::new("cancel-recv").unwrap(), 64)
        .await
        .unwrap();
    let mut p = stream.acquire_producer().await.unwrap();
    p.append(b"1").await.unwrap();
    let mut reader = stream.resume(Some(1)).await.unwrap();
    // Caught up: the read blocks in XREAD, and its caller gives up (a keep-alive is due).
    assert!(timeout(Duration::from_millis(50), reader.recv())
        .await
        .is_err());
    // An idle stretch longer than a block plus the response timeout: the next recv waits through
    // it. (Sent behind the abandoned XREAD, it would wait for both and time out.)
    let idle = timeout(config.block * 3, reader.recv()).await;
    assert!(idle.is_err(), "the idle recv returned: {idle:?}");
    p.append(b"2").await.unwrap();
    let item = timeout(LIMIT, reader.recv()).await.unwrap().unwrap();
    assert_eq!(item, ReadItem::Events(vec![(2, Bytes::from("2"))]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_wait_cancelled_mid_wait_leaves_the_next_one_waiting_not_failing() {
    let server = RedisServer::start();
    let config = quick();
    let backend = server.backend_with(config.clone()).await;
    let stream = backend
        .create(&StreamId::new("cancel-wait").unwrap(), 1)
        .await
        .unwrap();
    let mut p = stream.acquire_producer().await.unwrap();
    assert_eq!(p.append(b"1").await.unwrap(), 1);
    // The window is full: the wait blocks on ctl, and its caller gives up.
    let gave_up = timeout(
        Duration::from_millis(300),
        p.append_wait(b"2", Duration::MAX),
    )
    .await;
    assert!(gave_up.is_err(), "{gave_up:?}");
    // The next wait lasts through an idle stretch longer than a block plus the response timeout,
    // without an error, and ends with the release.
    let mut waiting = tokio::spawn(async move { p.append_wait(b"2", Duration::MAX).await });
    let idle = timeout(config.block * 3, &mut waiting).await;
    assert!(
        idle.is_err(),
        "the wait ended while the window was full: {idle:?}"
    );
    stream.release_through(1).await.unwrap();
    let id = timeout(LIMIT, waiting).await.unwrap().unwrap();
    assert_eq!(id.unwrap(), 2);
}

/// The SSE writer cancels its tail's `recv` each time a keep-alive is due: an idle connection over
/// Redis goes on through any number of them, and then delivers the next event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_sse_connection_on_redis_outlives_its_keep_alives() {
    use futures_util::StreamExt;
    use http::{HeaderMap, StatusCode};
    use replay_ring_sse::axum::{SseConfig, SseStream};

    let server = RedisServer::start();
    let config = quick();
    let backend = server.backend_with(config.clone()).await;
    let stream = backend
        .create(&StreamId::new("cancel-sse").unwrap(), 64)
        .await
        .unwrap();
    let identity = stream.identity();
    let producer = stream.acquire_producer().await.unwrap();
    // A keep-alive just after a blocking read began: the read cancelled for it still has most of
    // its block to go, longer than the response timeout.
    let sse_config = SseConfig {
        keep_alive: config.block * 2 + Duration::from_millis(50),
        ..SseConfig::default()
    };
    let (sse, mut publisher) = SseStream::with_backend(producer, identity, sse_config);
    let response = sse.respond_async(&HeaderMap::new()).await;
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body().into_data_stream();
    let priming = timeout(LIMIT, body.next()).await.unwrap();
    assert!(priming.is_some(), "a priming event");
    // Idle for two keep-alives and a read after each: keep-alive comments only, no error frame.
    let idle_until = tokio::time::Instant::now() + sse_config.keep_alive * 3;
    let mut keep_alives = 0;
    while let Ok(chunk) = tokio::time::timeout_at(idle_until, body.next()).await {
        let text = String::from_utf8(chunk.unwrap().unwrap().to_vec()).unwrap();
        assert!(
            text.starts_with(':'),
            "only keep-alives while idle: {text:?}"
        );
        keep_alives += 1;
    }
    assert!(keep_alives >= 2, "{keep_alives} keep-alives");
    let id = publisher.send("after the wait").await.unwrap();
    let text = loop {
        let chunk = timeout(LIMIT, body.next()).await.unwrap().unwrap().unwrap();
        let text = String::from_utf8(chunk.to_vec()).unwrap();
        if !text.starts_with(':') {
            break text;
        }
    };
    assert!(text.contains(&format!(".{id}\n")), "{text:?}");
    assert!(text.contains("data: after the wait\n"), "{text:?}");
}
