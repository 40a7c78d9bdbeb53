//! The demo app over HTTP in-process (no sockets): sessions, POST streams from the ring, resumes,
//! and the guard's explicit answers — next to rmcp's built-in cache answering an unknown cursor
//! with an empty 200. The guard's tests run twice: on the in-process store and on a store whose
//! event log is on Redis (a private `redis-server` per test).

use std::time::Duration;

use axum::body::Body;
use axum::Router;
use http::{Request, StatusCode};
use replay_ring_mcp::{RedisEventLog, RingEventStore, StoreConfig};
use replay_ring_mcp_demo::{app, store_app, Storage};
use replay_ring_sse::{RetentionConfig, SlowConsumerPolicy};
use serde_json::{json, Value};

mod in_process;
#[path = "../../redis/tests/common/mod.rs"]
mod redis_support;

use in_process::{
    call, delete, events, events_from, get, initialize, json_body, long_task, long_task_paced,
    post, replayed, replayed_from, Sse,
};
use redis_support::RedisServer;

const LIMIT: Duration = Duration::from_secs(5);

/// Which event log the demo app's store runs on.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Ring,
    Redis,
}

/// The demo app, its store, and the redis-server its event log is on (stopped on drop).
struct Fixture {
    app: Router,
    store: RingEventStore,
    _redis: Option<RedisServer>,
}

async fn app_on(kind: Kind, config: StoreConfig) -> Fixture {
    match kind {
        Kind::Ring => {
            let (app, store) = ring_app_with(config);
            Fixture {
                app,
                store,
                _redis: None,
            }
        }
        Kind::Redis => {
            let server = RedisServer::start();
            let log = RedisEventLog::connect(&server.url(), Default::default())
                .await
                .expect("connect to redis");
            let store = RingEventStore::with_redis(config, log);
            Fixture {
                app: store_app(store.clone()),
                store,
                _redis: Some(server),
            }
        }
    }
}

