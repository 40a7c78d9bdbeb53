//! The contract between the SSE/MCP layer and whatever stores a stream's window: the in-process
//! [`ReplayRing`] here, or a network store (Redis Streams, PostgreSQL) in another crate.
//!
//! A backend is three handles:
//!
//! - [`Backend`]: the shared side (cheap to clone): window, release, resume, close reason,
//!   counters;
//! - [`BackendProducer`]: the single producer: append with an eagerly assigned id, wait for
//!   room, close;
//! - [`Tail`]: one reader, positioned by a resume, yielding batches of `(id, payload)`.
//!
//! The payload type is the backend's ([`Backend::Payload`]): [`Bytes`](bytes::Bytes) for a network store, any
//! `Clone` type for the ring.
//!
//! Every backend keeps the same promises (the `contract` suite checks them):
//!
//! 1. **Eager, gap-free ids.** The k-th accepted append gets `first + k - 1`; the payload is built
//!    from its id ([`BackendProducer::try_append_with`]). A refused append consumes no id, and hands
//!    the closure back uncalled unless it had already run ([`AppendError`] says when).
//! 2. **Release, never evict.** Events leave only through [`Backend::release_through`]; a full
//!    window refuses appends ([`AppendError::Full`]) until a release makes room
//!    ([`BackendProducer::ready`]).
//! 3. **Typed resume.** [`Backend::resume`] from `x` yields exactly `x + 1 ..= head` and then live
//!    events; `x < floor - 1` and `x > head` are refused ([`OpenError::Refused`]).
//! 4. **Explicit end.** After [`BackendProducer::close`], every tail yields everything retained and
//!    then [`TailError::Closed`] with the reason.
//! 5. **Failures are typed.** A backend that cannot answer (network, server) says so with an
//!    [`Unavailable`] inside the operation's error; it never answers with a guess.
//!
//! Every method returns `impl Future + Send`, so the traits work on a multi-threaded runtime without
//! boxing. The in-process ring answers immediately (its futures are ready on first poll, except the
//! waits).
//!
//! # Example
//!
//! Code written against the traits runs on any backend; here on a ring of `Bytes`:
//!
//! ```
//! use bytes::Bytes;
//! use replay_ring::ReplayRing;
//! use replay_ring_sse::backend::{AppendError, Backend, BackendProducer, OpenError, Tail};
//!
//! async fn demo<P, B>(mut producer: P)
//! where
//!     P: BackendProducer<Backend = B>,
//!     B: Backend<Producer = P, Payload = Bytes>,
//! {
//!     let backend = producer.backend();
//!     for _ in 0..3 {
//!         producer.try_append_with(|id| Bytes::from(format!("event {id}"))).await.unwrap();
//!     }
//!     // A client that saw id 1 reconnects: it gets exactly 2 and 3.
//!     let mut tail = backend.resume(Some(1)).await.unwrap();
//!     let mut batch = Vec::new();
//!     tail.next_batch(&mut batch).await.unwrap();
//!     assert_eq!(batch, [(2, Bytes::from("event 2")), (3, Bytes::from("event 3"))]);
//!
//!     // The window (capacity 4) has room for one more; a refused append burns no id.
//!     producer.try_append_with(|id| Bytes::from(format!("event {id}"))).await.unwrap();
//!     let refused = producer.try_append_with(|_| Bytes::new()).await.unwrap_err();
//!     assert!(matches!(refused, AppendError::Full(_)));
//!     backend.release_through(2).await.unwrap();
//!     assert_eq!(producer.try_append_with(|id| Bytes::from(format!("event {id}"))).await.ok(), Some(5));
//!
//!     // Id 1 was released: resuming from 0 is an explicit gap.
//!     assert!(matches!(backend.resume(Some(0)).await, Err(OpenError::Refused(_))));
//! }
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let (producer, _ring) = ReplayRing::<Bytes>::new(4, 4).unwrap();
//! demo(producer).await;
//! # });
//! ```

