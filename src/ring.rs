//! The cloneable [`ReplayRing`] handle: reads the cursors, releases acknowledged events, and
//! registers readers. Built by [`Builder`](crate::Builder), which also returns the stream's
//! [`Producer`](crate::Producer).

use std::fmt;

use crate::error::{CloseReason, ReleaseError, ResumeError, TooManyReaders};
use crate::metrics::Metrics;
use crate::reader::Reader;
use crate::resume::{classify_resume, Resumption};
use crate::shared::Shared;
use crate::sync::{
    ord, Arc,
    Ordering::{AcqRel, Acquire, Relaxed, Release},
};

/// A cheap, cloneable handle on one stream's retained window: read the cursors, release
/// acknowledged events, and resume readers.
///
/// Create one with [`ReplayRing::new`] or [`ReplayRing::builder`]; both also return the stream's
/// single [`Producer`](crate::Producer).
///
/// ```
/// use replay_ring::ReplayRing;
///
/// let (mut producer, ring) = ReplayRing::<&str>::new(8, 2).unwrap();
/// producer.try_push("a").unwrap();
/// producer.try_push("b").unwrap();
/// producer.try_push("c").unwrap();
///
/// // A client that saw id 1 reconnects: it gets exactly 2 and 3.
/// let mut reader = ring.resume(Some(1)).unwrap();
/// let batch = reader.try_read().unwrap().unwrap();
/// assert_eq!(batch.first_id(), 2);
/// assert_eq!(batch.iter().map(|(_, e)| *e).collect::<Vec<_>>(), ["b", "c"]);
/// ```
pub struct ReplayRing<T> {
    pub(crate) shared: Arc<Shared<T>>,
}

impl<T> Clone for ReplayRing<T> {
    fn clone(&self) -> Self {
        ReplayRing {
            shared: self.shared.clone(),
        }
    }
}

impl<T> fmt::Debug for ReplayRing<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplayRing")
            .field("floor", &self.floor())
            .field("head", &self.head())
            .field("capacity", &self.capacity())
            .field("closed", &self.is_closed())
            .finish()
    }
}

impl<T> ReplayRing<T> {
    /// The oldest retained id. Events `floor()..=head()` can be replayed; the window is empty when
    /// `floor() == head() + 1`.
    ///
    /// ```
    /// let (mut producer, ring) = replay_ring::ReplayRing::<u8>::new(4, 1).unwrap();
    /// assert_eq!((ring.floor(), ring.head()), (1, 0));
    /// producer.try_push(9).unwrap();
    /// assert_eq!((ring.floor(), ring.head()), (1, 1));
    /// ```
    pub fn floor(&self) -> u64 {
        self.shared.floor()
    }

    /// The newest id (`first_id - 1` before the first push).
    ///
    /// ```
    /// let (mut producer, ring) = replay_ring::ReplayRing::<u8>::new(4, 1).unwrap();
    /// assert_eq!(ring.head(), 0);
    /// assert_eq!(producer.try_push(1), Ok(ring.head()));
    /// ```
    pub fn head(&self) -> u64 {
        self.shared.head()
    }

    /// The number of events the window can hold (a power of two). For a ring built with
    /// [`Builder::initial_slots`](crate::Builder::initial_slots) below the capacity, this is still
    /// the full capacity, however many slots are allocated yet.
    ///
    /// ```
    /// let (_p, ring) = replay_ring::ReplayRing::<u8>::builder()
    ///     .capacity(64)
    ///     .initial_slots(4)
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(ring.capacity(), 64);
    /// ```
    pub fn capacity(&self) -> usize {
        self.shared.capacity() as usize
    }

    /// How many readers may exist at once.
    pub fn max_readers(&self) -> usize {
        self.shared.readers.limit()
    }

