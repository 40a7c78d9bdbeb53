//! The demo app's caps over HTTP in-process (no sockets): sessions past the session cap, request
//! streams past a session's cap and past the server-wide cap, each answered 503 with the room's
//! `Retry-After`, and racing requests that never get past a cap.

use std::time::Duration;

use axum::body::Body;
use axum::Router;
use http::{Request, StatusCode};
use replay_ring_mcp::{RingEventStore, StoreConfig};
use replay_ring_mcp_demo::{store_app_with_limits, store_app_with_max_sessions, Limits};
use serde_json::json;

mod in_process;

use in_process::{call, delete, events_from, initialize, json_body, long_task_paced, post};

#[tokio::test]
async fn a_request_that_would_open_a_session_past_the_cap_is_503() {
    let app = store_app_with_max_sessions(RingEventStore::new(StoreConfig::default()), 2);
    let first = initialize(&app).await;
    initialize(&app).await;
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
    let refused = call(&app, post(None, init.clone())).await;
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(refused.headers()["retry-after"], "1");
    assert!(!refused.headers().contains_key("mcp-session-id"));
    // A POST's answer: the bare error object (the guard cannot name the request's id).
    let body = json_body(refused).await;
    assert_eq!(body["error"], "too_many_sessions", "{body}");
    assert_eq!(body["limit"], 2, "{body}");
    assert!(body.get("jsonrpc").is_none(), "{body}");
    // Requests of open sessions go on; a session that ends makes room.
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    assert_eq!(
        call(&app, post(Some(&first), ping)).await.status(),
        StatusCode::OK
    );
    assert!(call(&app, delete(&first)).await.status().is_success());
    initialize(&app).await;
}

