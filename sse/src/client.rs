//! Client side: prove continuity instead of trusting a 200.
//!
//! [`ContinuityVerifier`] checks that a reconnect's first event is `cursor + 1` and every later
//! one is the previous + 1. [`classify`] decides what a stalled stream means: keep waiting
//! ([`StallClass::Delayed`]), escalate ([`StallClass::ResumptionFailed`]) or re-initialise
//! ([`StallClass::SessionLost`]); the decision rests on a replay proof (an event `cursor + 1`, or
//! an advertised floor `<= cursor + 1`), never on the passage of time or a 200 alone.

use std::fmt;

use crate::event_id::{Epoch, EventId, StreamId};

/// A continuity violation.
///
/// ```
/// use replay_ring_sse::client::{ContinuityError, ContinuityVerifier};
///
/// let mut v = ContinuityVerifier::with_cursor(41);
/// v.on_reconnect();
/// assert_eq!(v.on_event(130), Err(ContinuityError::Gap { expected: 42, got: 130, after_reconnect: true }));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ContinuityError {
    /// Ids `expected ..= got - 1` were skipped.
    Gap {
        /// The id that should have come.
        expected: u64,
        /// The id that came.
        got: u64,
        /// Whether this was the first event after a reconnect (a cursor-skipping resume).
        after_reconnect: bool,
    },
    /// An id at or below the cursor came again (e.g. a server that replays the `Last-Event-ID`
    /// event itself).
    Duplicate {
        /// The id that should have come.
        expected: u64,
        /// The id that came.
        got: u64,
    },
    /// The id names another stream or epoch than the one being read: the server restarted or
    /// mixed streams, so the numbers are not comparable.
    StreamChanged {
        /// Stream and epoch being read.
        expected: (StreamId, Epoch),
        /// Stream and epoch of the event.
        got: (StreamId, Epoch),
    },
    /// A priming event (id + empty data) whose id is not the cursor sent: the server is not
    /// resuming from where the client asked.
    PrimingMismatch {
        /// The client's cursor.
        cursor: u64,
        /// The priming event's id.
        got: u64,
    },
}

impl fmt::Display for ContinuityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ContinuityError::Gap {
                expected,
                got,
                after_reconnect,
            } => write!(
                f,
                "gap{}: expected id {expected}, got {got} ({} event(s) silently skipped)",
                if after_reconnect {
                    " after reconnect"
                } else {
                    ""
                },
                got - expected
            ),
            ContinuityError::Duplicate { expected, got } => {
                write!(f, "duplicate: expected id {expected}, got {got} again")
            }
            ContinuityError::StreamChanged { expected, got } => write!(
                f,
                "stream changed: reading {}.{}, got an event from {}.{}",
                expected.0, expected.1, got.0, got.1
            ),
            ContinuityError::PrimingMismatch { cursor, got } => {
                write!(
                    f,
                    "priming event id {got} does not match the cursor {cursor}"
                )
            }
        }
    }
}

impl std::error::Error for ContinuityError {}

/// Tracks the last id seen and checks every next one.
///
/// Feed it dispatched events only ([`on_event`](Self::on_event)), each response's first message
/// (the priming event: id + empty data) to [`on_priming`](Self::on_priming), and nothing for
/// comments/keep-alives (they carry no id). Recognise the priming event by its place, not only its
/// shape: an application event may have empty data too. A duplicate leaves the cursor where it was; a gap moves it to the new id, so each gap is
/// reported once.
///
/// ```
/// use replay_ring_sse::client::ContinuityVerifier;
///
/// let mut v = ContinuityVerifier::new();
/// v.on_priming(0).unwrap();        // fresh subscription at head 0
/// v.on_event(1).unwrap();
/// v.on_event(2).unwrap();
/// v.on_reconnect();                // connection dropped; reconnect with Last-Event-ID 2
/// v.on_priming(2).unwrap();
/// v.on_event(3).unwrap();
/// assert!(v.on_event(3).is_err()); // duplicate
/// assert_eq!(v.cursor(), Some(3));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContinuityVerifier {
    cursor: Option<u64>,
    origin: Option<(StreamId, Epoch)>,
    after_reconnect: bool,
}

