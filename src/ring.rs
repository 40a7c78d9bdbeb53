//! The cloneable [`ReplayRing`] handle: reads the cursors, releases acknowledged events, and
//! registers readers. Built by [`Builder`](crate::Builder), which also returns the stream's
//! [`Producer`](crate::Producer).

use std::fmt;

use crate::error::{CloseReason, ReleaseError, ResumeError};
use crate::metrics::Metrics;
use crate::reader::Reader;
use crate::shared::Shared;
use crate::sync::{
    ord, Arc,
    Ordering::{AcqRel, Acquire, Relaxed},
};

/// A cheap, cloneable handle on one stream's retained window: read the cursors, release
/// acknowledged events, and resume readers.
///
/// Create one with [`ReplayRing::new`] or [`ReplayRing::builder`]; both also return the stream's
/// single [`Producer`].
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
        // Acquire: pairs with the Release half of `release_through`'s `fetch_max`.
        self.shared.floor.load(Acquire)
    }

    /// The newest id (`first_id - 1` before the first push).
    ///
    /// ```
    /// let (mut producer, ring) = replay_ring::ReplayRing::<u8>::new(4, 1).unwrap();
    /// assert_eq!(ring.head(), 0);
    /// assert_eq!(producer.try_push(1), Ok(ring.head()));
    /// ```
    pub fn head(&self) -> u64 {
        // Acquire: pairs with the producer's Release publish of `head`.
        self.shared.head.load(Acquire)
    }

    /// The number of events the window can hold (a power of two).
    pub fn capacity(&self) -> usize {
        self.shared.slots.len()
    }

    /// How many readers may exist at once.
    pub fn max_readers(&self) -> usize {
        self.shared.readers.len()
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
        // Acquire: pairs with the Release store in `Producer::close_inner`.
        self.shared.closed.load(Acquire)
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
    /// be reused. Returns the new floor. Releasing below the floor is a no-op; releasing past the head
    /// is an error (those events do not exist).
    ///
    /// This is the only way events leave the window: a full window backpressures the producer.
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
        // Release: pairs with the producer's Acquire load of `floor` in `refresh_limit`, so that this
        // advance happens-before the producer's SeqCst fence there (the hazard argument in
        // docs/design.md). Acquire: the returned floor is used by the caller.
        let previous = self
            .shared
            .floor
            .fetch_max(new_floor, ord("floor_relaxed", AcqRel, Relaxed));
        if new_floor > previous {
            self.shared.wake_producer();
        }
        Ok(previous.max(new_floor))
    }

    /// Registers a reader positioned after `last_event_id` (an SSE `Last-Event-ID`):
    ///
    /// - `None`: live from the head, nothing replayed;
    /// - `Some(head)`: a no-op resume, nothing replayed;
    /// - `Some(x)` with `floor - 1 <= x < head`: the reader yields exactly `x + 1 ..= head`, then
    ///   follows live events;
    /// - `Some(x)` with `x < floor - 1`: [`ResumeError::BelowFloor`], because `x + 1 ..= floor - 1`
    ///   are gone;
    /// - `Some(x)` with `x > head`: [`ResumeError::AheadOfHead`], a state mismatch.
    ///
    /// A successful replay is pinned before this returns: the producer cannot overwrite the events
    /// the reader is about to read (it sees backpressure instead) until the reader has read them.
    /// Takes a bounded number of steps whatever the window size or the producer does.
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
    /// ```
    pub fn resume(&self, last_event_id: Option<u64>) -> Result<Reader<T>, ResumeError>
    where
        T: Sync,
    {
        let index = self.shared.claim_reader_slot()?;
        let shared = &self.shared;
        let slot = &shared.readers[index];
        let Some(last) = last_event_id else {
            // Acquire: pairs with the producer's Release publish.
            let head = shared.head.load(Acquire);
            return Ok(Reader::new(shared.clone(), index, head + 1, false));
        };
        // Acquire: pairs with the producer's Release publish.
        let head = shared.head.load(Acquire);
        if last > head {
            slot.counters.count(&slot.counters.resumes_ahead_of_head);
            shared.free_reader_slot(index);
            return Err(ResumeError::AheadOfHead {
                requested: last,
                head,
            });
        }
        if last == head {
            slot.counters.count(&slot.counters.resumes_noop);
            return Ok(Reader::new(shared.clone(), index, head + 1, false));
        }
        // `last < head <= LAST_ID`: no overflow.
        let next = last + 1;
        match crate::reader::pin_and_check(shared, slot, next) {
            Ok(()) => {
                slot.counters.count(&slot.counters.resumes_ok);
                Ok(Reader::new(shared.clone(), index, next, true))
            }
            Err(floor) => {
                slot.counters.count(&slot.counters.resumes_from_evicted_id);
                shared.free_reader_slot(index);
                // Re-read the head: the floor came from a release of an id <= the head at that time,
                // so this snapshot keeps `floor <= head + 1` (the head read above may predate it).
                // Acquire: pairs with the producer's Release publish.
                let head = shared.head.load(Acquire);
                Err(ResumeError::BelowFloor {
                    requested: last,
                    floor,
                    head,
                })
            }
        }
    }

    /// A reader that follows live events from the current head (`resume(None)`).
    ///
    /// ```
    /// let (mut producer, ring) = replay_ring::ReplayRing::<u8>::new(4, 1).unwrap();
    /// producer.try_push(1).unwrap();
    /// let mut reader = ring.reader().unwrap();
    /// assert_eq!(reader.try_next(), Ok(None)); // id 1 predates it
    /// producer.try_push(2).unwrap();
    /// assert_eq!(reader.try_next().unwrap().unwrap().id, 2);
    /// ```
    pub fn reader(&self) -> Result<Reader<T>, ResumeError>
    where
        T: Sync,
    {
        self.resume(None)
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
    /// assert_eq!(m.resumes_from_evicted_id, 1);
    /// assert_eq!(m.events_evicted_before_ack, 0);
    /// ```
    pub fn metrics(&self) -> Metrics {
        Metrics::collect(&self.shared)
    }
}
