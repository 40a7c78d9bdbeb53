//! kill -9 of redis-server mid-stream, restart on the same data dir (AOF, appendfsync always):
//! every acknowledged append is replayable, the stream continues gap-free, and while Redis is down
//! the producer and readers get explicit errors, never a silent gap. Restarted from an older
//! snapshot instead (RDB), Redis has lost acknowledged events: the handles that saw them refuse
//! to continue on the shortened log.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::RedisServer;
use replay_ring::CloseReason;
use replay_ring_redis::{Error, ReadItem, RedisConfig};
use replay_ring_sse::StreamId;

fn payload(id: u64) -> Bytes {
    Bytes::from(format!("event-{id}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_appends_survive_kill_9_and_the_stream_continues() {
    const N: u64 = 600;
    let mut server = RedisServer::start();
    let config = RedisConfig {
        response_timeout: Duration::from_millis(500),
        connect_timeout: Duration::from_millis(500),
        block: Duration::from_millis(500),
        lease: Duration::from_secs(30),
        ..RedisConfig::default()
    };
    let backend = server.backend_with(config.clone()).await;
    let stream = backend
        .create(&StreamId::new("crash").unwrap(), 10_000)
        .await
        .unwrap();
    let acked = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));

    // A reader on its own backend (another replica), tolerant of outages: it retries `recv` on
    // Unavailable with the same cursor, and checks every id and payload.
    let reader_backend = server.backend_with(config.clone()).await;
    let reader_stream = reader_backend
        .open(&StreamId::new("crash").unwrap())
        .await
        .unwrap();
    let mut reader = reader_stream.resume(Some(0)).await.unwrap();
    let reader_errors = Arc::new(AtomicU64::new(0));
    let re = reader_errors.clone();
    let reader_task = tokio::spawn(async move {
        let mut expect = 1;
        loop {
            match reader.recv().await {
                Ok(ReadItem::Events(events)) => {
                    for (id, data) in events {
                        assert_eq!(id, expect, "reader: gap-free across the crash");
                        assert_eq!(data, payload(id));
                        expect += 1;
                    }
                }
                Ok(ReadItem::Closed(reason)) => return (expect - 1, reason),
                Err(Error::Unavailable(_)) => {
                    // Relaxed: a count read once the reader task has ended, and awaiting its
                    // handle orders every increment before that read.
                    re.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(20)).await; // retry back-off
                }
                Err(e) => panic!("reader: {e:?}"),
            }
        }
    });

    let (a, e) = (acked.clone(), errors.clone());
    let producer_stream = stream.clone();
    let producer = tokio::spawn(async move {
        let mut p = producer_stream.acquire_producer().await.unwrap();
        let mut outage_errors = Vec::new();
        while p.next_id() <= N {
            let id = p.next_id();
            // After an unknown outcome the producer keeps the event and resends it itself (same
            // id); the caller must not append it again, only resolve it.
            let result = if p.has_pending() {
                p.resolve_pending().await.map(|got| got.expect("pending"))
            } else {
                p.append(&payload(id)).await
            };
            match result {
                Ok(got) => {
                    assert_eq!(got, id);
                    // Relaxed: a progress counter read by the test driver.
                    a.store(got, Ordering::Relaxed);
                }
                Err(err @ (Error::Unknown { .. } | Error::Unavailable(_))) => {
                    // Release: pairs with the driver's Acquire load of the count, so the acks
                    // stored before this error are visible to its "none while down" check.
                    e.fetch_add(1, Ordering::Release);
                    outage_errors.push(err.to_string());
                    tokio::time::sleep(Duration::from_millis(20)).await; // retry back-off
                }
                Err(other) => panic!("producer: unexpected {other:?}"),
            }
        }
        p.close(CloseReason::Completed).await.unwrap();
        outage_errors
    });

    // Crash mid-stream.
    // Relaxed (these loads of `acked`): a progress counter polled for its own value; nothing
    // else is read through it.
    common::eventually(Duration::from_secs(30), "200 acknowledged appends", || {
        std::future::ready(acked.load(Ordering::Relaxed) >= 200)
    })
    .await;
    server.kill();
    let acked_at_crash = acked.load(Ordering::Relaxed);
    common::eventually(
        Duration::from_secs(30),
        "the producer to see the outage",
        // Acquire: pairs with the producer's Release increment (see there).
        || std::future::ready(errors.load(Ordering::Acquire) >= 3),
    )
    .await;
    assert!(
        // Relaxed: the Acquire load above made every ack stored before the errors visible.
        acked.load(Ordering::Relaxed) <= acked_at_crash + 1,
        "no append acknowledged while down"
    );
    let down_since = Instant::now();
    server.restart();
    let outage_errors = tokio::time::timeout(Duration::from_secs(60), producer)
        .await
        .unwrap()
        .unwrap();
    assert!(!outage_errors.is_empty());
    let (last, reason) = tokio::time::timeout(Duration::from_secs(60), reader_task)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(last, N);
    assert_eq!(reason, CloseReason::Completed);
    assert!(
        // Relaxed: the reader task has ended (awaited above); see its increment.
        reader_errors.load(Ordering::Relaxed) > 0,
        "the reader saw the outage explicitly"
    );
    eprintln!(
        "acked at crash: {acked_at_crash}, producer errors while down: {}, restart took {:?}",
        outage_errors.len(),
        down_since.elapsed()
    );

    // From a fresh backend: the whole log replays 1..=N with the right payloads.
    let fresh = server
        .backend()
        .await
        .open(&StreamId::new("crash").unwrap())
        .await
        .unwrap();
    let state = fresh.state().await.unwrap();
    assert_eq!((state.floor, state.head), (1, N));
    let mut r = fresh.resume(Some(0)).await.unwrap();
    let mut expect = 1;
    while let ReadItem::Events(events) = r.recv().await.unwrap() {
        for (id, data) in events {
            assert_eq!((id, data), (expect, payload(expect)));
            expect += 1;
        }
    }
    assert_eq!(expect, N + 1);
}