use replay_ring::{
    CloseReason, Metrics, Producer, PushError, ReadError, Reader, ReleaseError as RingReleaseError,
    ReplayRing, ResumeError,
};
use std::error::Error as StdError;
use std::fmt;
use std::future::{ready, Future};
use std::sync::Arc;

/// Floor and head of a stream at one instant: ids `floor ..= head` are retained (none when
/// `floor == head + 1`).
///
/// ```
/// let w = replay_ring_sse::backend::Window { floor: 3, head: 5 };
/// assert_eq!(w.retained(), 3);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Window {
    /// Oldest retained id (`head + 1` when nothing is retained).
    pub floor: u64,
    /// Newest assigned id (`first id - 1` before the first append).
    pub head: u64,
}

impl Window {
    /// How many events are retained.
    ///
    /// ```
    /// assert_eq!(replay_ring_sse::backend::Window { floor: 6, head: 5 }.retained(), 0);
    /// ```
    pub fn retained(&self) -> u64 {
        (self.head + 1).saturating_sub(self.floor)
    }
}

/// Counters every backend reports, for metrics. Construct with `Counters::default()` and set the
/// fields a backend tracks; the others stay 0.
///
/// ```
/// let mut c = replay_ring_sse::backend::Counters::default();
/// c.events_enqueued = 3;
/// assert_eq!((c.events_enqueued, c.events_released), (3, 0));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Counters {
    /// Events accepted (each got an id).
    pub events_enqueued: u64,
    /// Events that left the window through a release.
    pub events_released: u64,
    /// Resumes that replayed a suffix.
    pub resumes_ok: u64,
    /// Resumes from exactly the head.
    pub resumes_noop: u64,
    /// Resumes refused below the floor.
    pub resumes_below_floor: u64,
    /// Resumes refused ahead of the head.
    pub resumes_ahead_of_head: u64,
    /// Appends refused because the window was full.
    pub producer_full: u64,
    /// Times the producer waited for room.
    pub producer_waits: u64,
    /// Tails open right now.
    pub readers_active: usize,
    /// Oldest retained id.
    pub floor: u64,
    /// Newest id.
    pub head: u64,
    /// Window capacity.
    pub capacity: usize,
}

impl From<Metrics> for Counters {
    /// ```
    /// let (_p, ring) = replay_ring::ReplayRing::<u8>::new(4, 1).unwrap();
    /// let c = replay_ring_sse::backend::Counters::from(ring.metrics());
    /// assert_eq!((c.capacity, c.floor, c.head), (4, 1, 0));
    /// ```
    fn from(m: Metrics) -> Self {
        Counters {
            events_enqueued: m.events_enqueued,
            events_released: m.events_released,
            resumes_ok: m.resumes_ok,
            resumes_noop: m.resumes_noop,
            resumes_below_floor: m.resumes_below_floor,
            resumes_ahead_of_head: m.resumes_ahead_of_head,
            producer_full: m.producer_full,
            producer_waits: m.producer_waits,
            readers_active: m.readers_active,
            floor: m.floor,
            head: m.head,
            capacity: m.capacity,
        }
    }
}

/// The backend could not answer (connection lost, server error, timeout). Retrying may help; the
/// stream's state is whatever the backend holds, never a guess.
///
/// ```
/// use replay_ring_sse::backend::Unavailable;
/// let e = Unavailable::with_source("XADD failed", std::io::Error::other("connection reset"));
/// assert_eq!(e.to_string(), "backend unavailable: XADD failed");
/// assert!(std::error::Error::source(&e).is_some());
/// ```
#[derive(Debug, Clone)]
pub struct Unavailable {
    message: Arc<str>,
    source: Option<Arc<dyn StdError + Send + Sync>>,
}

impl Unavailable {
    /// A failure described by `message`.
    ///
    /// ```
    /// assert_eq!(replay_ring_sse::backend::Unavailable::new("timeout").message(), "timeout");
    /// ```
    pub fn new(message: impl Into<Arc<str>>) -> Self {
        Unavailable {
            message: message.into(),
            source: None,
        }
    }