/// Runs each test on both event logs: in process, and on Redis.
macro_rules! on_both_logs {
    ($($name:ident),* $(,)?) => {
        mod ring {
            $( #[tokio::test] async fn $name() { super::$name(super::Kind::Ring).await } )*
        }
        mod redis {
            $( #[tokio::test] async fn $name() { super::$name(super::Kind::Redis).await } )*
        }
    };
}

async fn post_stream_then_resume_replays_exactly_after_the_cursor(kind: Kind) {
    let f = app_on(kind, StoreConfig::default()).await;
    let app = f.app.clone();
    let session = initialize(&app).await;
    let all = events(call(&app, post(Some(&session), long_task(1, 5))).await, 100).await;
    // Priming (id, empty data, retry), 5 progress events, the result: ids 1..=7 of one stream.
    assert_eq!(all.len(), 7, "{all:?}");
    assert!(all[0].data.is_empty() && all[0].retry.is_some());
    let ids: Vec<String> = all.iter().map(|e| e.id.clone().unwrap()).collect();
    let prefix = ids[0].rsplit_once('.').unwrap().0.to_owned();
    assert_eq!(
        ids,
        (1..=7).map(|s| format!("{prefix}.{s}")).collect::<Vec<_>>()
    );
    assert!(
        all[6].data.contains(r#""structuredContent":{"n":5}"#),
        "{}",
        all[6].data
    );

    // The client lost everything after progress 2 (id 3): the resume names its cursor (a priming
    // event), replays ids 4..=7, ends.
    let resp = call(&app, get(&session, Some(&ids[2]))).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let replay = replayed(resp, &ids[2], 100).await;
    let replay_ids: Vec<_> = replay.iter().filter_map(|e| e.id.clone()).collect();
    assert_eq!(replay_ids, ids[3..].to_vec());
    assert!(
        replay[0].data.contains(r#""progress":3.0"#),
        "{:?}",
        replay[0]
    );
}

async fn unreplayable_cursors_get_explicit_json_rpc_errors_never_an_empty_200(kind: Kind) {
    let f = app_on(kind, StoreConfig::default()).await;
    let app = f.app.clone();
    let session = initialize(&app).await;
    let other = initialize(&app).await;
    let all = events(call(&app, post(Some(&session), long_task(1, 5))).await, 100).await;
    let head = all.last().unwrap().id.clone().unwrap();
    let (prefix, _) = head.rsplit_once('.').unwrap();

    // Acknowledge through id 5, so 1..=4 are released.
    let ack = call(&app, get(&session, Some(&format!("{prefix}.5")))).await;
    assert_eq!(ack.status(), StatusCode::OK);
    drop(ack);

    let cases = [
        (session.as_str(), format!("{prefix}.2"), 416, "replay_gap"),
        (
            session.as_str(),
            format!("{prefix}.99"),
            409,
            "cursor_ahead_of_head",
        ),
        (
            session.as_str(),
            "0".to_owned(),
            400,
            "invalid_last_event_id",
        ),
        // Another session's stream is answered like a stream that does not exist.
        (other.as_str(), format!("{prefix}.6"), 404, "stream_lost"),
        (
            "no-such-session",
            format!("{prefix}.6"),
            404,
            "session_lost",
        ),
    ];
    for (sess, cursor, status, code) in cases {
        let resp = call(&app, get(sess, Some(&cursor))).await;
        assert_eq!(resp.status().as_u16(), status, "{cursor} in {sess}");
        assert_eq!(resp.headers()["content-type"], "application/json");
        // Only a stream of this session shows its window.
        let window = resp.headers().contains_key("replay-floor");
        assert_eq!(window, matches!(status, 409 | 416), "{cursor} in {sess}");
        let body = json_body(resp).await;
        assert_eq!(body["jsonrpc"], "2.0");
        assert_eq!(body["error"]["code"], -32000);
        assert_eq!(body["error"]["data"]["error"], code, "{body}");
        if code == "replay_gap" {
            assert_eq!(body["error"]["data"]["floor"], 6, "{body}");
            assert_eq!(body["error"]["data"]["head"], 7, "{body}");
            assert_eq!(body["error"]["data"]["lost_from"], 3, "{body}");
        }
    }
}

async fn standalone_get_primes_with_the_head_and_carries_session_notifications(kind: Kind) {
    let f = app_on(kind, StoreConfig::default()).await;
    let app = f.app.clone();
    let session = initialize(&app).await;
    let resp = call(&app, get(&session, None)).await;
    assert_eq!(resp.status(), StatusCode::OK);
    // Log messages go to the session's GET stream (rmcp routes them there).
    let tool = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "test_tool_with_logging", "arguments": {}}});
    let post_events = events(call(&app, post(Some(&session), tool)).await, 100).await;
    assert!(post_events
        .last()
        .unwrap()
        .data
        .contains("Logging tool completed"));
    let got = events(resp, 5).await;
    // rmcp's retry-only frame, the ring's priming event naming the head (0: nothing yet), then
    // the three log messages with ids 1..=3 of the GET stream.
    let with_ids: Vec<_> = got.iter().filter(|e| e.id.is_some()).collect();
    assert_eq!(with_ids.len(), 4, "{got:?}");
    assert!(with_ids[0].id.as_deref().unwrap().ends_with(".0") && with_ids[0].data.is_empty());
    for (i, e) in with_ids[1..].iter().enumerate() {
        assert!(
            e.id.as_deref().unwrap().ends_with(&format!(".{}", i + 1)),
            "{e:?}"
        );
        assert!(e.data.contains("notifications/message"), "{e:?}");
    }
    assert!(with_ids[3].data.contains("Tool execution completed"));
}

/// A session whose client never opens the GET stream: no client can name that stream before it
/// has connected once, so the log messages rmcp routes there are released rather than kept, and
/// more of them than the window holds never close it or fail the calls that send them (on a
/// Redis log too). A GET opened afterwards carries the next call's messages.
async fn a_get_stream_no_client_opened_never_fills_up(kind: Kind) {
    const CAPACITY: usize = 8;
    let f = app_on(kind, small_window(CAPACITY)).await;
    let app = f.app.clone();
    let session = initialize(&app).await;
    let tool = |id: u64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "test_tool_with_logging", "arguments": {}}})
    };
    // Three log messages per call: 18 through a window of 8, with the backpressure bound
    // (200 ms, counted from the stream's creation) long past for the later calls.
    for id in 1..=6 {
        let got = events(call(&app, post(Some(&session), tool(id))).await, 100).await;
        let last = got.last().expect("an answer");
        assert!(
            last.data.contains("Logging tool completed"),
            "call {id}: {got:?}"
        );
        if id == 1 {
            // The bound is the subject: the later calls come after it.
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    let resp = call(&app, get(&session, None)).await;
    assert_eq!(resp.status(), StatusCode::OK);
    events(call(&app, post(Some(&session), tool(7))).await, 100).await;
    let got = events(resp, 5).await;
    let messages: Vec<_> = got
        .iter()
        .filter(|e| e.data.contains("notifications/message"))
        .collect();
    assert_eq!(messages.len(), 3, "{got:?}");
    // Live from the head: ids 19..=21 of the GET stream, after the 18 sent to nobody.
    assert!(
        messages[0].id.as_deref().unwrap().ends_with(".19"),
        "{got:?}"
    );
}

#[tokio::test]
async fn rmcp_builtin_cache_answers_an_unknown_cursor_with_an_empty_200() {
    // The behaviour the guard exists for (rmcp 3.11 tower.rs "Resume failed ... returning empty
    // stream"): clients read it as a clean end and reconnect forever.
    let (app, _) = app(Storage::BuiltinCache {
        retry: Duration::from_secs(3),
    });
    let session = initialize(&app).await;
    let resp = call(&app, get(&session, Some("999/12345"))).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(events(resp, 10).await.is_empty());
}

async fn a_resume_at_the_final_id_of_a_completed_stream_is_410_stream_complete(kind: Kind) {
    let f = app_on(kind, StoreConfig::default()).await;
    let app = f.app.clone();
    let session = initialize(&app).await;
    let all = events(call(&app, post(Some(&session), long_task(1, 3))).await, 100).await;
    let last = all.last().unwrap().id.clone().unwrap();
    let (prefix, head) = last.rsplit_once('.').unwrap();
    // From the middle: the rest, ending with the result.
    let cursor = format!("{prefix}.2");
    let replay = replayed(call(&app, get(&session, Some(&cursor))).await, &cursor, 100).await;
    assert!(
        replay.last().unwrap().data.contains("structuredContent"),
        "{replay:?}"
    );
    // At the final id there is nothing left to send, ever: an explicit 410, not an empty 200.
    let resp = call(&app, get(&session, Some(&last))).await;
    assert_eq!(resp.status(), StatusCode::GONE);
    assert_eq!(resp.headers()["replay-head"], head);
    let body = json_body(resp).await;
    assert_eq!(body["error"]["data"]["error"], "stream_complete", "{body}");
    assert_eq!(
        body["error"]["data"]["head"],
        head.parse::<u64>().unwrap(),
        "{body}"
    );
}

/// With a resumption window of 0 an event is kept only until the connected client has been sent
/// it (what the demo server's startup warning says): a client that comes back for events it was
/// sent gets an explicit `replay_gap`, never a `200` that skips them.
async fn a_resumption_window_of_zero_keeps_nothing_for_a_reconnect(kind: Kind) {
    let config = StoreConfig {
        retention: RetentionConfig {
            resumption_window: Duration::ZERO,
            ..RetentionConfig::default()
        },
        ..StoreConfig::default()
    };
    let f = app_on(kind, config).await;
    let app = f.app.clone();
    let session = initialize(&app).await;
    let all = events(call(&app, post(Some(&session), long_task(1, 5))).await, 100).await;
    assert_eq!(all.len(), 7, "{all:?}");
    let cursor = all[2].id.clone().unwrap();
    let resp = call(&app, get(&session, Some(&cursor))).await;
    assert_eq!(resp.status(), StatusCode::RANGE_NOT_SATISFIABLE, "{cursor}");
    let body = json_body(resp).await;
    assert_eq!(body["error"]["data"]["error"], "replay_gap", "{body}");
    assert_eq!(body["error"]["data"]["lost_from"], 4, "{body}");
}

/// The demo app on replay-ring with `config`, and its store.
fn ring_app_with(config: StoreConfig) -> (Router, RingEventStore) {
    let (app, store) = app(Storage::ReplayRing(config));
    (app, store.expect("replay-ring storage has a store"))
}

fn small_window(capacity: usize) -> StoreConfig {
    StoreConfig {
        capacity,
        retention: RetentionConfig {
            resumption_window: Duration::from_secs(30),
            backpressure_timeout: Duration::from_millis(200),
        },
        completed_ttl: Duration::from_millis(200),
        ..StoreConfig::default()
    }
}

/// Polls `cond` every few milliseconds until it holds or `limit` passes.
async fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cond()
}