impl ContinuityVerifier {
    /// A verifier for a fresh subscription: the first id seen (priming or event) sets the cursor.
    ///
    /// ```
    /// assert_eq!(replay_ring_sse::client::ContinuityVerifier::new().cursor(), None);
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// A verifier resuming from `cursor` (the `Last-Event-ID` the client will send).
    ///
    /// ```
    /// use replay_ring_sse::client::ContinuityVerifier;
    /// let mut v = ContinuityVerifier::with_cursor(41);
    /// assert!(v.on_event(42).is_ok());
    /// ```
    pub fn with_cursor(cursor: u64) -> Self {
        ContinuityVerifier {
            cursor: Some(cursor),
            origin: None,
            after_reconnect: true,
        }
    }

    /// The last id accepted.
    ///
    /// ```
    /// let mut v = replay_ring_sse::client::ContinuityVerifier::with_cursor(3);
    /// v.on_event(4).unwrap();
    /// assert_eq!(v.cursor(), Some(4));
    /// ```
    pub fn cursor(&self) -> Option<u64> {
        self.cursor
    }

    /// The connection was re-established; the next event must be `cursor + 1`.
    ///
    /// ```
    /// use replay_ring_sse::client::{ContinuityError, ContinuityVerifier};
    /// let mut v = ContinuityVerifier::with_cursor(3);
    /// v.on_event(4).unwrap();
    /// v.on_reconnect();
    /// assert_eq!(v.on_event(9), Err(ContinuityError::Gap { expected: 5, got: 9, after_reconnect: true }));
    /// ```
    pub fn on_reconnect(&mut self) {
        self.after_reconnect = true;
    }

    /// A priming event (id, empty data). With a cursor, its id must equal the cursor.
    ///
    /// # Errors
    /// [`ContinuityError::PrimingMismatch`] when a cursor is set and `id` differs from it (the
    /// server is not resuming from where the client asked); the cursor is left unchanged.
    ///
    /// ```
    /// use replay_ring_sse::client::{ContinuityError, ContinuityVerifier};
    /// let mut v = ContinuityVerifier::with_cursor(41);
    /// assert_eq!(v.on_priming(130), Err(ContinuityError::PrimingMismatch { cursor: 41, got: 130 }));
    /// ```
    pub fn on_priming(&mut self, id: u64) -> Result<(), ContinuityError> {
        match self.cursor {
            None => {
                self.cursor = Some(id);
                Ok(())
            }
            Some(cursor) if cursor == id => Ok(()),
            Some(cursor) => Err(ContinuityError::PrimingMismatch { cursor, got: id }),
        }
    }

    /// A dispatched event with sequence number `id`.
    ///
    /// # Errors
    /// - [`ContinuityError::Duplicate`] when `id` is at or below the cursor (the cursor stays).
    /// - [`ContinuityError::Gap`] when `id` is above `cursor + 1` (the cursor moves to `id`, so
    ///   the gap is reported once); `after_reconnect` says whether it was the first event after
    ///   [`on_reconnect`](Self::on_reconnect).
    ///
    /// ```
    /// use replay_ring_sse::client::{ContinuityError, ContinuityVerifier};
    /// let mut v = ContinuityVerifier::with_cursor(5);
    /// assert_eq!(v.on_event(5), Err(ContinuityError::Duplicate { expected: 6, got: 5 }));
    /// assert_eq!(v.on_event(6), Ok(()));
    /// assert_eq!(v.on_event(8), Err(ContinuityError::Gap { expected: 7, got: 8, after_reconnect: false }));
    /// assert_eq!(v.on_event(9), Ok(())); // judged from 8 on
    /// ```
    pub fn on_event(&mut self, id: u64) -> Result<(), ContinuityError> {
        let after_reconnect = std::mem::replace(&mut self.after_reconnect, false);
        let Some(cursor) = self.cursor else {
            self.cursor = Some(id);
            return Ok(());
        };
        // Saturates only at a cursor of `u64::MAX`, after which every id is at or below it.
        let expected = cursor.saturating_add(1);
        if id <= cursor {
            // Keep the reconnect flag: the first *new* event still has to be cursor + 1.
            self.after_reconnect = after_reconnect;
            Err(ContinuityError::Duplicate { expected, got: id })
        } else if id == expected {
            self.cursor = Some(id);
            Ok(())
        } else {
            self.cursor = Some(id);
            Err(ContinuityError::Gap {
                expected,
                got: id,
                after_reconnect,
            })
        }
    }

