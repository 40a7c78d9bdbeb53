//! The server's answer to a (re)connect, independent of any HTTP framework.
//!
//! Either the client gets a stream that provably continues from its cursor, or an explicit
//! refusal. There is no third outcome: never a stream that starts somewhere else, never an empty
//! stream standing in for "I don't know that cursor".

use std::fmt;

use replay_ring::{classify_resume, Reader, ReplayRing, ResumeError, Resumption};

use crate::event_id::{EventId, LastEventIdError, StreamIdentity};

/// A stream's identity and window at one instant: what a resume decision is made against.
///
/// ```
/// use replay_ring_sse::{Epoch, StreamId, StreamIdentity, StreamState};
/// use replay_ring::ReplayRing;
///
/// let me = StreamIdentity::new(StreamId::new("events").unwrap(), Epoch::new(1));
/// let (mut producer, ring) = ReplayRing::<u8>::new(8, 2).unwrap();
/// producer.try_push(1).unwrap();
/// let state = StreamState::of(me, &ring);
/// assert_eq!((state.floor, state.head), (1, 1));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamState {
    /// The stream's name and epoch.
    pub identity: StreamIdentity,
    /// Oldest retained id (`head + 1` when nothing is retained).
    pub floor: u64,
    /// Newest id (0 before the first event).
    pub head: u64,
}

impl StreamState {
    /// Snapshots a ring's floor and head (floor first, so `floor <= head + 1` holds).
    ///
    /// ```
    /// use replay_ring_sse::{Epoch, StreamId, StreamIdentity, StreamState};
    /// let me = StreamIdentity::new(StreamId::new("s").unwrap(), Epoch::new(1));
    /// let (_p, ring) = replay_ring::ReplayRing::<u8>::new(4, 1).unwrap();
    /// assert_eq!(StreamState::of(me, &ring).head, 0);
    /// ```
    pub fn of<T>(identity: StreamIdentity, ring: &ReplayRing<T>) -> Self {
        let floor = ring.floor();
        let head = ring.head();
        StreamState {
            identity,
            floor,
            head,
        }
    }
}

/// What to do with one GET for a stream, given its `Last-Event-ID`.
///
/// ```
/// use replay_ring_sse::{decide, Epoch, ResumeDecision, StreamId, StreamIdentity, StreamState};
///
/// let me = StreamIdentity::new(StreamId::new("events").unwrap(), Epoch::new(0xa));
/// let state = StreamState { identity: me, floor: 65, head: 130 };
/// assert_eq!(decide(Some(&state), Some(b"events.a.100")),
///            ResumeDecision::Replay { from: 101, through: 130 });
/// assert_eq!(decide(Some(&state), Some(b"events.a.41")),
///            ResumeDecision::Gap { requested: 41, floor: 65, head: 130 });
/// assert_eq!(decide(Some(&state), Some(b"events.a.131")),
///            ResumeDecision::Mismatch { requested: 131, head: 130 });
/// assert_eq!(decide(Some(&state), Some(b"events.a.130")), ResumeDecision::NoOp { head: 130 });
/// assert_eq!(decide(Some(&state), None), ResumeDecision::Live { head: 130 });
/// assert!(matches!(decide(Some(&state), Some(b"events.b.100")), ResumeDecision::StreamLost(_)));
/// assert_eq!(decide(None, Some(b"events.a.100")), ResumeDecision::SessionLost);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ResumeDecision {
    /// No `Last-Event-ID`: a new subscription, live from the head (nothing replayed).
    Live {
        /// The head when the subscription started; the first event will be `head + 1`.
        head: u64,
    },
    /// Replay `from ..= through` before any newer event. `from` is the cursor + 1.
    Replay {
        /// First replayed id.
        from: u64,
        /// The head when the decision was made (later events follow live).
        through: u64,
    },
    /// The cursor is the head: nothing to replay, continue live.
    NoOp {
        /// The head (== the cursor).
        head: u64,
    },
    /// The cursor is below the retained window: `requested + 1 ..= floor - 1` are gone.
    Gap {
        /// The cursor.
        requested: u64,
        /// Oldest retained id.
        floor: u64,
        /// Newest id.
        head: u64,
    },
    /// The cursor is ahead of the head: the client's state is not from this stream.
    Mismatch {
        /// The cursor.
        requested: u64,
        /// Newest id.
        head: u64,
    },
    /// The header is not a valid event id (empty, too long, non-ASCII, malformed, overflow).
    InvalidCursor(LastEventIdError),
    /// A well-formed cursor for a stream that no longer exists here: unknown stream, or an old
    /// epoch (the server restarted and its fresh ring reuses the numbers).
    StreamLost(LastEventIdError),
    /// The session the request names is gone (the caller found no stream for it).
    SessionLost,
    /// Every reader slot is taken; retry later.
    Busy {
        /// The ring's `max_readers`.
        limit: usize,
    },
    /// The store holding the stream's window could not be reached (a network backend's
    /// [`Unavailable`](crate::backend::Unavailable)); retry later. Never answered with a stream.
    Unavailable,
}

