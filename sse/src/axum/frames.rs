//! The frames that end an event-stream response. None carries an `id`, so the client's cursor
//! stays on the last real event and its reconnect resumes from there.

use bytes::BytesMut;
use replay_ring::CloseReason;
use serde_json::json;

use crate::backend::TailError;
use crate::{Frame, Verdict};

/// The stream's last frame after the backend ended it: `event: end` after `Completed`,
/// `event: stream-error` otherwise (`stream-error`, not `error`: a browser would deliver an `error`
/// event to the same listener as connection failures).
pub(crate) fn encode_terminal(buf: &mut BytesMut, err: &TailError) {
    let (name, data) = match err {
        TailError::Closed(CloseReason::Completed) => ("end", json!({ "reason": "completed" })),
        TailError::Closed(CloseReason::BackpressureTimeout { waited }) => (
            "stream-error",
            json!({
                "error": "backpressure_timeout",
                "waited_ms": u64::try_from(waited.as_millis()).unwrap_or(u64::MAX),
                "message": "producer backpressured past the bound; stream closed, nothing dropped",
            }),
        ),
        TailError::Closed(CloseReason::ProducerDropped) => (
            "stream-error",
            json!({
                "error": "producer_dropped",
                "message": "stream ended without completing",
            }),
        ),
        TailError::Gap { next, floor, head } => (
            "stream-error",
            json!({
                "error": "replay_gap",
                "requested": next.saturating_sub(1),
                "floor": floor,
                "head": head,
                "message": "events were released before this connection wrote them",
            }),
        ),
        TailError::StreamLost(_) => (
            "stream-error",
            json!({
                "error": "stream_lost",
                "message": "the stream is gone from its store; its ids will not be served again: start over without Last-Event-ID",
            }),
        ),
        TailError::Unavailable(error) => (
            "stream-error",
            json!({
                "error": "backend_unavailable",
                "message": error.to_string(),
            }),
        ),
        // Application errors, and whatever later versions add.
        _ => (
            "stream-error",
            json!({
                "error": "stream_failed",
                "message": "stream ended with an application error",
            }),
        ),
    };
    encode_error(buf, name, &data);
}

/// The frame for a connection the slow-consumer policy cut:
/// `event: stream-error` / `{"error":"slow_consumer","reason":...}`.
pub(crate) fn encode_cut(buf: &mut BytesMut, verdict: &Verdict) {
    let mut data = json!({
        "error": "slow_consumer",
        "reason": verdict.reason(),
        "message": verdict.to_string(),
    });
    match *verdict {
        Verdict::Stalled { waited } => {
            data["waited_ms"] = json!(u64::try_from(waited.as_millis()).unwrap_or(u64::MAX));
        }
        Verdict::Lagging { lag, limit } => {
            data["lag"] = json!(lag);
            data["limit"] = json!(limit);
        }
        Verdict::Keep => {}
    }
    encode_error(buf, "stream-error", &data);
}

fn encode_error(buf: &mut BytesMut, name: &str, data: &serde_json::Value) {
    // Serialising a JSON value cannot fail; static event names without CR/LF cannot be refused.
    let data = serde_json::to_vec(data).unwrap_or_default();
    let _ = Frame::new().event(name).data(&data).encode_into(buf);
}
