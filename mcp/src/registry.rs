//! The store's index of its streams: by rmcp's stream name, by the short wire name, and by the
//! request each request stream answers, with how many request streams each session holds and
//! the disconnects and cancellations that arrived before their request's stream was bound.
//!
//! Plain data behind the store's lock: every method runs with it held.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use replay_ring_sse::StreamId;
use rmcp::model::RequestId;
use rmcp::transport::streamable_http_server::session::SessionId;

use crate::stream_entry::StreamEntry;

/// Most cancellations kept for requests whose stream is not bound yet.
const PENDING_CANCELS: usize = 256;
/// How long a cancellation waits for its request's stream to be bound.
const PENDING_CANCEL_TTL: Duration = Duration::from_secs(1);

#[derive(Default)]
pub(crate) struct Streams {
    pub(crate) by_rmcp: HashMap<String, Arc<StreamEntry>>,
    pub(crate) by_name: HashMap<StreamId, Arc<StreamEntry>>,
    pub(crate) by_request: HashMap<(SessionId, RequestId), Arc<StreamEntry>>,
    /// Request streams each session holds (bound entries of `by_rmcp`, open or ended within
    /// `completed_ttl`: what the session's streams retain in memory), plus the slots reserved
    /// for streams being created ([`StreamSlot`](crate::store::StreamSlot)).
    pub(crate) per_session: HashMap<SessionId, usize>,
    /// The sum of `per_session`: request streams the store holds, for the server-wide cap.
    pub(crate) request_streams: usize,
    /// Disconnects asked for before the request's stream was bound (the tool ran first).
    pub(crate) pending_disconnects: HashSet<(SessionId, RequestId)>,
    /// Cancellations that arrived before the request's stream was bound, newest last, with when
    /// they arrived. A client sends these, so at most [`PENDING_CANCELS`] are kept, each for
    /// [`PENDING_CANCEL_TTL`]: the race they cover is microseconds wide, and a cancellation of a
    /// request rmcp never saw (an id not issued yet, or of another type) must not end a later
    /// request that happens to reuse the id.
    pending_cancels: VecDeque<(SessionId, RequestId, Instant)>,
}

impl Streams {
    pub(crate) fn remove(&mut self, rmcp_id: &str) {
        if let Some(entry) = self.by_rmcp.remove(rmcp_id) {
            self.by_name.remove(&entry.identity.stream);
            // A bound request stream (both set by `bind`, under this lock) is counted.
            if let (Some(s), Some(r)) = (entry.session(), entry.request()) {
                self.count_request_stream(&s, false);
                let key = (s, r);
                // A request id the client used again maps to the newer stream: leave that one.
                if self
                    .by_request
                    .get(&key)
                    .is_some_and(|held| Arc::ptr_eq(held, &entry))
                {
                    self.by_request.remove(&key);
                }
            }
        }
    }

    /// Counts a request stream of `session` in (`added`) or out.
    pub(crate) fn count_request_stream(&mut self, session: &SessionId, added: bool) {
        if added {
            *self.per_session.entry(session.clone()).or_default() += 1;
            self.request_streams += 1;
        } else if let Some(n) = self.per_session.get_mut(session) {
            *n -= 1;
            self.request_streams -= 1;
            if *n == 0 {
                self.per_session.remove(session);
            }
        }
    }

    /// Keeps a cancellation of `key`, whose stream is not bound yet, for
    /// [`PENDING_CANCEL_TTL`] (dropping the oldest beyond [`PENDING_CANCELS`]).
    pub(crate) fn add_pending_cancel(&mut self, key: (SessionId, RequestId), now: Instant) {
        if self.pending_cancels.len() == PENDING_CANCELS {
            self.pending_cancels.pop_front();
        }
        self.pending_cancels.push_back((key.0, key.1, now));
    }

    /// Whether a cancellation of `key` arrived less than [`PENDING_CANCEL_TTL`] before `now`
    /// (taking it, and dropping those past their time).
    pub(crate) fn take_pending_cancel(
        &mut self,
        key: &(SessionId, RequestId),
        now: Instant,
    ) -> bool {
        self.pending_cancels
            .retain(|&(_, _, at)| now.saturating_duration_since(at) < PENDING_CANCEL_TTL);
        let found = self
            .pending_cancels
            .iter()
            .position(|(s, r, _)| (s, r) == (&key.0, &key.1));
        found.map(|at| self.pending_cancels.remove(at)).is_some()
    }

