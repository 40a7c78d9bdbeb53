//! The store with its event log on Redis (feature `redis`), against a real `redis-server` (a
//! private instance per test, from `redis/tests/common`): events are in Redis with their ids
//! before any connection sends them; a tool call cut on one replica resumes on another from
//! Redis, exactly once and in order; the other replica checks the MCP session and answers
//! unreplayable cursors explicitly; Redis failing ends the stream with an explicit error, never
//! a silent gap.
#![cfg(feature = "redis")]

use std::time::Duration;

use axum::body::Body;
use axum::Router;
use futures::StreamExt;
use http::{Response, StatusCode};
use http_body_util::BodyExt;
use replay_ring_mcp::{refusal_status, RedisEventLog, RingEventStore, StoreConfig};
use replay_ring_mcp_demo::store_app;
use replay_ring_redis::{ReadItem, RedisConfig};
use replay_ring_sse::{Epoch, RetentionConfig, StreamId};
use rmcp::model::ServerJsonRpcMessage;
use rmcp::transport::streamable_http_server::session::{EventStore, ServerSseMessage};
use serde_json::{json, Value};

mod in_process;
mod messages;
#[path = "../../redis/tests/common/mod.rs"]
mod redis_support;

use in_process::{
    call, delete, events_from, get, initialize, json_body, long_task_paced, post, replayed_from,
    Sse,
};
use messages::{assert_ends_with_a_retry_hint, progress, progress_of};
use redis_support::RedisServer;

const LIMIT: Duration = Duration::from_secs(10);

/// Fails fast while Redis is down (the tests kill it).
fn quick_config() -> RedisConfig {
    RedisConfig {
        response_timeout: Duration::from_millis(500),
        connect_timeout: Duration::from_millis(500),
        ..RedisConfig::default()
    }
}

async fn store_on(server: &RedisServer, epoch: Epoch) -> RingEventStore {
    store_with(server, epoch, quick_config()).await
}

async fn store_with(server: &RedisServer, epoch: Epoch, config: RedisConfig) -> RingEventStore {
    let log = RedisEventLog::connect(&server.url(), config)
        .await
        .expect("connect to redis");
    RingEventStore::with_redis_epoch(StoreConfig::default(), log, epoch)
}

#[tokio::test]
async fn every_event_is_in_redis_with_its_id_and_message() {
    let server = RedisServer::start();
    let store = store_on(&server, Epoch::new(0xabc)).await;
    let priming = ServerSseMessage::retry(Duration::from_millis(700));
    assert_eq!(
        store.store_event("req-a", &priming).await.unwrap(),
        "s1.abc.1"
    );
    for p in 1..=3 {
        store.store_event("req-a", &progress(p)).await.unwrap();
    }
    // Read the Redis stream directly, as another replica would.
    let backend = store.event_log().unwrap().backend();
    let stream = backend
        .open(&StreamId::new("abc-s1").unwrap())
        .await
        .expect("the stream is in Redis");
    let mut reader = stream.resume(Some(0)).await.unwrap();
    let ReadItem::Events(events) = reader.recv().await.unwrap() else {
        panic!("no events in Redis");
    };
    let ids: Vec<u64> = events.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, [1, 2, 3, 4]);
    let first: Value = serde_json::from_slice(&events[0].1).unwrap();
    assert_eq!(first, json!({"message": null, "retry": 700}));
    for (p, (_, payload)) in (1..=3).zip(&events[1..]) {
        let v: Value = serde_json::from_slice(payload).unwrap();
        assert_eq!(v["message"]["params"]["progress"].as_f64(), Some(p as f64));
    }
}

#[tokio::test]
async fn redis_down_ends_the_stream_after_the_last_durable_event_never_a_silent_gap() {
    let mut server = RedisServer::start();
    let store = store_on(&server, Epoch::new(0xabc)).await;
    for p in 1..=3 {
        store.store_event("req-a", &progress(p)).await.unwrap();
    }
    let mut live = store.resume_stream(None, b"s1.abc.0").unwrap();
    for p in 1..=3 {
        let m = tokio::time::timeout(LIMIT, live.next())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(progress_of(&m), Some(p));
    }
    server.kill();
    // The ring has room, so the event gets id 4 in the ring, but Redis cannot store it: the
    // call fails explicitly and the stream ends.
    let err = store.store_event("req-a", &progress(4)).await.unwrap_err();
    assert!(err.to_string().contains("Redis"), "{err}");
    assert!(store.store_event("req-a", &progress(5)).await.is_err());
    // The live connection never gets id 4 (not durable): it ends explicitly (this stream answers
    // no request, so with a retry hint; a request stream gets a JSON-RPC error).
    assert_ends_with_a_retry_hint(&mut live, LIMIT).await;
    assert_eq!(store.metrics().event_log_failures, 1);
}