    /// Whether the producer has closed the stream (or been dropped).
    ///
    /// ```
    /// let (producer, ring) = replay_ring::ReplayRing::<u8>::new(4, 1).unwrap();
    /// assert!(!ring.is_closed());
    /// drop(producer);
    /// assert!(ring.is_closed());
    /// ```
    pub fn is_closed(&self) -> bool {
        // Acquire: pairs with the Release store in `Producer::close_inner`, which follows the last
        // publish, so a `head()` called after this returns true is final (what the SSE backend's
        // `ended_after` relies on; the `is_closed_relaxed` mutant, model 5e).
        self.shared
            .closed
            .load(crate::sync::ord("is_closed_relaxed", Acquire, Relaxed))
    }

    /// Why the stream ended, once it has.
    ///
    /// ```
    /// use replay_ring::{CloseReason, ReplayRing};
    ///
    /// let (producer, ring) = ReplayRing::<u8>::new(4, 1).unwrap();
    /// assert_eq!(ring.close_reason(), None);
    /// producer.close(CloseReason::Completed);
    /// assert_eq!(ring.close_reason(), Some(CloseReason::Completed));
    /// ```
    pub fn close_reason(&self) -> Option<CloseReason> {
        self.shared.close_reason()
    }

    /// Acknowledges every event up to and including `id`: they leave the window and their slots may
    /// be reused. Returns the new floor, which may be higher when another thread released further,
    /// and is at most `head() + 1` for a `head()` read after this call. Releasing below the floor
    /// is a no-op; releasing past the head is an error (those events do not exist).
    ///
    /// This is the only way events leave the window: a full window backpressures the producer.
    ///
    /// # Errors
    ///
    /// [`ReleaseError::AheadOfHead`] when `id` is newer than the head; nothing is released then.
    ///
    /// # Panics
    ///
    /// Only if the producer is waiting for room (`ready`, `push(..).await`) and its waker panics
    /// when woken (a waker is the producer's executor's code): the floor has moved first, and the
    /// panic continues from this call. The same holds for dropping a [`Batch`](crate::Batch), a
    /// drain or a gate that unpins events the producer waits for.
    ///
    /// ```
    /// use replay_ring::ReplayRing;
    ///
    /// let (mut producer, ring) = ReplayRing::<u8>::new(2, 1).unwrap();
    /// producer.try_push(1).unwrap();
    /// producer.try_push(2).unwrap();
    /// assert!(producer.try_push(3).unwrap_err().is_full());
    /// assert_eq!(ring.release_through(1), Ok(2));
    /// assert_eq!(producer.try_push(3), Ok(3));
    /// assert_eq!(ring.release_through(1), Ok(2)); // already released: no-op
    /// ```
    pub fn release_through(&self, id: u64) -> Result<u64, ReleaseError> {
        // Acquire: pairs with the producer's Release publish; `id` must name an assigned event.
        let head = self.shared.head.load(Acquire);
        if id > head {
            return Err(ReleaseError::AheadOfHead {
                requested: id,
                head,
            });
        }
        // `id <= head <= LAST_ID`, so `id + 1` cannot overflow.
        let new_floor = id + 1;
        // Release: pairs with the readers' Acquire loads of `floor` (`pin_and_check`, `resume`,
        // `floor()`), so a reader that sees this floor also sees a `head` of at least `id` (read
        // above): `floor <= head + 1` in every snapshot (the `floor_relaxed` and
        // `pin_floor_relaxed` mutants). The producer's Acquire load in `refresh_limit` pairs with
        // it too, as belt and braces (docs/verification.md). Acquire: pairs with the Release
        // half of an earlier releaser's `fetch_max`, whose floor we may return; that releaser's
        // `head` load then happens-before any `head` our caller loads next, so the returned floor
        // is at most that `head + 1` too (the `floor_release_only` mutant).
        let order = ord(
            "floor_release_only",
            ord("floor_relaxed", AcqRel, Relaxed),
            Release,
        );
        let previous = self.shared.floor.fetch_max(new_floor, order);
        if new_floor > previous {
            self.shared.wake_producer();
        }
        Ok(previous.max(new_floor))
    }

