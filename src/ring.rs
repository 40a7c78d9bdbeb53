//! Shared state: the slots, the `floor` and `head` cursors, the reader table; and the cloneable
//! [`ReplayRing`] handle that reads the cursors, releases, and registers readers.
//!
//! The protocol is explained once, with a diagram, in `docs/design.md`. The invariants are stated on
//! the fields they constrain.

use std::cell::UnsafeCell;
use std::fmt;
use std::marker::PhantomData;
use std::mem::MaybeUninit;

use crossbeam_utils::CachePadded;

use crate::error::{BuildError, CloseReason, ReleaseError, ResumeError};
use crate::metrics::{Metrics, ReaderCounters};
use crate::producer::Producer;
use crate::reader::Reader;
use crate::sync::{
    init_fences, light_fence, lock, ord, Arc, AtomicBool, AtomicU64, AtomicUsize, AtomicWaker,
    Mutex,
    Ordering::{AcqRel, Acquire, Relaxed, Release},
    SlotTracker,
};

/// The largest capacity [`Builder::capacity`] accepts (after rounding up to a power of two).
pub const MAX_CAPACITY: usize = 1 << 30;
/// The largest reader table [`Builder::max_readers`] accepts.
pub const MAX_READERS: usize = 4096;
/// Ids stop one short of `u64::MAX` so that `head + 1` (the floor of an empty window) always fits.
pub(crate) const LAST_ID: u64 = u64::MAX - 1;

/// `pin` value of a reader that borrows nothing.
pub(crate) const UNPINNED: u64 = 0;

/// One entry of the fixed reader table, claimed by a [`Reader`] for its lifetime.
pub(crate) struct ReaderSlot {
    /// Set while a `Reader` owns this entry.
    pub(crate) claimed: AtomicBool,
    /// `UNPINNED`, or the lowest id this reader may be borrowing. While `pin = p`, the producer does
    /// not overwrite any id `>= p` (it scans pins before reusing a slot).
    pub(crate) pin: AtomicU64,
    /// Where a reader waiting for new events parks its waker (the bounded waker table: one entry per
    /// reader, allocated at construction).
    pub(crate) waker: AtomicWaker,
    /// Resume outcomes, written only by the reader that owns the entry (uncontended).
    pub(crate) counters: ReaderCounters,
}

/// Everything the producer, the readers and the handles share.
pub(crate) struct Shared<T> {
    /// Newest published id; `first_id - 1` before the first push. Written only by the producer, with
    /// `Release` after the slot write; loaded with `Acquire` by readers before they touch a slot.
    pub(crate) head: CachePadded<AtomicU64>,
    /// Oldest retained id. Retained = `floor..=head`; invariant `floor <= head + 1`. Only grows,
    /// through `release_through`. The producer reuses the slot of id `k` only once `k < floor`
    /// *and* no reader pin is `<= k`.
    pub(crate) floor: CachePadded<AtomicU64>,
    /// Event storage. Id `k` lives at `k & mask`. A std `UnsafeCell` in every build so a run of slots
    /// can be lent out as one `&[T]`; loom sees the accesses through `trackers`.
    pub(crate) slots: Box<[UnsafeCell<MaybeUninit<T>>]>,
    pub(crate) trackers: Box<[SlotTracker]>,
    pub(crate) mask: u64,
    /// The first id this ring ever assigns (normally 1).
    pub(crate) first_id: u64,
    pub(crate) readers: Box<[CachePadded<ReaderSlot>]>,
    /// Number of readers registered for a wake-up; the producer skips the wake scan while it is 0.
    pub(crate) reader_waiters: CachePadded<AtomicUsize>,
    /// Set by a producer about to sleep for space; releasers and unpinning readers then wake it.
    pub(crate) producer_waiting: CachePadded<AtomicBool>,
    pub(crate) producer_waker: AtomicWaker,
    /// [`WakeupFences::Asymmetric`] and membarrier available: publishing skips the full fence,
    /// parking readers pay for it.
    pub(crate) asymmetric_reader_wakeup: bool,
    /// membarrier available: unpins and releases skip the full fence, a parking producer pays.
    pub(crate) asymmetric_producer_wakeup: bool,
    /// Set (after the last `head` publish) when the stream has ended.
    pub(crate) closed: AtomicBool,
    /// Written once, before `closed` is set. Cold path only.
    pub(crate) close_reason: Mutex<Option<CloseReason>>,
    /// Producer-owned counters: only the producer writes them, so no contended RMW on push.
    pub(crate) producer_full: AtomicU64,
    pub(crate) producer_waits: AtomicU64,
}

