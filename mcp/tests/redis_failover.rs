//! The store's event log on Redis when a failover loses its last events (docs/scaling.md,
//! "Replication and failover can lose acknowledged appends"), staged for real with
//! `redis/tests/common/failover.rs`: the replica is promoted with events 1..=N of a stream whose
//! 1..=M the primary had acknowledged (and the owning replica had sent). The store must not go on
//! under the lost ids: its next event fails explicitly, naming the loss, and its connection
//! ends after the last durable id; Redis never holds another event under one of those ids, and
//! the shortened log is deleted rather than served in part.
#![cfg(feature = "redis")]

use std::time::Duration;

use futures::StreamExt;
use replay_ring_mcp::{RedisEventLog, RingEventStore, StoreConfig};
use replay_ring_redis::{RedisConfig, RedisStream};
use replay_ring_sse::{Epoch, StreamId};
use rmcp::transport::streamable_http_server::session::EventStore;

mod messages;
#[path = "../../redis/tests/common/mod.rs"]
mod redis_support;

use messages::{assert_ends_with_a_retry_hint, progress, progress_of};
use redis_support::failover::Failover;

const LIMIT: Duration = Duration::from_secs(20);
/// Events the replica has when its primary dies.
const N: u64 = 6;
/// Events the primary acknowledged (N+1..=M never reach the replica).
const M: u64 = 9;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_that_loses_the_last_events_ends_the_stream_explicitly_never_reuses_their_ids() {
    let mut failover = Failover::start().await;
    let config = RedisConfig {
        // Still the store's lease on the promoted replica: what refuses the next event is the
        // lost log, not a lapsed lease.
        lease: Duration::from_secs(120),
        ..RedisConfig::default()
    };
    let log = RedisEventLog::connect(&failover.front.url(), config)
        .await
        .unwrap();
    let store = RingEventStore::with_redis_epoch(StoreConfig::default(), log, Epoch::new(0xabc));
    for p in 1..=N {
        let id = store.store_event("req-a", &progress(p)).await.unwrap();
        assert_eq!(id, format!("s1.abc.{p}"));
    }
    failover.sync_then_hold().await;
    for p in N + 1..=M {
        store.store_event("req-a", &progress(p)).await.unwrap();
    }
    // The store's stream in Redis, as the promoted replica holds it (read behind the store's
    // back): 1..=N only.
    let name = StreamId::new("abc-s1").unwrap();
    let stream: RedisStream = failover.replica.backend().await.open(&name).await.unwrap();
    let before: Vec<_> = failover.primary.log_entries(&stream);
    assert_eq!(before.len() as u64, M);
    assert_eq!(failover.replica.log_entries(&stream), before[..N as usize]);

    // A connection on the owning replica got every event up to M (each durable on the primary).
    let mut live = store.resume_stream(None, b"s1.abc.0").unwrap();
    for p in 1..=M {
        let m = tokio::time::timeout(LIMIT, live.next()).await.unwrap();
        assert_eq!(m.as_ref().and_then(progress_of), Some(p), "{m:?}");
    }

    failover.fail_over();
    // The next event is refused, explicitly, as a loss (LogRolledBack), not a gap or a reused id.
    let err = store
        .store_event("req-a", &progress(M + 1))
        .await
        .unwrap_err()
        .to_string();
    let named = format!("its log ends at id {N}, but id {M} was seen in it");
    assert!(err.contains(&named), "{err}");
    assert!(store.store_event("req-a", &progress(M + 2)).await.is_err());
    assert_eq!(store.metrics().event_log_failures, 1);
    // The connection never gets id M+1: it ends explicitly (a retry hint, no id), then closes.
    assert_ends_with_a_retry_hint(&mut live, LIMIT).await;
    // The shortened log is deleted (its close was refused as a loss), so no replica serves part
    // of it: Redis holds no event of the stream, and its cursors are "stream lost".
    let gone = stream.state().await.map(drop).unwrap_err();
    assert!(gone.is_stream_lost(), "{gone:?}");
    assert_eq!(failover.replica.log_entries(&stream), []);
}