    /// Registers a reader positioned after `last_event_id` (an SSE `Last-Event-ID`):
    ///
    /// - `None`: live from the head, nothing replayed (as [`reader`](Self::reader));
    /// - `Some(head)`: a no-op resume, nothing replayed;
    /// - `Some(x)` with `floor - 1 <= x < head`: the reader yields exactly `x + 1 ..= head`, then
    ///   follows live events;
    /// - `Some(x)` with `x < floor - 1`: [`ResumeError::BelowFloor`], because `x + 1 ..= floor - 1`
    ///   are gone;
    /// - `Some(x)` with `x > head`: [`ResumeError::AheadOfHead`], a state mismatch.
    ///
    /// The decision is [`classify_resume`](crate::classify_resume) on a snapshot of the cursors.
    /// The cursor is checked before a reader-table entry is claimed, so a wrong cursor gets its own
    /// error even when the table is full.
    ///
    /// A successful replay is pinned before this returns: the producer cannot overwrite the events
    /// the reader is about to read (it sees backpressure instead), nor a release take them from it,
    /// until its first read, which lends them: the whole replay, or on a ring built with
    /// [`Builder::initial_slots`](crate::Builder::initial_slots) the part up to a slot segment
    /// boundary, or one event for [`Reader::try_recv`](crate::Reader::try_recv) (and for `recv`,
    /// `recv_timeout` and the `Stream`, which read one event at a time too). What that read
    /// leaves is then read like any other event: a release that overtook the reader is an explicit
    /// [`ReadError::Gap`](crate::ReadError::Gap), never a skip. A retention policy must not release
    /// what a reader that is still reading needs (the SSE and MCP layers release no further than
    /// their slowest connection that keeps reading); a reader pins only while it borrows, so that
    /// one that stops reading never holds the producer back.
    /// Takes a bounded number of steps whatever the window size or the producer does.
    ///
    /// # Errors
    ///
    /// [`ResumeError::AheadOfHead`] and [`ResumeError::BelowFloor`] for a cursor the window cannot
    /// honour (never answer those with a stream that starts elsewhere);
    /// [`ResumeError::TooManyReaders`] when the cursor is fine but every reader-table entry is
    /// taken.
    ///
    /// ```
    /// use replay_ring::{ReplayRing, ResumeError};
    ///
    /// let (mut producer, ring) = ReplayRing::<u32>::new(8, 4).unwrap();
    /// for n in 1..=5 {
    ///     producer.try_push(n * 10).unwrap();
    /// }
    /// let mut reader = ring.resume(Some(3)).unwrap();
    /// let batch = reader.try_read().unwrap().unwrap();
    /// assert_eq!((batch.first_id(), batch.last_id()), (4, 5));
    /// drop(batch);
    ///
    /// let mut caught_up = ring.resume(Some(5)).unwrap();
    /// assert!(caught_up.try_read().unwrap().is_none()); // no-op: nothing to replay
    /// assert!(matches!(ring.resume(Some(6)), Err(ResumeError::AheadOfHead { head: 5, .. })));
    /// ```
    pub fn resume(&self, last_event_id: Option<u64>) -> Result<Reader<T>, ResumeError>
    where
        T: Sync,
    {
        let Some(last) = last_event_id else {
            return Ok(self.reader()?);
        };
        let shared = &*self.shared;
        // Floor first, then head: the floor was released against a head no newer than the one we
        // load next, so the snapshot keeps `floor <= head + 1`.
        // Acquire: pairs with the Release half of `release_through`'s `fetch_max`.
        let floor = shared
            .floor
            .load(ord("resume_floor_relaxed", Acquire, Relaxed));
        // Acquire: pairs with the producer's Release publish.
        let head = shared.head.load(Acquire);
        let first = match classify_resume(floor, head, last) {
            Ok(Resumption::AtHead) => None,
            Ok(Resumption::Replay { first, .. }) => Some(first),
            Err(error) => {
                self.count_refusal(&error);
                return Err(error);
            }
        };
        let index = shared.claim_reader_entry()?;
        // SAFETY: `index` was just claimed, on this thread.
        let entry = unsafe { shared.readers.entry(index) };
        let Some(first) = first else {
            entry.counters.count(&entry.counters.resumes_noop);
            // `last == head <= LAST_ID`: no overflow.
            // SAFETY: the claim is ours, and the reader takes it over.
            let reader = unsafe { Reader::new(self.shared.clone(), index, last + 1, false, false) };
            return Ok(reader);
        };
        // The snapshot said `first` is retained; the pin makes it stay so, or finds that a release
        // overtook us.
        let mut active = false;
        // SAFETY: the claim is ours.
        match unsafe { crate::reader::pin_and_check(shared, index, &mut active, first) } {
            Ok(()) => {
                entry.counters.count(&entry.counters.resumes_ok);
                // SAFETY: the claim is ours, and the reader takes it over.
                Ok(unsafe { Reader::new(self.shared.clone(), index, first, true, active) })
            }
            Err(floor) => {
                // SAFETY: the claim is ours, and is given up here (nothing else holds `index`).
                unsafe { shared.free_reader_entry(index, active, false, false) };
                // Re-read the head: the floor came from a release of an id <= the head at that time,
                // so this snapshot keeps `floor <= head + 1` (the head read above may predate it).
                // Acquire: pairs with the producer's Release publish.
                let head = shared.head.load(Acquire);
                let error = ResumeError::BelowFloor {
                    requested: last,
                    floor,
                    head,
                };
                self.count_refusal(&error);
                Err(error)
            }
        }
    }

