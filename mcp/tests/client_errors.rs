//! rmcp's client errors through the guard: every one is JSON with the status the case calls for
//! (the bare error object for a `POST`, a JSON-RPC error with `id: null` otherwise); a body that
//! did not parse or arrive is a client error, not 415 or 500; a request naming an unknown session
//! is 404 `session_lost`.

use axum::body::Body;
use http::{Method, Request, StatusCode};
use replay_ring_mcp::{RingEventStore, StoreConfig};
use replay_ring_mcp_demo::store_app;
use serde_json::{json, Value};

mod in_process;

use in_process::{call, delete, get, initialize, json_body, post};

/// `post` with a raw body and content type.
fn post_raw(session: Option<&str>, content_type: &str, body: &'static str) -> Request<Body> {
    let mut req = post(session, json!(null));
    *req.body_mut() = Body::from(body);
    req.headers_mut()
        .insert("content-type", content_type.parse().unwrap());
    req
}

/// The error object of the guard's JSON answer to a request with `method`, checked for its shape:
/// a `POST` gets the bare object (never an id-less JSON-RPC error, which rmcp 3.11's client takes
/// for a message, drops, and then waits for its call's answer forever); any other request a
/// JSON-RPC error with `id: null` and code -32000 whose `data` is the object.
fn error_object(method: &Method, reply: &Value) -> Value {
    if method == Method::POST {
        assert!(reply.get("jsonrpc").is_none(), "{reply}");
        assert!(reply.get("id").is_none(), "{reply}");
        assert!(reply["error"].is_string(), "{reply}");
        return reply.clone();
    }
    assert_eq!(reply["jsonrpc"], "2.0", "{reply}");
    assert_eq!(reply["id"], Value::Null, "{reply}");
    assert_eq!(reply["error"]["code"], -32000, "{reply}");
    let data = &reply["error"]["data"];
    assert_eq!(reply["error"]["message"], data["message"], "{reply}");
    data.clone()
}

#[tokio::test]
async fn a_post_body_that_is_not_json_rpc_is_400_invalid_json_rpc_not_415() {
    let app = store_app(RingEventStore::new(StoreConfig::default()));
    let session = initialize(&app).await;
    let bodies = [
        "{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": ",
        "not json at all",
        "{\"hello\": \"world\"}",
        "",
    ];
    for in_session in [None, Some(session.as_str())] {
        for content_type in ["application/json", "Application/JSON; charset=utf-8"] {
            for body in bodies {
                let resp = call(&app, post_raw(in_session, content_type, body)).await;
                let what = format!("{body:?} as {content_type}, session {in_session:?}");
                assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{what}");
                assert_eq!(resp.headers()["content-type"], "application/json", "{what}");
                let reply = error_object(&Method::POST, &json_body(resp).await);
                assert_eq!(reply["error"], "invalid_json_rpc", "{what}: {reply}");
                // What did not parse: for a body that is not JSON, with its position.
                let detail = reply["detail"].as_str().unwrap_or_default();
                assert!(!detail.is_empty(), "{what}: {reply}");
                let is_json = serde_json::from_str::<Value>(body).is_ok();
                assert!(
                    is_json || detail.contains("line 1 column"),
                    "{what}: {reply}"
                );
            }
        }
        // Another content type is still refused as a media type (rmcp's 415).
        let resp = call(&app, post_raw(in_session, "text/plain", "{}")).await;
        assert_eq!(resp.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    }
    // The session is unharmed: its next request is served.
    let ping = json!({"jsonrpc": "2.0", "id": 7, "method": "ping"});
    assert_eq!(
        call(&app, post(Some(&session), ping)).await.status(),
        StatusCode::OK
    );
}

/// `post` whose body sends `first` and then fails with `error`, as hyper's body does when the
/// client's connection breaks (or the server's body read timeout runs out) mid-body.
fn post_breaking_off(
    session: Option<&str>,
    first: &'static str,
    error: Box<dyn std::error::Error + Send + Sync>,
) -> Request<Body> {
    let chunks: Vec<Result<&'static str, Box<dyn std::error::Error + Send + Sync>>> =
        vec![Ok(first), Err(error)];
    let mut req = post(session, json!(null));
    *req.body_mut() = Body::from_stream(futures::stream::iter(chunks));
    req
}

#[tokio::test]
async fn a_post_body_that_breaks_off_is_a_client_error_not_500() {
    let app = store_app(RingEventStore::new(StoreConfig::default()));
    let session = initialize(&app).await;
    for in_session in [None, Some(session.as_str())] {
        let reset = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "connection reset");
        let resp = call(
            &app,
            post_breaking_off(in_session, "{\"jsonrpc\":", reset.into()),
        )
        .await;
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{in_session:?}");
        let reply = error_object(&Method::POST, &json_body(resp).await);
        assert_eq!(reply["error"], "incomplete_body", "{reply}");
        let detail = reply["detail"].as_str().unwrap_or_default();
        assert!(detail.contains("connection reset"), "{reply}");

        let timed_out = replay_ring_sse::axum::BodyTimedOut;
        let resp = call(&app, post_breaking_off(in_session, "{", timed_out.into())).await;
        assert_eq!(resp.status(), StatusCode::REQUEST_TIMEOUT, "{in_session:?}");
        let reply = error_object(&Method::POST, &json_body(resp).await);
        assert_eq!(reply["error"], "body_timeout", "{reply}");
    }
    // The session is unharmed: its next request is served.
    let ping = json!({"jsonrpc": "2.0", "id": 7, "method": "ping"});
    assert_eq!(
        call(&app, post(Some(&session), ping)).await.status(),
        StatusCode::OK
    );
}