    /// [`on_event`](Self::on_event) for a wire id: also checks that stream and epoch never change.
    ///
    /// # Errors
    /// [`ContinuityError::StreamChanged`] when the id's stream or epoch differs from the first id
    /// seen (the sequence number is then not checked); otherwise the errors of
    /// [`on_event`](Self::on_event) ([`Duplicate`](ContinuityError::Duplicate),
    /// [`Gap`](ContinuityError::Gap)).
    ///
    /// ```
    /// use replay_ring_sse::client::{ContinuityError, ContinuityVerifier};
    /// use replay_ring_sse::EventId;
    /// let mut v = ContinuityVerifier::new();
    /// v.on_event_id(&EventId::parse("s.1.7").unwrap()).unwrap();
    /// let restarted = EventId::parse("s.2.8").unwrap();
    /// assert!(matches!(v.on_event_id(&restarted), Err(ContinuityError::StreamChanged { .. })));
    /// ```
    pub fn on_event_id(&mut self, id: &EventId) -> Result<(), ContinuityError> {
        self.check_origin(id)?;
        self.on_event(id.seq)
    }

    /// [`on_priming`](Self::on_priming) for a wire id.
    ///
    /// # Errors
    /// [`ContinuityError::StreamChanged`] when the id's stream or epoch differs from the first id
    /// seen; otherwise [`ContinuityError::PrimingMismatch`] as for
    /// [`on_priming`](Self::on_priming).
    ///
    /// ```
    /// use replay_ring_sse::client::{ContinuityVerifier};
    /// use replay_ring_sse::EventId;
    /// let mut v = ContinuityVerifier::new();
    /// v.on_priming_id(&EventId::parse("s.1.0").unwrap()).unwrap();
    /// assert_eq!(v.cursor(), Some(0));
    /// ```
    pub fn on_priming_id(&mut self, id: &EventId) -> Result<(), ContinuityError> {
        self.check_origin(id)?;
        self.on_priming(id.seq)
    }

    fn check_origin(&mut self, id: &EventId) -> Result<(), ContinuityError> {
        let got = (id.stream, id.epoch);
        match self.origin {
            None => {
                self.origin = Some(got);
                Ok(())
            }
            Some(expected) if expected == got => Ok(()),
            Some(expected) => Err(ContinuityError::StreamChanged { expected, got }),
        }
    }
}

/// What the client has seen on the response body of a connection (after the headers).
///
/// ```
/// use replay_ring_sse::client::{classify, BodyState, Observation, StallClass};
/// let silent = Observation::Connected { cursor: 5, body: BodyState::OpenSilent, replay_floor: None };
/// assert_eq!(classify(&silent), StallClass::Reconnect);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyState {
    /// The connection is open and keep-alives (or events) arrive within the idle timeout.
    OpenAlive,
    /// The connection is open but nothing, not even a keep-alive, arrived within the idle timeout.
    OpenSilent,
    /// The server ended the response without a terminal event: the connection is over, and
    /// nothing said the stream was. (After a reconnect whose [`Reconnect::first_event`] is `None`,
    /// the response ended without any event at all.)
    EndedEmpty,
    /// The server ended the response with the stream's terminal `event: end` frame: the stream
    /// completed, and nothing after the events received will ever come. (A `stream-error`
    /// terminal frame is not a stall: it ends the stream with the failure its `error` field
    /// names, which the client reports as it is.)
    Completed,
}

/// Everything a client knows about its stream when it stalls.
///
/// ```
/// use replay_ring_sse::client::{classify, BodyState, Observation, StallClass};
/// let waiting = Observation::Connected { cursor: 5, body: BodyState::OpenAlive, replay_floor: Some(3) };
/// assert_eq!(classify(&waiting), StallClass::Delayed);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Observation {
    /// No reconnect yet: the original connection is still open.
    Connected {
        /// The last event id received.
        cursor: u64,
        /// Keep-alives arriving or not.
        body: BodyState,
        /// `Replay-Floor` of the response, if the server sent one.
        replay_floor: Option<u64>,
    },
    /// The client reconnected with `Last-Event-ID = cursor`.
    Reconnected(Reconnect),
}

