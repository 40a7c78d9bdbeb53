//! A call resumed on a replica that does not own it is counted by the owner's retention as if its
//! client were connected there (feature `redis`, a real `redis-server`): a call that produces
//! many times its window while its only client reads on another replica completes, every event
//! delivered once, in order; and a client there that stops reading cannot hold the call open.
#![cfg(feature = "redis")]

use std::time::Duration;

use axum::body::Body;
use axum::Router;
use http::{Response, StatusCode};
use replay_ring_mcp::{RedisEventLog, RingEventStore, StoreConfig};
use replay_ring_mcp_demo::store_app;
use replay_ring_redis::RedisConfig;
use replay_ring_sse::{Epoch, RetentionConfig};
use serde_json::{json, Value};

mod in_process;
#[path = "../../redis/tests/common/mod.rs"]
mod redis_support;

use in_process::{call, events_from, get, initialize, long_task_paced, post, replayed_from, Sse};
use redis_support::RedisServer;

/// A window of 8 events, released 300 ms after they were written; a producer may wait 3 s for
/// room (one window longer while a client is connected).
fn small_window() -> StoreConfig {
    StoreConfig {
        capacity: 8,
        retention: RetentionConfig {
            resumption_window: Duration::from_millis(300),
            backpressure_timeout: Duration::from_secs(3),
        },
        ..StoreConfig::default()
    }
}

/// A short lease, so that the owner reads the reports (and renews) every 200 ms and a remote
/// connection reports at least that often.
fn short_lease() -> RedisConfig {
    RedisConfig {
        lease: Duration::from_millis(600),
        ..RedisConfig::default()
    }
}

async fn replica(server: &RedisServer, epoch: Epoch) -> (Router, RingEventStore) {
    let log = RedisEventLog::connect(&server.url(), short_lease())
        .await
        .expect("connect to redis");
    let store = RingEventStore::with_redis_epoch(small_window(), log, epoch);
    (store_app(store.clone()), store)
}

fn seq_of(id: &str) -> u64 {
    id.rsplit_once('.').unwrap().1.parse().unwrap()
}

fn progress_in(e: &Sse) -> Option<u64> {
    let v: Value = serde_json::from_str(&e.data).ok()?;
    v["params"]["progress"].as_f64().map(|p| p as u64)
}

/// A call resumed on replica B, with everything that must stay alive while it runs.
struct ResumedOnB {
    _server: RedisServer,
    _apps: (Router, Router),
    store_a: RingEventStore,
    store_b: RingEventStore,
    cursor: String,
    response: Response<Body>,
}

/// Replicas A and B on a fresh Redis; a `long_task` of `n` notifications `delay_ms` apart called
/// on A, its connection cut after the priming event and two notifications, and resumed on B.
async fn a_call_resumed_on_b(n: u64, delay_ms: u64) -> ResumedOnB {
    let server = RedisServer::start();
    let (a, store_a) = replica(&server, Epoch::new(0xa)).await;
    let (b, store_b) = replica(&server, Epoch::new(0xb)).await;
    let session = initialize(&a).await;
    let response = call(&a, post(Some(&session), long_task_paced(1, n, delay_ms))).await;
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body();
    let before = events_from(&mut body, 3).await;
    drop(body);
    let cursor = before.last().unwrap().id.clone().unwrap();
    let response = call(&b, get(&session, Some(&cursor))).await;
    assert_eq!(response.status(), StatusCode::OK);
    ResumedOnB {
        _server: server,
        _apps: (a, b),
        store_a,
        store_b,
        cursor,
        response,
    }
}

/// 60 progress notifications, 25 ms apart, into a window of 8, while the client reads on the
/// other replica: without the owner counting that client, the window fills a few events after
/// the cut, nothing releases it, and the call ends with `BackpressureTimeout` 3 s later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_call_resumed_on_another_replica_completes_paced_by_its_reader() {
    const N: u64 = 60;
    let call = a_call_resumed_on_b(N, 25).await;
    let (store_a, store_b, cursor) = (&call.store_a, &call.store_b, &call.cursor);
    let after = replayed_from(&mut call.response.into_body(), cursor, 1000).await;
    for (expected, e) in (seq_of(cursor) + 1..).zip(&after) {
        let id = e.id.as_deref().expect("every event has an id");
        assert_eq!(seq_of(id), expected, "ids skipped or repeated: {after:?}");
    }
    let progress: Vec<u64> = after.iter().filter_map(progress_in).collect();
    assert_eq!(progress, (3..=N).collect::<Vec<_>>(), "{after:?}");
    let result: Value = serde_json::from_str(&after.last().unwrap().data).unwrap();
    assert_eq!(result["id"], json!(1), "{result}");
    assert!(
        result["result"].is_object(),
        "the call did not complete: {result}"
    );
    let metrics = store_a.metrics();
    assert_eq!(metrics.event_log_failures, 0, "{metrics:?}");
    assert!(store_b.metrics().remote_resumes >= 1);
}

/// A client on the other replica that stops reading cannot hold the call open: counted as a
/// connected client, it gets the attended bound (the backpressure timeout plus a window), and the
/// call ends explicitly there (were the owner's window not full, its reports, no longer moving,
/// would be taken for a departed client; `remote_progress.rs`'s unit tests check that rule).
/// When the client reads again, it gets the events after its last one, in order, then an
/// explicit end: never a gap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_on_another_replica_that_stops_reading_stops_holding_the_window() {
    const N: u64 = 400;
    let call = a_call_resumed_on_b(N, 5).await;
    let store_a = &call.store_a;
    // Reads the priming event and two more, then stops reading (the connection stays open).
    let mut held = call.response.into_body();
    let read = events_from(&mut held, 3).await;
    let last_read = read.last().unwrap().id.clone().unwrap();
    // The call ends at the bound while the stalled connection is still open.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while store_a.metrics().backpressure_timeouts == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the stalled reader held the call"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Reading again: the events after the last one read, in order, then an explicit error.
    let rest = events_from(&mut held, 1000).await;
    for (expected, e) in (seq_of(&last_read) + 1..).zip(&rest) {
        match e.id.as_deref() {
            Some(id) => assert_eq!(seq_of(id), expected, "{rest:?}"),
            None => break,
        }
    }
    let end = rest
        .iter()
        .rev()
        .find_map(|e| serde_json::from_str::<Value>(&e.data).ok())
        .expect("an explicit end");
    let kind = end["error"]["data"]["error"].as_str().unwrap_or_default();
    assert!(["stream_closed", "replay_gap"].contains(&kind), "{end}");
}
