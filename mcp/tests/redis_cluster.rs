//! The store's event log on a Redis Cluster (feature `redis`): two replicas, each connected to a
//! different node of a real three-node cluster, whose streams land on every node. A tool call cut
//! on one replica resumes on the other from Redis, exactly once and in order, wherever its
//! stream lives.
#![cfg(feature = "redis")]

use std::collections::BTreeSet;

use http::StatusCode;
use replay_ring_mcp::{RedisEventLog, RingEventStore, StoreConfig};
use replay_ring_mcp_demo::store_app;
use replay_ring_redis::RedisConfig;
use replay_ring_sse::Epoch;
use serde_json::Value;

mod in_process;
#[path = "../../redis/tests/common/mod.rs"]
mod redis_support;

use in_process::{call, events_from, get, initialize, long_task_paced, post, replayed_from, Sse};
use redis_support::cluster::Cluster;

async fn store_on(cluster: &Cluster, node: usize) -> RingEventStore {
    let log = RedisEventLog::connect(&cluster.nodes[node].url(), RedisConfig::default())
        .await
        .expect("connect to the cluster");
    RingEventStore::with_redis_epoch(StoreConfig::default(), log, Epoch::generate())
}

fn seq_of(id: &str) -> u64 {
    id.rsplit_once('.').unwrap().1.parse().unwrap()
}

fn progress_in(e: &Sse) -> Option<u64> {
    let v: Value = serde_json::from_str(&e.data).ok()?;
    v["params"]["progress"].as_f64().map(|p| p as u64)
}

/// The Redis stream behind a wire id `s7.9f3a2c1e.<seq>`: `9f3a2c1e-s7` (`redis_log.rs`).
fn redis_stream_of(id: &str) -> String {
    let mut parts = id.split('.');
    let (stream, epoch) = (parts.next().unwrap(), parts.next().unwrap());
    format!("{epoch}-{stream}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_cut_on_one_replica_resume_on_another_whichever_node_holds_their_stream() {
    const N: u64 = 8;
    let cluster = Cluster::start(3).await;
    let a = store_app(store_on(&cluster, 0).await);
    let b = store_app(store_on(&cluster, 1).await);
    let session = initialize(&a).await;
    let mut nodes = BTreeSet::new();
    // Each tool call is a stream of its own; calls go on until streams lived on every node.
    for call_id in 1..=40 {
        let resp = call(&a, post(Some(&session), long_task_paced(call_id, N, 5))).await;
        assert_eq!(resp.status(), StatusCode::OK);
        let mut body = resp.into_body();
        // The priming event and the first two progress notifications, then the cut.
        let before = events_from(&mut body, 3).await;
        drop(body);
        let cursor = before.last().unwrap().id.clone().unwrap();
        nodes.insert(cluster.owner_of(cluster.slot_of(&redis_stream_of(&cursor))));

        let resumed = call(&b, get(&session, Some(&cursor))).await;
        assert_eq!(resumed.status(), StatusCode::OK, "call {call_id}");
        let after = replayed_from(&mut resumed.into_body(), &cursor, 100).await;
        let ids: Vec<u64> = after
            .iter()
            .map(|e| seq_of(e.id.as_deref().expect("every event has an id")))
            .collect();
        let expected: Vec<u64> = (seq_of(&cursor) + 1..).take(after.len()).collect();
        assert_eq!(ids, expected, "call {call_id}: ids skipped or repeated");
        let progress: Vec<u64> = after.iter().filter_map(progress_in).collect();
        assert_eq!(progress, (3..=N).collect::<Vec<_>>(), "call {call_id}");
        let result: Value = serde_json::from_str(&after.last().unwrap().data).unwrap();
        assert_eq!(
            result["id"], call_id,
            "call {call_id}: ends with its result"
        );
        if nodes.len() == 3 {
            return;
        }
    }
    panic!("40 calls' streams lived on nodes {nodes:?} only");
}
