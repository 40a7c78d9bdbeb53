//! The frames that end an event-stream response. None carries an `id`, so the client's cursor
//! stays on the last real event and its reconnect resumes from there.

use bytes::BytesMut;
use replay_ring::{CloseReason, ReadError};

use crate::json::JsonObject;
use crate::{Frame, Verdict};

/// The stream's last frame after the ring ended it: `event: end` after `Completed`,
/// `event: stream-error` otherwise (`stream-error`, not `error`: a browser would deliver an `error`
/// event to the same listener as connection failures).
pub(crate) fn encode_terminal(buf: &mut BytesMut, err: &ReadError) {
    let (name, data) = match err {
        ReadError::Closed(CloseReason::Completed) => {
            ("end", JsonObject::new().string("reason", "completed"))
        }
        ReadError::Closed(CloseReason::BackpressureTimeout { waited }) => (
            "stream-error",
            JsonObject::new()
                .string("error", "backpressure_timeout")
                .number(
                    "waited_ms",
                    u64::try_from(waited.as_millis()).unwrap_or(u64::MAX),
                )
                .string(
                    "message",
                    "producer backpressured past the bound; stream closed, nothing dropped",
                ),
        ),
        ReadError::Closed(CloseReason::ProducerDropped) => (
            "stream-error",
            JsonObject::new()
                .string("error", "producer_dropped")
                .string("message", "stream ended without completing"),
        ),
        ReadError::Closed(_) => (
            "stream-error",
            JsonObject::new()
                .string("error", "stream_failed")
                .string("message", "stream ended with an application error"),
        ),
        ReadError::Gap { next, floor, head } => (
            "stream-error",
            JsonObject::new()
                .string("error", "replay_gap")
                .number("requested", next.saturating_sub(1))
                .number("floor", *floor)
                .number("head", *head)
                .string(
                    "message",
                    "events were released before this connection wrote them",
                ),
        ),
    };
    encode_error(buf, name, &data.finish());
}

/// The frame for a connection the slow-consumer policy cut:
/// `event: stream-error` / `{"error":"slow_consumer","reason":...}`.
pub(crate) fn encode_cut(buf: &mut BytesMut, verdict: &Verdict) {
    let mut json = JsonObject::new()
        .string("error", "slow_consumer")
        .string("reason", verdict.reason())
        .string("message", &verdict.to_string());
    match *verdict {
        Verdict::Stalled { waited } => {
            json = json.number(
                "waited_ms",
                u64::try_from(waited.as_millis()).unwrap_or(u64::MAX),
            );
        }
        Verdict::Lagging { lag, limit } => {
            json = json.number("lag", lag).number("limit", limit);
        }
        Verdict::Keep => {}
    }
    encode_error(buf, "stream-error", &json.finish());
}

fn encode_error(buf: &mut BytesMut, name: &str, data: &[u8]) {
    // Cannot fail: static event names without CR/LF; JSON escapes every control character.
    let _ = Frame::new().event(name).data(data).encode_into(buf);
}