/// Opens `long_task(n)` in `session`, reads its priming event and abandons the connection.
/// Returns the priming id.
async fn abandoned_call(app: &Router, session: &str, id: u64, n: u64) -> String {
    let resp = call(app, post(Some(session), long_task(id, n))).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let priming = events(resp, 1).await;
    priming[0].id.clone().expect("priming id")
}

/// A call abandoned after its priming event, closed by backpressure once its window of eight is
/// full; its client then comes back from the priming id. Checks that the resume gets the seven
/// stored events after it (nothing dropped), then a JSON-RPC error that names its request, and
/// returns what it got with the session.
async fn resume_a_call_closed_by_backpressure(f: &Fixture) -> (String, Vec<Sse>) {
    let (app, store) = (f.app.clone(), &f.store);
    let session = initialize(&app).await;
    let priming = abandoned_call(&app, &session, 41, 50).await;
    assert!(
        eventually(LIMIT, || store.metrics().backpressure_timeouts == 1).await,
        "{:?}",
        store.metrics()
    );
    let resp = call(&app, get(&session, Some(&priming))).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let got = replayed(resp, &priming, 100).await;
    assert_eq!(got.iter().filter(|e| e.id.is_some()).count(), 7, "{got:?}");
    let error: Value = serde_json::from_str(&got.last().unwrap().data).unwrap();
    assert_eq!(error["id"], 41, "{error}");
    assert_eq!(error["error"]["data"]["error"], "stream_closed", "{error}");
    (session, got)
}

async fn a_request_stream_closed_by_backpressure_ends_with_an_error_for_its_request(kind: Kind) {
    let f = app_on(kind, small_window(8)).await;
    let (app, store) = (f.app.clone(), &f.store);
    let (session, got) = resume_a_call_closed_by_backpressure(&f).await;
    // Its last id is answered explicitly, and the stream is forgotten after the TTL.
    let head = got[got.len() - 2].id.clone().unwrap();
    let resp = call(&app, get(&session, Some(&head))).await;
    assert_eq!(resp.status(), StatusCode::GONE);
    assert_eq!(
        json_body(resp).await["error"]["data"]["error"],
        "stream_closed"
    );
    assert!(
        eventually(LIMIT, || {
            store.maintain();
            store.metrics().streams_open == 0
        })
        .await,
        "{:?}",
        store.metrics()
    );
    let resp = call(&app, get(&session, Some(&head))).await;
    match kind {
        // Forgotten in process: nothing is known about the stream any more.
        Kind::Ring => assert_eq!(resp.status(), StatusCode::NOT_FOUND),
        // Redis keeps the stream until its TTL: still answered that it ended, from Redis.
        Kind::Redis => {
            assert_eq!(resp.status(), StatusCode::GONE);
            let body = json_body(resp).await;
            assert_eq!(body["error"]["data"]["error"], "stream_closed", "{body}");
        }
    }
}

