//! The stream contract on a real redis-server: every row of the resume table, refused appends burn
//! no id, release/floor, close, and a concurrent producer + readers + releaser run.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::RedisServer;
use replay_ring::CloseReason;
use replay_ring_redis::{Error, ReadItem, RedisConfig, RedisReader, RedisStream};
use replay_ring_sse::StreamId;

fn sid(name: &str) -> StreamId {
    StreamId::new(name).unwrap()
}

fn payload(id: u64) -> Vec<u8> {
    format!("event-{id}").into_bytes()
}

/// Reads events until `through` is delivered; asserts gap-free order and payloads.
async fn read_through(reader: &mut RedisReader, through: u64) -> Vec<u64> {
    let mut ids = Vec::new();
    while reader.last_id() < through {
        match tokio::time::timeout(Duration::from_secs(10), reader.recv())
            .await
            .expect("reader stalled")
            .expect("read")
        {
            ReadItem::Events(events) => {
                for (id, data) in events {
                    assert_eq!(data, Bytes::from(payload(id)), "payload of {id}");
                    ids.push(id);
                }
            }
            ReadItem::Closed(r) => panic!("closed early: {r}"),
        }
    }
    ids
}

async fn stream_with(server: &RedisServer, name: &str, capacity: u64, events: u64) -> RedisStream {
    let backend = server.backend().await;
    let stream = backend.create(&sid(name), capacity).await.unwrap();
    let mut producer = stream.acquire_producer().await.unwrap();
    for id in 1..=events {
        assert_eq!(producer.append(&payload(id)).await.unwrap(), id);
    }
    producer.release_lease().await.unwrap();
    stream
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_table_every_row() {
    let server = RedisServer::start();
    let stream = stream_with(&server, "table", 64, 10).await;
    stream.release_through(3).await.unwrap(); // retained 4..=10
    let state = stream.state().await.unwrap();
    assert_eq!((state.floor, state.head), (4, 10));

    // floor - 1 <= x < head: exactly x+1..=head.
    for x in 3..10 {
        let mut r = stream.resume(Some(x)).await.unwrap();
        assert_eq!(
            read_through(&mut r, 10).await,
            (x + 1..=10).collect::<Vec<_>>(),
            "x={x}"
        );
    }
    // x == head: no-op, the reader then waits for the next event.
    let mut at_head = stream.resume(Some(10)).await.unwrap();
    assert_eq!(at_head.last_id(), 10);
    assert!(
        tokio::time::timeout(Duration::from_millis(200), at_head.recv())
            .await
            .is_err()
    );
    // No cursor: live from the head.
    let live = stream.resume(None).await.unwrap();
    assert_eq!(live.last_id(), 10);
    // x < floor - 1: gap.
    match stream.resume(Some(2)).await {
        Err(Error::Gap {
            requested: 2,
            floor: 4,
            head: 10,
        }) => {}
        other => panic!("expected Gap, got {other:?}"),
    }
    match stream.resume(Some(0)).await {
        Err(Error::Gap {
            requested: 0,
            floor: 4,
            head: 10,
        }) => {}
        other => panic!("expected Gap, got {other:?}"),
    }
    // x > head: mismatch.
    for x in [11, u64::MAX] {
        match stream.resume(Some(x)).await {
            Err(Error::AheadOfHead {
                requested,
                head: 10,
            }) => assert_eq!(requested, x),
            other => panic!("expected AheadOfHead, got {other:?}"),
        }
    }
    // Stream deleted: lost. Recreated: the old handle's epoch is refused.
    stream.delete().await.unwrap();
    assert!(matches!(
        stream.resume(Some(5)).await,
        Err(Error::NotFound { .. })
    ));
    let again = server
        .backend()
        .await
        .create(&sid("table"), 64)
        .await
        .unwrap();
    assert_ne!(
        again.identity().epoch,
        stream.identity().epoch,
        "a new incarnation gets a new epoch"
    );
    match stream.resume(Some(0)).await {
        Err(Error::EpochChanged {
            expected,
            current: Some(current),
            ..
        }) => {
            assert_eq!(expected, stream.identity().epoch);
            assert_eq!(current, again.identity().epoch);
        }
        other => panic!("expected EpochChanged, got {other:?}"),
    }
    // The new incarnation starts at 1 again.
    let mut p = again.acquire_producer().await.unwrap();
    assert_eq!(p.append(b"x").await.unwrap(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_append_burns_no_id() {
    let server = RedisServer::start();
    let backend = server.backend().await;
    let stream = backend.create(&sid("full"), 4).await.unwrap();
    let mut p = stream.acquire_producer().await.unwrap();
    for id in 1..=4 {
        assert_eq!(p.append(&payload(id)).await.unwrap(), id);
    }
    for _ in 0..3 {
        match p.append(b"refused").await {
            Err(Error::Full {
                floor: 1,
                head: 4,
                capacity: 4,
            }) => {}
            other => panic!("expected Full, got {other:?}"),
        }
    }
    assert_eq!(stream.state().await.unwrap().head, 4);
    stream.release_through(2).await.unwrap();
    assert_eq!(
        p.append(&payload(5)).await.unwrap(),
        5,
        "the refusals consumed no id"
    );
    assert_eq!(p.append(&payload(6)).await.unwrap(), 6);
    assert!(matches!(
        p.append(b"x").await,
        Err(Error::Full {
            floor: 3,
            head: 6,
            ..
        })
    ));
    let mut r = stream.resume(Some(2)).await.unwrap();
    assert_eq!(read_through(&mut r, 6).await, vec![3, 4, 5, 6]);
    assert_eq!(backend.stats().refused_full, 4);
    // The log holds no trace of the refused payloads.
    let mut raw = server.raw();
    let len: u64 = redis::cmd("XLEN")
        .arg(stream.key_names()[1])
        .query(&mut raw)
        .unwrap();
    assert_eq!(len, 4);
}

/// Redis drops the connection under a bulk string longer than its `proto-max-bulk-len` (here
/// 1 MiB, its minimum): with `max_payload_bytes` set to that limit, a
/// payload at it is stored, alone or in a batch whose total is past it, and a longer one, alone
/// or in a batch, is refused before it is sent, consuming no id and leaving nothing pending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_past_max_payload_bytes_is_refused_before_it_is_sent() {
    const LIMIT: usize = 1024 * 1024;
    let server = RedisServer::start_with(&["--proto-max-bulk-len", "1mb"]);
    let backend = server
        .backend_with(RedisConfig {
            max_payload_bytes: LIMIT,
            ..RedisConfig::default()
        })
        .await;
    let stream = backend.create(&sid("sizes"), 8).await.unwrap();
    let mut p = stream.acquire_producer().await.unwrap();
    match p.append(&vec![b'x'; LIMIT + 1]).await {
        Err(e @ Error::TooLarge { bytes, limit }) => {
            assert_eq!((bytes, limit), (LIMIT as u64 + 1, LIMIT as u64));
            assert!(!e.is_transient(), "{e}");
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
    let one_too_long = [vec![b'y'; 10], vec![b'z'; LIMIT + 1]];
    assert!(matches!(
        p.append_batch(&one_too_long).await,
        Err(Error::TooLarge { .. })
    ));
    assert!(!p.has_pending());
    assert_eq!(p.append(&vec![b'x'; LIMIT]).await.unwrap(), 1);
    let two_at_the_limit = [vec![b'y'; LIMIT], vec![b'z'; LIMIT]];
    assert_eq!(p.append_batch(&two_at_the_limit).await.unwrap(), 2..=3);
    let mut r = stream.resume(Some(0)).await.unwrap();
    let mut got = Vec::new();
    while got.len() < 3 {
        match r.recv().await.unwrap() {
            ReadItem::Events(events) => got.extend(events.into_iter().map(|(id, p)| (id, p.len()))),
            ReadItem::Closed(reason) => panic!("closed early: {reason}"),
        }
    }
    assert_eq!(got, vec![(1, LIMIT), (2, LIMIT), (3, LIMIT)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_moves_the_floor_monotonically() {
    let server = RedisServer::start();
    let stream = stream_with(&server, "release", 16, 5).await;
    assert_eq!(stream.release_through(0).await.unwrap(), (1, 5));
    assert_eq!(stream.release_through(2).await.unwrap(), (3, 5));
    assert_eq!(
        stream.release_through(1).await.unwrap(),
        (3, 5),
        "never moves back"
    );
    assert_eq!(
        stream.release_through(2).await.unwrap(),
        (3, 5),
        "idempotent"
    );
    match stream.release_through(6).await {
        Err(Error::AheadOfHead {
            requested: 6,
            head: 5,
        }) => {}
        other => panic!("expected AheadOfHead, got {other:?}"),
    }
    assert_eq!(
        stream.release_through(5).await.unwrap(),
        (6, 5),
        "empty window: floor = head + 1"
    );
    // Empty window: resume at the head is a no-op, below is a gap.
    assert_eq!(stream.resume(Some(5)).await.unwrap().last_id(), 5);
    assert!(matches!(
        stream.resume(Some(4)).await,
        Err(Error::Gap { floor: 6, .. })
    ));
    // The ids continue after a full release (the log's counter survives the trim).
    let mut p = stream.acquire_producer().await.unwrap();
    assert_eq!(p.append(&payload(6)).await.unwrap(), 6);
    let mut raw = server.raw();
    let len: u64 = redis::cmd("XLEN")
        .arg(stream.key_names()[1])
        .query(&mut raw)
        .unwrap();
    assert_eq!(len, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_get_every_event_then_the_close_reason() {
    let server = RedisServer::start();
    let backend = server.backend().await;
    let stream = backend.create(&sid("close"), 16).await.unwrap();
    let mut p = stream.acquire_producer().await.unwrap();
    let mut early = stream.resume(None).await.unwrap();
    let waiting = tokio::spawn(async move {
        let mut got = Vec::new();
        loop {
            match early.recv().await.unwrap() {
                ReadItem::Events(e) => got.extend(e.into_iter().map(|(id, _)| id)),
                ReadItem::Closed(reason) => return (got, reason),
            }
        }
    });
    for id in 1..=3 {
        p.append(&payload(id)).await.unwrap();
    }
    p.close(CloseReason::error("tool crashed")).await.unwrap();
    let (got, reason) = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got, vec![1, 2, 3]);
    assert_eq!(reason, CloseReason::error("tool crashed"));

    // A late resume replays, then sees the reason; at the head it sees the reason at once.
    let mut late = stream.resume(Some(1)).await.unwrap();
    assert_eq!(read_through(&mut late, 3).await, vec![2, 3]);
    assert_eq!(
        late.recv().await.unwrap(),
        ReadItem::Closed(CloseReason::error("tool crashed"))
    );
    let mut at_head = stream.resume(Some(3)).await.unwrap();
    assert_eq!(
        at_head.recv().await.unwrap(),
        ReadItem::Closed(CloseReason::error("tool crashed"))
    );
    // Nothing can be appended after close, and a new producer is told why.
    match stream.acquire_producer().await {
        Err(Error::Closed(r)) => assert_eq!(r, CloseReason::error("tool crashed")),
        other => panic!("expected Closed, got {other:?}"),
    }
    assert_eq!(
        stream.state().await.unwrap().closed,
        Some(CloseReason::error("tool crashed"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_reader_is_woken_by_an_append_in_another_connection() {
    let server = RedisServer::start();
    let stream = stream_with(&server, "wake", 16, 0).await;
    let mut reader = stream.resume(Some(0)).await.unwrap();
    let task = tokio::spawn(async move { reader.recv().await });
    // Give the reader time to block, observed through the server's own client list.
    let mut raw = server.raw();
    common::eventually(Duration::from_secs(10), "reader blocked in XREAD", || {
        let clients: String = redis::cmd("CLIENT").arg("LIST").query(&mut raw).unwrap();
        std::future::ready(clients.contains("cmd=xread"))
    })
    .await;
    let mut p = stream.acquire_producer().await.unwrap();
    p.append(&payload(1)).await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(got, ReadItem::Events(vec![(1, Bytes::from(payload(1)))]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn append_wait_is_woken_by_a_release() {
    let server = RedisServer::start();
    let stream = stream_with(&server, "bp", 2, 2).await;
    let mut p = stream.acquire_producer().await.unwrap();
    let releaser = stream.clone();
    let mut raw = server.raw();
    let task = tokio::spawn(async move {
        let r = p.append_wait(&payload(3), Duration::from_secs(20)).await;
        (p, r)
    });
    common::eventually(Duration::from_secs(10), "producer blocked on ctl", || {
        let clients: String = redis::cmd("CLIENT").arg("LIST").query(&mut raw).unwrap();
        std::future::ready(clients.contains("cmd=xread"))
    })
    .await;
    assert!(!task.is_finished());
    releaser.release_through(1).await.unwrap();
    let (mut p, id) = tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(id.unwrap(), 3);
    // With no release it gives up at the deadline with Full, having consumed no id.
    match p.append_wait(b"x", Duration::from_millis(300)).await {
        Err(Error::Full {
            floor: 2,
            head: 3,
            capacity: 2,
        }) => {}
        other => panic!("expected Full, got {other:?}"),
    }
    assert_eq!(p.next_id(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_producer_readers_and_releaser() {
    const N: u64 = 2_000;
    const READERS: usize = 3;
    let server = RedisServer::start();
    let config = RedisConfig {
        read_batch: 50,
        ..RedisConfig::default()
    };
    let backend = server.backend_with(config).await;
    let stream = backend.create(&sid("concurrent"), 32).await.unwrap();
    let cursors: Arc<Vec<AtomicU64>> = Arc::new((0..READERS).map(|_| AtomicU64::new(0)).collect());
    let progress = Arc::new(tokio::sync::Notify::new());

    let mut readers = Vec::new();
    for r in 0..READERS {
        let mut reader = stream.resume(Some(0)).await.unwrap();
        let cursors = cursors.clone();
        let progress = progress.clone();
        readers.push(tokio::spawn(async move {
            let mut expect = 1;
            loop {
                match reader.recv().await.unwrap() {
                    ReadItem::Events(events) => {
                        for (id, data) in events {
                            assert_eq!(id, expect, "reader {r}: ids in order, none skipped");
                            assert_eq!(
                                data,
                                Bytes::from(payload(id)),
                                "reader {r}: payload of {id}"
                            );
                            expect += 1;
                        }
                        // Relaxed: the releaser only needs some recent value; Notify orders the wake.
                        cursors[r].store(reader.last_id(), Ordering::Relaxed);
                        progress.notify_one();
                    }
                    ReadItem::Closed(reason) => return (expect - 1, reason),
                }
            }
        }));
    }

    let release_stream = stream.clone();
    let release_cursors = cursors.clone();
    let release_progress = progress.clone();
    let releaser = tokio::spawn(async move {
        let mut released = 0;
        while released < N {
            release_progress.notified().await;
            // Relaxed: see the readers' store; a stale cursor would only release less.
            let min = release_cursors
                .iter()
                .map(|c| c.load(Ordering::Relaxed))
                .min()
                .unwrap();
            if min > released {
                let (floor, _) = release_stream.release_through(min).await.unwrap();
                assert_eq!(floor, min + 1);
                released = min;
            }
        }
    });

    let mut producer = stream.acquire_producer().await.unwrap();
    for id in 1..=N {
        let got = producer
            .append_wait(&payload(id), Duration::from_secs(30))
            .await
            .unwrap();
        assert_eq!(got, id);
    }
    producer.close(CloseReason::Completed).await.unwrap();
    for reader in readers {
        let (last, reason) = tokio::time::timeout(Duration::from_secs(30), reader)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(last, N);
        assert_eq!(reason, CloseReason::Completed);
    }
    tokio::time::timeout(Duration::from_secs(10), releaser)
        .await
        .unwrap()
        .unwrap();
    let state = stream.state().await.unwrap();
    assert_eq!((state.floor, state.head), (N + 1, N));
    assert_eq!(backend.stats().appended, N);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_are_all_or_nothing() {
    let server = RedisServer::start();
    let backend = server.backend().await;
    let stream = backend.create(&sid("batch"), 8).await.unwrap();
    let mut p = stream.acquire_producer().await.unwrap();
    let batch: Vec<Vec<u8>> = (1..=5).map(payload).collect();
    assert_eq!(p.append_batch(&batch).await.unwrap(), 1..=5);
    // 3 more fit, 4 do not: the whole batch is refused, no id consumed.
    let four: Vec<Vec<u8>> = (6..=9).map(payload).collect();
    match p.append_batch(&four).await {
        Err(Error::Full {
            floor: 1,
            head: 5,
            capacity: 8,
        }) => {}
        other => panic!("expected Full, got {other:?}"),
    }
    assert_eq!(stream.state().await.unwrap().head, 5);
    assert_eq!(p.append_batch(&four[..3]).await.unwrap(), 6..=8);
    assert!(matches!(
        p.append_batch::<&[u8]>(&[]).await,
        Err(Error::InvalidArgument(_))
    ));
    let mut r = stream.resume(Some(0)).await.unwrap();
    assert_eq!(read_through(&mut r, 8).await, (1..=8).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_are_exact_up_to_2_pow_53_minus_1_and_then_exhausted() {
    let server = RedisServer::start();
    let backend = server.backend().await;
    let stream = backend.create(&sid("top"), 8).await.unwrap();
    // Move the stream to just below the limit, as if 2^53 - 2 events had come and gone.
    let below = replay_ring_redis::MAX_ID - 1;
    server.move_head_to(&stream, below);
    let mut p = stream.acquire_producer().await.unwrap();
    assert_eq!(p.append(b"last").await.unwrap(), replay_ring_redis::MAX_ID);
    assert!(matches!(p.append(b"over").await, Err(Error::IdsExhausted)));
    let mut r = stream.resume(Some(below)).await.unwrap();
    assert_eq!(
        r.recv().await.unwrap(),
        ReadItem::Events(vec![(
            replay_ring_redis::MAX_ID,
            Bytes::from_static(b"last")
        )])
    );
    // A cursor past the limit is simply ahead of the head.
    assert!(matches!(
        stream.resume(Some(u64::MAX)).await,
        Err(Error::AheadOfHead { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_are_reloaded_after_the_script_cache_is_flushed() {
    let server = RedisServer::start();
    let stream = stream_with(&server, "noscript", 8, 2).await;
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut server.raw())
        .unwrap();
    let mut p = stream.acquire_producer().await.unwrap();
    assert_eq!(p.append(&payload(3)).await.unwrap(), 3);
    let mut r = stream.resume(Some(1)).await.unwrap();
    assert_eq!(read_through(&mut r, 3).await, vec![2, 3]);
}
