//! Following a stream across incarnations with the library alone: `until_lost` reports the loss
//! (deleted, expired, rolled back) and nothing else, and `next_incarnation` moves every replica
//! on to one new incarnation, deleting a rolled-back log first so that its ids are never handed
//! out again.

mod common;

use std::time::Duration;

use common::RedisServer;
use replay_ring_redis::{Error, ReadItem, RedisConfig, RedisStream};
use replay_ring_sse::StreamId;

/// How often the tests' `until_lost` checks.
const CHECK: Duration = Duration::from_millis(20);
/// The most a test waits for an outcome that must come.
const LIMIT: Duration = Duration::from_secs(20);

/// Short timeouts, so that checks against a dead Redis fail fast.
fn config() -> RedisConfig {
    RedisConfig {
        response_timeout: Duration::from_millis(300),
        connect_timeout: Duration::from_millis(300),
        ..RedisConfig::default()
    }
}

async fn lost(stream: &RedisStream) -> Error {
    tokio::time::timeout(LIMIT, stream.until_lost(CHECK))
        .await
        .expect("until_lost reports the loss")
}

/// Every event of `stream` after `after`, up to its head.
async fn events_after(stream: &RedisStream, after: u64) -> Vec<(u64, bytes::Bytes)> {
    let head = stream.state().await.unwrap().head;
    let mut reader = stream.resume(Some(after)).await.unwrap();
    let mut got = Vec::new();
    while got.last().map_or(after, |(id, _)| *id) < head {
        match reader.recv().await.unwrap() {
            ReadItem::Events(events) => got.extend(events),
            other => panic!("{other:?}"),
        }
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_move_on_to_one_new_incarnation_after_a_deletion() {
    let server = RedisServer::start();
    let (one, two) = (
        server.backend_with(config()).await,
        server.backend_with(config()).await,
    );
    let name = StreamId::new("moving").unwrap();
    let first = one.create(&name, 64).await.unwrap().with_max_readers(7);
    let other_replica = two.open(&name).await.unwrap();
    let mut producer = first.acquire_producer().await.unwrap();
    for n in 1..=3u64 {
        producer
            .append(format!("old-{n}").as_bytes())
            .await
            .unwrap();
    }

    let watching = tokio::spawn({
        let first = first.clone();
        async move { lost(&first).await }
    });
    // An operator (or the stream's TTL) removes it.
    other_replica.delete().await.unwrap();
    let why = watching.await.unwrap();
    assert!(matches!(why, Error::NotFound { .. }), "{why:?}");

    let next = first.next_incarnation(&why).await.unwrap();
    let also = other_replica.next_incarnation(&why).await.unwrap();
    let (old, new) = (first.identity(), next.identity());
    assert_eq!(new.stream, old.stream);
    assert_ne!(new.epoch, old.epoch, "a new incarnation has a new epoch");
    assert_eq!(
        also.identity(),
        new,
        "both replicas converge on one incarnation"
    );
    assert_eq!(next.window_capacity(), 64, "the capacity carries over");
    assert_eq!(next.max_readers(), 7, "so does the reader limit");

    // The new incarnation starts at id 1 and serves only its own events.
    let mut producer = next.acquire_producer().await.unwrap();
    assert_eq!(producer.append(b"new-1").await.unwrap(), 1);
    assert_eq!(events_after(&also, 0).await, vec![(1, "new-1".into())]);
    // The old handle's clients are told the stream is lost.
    let old_resume = first.resume(Some(1)).await.map(drop).unwrap_err();
    assert!(old_resume.is_stream_lost(), "{old_resume:?}");
    // And a handle of the old incarnation watching on sees the new epoch as a loss at once.
    let stale = lost(&other_replica).await;
    assert!(matches!(stale, Error::EpochChanged { .. }), "{stale:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_outage_is_not_a_loss() {
    let mut server = RedisServer::start(); // AOF, appendfsync always: the stream survives
    let backend = server.backend_with(config()).await;
    let name = StreamId::new("outage").unwrap();
    let stream = backend.create(&name, 16).await.unwrap();
    let mut producer = stream.acquire_producer().await.unwrap();
    producer.append(b"kept").await.unwrap();

    let mut watching = Box::pin(stream.until_lost(CHECK));
    server.kill();
    // Redis is down for many checks (each fails as unreachable): none ends the wait.
    let outage = CHECK * 50;
    let early = tokio::time::timeout(outage, &mut watching).await;
    assert!(early.is_err(), "an outage ended until_lost: {early:?}");
    server.restart();
    // Back up with the stream intact: still not lost, until it is deleted.
    let mut raw = server.raw();
    let [meta, ..] = stream.key_names();
    let exists: u64 = redis::cmd("EXISTS").arg(meta).query(&mut raw).unwrap();
    assert_eq!(exists, 1);
    let other = server
        .backend_with(config())
        .await
        .open(&name)
        .await
        .unwrap();
    assert_eq!(other.state().await.unwrap().head, 1);
    other.delete().await.unwrap();
    let why = tokio::time::timeout(LIMIT, watching).await.unwrap();
    assert!(matches!(why, Error::NotFound { .. }), "{why:?}");
}

/// Redis restarted from a snapshot older than the last appends: the handle that saw them reports
/// `LogRolledBack`, and the next incarnation is a new epoch on an empty log, never a continuation
/// of the shortened one (which would hand ids 4 and 5 out again with other events).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolled_back_log_is_deleted_before_the_next_incarnation() {
    let mut server = RedisServer::start_with(&["--appendonly", "no"]);
    let backend = server.backend_with(config()).await;
    let name = StreamId::new("rolled").unwrap();
    let stream = backend.create(&name, 64).await.unwrap();
    let mut producer = stream.acquire_producer().await.unwrap();
    for n in 1..=3u64 {
        producer.append(format!("a-{n}").as_bytes()).await.unwrap();
    }
    let saved: String = redis::cmd("SAVE").query(&mut server.raw()).unwrap();
    assert_eq!(saved, "OK");
    for n in 4..=5u64 {
        producer.append(format!("a-{n}").as_bytes()).await.unwrap();
    }
    assert_eq!(stream.state().await.unwrap().head, 5);
    server.restart(); // kill -9, then loads the snapshot: the log ends at 3

    let why = lost(&stream).await;
    assert!(
        matches!(
            why,
            Error::LogRolledBack {
                seen: 5,
                head: 3,
                ..
            }
        ),
        "{why:?}"
    );
    let next = stream.next_incarnation(&why).await.unwrap();
    assert_ne!(next.identity().epoch, stream.identity().epoch);
    let state = next.state().await.unwrap();
    assert_eq!((state.floor, state.head), (1, 0), "an empty log");
    // Another replica, which never saw ids 4 and 5, opens the new incarnation, not the old log.
    let elsewhere = server
        .backend_with(config())
        .await
        .open(&name)
        .await
        .unwrap();
    assert_eq!(elsewhere.identity(), next.identity());
    // Asked again (a second replica that saw the rollback too), nothing more is deleted.
    let again = stream.next_incarnation(&why).await.unwrap();
    assert_eq!(again.identity(), next.identity());
}

/// Only a rollback of this very stream deletes it: the step a process that opens (rather than
/// creates) the next incarnation takes.
#[tokio::test]
async fn only_a_rollback_of_this_stream_deletes_it() {
    let server = RedisServer::start();
    let backend = server.backend().await;
    let name = StreamId::new("kept").unwrap();
    let stream = backend.create(&name, 4).await.unwrap();
    let other = StreamId::new("other").unwrap();
    let rolled_back = |stream| Error::LogRolledBack {
        stream,
        seen: 5,
        head: 3,
    };
    for not_ours in [Error::NotFound { stream: name }, rolled_back(other)] {
        stream.delete_if_rolled_back(&not_ours).await.unwrap();
        assert_eq!(stream.state().await.unwrap().head, 0, "{not_ours:?}");
    }
    stream
        .delete_if_rolled_back(&rolled_back(name))
        .await
        .unwrap();
    let gone = backend.open(&name).await.map(drop).unwrap_err();
    assert!(matches!(gone, Error::NotFound { .. }), "{gone:?}");
}

#[tokio::test]
#[should_panic(expected = "check_every is zero")]
async fn a_zero_check_interval_is_refused() {
    let server = RedisServer::start();
    let backend = server.backend().await;
    let stream = backend
        .create(&StreamId::new("zero").unwrap(), 4)
        .await
        .unwrap();
    let _ = stream.until_lost(Duration::ZERO).await;
}