/// Resident set size of this process, from /proc (Linux).
fn rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// Abandoned tool calls (the client fires them together, reads each priming event and goes away;
/// the session stays) fill their windows, are closed by backpressure, and are forgotten after the
/// TTL: round after round the store returns to empty and the process does not grow. Their
/// backpressure timeouts run concurrently, so a round takes about one bound, not one per call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandoned_tool_calls_are_released_round_after_round() {
    const CALLS: u64 = 30;
    const ROUNDS: usize = 3;
    let config = StoreConfig {
        capacity: 1024,
        ..small_window(1024)
    };
    let bound = config.retention.backpressure_timeout;
    let (app, store) = ring_app_with(config);
    let session = initialize(&app).await;
    let mut rss = Vec::new();
    for round in 0..ROUNDS {
        // The client fires the calls together, reads each priming event and goes away.
        let calls =
            (0..CALLS).map(|c| abandoned_call(&app, &session, 1000 * round as u64 + c, 1100));
        futures::future::join_all(calls).await;
        // The windows fill up (nobody reads them) and the streams are closed by backpressure.
        let before = round as u64 * CALLS;
        assert!(
            eventually(Duration::from_secs(60), || store
                .metrics()
                .backpressure_timeouts
                > before)
            .await,
            "round {round}: {:?}",
            store.metrics()
        );
        let first = std::time::Instant::now();
        assert!(
            eventually(Duration::from_secs(60), || store
                .metrics()
                .backpressure_timeouts
                == before + CALLS)
            .await,
            "round {round}: {:?}",
            store.metrics()
        );
        let spread = first.elapsed();
        assert!(
            spread < bound * (CALLS as u32) / 3,
            "round {round}: {CALLS} backpressure timeouts took {spread:?} (bound {bound:?}): one after the other"
        );
        assert!(
            eventually(Duration::from_secs(10), || {
                store.maintain();
                let m = store.metrics();
                m.streams_open == 0 && m.retained == 0
            })
            .await,
            "round {round}: closed streams were kept: {:?}",
            store.metrics()
        );
        rss.push(rss_bytes().unwrap_or(0));
    }
    let m = store.metrics();
    println!("RSS after each round (bytes): {rss:?}; {m:?}");
    assert_eq!(m.streams_expired, ROUNDS as u64 * CALLS, "{m:?}");
    // Each round stores about 20 MB of events (30 windows of 1024); what is released is reused.
    let growth = rss[ROUNDS - 1].saturating_sub(rss[0]);
    assert!(
        growth < 12 << 20,
        "RSS grew {} MB over {} rounds: {rss:?}",
        growth >> 20,
        ROUNDS - 1
    );
}

async fn a_repeated_last_event_id_is_refused_as_ambiguous(kind: Kind) {
    let f = app_on(kind, StoreConfig::default()).await;
    let app = f.app.clone();
    let session = initialize(&app).await;
    let all = events(call(&app, post(Some(&session), long_task(1, 3))).await, 100).await;
    let (first, second) = (all[1].id.clone().unwrap(), all[2].id.clone().unwrap());
    let mut req = get(&session, Some(&first));
    req.headers_mut()
        .append("last-event-id", second.parse().unwrap());
    let resp = call(&app, req).await;
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    let body = json_body(resp).await;
    assert_eq!(
        body["error"]["data"]["error"], "invalid_last_event_id",
        "{body}"
    );
    assert_eq!(body["error"]["data"]["reason"], "duplicate", "{body}");
}

async fn a_resume_with_every_reader_slot_taken_is_503_not_an_error_event(kind: Kind) {
    let config = StoreConfig {
        max_readers: 2,
        ..StoreConfig::default()
    };
    let f = app_on(kind, config).await;
    let app = f.app.clone();
    let session = initialize(&app).await;
    let all = events(call(&app, post(Some(&session), long_task(1, 3))).await, 100).await;
    let cursor = all[1].id.clone().unwrap();
    // Two resumes whose bodies are not read yet hold both reader slots.
    let held: Vec<_> =
        futures::future::join_all((0..2).map(|_| call(&app, get(&session, Some(&cursor))))).await;
    assert!(held.iter().all(|r| r.status() == StatusCode::OK));
    let busy = call(&app, get(&session, Some(&cursor))).await;
    assert_eq!(busy.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        busy.headers().contains_key("retry-after"),
        "{:?}",
        busy.headers()
    );
    let body = json_body(busy).await;
    assert_eq!(body["error"]["data"]["error"], "too_many_readers", "{body}");
    assert_eq!(f.store.metrics().resumes_busy, 1);
    // A slot freed: the same cursor replays the rest of the call, result included.
    drop(held);
    let again = call(&app, get(&session, Some(&cursor))).await;
    assert_eq!(again.status(), StatusCode::OK);
    let replay = replayed(again, &cursor, 100).await;
    assert_eq!(replay.len(), all.len() - 2, "{replay:?}");
    assert_eq!(replay.last().unwrap().id, all.last().unwrap().id);
}