/// A session abandoned after `initialize` holds its place under the session cap only until it
/// has been idle for `session_idle`; then rmcp closes it, a new session opens in its place, and
/// a request in the old one is 404 `session_lost`.
#[tokio::test]
async fn an_abandoned_session_makes_room_once_idle_for_session_idle() {
    const IDLE: Duration = Duration::from_millis(300);
    let app = store_app_with_limits(
        RingEventStore::new(StoreConfig::default()),
        Limits {
            max_sessions: 1,
            session_idle: IDLE,
            ..Limits::default()
        },
    );
    let abandoned = initialize(&app).await;
    let opened = std::time::Instant::now();
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
    // The session's idle timer is the subject: poll until its place is free, within a bound.
    let status = loop {
        let status = call(&app, post(None, init.clone())).await.status();
        if status != StatusCode::SERVICE_UNAVAILABLE || opened.elapsed() > Duration::from_secs(10) {
            break status;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(status, StatusCode::OK, "still refused after 10 s");
    assert!(
        opened.elapsed() >= IDLE,
        "room before the session was idle for long"
    );
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    let lost = call(&app, post(Some(&abandoned), ping)).await;
    assert_eq!(lost.status(), StatusCode::NOT_FOUND);
    assert_eq!(json_body(lost).await["error"], "session_lost");
}

/// `initialize` requests that all arrive while the cap still has room, and whose bodies come
/// only after every one of them is past the guard's first look at the cap, still open no more
/// sessions than the cap: the rest are answered 503 `too_many_sessions`, as one arriving alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initialize_requests_racing_for_the_last_sessions_never_exceed_the_cap() {
    const CAP: usize = 2;
    const RACERS: usize = 6;
    let app = store_app_with_max_sessions(RingEventStore::new(StoreConfig::default()), CAP);
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
    let (polled_tx, mut polled) = tokio::sync::mpsc::unbounded_channel::<()>();
    let (go_tx, go) = tokio::sync::watch::channel(false);
    let mut calls = Vec::new();
    for _ in 0..RACERS {
        // A body that says when rmcp starts reading it (after the guard let the request through)
        // and arrives only once every racer got that far.
        let (polled_tx, mut go, text) = (polled_tx.clone(), go.clone(), init.to_string());
        let body = futures::stream::once(async move {
            polled_tx.send(()).unwrap();
            go.wait_for(|go| *go).await.unwrap();
            Ok::<_, std::convert::Infallible>(bytes::Bytes::from(text))
        });
        let (parts, _) = post(None, init.clone()).into_parts();
        let req = Request::from_parts(parts, Body::from_stream(body));
        let app = app.clone();
        calls.push(tokio::spawn(async move { call(&app, req).await }));
    }
    for _ in 0..RACERS {
        polled.recv().await.unwrap();
    }
    go_tx.send(true).unwrap();
    let mut opened = 0;
    for c in calls {
        let resp = c.await.unwrap();
        match resp.status() {
            StatusCode::OK => {
                assert!(resp.headers().contains_key("mcp-session-id"));
                opened += 1;
            }
            StatusCode::SERVICE_UNAVAILABLE => {
                assert_eq!(resp.headers()["retry-after"], "1");
                let body = json_body(resp).await;
                assert_eq!(body["error"], "too_many_sessions", "{body}");
                assert_eq!(body["limit"], CAP, "{body}");
            }
            other => panic!("unexpected {other}: {:?}", json_body(resp).await),
        }
    }
    assert_eq!(
        opened, CAP,
        "sessions opened by {RACERS} racing initialize requests"
    );
}

/// The demo app with a cap of two request streams per session, which count for `completed_ttl`
/// after they end.
fn app_with_two_streams_per_session(completed_ttl: Duration) -> Router {
    let store = RingEventStore::new(StoreConfig {
        completed_ttl,
        ..StoreConfig::default()
    });
    store_app_with_limits(
        store,
        Limits {
            max_streams_per_session: 2,
            ..Limits::default()
        },
    )
}

/// A session that holds its most request streams (open, or ended within `completed_ttl`) gets
/// 503 `too_many_streams` with `Retry-After` for a request that would open one more, and the
/// request never reaches it; a notification still goes through, and once the ended streams are
/// past their TTL there is room again, with no housekeeping timer running.
#[tokio::test]
async fn a_request_beyond_the_sessions_stream_cap_is_503_too_many_streams() {
    const COMPLETED_TTL: Duration = Duration::from_millis(100);
    let app = app_with_two_streams_per_session(COMPLETED_TTL);
    let session = initialize(&app).await;
    let ping = |id: u64| json!({"jsonrpc": "2.0", "id": id, "method": "ping"});
    for id in 1..=2 {
        let resp = call(&app, post(Some(&session), ping(id))).await;
        assert_eq!(resp.status(), StatusCode::OK);
        let events = events_from(&mut resp.into_body(), 10).await;
        assert!(
            events.iter().any(|e| e.data.contains("\"result\"")),
            "{events:?}"
        );
    }
    let refused = call(&app, post(Some(&session), ping(3))).await;
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(refused.headers()["retry-after"], "1");
    let body = json_body(refused).await;
    assert_eq!(body["error"], "too_many_streams", "{body}");
    let detail = body["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("too many request streams in this MCP session"),
        "{body}"
    );
    let cancelled = json!({
        "jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3}
    });
    assert_eq!(
        call(&app, post(Some(&session), cancelled)).await.status(),
        StatusCode::ACCEPTED
    );
    // The passage of time is the subject: ended streams leave the count after their TTL.
    tokio::time::sleep(COMPLETED_TTL + Duration::from_millis(50)).await;
    assert_eq!(
        call(&app, post(Some(&session), ping(4))).await.status(),
        StatusCode::OK
    );
}

/// The refusal's `Retry-After` says when the session has room at the earliest: while every
/// counted stream is still open, `completed_ttl` (a stream leaves the count that long after it
/// ends); with ended streams, the time until the first of them is past `completed_ttl`.
#[tokio::test]
async fn the_stream_caps_retry_after_is_when_room_comes_back() {
    const COMPLETED_TTL: Duration = Duration::from_secs(30);
    let app = app_with_two_streams_per_session(COMPLETED_TTL);
    let retry_after = |resp: &axum::response::Response| -> u64 {
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        resp.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap()
    };

    // Both streams open (long calls, not read to their end).
    let open = initialize(&app).await;
    let mut held = Vec::new();
    for id in 1..=2 {
        let resp = call(&app, post(Some(&open), long_task_paced(id, 50, 100))).await;
        assert_eq!(resp.status(), StatusCode::OK);
        held.push(resp);
    }
    let refused = call(&app, post(Some(&open), long_task_paced(3, 1, 0))).await;
    assert_eq!(retry_after(&refused), COMPLETED_TTL.as_secs());
    let body = json_body(refused).await;
    assert_eq!(body["error"], "too_many_streams", "{body}");

    // Both streams ended just now: room comes back when the first is past the TTL.
    let ended = initialize(&app).await;
    for id in 1..=2 {
        let resp = call(
            &app,
            post(
                Some(&ended),
                json!({"jsonrpc": "2.0", "id": id, "method": "ping"}),
            ),
        )
        .await;
        assert_eq!(resp.status(), StatusCode::OK);
        let events = events_from(&mut resp.into_body(), 10).await;
        assert!(
            events.iter().any(|e| e.data.contains("\"result\"")),
            "{events:?}"
        );
    }
    let refused = call(&app, post(Some(&ended), long_task_paced(3, 1, 0))).await;
    let secs = retry_after(&refused);
    // Whole seconds, rounded up: the full TTL unless a second passed since the first ended.
    assert!(
        (COMPLETED_TTL.as_secs() - 1..=COMPLETED_TTL.as_secs()).contains(&secs),
        "{secs}"
    );
    drop(held);
}

/// The cap holds for requests that arrive together (each is counted before rmcp routes it) and
/// for a client that reuses a request id (each stream counts, not each id).
#[tokio::test]
async fn the_stream_cap_holds_for_concurrent_requests_and_reused_ids() {
    let app = store_app_with_limits(
        RingEventStore::new(StoreConfig::default()),
        Limits {
            max_streams_per_session: 2,
            ..Limits::default()
        },
    );
    let session = initialize(&app).await;
    let burst = (1..=10).map(|id| call(&app, post(Some(&session), long_task_paced(id, 50, 100))));
    let statuses: Vec<StatusCode> = futures::future::join_all(burst)
        .await
        .iter()
        .map(|r| r.status())
        .collect();
    let accepted = statuses.iter().filter(|s| **s == StatusCode::OK).count();
    assert_eq!(accepted, 2, "{statuses:?}");
    assert!(
        statuses
            .iter()
            .all(|s| *s == StatusCode::OK || *s == StatusCode::SERVICE_UNAVAILABLE),
        "{statuses:?}"
    );

    let other = initialize(&app).await;
    let mut reused = Vec::new();
    for _ in 0..3 {
        reused.push(
            call(&app, post(Some(&other), long_task_paced(1, 50, 100)))
                .await
                .status(),
        );
    }
    assert_eq!(
        reused,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::SERVICE_UNAVAILABLE
        ]
    );
}