impl ResumeDecision {
    /// The decision for cursor `x` from the pure classification of `(floor, head, x)`.
    fn classified(x: u64, classified: Result<Resumption, ResumeError>) -> Self {
        match classified {
            Ok(Resumption::AtHead) => ResumeDecision::NoOp { head: x },
            Ok(Resumption::Replay { first, last }) => ResumeDecision::Replay {
                from: first,
                through: last,
            },
            Err(refused) => ResumeDecision::from(refused),
        }
    }

    /// Whether the request gets a 200 stream.
    ///
    /// ```
    /// use replay_ring_sse::ResumeDecision;
    /// assert!(ResumeDecision::NoOp { head: 3 }.is_accepted());
    /// assert!(!ResumeDecision::SessionLost.is_accepted());
    /// ```
    pub fn is_accepted(&self) -> bool {
        matches!(
            self,
            ResumeDecision::Live { .. }
                | ResumeDecision::Replay { .. }
                | ResumeDecision::NoOp { .. }
        )
    }

    /// A stable machine-readable code (the `error` member of JSON bodies, or `"ok"`).
    ///
    /// ```
    /// use replay_ring_sse::ResumeDecision;
    /// assert_eq!(ResumeDecision::Gap { requested: 1, floor: 5, head: 9 }.code(), "replay_gap");
    /// ```
    pub fn code(&self) -> &'static str {
        match self {
            ResumeDecision::Live { .. }
            | ResumeDecision::Replay { .. }
            | ResumeDecision::NoOp { .. } => "ok",
            ResumeDecision::Gap { .. } => "replay_gap",
            ResumeDecision::Mismatch { .. } => "cursor_ahead_of_head",
            ResumeDecision::InvalidCursor(_) => "invalid_last_event_id",
            ResumeDecision::StreamLost(_) => "stream_lost",
            ResumeDecision::SessionLost => "session_lost",
            ResumeDecision::Busy { .. } => "too_many_readers",
            ResumeDecision::Unavailable => "backend_unavailable",
        }
    }
}

impl From<ResumeError> for ResumeDecision {
    /// Maps the core's refusal (which is authoritative: it is checked atomically with the reader's
    /// registration).
    ///
    /// ```
    /// use replay_ring_sse::ResumeDecision;
    /// use replay_ring::ResumeError;
    /// let d = ResumeDecision::from(ResumeError::BelowFloor { requested: 1, floor: 9, head: 20 });
    /// assert_eq!(d, ResumeDecision::Gap { requested: 1, floor: 9, head: 20 });
    /// ```
    fn from(err: ResumeError) -> Self {
        match err {
            ResumeError::BelowFloor {
                requested,
                floor,
                head,
            } => ResumeDecision::Gap {
                requested,
                floor,
                head,
            },
            ResumeError::AheadOfHead { requested, head } => {
                ResumeDecision::Mismatch { requested, head }
            }
            ResumeError::TooManyReaders(full) => ResumeDecision::Busy { limit: full.limit },
            // `ResumeError` is non-exhaustive: a refusal this version does not know is answered as
            // "retry later" (the client keeps its Last-Event-ID), never with a stream.
            _ => ResumeDecision::Busy { limit: 0 },
        }
    }
}