#[tokio::test]
async fn a_request_naming_an_unknown_session_is_404_session_lost_as_json() {
    let app = store_app(RingEventStore::new(StoreConfig::default()));
    let deleted = initialize(&app).await;
    assert!(call(&app, delete(&deleted)).await.status().is_success());
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    for session in [deleted.as_str(), "never-was-a-session"] {
        for req in [post(Some(session), ping.clone()), get(session, None)] {
            let method = req.method().clone();
            let resp = call(&app, req).await;
            assert_eq!(resp.status(), StatusCode::NOT_FOUND, "{method} {session}");
            assert_eq!(resp.headers()["content-type"], "application/json");
            let reply = error_object(&method, &json_body(resp).await);
            assert_eq!(reply["error"], "session_lost", "{reply}");
        }
    }
}

/// A session rmcp closed for inactivity, with a silent call still running, is drained for up to
/// 5 s before the manager lets it go. Meanwhile rmcp answers a request in it with a plain-text
/// 500 ("Session service terminated"): the guard answers 404 `session_lost`, as for a session
/// already gone, and the call still ends with its explicit error. In virtual time: the idle
/// timeout is the subject.
#[tokio::test(start_paused = true)]
async fn a_request_in_a_session_closed_for_inactivity_is_404_session_lost_while_rmcp_drains_it() {
    const IDLE: std::time::Duration = std::time::Duration::from_millis(300);
    let app = replay_ring_mcp_demo::store_app_with_limits(
        RingEventStore::new(StoreConfig::default()),
        replay_ring_mcp_demo::Limits {
            session_idle: IDLE,
            ..Default::default()
        },
    );
    let session = initialize(&app).await;
    // No progress token: the call sends nothing until it ends, a minute from now.
    let silent = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "long_task", "arguments": {"n": 1, "delay_ms": 60_000}}});
    let resp = call(&app, post(Some(&session), silent)).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let mut stream = resp.into_body();
    let priming = in_process::events_from(&mut stream, 1).await;
    let cursor = priming[0].id.clone().expect("the priming event has an id");
    // Past the idle timeout, well inside rmcp's drain of the closed session.
    tokio::time::sleep(IDLE * 3).await;
    let ping = json!({"jsonrpc": "2.0", "id": 4, "method": "ping"});
    let note = json!({"jsonrpc": "2.0", "method": "notifications/progress",
        "params": {"progressToken": "x", "progress": 1}});
    for req in [post(Some(&session), ping), post(Some(&session), note)] {
        let method = req.method().clone();
        let resp = call(&app, req).await;
        assert_eq!(resp.status(), StatusCode::NOT_FOUND, "{method}");
        assert_eq!(resp.headers()["content-type"], "application/json");
        let reply = error_object(&method, &json_body(resp).await);
        assert_eq!(reply["error"], "session_lost", "{method}: {reply}");
    }
    // A resume of the call's stream is still served meanwhile, and it ends with the call's
    // explicit error once the drain is over, as the stream itself does.
    let resumed = call(&app, get(&session, Some(&cursor))).await;
    assert_eq!(resumed.status(), StatusCode::OK);
    let mut resumed = resumed.into_body();
    for body in [&mut stream, &mut resumed] {
        let rest = in_process::events_from(body, usize::MAX).await;
        let last = rest.last().expect("an error event ends the call's stream");
        assert!(last.data.contains("session closed"), "{rest:?}");
    }
}

