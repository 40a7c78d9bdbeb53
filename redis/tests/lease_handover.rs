//! Handing the producer's lease over: a `LeaseKeeper` that holds an idle producer's lease and
//! stops with it, and a standby replica that takes the lease when it is given back or lapses.

mod common;

use std::time::Duration;

use common::RedisServer;
use replay_ring::CloseReason;
use replay_ring_redis::{Error, RedisBackend, RedisConfig};
use replay_ring_sse::StreamId;

fn sid(name: &str) -> StreamId {
    StreamId::new(name).unwrap()
}

/// A backend on `server` whose streams' producer leases last `lease`.
async fn with_lease(server: &RedisServer, lease: Duration) -> RedisBackend {
    server
        .backend_with(RedisConfig {
            lease,
            ..RedisConfig::default()
        })
        .await
}

/// A producer idle for many lease periods keeps its lease with a `LeaseKeeper`, and the keeper
/// stops once the producer closes the stream (the lease is gone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_keeper_holds_an_idle_producers_lease_until_the_close() {
    let server = RedisServer::start();
    // The keeper renews every third of the lease, so a renewal may come up to two thirds of a
    // lease late before the lease lapses: 500 ms leaves ~330 ms for a scheduling stall of this
    // test's runtime while other tests (each with its own redis-server) share the two cores.
    let lease = Duration::from_millis(500);
    let backend = with_lease(&server, lease).await;
    let stream = backend.create(&sid("kept"), 8).await.unwrap();
    let mut p = stream.acquire_producer().await.unwrap();
    let keeper = tokio::spawn(p.lease_keeper().run());
    // Idle for six lease periods: the time passing is what is tested.
    tokio::time::sleep(lease * 6).await;
    assert!(matches!(
        stream.acquire_producer().await,
        Err(Error::LeaseHeld { .. })
    ));
    assert_eq!(p.append(b"still mine").await.unwrap(), 1);
    p.close(CloseReason::Completed).await.unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(10), keeper)
        .await
        .expect("the keeper stops after the close")
        .unwrap();
    assert!(matches!(ended, Error::ProducerDropped), "{ended:?}");
}

/// A producer dropped without a close (the stream stays open in Redis): its keeper stops, so the
/// lease lapses and another producer can take over, instead of a lease renewed for nobody.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_keeper_stops_when_its_producer_is_dropped() {
    let server = RedisServer::start();
    let lease = Duration::from_millis(500);
    let backend = with_lease(&server, lease).await;
    let stream = backend.create(&sid("dropped"), 8).await.unwrap();
    let mut p = stream.acquire_producer().await.unwrap();
    assert_eq!(p.append(b"one").await.unwrap(), 1);
    let keeper = p.lease_keeper();
    let running = tokio::spawn(keeper.clone().run());
    drop(p);
    let ended = tokio::time::timeout(Duration::from_secs(10), running)
        .await
        .expect("the keeper stops once its producer is dropped")
        .unwrap();
    assert!(matches!(ended, Error::ProducerDropped), "{ended:?}");
    assert!(matches!(keeper.renew().await, Err(Error::ProducerDropped)));
    // The lease lapses: a new producer takes it and continues after the head.
    let mut next = stream.acquire_producer_when_free().await.unwrap();
    assert_eq!(next.append(b"two").await.unwrap(), 2);
}