impl fmt::Display for ResumeDecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ResumeDecision::Live { head } => write!(f, "new subscription, live after id {head}"),
            ResumeDecision::Replay { from, through } => write!(f, "replaying ids {from}..={through}, then live"),
            ResumeDecision::NoOp { head } => write!(f, "cursor is the head ({head}); continuing live"),
            ResumeDecision::Gap { requested, floor, head } if floor > head => write!(
                f,
                "cannot resume after id {requested}: events {}..={} were released (nothing is retained)",
                requested.saturating_add(1),
                floor.saturating_sub(1)
            ),
            ResumeDecision::Gap { requested, floor, head } => write!(
                f,
                "cannot resume after id {requested}: events {}..={} were released (retained {floor}..={head})",
                requested.saturating_add(1),
                floor.saturating_sub(1)
            ),
            ResumeDecision::Mismatch { requested, head } => write!(
                f,
                "cannot resume after id {requested}: the stream's newest id is {head} (state mismatch)"
            ),
            ResumeDecision::InvalidCursor(err) | ResumeDecision::StreamLost(err) => write!(f, "{err}"),
            ResumeDecision::SessionLost => f.write_str("session not found; re-initialize"),
            ResumeDecision::Busy { limit } => write!(f, "all {limit} reader slots are in use; retry later"),
            ResumeDecision::Unavailable => f.write_str("the stream's store could not be reached; retry later"),
        }
    }
}

/// Decides from a snapshot, without touching a ring. `stream` is `None` when the session the
/// request names does not exist. `last_event_id` is the raw header value, `None` if absent.
///
/// For a ring, prefer [`resume`], which registers the reader and re-checks atomically.
///
/// ```
/// use replay_ring_sse::{decide, Epoch, ResumeDecision, StreamId, StreamIdentity, StreamState};
/// let me = StreamIdentity::new(StreamId::new("s").unwrap(), Epoch::new(1));
/// let state = StreamState { identity: me, floor: 1, head: 0 };
/// assert!(matches!(decide(Some(&state), Some(b"s.1.x")), ResumeDecision::InvalidCursor(_)));
/// ```
pub fn decide(stream: Option<&StreamState>, last_event_id: Option<&[u8]>) -> ResumeDecision {
    let Some(state) = stream else {
        return ResumeDecision::SessionLost;
    };
    let cursor = match parse_cursor(&state.identity, last_event_id) {
        Ok(cursor) => cursor,
        Err(decision) => return decision,
    };
    let Some(x) = cursor else {
        return ResumeDecision::Live { head: state.head };
    };
    ResumeDecision::classified(x, classify_resume(state.floor, state.head, x))
}

/// Parses and checks the header against `identity`: `Ok(None)` when absent.
fn parse_cursor(
    identity: &StreamIdentity,
    value: Option<&[u8]>,
) -> Result<Option<u64>, ResumeDecision> {
    let Some(value) = value else {
        return Ok(None);
    };
    let id = EventId::parse_bytes(value).map_err(ResumeDecision::InvalidCursor)?;
    identity
        .check(&id)
        .map(Some)
        .map_err(ResumeDecision::StreamLost)
}

/// A registered reader and the decision that created it.
///
/// ```
/// use replay_ring_sse::{resume, Epoch, ResumeDecision, StreamId, StreamIdentity};
/// let me = StreamIdentity::new(StreamId::new("s").unwrap(), Epoch::new(1));
/// let (mut p, ring) = replay_ring::ReplayRing::<u8>::new(4, 1).unwrap();
/// p.try_push(7).unwrap();
/// let ok = resume(&ring, &me, Some(b"s.1.0")).unwrap();
/// assert_eq!((ok.decision, ok.acknowledged), (ResumeDecision::Replay { from: 1, through: 1 }, Some(0)));
/// assert_eq!(ok.reader.cursor(), 1);
/// ```
#[derive(Debug)]
pub struct Resumed<T> {
    /// Reader positioned at the first event to send.
    pub reader: Reader<T>,
    /// `Live`, `Replay` or `NoOp`.
    pub decision: ResumeDecision,
    /// Floor and head snapshot taken after the reader was registered (what the response
    /// advertises; the registered reader keeps `floor - 1 <= cursor` true from then on).
    pub state: StreamState,
    /// The client's cursor, if it sent one: the id the retention policy may treat as acknowledged.
    pub acknowledged: Option<u64>,
}