    /// A failure caused by `source`.
    ///
    /// ```
    /// let e = replay_ring_sse::backend::Unavailable::with_source("read", std::io::Error::other("eof"));
    /// assert_eq!(std::error::Error::source(&e).unwrap().to_string(), "eof");
    /// ```
    pub fn with_source(
        message: impl Into<Arc<str>>,
        source: impl StdError + Send + Sync + 'static,
    ) -> Self {
        Unavailable {
            message: message.into(),
            source: Some(Arc::new(source)),
        }
    }

    /// What failed.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "backend unavailable: {}", self.message)
    }
}

impl StdError for Unavailable {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn StdError + 'static))
    }
}

/// An append that was refused. Except for [`Unavailable`](AppendError::Unavailable) with
/// `make: None`, no id was consumed. The closure comes back uncalled except in that case,
/// [`Closed`](AppendError::Closed)`(None)`, [`Superseded`](AppendError::Superseded)`(None)`,
/// [`Refused`](AppendError::Refused) and [`TooLarge`](AppendError::TooLarge), where it had
/// already been called.
///
/// ```
/// use replay_ring_sse::backend::AppendError;
/// let e: AppendError<u8> = AppendError::Full(7);
/// assert!(e.is_full());
/// assert_eq!(e.into_inner(), Some(7));
/// ```
#[non_exhaustive]
pub enum AppendError<F> {
    /// The window holds `capacity` unreleased (or still-borrowed) events. Release, or wait with
    /// [`BackendProducer::ready`].
    Full(F),
    /// The next id would be `u64::MAX`; ids never wrap.
    IdsExhausted(F),
    /// The stream has ended: closed, or lost in the backend (deleted, expired, or rolled back
    /// behind ids it had given out). No later append can succeed, and the stream holds nothing of
    /// this one (a lost stream lost what it held). `None` when the closure had already been
    /// called (a network backend learns of the end from the refusal of the append itself).
    Closed(Option<F>),
    /// This producer may never append again, but the stream goes on: another producer took it
    /// over (a network backend's producer lease moved on while this one was paused or cut off),
    /// or the next one to take the lease will (the lease lapsed and nobody holds it). Nothing was
    /// stored. `None` when the closure had already been called.
    Superseded(Option<F>),
    /// The backend could not be reached. `make` is `Some` when the failure happened before the
    /// payload was built (nothing was sent: no id consumed). `None` means the append's outcome is
    /// unknown: the event may have been stored with the id the closure was given. A backend that
    /// returns `None` keeps the event and stores it under that id, once, before its next append
    /// or close (the Redis backend does), or documents what it does instead:
    /// [`Publisher`](crate::Publisher) reports it as
    /// [`PublishError::Unconfirmed`](crate::PublishError::Unconfirmed), an event not to be
    /// published again. A backend that knows its refusal stored nothing returns
    /// [`Refused`](AppendError::Refused) instead.
    Unavailable {
        /// The closure, if it was not called.
        make: Option<F>,
        /// What failed.
        error: Unavailable,
    },
    /// The backend refused the payload the closure built for a reason that may pass (a network
    /// store out of memory, or denying the write): nothing was stored, no id was consumed, and
    /// the backend does not keep the event. The stream stays open; publishing the event again
    /// (built again) retries.
    Refused(Unavailable),
    /// The payload the closure built is longer than the backend stores as one event (a network
    /// backend's payload limit). Nothing was sent and no id consumed; the stream stays open and
    /// a smaller event can follow. The closure was called: only its payload tells the size.
    TooLarge {
        /// The payload's length in bytes.
        bytes: u64,
        /// The longest payload the backend takes.
        limit: u64,
    },
}

impl<F> AppendError<F> {
    /// Whether the window was full.
    pub fn is_full(&self) -> bool {
        matches!(self, AppendError::Full(_))
    }

    /// The closure, if it was not called.
    pub fn into_inner(self) -> Option<F> {
        match self {
            AppendError::Full(f) | AppendError::IdsExhausted(f) => Some(f),
            AppendError::Closed(make)
            | AppendError::Superseded(make)
            | AppendError::Unavailable { make, .. } => make,
            AppendError::Refused(_) | AppendError::TooLarge { .. } => None,
        }
    }
}