async fn a_browser_page_of_another_origin_is_refused(kind: Kind) {
    let f = app_on(kind, StoreConfig::default()).await;
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
    let with_origin = |origin: &str| {
        let mut req = post(None, init.clone());
        req.headers_mut().insert("origin", origin.parse().unwrap());
        req
    };
    for origin in [
        "http://evil.example.com",
        "null",
        "https://127.0.0.1.attacker.test:3000",
    ] {
        let resp = call(&f.app, with_origin(origin)).await;
        assert_eq!(resp.status(), StatusCode::FORBIDDEN, "Origin: {origin}");
        assert!(
            !resp.headers().contains_key("mcp-session-id"),
            "Origin: {origin}"
        );
    }
    for origin in ["http://localhost:3000", "http://127.0.0.1:8080"] {
        let resp = call(&f.app, with_origin(origin)).await;
        assert_eq!(resp.status(), StatusCode::OK, "Origin: {origin}");
    }
    // No Origin at all: not a browser (SDK clients, curl).
    initialize(&f.app).await;
}

async fn a_second_get_stream_takes_over_once_the_first_leaves(kind: Kind) {
    let f = app_on(kind, StoreConfig::default()).await;
    let app = f.app.clone();
    let session = initialize(&app).await;
    let primed = |got: &[Sse]| got.iter().any(|e| e.id.is_some() && e.data.is_empty());
    let mut first = call(&app, get(&session, None)).await.into_body();
    // rmcp's retry frame, then the priming event naming the head: the live stream.
    let got = events_from(&mut first, 2).await;
    assert!(primed(&got), "{got:?}");
    let second = call(&app, get(&session, None)).await;
    assert_eq!(second.status(), StatusCode::OK);
    drop(first);
    // The second carried nothing; once the first has left it ends with a retry hint...
    let got = events(second, 10).await;
    assert!(
        got.iter().all(|e| e.id.is_none() && e.data.is_empty()),
        "{got:?}"
    );
    assert!(got.last().is_some_and(|e| e.retry.is_some()), "{got:?}");
    // ...and its client's reconnect is the live stream.
    let mut third = call(&app, get(&session, None)).await.into_body();
    let got = events_from(&mut third, 2).await;
    assert!(primed(&got), "{got:?}");
}

async fn a_delete_of_an_unknown_session_is_404_session_lost(kind: Kind) {
    let f = app_on(kind, StoreConfig::default()).await;
    let session = initialize(&f.app).await;
    assert!(call(&f.app, delete(&session)).await.status().is_success());
    for gone in [session.as_str(), "never-was-a-session"] {
        let resp = call(&f.app, delete(gone)).await;
        assert_eq!(resp.status(), StatusCode::NOT_FOUND, "{gone}");
        let body = json_body(resp).await;
        assert_eq!(body["error"]["data"]["error"], "session_lost", "{body}");
    }
    // Not a resume: no refused resume is counted.
    assert_eq!(f.store.metrics().resumes_session_lost, 0);
}

/// A client that sends a second request with the id of one still running (a bug: JSON-RPC ids are
/// unique among requests in flight) gets the second answered as usual, and the first ended at
/// once with a JSON-RPC error for its id. rmcp routes the id's response to the second request, so
/// the first would otherwise wait for it until the session closed for inactivity.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_whose_id_is_reused_while_it_runs_ends_with_an_error() {
    let (app, _store) = ring_app_with(StoreConfig::default());
    let session = initialize(&app).await;
    // Paced so that it is still running when the second request comes.
    let first = call(&app, post(Some(&session), long_task_paced(42, 100, 100))).await;
    assert_eq!(first.status(), StatusCode::OK);
    let mut first = first.into_body();
    let started = events_from(&mut first, 2).await;
    assert_eq!(
        started.len(),
        2,
        "priming and the first progress: {started:?}"
    );

    let second = call(&app, post(Some(&session), long_task_paced(42, 1, 0))).await;
    assert_eq!(second.status(), StatusCode::OK);
    let answered = events(second, 100).await;
    let result: Value = serde_json::from_str(&answered.last().unwrap().data).unwrap();
    assert_eq!(
        (&result["id"], &result["result"]["structuredContent"]["n"]),
        (&json!(42), &json!(1)),
        "{result}"
    );

    // The first ends well before its hundred steps would have, with an error naming its id.
    let rest = tokio::time::timeout(LIMIT, events_from(&mut first, 1000))
        .await
        .expect("the first request's stream ended");
    let end: Value = serde_json::from_str(&rest.last().unwrap().data).unwrap();
    assert_eq!(end["id"], 42, "{end}");
    assert!(
        end["error"]["message"]
            .as_str()
            .unwrap()
            .contains("this request's id"),
        "{end}"
    );
}

/// A `DELETE` racing a request of its session: the request's stream may be bound to the session
/// after `close_session` looked for the session's streams. Such a stream must still be ended and
/// forgotten, not held open (and counted under the session's cap) for good. And the POST itself
/// is answered: one that reaches the session's worker as it quits must not wait for it forever
/// (`call` fails after 10 s). These are races: without the manager's check after binding, most
/// runs left a stream behind; without `unless_closed`, about one run in 50 hung a POST when four
/// copies shared two cores.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_racing_its_sessions_delete_leaves_no_stream_behind() {
    const COMPLETED_TTL: Duration = Duration::from_millis(100);
    let store = RingEventStore::new(StoreConfig {
        completed_ttl: COMPLETED_TTL,
        ..StoreConfig::default()
    });
    let app = store_app(store.clone());
    for round in 0..40 {
        let mut races = Vec::new();
        for k in 0..10 {
            let session = initialize(&app).await;
            let (a, b) = (app.clone(), app.clone());
            let call_session = session.clone();
            races.push(tokio::spawn(async move {
                let id = round * 10 + k;
                let resp = call(&a, post(Some(&call_session), long_task_paced(id, 1, 5))).await;
                if resp.status() == StatusCode::OK {
                    let mut body = resp.into_body();
                    let read = events_from(&mut body, 5);
                    let _ = tokio::time::timeout(Duration::from_millis(200), read).await;
                }
            }));
            for _ in 0..k % 3 {
                tokio::task::yield_now().await;
            }
            races.push(tokio::spawn(async move {
                let _ = call(&b, delete(&session)).await;
            }));
        }
        for race in races {
            race.await.unwrap();
        }
    }
    // The passage of time is the subject: ended streams are forgotten after their TTL.
    tokio::time::sleep(COMPLETED_TTL + Duration::from_millis(100)).await;
    store.maintain();
    assert_eq!(store.metrics().streams_open, 0);
}

