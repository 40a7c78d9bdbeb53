//! The owner's count of the connections other replicas serve a request stream to (feature
//! `redis`, a real `redis-server`), when things go wrong: a burst into a full window while the
//! remote reader waits for events, a replica that dies with its report left in Redis, and
//! reports written behind the store's back (a position past the head, a field that is not a
//! report, a key of another type). Each must leave the call paced by the readers that are really
//! there. The stream is `req-a` on replica A, its owner record written by hand, read on replica
//! B through `remote_resume` and on A through `resume_stream`. Timings are the defaults' ratios
//! (lease = backpressure bound, window three times that) scaled down.
#![cfg(feature = "redis")]

use std::time::{Duration, Instant};

use axum::body::Body;
use futures::StreamExt;
use http::StatusCode;
use replay_ring_mcp::{RedisEventLog, RingEventStore, StoreConfig};
use replay_ring_redis::RedisConfig;
use replay_ring_sse::{Epoch, RetentionConfig};
use rmcp::transport::streamable_http_server::session::{EventStore, ServerSseMessage};
use serde_json::json;

mod in_process;
mod messages;
#[path = "../../redis/tests/common/mod.rs"]
mod redis_support;

use in_process::{events_from, Sse};
use messages::progress;
use redis_support::RedisServer;

/// The default ratios (lease 10 s = backpressure bound 10 s, window 30 s) scaled by 1/10.
fn store_cfg() -> StoreConfig {
    StoreConfig {
        capacity: 8,
        retention: RetentionConfig {
            resumption_window: Duration::from_millis(3000),
            backpressure_timeout: Duration::from_millis(1000),
        },
        ..StoreConfig::default()
    }
}

/// Half the default 2 s, which would dominate the dead-reader bound here; not shorter: an append
/// that outlasts it ends the stream (its outcome is unknown), and a loaded CI machine's disk can
/// hold up the test server's `appendfsync always` for hundreds of milliseconds (200 ms failed
/// 2 of 9 runs under heavy disk load).
const RESPONSE_TIMEOUT: Duration = Duration::from_millis(1000);

fn redis_cfg(lease_ms: u64) -> RedisConfig {
    RedisConfig {
        lease: Duration::from_millis(lease_ms),
        response_timeout: RESPONSE_TIMEOUT,
        ..RedisConfig::default()
    }
}

/// When the owner takes a report that has not moved for dead, with a lease of `lease_ms`: three
/// report intervals (a third of the lease each) and two response timeouts (`docs/mcp.md`).
fn dead_reader_bound(lease_ms: u64) -> Duration {
    3 * Duration::from_millis(lease_ms / 3) + 2 * RESPONSE_TIMEOUT
}

async fn store(server: &RedisServer, epoch: Epoch, lease_ms: u64) -> RingEventStore {
    let log = RedisEventLog::connect(&server.url(), redis_cfg(lease_ms))
        .await
        .unwrap();
    RingEventStore::with_redis_epoch(store_cfg(), log, epoch)
}

fn set_owner(server: &RedisServer) {
    let mut raw = server.raw();
    let _: () = redis::cmd("SET")
        .arg("replay-ring:{a-s1}:owner")
        .arg(json!({"session": "sess-1", "request": 1}).to_string())
        .query(&mut raw)
        .unwrap();
}

/// The stream's report hash.
const READERS: &str = "replay-ring:{a-s1}:readers";

fn readers(server: &RedisServer) -> Vec<(String, String)> {
    let mut raw = server.raw();
    redis::cmd("HGETALL").arg(READERS).query(&mut raw).unwrap()
}

/// Reads a remote body in the background; returns the events it got.
fn read_remote(mut body: Body) -> tokio::task::JoinHandle<Vec<Sse>> {
    tokio::spawn(async move { events_from(&mut body, 10_000).await })
}

