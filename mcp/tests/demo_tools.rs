//! The demo server's `long_task` tool against a client that asks too much of it: work beyond its
//! bounds is refused up front, and a running call ends when the client cancels it, so no client
//! can hold the server's workers.

use std::time::Duration;

use http::StatusCode;
use replay_ring_mcp::StoreConfig;
use replay_ring_mcp_demo::{
    app, Storage, LONG_TASK_MAX_DELAY_MS, LONG_TASK_MAX_STEPS, LONG_TASK_MAX_TOTAL_MS,
};
use serde_json::{json, Value};

mod in_process;

use in_process::{call, events, events_from, initialize, long_task_paced, post};

fn demo() -> axum::Router {
    app(Storage::ReplayRing(StoreConfig::default())).0
}

/// A `long_task` call with `arguments`, without a progress token.
fn long_task_with(id: u64, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "long_task", "arguments": arguments}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_task_refuses_work_beyond_its_bounds_with_invalid_params() {
    let app = demo();
    let session = initialize(&app).await;
    let too_much = [
        json!({"n": LONG_TASK_MAX_STEPS + 1}),
        json!({"n": 1_000_000_000_000_000_000u64}),
        json!({"n": 1, "delay_ms": LONG_TASK_MAX_DELAY_MS + 1}),
        json!({"n": LONG_TASK_MAX_TOTAL_MS / 1_000 + 1, "delay_ms": 1_000}),
        // Not integers in range: refused, never read as 0 or as a default.
        json!({"n": 2, "delay_ms": "abc"}),
        json!({"n": 2, "delay_ms": -5}),
        json!({"n": 2, "delay_ms": 1.5}),
        json!({"n": 2, "delay_ms": 1e300}),
        json!({"n": -1}),
        json!({"n": 1.5}),
        json!({"n": "5"}),
        json!({}),
    ];
    for (id, arguments) in (1..).zip(too_much) {
        let resp = call(
            &app,
            post(Some(&session), long_task_with(id, arguments.clone())),
        )
        .await;
        assert_eq!(resp.status(), StatusCode::OK, "{arguments}");
        let got = events(resp, 10).await;
        let answer: Value = serde_json::from_str(&got.last().expect("an answer").data).unwrap();
        assert_eq!(answer["id"], id, "{answer}");
        assert_eq!(answer["error"]["code"], -32602, "invalid params: {answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(" to ") || message.contains("<="),
            "{message}"
        );
    }
    // An integer written with a zero fraction is an integer (JSON Schema's `integer`).
    let resp = call(
        &app,
        post(
            Some(&session),
            long_task_with(8, json!({"n": 2.0, "delay_ms": 1.0})),
        ),
    )
    .await;
    let got = events(resp, 10).await;
    let answer: Value = serde_json::from_str(&got.last().expect("an answer").data).unwrap();
    assert_eq!(answer["result"]["structuredContent"]["n"], 2, "{answer}");
    // At the bounds, a call runs to its result (no progress token: nothing is awaited between
    // steps, and the task still yields its worker now and then).
    let resp = call(
        &app,
        post(
            Some(&session),
            long_task_with(9, json!({"n": LONG_TASK_MAX_STEPS})),
        ),
    )
    .await;
    let got = events(resp, 10).await;
    let answer: Value = serde_json::from_str(&got.last().expect("an answer").data).unwrap();
    assert_eq!(
        answer["result"]["structuredContent"]["n"], LONG_TASK_MAX_STEPS,
        "{answer}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_long_task_stops_and_the_server_keeps_answering() {
    let app = demo();
    let session = initialize(&app).await;
    // Three calls that would take 100 minutes each: more than the runtime's workers.
    let mut streams = Vec::new();
    for id in 1..=3 {
        let resp = call(&app, post(Some(&session), long_task_paced(id, 100, 60_000))).await;
        assert_eq!(resp.status(), StatusCode::OK);
        let mut body = resp.into_body();
        let priming = events_from(&mut body, 1).await;
        assert!(priming[0].id.is_some(), "{priming:?}");
        streams.push(body);
    }
    let list = call(
        &app,
        post(
            Some(&session),
            json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list"}),
        ),
    )
    .await;
    let tools = events(list, 5).await;
    assert!(
        tools.iter().any(|e| e.data.contains("long_task")),
        "{tools:?}"
    );

    for id in 1..=3 {
        let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": id, "reason": "test"}});
        let resp = call(&app, post(Some(&session), cancel)).await;
        assert_eq!(resp.status(), StatusCode::ACCEPTED);
    }
    // Each call's stream ends well before its first minute-long step would: `events_from` fails
    // the test if a stream stays silent for 10 s.
    for mut body in streams {
        let started = tokio::time::Instant::now();
        let rest = events_from(&mut body, 1_000).await;
        assert!(started.elapsed() < Duration::from_secs(10), "{rest:?}");
        assert!(
            rest.iter()
                .all(|e| !e.data.contains("notifications/progress")),
            "no progress after the cancellation: {rest:?}"
        );
    }
}