/// The progress value of an SSE event's JSON-RPC notification, if it is one.
fn progress_of(e: &Sse) -> Option<u64> {
    let v: Value = serde_json::from_str(&e.data).ok()?;
    v["params"]["progress"].as_f64().map(|p| p as u64)
}

/// A client whose POST connection stalls (it stops reading, the connection stays open) resumes on
/// a second connection. The stalled one would hold the window at its position until the producer
/// gives up; the slow-consumer policy cuts it after the write timeout, and the resumed connection
/// gets every event through the result.
async fn a_stalled_connection_is_cut_and_the_resumed_one_gets_every_event(kind: Kind) {
    const N: u64 = 100;
    let config = StoreConfig {
        capacity: 16,
        retention: RetentionConfig {
            resumption_window: Duration::from_millis(100),
            backpressure_timeout: Duration::from_secs(30),
        },
        slow_consumer: SlowConsumerPolicy {
            write_timeout: Some(Duration::from_millis(200)),
            ..SlowConsumerPolicy::default()
        },
        ..StoreConfig::default()
    };
    let f = app_on(kind, config).await;
    let (app, store) = (f.app.clone(), &f.store);
    let session = initialize(&app).await;
    let resp = call(&app, post(Some(&session), long_task_paced(7, N, 1))).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let mut stalled = resp.into_body();
    // The priming event and progress 1..=3, then nothing more is read from this connection.
    let seen = events_from(&mut stalled, 4).await;
    assert_eq!(
        seen.iter().filter_map(progress_of).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    let cursor = seen.last().unwrap().id.clone().unwrap();

    let resumed = events(call(&app, get(&session, Some(&cursor))).await, 1000).await;
    let progress: Vec<u64> = resumed.iter().filter_map(progress_of).collect();
    assert_eq!(progress, (4..=N).collect::<Vec<_>>());
    let result = &resumed.last().unwrap().data;
    assert!(
        result.contains(r#""structuredContent":{"n":100}"#),
        "{result}"
    );
    let m = store.metrics();
    assert_eq!(
        (m.slow_consumers_cut, m.backpressure_timeouts),
        (1, 0),
        "{m:?}"
    );
    drop(stalled);
}

/// A GET without a session (no `Mcp-Session-Id`, or rmcp's stateless 2026-07-28 resume) that
/// names a session's stream is answered like a stream that does not exist: no events, no window,
/// and no acknowledgement, so the session's own resume still gets everything after its cursor.
async fn a_sessions_stream_is_not_resumable_without_the_session(kind: Kind) {
    let f = app_on(kind, StoreConfig::default()).await;
    let app = f.app.clone();
    let session = initialize(&app).await;
    let all = events(call(&app, post(Some(&session), long_task(1, 4))).await, 100).await;
    let ids: Vec<String> = all.iter().map(|e| e.id.clone().unwrap()).collect();
    let (prefix, _) = ids[0].rsplit_once('.').unwrap();
    for version in ["2026-07-28", "2025-11-25"] {
        for cursor in [ids[1].clone(), ids[4].clone(), format!("{prefix}.99")] {
            let req = Request::get("/mcp")
                .header("host", "127.0.0.1")
                .header("accept", "text/event-stream")
                .header("mcp-protocol-version", version)
                .header("last-event-id", &cursor)
                .body(Body::empty())
                .unwrap();
            let resp = call(&app, req).await;
            assert_eq!(resp.status(), StatusCode::NOT_FOUND, "{version} {cursor}");
            assert!(!resp.headers().contains_key("replay-floor"), "{cursor}");
            let body = json_body(resp).await;
            assert_eq!(body["error"]["data"]["error"], "stream_lost", "{body}");
            assert!(body["error"]["data"]["head"].is_null(), "{body}");
        }
    }
    assert_eq!(f.store.metrics().resumes_ok, 0);
    // The session resumes from id 2 and gets 3..: nothing was acknowledged by the others.
    let resp = call(&app, get(&session, Some(&ids[1]))).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let replay: Vec<_> = replayed(resp, &ids[1], 100)
        .await
        .into_iter()
        .filter_map(|e| e.id)
        .collect();
    assert_eq!(replay, ids[2..].to_vec());
}

/// A `DELETE` racing a tool call or a GET of its session: each racing request is served (200) or
/// answered 404 `session_lost`, never 500, and once the sessions are gone the store forgets every
/// stream they had within the completed-stream TTL, including a call's stream that the DELETE
/// cut off before its POST could bind it to the session.
async fn a_delete_racing_requests_of_its_session_leaves_nothing_behind(kind: Kind) {
    let config = StoreConfig {
        completed_ttl: Duration::from_millis(300),
        ..StoreConfig::default()
    };
    let f = app_on(kind, config).await;
    let app = f.app.clone();
    for round in 0..60 {
        let session = initialize(&app).await;
        let request = if round % 3 == 2 {
            get(&session, None)
        } else {
            post(Some(&session), long_task_paced(2, 3, 5))
        };
        let racing = tokio::spawn({
            let app = app.clone();
            async move { call(&app, request).await.status() }
        });
        tokio::task::yield_now().await;
        let deleted = call(&app, delete(&session)).await.status();
        assert!(matches!(deleted.as_u16(), 200 | 202 | 404), "{deleted}");
        let status = racing.await.unwrap();
        assert!(
            matches!(status.as_u16(), 200 | 404),
            "round {round}: {status}"
        );
    }
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        f.store.maintain();
        let m = f.store.metrics();
        if m.streams_open == 0 && m.retained == 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "streams left behind: {m:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A client that cancels its call (`notifications/cancelled`) gets no response for it, so the
/// call's stream ends: the POST's connection closes once it has sent what was stored, instead of
/// idling on keep-alives until the session ends, and a resume at its last id is 410.
async fn a_cancelled_call_ends_its_stream(kind: Kind) {
    let f = app_on(kind, StoreConfig::default()).await;
    let app = f.app.clone();
    let session = initialize(&app).await;
    let resp = call(&app, post(Some(&session), long_task_paced(2, 50, 100))).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body();
    // The priming event and the first progress notification: the call is running.
    let mut seen = events_from(&mut body, 2).await;
    assert!(seen[1].data.contains("notifications/progress"), "{seen:?}");
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 2, "reason": "the user gave up"}});
    assert_eq!(
        call(&app, post(Some(&session), cancel)).await.status(),
        StatusCode::ACCEPTED
    );
    // The rest of the body, to its end (each frame within the response limit; keep-alives alone
    // would not end it, and the whole call would take 5 s).
    let started = tokio::time::Instant::now();
    seen.extend(events_from(&mut body, usize::MAX).await);
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "ended by the cancel"
    );
    assert!(
        seen.iter().all(|e| !e.data.contains("\"result\"")),
        "no response after the cancel: {seen:?}"
    );
    let last = seen.iter().rev().find_map(|e| e.id.clone()).unwrap();
    let resume = call(&app, get(&session, Some(&last))).await;
    assert_eq!(resume.status(), StatusCode::GONE);
    let body = json_body(resume).await;
    assert_eq!(body["error"]["data"]["error"], "stream_complete", "{body}");
}