/// Reads a local RingStream in the background, as fast as it comes.
fn read_local(
    mut s: replay_ring_mcp::RingStream,
) -> tokio::task::JoinHandle<Vec<ServerSseMessage>> {
    tokio::spawn(async move {
        let mut out = Vec::new();
        while let Ok(Some(m)) = tokio::time::timeout(Duration::from_secs(20), s.next()).await {
            out.push(m);
        }
        out
    })
}

/// The client reads on the owner from `cursor` as fast as events come, while the call publishes
/// progress `from..=30`, 20 ms apart: the first event the store refuses, if any.
async fn paced_while_read_on_the_owner(
    a: &RingEventStore,
    cursor: &[u8],
    from: u64,
) -> Result<(), String> {
    let resumed = a
        .resume_stream(None, cursor)
        .map_err(|e| format!("{e:?}"))?;
    let local = read_local(resumed);
    let t0 = Instant::now();
    let mut result = Ok(());
    for p in from..=30 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        if let Err(e) = a.store_event("req-a", &progress(p)).await {
            result = Err(format!("event {p} after {:?}: {e}", t0.elapsed()));
            break;
        }
    }
    local.abort();
    result
}

/// A burst of 19 events into a window of 8, read as it comes by one client, on the owner
/// (`remote` false) or on replica B, starting right after one of the remote reader's reports.
/// The remote reader, which catches up and then waits for events, must report what it wrote
/// on time while it waits, or the owner releases nothing before the producer's bound.
async fn burst(remote: bool, lease_ms: u64) -> Result<(), String> {
    let server = RedisServer::start();
    let a = store(&server, Epoch::new(0xa), lease_ms).await;
    let b = store(&server, Epoch::new(0xb), lease_ms).await;
    assert_eq!(
        a.store_event("req-a", &progress(1)).await.unwrap(),
        "s1.a.1"
    );
    set_owner(&server);
    let reader = if remote {
        let resp = b.remote_resume(Some("sess-1"), b"s1.a.1").await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let mut body = Body::new(resp.into_body());
        let priming = events_from(&mut body, 1).await;
        assert_eq!(priming[0].id.as_deref(), Some("s1.a.1"));
        let h = read_remote(body);
        // Let the first report (through 1) land and the owner count it, then wait for the
        // reader's next idle report (beat 2): the burst starts right after it.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let r = readers(&server);
            if r.len() == 1 && r[0].1.ends_with(":2") {
                break;
            }
            assert!(Instant::now() < deadline, "no idle report: {r:?}");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        Some(h)
    } else {
        let s = a
            .resume_stream(None, b"s1.a.1")
            .map_err(|e| format!("{e:?}"))
            .unwrap();
        read_local(s);
        None
    };
    // A burst of 20 events into a window of 8.
    let t0 = Instant::now();
    let mut result = Ok(());
    for p in 2..=20 {
        if let Err(e) = a.store_event("req-a", &progress(p)).await {
            result = Err(format!("event {p} after {:?}: {e}", t0.elapsed()));
            break;
        }
    }
    if let Some(h) = reader {
        h.abort();
    }
    result
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_read_on_the_owner_completes() {
    burst(false, 1000).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_read_on_another_replica_completes() {
    burst(true, 1000).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_read_on_another_replica_completes_with_a_lease_past_the_bound() {
    burst(true, 1500).await.unwrap();
}

/// Replica B serves the call's client, then dies (`leak`: its connection is leaked, so no final
/// removal of its report and no more reports) or ends the connection normally; the client
/// resumes on the owner and reads everything as it comes. The resume supersedes B's report at
/// once, so a report left behind does not hold the owner's window until it is taken for dead.
async fn crash(leak: bool) -> Result<(), String> {
    let server = RedisServer::start();
    let a = store(&server, Epoch::new(0xa), 1000).await;
    let b = store(&server, Epoch::new(0xb), 1000).await;
    assert_eq!(
        a.store_event("req-a", &progress(1)).await.unwrap(),
        "s1.a.1"
    );
    set_owner(&server);
    let resp = b.remote_resume(Some("sess-1"), b"s1.a.1").await.unwrap();
    let mut body = Body::new(resp.into_body());
    let _priming = events_from(&mut body, 1).await;
    for p in 2..=4 {
        a.store_event("req-a", &progress(p)).await.unwrap();
    }
    let got = events_from(&mut body, 3).await;
    assert_eq!(got.last().unwrap().id.as_deref(), Some("s1.a.4"));
    // One more poll so "taken" covers 4, and polls until B has reported it (a connection
    // reports only while its body is polled; no event comes, so each poll times out).
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let _ = tokio::time::timeout(Duration::from_millis(20), events_from(&mut body, 1)).await;
        let r = readers(&server);
        if r.len() == 1 && r[0].1.starts_with("4:") {
            break;
        }
        assert!(Instant::now() < deadline, "no report through 4: {r:?}");
    }
    // The owner sees it: one pass of its maintenance, run here rather than waited for.
    a.maintain_event_log().await;
    if leak {
        std::mem::forget(body); // the replica is gone: no HDEL, no reports
    } else {
        drop(body); // the connection ends normally
    }
    // The client resumes on the owner from 4 and reads as fast as events come.
    paced_while_read_on_the_owner(&a, b"s1.a.4", 5).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_connection_that_ends_does_not_hold_the_owner() {
    crash(false).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_remote_replica_does_not_end_a_call_read_on_the_owner() {
    crash(true).await.unwrap();
}

fn hset_junk(server: &RedisServer, value: &str) {
    let mut raw = server.raw();
    let _: () = redis::cmd("HSET")
        .arg(READERS)
        .arg("junk")
        .arg(value)
        .query(&mut raw)
        .unwrap();
}

fn hdel_junk(server: &RedisServer) {
    let mut raw = server.raw();
    let _: () = redis::cmd("HDEL")
        .arg(READERS)
        .arg("junk")
        .query(&mut raw)
        .unwrap();
}

/// A field of the `:readers` hash whose position is past the owner's head (written behind the
/// store's back) is not counted and is removed: counted, it would have been recorded as written
/// when the local connection left, and the stream would never have released by window again.
async fn junk(with_junk: bool) -> Result<(), String> {
    let server = RedisServer::start();
    let a = store(&server, Epoch::new(0xa), 1000).await;
    assert_eq!(
        a.store_event("req-a", &progress(1)).await.unwrap(),
        "s1.a.1"
    );
    a.store_event("req-a", &progress(2)).await.unwrap();
    set_owner(&server);
    let l1 = a
        .resume_stream(None, b"s1.a.2")
        .map_err(|e| format!("{e:?}"))
        .unwrap();
    if with_junk {
        hset_junk(&server, &format!("{}:1", u64::MAX / 2));
    }
    // The owner reads the reports while the local connection is open: one pass of its
    // maintenance, run here rather than waited for.
    a.maintain_event_log().await;
    drop(l1);
    // One window for the poisoned checkpoint to expire (the passage of time is the subject),
    // then the junk goes away and the owner reads the reports again.
    tokio::time::sleep(Duration::from_millis(3600)).await;
    if with_junk {
        hdel_junk(&server);
    }
    a.maintain_event_log().await;
    paced_while_read_on_the_owner(&a, b"s1.a.2", 3).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_without_junk_releases_by_window() {
    junk(false).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_past_the_head_does_not_wedge_the_stream() {
    junk(true).await.unwrap();
}

/// Replicas A and B, event 1 of `req-a` on A, and B's connection from cursor 1 counted by A
/// (its report in Redis and read by A's maintenance at least once).
async fn a_counted_remote_reader(server: &RedisServer) -> (RingEventStore, RingEventStore, Body) {
    let a = store(server, Epoch::new(0xa), 1000).await;
    let b = store(server, Epoch::new(0xb), 1000).await;
    assert_eq!(
        a.store_event("req-a", &progress(1)).await.unwrap(),
        "s1.a.1"
    );
    set_owner(server);
    let resp = b.remote_resume(Some("sess-1"), b"s1.a.1").await.unwrap();
    let mut body = Body::new(resp.into_body());
    let _priming = events_from(&mut body, 1).await;
    // Polls the body until B's report is in Redis (a connection reports only while its body is
    // polled; no event comes, so each poll times out).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let _ = tokio::time::timeout(Duration::from_millis(20), events_from(&mut body, 1)).await;
        let r = readers(server);
        if r.len() == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "no report from B: {r:?}");
    }
    // A counts it: one pass of its maintenance, run here rather than waited for.
    a.maintain_event_log().await;
    (a, b, body)
}

/// The `:readers` key replaced by a value of another type: the owner deletes it, and the remote
/// connection counted before (which ended meanwhile) no longer caps its releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_readers_key_of_another_type_does_not_freeze_a_counted_reader() {
    let server = RedisServer::start();
    let (a, _b, body) = a_counted_remote_reader(&server).await;
    let mut raw = server.raw();
    let _: () = redis::cmd("DEL").arg(READERS).query(&mut raw).unwrap();
    let _: () = redis::cmd("SET")
        .arg(READERS)
        .arg("x")
        .query(&mut raw)
        .unwrap();
    // The remote connection ends; its report's removal fails (WRONGTYPE).
    drop(body);
    // Past the dead-reader bound (3 × 333 ms + 2 × 1 s here): the time passing is the test.
    tokio::time::sleep(dead_reader_bound(1000) + Duration::from_millis(600)).await;
    paced_while_read_on_the_owner(&a, b"s1.a.1", 2)
        .await
        .unwrap();
}

/// A field that is not UTF-8 is removed, and the other reports are still read: the remote
/// connection counted before (which ended meanwhile) no longer caps the owner's releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_field_that_is_not_a_report_does_not_freeze_a_counted_reader() {
    let server = RedisServer::start();
    let (a, _b, body) = a_counted_remote_reader(&server).await;
    let _: () = redis::cmd("HSET")
        .arg(READERS)
        .arg(&b"\xff\xfe"[..])
        .arg("1:1")
        .query(&mut server.raw())
        .unwrap();
    // The remote connection ends; its own report is removed.
    drop(body);
    tokio::time::sleep(dead_reader_bound(1000) + Duration::from_millis(600)).await;
    paced_while_read_on_the_owner(&a, b"s1.a.1", 2)
        .await
        .unwrap();
}

/// A replica that dies right after its connection's last report (through 4), and the client
/// resumes on the owner from 4; `read_first`: the owner had read that report before the resume.
/// Either way the report must not hold the window: here a report held until taken for dead
/// (lease 3 s: after about 5 s) outlasts the call's bound (0.5 s, plus a 1 s window while
/// attended).
async fn a_dead_replicas_last_report(read_first: bool) -> Result<(), String> {
    let server = RedisServer::start();
    let redis = RedisConfig {
        lease: Duration::from_millis(3000),
        ..redis_cfg(3000)
    };
    let log = RedisEventLog::connect(&server.url(), redis).await.unwrap();
    let config = StoreConfig {
        retention: RetentionConfig {
            resumption_window: Duration::from_millis(1000),
            backpressure_timeout: Duration::from_millis(500),
        },
        ..store_cfg()
    };
    let a = RingEventStore::with_redis_epoch(config, log, Epoch::new(0xa));
    for p in 1..=4 {
        a.store_event("req-a", &progress(p)).await.unwrap();
    }
    set_owner(&server);
    let _: () = redis::cmd("HSET")
        .arg(READERS)
        .arg("dead-0")
        .arg("4:1")
        .query(&mut server.raw())
        .unwrap();
    if read_first {
        // More than one of the owner's reads (every second here).
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    paced_while_read_on_the_owner(&a, b"s1.a.4", 5).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_replicas_counted_report_is_passed_by_a_resume_on_the_owner() {
    a_dead_replicas_last_report(true).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_replicas_report_read_after_a_resume_on_the_owner_is_not_counted() {
    a_dead_replicas_last_report(false).await.unwrap();
}