/// A refused request, with the stream snapshot for the response headers (`None` when the session
/// is gone).
///
/// ```
/// use replay_ring_sse::{resume, Epoch, ResumeDecision, StreamId, StreamIdentity};
/// let me = StreamIdentity::new(StreamId::new("s").unwrap(), Epoch::new(1));
/// let (_p, ring) = replay_ring::ReplayRing::<u8>::new(4, 1).unwrap();
/// let refused = resume(&ring, &me, Some(b"s.1.3")).unwrap_err();
/// assert_eq!(refused.decision, ResumeDecision::Mismatch { requested: 3, head: 0 });
/// assert_eq!(refused.state.unwrap().head, 0);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    /// Why (never `Live`, `Replay` or `NoOp`).
    pub decision: ResumeDecision,
    /// The stream's window when it was refused, if the stream exists.
    pub state: Option<StreamState>,
}

impl fmt::Display for Refused {
    /// The decision's message (the stream's window is in [`state`](Refused::state)).
    ///
    /// ```
    /// use replay_ring_sse::{resume, Epoch, StreamId, StreamIdentity};
    /// let me = StreamIdentity::new(StreamId::new("s").unwrap(), Epoch::new(1));
    /// let (_p, ring) = replay_ring::ReplayRing::<u8>::new(4, 1).unwrap();
    /// let refused = resume(&ring, &me, Some(b"s.1.3")).unwrap_err();
    /// assert!(refused.to_string().contains("newest id is 0"));
    /// let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(refused);
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.decision, f)
    }
}

impl std::error::Error for Refused {}

/// Opens a reader for a GET on `ring` (whose identity is `identity`): parses the untrusted header,
/// checks stream and epoch, and registers the reader with the ring, which is the authority on
/// floor and head (a snapshot decision could race with the producer or a release).
///
/// # Errors
/// A [`Refused`] (with the stream's floor and head at the time) whose
/// [`decision`](Refused::decision) says why:
/// - [`ResumeDecision::InvalidCursor`] when the header is not a valid event id (see
///   [`EventId::parse_bytes`]).
/// - [`ResumeDecision::StreamLost`] when it names another stream or epoch (see
///   [`StreamIdentity::check`]).
/// - [`ResumeDecision::Gap`] when events after the cursor were already released.
/// - [`ResumeDecision::Mismatch`] when the cursor is ahead of the head.
/// - [`ResumeDecision::Busy`] when every reader slot is taken.
///
/// ```
/// use replay_ring_sse::{resume, Epoch, ResumeDecision, StreamId, StreamIdentity};
/// use replay_ring::ReplayRing;
///
/// let me = StreamIdentity::new(StreamId::new("events").unwrap(), Epoch::new(0xa));
/// let (mut producer, ring) = ReplayRing::<u32>::new(8, 2).unwrap();
/// for n in 1..=5 { producer.try_push(n).unwrap(); }
///
/// let mut ok = resume(&ring, &me, Some(b"events.a.3")).unwrap();
/// assert_eq!(ok.decision, ResumeDecision::Replay { from: 4, through: 5 });
/// assert_eq!(ok.reader.try_read().unwrap().unwrap().first_id(), 4);
///
/// ring.release_through(2).unwrap();
/// let refused = resume(&ring, &me, Some(b"events.a.0")).unwrap_err();
/// assert_eq!(refused.decision, ResumeDecision::Gap { requested: 0, floor: 3, head: 5 });
/// ```
// A refusal is returned once per request (cold path) and is plain `Copy` data; boxing it would only
// add an allocation.
#[allow(clippy::result_large_err)]
pub fn resume<T: Send + Sync>(
    ring: &ReplayRing<T>,
    identity: &StreamIdentity,
    last_event_id: Option<&[u8]>,
) -> Result<Resumed<T>, Refused> {
    let refuse = |decision| Refused {
        decision,
        state: Some(StreamState::of(*identity, ring)),
    };
    let cursor = parse_cursor(identity, last_event_id).map_err(refuse)?;
    let reader = ring
        .resume(cursor)
        .map_err(|e| refuse(ResumeDecision::from(e)))?;
    let state = StreamState::of(*identity, ring);
    let next = reader.cursor();
    let decision = match cursor {
        None => ResumeDecision::Live { head: next - 1 },
        // The registered reader starts at `x + 1` and keeps it replayable, so classifying
        // against that floor yields `Replay` or `AtHead` (the head only grew since the ring's
        // own check).
        Some(x) => ResumeDecision::classified(x, classify_resume(next, state.head, x)),
    };
    Ok(Resumed {
        reader,
        decision,
        state,
        acknowledged: cursor,
    })
}
