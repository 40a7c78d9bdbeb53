//! [`ResumeRefusal`]: why the store refused a resume, with the code and message a client gets.

use replay_ring::CloseReason;
use replay_ring_sse::{LastEventIdError, ResumeDecision, StreamId, StreamState};

/// Why a resume was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RefusalReason {
    /// The SSE layer's decision: `Gap`, `Mismatch`, `InvalidCursor`, `StreamLost`, `SessionLost`
    /// or `Busy`.
    Decision(ResumeDecision),
    /// The cursor names a stream of another MCP session. Answered like an unknown stream, so a
    /// client learns nothing about other sessions.
    ForeignSession {
        /// The stream the cursor names.
        stream: StreamId,
    },
    /// The cursor is the last id of a stream that has ended: there is nothing more to send, ever.
    /// `Completed` when its final JSON-RPC response was stored.
    StreamEnded(CloseReason),
}

/// Why a resume was refused, with everything an explicit answer needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResumeRefusal {
    /// Why.
    pub reason: RefusalReason,
    /// The stream's window, when the stream exists (and the cursor's session owns it).
    pub state: Option<StreamState>,
}

impl ResumeRefusal {
    /// The machine-readable code of the refusal (the `error` member of its JSON body).
    ///
    /// ```
    /// use replay_ring_mcp::{RefusalReason, ResumeRefusal};
    /// use replay_ring::CloseReason;
    ///
    /// let done = ResumeRefusal { reason: RefusalReason::StreamEnded(CloseReason::Completed), state: None };
    /// assert_eq!(done.code(), "stream_complete");
    /// let stream = replay_ring_sse::StreamId::new("s1").unwrap();
    /// let foreign = ResumeRefusal { reason: RefusalReason::ForeignSession { stream }, state: None };
    /// assert_eq!(foreign.code(), "stream_lost");
    /// ```
    pub fn code(&self) -> &'static str {
        match &self.reason {
            RefusalReason::Decision(d) => d.code(),
            RefusalReason::ForeignSession { .. } => "stream_lost",
            RefusalReason::StreamEnded(CloseReason::Completed) => "stream_complete",
            RefusalReason::StreamEnded(_) => "stream_closed",
        }
    }
}

impl std::fmt::Display for ResumeRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.reason {
            RefusalReason::Decision(d) => write!(f, "{d}"),
            // Worded exactly as an unknown stream, so that the message tells nothing either.
            RefusalReason::ForeignSession { stream } => write!(
                f,
                "{}",
                ResumeDecision::StreamLost(LastEventIdError::UnknownStream { stream: *stream })
            ),
            RefusalReason::StreamEnded(CloseReason::Completed) => f.write_str(
                "the stream is complete: the Last-Event-ID is its final event, nothing more will be sent",
            ),
            RefusalReason::StreamEnded(reason) => write!(
                f,
                "the stream ended ({reason}) after the Last-Event-ID: nothing more will be sent"
            ),
        }
    }
}

impl std::error::Error for ResumeRefusal {}