// ---------------------------------------------------------------------------------------------
// Two replicas (two demo apps, two stores) on one Redis, over HTTP in-process.

fn seq_of(id: &str) -> u64 {
    id.rsplit_once('.').unwrap().1.parse().unwrap()
}

/// The progress value of an event's data, if it is a progress notification.
fn progress_in(e: &Sse) -> Option<u64> {
    let v: Value = serde_json::from_str(&e.data).ok()?;
    v["params"]["progress"].as_f64().map(|p| p as u64)
}

struct Replicas {
    server: RedisServer,
    a: Router,
    b: Router,
    store_a: RingEventStore,
    store_b: RingEventStore,
}

async fn replicas() -> Replicas {
    let server = RedisServer::start();
    let store_a = store_on(&server, Epoch::generate()).await;
    let store_b = store_on(&server, Epoch::generate()).await;
    Replicas {
        a: store_app(store_a.clone()),
        b: store_app(store_b.clone()),
        store_a,
        store_b,
        server,
    }
}

#[tokio::test]
async fn a_tool_call_cut_on_one_replica_resumes_on_another_from_redis_exactly_once_in_order() {
    const N: u64 = 20;
    let r = replicas().await;
    let session = initialize(&r.a).await;
    let resp = call(&r.a, post(Some(&session), long_task_paced(1, N, 25))).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body();
    // The priming event and the first five progress notifications, then the connection is cut.
    let before = events_from(&mut body, 6).await;
    drop(body);
    let seen: Vec<u64> = before.iter().filter_map(progress_in).collect();
    assert_eq!(seen, [1, 2, 3, 4, 5]);
    let cursor = before.last().unwrap().id.clone().unwrap();
    // The reconnect lands on replica B, which has never seen this MCP session.
    let resumed = call(&r.b, get(&session, Some(&cursor))).await;
    assert_eq!(resumed.status(), StatusCode::OK);
    let after = replayed_from(&mut resumed.into_body(), &cursor, 1000).await;
    // Ids continue the cursor exactly, one by one, on the same stream.
    let prefix = cursor.rsplit_once('.').unwrap().0;
    for (expected, e) in (seq_of(&cursor) + 1..).zip(&after) {
        let id = e.id.as_deref().expect("every event has an id");
        assert_eq!(id.rsplit_once('.').unwrap().0, prefix);
        assert_eq!(seq_of(id), expected, "ids skipped or repeated: {after:?}");
    }
    let progress: Vec<u64> = after.iter().filter_map(progress_in).collect();
    assert_eq!(progress, (6..=N).collect::<Vec<_>>(), "{after:?}");
    // The stream ends with the tool's result, and then the connection ends.
    let result: Value = serde_json::from_str(&after.last().unwrap().data).unwrap();
    assert_eq!(result["id"], json!(1));
    assert!(result["result"].is_object(), "{result}");
    assert_eq!(r.store_a.metrics().event_log_failures, 0);

    // The stream is complete: a resume at its last id is told so, on either replica.
    let last = after.last().unwrap().id.clone().unwrap();
    let gone = call(&r.b, get(&session, Some(&last))).await;
    assert_eq!(gone.status(), StatusCode::GONE);
    assert_eq!(
        json_body(gone).await["error"]["data"]["error"],
        "stream_complete"
    );
    let gone = call(&r.a, get(&session, Some(&last))).await;
    assert_eq!(gone.status(), StatusCode::GONE);
}