/// Redis restarted from a snapshot taken before the last acknowledged appends (RDB persistence;
/// a failover to a lagging replica loses events the same way). Continuing would hand ids 6..=10
/// out again with other events, so every handle that saw them reports `LogRolledBack`: the
/// producer's next append, a new lease, a state read and a resume. Deleting this incarnation and
/// creating the stream again gives it a new epoch, which old cursors see as "stream lost".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_restored_from_an_older_snapshot_is_refused_not_continued() {
    let mut server = RedisServer::start_with(&["--appendonly", "no"]);
    let backend = server.backend().await;
    let name = StreamId::new("rolled").unwrap();
    let stream = backend.create(&name, 64).await.unwrap();
    let mut producer = stream.acquire_producer().await.unwrap();
    for n in 1..=5 {
        assert_eq!(producer.append(&payload(n)).await.unwrap(), n);
    }
    let saved: String = redis::cmd("SAVE").query(&mut server.raw()).unwrap();
    assert_eq!(saved, "OK");
    for n in 6..=10 {
        assert_eq!(producer.append(&payload(n)).await.unwrap(), n);
    }
    server.restart(); // kill -9, then loads the snapshot: the log ends at 5

    let rolled_back = |r: Result<_, Error>, what: &str| match r {
        Err(Error::LogRolledBack { seen, head, .. }) => assert_eq!((seen, head), (10, 5), "{what}"),
        Err(e) => panic!("{what}: {e}"),
        Ok(_) => panic!("{what} went on on the shortened log"),
    };
    rolled_back(producer.append(&payload(11)).await.map(drop), "the append");
    rolled_back(stream.acquire_producer().await.map(drop), "a new lease");
    rolled_back(stream.state().await.map(drop), "the state");
    rolled_back(stream.resume(Some(3)).await.map(drop), "a resume");
    assert!(Error::LogRolledBack {
        stream: name,
        seen: 10,
        head: 5
    }
    .is_stream_lost());

    stream.delete().await.unwrap();
    let again = backend.create(&name, 64).await.unwrap();
    assert_ne!(again.identity().epoch, stream.identity().epoch);
    assert!(matches!(
        stream.state().await,
        Err(Error::EpochChanged { .. })
    ));
    // The old handle's delete does not touch the new incarnation.
    stream.delete().await.unwrap();
    assert_eq!(again.state().await.unwrap().head, 0);
}

/// Redis down for longer than the connection manager's own reconnection (two retries, at most
/// 500 ms apart): its last attempt has failed for good before Redis comes back, and the manager
/// would hand that old refusal to the next command on each shared connection. Once Redis
/// answers, the first resume, release and append succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_commands_after_a_long_outage_succeed_once_redis_is_back() {
    let mut server = RedisServer::start();
    let config = RedisConfig {
        response_timeout: Duration::from_millis(500),
        connect_timeout: Duration::from_millis(500),
        lease: Duration::from_secs(30),
        ..RedisConfig::default()
    };
    let backend = server.backend_with(config).await;
    let stream = backend
        .create(&StreamId::new("outage").unwrap(), 100)
        .await
        .unwrap();
    let mut producer = stream.acquire_producer().await.unwrap();
    assert_eq!(producer.append(b"1").await.unwrap(), 1);

    server.kill();
    // During the outage, explicit errors on both connections (reads, and writes).
    assert!(matches!(
        stream.resume(Some(0)).await,
        Err(Error::Unavailable(_))
    ));
    assert!(matches!(
        stream.release_through(0).await,
        Err(Error::Unavailable(_))
    ));
    // The outage outlasts the reconnection those errors started: the length of the outage is
    // what is tested here.
    tokio::time::sleep(Duration::from_secs(3)).await;
    server.restart();

    let mut reader = stream
        .resume(Some(0))
        .await
        .expect("the first read once Redis is back");
    assert_eq!(
        stream.release_through(0).await.expect("the first write").0,
        1
    );
    assert_eq!(producer.append(b"2").await.unwrap(), 2);
    match reader.recv().await.unwrap() {
        ReadItem::Events(events) => assert_eq!(events[0].0, 1),
        other => panic!("expected event 1, got {other:?}"),
    }
}