impl<F> fmt::Debug for AppendError<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AppendError::Full(_) => f.write_str("Full(..)"),
            AppendError::IdsExhausted(_) => f.write_str("IdsExhausted(..)"),
            AppendError::Closed(make) => f
                .debug_struct("Closed")
                .field("closure_returned", &make.is_some())
                .finish(),
            AppendError::Superseded(make) => f
                .debug_struct("Superseded")
                .field("closure_returned", &make.is_some())
                .finish(),
            AppendError::Unavailable { make, error } => f
                .debug_struct("Unavailable")
                .field("closure_returned", &make.is_some())
                .field("error", error)
                .finish(),
            AppendError::Refused(error) => f.debug_tuple("Refused").field(error).finish(),
            AppendError::TooLarge { bytes, limit } => f
                .debug_struct("TooLarge")
                .field("bytes", bytes)
                .field("limit", limit)
                .finish(),
        }
    }
}

impl<F> fmt::Display for AppendError<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AppendError::Full(_) => {
                f.write_str("replay window full: release acknowledged events or wait")
            }
            AppendError::IdsExhausted(_) => {
                f.write_str("event ids exhausted (next id would be u64::MAX)")
            }
            AppendError::Closed(_) => f.write_str("stream ended (closed, or lost in the backend)"),
            AppendError::Superseded(_) => {
                f.write_str("another producer took the stream over (nothing appended)")
            }
            AppendError::Unavailable {
                make: Some(_),
                error,
            } => {
                write!(f, "{error} (nothing appended)")
            }
            AppendError::Unavailable { make: None, error } => {
                write!(f, "{error} (append outcome unknown)")
            }
            AppendError::Refused(error) => write!(f, "{error} (refused, nothing appended)"),
            AppendError::TooLarge { bytes, limit } => write!(
                f,
                "event of {bytes} bytes exceeds the backend's limit of {limit} bytes (nothing \
                 appended)"
            ),
        }
    }
}

impl<F> StdError for AppendError<F> {}

impl<F> From<PushError<F>> for AppendError<F> {
    fn from(e: PushError<F>) -> Self {
        match e {
            PushError::Full(f) => AppendError::Full(f),
            PushError::IdsExhausted(f) => AppendError::IdsExhausted(f),
            // A refusal this version does not know: nothing was appended, the closure comes back.
            other => {
                let error = Unavailable::new(other.to_string());
                AppendError::Unavailable {
                    make: Some(other.into_inner()),
                    error,
                }
            }
        }
    }
}

/// A resume that was refused.
///
/// ```
/// use replay_ring::ResumeError;
/// use replay_ring_sse::backend::OpenError;
/// let e = OpenError::Refused(ResumeError::AheadOfHead { requested: 9, head: 3 });
/// assert!(e.to_string().contains("newest id is 3"));
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum OpenError {
    /// Below the floor or ahead of the head: the core's typed refusal (never its
    /// `TooManyReaders`, which is [`OpenError::TooManyReaders`] here).
    Refused(ResumeError),
    /// Every reader place is taken; retry later.
    TooManyReaders {
        /// The backend's [`max_readers`](Backend::max_readers).
        limit: usize,
    },
    /// The stream no longer exists in the backend.
    Gone,
    /// The backend could not be reached.
    Unavailable(Unavailable),
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpenError::Refused(e) => write!(f, "{e}"),
            OpenError::TooManyReaders { limit } => {
                write!(f, "all {limit} reader places are in use; retry later")
            }
            OpenError::Gone => f.write_str("stream not found"),
            OpenError::Unavailable(e) => write!(f, "{e}"),
        }
    }
}

impl StdError for OpenError {}

impl From<ResumeError> for OpenError {
    fn from(e: ResumeError) -> Self {
        match e {
            ResumeError::TooManyReaders(full) => OpenError::TooManyReaders { limit: full.limit },
            other => OpenError::Refused(other),
        }
    }
}