/// A repeated `Mcp-Session-Id` or `MCP-Protocol-Version` is refused, whatever the values: which
/// one counts would be a guess. So is a session id no session can have.
#[tokio::test]
async fn a_repeated_or_unusable_session_or_version_header_is_400() {
    let app = store_app(RingEventStore::new(StoreConfig::default()));
    let session = initialize(&app).await;
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    for (name, values, shown) in [
        (
            "mcp-session-id",
            [session.as_str(), session.as_str()],
            "Mcp-Session-Id",
        ),
        (
            "mcp-session-id",
            [session.as_str(), "other"],
            "Mcp-Session-Id",
        ),
        (
            "mcp-protocol-version",
            ["2025-11-25", "2026-07-28"],
            "MCP-Protocol-Version",
        ),
    ] {
        for mut req in [post(Some(&session), ping.clone()), get(&session, None)] {
            let method = req.method().clone();
            req.headers_mut().remove(name);
            for value in values {
                req.headers_mut().append(name, value.parse().unwrap());
            }
            let resp = call(&app, req).await;
            assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{method} {name}");
            let reply = error_object(&method, &json_body(resp).await);
            assert_eq!(reply["error"], "bad_request", "{reply}");
            let message = reply["message"].as_str().unwrap();
            assert!(
                message.starts_with(shown) && message.contains('2'),
                "{message}"
            );
        }
    }
    // One of each is served.
    let resp = call(&app, post(Some(&session), ping.clone())).await;
    assert_eq!(resp.status(), StatusCode::OK);

    // A session id that is not visible ASCII is no session's: refused, not read as no session.
    for bad in [&b"caf\xc3\xa9"[..], b"two words", b""] {
        for mut req in [post(Some(&session), ping.clone()), get(&session, None)] {
            let method = req.method().clone();
            let value = http::HeaderValue::from_bytes(bad).unwrap();
            req.headers_mut().insert("mcp-session-id", value);
            let resp = call(&app, req).await;
            assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{method} {bad:?}");
            let reply = error_object(&method, &json_body(resp).await);
            assert_eq!(reply["error"], "bad_request", "{reply}");
        }
    }
}

/// `req` with its header `name` set to `value`.
fn with_header(mut req: Request<Body>, name: &'static str, value: &str) -> Request<Body> {
    req.headers_mut().insert(name, value.parse().unwrap());
    req
}

