//! Two replicas of the demo server on one Redis, behind a balancer that sends every resume (a
//! `GET` with `Last-Event-ID`) to replica B and everything else to replica A, which owns the MCP
//! session: the official TypeScript client, cut by the chaos proxy every 40 frames, gets every
//! progress notification exactly once and in order, every resume served by B from Redis.
//! Needs `scripts/mcp-setup` (the pinned clients) and `redis-server` (`scripts/redis-setup`).
#![cfg(feature = "redis")]

mod common;

use std::convert::Infallible;
use std::time::Duration;

use axum::body::Body;
use axum::Router;
use common::*;
use http::Request;
use replay_ring_mcp::{RedisEventLog, RingEventStore, StoreConfig};
use replay_ring_mcp_demo::store_app;
use tower::ServiceExt;

#[path = "../../redis/tests/common/mod.rs"]
mod redis_support;

const N: u64 = 200;
const DELAY_MS: u64 = 5;

async fn replica(redis: &redis_support::RedisServer) -> RingEventStore {
    let log = RedisEventLog::connect(&redis.url(), Default::default())
        .await
        .expect("connect to redis");
    let config = StoreConfig {
        retry: Duration::from_millis(300),
        ..StoreConfig::default()
    };
    RingEventStore::with_redis(config, log)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the node client; run by scripts/test-all"]
async fn typescript_resumes_on_the_other_replica_from_redis_exactly_once_in_order() {
    let redis = redis_support::RedisServer::start();
    let (a, b) = (replica(&redis).await, replica(&redis).await);
    let (app_a, app_b) = (store_app(a.clone()), store_app(b.clone()));
    let balancer = tower::service_fn(move |req: Request<Body>| {
        let resume = req.headers().contains_key("last-event-id");
        let target: Router = if resume { app_b.clone() } else { app_a.clone() };
        async move { Ok::<_, Infallible>(target.oneshot(req).await.unwrap_or_else(|e| match e {})) }
    });
    let server = serve_router(Router::new().fallback_service(balancer)).await;
    let proxy = start_proxy(server.addr, |c| c.cut_after_frames = Some(40)).await;
    let url = format!("{}/mcp", proxy.url());
    let out = ts_long_task(&url, N, DELAY_MS, 60_000).await;

    assert_long_task_exactly_once(&out, N);

    let log = proxy.requests();
    let cuts = log.iter().filter(|r| r.outcome.is_cut()).count();
    assert!(cuts >= 4, "expected at least 4 cuts, saw {cuts}");
    // Every accepted resume continued exactly after its cursor, and all of them came from B.
    let resumes = assert_resumes_continuous(&log);
    assert!(resumes >= 4, "{resumes} resumes");
    let (ma, mb) = (a.metrics(), b.metrics());
    assert!(mb.remote_resumes >= resumes as u64, "{mb:?}");
    assert_eq!((ma.refused(), mb.refused()), (0, 0), "{ma:?}\n{mb:?}");
    assert_eq!(ma.event_log_failures, 0);
}
