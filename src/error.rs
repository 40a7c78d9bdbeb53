//! Every way an operation can be refused, as data a server can log or map to a status code.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Why a stream ended. Readers see it after they have read everything that was retained.
///
/// ```
/// use std::time::Duration;
/// use replay_ring::CloseReason;
///
/// let reason = CloseReason::BackpressureTimeout { waited: Duration::from_secs(10) };
/// assert!(reason.to_string().contains("nothing dropped"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CloseReason {
    /// The producer finished normally.
    Completed,
    /// The [`Producer`](crate::Producer) was dropped without calling `close`.
    ProducerDropped,
    /// The producer was backpressured longer than a retention policy allows; the stream was ended
    /// explicitly instead of dropping events a resume may still ask for.
    BackpressureTimeout {
        /// How long the producer had been waiting for space.
        waited: Duration,
    },
    /// An application-defined error.
    Error(Arc<str>),
}

impl CloseReason {
    /// An application error with the given message.
    ///
    /// ```
    /// let reason = replay_ring::CloseReason::error("tool crashed");
    /// assert_eq!(reason.to_string(), "stream failed: tool crashed");
    /// ```
    pub fn error(message: impl Into<Arc<str>>) -> Self {
        CloseReason::Error(message.into())
    }

    /// Whether this is a normal end (`Completed`) rather than a failure.
    ///
    /// ```
    /// assert!(replay_ring::CloseReason::Completed.is_completed());
    /// assert!(!replay_ring::CloseReason::ProducerDropped.is_completed());
    /// ```
    pub fn is_completed(&self) -> bool {
        matches!(self, CloseReason::Completed)
    }
}

impl fmt::Display for CloseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CloseReason::Completed => f.write_str("stream completed"),
            CloseReason::ProducerDropped => f.write_str("stream ended: producer dropped"),
            CloseReason::BackpressureTimeout { waited } => write!(
                f,
                "stream ended: producer backpressured for {waited:?} (window full, nothing dropped)"
            ),
            CloseReason::Error(message) => write!(f, "stream failed: {message}"),
        }
    }
}

/// A push that was refused. The value (or the closure that would have built it) is handed back, and
/// no id was consumed.
///
/// ```
/// use replay_ring::{PushError, ReplayRing};
///
/// let (mut producer, _ring) = ReplayRing::<u32>::new(1, 1).unwrap();
/// assert_eq!(producer.try_push(7), Ok(1));
/// let err = producer.try_push(8).unwrap_err();
/// assert!(err.is_full());
/// assert_eq!(err.into_inner(), 8);
/// assert_eq!(producer.next_id(), 2); // the refusal burned no id
/// ```
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PushError<T> {
    /// Every slot holds an unreleased event or one a reader is borrowing. Release, read, or wait.
    Full(T),
    /// The next id would be `u64::MAX`; ids never wrap.
    IdsExhausted(T),
}

impl<T> PushError<T> {
    /// The value that was not pushed.
    pub fn into_inner(self) -> T {
        match self {
            PushError::Full(v) | PushError::IdsExhausted(v) => v,
        }
    }

    /// Whether the ring was full (as opposed to out of ids).
    pub fn is_full(&self) -> bool {
        matches!(self, PushError::Full(_))
    }
}

impl<T> fmt::Debug for PushError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PushError::Full(_) => f.write_str("Full(..)"),
            PushError::IdsExhausted(_) => f.write_str("IdsExhausted(..)"),
        }
    }
}

impl<T> fmt::Display for PushError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PushError::Full(_) => {
                f.write_str("replay window full: release acknowledged events or wait for readers")
            }
            PushError::IdsExhausted(_) => {
                f.write_str("event ids exhausted (next id would be u64::MAX)")
            }
        }
    }
}

impl<T> std::error::Error for PushError<T> {}