// SAFETY: the slots are written only by the unique `Producer` (needs `T: Send` to move values in and
// to drop them on whichever thread drops the ring) and borrowed as `&T` only through a `Reader`,
// which can only be created by `ReplayRing::resume`, whose `T: Sync` bound makes sharing sound.
// Slot access is serialised by the pin/floor protocol described on `Shared::floor`.
unsafe impl<T: Send> Send for Shared<T> {}
// SAFETY: as for `Send`; every other field is an atomic or a lock.
unsafe impl<T: Send> Sync for Shared<T> {}

impl<T> Shared<T> {
    pub(crate) fn capacity(&self) -> u64 {
        self.mask + 1
    }

    /// Index of the slot holding id `id`.
    #[inline]
    pub(crate) fn index(&self, id: u64) -> usize {
        (id & self.mask) as usize
    }

    /// Wakes every reader that registered for new events. Called after a publish.
    #[inline]
    pub(crate) fn wake_readers(&self) {
        // Light half of an asymmetric SeqCst fence: pairs with the heavy half in
        // `Reader::poll_ready` between its waiter registration and its `head` re-check, so either we
        // see the registration or it sees our `head` (store-buffering: a fence on both sides; the
        // sleeper pays for it, not the push).
        light_fence("no_push_wake_fence", self.asymmetric_reader_wakeup);
        // Relaxed: ordered by the fence above.
        if self.reader_waiters.load(Relaxed) != 0 {
            for slot in self.readers.iter() {
                slot.waker.wake();
            }
        }
    }

    /// Wakes the producer if it sleeps waiting for space. Called after a release or an unpin.
    #[inline]
    pub(crate) fn wake_producer(&self) {
        // Light half of an asymmetric SeqCst fence: pairs with the heavy half in
        // `Producer::poll_ready` between setting `producer_waiting` and re-reading `floor` and pins.
        light_fence("no_space_wake_fence", self.asymmetric_producer_wakeup);
        // Relaxed: ordered by the fence above.
        if self.producer_waiting.load(Relaxed) {
            self.producer_waker.wake();
        }
    }

    pub(crate) fn close_reason(&self) -> Option<CloseReason> {
        // Acquire: pairs with the Release store of `closed` in `Producer::close_inner`, after which
        // the reason is set.
        if self.closed.load(Acquire) {
            lock(&self.close_reason).clone()
        } else {
            None
        }
    }
}

impl<T> Drop for Shared<T> {
    fn drop(&mut self) {
        if !std::mem::needs_drop::<T>() {
            return;
        }
        // Relaxed: `&mut self`, so no other thread can touch this atomic any more.
        let head = self.head.load(Relaxed);
        if head < self.first_id {
            return;
        }
        // Every id that still owns its slot: the newest `capacity` ids, but none before `first_id`.
        let oldest = head.saturating_sub(self.capacity() - 1).max(self.first_id);
        for id in oldest..=head {
            let index = self.index(id);
            // SAFETY: `&mut self` means no reader or producer exists; the slot of `id` was written
            // by the push of `id` and not overwritten since (the next writer would be id + capacity
            // > head), so it is initialised and dropped exactly once, here.
            unsafe { self.slots[index].get_mut().assume_init_drop() };
        }
    }
}

/// How the push-vs-parked-reader race is fenced (see `docs/design.md`, "Who pays for the wake-up
/// fences"). Both are correct; they differ in who pays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WakeupFences {
    /// A `fence(SeqCst)` on both sides: every push pays one full fence (tens of nanoseconds), parking
    /// is free. The default, and the right choice when readers park between events, as SSE and MCP
    /// connection tasks do.
    #[default]
    Symmetric,
    /// The push pays only a compiler fence; a reader that parks pays a
    /// `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)` system call (about a microsecond). For
    /// high-rate producers whose readers poll and rarely park. Falls back to `Symmetric` where the
    /// system call is unavailable.
    Asymmetric,
}