    fn count_refusal(&self, error: &ResumeError) {
        let counter = match error {
            ResumeError::BelowFloor { .. } => &self.shared.resumes_below_floor,
            ResumeError::AheadOfHead { .. } => &self.shared.resumes_ahead_of_head,
            _ => return,
        };
        // Relaxed: a statistic; refusals are a cold path, so a shared RMW is acceptable here.
        counter.fetch_add(1, Relaxed);
    }

    /// A reader that follows live events from the current head: it yields only events pushed after
    /// it was registered.
    ///
    /// # Errors
    ///
    /// [`TooManyReaders`] when every reader-table entry is taken (`max_readers`).
    ///
    /// ```
    /// let (mut producer, ring) = replay_ring::ReplayRing::<u8>::new(4, 1).unwrap();
    /// producer.try_push(1).unwrap();
    /// let mut reader = ring.reader().unwrap();
    /// assert_eq!(reader.try_recv(), Ok(None)); // id 1 predates it
    /// producer.try_push(2).unwrap();
    /// assert_eq!(reader.try_recv().unwrap().unwrap().id, 2);
    /// ```
    pub fn reader(&self) -> Result<Reader<T>, TooManyReaders>
    where
        T: Sync,
    {
        let index = self.shared.claim_reader_entry()?;
        // Acquire: pairs with the producer's Release publish.
        let head = self.shared.head.load(Acquire);
        // `head <= LAST_ID`: no overflow.
        // SAFETY: `index` was just claimed, on this thread, and the reader takes it over.
        Ok(unsafe { Reader::new(self.shared.clone(), index, head + 1, false, false) })
    }

    /// A snapshot of the stream's counters.
    ///
    /// ```
    /// use replay_ring::ReplayRing;
    ///
    /// let (mut producer, ring) = ReplayRing::<u8>::new(4, 2).unwrap();
    /// producer.try_push(1).unwrap();
    /// producer.try_push(2).unwrap();
    /// ring.release_through(1).unwrap();
    /// let _ = ring.resume(Some(0)); // below the floor
    /// let m = ring.metrics();
    /// assert_eq!((m.events_enqueued, m.events_released), (2, 1));
    /// assert_eq!(m.resumes_below_floor, 1);
    /// ```
    pub fn metrics(&self) -> Metrics {
        Metrics::collect(&self.shared)
    }
}