/// A standby replica's `acquire_producer_when_free` waits while the active producer keeps its
/// lease, takes over at once when the lease is handed back, and after a crash (no renewal) once
/// the lease lapses; each new producer is fenced above the last and continues at the head.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_takes_the_lease_when_it_is_handed_back_or_lapses() {
    let server = RedisServer::start();
    // As in the lease-keeper test: room for a scheduling stall before a kept lease lapses.
    let lease = Duration::from_millis(500);
    let config = RedisConfig {
        lease,
        ..RedisConfig::default()
    };
    let active = server.backend_with(config.clone()).await;
    let stream = active.create(&sid("standby"), 64).await.unwrap();
    let mut first = stream.acquire_producer().await.unwrap();
    let keeper = tokio::spawn(first.lease_keeper().run());
    assert_eq!(first.append(b"a1").await.unwrap(), 1);

    let standby = server
        .backend_with(config.clone())
        .await
        .open(&sid("standby"))
        .await
        .unwrap();
    let waiting = {
        let standby = standby.clone();
        tokio::spawn(async move { standby.acquire_producer_when_free().await })
    };
    // Four lease periods with the active producer alive: the standby keeps waiting.
    tokio::time::sleep(lease * 4).await;
    assert!(!waiting.is_finished(), "took a lease that was being kept");
    assert_eq!(first.append(b"a2").await.unwrap(), 2);

    // Handed back (a planned switch-over): the standby takes it within about one lease.
    let token = first.fencing_token();
    keeper.abort();
    first.release_lease().await.unwrap();
    let mut second = tokio::time::timeout(lease * 4, waiting)
        .await
        .expect("taken after the hand-back")
        .unwrap()
        .unwrap();
    assert!(second.fencing_token() > token);
    assert_eq!(second.append(b"b3").await.unwrap(), 3);

    // The new producer's replica crashes: no release, no renewal. A third replica takes over
    // once the lease lapses.
    let token = second.fencing_token();
    drop(second);
    let third = server
        .backend_with(config)
        .await
        .open(&sid("standby"))
        .await
        .unwrap();
    let mut third = tokio::time::timeout(lease * 4, third.acquire_producer_when_free())
        .await
        .expect("taken after the lapse")
        .unwrap();
    assert!(third.fencing_token() > token);
    assert_eq!(third.append(b"c4").await.unwrap(), 4);
    assert_eq!(
        server.log_entries(&stream),
        [
            (1, b"a1".to_vec()),
            (2, b"a2".to_vec()),
            (3, b"b3".to_vec()),
            (4, b"c4".to_vec())
        ]
    );
}

/// How many scripts Redis has run (`EVAL` and `EVALSHA`, from `INFO commandstats`).
fn script_calls(server: &RedisServer) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut server.raw())
        .unwrap();
    info.lines()
        .filter(|line| line.starts_with("cmdstat_eval:") || line.starts_with("cmdstat_evalsha:"))
        .map(|line| {
            let calls = line.split_once("calls=").unwrap().1;
            calls.split(',').next().unwrap().parse::<u64>().unwrap()
        })
        .sum()
}

/// A standby that was told the lease is held for another 20 s takes it within a tenth of a lease
/// once the holder gives it back (a replica shutting down), not when the holder's lease would
/// have lapsed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_given_back_is_taken_within_a_tenth_of_a_lease() {
    let server = RedisServer::start();
    let lease = Duration::from_secs(20);
    let config = RedisConfig {
        lease,
        ..RedisConfig::default()
    };
    let stream = server
        .backend_with(config.clone())
        .await
        .create(&sid("handback"), 64)
        .await
        .unwrap();
    let holder = stream.acquire_producer().await.unwrap();
    let standby = server
        .backend_with(config)
        .await
        .open(&sid("handback"))
        .await
        .unwrap();
    let before = script_calls(&server);
    let waiting = tokio::spawn(async move { standby.acquire_producer_when_free().await });
    // The standby's first try ran in Redis while the lease was held (Redis runs one script at a
    // time, so it came before the release below): it was answered `LeaseHeld`, about 20 s left.
    common::eventually(Duration::from_secs(10), "the standby's first try", || {
        std::future::ready(script_calls(&server) > before)
    })
    .await;
    let token = holder.fencing_token();
    holder.release_lease().await.unwrap();
    let taken = tokio::time::timeout(lease / 4, waiting)
        .await
        .expect("taken well before the given-back lease would have lapsed")
        .unwrap()
        .unwrap();
    assert!(taken.fencing_token() > token);
}