/// The server-wide cap counts request streams across sessions. With three allowed and three held
/// by two sessions, a request in either is 503 `too_many_streams` naming the server, though
/// neither session is near its own cap; its `Retry-After` is when the first ended stream leaves
/// the count, and once that is past `completed_ttl` there is room again.
#[tokio::test]
async fn the_server_wide_stream_cap_counts_every_sessions_streams() {
    const COMPLETED_TTL: Duration = Duration::from_millis(200);
    let store = RingEventStore::new(StoreConfig {
        completed_ttl: COMPLETED_TTL,
        ..StoreConfig::default()
    });
    let app = store_app_with_limits(
        store,
        Limits {
            max_streams: 3,
            ..Limits::default()
        },
    );
    let ping = |id: u64| json!({"jsonrpc": "2.0", "id": id, "method": "ping"});
    let a = initialize(&app).await;
    let b = initialize(&app).await;
    let mut held = Vec::new();
    for id in 1..=2 {
        let resp = call(&app, post(Some(&a), long_task_paced(id, 50, 100))).await;
        assert_eq!(resp.status(), StatusCode::OK);
        held.push(resp);
    }
    let resp = call(&app, post(Some(&b), ping(1))).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let events = events_from(&mut resp.into_body(), 10).await;
    assert!(
        events.iter().any(|e| e.data.contains("\"result\"")),
        "{events:?}"
    );

    for session in [&a, &b] {
        let refused = call(&app, post(Some(session), ping(2))).await;
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
        // The ping's stream ended just now: room in `COMPLETED_TTL`, rounded up to a second.
        assert_eq!(refused.headers()["retry-after"], "1");
        let body = json_body(refused).await;
        assert_eq!(body["error"], "too_many_streams", "{body}");
        let message = body["message"].as_str().unwrap();
        assert!(message.contains("server"), "{body}");
        let detail = body["detail"].as_str().unwrap();
        // The manager's text, without rmcp's prefix.
        assert!(
            detail.starts_with("too many request streams on this server: it holds 3, across"),
            "{body}"
        );
    }

    // The passage of time is the subject: the ended ping leaves the count after its TTL.
    tokio::time::sleep(COMPLETED_TTL + Duration::from_millis(50)).await;
    let resp = call(&app, post(Some(&b), ping(3))).await;
    assert_eq!(resp.status(), StatusCode::OK);
    drop(held);
}