/// A resume of the GET stream while another connection follows it live is a shadow as well: the
/// session's messages go to the live connection only, never to both; once that one leaves, the
/// shadow ends with a retry hint, and the reconnect with the same cursor replays them.
async fn a_get_stream_resume_beside_a_live_one_delivers_nothing_twice(kind: Kind) {
    let f = app_on(kind, StoreConfig::default()).await;
    let app = f.app.clone();
    let session = initialize(&app).await;
    let mut live = call(&app, get(&session, None)).await.into_body();
    let got = events_from(&mut live, 2).await;
    let cursor = got.iter().find_map(|e| e.id.clone()).expect("primed");
    let resumed = call(&app, get(&session, Some(&cursor))).await;
    assert_eq!(resumed.status(), StatusCode::OK);
    let tool = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "test_tool_with_logging", "arguments": {}}});
    events(call(&app, post(Some(&session), tool)).await, 100).await;
    let messages = |got: &[Sse]| {
        got.iter()
            .filter(|e| e.data.contains("notifications/message"))
            .count()
    };
    assert_eq!(messages(&events_from(&mut live, 3).await), 3);
    drop(live);
    // The shadow names its cursor first, so that a client cut before the retry hint reconnects
    // with it too.
    let got = replayed(resumed, &cursor, 10).await;
    assert_eq!(messages(&got), 0, "{got:?}");
    assert!(got.last().is_some_and(|e| e.retry.is_some()), "{got:?}");
    let again = call(&app, get(&session, Some(&cursor))).await;
    assert_eq!(again.status(), StatusCode::OK);
    let mut again = again.into_body();
    assert_eq!(messages(&replayed_from(&mut again, &cursor, 3).await), 3);
}

