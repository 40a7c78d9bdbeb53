//! The MCP messages the store tests put in event logs: progress notifications, whose `progress`
//! number tells events apart, and responses.
#![allow(dead_code)]

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
