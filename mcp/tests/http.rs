//! The demo app over HTTP in-process (no sockets): sessions, POST streams from the ring, resumes,
//! and the guard's explicit answers — next to rmcp's built-in cache answering an unknown cursor
//! with an empty 200.

use std::time::Duration;

use axum::body::Body;
use axum::Router;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use replay_ring_mcp::demo::{app, Storage};
use replay_ring_mcp::StoreConfig;
use serde_json::{json, Value};
use tower::ServiceExt;

const LIMIT: Duration = Duration::from_secs(5);

fn post(session: Option<&str>, body: Value) -> Request<Body> {
    let mut b = Request::post("/mcp")
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25");
    if let Some(s) = session {
        b = b.header("mcp-session-id", s);
    }
    b.body(Body::from(body.to_string())).unwrap()
}

fn get(session: &str, last_event_id: Option<&str>) -> Request<Body> {
    let mut b = Request::get("/mcp")
        .header("host", "127.0.0.1")
        .header("accept", "text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .header("mcp-session-id", session);
    if let Some(id) = last_event_id {
        b = b.header("last-event-id", id);
    }
    b.body(Body::empty()).unwrap()
}

async fn call(app: &Router, req: Request<Body>) -> Response<Body> {
    tokio::time::timeout(LIMIT, app.clone().oneshot(req))
        .await
        .expect("no response")
        .unwrap()
}

/// One parsed SSE event: id, retry, data.
#[derive(Debug, Default, Clone)]
struct Sse {
    id: Option<String>,
    retry: Option<u64>,
    data: String,
}

/// Reads events until the body ends or `max` events were read.
async fn events(resp: Response<Body>, max: usize) -> Vec<Sse> {
    let mut body = resp.into_body();
    let mut buf = String::new();
    let mut out = Vec::new();
    while out.len() < max {
        let Some(frame) = tokio::time::timeout(LIMIT, body.frame())
            .await
            .expect("stream stalled")
        else {
            break;
        };
        if let Ok(data) = frame.unwrap().into_data() {
            buf.push_str(std::str::from_utf8(&data).unwrap());
        }
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            let mut ev = Sse::default();
            let mut any = false;
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("id:") {
                    ev.id = Some(v.trim().to_owned());
                    any = true;
                } else if let Some(v) = line.strip_prefix("retry:") {
                    ev.retry = v.trim().parse().ok();
                    any = true;
                } else if let Some(v) = line.strip_prefix("data:") {
                    ev.data.push_str(v.trim_start());
                    any = true;
                }
            }
            if any {
                out.push(ev);
            }
        }
    }
    out
}

async fn json_body(resp: Response<Body>) -> Value {
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("not JSON ({e}): {bytes:?}"))
}

async fn initialize(app: &Router) -> String {
    let resp = call(
        app,
        post(
            None,
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}),
        ),
    )
    .await;
    assert_eq!(resp.status(), StatusCode::OK);
    let session = resp.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let init = events(resp, 2).await;
    assert!(
        init.iter().any(|e| e.data.contains("2025-11-25")),
        "{init:?}"
    );
    let ack = call(
        app,
        post(
            Some(&session),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        ),
    )
    .await;
    assert_eq!(ack.status(), StatusCode::ACCEPTED);
    session
}

fn long_task(id: u64, n: u64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "long_task", "arguments": {"n": n}, "_meta": {"progressToken": "p"}}})
}

fn ring_app() -> Router {
    app(Storage::ReplayRing(StoreConfig::default())).0
}

#[tokio::test]
async fn post_stream_then_resume_replays_exactly_after_the_cursor() {
    let app = ring_app();
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

    // The client lost everything after progress 2 (id 3): the resume replays ids 4..=7, ends.
    let resp = call(&app, get(&session, Some(&ids[2]))).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let replay = events(resp, 100).await;
    let replay_ids: Vec<_> = replay.iter().filter_map(|e| e.id.clone()).collect();
    assert_eq!(replay_ids, ids[3..].to_vec());
    assert!(
        replay[0].data.contains(r#""progress":3.0"#),
        "{:?}",
        replay[0]
    );
}

#[tokio::test]
async fn unreplayable_cursors_get_explicit_json_rpc_errors_never_an_empty_200() {
    let app = ring_app();
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
        (
            other.as_str(),
            format!("{prefix}.6"),
            400,
            "foreign_session",
        ),
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

#[tokio::test]
async fn standalone_get_primes_with_the_head_and_carries_session_notifications() {
    let app = ring_app();
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