/// A resume that cannot be honoured. Never answer it with a stream that starts elsewhere.
///
/// ```
/// use replay_ring::{ReplayRing, ResumeError};
///
/// let (mut producer, ring) = ReplayRing::<u32>::new(4, 2).unwrap();
/// for n in 0..3 {
///     producer.try_push(n).unwrap();
/// }
/// ring.release_through(2).unwrap();
/// assert_eq!(
///     ring.resume(Some(0)).unwrap_err(),
///     ResumeError::BelowFloor { requested: 0, floor: 3, head: 3 }
/// );
/// assert_eq!(
///     ring.resume(Some(9)).unwrap_err(),
///     ResumeError::AheadOfHead { requested: 9, head: 3 }
/// );
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ResumeError {
    /// Events `requested + 1 ..= floor - 1` are not retained (released, or from before the ring's
    /// [`first_id`](crate::Builder::first_id)): replaying would skip them.
    BelowFloor {
        /// The client's `Last-Event-ID`.
        requested: u64,
        /// The oldest id still retained.
        floor: u64,
        /// The newest id.
        head: u64,
    },
    /// The client claims an id this stream never assigned: its state belongs to another stream.
    AheadOfHead {
        /// The client's `Last-Event-ID`.
        requested: u64,
        /// The newest id.
        head: u64,
    },
    /// Every reader-table entry is taken: the cursor was valid, but there is no room for another
    /// reader right now (see [`TooManyReaders`]).
    TooManyReaders(TooManyReaders),
}

impl From<TooManyReaders> for ResumeError {
    fn from(error: TooManyReaders) -> Self {
        ResumeError::TooManyReaders(error)
    }
}

impl fmt::Display for ResumeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ResumeError::BelowFloor {
                requested,
                floor,
                head,
            } => {
                write!(
                    f,
                    "cannot resume after id {requested}: events {}..={} are not retained",
                    requested.saturating_add(1),
                    floor.saturating_sub(1)
                )?;
                if floor > head {
                    write!(f, " (nothing retained; newest id {head})")
                } else {
                    write!(f, " (retained {floor}..={head})")
                }
            }
            ResumeError::AheadOfHead { requested, head } => write!(
                f,
                "cannot resume after id {requested}: the stream's newest id is {head} (state mismatch)"
            ),
            ResumeError::TooManyReaders(error) => error.fmt(f),
        }
    }
}

impl std::error::Error for ResumeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ResumeError::TooManyReaders(error) => Some(error),
            _ => None,
        }
    }
}

/// Every entry of the ring's reader table is in use (`max_readers` at construction), so no further
/// [`Reader`](crate::Reader) can be registered until one is dropped.
///
/// Returned by [`ReplayRing::reader`](crate::ReplayRing::reader), and wrapped in
/// [`ResumeError::TooManyReaders`] by [`ReplayRing::resume`](crate::ReplayRing::resume) once the
/// cursor itself has been found valid.
///
/// ```
/// use replay_ring::{ReplayRing, ResumeError};
///
/// let (_producer, ring) = ReplayRing::<u8>::new(4, 1).unwrap();
/// let _only = ring.reader().unwrap();
/// let full = ring.reader().unwrap_err();
/// assert_eq!(full.limit, 1);
/// assert_eq!(ring.resume(Some(0)).unwrap_err(), ResumeError::TooManyReaders(full));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct TooManyReaders {
    /// The configured limit (`max_readers`).
    pub limit: usize,
}

impl TooManyReaders {
    pub(crate) fn new(limit: usize) -> Self {
        TooManyReaders { limit }
    }
}

impl fmt::Display for TooManyReaders {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot register a reader: all {} reader slots are in use",
            self.limit
        )
    }
}

impl std::error::Error for TooManyReaders {}

