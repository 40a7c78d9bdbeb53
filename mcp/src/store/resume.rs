//! The resume side of [`RingEventStore`]: checking a `Last-Event-ID` against its stream and
//! session, counting what it refuses. The streams it opens are built in `stream.rs`.

use std::sync::Arc;
use std::time::Instant;

use replay_ring_sse::{EventId, LastEventIdError, ResumeDecision, StreamState};

use super::RingEventStore;
use crate::refusal::{RefusalReason, ResumeRefusal};
use crate::stream_entry::StreamEntry;

impl RingEventStore {
    /// Checks a `Last-Event-ID` against the stream it names and the MCP session it must belong
    /// to, without opening a reader (the tower layer's check before rmcp sees the request).
    ///
    /// # Errors
    ///
    /// A [`ResumeRefusal`] when the cursor cannot be honoured: malformed, an unknown stream or one
    /// of another session, below the retained floor, ahead of the head, or the last id of a stream
    /// that has ended.
    pub fn check_resume(
        &self,
        session: Option<&str>,
        last_event_id: &[u8],
    ) -> Result<StreamState, ResumeRefusal> {
        let (entry, id) = self.locate(session, last_event_id)?;
        let state = entry.state();
        let decision = replay_ring_sse::decide(Some(&state), Some(last_event_id));
        if !decision.is_accepted() {
            return Err(self.count_refusal(RefusalReason::Decision(decision), Some(state)));
        }
        self.check_not_ended(&entry, id.seq)?;
        // Every reader slot taken: refused here, with its 503, because once rmcp runs the resume
        // the only answer left is an event in a `200` (a JSON-RPC error that ends the call on a
        // request stream, or a `retry:` hint on the GET stream). A slot taken between this check
        // and the resume still gets that answer.
        let limit = entry.ring.max_readers();
        if entry.ring.metrics().readers_active >= limit {
            let busy = ResumeDecision::Busy { limit };
            return Err(self.count_refusal(RefusalReason::Decision(busy), Some(state)));
        }
        Ok(state)
    }

    /// A cursor at the head of a stream that has ended would get a `200` with nothing in it:
    /// refuse it explicitly instead (the client already holds everything the stream will carry).
    /// A cursor past the head is left to the resume decision (`Mismatch`): it is not this
    /// stream's, and the client holds nothing it could trust.
    ///
    /// When the event log failed, the stream's last id is its last durable one
    /// ([`StreamEntry::state`]).
    pub(crate) fn check_not_ended(
        &self,
        entry: &StreamEntry,
        cursor: u64,
    ) -> Result<(), ResumeRefusal> {
        let Some(reason) = entry.ring.close_reason() else {
            return Ok(());
        };
        // The head of a closed ring no longer moves.
        let state = entry.state();
        if cursor == state.head {
            return Err(self.count_refusal(RefusalReason::StreamEnded(reason), Some(state)));
        }
        Ok(())
    }

    /// Parses the cursor, finds its stream, and checks the session binding.
    pub(crate) fn locate(
        &self,
        session: Option<&str>,
        last_event_id: &[u8],
    ) -> Result<(Arc<StreamEntry>, EventId), ResumeRefusal> {
        let lost = |err| {
            self.count_refusal(
                RefusalReason::Decision(ResumeDecision::StreamLost(err)),
                None,
            )
        };
        let id = EventId::parse_bytes(last_event_id).map_err(|e| self.malformed(e))?;
        if id.epoch != self.inner.epoch {
            return Err(lost(LastEventIdError::UnknownEpoch {
                stream: id.stream,
                got: id.epoch,
                current: self.inner.epoch,
            }));
        }
        let Some(entry) = self.entry_by_event_id(&id) else {
            return Err(lost(LastEventIdError::UnknownStream { stream: id.stream }));
        };
        // A session's stream is answered to that session only, and a request without a session
        // (rmcp's stateless path; the guard refuses a session id that is not visible ASCII) learns
        // nothing about it either.
        let foreign = match session {
            Some(session) => entry.session().as_deref() != Some(session),
            None => entry.session_scoped,
        };
        if foreign {
            let stream = id.stream;
            return Err(self.count_refusal(RefusalReason::ForeignSession { stream }, None));
        }
        // The window is enforced lazily: whatever expired is released before the decision.
        entry
            .retention
            .lock()
            .release_expired(&entry.ring, Instant::now());
        Ok((entry, id))
    }

    /// Counts a refusal and builds it.
    pub(crate) fn count_refusal(
        &self,
        reason: RefusalReason,
        state: Option<StreamState>,
    ) -> ResumeRefusal {
        let c = &self.inner.counters;
        match &reason {
            RefusalReason::ForeignSession { .. } => c.resumes_foreign_session.inc(),
            RefusalReason::StreamEnded(_) => c.resumes_stream_ended.inc(),
            RefusalReason::Decision(d) => match d {
                ResumeDecision::Gap { .. } => c.resumes_below_floor.inc(),
                ResumeDecision::Mismatch { .. } => c.resumes_ahead_of_head.inc(),
                ResumeDecision::InvalidCursor(_) => c.resumes_malformed.inc(),
                ResumeDecision::StreamLost(_) => c.resumes_stream_lost.inc(),
                ResumeDecision::SessionLost => c.resumes_session_lost.inc(),
                _ => c.resumes_busy.inc(),
            },
        }
        ResumeRefusal { reason, state }
    }

    pub(crate) fn malformed(&self, err: LastEventIdError) -> ResumeRefusal {
        self.count_refusal(
            RefusalReason::Decision(ResumeDecision::InvalidCursor(err)),
            None,
        )
    }

    /// Counts a resume refused for naming a protocol revision without resumable streams (the
    /// guard answers it before any stream is looked up, so it has no [`ResumeRefusal`]).
    pub(crate) fn count_unsupported_version(&self) {
        self.inner.counters.resumes_unsupported_version.inc();
    }

    pub(crate) fn session_lost(&self) -> ResumeRefusal {
        self.count_refusal(RefusalReason::Decision(ResumeDecision::SessionLost), None)
    }
}
