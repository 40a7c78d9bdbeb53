//! The MCP messages the store tests put in event logs (progress notifications, whose `progress`
//! number tells events apart, and responses), and what a live connection ends with.
#![allow(dead_code)]

use std::time::Duration;

use futures::{Stream, StreamExt};
use rmcp::model::ServerJsonRpcMessage;
use rmcp::transport::streamable_http_server::session::ServerSseMessage;
use serde_json::json;

/// A progress notification of token `t` with progress `p`.
pub fn progress(p: u64) -> ServerSseMessage {
    let msg: ServerJsonRpcMessage = serde_json::from_value(json!({
        "jsonrpc": "2.0", "method": "notifications/progress",
        "params": {"progressToken": "t", "progress": p}
    }))
    .expect("progress notification");
    ServerSseMessage::from_message(msg)
}

/// The progress number of a notification made by [`progress`] (`None` for anything else).
pub fn progress_of(m: &ServerSseMessage) -> Option<u64> {
    let v = serde_json::to_value(m.message.as_deref()?).ok()?;
    v["params"]["progress"].as_f64().map(|p| p as u64)
}

/// A JSON-RPC response with an empty result to request `id`.
pub fn response(id: u64) -> ServerSseMessage {
    let msg: ServerJsonRpcMessage =
        serde_json::from_value(json!({"jsonrpc": "2.0", "id": id, "result": {}}))
            .expect("response");
    ServerSseMessage::from_message(msg)
}

/// Asserts that the next message of a live connection ends it explicitly, a retry hint without
/// an event or an id (what a stream that answers no request ends with when its event log fails),
/// and that the connection closes after it, each within `limit`.
pub async fn assert_ends_with_a_retry_hint(
    live: &mut (impl Stream<Item = ServerSseMessage> + Unpin),
    limit: Duration,
) {
    let last = tokio::time::timeout(limit, live.next())
        .await
        .expect("a last message in time")
        .expect("a last message");
    assert!(
        last.message.is_none() && last.event_id.is_none() && last.retry.is_some(),
        "an event past the last durable one was sent: {last:?}"
    );
    let after = tokio::time::timeout(limit, live.next()).await;
    assert!(
        after.expect("the end in time").is_none(),
        "a message after the end"
    );
}