/// A live read that cannot continue.
///
/// ```
/// use replay_ring::{ReadError, ReplayRing};
///
/// let (mut producer, ring) = ReplayRing::<u8>::new(4, 1).unwrap();
/// let mut reader = ring.reader().unwrap();
/// producer.try_push(1).unwrap();
/// ring.release_through(1).unwrap(); // released before this reader read it
/// assert_eq!(reader.try_recv(), Err(ReadError::Gap { next: 1, floor: 2, head: 1 }));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReadError {
    /// The reader's next event was released before it was read. The reader never skips: resume
    /// again (the client gets an explicit gap) or re-initialise.
    Gap {
        /// The id this reader needed next.
        next: u64,
        /// The oldest id still retained.
        floor: u64,
        /// The newest id.
        head: u64,
    },
    /// The stream ended and this reader has read everything that was retained.
    Closed(CloseReason),
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Gap { next, floor, head } => write!(
                f,
                "reader fell out of the window: needed id {next}, retained {floor}..={head}"
            ),
            ReadError::Closed(reason) => write!(f, "{reason}"),
        }
    }
}

impl std::error::Error for ReadError {}

/// A release that would drop events the stream never produced.
///
/// ```
/// use replay_ring::{ReleaseError, ReplayRing};
///
/// let (_producer, ring) = ReplayRing::<u32>::new(4, 1).unwrap();
/// assert_eq!(
///     ring.release_through(1),
///     Err(ReleaseError::AheadOfHead { requested: 1, head: 0 })
/// );
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReleaseError {
    /// `requested` is newer than the newest id.
    AheadOfHead {
        /// The id asked to release through.
        requested: u64,
        /// The newest id.
        head: u64,
    },
}

impl fmt::Display for ReleaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ReleaseError::AheadOfHead { requested, head } => {
                write!(
                    f,
                    "cannot release through id {requested}: the newest id is {head}"
                )
            }
        }
    }
}

impl std::error::Error for ReleaseError {}

/// A ring that cannot be built as configured.
///
/// ```
/// use replay_ring::{BuildError, ReplayRing};
///
/// assert_eq!(ReplayRing::<u8>::new(0, 1).unwrap_err(), BuildError::ZeroCapacity);
/// assert_eq!(ReplayRing::<u8>::new(8, 0).unwrap_err(), BuildError::ZeroReaders);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BuildError {
    /// A capacity of zero can retain nothing.
    ZeroCapacity,
    /// The capacity (after rounding up to a power of two) exceeds the supported maximum
    /// ([`MAX_CAPACITY`](crate::MAX_CAPACITY)), or the slot array would span more than
    /// `isize::MAX` bytes.
    CapacityTooLarge {
        /// The capacity asked for.
        requested: usize,
        /// The largest accepted capacity for this payload type: `MAX_CAPACITY`, or less for a
        /// payload so large that `MAX_CAPACITY` slots of it would exceed `isize::MAX` bytes.
        max: usize,
    },
    /// The allocator refused the slot array.
    AllocationFailed,
    /// A ring nobody can read is a bug in the caller.
    ZeroReaders,
    /// More reader slots than supported.
    TooManyReaders {
        /// The number asked for.
        requested: usize,
        /// The largest accepted number.
        max: usize,
    },
    /// The first id must be in `1..u64::MAX`.
    InvalidFirstId(u64),
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            BuildError::ZeroCapacity => f.write_str("capacity must be at least 1"),
            BuildError::CapacityTooLarge { requested, max } => {
                write!(f, "capacity {requested} exceeds the maximum of {max}")
            }
            BuildError::AllocationFailed => f.write_str("could not allocate the slot array"),
            BuildError::ZeroReaders => f.write_str("max_readers must be at least 1"),
            BuildError::TooManyReaders { requested, max } => {
                write!(f, "max_readers {requested} exceeds the maximum of {max}")
            }
            BuildError::InvalidFirstId(id) => {
                write!(f, "first id {id} is outside 1..u64::MAX")
            }
        }
    }
}

impl std::error::Error for BuildError {}