/// What a reconnect returned.
///
/// ```
/// use replay_ring_sse::client::{classify, BodyState, Observation, Reconnect, ResumptionFailure, StallClass};
/// let empty = Reconnect {
///     cursor: 7, status: 200, replay_floor: None, replay_head: None,
///     session_durable: true, first_event: None, body: BodyState::EndedEmpty,
/// };
/// assert_eq!(classify(&Observation::Reconnected(empty)),
///            StallClass::ResumptionFailed(ResumptionFailure::EmptyStream));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reconnect {
    /// The `Last-Event-ID` sent.
    pub cursor: u64,
    /// HTTP status of the reconnect.
    pub status: u16,
    /// `Replay-Floor` header, if sent.
    pub replay_floor: Option<u64>,
    /// `Replay-Head` header, if sent.
    pub replay_head: Option<u64>,
    /// Whether the session identity is durable (the server proves it did not implicitly create a
    /// new session under the same id, e.g. the same stream epoch in `Replay-Stream`).
    pub session_durable: bool,
    /// The first dispatched event's sequence number, if one arrived.
    pub first_event: Option<u64>,
    /// What the body did.
    pub body: BodyState,
}

/// Why resumption failed.
///
/// ```
/// use replay_ring_sse::client::{classify, BodyState, Observation, Reconnect, ResumptionFailure, StallClass};
/// let gap = Reconnect {
///     cursor: 7, status: 416, replay_floor: Some(20), replay_head: Some(30),
///     session_durable: true, first_event: None, body: BodyState::EndedEmpty,
/// };
/// assert_eq!(classify(&Observation::Reconnected(gap)),
///            StallClass::ResumptionFailed(ResumptionFailure::Status(416)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResumptionFailure {
    /// A non-200 other than 404/410 (for this crate's servers: 416 gap, 409 mismatch, 400, 503).
    Status(u16),
    /// The advertised floor is above `cursor + 1`: `cursor + 1 ..= floor - 1` are gone.
    FloorAboveCursor {
        /// The client's cursor.
        cursor: u64,
        /// The advertised floor.
        floor: u64,
    },
    /// The advertised head is below the cursor: the client's state is from another stream.
    HeadBehindCursor {
        /// The client's cursor.
        cursor: u64,
        /// The advertised head.
        head: u64,
    },
    /// The session was implicitly re-created: nothing ties it to the cursor.
    NotDurable,
    /// 200 and the body ended without a single event: without a terminal frame, or with `end`
    /// but without a `Replay-Head` at the cursor proving there was nothing to send.
    EmptyStream,
    /// The first event is not `cursor + 1` (a resume that starts at the head).
    Skipped {
        /// `cursor + 1`.
        expected: u64,
        /// The first event's id.
        got: u64,
    },
    /// The first event is at or below the cursor (a replay of already-seen events).
    Repeated {
        /// `cursor + 1`.
        expected: u64,
        /// The first event's id.
        got: u64,
    },
    /// No event yet and no advertised floor: nothing proves the next event will be `cursor + 1`.
    Unproven,
}

/// The classification of a stalled stream.
///
/// ```
/// use replay_ring_sse::client::{classify, BodyState, Observation, Reconnect, StallClass};
/// let gone = Reconnect {
///     cursor: 7, status: 410, replay_floor: None, replay_head: None,
///     session_durable: false, first_event: None, body: BodyState::EndedEmpty,
/// };
/// assert_eq!(classify(&Observation::Reconnected(gone)), StallClass::SessionLost { status: 410 });
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StallClass {
    /// Silence is backpressure or an idle producer: keep waiting.
    Delayed,
    /// The server cannot prove replay from the cursor: do not wait; re-issue the work under a new
    /// session or surface a partial-result error.
    ResumptionFailed(ResumptionFailure),
    /// Explicit 404/410: the session is gone; re-initialise.
    SessionLost {
        /// The status received.
        status: u16,
    },
    /// The open connection went silent past the idle timeout (keep-alives stopped): it is dead.
    /// Reconnect with `Last-Event-ID` and classify the [`Observation::Reconnected`] result.
    Reconnect,
    /// The server ended the stream explicitly (`event: end`): after the event `cursor + 1`, or
    /// with no event and a `Replay-Head` equal to the cursor. Nothing more will come. The
    /// classifier sees only the first event; that every later one followed on is the
    /// [`ContinuityVerifier`]'s to check, so the stream is complete if it accepted them all.
    Completed,
}