/// A release that was refused.
///
/// ```
/// use replay_ring_sse::backend::ReleaseError;
/// let e = ReleaseError::AheadOfHead { requested: 4, head: 2 };
/// assert!(e.to_string().contains("newest id is 2"));
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum ReleaseError {
    /// `requested` is newer than the newest id: those events do not exist.
    AheadOfHead {
        /// The id asked to release through.
        requested: u64,
        /// The newest id.
        head: u64,
    },
    /// The stream no longer exists in the backend.
    Gone,
    /// The backend could not be reached.
    Unavailable(Unavailable),
}

impl fmt::Display for ReleaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReleaseError::AheadOfHead { requested, head } => write!(
                f,
                "cannot release through id {requested}: the newest id is {head}"
            ),
            ReleaseError::Gone => f.write_str("stream not found"),
            ReleaseError::Unavailable(e) => write!(f, "{e}"),
        }
    }
}

impl StdError for ReleaseError {}

impl From<RingReleaseError> for ReleaseError {
    fn from(e: RingReleaseError) -> Self {
        match e {
            RingReleaseError::AheadOfHead { requested, head } => {
                ReleaseError::AheadOfHead { requested, head }
            }
            // A refusal this version does not know: the floor did not move.
            other => ReleaseError::Unavailable(Unavailable::new(other.to_string())),
        }
    }
}

/// A tail that cannot continue.
///
/// ```
/// use replay_ring::{CloseReason, ReadError};
/// use replay_ring_sse::backend::TailError;
/// let e = TailError::from(ReadError::Closed(CloseReason::Completed));
/// assert_eq!(e.close_reason(), Some(&CloseReason::Completed));
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum TailError {
    /// The tail's next event was released before it was read; it never skips.
    Gap {
        /// The id this tail needed next.
        next: u64,
        /// The oldest retained id.
        floor: u64,
        /// The newest id.
        head: u64,
    },
    /// The stream ended and this tail has yielded everything retained.
    Closed(CloseReason),
    /// The backend could not be reached. The tail's position is unchanged: calling again retries.
    Unavailable(Unavailable),
    /// The stream is gone from the backend (deleted, expired, or lost by the store): its ids will
    /// never be served again, so resuming is pointless; a client starts over. `String`: the
    /// backend's own account, for logs.
    StreamLost(String),
}

impl TailError {
    /// The close reason, if the stream ended.
    pub fn close_reason(&self) -> Option<&CloseReason> {
        match self {
            TailError::Closed(reason) => Some(reason),
            _ => None,
        }
    }
}

impl fmt::Display for TailError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TailError::Gap { next, floor, head } => write!(
                f,
                "reader fell out of the window: needed id {next}, retained {floor}..={head}"
            ),
            TailError::Closed(reason) => write!(f, "{reason}"),
            TailError::Unavailable(e) => write!(f, "{e}"),
            TailError::StreamLost(why) => write!(f, "stream lost: {why}"),
        }
    }
}

impl StdError for TailError {}

impl From<ReadError> for TailError {
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::Gap { next, floor, head } => TailError::Gap { next, floor, head },
            ReadError::Closed(reason) => TailError::Closed(reason),
            // A failure this version does not know: the position did not move.
            other => TailError::Unavailable(Unavailable::new(other.to_string())),
        }
    }
}

