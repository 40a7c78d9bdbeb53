//! rmcp's own client (3.11, over reqwest) against the demo server and its guard, on loopback: a
//! call the server refuses fails at once. This client takes an id-less JSON-RPC error in the
//! response to a `POST` for a message from the server, logs it and drops it, and the call that
//! sent the `POST` then waits forever; the guard never answers a `POST` that way (`Envelope`).

mod common;

use std::time::Duration;

use common::serve_router;
use replay_ring_mcp::{RingEventStore, StoreConfig};
use replay_ring_mcp_demo::{store_app, store_app_with_max_sessions};
use rmcp::model::{CallToolRequestParams, JsonObject};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::ServiceExt;
use tokio::time::timeout;

/// Longer than any answer takes here; a call still waiting then is waiting forever.
const LIMIT: Duration = Duration::from_secs(10);

/// A new connection of rmcp's client to `server`'s MCP endpoint.
macro_rules! transport {
    ($server:expr) => {
        StreamableHttpClientTransport::from_uri(format!("http://{}/mcp", $server.addr))
    };
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_over_the_body_limit_fails_at_once() {
    let server = serve_router(store_app(RingEventStore::new(StoreConfig::default()))).await;
    let client = timeout(LIMIT, ().serve(transport!(server)))
        .await
        .expect("initialized in time")
        .expect("initialized");
    let small = CallToolRequestParams::new("test_simple_text");
    let answer = timeout(LIMIT, client.call_tool(small)).await;
    assert!(
        matches!(answer, Ok(Ok(_))),
        "a small call is served: {answer:?}"
    );
    // Over rmcp's 4 MiB request body limit: answered 413 `payload_too_large`.
    let mut arguments = JsonObject::new();
    arguments.insert("blob".into(), "x".repeat(5 << 20).into());
    let large = CallToolRequestParams::new("test_simple_text").with_arguments(arguments);
    let answer = timeout(LIMIT, client.call_tool(large))
        .await
        .expect("an answer, not a call waiting forever");
    let error = answer.expect_err("a call over the limit fails").to_string();
    assert!(error.contains("413"), "{error}");
    assert!(error.contains("payload_too_large"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_initialize_past_the_session_cap_fails_at_once() {
    let store = RingEventStore::new(StoreConfig::default());
    let server = serve_router(store_app_with_max_sessions(store, 1)).await;
    let _first = timeout(LIMIT, ().serve(transport!(server)))
        .await
        .expect("initialized in time")
        .expect("the first session opens");
    let second = timeout(LIMIT, ().serve(transport!(server)))
        .await
        .expect("an answer, not an initialize waiting forever");
    let error = second.expect_err("past the cap").to_string();
    assert!(error.contains("503"), "{error}");
}
