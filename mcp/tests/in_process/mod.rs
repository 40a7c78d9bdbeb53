//! Requests to the demo app in-process (no sockets), and its SSE responses parsed into events:
//! shared by the HTTP tests on the in-process store and on the Redis event log.
#![allow(dead_code)]

use std::time::Duration;

use axum::body::Body;
use axum::Router;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower::ServiceExt;

/// How long a response, or the next frame of a streamed body, may take before the test fails.
pub const RESPONSE_LIMIT: Duration = Duration::from_secs(10);

/// A JSON-RPC POST to `/mcp`, in `session` if given.
pub fn post(session: Option<&str>, body: Value) -> Request<Body> {
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

/// A GET of `/mcp` in `session`: the standalone stream, or a resume from `last_event_id`.
pub fn get(session: &str, last_event_id: Option<&str>) -> Request<Body> {
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

/// A `DELETE` of `/mcp` ending `session`.
pub fn delete(session: &str) -> Request<Body> {
    Request::delete("/mcp")
        .header("host", "127.0.0.1")
        .header("mcp-protocol-version", "2025-11-25")
        .header("mcp-session-id", session)
        .body(Body::empty())
        .unwrap()
}

pub async fn call(app: &Router, req: Request<Body>) -> Response<Body> {
    tokio::time::timeout(RESPONSE_LIMIT, app.clone().oneshot(req))
        .await
        .expect("no response")
        .unwrap()
}

/// One parsed SSE event: id, retry, data.
#[derive(Debug, Default, Clone)]
pub struct Sse {
    pub id: Option<String>,
    pub retry: Option<u64>,
    pub data: String,
}

/// Reads events until the body ends or `max` events were read.
pub async fn events(resp: Response<Body>, max: usize) -> Vec<Sse> {
    events_from(&mut resp.into_body(), max).await
}

/// Reads a resumed connection's events as [`events`] does, checks that the first is the priming
/// event naming `cursor` (its id, no data, a `retry:` hint), and returns the others.
pub async fn replayed(resp: Response<Body>, cursor: &str, max: usize) -> Vec<Sse> {
    replayed_from(&mut resp.into_body(), cursor, max).await
}

/// [`replayed`] on a body that stays usable: the priming event and up to `max` events after it.
pub async fn replayed_from(body: &mut Body, cursor: &str, max: usize) -> Vec<Sse> {
    let mut got = events_from(body, max + 1).await;
    assert!(!got.is_empty(), "a resumed connection sent nothing");
    let priming = got.remove(0);
    assert_eq!(priming.id.as_deref(), Some(cursor), "{priming:?}");
    assert!(
        priming.data.is_empty() && priming.retry.is_some(),
        "{priming:?}"
    );
    got
}

/// Reads events from `body` until it ends or `max` events were read; the body stays usable.
pub async fn events_from(body: &mut Body, max: usize) -> Vec<Sse> {
    let mut buf = String::new();
    let mut out = Vec::new();
    while out.len() < max {
        let Some(frame) = tokio::time::timeout(RESPONSE_LIMIT, body.frame())
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

pub async fn json_body(resp: Response<Body>) -> Value {
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("not JSON ({e}): {bytes:?}"))
}

/// Initialises an MCP session (`initialize`, then `notifications/initialized`) and returns its id.
pub async fn initialize(app: &Router) -> String {
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

/// A call of the demo's `long_task` tool: `n` progress notifications `delay_ms` apart, then the
/// result.
pub fn long_task_paced(id: u64, n: u64, delay_ms: u64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "long_task", "arguments": {"n": n, "delay_ms": delay_ms},
        "_meta": {"progressToken": format!("p{id}")}}})
}

/// A call of the demo's `long_task` tool at its default pace.
pub fn long_task(id: u64, n: u64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "long_task", "arguments": {"n": n}, "_meta": {"progressToken": format!("p{id}")}}})
}