#[tokio::test]
async fn another_replica_checks_the_session_and_refuses_unreplayable_cursors_explicitly() {
    let mut r = replicas().await;
    let session = initialize(&r.a).await;
    let resp = call(&r.a, post(Some(&session), long_task_paced(1, 4, 0))).await;
    let events = events_from(&mut resp.into_body(), 100).await;
    let ids: Vec<String> = events.iter().filter_map(|e| e.id.clone()).collect();
    assert_eq!(ids.len(), 6, "priming, 4 progress, result: {events:?}");
    let (first, head) = (ids[0].clone(), seq_of(&ids[5]));
    let prefix = first.rsplit_once('.').unwrap().0.to_owned();

    // Another MCP session cannot resume this stream: 404, as for an unknown session.
    let foreign = call(&r.b, get("not-the-owner", Some(&ids[2]))).await;
    assert_eq!(foreign.status(), StatusCode::NOT_FOUND);
    // Ahead of the head: 409 with the window.
    let ahead = call(&r.b, get(&session, Some(&format!("{prefix}.{}", head + 3)))).await;
    assert_eq!(ahead.status(), StatusCode::CONFLICT);
    assert_eq!(ahead.headers()["replay-head"], head.to_string().as_str());
    // A resume with id 3 acknowledges 1..=3; a later one from 1 is below the floor: 416.
    let resumed = call(&r.b, get(&session, Some(&ids[2]))).await;
    assert_eq!(resumed.status(), StatusCode::OK);
    let rest = replayed_from(&mut resumed.into_body(), &ids[2], 100).await;
    assert_eq!(rest.len(), 3, "{rest:?}");
    let gap = call(&r.b, get(&session, Some(&ids[0]))).await;
    assert_eq!(gap.status(), StatusCode::RANGE_NOT_SATISFIABLE);
    let body = json_body(gap).await;
    assert_eq!(body["error"]["data"]["error"], "replay_gap");
    // A stream that never existed in Redis: 404.
    let unknown = call(&r.b, get(&session, Some(&format!("{prefix}9.1")))).await;
    assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
    // The MCP session is deleted on A: B then answers as A does, 404 `session_lost` (the
    // DELETE is answered once Redis has the record).
    assert!(call(&r.a, delete(&session)).await.status().is_success());
    let resp = call(&r.b, get(&session, Some(&ids[3]))).await;
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    assert_eq!(
        json_body(resp).await["error"]["data"]["error"],
        "session_lost"
    );
    // Redis down: 503 with Retry-After, never an empty 200.
    r.server.kill();
    let down = call(&r.b, get(&session, Some(&ids[3]))).await;
    assert_eq!(down.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(down.headers()["retry-after"], "1", "as every other 503");
}

/// A `DELETE` that rmcp refuses (here from a page of a foreign origin: 403) ends nothing, so the
/// other replicas go on serving the session's resumes. One that rmcp accepts is recorded in Redis
/// before it is answered: from then on every replica answers 404 `session_lost`.
#[tokio::test]
async fn only_a_delete_that_rmcp_accepts_ends_the_session_on_every_replica() {
    let r = replicas().await;
    let session = initialize(&r.a).await;
    let resp = call(&r.a, post(Some(&session), long_task_paced(1, 2, 0))).await;
    let events = events_from(&mut resp.into_body(), 100).await;
    let ids: Vec<String> = events.iter().filter_map(|e| e.id.clone()).collect();
    assert_eq!(ids.len(), 4, "priming, 2 progress, result: {events:?}");

    let mut foreign = delete(&session);
    foreign
        .headers_mut()
        .insert("origin", "http://evil.example".parse().unwrap());
    assert_eq!(call(&r.a, foreign).await.status(), StatusCode::FORBIDDEN);
    let resumed = call(&r.b, get(&session, Some(&ids[1]))).await;
    assert_eq!(
        resumed.status(),
        StatusCode::OK,
        "a refused DELETE ended the session"
    );
    let rest = replayed_from(&mut resumed.into_body(), &ids[1], 100).await;
    assert_eq!(rest.len(), 2, "{rest:?}");

    assert!(call(&r.a, delete(&session)).await.status().is_success());
    let lost = call(&r.b, get(&session, Some(&ids[2]))).await;
    assert_eq!(lost.status(), StatusCode::NOT_FOUND);
    assert_eq!(
        json_body(lost).await["error"]["data"]["error"],
        "session_lost"
    );
}

/// A deleted session's stream is resumed from Redis by no replica, also once the replica that
/// held it has forgotten it (after `completed_ttl`) and so could not clear its owner record; a
/// session closed without a `DELETE` (for inactivity) is not taken for a deleted one.
#[tokio::test]
async fn a_deleted_sessions_stream_forgotten_before_the_delete_is_not_resumed_from_redis() {
    const COMPLETED_TTL: Duration = Duration::from_millis(100);
    let server = RedisServer::start();
    let log = RedisEventLog::connect(&server.url(), quick_config())
        .await
        .unwrap();
    let config = StoreConfig {
        completed_ttl: COMPLETED_TTL,
        ..StoreConfig::default()
    };
    let store_a = RingEventStore::with_redis_epoch(config, log, Epoch::generate());
    let a = store_app(store_a.clone());
    let b = store_app(store_on(&server, Epoch::generate()).await);
    let session = initialize(&a).await;
    let resp = call(&a, post(Some(&session), long_task_paced(1, 2, 0))).await;
    let events = events_from(&mut resp.into_body(), 100).await;
    let ids: Vec<String> = events.iter().filter_map(|e| e.id.clone()).collect();
    assert_eq!(ids.len(), 4, "priming, 2 progress, result: {events:?}");
    // The passage of time is the subject: the completed stream is forgotten on A after its TTL.
    tokio::time::sleep(COMPLETED_TTL + Duration::from_millis(50)).await;
    store_a.maintain();
    assert!(store_a
        .check_resume(Some(&session), ids[1].as_bytes())
        .is_err());
    // Redis still has it, so A serves it from there, as any replica would.
    let served = call(&a, get(&session, Some(&ids[1]))).await;
    assert_eq!(served.status(), StatusCode::OK);
    // A session rmcp closes for inactivity (its streams are dropped, as here) is not recorded as
    // gone: a session store may restore it with its id, and its streams stay resumable.
    store_a.drop_session(&session);
    let kept = call(&b, get(&session, Some(&ids[1]))).await;
    assert_eq!(kept.status(), StatusCode::OK);
    assert!(call(&a, delete(&session)).await.status().is_success());
    for (replica, app) in [("A", &a), ("B", &b)] {
        let mut answers = Vec::new();
        for _ in 0..100 {
            // The session is recorded as gone in the background, right after the DELETE.
            let resp = call(app, get(&session, Some(&ids[1]))).await;
            answers.push(resp.status());
            if resp.status() == StatusCode::NOT_FOUND {
                assert_eq!(
                    json_body(resp).await["error"]["data"]["error"],
                    "session_lost"
                );
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(
            answers.last(),
            Some(&StatusCode::NOT_FOUND),
            "{replica}: {answers:?}"
        );
    }
}

#[tokio::test]
async fn a_malformed_cursor_is_400_on_every_replica_whether_or_not_it_holds_the_session() {
    let r = replicas().await;
    let session = initialize(&r.a).await;
    // rmcp's own priming id "0", and values that are not event ids at all.
    for cursor in ["0", "garbage!!", "s1.abc.-1", &"9".repeat(200)] {
        for (replica, app) in [("A", &r.a), ("B", &r.b)] {
            let resp = call(app, get(&session, Some(cursor))).await;
            assert_eq!(
                resp.status(),
                StatusCode::BAD_REQUEST,
                "{replica}: {cursor}"
            );
            let body = json_body(resp).await;
            assert_eq!(
                body["error"]["data"]["error"], "invalid_last_event_id",
                "{replica}: {cursor}: {body}"
            );
        }
    }
}

#[tokio::test]
async fn resumes_served_from_redis_are_capped_at_max_readers_per_stream() {
    let r = replicas().await;
    let limit = r.store_b.config().max_readers;
    let session = initialize(&r.a).await;
    // A call that runs for the whole test, cut after its first progress notification.
    let resp = call(&r.a, post(Some(&session), long_task_paced(1, 1000, 50))).await;
    let mut body = resp.into_body();
    let before = events_from(&mut body, 2).await;
    drop(body);
    let cursor = before.last().unwrap().id.clone().unwrap();

    let mut held = Vec::new();
    for _ in 0..limit {
        let resp = call(&r.b, get(&session, Some(&cursor))).await;
        assert_eq!(resp.status(), StatusCode::OK);
        held.push(resp);
    }
    assert_eq!(r.store_b.metrics().readers_active, limit as u64);
    // One more is refused as the owning replica refuses it: 503 with Retry-After.
    let busy = call(&r.b, get(&session, Some(&cursor))).await;
    assert_eq!(busy.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(busy.headers().contains_key("retry-after"));
    assert_eq!(
        json_body(busy).await["error"]["data"]["error"],
        "too_many_readers"
    );
    // A connection that ends gives its place back.
    held.pop();
    assert_eq!(r.store_b.metrics().readers_active, limit as u64 - 1);
    let resumed = call(&r.b, get(&session, Some(&cursor))).await;
    assert_eq!(resumed.status(), StatusCode::OK);
    let next = replayed_from(&mut resumed.into_body(), &cursor, 1).await;
    assert_eq!(
        seq_of(next[0].id.as_deref().unwrap()),
        seq_of(&cursor) + 1,
        "{next:?}"
    );
}

#[tokio::test]
async fn a_request_that_needs_a_new_stream_while_redis_is_down_is_503_with_retry_after() {
    let mut r = replicas().await;
    let session = initialize(&r.a).await;
    r.server.kill();
    // A POST in the session: its stream cannot be created in Redis. The bare error object, as
    // every POST answer of the guard.
    let ping = json!({ "jsonrpc": "2.0", "id": 2, "method": "ping" });
    let resp = call(&r.a, post(Some(&session), ping)).await;
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(resp.headers()["retry-after"], "1");
    assert_eq!(resp.headers()["content-type"], "application/json");
    assert_eq!(json_body(resp).await["error"], "backend_unavailable");
    // The session's GET stream: the JSON-RPC envelope of every GET answer.
    let resp = call(&r.a, get(&session, None)).await;
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(resp.headers().contains_key("retry-after"));
    assert_eq!(
        json_body(resp).await["error"]["data"]["error"],
        "backend_unavailable"
    );
}

#[tokio::test]
async fn redis_failing_mid_call_ends_the_call_with_a_json_rpc_error_after_the_last_durable_event() {
    let mut r = replicas().await;
    let session = initialize(&r.a).await;
    let resp = call(&r.a, post(Some(&session), long_task_paced(7, 200, 20))).await;
    let mut body = resp.into_body();
    let before = events_from(&mut body, 4).await;
    r.server.kill();
    let after = events_from(&mut body, 1000).await;
    let all: Vec<&Sse> = before.iter().chain(&after).collect();
    // Every event sent has the next id: nothing skipped before the end.
    let ids: Vec<u64> = all
        .iter()
        .filter_map(|e| e.id.as_deref())
        .map(seq_of)
        .collect();
    assert_eq!(ids, (1..=ids.len() as u64).collect::<Vec<_>>());
    // The call ends with an explicit JSON-RPC error for its request, naming the cause.
    let last: Value = serde_json::from_str(&all.last().unwrap().data).unwrap();
    assert_eq!(last["id"], json!(7), "{last}");
    assert_eq!(last["error"]["data"]["error"], "stream_closed", "{last}");
    let reason = last["error"]["data"]["reason"].as_str().unwrap();
    assert!(reason.contains("Redis"), "{reason}");
    assert!(all.iter().filter_map(|e| progress_in(e)).count() < 200);
    assert_eq!(r.store_a.metrics().event_log_failures, 1);
    // A resume at the last id sent is told that the stream ended, as at the last id of any
    // stream closed early (the event Redis refused has an id in the ring but was never sent).
    let last_sent = all.iter().rev().find_map(|e| e.id.clone()).unwrap();
    let resp = call(&r.a, get(&session, Some(&last_sent))).await;
    assert_eq!(resp.status(), StatusCode::GONE);
    let body = json_body(resp).await;
    assert_eq!(body["error"]["data"]["error"], "stream_closed", "{body}");
    assert_eq!(
        body["error"]["data"]["head"],
        json!(seq_of(&last_sent)),
        "{body}"
    );
    // The refused event's id was never sent: a cursor there is ahead of the head.
    let prefix = last_sent.rsplit_once('.').unwrap().0;
    let never_sent = format!("{prefix}.{}", seq_of(&last_sent) + 1);
    let resp = call(&r.a, get(&session, Some(&never_sent))).await;
    assert_eq!(resp.status(), StatusCode::CONFLICT);
    assert_eq!(
        resp.headers()["replay-head"],
        seq_of(&last_sent).to_string().as_str()
    );
}

#[tokio::test]
async fn a_stream_whose_replica_is_gone_ends_explicitly_on_the_replica_serving_its_resume() {
    // Short enough to lapse quickly once A is gone, long enough that a loaded machine stalling
    // the test's runtime for a few hundred milliseconds does not let it lapse while A lives (the
    // store renews every third of it).
    const LEASE: Duration = Duration::from_millis(1000);
    let server = RedisServer::start();
    let short_lease = RedisConfig {
        lease: LEASE,
        ..quick_config()
    };
    let log = RedisEventLog::connect(&server.url(), short_lease.clone())
        .await
        .unwrap();
    let a = RingEventStore::with_redis_epoch(StoreConfig::default(), log, Epoch::new(0xa));
    let log = RedisEventLog::connect(&server.url(), short_lease)
        .await
        .unwrap();
    let b = RingEventStore::with_redis_epoch(StoreConfig::default(), log, Epoch::new(0xb));
    // The MCP session's GET stream on replica A (its session is recorded when it is created).
    for p in 1..=2 {
        a.store_event("sess-1:common", &progress(p)).await.unwrap();
    }
    let resumed = b
        .remote_resume(Some("sess-1"), b"s1.a.1")
        .await
        .expect("served from Redis");
    assert_eq!(resumed.status(), StatusCode::OK);
    let mut body = Body::new(resumed.into_body());
    let replayed = replayed_from(&mut body, "s1.a.1", 1).await;
    assert_eq!(replayed[0].id.as_deref(), Some("s1.a.2"));
    // While A lives, its store renews the lease: for three lease periods without events, B's
    // connection carries keep-alive comments only (without the renewals it would end).
    let alive_until = tokio::time::Instant::now() + 3 * LEASE;
    while let Ok(frame) = tokio::time::timeout_at(alive_until, body.frame()).await {
        let data = frame.expect("body ended").unwrap().into_data().unwrap();
        assert!(
            data.starts_with(b":"),
            "ended while the producer lives: {data:?}"
        );
    }
    // Replica A dies (its store and producer with it): the lease lapses without a close.
    drop(a);
    // B's connection ends explicitly (the GET stream answers no request: a retry hint) ...
    let rest = events_from(&mut body, 10).await;
    assert_eq!(rest.len(), 1, "{rest:?}");
    assert!(rest[0].id.is_none() && rest[0].data.is_empty(), "{rest:?}");
    // ... and its reconnect at the last id is told the stream ended, and why.
    let gone = b.remote_resume(Some("sess-1"), b"s1.a.2").await.unwrap();
    assert_eq!(gone.status(), StatusCode::GONE);
    let body = json_body(Response::new(Body::new(gone.into_body()))).await;
    assert_eq!(body["error"]["data"]["error"], "stream_closed", "{body}");
    let reason = body["error"]["data"]["reason"].as_str().unwrap();
    assert!(reason.contains("gone"), "{reason}");
    // Another session is not served at all (the caller answers 404).
    assert!(b.remote_resume(Some("sess-2"), b"s1.a.1").await.is_none());
}

/// Replicas A and B on `server`, and A's session `sess-1` GET stream holding events 1 and 2.
async fn two_replicas_after_two_events(
    server: &RedisServer,
    config: RedisConfig,
) -> (RingEventStore, RingEventStore) {
    let a = store_with(server, Epoch::new(0xa), config.clone()).await;
    let b = store_with(server, Epoch::new(0xb), config).await;
    for p in 1..=2 {
        a.store_event("sess-1:common", &progress(p)).await.unwrap();
    }
    (a, b)
}

/// How many producer leases Redis holds.
fn leases(server: &RedisServer) -> usize {
    redis::cmd("KEYS")
        .arg("*:lease")
        .query::<Vec<String>>(&mut server.raw())
        .unwrap()
        .len()
}

/// A Redis stall longer than the lease lets the lease of an idle stream lapse. Its replica takes
/// it back at its next maintenance, and another replica, which reads a lease missing for a whole
/// renewal interval as the replica gone, looks again after that interval: a resume of the running
/// stream right after the stall is not answered 410.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_streams_lease_that_lapsed_in_a_redis_stall_is_taken_back() {
    const LEASE: Duration = Duration::from_millis(1000);
    let server = RedisServer::start();
    let config = RedisConfig {
        lease: LEASE,
        // B looks at a missing lease again after a third of the lease and two of these.
        response_timeout: Duration::from_secs(2),
        ..quick_config()
    };
    let (a, b) = two_replicas_after_two_events(&server, config).await;
    assert_eq!(leases(&server), 1, "A holds the stream's lease");
    // Redis stops answering for longer than the lease: its clock lets the lease expire.
    server.freeze();
    tokio::time::sleep(LEASE + LEASE / 2).await;
    server.thaw();
    // B resumes the stream at its head at once: a running stream, not one whose replica is gone.
    let resumed = b.remote_resume(Some("sess-1"), b"s1.a.2").await.unwrap();
    assert_eq!(resumed.status(), StatusCode::OK);
    // A's maintenance took the lease back without a new event ...
    assert_eq!(leases(&server), 1, "the lapsed lease was taken back");
    // ... and A's next event continues the same log: the priming event, then the new event.
    a.store_event("sess-1:common", &progress(3)).await.unwrap();
    let mut body = Body::new(resumed.into_body());
    let next = events_from(&mut body, 2).await;
    assert_eq!(next[0].id.as_deref(), Some("s1.a.2"), "{next:?}");
    assert_eq!(next[1].id.as_deref(), Some("s1.a.3"), "{next:?}");
    assert_eq!(progress_in(&next[1]), Some(3), "{next:?}");
}

/// Redis slower than the response timeout: an append's reply is lost and the stream ends, but
/// the close that follows resends the append, and Redis stores it. The replica that produced it
/// counts that event as sent too, so both replicas answer a resume at it alike: the stream ended
/// there (not, on one of them, a cursor ahead of the head).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_the_close_stored_after_its_reply_was_lost_is_the_head_on_every_replica() {
    let server = RedisServer::start();
    let config = RedisConfig {
        response_timeout: Duration::from_millis(1000),
        ..quick_config()
    };
    let (a, b) = two_replicas_after_two_events(&server, config).await;
    // Redis holds every write for 1.8 s (from this reply on): the append of event 3 times out
    // after 1 s, and the close's resend, sent then, is stored once the pause ends.
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(1800)
        .arg("WRITE")
        .query(&mut server.raw())
        .unwrap();
    let failed = a.store_event("sess-1:common", &progress(3)).await;
    assert!(failed.is_err(), "the append's reply was lost: {failed:?}");
    let head: String = redis::cmd("KEYS")
        .arg("*:meta")
        .query::<Vec<String>>(&mut server.raw())
        .unwrap()
        .into_iter()
        .map(|meta| {
            redis::cmd("HGET")
                .arg(meta)
                .arg("head")
                .query::<String>(&mut server.raw())
                .unwrap()
        })
        .collect();
    assert_eq!(head, "3", "the close stored event 3");
    // At the head of the ended stream, on either replica: 410, the stream ended.
    match a.check_resume(Some("sess-1"), b"s1.a.3") {
        Ok(state) => panic!("A resumes an ended stream at its head: {state:?}"),
        Err(refusal) => assert_eq!(refusal_status(&refusal), StatusCode::GONE, "{refusal:?}"),
    }
    let on_b = b.remote_resume(Some("sess-1"), b"s1.a.3").await.unwrap();
    assert_eq!(on_b.status(), StatusCode::GONE);
}

/// A push waiting for room holds its stream's writer for up to the backpressure bound, longer
/// than a lease here: the lease is renewed all the same, so other replicas do not read the stream
/// as gone while it waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_waiting_for_room_longer_than_a_lease_keeps_its_lease() {
    const LEASE: Duration = Duration::from_millis(1000);
    let server = RedisServer::start();
    let config = RedisConfig {
        lease: LEASE,
        ..quick_config()
    };
    let log = RedisEventLog::connect(&server.url(), config).await.unwrap();
    let store_config = StoreConfig {
        capacity: 4,
        retention: RetentionConfig {
            resumption_window: Duration::from_secs(30),
            backpressure_timeout: 3 * LEASE,
        },
        ..StoreConfig::default()
    };
    let a = RingEventStore::with_redis_epoch(store_config, log, Epoch::new(0xa));
    for p in 1..=4 {
        a.store_event("req-a", &progress(p)).await.unwrap();
    }
    // Nobody reads: the fifth event waits for room until the bound.
    let waiting = {
        let a = a.clone();
        tokio::spawn(async move { a.store_event("req-a", &progress(5)).await })
    };
    // Looked at every tenth of a lease for two and a half leases.
    let until = tokio::time::Instant::now() + LEASE * 5 / 2;
    while tokio::time::Instant::now() < until {
        assert_eq!(leases(&server), 1, "the lease lapsed while the push waited");
        tokio::time::sleep(LEASE / 10).await;
    }
    assert!(
        !waiting.is_finished(),
        "the push waits for room until the bound"
    );
    let ended = waiting.await.unwrap().unwrap_err();
    assert!(ended.to_string().contains("backpressure"), "{ended}");
}

#[tokio::test]
async fn redis_refusing_an_event_out_of_memory_ends_the_stream_explicitly() {
    let server = RedisServer::start_with(&["--maxmemory", "4mb"]);
    // Redis answers the refusal at once; the default reply timeout keeps a stalled machine from
    // turning a slow append reply into a timeout, which is a different test.
    let store = store_with(&server, Epoch::new(0xabc), RedisConfig::default()).await;
    let big = "x".repeat(64 * 1024);
    let event = |p: u64| -> ServerSseMessage {
        let msg: ServerJsonRpcMessage = serde_json::from_value(json!({
            "jsonrpc": "2.0", "method": "notifications/progress",
            "params": {"progressToken": "t", "progress": p, "message": big}
        }))
        .unwrap();
        ServerSseMessage::from_message(msg)
    };
    let mut stored = 0;
    let refusal = loop {
        // The MCP session's GET stream: its session is recorded with it, so replica B serves it.
        match store.store_event("sess-1:common", &event(stored + 1)).await {
            Ok(_) => stored += 1,
            Err(e) => break e.to_string(),
        }
        assert!(stored < 1000, "Redis never refused");
    };
    assert!(refusal.contains("Redis"), "{refusal}");
    assert!(refusal.to_lowercase().contains("memory"), "{refusal}");
    assert!(stored > 0);
    // Replica B, resuming from Redis, gets the same events and the same end (Redis recorded the
    // close), not keep-alives forever.
    let b = store_on(&server, Epoch::new(0xb)).await;
    let resumed = b.remote_resume(Some("sess-1"), b"s1.abc.0").await.unwrap();
    assert_eq!(resumed.status(), StatusCode::OK);
    let events = replayed_from(&mut Body::new(resumed.into_body()), "s1.abc.0", 10_000).await;
    let ids: Vec<u64> = events
        .iter()
        .filter_map(|e| e.id.as_deref())
        .map(seq_of)
        .collect();
    assert_eq!(ids, (1..=stored).collect::<Vec<_>>());
    assert_eq!(events.len() as u64, stored + 1, "ends with a retry hint");
    assert!(
        events.last().unwrap().id.is_none(),
        "ends with a retry hint"
    );
    // The stream is over; a reader gets exactly the events Redis took, then the explicit end.
    assert!(store
        .store_event("sess-1:common", &progress(0))
        .await
        .is_err());
    let mut replay = store.resume_stream(Some("sess-1"), b"s1.abc.0").unwrap();
    for p in 1..=stored {
        let m = tokio::time::timeout(LIMIT, replay.next())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(progress_of(&m), Some(p));
    }
    let last = tokio::time::timeout(LIMIT, replay.next())
        .await
        .unwrap()
        .unwrap();
    assert!(
        last.message.is_none() && last.event_id.is_none(),
        "{last:?}"
    );
    assert!(tokio::time::timeout(LIMIT, replay.next())
        .await
        .unwrap()
        .is_none());
    assert_eq!(store.metrics().event_log_failures, 1);
}

/// Two requests that create a session's GET stream at once (rmcp calls `store_event` for
/// `<session>:common` from both): both events go to one stream, and the stream the loser created
/// in Redis is deleted instead of being left behind until its TTL.
#[tokio::test]
async fn a_stream_created_twice_at_once_leaves_one_stream_in_redis() {
    let server = RedisServer::start();
    let store = store_on(&server, Epoch::new(0xabc)).await;
    let (one, two) = (progress(1), progress(2));
    let (a, b) = tokio::join!(
        store.store_event("session-1:common", &one),
        store.store_event("session-1:common", &two),
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    let stream_of = |id: &str| id.rsplit_once('.').unwrap().0.to_owned();
    assert_eq!(stream_of(&a), stream_of(&b), "{a} and {b}: one stream");
    let metas: Vec<String> = redis::cmd("KEYS")
        .arg("*:meta")
        .query(&mut server.raw())
        .unwrap();
    assert_eq!(metas.len(), 1, "streams in Redis: {metas:?}");
    let owners: Vec<String> = redis::cmd("KEYS")
        .arg("*:owner")
        .query(&mut server.raw())
        .unwrap();
    assert_eq!(owners.len(), 1, "session owner keys in Redis: {owners:?}");
}