/// Concurrent resumes of one request stream are not shadows, unlike the GET stream's: each
/// replays from its own cursor and follows the running call to its response.
async fn concurrent_resumes_of_a_request_stream_each_follow_it_to_the_response(kind: Kind) {
    let f = app_on(kind, StoreConfig::default()).await;
    let app = f.app.clone();
    let session = initialize(&app).await;
    let call_resp = call(&app, post(Some(&session), long_task_paced(1, 6, 20))).await;
    let mut post_body = call_resp.into_body();
    // Priming (id 1) and progress 1 (id 2); the connection then drops while the call runs.
    let first = events_from(&mut post_body, 2).await;
    drop(post_body);
    let ids: Vec<String> = first.iter().map(|e| e.id.clone().unwrap()).collect();
    let a = call(&app, get(&session, Some(&ids[0]))).await;
    let b = call(&app, get(&session, Some(&ids[1]))).await;
    assert_eq!((a.status(), b.status()), (StatusCode::OK, StatusCode::OK));
    let (a, b) = tokio::join!(replayed(a, &ids[0], 100), replayed(b, &ids[1], 100));
    // Progress 2..=6 and the result after them: ids up to 8.
    let prefix = ids[0].rsplit_once('.').unwrap().0;
    for (got, from) in [(a, 2), (b, 3)] {
        let got_ids: Vec<_> = got.iter().filter_map(|e| e.id.clone()).collect();
        let want: Vec<_> = (from..=8).map(|s| format!("{prefix}.{s}")).collect();
        assert_eq!(got_ids, want, "{got:?}");
        let result = &got.last().unwrap().data;
        assert!(
            result.contains(r#""structuredContent":{"n":6}"#),
            "{result}"
        );
    }
}

/// With polling (`frames_per_connection`), the connection that delivers the last event of a
/// stream closed early still ends with the JSON-RPC error for its request, not with a retry hint
/// whose reconnect could only be told 410: the error is what the SDKs surface to the caller.
async fn polling_still_ends_a_stream_closed_early_with_its_error(kind: Kind) {
    let config = StoreConfig {
        frames_per_connection: Some(7),
        ..small_window(8)
    };
    let f = app_on(kind, config).await;
    // Seven events after the priming id fill the resume's quota exactly, with the last one.
    resume_a_call_closed_by_backpressure(&f).await;
}

/// A cancellation naming a request the server has not seen (an id not issued yet) is not kept
/// for whichever later request reuses that id: the later call gets its result.
async fn a_cancellation_of_an_unknown_request_does_not_end_a_later_one(kind: Kind) {
    let f = app_on(kind, StoreConfig::default()).await;
    let app = f.app.clone();
    let session = initialize(&app).await;
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 42, "reason": "not issued"}});
    assert_eq!(
        call(&app, post(Some(&session), cancel)).await.status(),
        StatusCode::ACCEPTED
    );
    // Past the short time a cancellation may wait for its request's stream to be bound: the
    // passage of time is what this is about.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let got = events(
        call(&app, post(Some(&session), long_task(42, 2))).await,
        100,
    )
    .await;
    assert!(
        got.last()
            .is_some_and(|e| e.data.contains(r#""structuredContent":{"n":2}"#)),
        "{got:?}"
    );
}

/// A tool that disconnects its own request stream as it starts (SEP-1699, the demo's
/// `test_reconnection`) gets the POST connection ended after the priming event, with a `retry:`
/// hint; the result waits for the client's resume. With a Redis event log the stream's owner is
/// recorded between binding the stream and opening its connection: a disconnect landing then
/// must not be lost.
async fn a_disconnect_as_the_call_starts_ends_the_post_connection_after_priming(kind: Kind) {
    let f = app_on(kind, StoreConfig::default()).await;
    let app = f.app.clone();
    let session = initialize(&app).await;
    for id in 1..=5 {
        let call_tool = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "test_reconnection", "arguments": {}}});
        let got = events(call(&app, post(Some(&session), call_tool)).await, 10).await;
        let cursor = got[0].id.clone().expect("a priming id");
        assert!(
            got.iter().all(|e| e.data.is_empty()),
            "call {id}: the POST connection carried a message: {got:?}"
        );
        assert!(got.last().is_some_and(|e| e.retry.is_some()), "{got:?}");
        let resumed = replayed(call(&app, get(&session, Some(&cursor))).await, &cursor, 10).await;
        assert!(
            resumed
                .last()
                .is_some_and(|e| e.data.contains("Reconnection test completed successfully")),
            "call {id}: {resumed:?}"
        );
    }
}

on_both_logs!(
    post_stream_then_resume_replays_exactly_after_the_cursor,
    unreplayable_cursors_get_explicit_json_rpc_errors_never_an_empty_200,
    standalone_get_primes_with_the_head_and_carries_session_notifications,
    a_resume_at_the_final_id_of_a_completed_stream_is_410_stream_complete,
    a_request_stream_closed_by_backpressure_ends_with_an_error_for_its_request,
    a_repeated_last_event_id_is_refused_as_ambiguous,
    a_stalled_connection_is_cut_and_the_resumed_one_gets_every_event,
    a_resume_with_every_reader_slot_taken_is_503_not_an_error_event,
    a_browser_page_of_another_origin_is_refused,
    a_second_get_stream_takes_over_once_the_first_leaves,
    a_delete_of_an_unknown_session_is_404_session_lost,
    a_sessions_stream_is_not_resumable_without_the_session,
    a_delete_racing_requests_of_its_session_leaves_nothing_behind,
    a_cancelled_call_ends_its_stream,
    a_get_stream_resume_beside_a_live_one_delivers_nothing_twice,
    concurrent_resumes_of_a_request_stream_each_follow_it_to_the_response,
    polling_still_ends_a_stream_closed_early_with_its_error,
    a_cancellation_of_an_unknown_request_does_not_end_a_later_one,
    a_get_stream_no_client_opened_never_fills_up,
    a_resumption_window_of_zero_keeps_nothing_for_a_reconnect,
    a_disconnect_as_the_call_starts_ends_the_post_connection_after_priming,
);
