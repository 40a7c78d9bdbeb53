//! The stream's expiry (`RedisConfig::stream_ttl`) against the producer lease when replicas are
//! configured differently: the stream keeps its creator's ttl, the lease is its holder's, and a
//! stream never expires under a producer that holds and renews its lease. Checked through the
//! keys' remaining time to live, straight from Redis, right after each step.

mod common;

use std::time::Duration;

use common::RedisServer;
use replay_ring_redis::{RedisConfig, RedisStream};
use replay_ring_sse::StreamId;

fn sid(name: &str) -> StreamId {
    StreamId::new(name).unwrap()
}

/// Remaining time to live in milliseconds of the stream's meta, log and ctl keys (-1: none;
/// -2: no such key).
fn pttls(server: &RedisServer, stream: &RedisStream) -> [i64; 3] {
    let mut raw = server.raw();
    let [meta, log, ctl, _] = stream.key_names();
    [meta, log, ctl].map(|key| redis::cmd("PTTL").arg(key).query(&mut raw).unwrap())
}

fn config(stream_ttl: Duration, lease: Duration) -> RedisConfig {
    RedisConfig {
        stream_ttl,
        lease,
        ..RedisConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_longer_than_the_streams_ttl_keeps_the_stream_alive_on_every_replica() {
    let server = RedisServer::start();
    // Replica A created the stream with a short ttl; replica B produces with a longer lease.
    let short = Duration::from_millis(400);
    let a = server.backend_with(config(short, short)).await;
    let b = server
        .backend_with(config(Duration::from_secs(3600), Duration::from_secs(30)))
        .await;
    let on_a = a.create(&sid("mixed"), 16).await.unwrap();
    let on_b = b.open(&sid("mixed")).await.unwrap();
    let fresh = pttls(&server, &on_a);
    assert!(
        fresh[0] > 0 && fresh[0] <= 400 && fresh[2] > 0,
        "created with A's ttl: {fresh:?}"
    );

    // A grant, an append and a renewal each set the expiry to at least B's lease.
    let mut producer = on_b.acquire_producer().await.unwrap();
    let [meta, _, ctl] = pttls(&server, &on_b);
    assert!(
        meta > 20_000 && ctl > 20_000,
        "after the grant: {meta}, {ctl}"
    );
    assert_eq!(producer.append(b"one").await.unwrap(), 1);
    let after_append = pttls(&server, &on_b);
    assert!(
        after_append.iter().all(|&t| t > 20_000),
        "after an append, the log too: {after_append:?}"
    );
    producer.renew().await.unwrap();
    assert!(pttls(&server, &on_b).iter().all(|&t| t > 20_000));

    // A release or a resume from replica A, whose ttl is short, does not cut that expiry down.
    assert_eq!(on_a.release_through(1).await.unwrap(), (2, 1));
    let after_release = pttls(&server, &on_a);
    assert!(
        after_release.iter().all(|&t| t > 20_000),
        "a release never shortens a lease holder's expiry: {after_release:?}"
    );
    assert_eq!(producer.append(b"two").await.unwrap(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_longer_lease_the_streams_own_ttl_is_refreshed_as_before() {
    let server = RedisServer::start();
    let ttl = Duration::from_secs(5);
    let backend = server
        .backend_with(config(ttl, Duration::from_secs(1)))
        .await;
    let stream = backend.create(&sid("plain"), 16).await.unwrap();
    let mut producer = stream.acquire_producer().await.unwrap();
    assert_eq!(producer.append(b"one").await.unwrap(), 1);
    let after_append = pttls(&server, &stream);
    assert!(
        after_append.iter().all(|&t| t > 4_000 && t <= 5_000),
        "the stream's ttl (5 s), longer than the lease (1 s): {after_append:?}"
    );
    // Persisted keys (as an operator's PERSIST leaves them) get the ttl back from a release.
    let mut raw = server.raw();
    for key in &stream.key_names()[..3] {
        let _: i64 = redis::cmd("PERSIST").arg(key).query(&mut raw).unwrap();
    }
    stream.release_through(1).await.unwrap();
    let after_release = pttls(&server, &stream);
    assert!(
        after_release.iter().all(|&t| t > 4_000 && t <= 5_000),
        "{after_release:?}"
    );
}