    /// Forgets the disconnects and cancellations waiting for streams of `session` (gone).
    pub(crate) fn forget_pending(&mut self, session: &str) {
        self.pending_disconnects.retain(|(s, _)| &**s != session);
        self.pending_cancels.retain(|(s, _, _)| &**s != session);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(session: &str, request: i64) -> (SessionId, RequestId) {
        (SessionId::from(session), RequestId::Number(request))
    }

    #[test]
    fn a_pending_cancellation_is_taken_once_and_only_for_its_request() {
        let mut streams = Streams::default();
        let t0 = Instant::now();
        streams.add_pending_cancel(key("a", 1), t0);
        assert!(!streams.take_pending_cancel(&key("a", 2), t0));
        assert!(!streams.take_pending_cancel(&key("b", 1), t0));
        assert!(streams.take_pending_cancel(&key("a", 1), t0));
        assert!(!streams.take_pending_cancel(&key("a", 1), t0));
    }

    #[test]
    fn a_pending_cancellation_expires() {
        let mut streams = Streams::default();
        let t0 = Instant::now();
        streams.add_pending_cancel(key("a", 1), t0);
        streams.add_pending_cancel(key("a", 2), t0);
        let almost = t0 + PENDING_CANCEL_TTL - Duration::from_millis(1);
        assert!(streams.take_pending_cancel(&key("a", 1), almost));
        assert!(!streams.take_pending_cancel(&key("a", 2), t0 + PENDING_CANCEL_TTL));
        assert!(
            streams.pending_cancels.is_empty(),
            "expired entries are dropped"
        );
    }

    #[test]
    fn pending_cancellations_are_bounded_oldest_first() {
        let mut streams = Streams::default();
        let t0 = Instant::now();
        for r in 0..=PENDING_CANCELS as i64 {
            streams.add_pending_cancel(key("a", r), t0);
        }
        assert_eq!(streams.pending_cancels.len(), PENDING_CANCELS);
        assert!(
            !streams.take_pending_cancel(&key("a", 0), t0),
            "the oldest made room"
        );
        assert!(streams.take_pending_cancel(&key("a", 1), t0));
        assert!(streams.take_pending_cancel(&key("a", PENDING_CANCELS as i64), t0));
    }

    #[test]
    fn a_gone_session_forgets_only_its_own_pending_requests() {
        let mut streams = Streams::default();
        let t0 = Instant::now();
        streams.add_pending_cancel(key("a", 1), t0);
        streams.add_pending_cancel(key("b", 1), t0);
        streams.pending_disconnects.insert(key("a", 2));
        streams.pending_disconnects.insert(key("b", 2));
        streams.forget_pending("a");
        assert!(!streams.take_pending_cancel(&key("a", 1), t0));
        assert!(streams.take_pending_cancel(&key("b", 1), t0));
        assert!(!streams.pending_disconnects.contains(&key("a", 2)));
        assert!(streams.pending_disconnects.contains(&key("b", 2)));
    }

    #[test]
    fn request_streams_are_counted_per_session_and_in_all() {
        let mut streams = Streams::default();
        let a = SessionId::from("a");
        let b = SessionId::from("b");
        streams.count_request_stream(&a, true);
        streams.count_request_stream(&a, true);
        streams.count_request_stream(&b, true);
        assert_eq!(streams.request_streams, 3);
        streams.count_request_stream(&a, false);
        assert_eq!(streams.per_session.get(&a), Some(&1));
        assert_eq!(streams.request_streams, 2);
        streams.count_request_stream(&a, false);
        assert!(
            !streams.per_session.contains_key(&a),
            "a session at zero is forgotten"
        );
        streams.count_request_stream(&a, false);
        assert!(!streams.per_session.contains_key(&a), "never below zero");
        assert_eq!(streams.request_streams, 1, "only b's stream is left");
    }
}