/// Classifies a stalled stream. This is the decision boundary between waiting and giving up: an
/// open connection whose keep-alives still arrive is waited on; after a reconnect, waiting
/// ([`StallClass::Delayed`]) requires a replay proof (an event `cursor + 1`, or an advertised
/// floor `<= cursor + 1`), never a 200 alone. Anything else means reconnect, escalate or
/// re-initialise.
///
/// ```
/// use replay_ring_sse::client::{classify, BodyState, Observation, Reconnect, ResumptionFailure, StallClass};
///
/// // A resume that starts at the head: 200 OK, but the first event is 130 after cursor 41.
/// let seen = Reconnect {
///     cursor: 41, status: 200, replay_floor: None, replay_head: None,
///     session_durable: true, first_event: Some(130), body: BodyState::OpenAlive,
/// };
/// assert_eq!(classify(&Observation::Reconnected(seen)),
///            StallClass::ResumptionFailed(ResumptionFailure::Skipped { expected: 42, got: 130 }));
///
/// // A proper resume.
/// let ok = Reconnect { first_event: Some(42), ..seen };
/// assert_eq!(classify(&Observation::Reconnected(ok)), StallClass::Delayed);
///
/// // Session gone.
/// let gone = Reconnect { status: 404, first_event: None, ..seen };
/// assert_eq!(classify(&Observation::Reconnected(gone)), StallClass::SessionLost { status: 404 });
/// ```
pub fn classify(observation: &Observation) -> StallClass {
    use ResumptionFailure as F;
    let r = match *observation {
        Observation::Connected {
            cursor,
            body,
            replay_floor,
        } => {
            if let Some(floor) = replay_floor {
                if cursor < floor.saturating_sub(1) {
                    return StallClass::ResumptionFailed(F::FloorAboveCursor { cursor, floor });
                }
            }
            return match body {
                BodyState::OpenAlive => StallClass::Delayed,
                BodyState::OpenSilent | BodyState::EndedEmpty => StallClass::Reconnect,
                BodyState::Completed => StallClass::Completed,
            };
        }
        Observation::Reconnected(r) => r,
    };
    if r.status == 404 || r.status == 410 {
        return StallClass::SessionLost { status: r.status };
    }
    if r.status != 200 {
        return StallClass::ResumptionFailed(F::Status(r.status));
    }
    if let Some(floor) = r.replay_floor {
        if r.cursor < floor.saturating_sub(1) {
            return StallClass::ResumptionFailed(F::FloorAboveCursor {
                cursor: r.cursor,
                floor,
            });
        }
    }
    if let Some(head) = r.replay_head {
        if head < r.cursor {
            return StallClass::ResumptionFailed(F::HeadBehindCursor {
                cursor: r.cursor,
                head,
            });
        }
    }
    if !r.session_durable {
        return StallClass::ResumptionFailed(F::NotDurable);
    }
    // Saturates only at a cursor of `u64::MAX`, after which every id repeats one at or below it.
    let expected = r.cursor.saturating_add(1);
    match r.first_event {
        Some(got) if got <= r.cursor => StallClass::ResumptionFailed(F::Repeated { expected, got }),
        Some(got) if got == expected => match r.body {
            BodyState::OpenAlive => StallClass::Delayed,
            // A proven resume whose connection then died: resume again from the last event.
            BodyState::OpenSilent | BodyState::EndedEmpty => StallClass::Reconnect,
            BodyState::Completed => StallClass::Completed,
        },
        Some(got) => StallClass::ResumptionFailed(F::Skipped { expected, got }),
        None => match (r.body, r.replay_floor) {
            // A resume at the head of a completed stream: the end frame with no event is proof
            // only with the head advertised at the cursor. Without the header, the server may
            // hold events after the cursor that it never sent (a 200 alone proves nothing).
            (BodyState::Completed, _) if r.replay_head == Some(r.cursor) => StallClass::Completed,
            (BodyState::EndedEmpty | BodyState::Completed, _) => {
                StallClass::ResumptionFailed(F::EmptyStream)
            }
            (_, None) => StallClass::ResumptionFailed(F::Unproven),
            // The floor header is the replay proof; the events simply have not come yet.
            (BodyState::OpenAlive, Some(_)) => StallClass::Delayed,
            (BodyState::OpenSilent, Some(_)) => StallClass::Reconnect,
        },
    }
}