/// Configures and builds a ring. Start from [`ReplayRing::builder`].
///
/// ```
/// use replay_ring::ReplayRing;
///
/// let (producer, ring) = ReplayRing::<String>::builder()
///     .capacity(1000) // rounded up to 1024
///     .max_readers(4)
///     .build()
///     .unwrap();
/// assert_eq!(ring.capacity(), 1024);
/// assert_eq!(ring.max_readers(), 4);
/// assert_eq!(producer.next_id(), 1);
/// ```
pub struct Builder<T> {
    capacity: usize,
    max_readers: usize,
    first_id: u64,
    wakeup_fences: WakeupFences,
    _marker: PhantomData<fn() -> T>,
}

impl<T> fmt::Debug for Builder<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("capacity", &self.capacity)
            .field("max_readers", &self.max_readers)
            .field("first_id", &self.first_id)
            .field("wakeup_fences", &self.wakeup_fences)
            .finish()
    }
}

impl<T> Default for Builder<T> {
    fn default() -> Self {
        Builder {
            capacity: 1024,
            max_readers: 16,
            first_id: 1,
            wakeup_fences: WakeupFences::Symmetric,
            _marker: PhantomData,
        }
    }
}

impl<T: Send> Builder<T> {
    /// How many events the window retains at most (default 1024). Rounded up to a power of two.
    ///
    /// ```
    /// let (_p, ring) = replay_ring::ReplayRing::<u8>::builder().capacity(5).build().unwrap();
    /// assert_eq!(ring.capacity(), 8);
    /// ```
    pub fn capacity(mut self, capacity: usize) -> Self {
        self.capacity = capacity;
        self
    }

    /// How many [`Reader`]s may exist at once (default 16). The reader table, including its wakers,
    /// is allocated once, here.
    ///
    /// ```
    /// use replay_ring::{ReplayRing, ResumeError};
    ///
    /// let (_p, ring) = ReplayRing::<u8>::builder().max_readers(1).build().unwrap();
    /// let _only = ring.reader().unwrap();
    /// assert_eq!(ring.reader().unwrap_err(), ResumeError::TooManyReaders { limit: 1 });
    /// ```
    pub fn max_readers(mut self, max_readers: usize) -> Self {
        self.max_readers = max_readers;
        self
    }

    /// The id of the first event (default 1). For streams that continue an existing sequence, and for
    /// tests near `u64::MAX`.
    ///
    /// ```
    /// let (mut producer, ring) = replay_ring::ReplayRing::<u8>::builder()
    ///     .first_id(41)
    ///     .build()
    ///     .unwrap();
    /// assert_eq!((ring.floor(), ring.head()), (41, 40));
    /// assert_eq!(producer.try_push(0), Ok(41));
    /// ```
    pub fn first_id(mut self, first_id: u64) -> Self {
        self.first_id = first_id;
        self
    }

    /// Who pays for the fence that keeps a parked reader from missing a push (default
    /// [`WakeupFences::Symmetric`]). See [`WakeupFences`].
    ///
    /// ```
    /// use replay_ring::{ReplayRing, WakeupFences};
    ///
    /// // A market-data style producer with busy-polling readers: make the push as cheap as possible.
    /// let (mut producer, ring) = ReplayRing::<u64>::builder()
    ///     .wakeup_fences(WakeupFences::Asymmetric)
    ///     .build()
    ///     .unwrap();
    /// let mut reader = ring.reader().unwrap();
    /// producer.try_push(1).unwrap();
    /// assert_eq!(reader.try_next().unwrap().unwrap().data, 1);
    /// ```
    pub fn wakeup_fences(mut self, fences: WakeupFences) -> Self {
        self.wakeup_fences = fences;
        self
    }