/// The shared side of a stream: window, release, resume. Cheap to clone; one per connection or
/// task is fine.
pub trait Backend: Clone + Send + Sync + 'static {
    /// What an event carries: [`Bytes`](bytes::Bytes) for a network backend (and for the contract suite); any
    /// `Clone` type for the in-process ring (a `Bytes` clone bumps a reference count).
    type Payload: Clone + Send + Sync + 'static;
    /// The stream's single producer.
    type Producer: BackendProducer<Backend = Self>;
    /// A reader opened by [`resume`](Self::resume).
    type Tail: Tail<Payload = Self::Payload>;

    /// The window capacity: how many unreleased events the producer may get ahead.
    fn capacity(&self) -> usize;

    /// How many tails may be open at once; size per-connection tables with it.
    fn max_readers(&self) -> usize;

    /// Whether every reader of the stream is served by this process, so that a retention policy
    /// with no live connection knows that nobody follows the stream and may release by vacancy
    /// ([`Retention::with_vacancy_release`](crate::Retention::with_vacancy_release)). `true` for
    /// the in-process ring. The default, `false`, is for a store shared between processes (Redis
    /// Streams): another replica's clients may still be reading what this one never served.
    fn readers_are_local(&self) -> bool {
        false
    }

    /// Floor and head, read so that `floor <= head + 1`. A stream the backend has lost (deleted,
    /// expired, another incarnation, corrupt) is an error, never an empty window: the endpoint
    /// answers a `HEAD` from this, and it must not say 200 where the `GET` gets 404.
    ///
    /// # Errors
    /// [`Unavailable`] if the backend cannot answer, or has lost the stream.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    fn window(&self) -> impl Future<Output = Result<Window, Unavailable>> + Send;

    /// The window as this process last saw it, when that is known at once (no wait, no round
    /// trip) and no older than the backend's latest notice of an append or a release; `None`
    /// otherwise, which is always allowed. The SSE writer asks before every chunk of every
    /// connection, for the slow-consumer policy and release planning, where a view a moment old
    /// does no harm: a lag is measured a moment late, and a release is planned within what was
    /// seen. Where it answers `None`, the writer reads [`window`](Self::window). Resume decisions
    /// and the `Replay-*` headers always use `window` or the resume itself. The default answers
    /// `None`.
    fn recent_window(&self) -> Option<Window> {
        None
    }

    /// Releases every event `<= id`; returns the new floor. Idempotent and monotonic: releasing
    /// below the floor is a no-op, the floor never moves back.
    ///
    /// # Errors
    /// [`ReleaseError::AheadOfHead`] if `id > head` (the floor does not move), `Gone`, or
    /// `Unavailable`.
    ///
    /// # Cancel safety
    /// Cancelling may or may not have released; either way the floor is consistent and calling again
    /// is harmless.
    fn release_through(&self, id: u64) -> impl Future<Output = Result<u64, ReleaseError>> + Send;

    /// Opens a tail after `last_event_id`: `None` = live from the head; `Some(head)` = no-op (live);
    /// `Some(x)` with `floor - 1 <= x < head` = yields exactly `x + 1 ..= head`, then live.
    ///
    /// # Errors
    /// [`OpenError::Refused`] with `BelowFloor` (`x < floor - 1`) or `AheadOfHead` (`x > head`),
    /// checked before the reader limit; [`OpenError::TooManyReaders`]; `Gone`; `Unavailable`.
    ///
    /// # Cancel safety
    /// Cancel safe: a tail opened by a cancelled call is dropped, which frees its slot.
    fn resume(
        &self,
        last_event_id: Option<u64>,
    ) -> impl Future<Output = Result<Self::Tail, OpenError>> + Send;

    /// The close reason if the stream has ended and a tail whose cursor is `cursor` has yielded
    /// everything, when that is known at once (no wait, no round trip); `None` otherwise, which is
    /// always allowed. `Some(reason)` promises that no event with an id at or after `cursor` can
    /// ever be appended and that the tail's next read would return `Err(Closed(reason))` (not a
    /// gap, a lost stream or an unavailable backend). A writer asks once it has a whole batch to
    /// encode, so that the response can end in the chunk that carries the last events instead of
    /// in one more chunk after one more wake-up. The default answers `None` (network backends: the
    /// tail finds out on its next read).
    fn ended_after(&self, cursor: u64) -> Option<CloseReason> {
        let _ = cursor;
        None
    }

    /// Why the stream ended, once it has.
    ///
    /// # Errors
    /// [`Unavailable`] if the backend cannot answer.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    fn close_reason(&self)
        -> impl Future<Output = Result<Option<CloseReason>, Unavailable>> + Send;

    /// A snapshot of the stream's counters.
    ///
    /// # Errors
    /// [`Unavailable`] if the backend cannot answer.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    fn counters(&self) -> impl Future<Output = Result<Counters, Unavailable>> + Send;

    /// Records, where every process serving the stream can see it, that a client opened an event
    /// stream of it here, so that a producer in another process waiting for its first subscriber
    /// ([`subscriber_announced`](Self::subscriber_announced)) starts. The SSE endpoint calls it
    /// once, when its first event stream opens, unless [`readers_are_local`](Self::readers_are_local)
    /// (then the producer's own endpoint sees every subscriber). The default does nothing.
    ///
    /// # Errors
    /// [`Unavailable`] if the backend cannot record it (the endpoint tries again while one of its
    /// event streams is open, and at its next one once none is).
    ///
    /// # Cancel safety
    /// Cancel safe: recording twice is recording once.
    fn announce_subscriber(&self) -> impl Future<Output = Result<(), Unavailable>> + Send {
        async { Ok(()) }
    }

    /// Completes once some process has [announced](Self::announce_subscriber) a subscriber of this
    /// stream (at once if one did before). A backend that cannot tell waits forever, which is the
    /// default: `SseProducer::first_subscriber` (feature `axum`) then waits for a subscriber of its
    /// own endpoint only. While the backend cannot be reached it keeps asking. A backend that
    /// finds the stream gone (deleted, expired, replaced by another incarnation) may complete
    /// too: no subscriber can come, and the producer's next send reports the loss.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    fn subscriber_announced(&self) -> impl Future<Output = ()> + Send {
        std::future::pending()
    }
}