#[tokio::test]
async fn every_other_client_error_of_rmcp_is_json_with_its_status() {
    let app = store_app(RingEventStore::new(StoreConfig::default()));
    let session = initialize(&app).await;
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    let s = Some(session.as_str());
    let mut put = post(s, ping.clone());
    *put.method_mut() = http::Method::PUT;
    let mut no_session = get(&session, None);
    no_session.headers_mut().remove("mcp-session-id");
    let oversized = Request::post("/mcp")
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .header("mcp-session-id", &session)
        .body(Body::from(vec![b' '; 4 * 1024 * 1024 + 1]))
        .unwrap();
    let cases = [
        (
            "a standalone GET not accepting an event stream",
            with_header(get(&session, None), "accept", "application/json"),
            StatusCode::NOT_ACCEPTABLE,
            "not_acceptable",
        ),
        (
            "a POST not accepting an event stream",
            with_header(post(s, ping.clone()), "accept", "application/json"),
            StatusCode::NOT_ACCEPTABLE,
            "not_acceptable",
        ),
        (
            "a PUT",
            put,
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
        ),
        (
            "a POST of text/plain",
            with_header(post(s, ping.clone()), "content-type", "text/plain"),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
        ),
        (
            "a POST for a Host that is not allowed",
            with_header(post(s, ping.clone()), "host", "attacker.example.com"),
            StatusCode::FORBIDDEN,
            "forbidden",
        ),
        (
            "a standalone GET without a session",
            no_session,
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "a GET naming a protocol version that does not exist",
            with_header(get(&session, None), "mcp-protocol-version", "1999-01-01"),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            // rmcp echoes the value into a text longer than any of its own.
            "a GET naming a protocol version of 5,000 bytes",
            with_header(
                get(&session, None),
                "mcp-protocol-version",
                &"x".repeat(5000),
            ),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "a POST body over the 4 MiB limit",
            oversized,
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
        ),
    ];
    for (what, req, status, error) in cases {
        let method = req.method().clone();
        let resp = call(&app, req).await;
        assert_eq!(resp.status(), status, "{what}");
        assert_eq!(resp.headers()["content-type"], "application/json", "{what}");
        if status == StatusCode::METHOD_NOT_ALLOWED {
            // What the client may do instead survives the rewrite.
            assert!(resp.headers().contains_key("allow"), "{what}");
        }
        let reply = error_object(&method, &json_body(resp).await);
        assert_eq!(reply["error"], error, "{what}: {reply}");
        // rmcp's own explanation is the message, whole.
        let message = reply["message"].as_str().unwrap_or_default();
        assert!(!message.is_empty(), "{what}: {reply}");
    }
    // The session is unharmed: its next request is served.
    assert_eq!(call(&app, post(s, ping)).await.status(), StatusCode::OK);
}

/// A resume in an MCP session that names a protocol revision without sessions (2026-07-28 and
/// later) is 400 `unsupported_protocol_version`: rmcp would look for the stream outside any
/// session, find none, and answer an empty `200`. The revision the session negotiated resumes.
#[tokio::test]
async fn a_resume_naming_a_sessionless_protocol_revision_is_400_not_an_empty_200() {
    let store = RingEventStore::new(StoreConfig::default());
    let app = store_app(store.clone());
    let session = initialize(&app).await;
    let call_resp = call(&app, post(Some(&session), in_process::long_task(1, 2))).await;
    let all = in_process::events(call_resp, 100).await;
    let cursor = all[1].id.clone().expect("progress has an id");
    // The resume's refusal, which is a 400 for every version below.
    let refused = |version: &'static str| {
        let req = with_header(
            get(&session, Some(&cursor)),
            "mcp-protocol-version",
            version,
        );
        let app = app.clone();
        async move {
            let resp = call(&app, req).await;
            assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{version}");
            error_object(&Method::GET, &json_body(resp).await)
        }
    };
    for version in ["2026-07-28", "2027-01-01"] {
        let data = refused(version).await;
        assert_eq!(data["error"], "unsupported_protocol_version", "{data}");
        assert_eq!(data["version"], version, "{data}");
    }
    // Counted as refused resumes, under their own reason.
    let m = store.metrics();
    assert_eq!(m.resumes_unsupported_version, 2, "{m:?}");
    assert_eq!(m.refused(), 2, "{m:?}");
    // A version that is no date names no revision at all: rmcp refuses it as unsupported, and it
    // is not taken for a later revision (though "latest" sorts after every date).
    for version in ["latest", "v2", "2026-7-28x"] {
        let data = refused(version).await;
        assert_ne!(data["error"], "unsupported_protocol_version", "{data}");
    }
    assert_eq!(store.metrics().resumes_unsupported_version, 2);
    let resp = call(&app, get(&session, Some(&cursor))).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let rest = in_process::replayed(resp, &cursor, 100).await;
    assert_eq!(rest.len(), all.len() - 2, "{rest:?}");
}
