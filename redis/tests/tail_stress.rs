//! Random interleavings against a real redis-server: appends in batches, releases, readers
//! resumed at random retained cursors (on the handle and on clones, before and after the shared
//! read starts, some cancelling their waits), then a close, with small pages and short block
//! times so that readers fall behind the shared read, re-read pages and time out. Every reader
//! must get the ids after its cursor exactly once and in order, then the close after the last
//! one, or a `Gap` that a release explains; none may hang.
//!
//! `TAIL_STRESS_ROUNDS` and `TAIL_STRESS_SEED` run more rounds or another sequence; a failure
//! names the seed of its round.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::RedisServer;
use replay_ring::CloseReason;
use replay_ring_redis::{Error, ReadItem, RedisConfig, RedisReader};
use replay_ring_sse::StreamId;
use tokio::time::timeout;

/// Longer than any wait a reader can be owed: a hang, not a slow machine.
const LIMIT: Duration = Duration::from_secs(30);

fn payload(id: u64) -> Vec<u8> {
    format!("event {id}").into_bytes()
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// How a reader ended: closed after this id, or refused at `cursor` below `floor`.
#[derive(Debug)]
enum End {
    Closed(u64),
    Gap { cursor: u64, floor: u64 },
}

async fn read_until_the_end(mut reader: RedisReader, seed: u64, cancels: bool) -> End {
    let mut rng = fastrand::Rng::with_seed(seed);
    loop {
        let before = reader.last_id();
        let item = if cancels && rng.u8(..3) == 0 {
            // A wait given up after a few ms (a keep-alive tick, a client gone): the next call
            // continues from the same cursor.
            let wait = Duration::from_millis(rng.u64(..20));
            match timeout(wait, reader.recv()).await {
                Err(_) => continue,
                Ok(item) => item,
            }
        } else {
            timeout(LIMIT, reader.recv())
                .await
                .unwrap_or_else(|_| panic!("the reader at {before} hung"))
        };
        match item {
            Ok(ReadItem::Events(batch)) => {
                for (i, (id, data)) in batch.iter().enumerate() {
                    assert_eq!(*id, before + 1 + i as u64, "ids continue the cursor");
                    assert_eq!(data, &Bytes::from(payload(*id)));
                }
                if rng.u8(..4) == 0 {
                    // A slow consumer now and then, so that readers spread out behind the head.
                    tokio::time::sleep(Duration::from_millis(rng.u64(..5))).await;
                }
            }
            Ok(ReadItem::Closed(_)) => return End::Closed(reader.last_id()),
            Err(Error::Gap {
                requested, floor, ..
            }) => {
                assert_eq!(requested, before);
                assert!(floor > before + 1, "a gap at {before} with floor {floor}");
                return End::Gap {
                    cursor: before,
                    floor,
                };
            }
            Err(e) => panic!("the reader at {before}: {e:?}"),
        }
    }
}

async fn round(server: &RedisServer, round: u64, seed: u64) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let config = RedisConfig {
        read_batch: rng.usize(1..=12),
        block: Duration::from_millis(rng.u64(100..500)),
        ..RedisConfig::default()
    };
    let backend = server.backend_with(config).await;
    let id = StreamId::new(&format!("stress-{round}")).unwrap();
    let stream = backend.create(&id, 100_000).await.unwrap();
    let mut producer = stream.acquire_producer().await.unwrap();
    let (mut head, mut released) = (0, 0);
    let mut readers = Vec::new();
    let total = rng.u64(150..300);
    while head < total {
        match rng.u8(..10) {
            0..=4 => {
                let batch: Vec<Vec<u8>> =
                    (head + 1..=head + rng.u64(1..=20)).map(payload).collect();
                producer.append_batch(&batch).await.unwrap();
                head += batch.len() as u64;
            }
            5 | 6 => {
                let from = rng.u64(released..=head);
                let handle = if rng.bool() {
                    stream.clone()
                } else {
                    stream.clone().clone()
                };
                let reader = handle
                    .resume(Some(from))
                    .await
                    .unwrap_or_else(|e| panic!("resume {from} ({released}..={head}): {e:?}"));
                let task = read_until_the_end(reader, rng.u64(..), rng.bool());
                readers.push((from, tokio::spawn(task)));
            }
            7 if head > released => {
                released = rng.u64(released + 1..=head.min(released + 30));
                stream.release_through(released).await.unwrap();
            }
            _ => tokio::task::yield_now().await,
        }
    }
    producer.close(CloseReason::error("done")).await.unwrap();
    for (from, reader) in readers {
        let end = timeout(LIMIT, reader)
            .await
            .expect("a reader hung")
            .unwrap();
        match end {
            End::Closed(last) => assert_eq!(
                last, head,
                "seed {seed}: the reader from {from} closed before the last event"
            ),
            End::Gap { cursor, floor } => assert!(
                floor <= released + 1 && cursor < released,
                "seed {seed}: the reader from {from} got a gap at {cursor} (floor {floor}, released {released})"
            ),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_appends_releases_readers_and_cancelled_waits_lose_and_repeat_nothing() {
    let rounds = env_or("TAIL_STRESS_ROUNDS", 12);
    let base = env_or("TAIL_STRESS_SEED", 12_345);
    let server = RedisServer::start();
    for i in 0..rounds {
        let seed = base.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i);
        round(&server, i, seed).await;
    }
}