/// The single producer of a stream.
pub trait BackendProducer: Send + 'static {
    /// The shared handle of the same stream.
    type Backend: Backend<Producer = Self>;

    /// A shared handle on this producer's stream.
    fn backend(&self) -> Self::Backend;

    /// Appends `make(id)` if there is room, returning `id`. `make` learns the event's id before the
    /// event exists (eager assignment), so the payload can carry it.
    ///
    /// # Errors
    /// `Full`, `IdsExhausted`: no id consumed, `make` handed back uncalled. `Closed`: no id
    /// consumed, and none ever will be; `make` handed back unless the backend learned of the end
    /// from the append itself. `Unavailable`: see [`AppendError::Unavailable`].
    ///
    /// # Cancel safety
    /// Not cancel safe for network backends: once `make` has run, a cancelled append may have
    /// stored the event, or the producer may keep the payload and store it before its next append
    /// or close (the Redis backend's does), so the payload ends up only in the backend. The
    /// ring's future completes on its first poll.
    fn try_append_with<F>(
        &mut self,
        make: F,
    ) -> impl Future<Output = Result<u64, AppendError<F>>> + Send
    where
        F: FnOnce(u64) -> <Self::Backend as Backend>::Payload + Send;

    /// Waits until one append would be accepted (a release made room, or ids are exhausted, which
    /// the append then reports). Wake-ups come from releases and finished reads; spurious returns
    /// are allowed, so callers loop on `try_append_with`.
    ///
    /// # Errors
    /// [`Unavailable`] if the backend cannot be watched.
    ///
    /// # Cancel safety
    /// Cancel safe: waiting consumes nothing.
    fn ready(&mut self) -> impl Future<Output = Result<(), Unavailable>> + Send;

    /// Ends the stream with `reason`. Tails yield everything retained, then
    /// [`TailError::Closed`]`(reason)`.
    ///
    /// # Errors
    /// [`Unavailable`] if the close could not be recorded.
    ///
    /// # Cancel safety
    /// A cancelled close may or may not have been recorded; the producer is consumed either way
    /// (for the ring, dropping it closes with `ProducerDropped`).
    fn close(self, reason: CloseReason) -> impl Future<Output = Result<(), Unavailable>> + Send;
}