    /// Allocates the ring. Fails with a [`BuildError`] on a zero or absurd capacity, zero or too many
    /// readers, or a first id outside `1..u64::MAX`.
    pub fn build(self) -> Result<(Producer<T>, ReplayRing<T>), BuildError> {
        if self.capacity == 0 {
            return Err(BuildError::ZeroCapacity);
        }
        let too_large = BuildError::CapacityTooLarge {
            requested: self.capacity,
            max: MAX_CAPACITY,
        };
        let capacity = self.capacity.checked_next_power_of_two().ok_or(too_large)?;
        if capacity > MAX_CAPACITY
            || capacity
                .checked_mul(size_of::<T>().max(1))
                .is_none_or(|b| b > isize::MAX as usize)
        {
            return Err(too_large);
        }
        if self.max_readers == 0 {
            return Err(BuildError::ZeroReaders);
        }
        if self.max_readers > MAX_READERS {
            return Err(BuildError::TooManyReaders {
                requested: self.max_readers,
                max: MAX_READERS,
            });
        }
        if self.first_id == 0 || self.first_id > LAST_ID {
            return Err(BuildError::InvalidFirstId(self.first_id));
        }

        let asymmetric = init_fences();
        let mut slots = Vec::new();
        slots
            .try_reserve_exact(capacity)
            .map_err(|_| BuildError::AllocationFailed)?;
        slots.extend((0..capacity).map(|_| UnsafeCell::new(MaybeUninit::uninit())));
        let shared = Arc::new(Shared {
            head: CachePadded::new(AtomicU64::new(self.first_id - 1)),
            floor: CachePadded::new(AtomicU64::new(self.first_id)),
            slots: slots.into_boxed_slice(),
            // A unit struct outside loom, a loom cell inside it.
            #[allow(clippy::default_constructed_unit_structs)]
            trackers: (0..capacity).map(|_| SlotTracker::default()).collect(),
            mask: capacity as u64 - 1,
            first_id: self.first_id,
            readers: (0..self.max_readers)
                .map(|_| {
                    CachePadded::new(ReaderSlot {
                        claimed: AtomicBool::new(false),
                        pin: AtomicU64::new(UNPINNED),
                        waker: AtomicWaker::new(),
                        counters: ReaderCounters::default(),
                    })
                })
                .collect(),
            reader_waiters: CachePadded::new(AtomicUsize::new(0)),
            producer_waiting: CachePadded::new(AtomicBool::new(false)),
            producer_waker: AtomicWaker::new(),
            asymmetric_reader_wakeup: asymmetric && self.wakeup_fences == WakeupFences::Asymmetric,
            asymmetric_producer_wakeup: asymmetric,
            closed: AtomicBool::new(false),
            close_reason: Mutex::new(None),
            producer_full: AtomicU64::new(0),
            producer_waits: AtomicU64::new(0),
        });
        let ring = ReplayRing {
            shared: shared.clone(),
        };
        Ok((Producer::new(shared), ring))
    }
}

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

impl<T: Send> ReplayRing<T> {
    /// A builder with the defaults (capacity 1024, 16 readers, first id 1, symmetric fences).
    ///
    /// ```
    /// let (_p, ring) = replay_ring::ReplayRing::<u8>::builder().build().unwrap();
    /// assert_eq!((ring.capacity(), ring.max_readers()), (1024, 16));
    /// ```
    pub fn builder() -> Builder<T> {
        Builder::default()
    }

    /// A ring retaining up to `capacity` events (rounded up to a power of two) with room for
    /// `max_readers` concurrent readers.
    ///
    /// ```
    /// let (_producer, ring) = replay_ring::ReplayRing::<u64>::new(100, 3).unwrap();
    /// assert_eq!(ring.capacity(), 128);
    /// ```
    pub fn new(
        capacity: usize,
        max_readers: usize,
    ) -> Result<(Producer<T>, ReplayRing<T>), BuildError> {
        Self::builder()
            .capacity(capacity)
            .max_readers(max_readers)
            .build()
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
        let index = self.claim_reader_slot()?;
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
            self.free_reader_slot(index);
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
                self.free_reader_slot(index);
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

    fn claim_reader_slot(&self) -> Result<usize, ResumeError> {
        for (index, slot) in self.shared.readers.iter().enumerate() {
            // Acquire: pairs with the Release in `free_reader_slot`, so the previous owner's use of
            // the entry happens-before ours.
            if slot
                .claimed
                .compare_exchange(false, true, Acquire, Relaxed)
                .is_ok()
            {
                return Ok(index);
            }
        }
        Err(ResumeError::TooManyReaders {
            limit: self.shared.readers.len(),
        })
    }

    fn free_reader_slot(&self, index: usize) {
        free_reader_slot(&self.shared, index);
    }
}

/// Returns a reader-table entry to the pool. The entry must be unpinned.
pub(crate) fn free_reader_slot<T>(shared: &Shared<T>, index: usize) {
    // Release: pairs with the Acquire CAS in `claim_reader_slot`.
    shared.readers[index].claimed.store(false, Release);
}