/// One reader's live tail: the replay first, then live events.
pub trait Tail: Send + 'static {
    /// What an event carries (the backend's [`Backend::Payload`]).
    type Payload: Clone + Send + Sync + 'static;

    /// The id this tail yields next.
    fn cursor(&self) -> u64;

    /// Waits for at least one event, then clears `out` and fills it with the next events in id
    /// order (`cursor ..`), advancing the cursor past them. Returns how many (at least 1).
    /// `out` is reused: a caller that keeps it avoids an allocation per batch.
    ///
    /// # Errors
    /// [`TailError::Gap`] if the next event was released first, [`TailError::Closed`] once
    /// everything retained was yielded after a close, `Unavailable` on backend failure.
    ///
    /// # Cancel safety
    /// Cancel safe: events are only taken (and the cursor moved) in the poll that returns them.
    fn next_batch(
        &mut self,
        out: &mut Vec<(u64, Self::Payload)>,
    ) -> impl Future<Output = Result<usize, TailError>> + Send;
}

// ---------------------------------------------------------------------------------------------
// The in-process ring.

impl<T: Clone + Send + Sync + 'static> Backend for ReplayRing<T> {
    type Payload = T;
    type Producer = Producer<T>;
    type Tail = Reader<T>;

    fn capacity(&self) -> usize {
        ReplayRing::capacity(self)
    }

    fn max_readers(&self) -> usize {
        ReplayRing::max_readers(self)
    }

    fn readers_are_local(&self) -> bool {
        true
    }

    fn window(&self) -> impl Future<Output = Result<Window, Unavailable>> + Send {
        // Floor first: it never exceeds the head + 1 it was released against, and the head only
        // grows, so the pair keeps `floor <= head + 1`.
        let floor = self.floor();
        let head = self.head();
        ready(Ok(Window { floor, head }))
    }

    fn release_through(&self, id: u64) -> impl Future<Output = Result<u64, ReleaseError>> + Send {
        ready(ReplayRing::release_through(self, id).map_err(ReleaseError::from))
    }

    fn resume(
        &self,
        last_event_id: Option<u64>,
    ) -> impl Future<Output = Result<Self::Tail, OpenError>> + Send {
        ready(ReplayRing::resume(self, last_event_id).map_err(OpenError::from))
    }

    fn ended_after(&self, cursor: u64) -> Option<CloseReason> {
        // `is_closed` is an Acquire load that follows the last publish, so the head read after it
        // is final: nothing more will come.
        if self.is_closed() && cursor > self.head() {
            return ReplayRing::close_reason(self);
        }
        None
    }

    fn close_reason(
        &self,
    ) -> impl Future<Output = Result<Option<CloseReason>, Unavailable>> + Send {
        ready(Ok(ReplayRing::close_reason(self)))
    }

    fn counters(&self) -> impl Future<Output = Result<Counters, Unavailable>> + Send {
        ready(Ok(Counters::from(self.metrics())))
    }
}

impl<T: Clone + Send + Sync + 'static> BackendProducer for Producer<T> {
    type Backend = ReplayRing<T>;

    fn backend(&self) -> Self::Backend {
        self.ring()
    }

    fn try_append_with<F>(
        &mut self,
        make: F,
    ) -> impl Future<Output = Result<u64, AppendError<F>>> + Send
    where
        F: FnOnce(u64) -> T + Send,
    {
        ready(self.try_push_with(make).map_err(AppendError::from))
    }

    async fn ready(&mut self) -> Result<(), Unavailable> {
        Producer::ready(self).await;
        Ok(())
    }

    fn close(self, reason: CloseReason) -> impl Future<Output = Result<(), Unavailable>> + Send {
        Producer::close(self, reason);
        ready(Ok(()))
    }
}

impl<T: Clone + Send + Sync + 'static> Tail for Reader<T> {
    type Payload = T;

    fn cursor(&self) -> u64 {
        Reader::cursor(self)
    }

    async fn next_batch(&mut self, out: &mut Vec<(u64, T)>) -> Result<usize, TailError> {
        // A connection that keeps up with a busy stream reads larger batches (the endpoint runs
        // on tokio).
        let batch = self.read_coalesced().await?;
        out.clear();
        // For `Bytes`, a clone bumps a reference count: no copy of the payload, and no
        // allocation once `out` has grown to the largest batch.
        out.extend(batch.iter().map(|(id, payload)| (id, payload.clone())));
        Ok(out.len())
    }
}
