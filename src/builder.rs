//! Configuring and building a ring: [`Builder`], its limits, and the [`WakeupFences`] choice.
//! The top layer: it creates the shared state and hands out the first two handles.

use std::fmt;
use std::marker::PhantomData;

use crossbeam_utils::CachePadded;

use crate::error::BuildError;
use crate::producer::Producer;
use crate::ring::ReplayRing;
use crate::shared::{Shared, LAST_ID};
use crate::slots::Slots;
use crate::sync::{
    init_fences, Arc, AtomicBool, AtomicU64, AtomicWaker, Mutex, SlotTrackers, WalkModel,
};
use crate::table::ReaderTable;
pub use crate::table::MAX_READERS;
use crate::wait::WaitList;

/// The largest capacity [`Builder::capacity`] accepts (after rounding up to a power of two).
pub const MAX_CAPACITY: usize = 1 << 30;

/// The largest capacity for slots of `slot_bytes` bytes: [`MAX_CAPACITY`], or the largest power of
/// two whose slot array stays within `isize::MAX` bytes (what an allocation may span). At least 1:
/// no Rust type is larger than `isize::MAX` bytes.
const fn max_capacity(slot_bytes: usize) -> usize {
    let slots = isize::MAX as usize / if slot_bytes == 0 { 1 } else { slot_bytes };
    let fits = 1 << (usize::BITS - 1 - slots.leading_zeros());
    if fits < MAX_CAPACITY {
        fits
    } else {
        MAX_CAPACITY
    }
}

/// How the push-vs-parked-reader race is fenced (see `docs/design.md`, "Who pays for the wake-up
/// fences"). Both are correct; they differ in who pays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WakeupFences {
    /// A `fence(SeqCst)` on both sides: every push pays one full fence (tens of nanoseconds), parking
    /// is free. The default, and the right choice when readers park between events, as SSE and MCP
    /// connection tasks do.
    ///
    /// This choice is about readers. The other wait, a producer parked on a full window against
    /// reads and releases, always uses the membarrier where the system call is available (every
    /// read pays only a compiler fence; the waiting producer pays the system call). A process that
    /// forbids `membarrier` after building a ring (a seccomp filter installed later) therefore
    /// aborts, with a message, the first time a producer waits for space (`push`, `ready`,
    /// `push_timeout`, `ready_timeout`): the reads have already run without a fence, and a silent
    /// fallback would lose wake-ups. Install such a filter before building the first ring: the
    /// mode is decided then, once per process (`docs/design.md`).
    #[default]
    Symmetric,
    /// The push pays only a compiler fence; a reader that parks pays a
    /// `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)` system call (about a microsecond). For
    /// high-rate producers whose readers poll and rarely park. Falls back to `Symmetric` where the
    /// system call is unavailable ([`ReplayRing::wakeup_fences`] says which a ring runs with).
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
#[must_use = "a Builder does nothing until `build()` is called"]
pub struct Builder<T> {
    capacity: usize,
    /// `None`: the whole capacity up front.
    initial_slots: Option<usize>,
    max_readers: usize,
    first_id: u64,
    wakeup_fences: WakeupFences,
    walk: WalkModel,
    _marker: PhantomData<fn() -> T>,
}

impl<T> fmt::Debug for Builder<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("capacity", &self.capacity)
            .field("initial_slots", &self.initial_slots)
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
            initial_slots: None,
            max_readers: 16,
            first_id: 1,
            wakeup_fences: WakeupFences::Symmetric,
            walk: WalkModel::default(),
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

    /// How many slots are allocated when the ring is built (default: all of them, `capacity`).
    /// Rounded up to a power of two and clamped to `1..=capacity` (so 0 means 1).
    ///
    /// With fewer initial slots than the capacity, the slot array grows on demand: segments that
    /// double in size (`initial_slots`, `initial_slots`, `2 × initial_slots`, … up to the
    /// capacity) are allocated by the producer the first time the window reaches them, and kept
    /// until the ring is dropped. An idle ring then costs `initial_slots × size_of::<T>()` bytes of
    /// slots instead of `capacity × size_of::<T>()`, which matters when a server keeps many mostly
    /// idle rings (one per request stream, for example). The price:
    ///
    /// - a push that first reaches a segment allocates it (the producer's slow path; once every
    ///   segment is allocated, pushes, reads, resumes and waits allocate nothing, as in an eagerly
    ///   allocated ring). If the allocator refuses a segment, the process aborts, as when a `Vec`
    ///   grows; only the first segment's failure is reported, by [`build`](Self::build);
    /// - a batch is at most two contiguous runs of slots, and with several segments a run ends at
    ///   a segment boundary, so [`Reader::try_read`](crate::Reader::try_read) may lend a batch that
    ///   ends before the head; the next read continues from there.
    ///
    /// ```
    /// use replay_ring::ReplayRing;
    ///
    /// let (mut producer, ring) = ReplayRing::<u64>::builder()
    ///     .capacity(1024)
    ///     .initial_slots(10) // rounded up to 16: 16 × 8 bytes of slots until the window grows
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(ring.capacity(), 1024); // the window still holds 1024 events
    /// let mut reader = ring.reader().unwrap();
    /// for n in 0..40 {
    ///     producer.try_push(n).unwrap(); // ids 16 and 32 allocate the next segments
    /// }
    /// // A read may stop at a segment boundary; reading on yields everything, in order.
    /// let mut seen = Vec::new();
    /// while let Some(batch) = reader.try_read().unwrap() {
    ///     seen.extend(batch.iter().map(|(_, v)| *v));
    /// }
    /// assert_eq!(seen, (0..40).collect::<Vec<_>>());
    /// ```
    pub fn initial_slots(mut self, initial_slots: usize) -> Self {
        self.initial_slots = Some(initial_slots);
        self
    }

    /// How many [`Reader`](crate::Reader)s may exist at once (default 16, at most [`MAX_READERS`]). The reader
    /// table grows on demand up to this limit: the first `min(max_readers, 64)` entries (rounded up
    /// to a power of two) are allocated here, later ones in segments that double in size, by the
    /// registration that first needs them, whose entries are written one by one as registrations
    /// claim them (a 128-byte entry on x86-64, kept for reuse until the ring is dropped; reserved
    /// address space doubles with the table, resident memory follows the readers). Pushes, reads,
    /// resumes into an open segment and waits never allocate, and a push costs the same however
    /// many idle readers are registered: the producer's check for borrowed slots visits only the
    /// readers that read since its previous check, each at most twice before it reads again, so
    /// its cost follows reads, not registrations (100,000 readers that each read once cost the
    /// next one or two such checks a visit apiece).
    ///
    /// ```
    /// use replay_ring::ReplayRing;
    ///
    /// let (_p, ring) = ReplayRing::<u8>::builder().max_readers(1).build().unwrap();
    /// let _only = ring.reader().unwrap();
    /// assert_eq!(ring.reader().unwrap_err().limit, 1);
    /// ```
    pub fn max_readers(mut self, max_readers: usize) -> Self {
        self.max_readers = max_readers;
        self
    }

    /// The id of the first event (default 1). For streams that continue an existing sequence, and for
    /// tests near `u64::MAX`.
    ///
    /// The ids before it were never in this ring: it starts with the floor at `first_id` and the
    /// head at `first_id - 1`, so a resume from `first_id - 1` is a resume at the head (it waits
    /// for the first event), and one from an earlier id is refused as below the floor.
    ///
    /// ```
    /// use replay_ring::ResumeError;
    ///
    /// let (mut producer, ring) = replay_ring::ReplayRing::<u8>::builder()
    ///     .first_id(41)
    ///     .build()
    ///     .unwrap();
    /// assert_eq!((ring.floor(), ring.head()), (41, 40));
    /// let mut reader = ring.resume(Some(40)).unwrap();
    /// assert!(matches!(ring.resume(Some(39)), Err(ResumeError::BelowFloor { .. })));
    /// assert_eq!(producer.try_push(0), Ok(41));
    /// assert_eq!(reader.try_recv().unwrap().unwrap().id, 41);
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
    /// assert_eq!(reader.try_recv().unwrap().unwrap().data, 1);
    /// ```
    pub fn wakeup_fences(mut self, fences: WakeupFences) -> Self {
        self.wakeup_fences = fences;
        self
    }

    /// Checks the settings as [`build`](Self::build) does, without allocating anything: for
    /// settings that come from outside (flags, a config file), to refuse them before other work
    /// starts, or where rings are built later, one per request.
    ///
    /// # Errors
    ///
    /// The [`BuildError`] that `build` would return for these settings, except
    /// [`BuildError::AllocationFailed`], which only the allocation itself can tell.
    ///
    /// ```
    /// use replay_ring::{BuildError, ReplayRing};
    ///
    /// assert!(ReplayRing::<u8>::builder().capacity(1 << 20).check().is_ok());
    /// assert_eq!(
    ///     ReplayRing::<u8>::builder().max_readers(0).check(),
    ///     Err(BuildError::ZeroReaders)
    /// );
    /// ```
    pub fn check(&self) -> Result<(), BuildError> {
        self.window().map(drop)
    }

    /// The window's capacity (the requested one rounded up to a power of two), once every
    /// setting has been checked.
    fn window(&self) -> Result<usize, BuildError> {
        if self.capacity == 0 {
            return Err(BuildError::ZeroCapacity);
        }
        let max = max_capacity(size_of::<T>());
        let too_large = BuildError::CapacityTooLarge {
            requested: self.capacity,
            max,
        };
        let capacity = self.capacity.checked_next_power_of_two().ok_or(too_large)?;
        if capacity > max {
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
        Ok(capacity)
    }

    /// Loom builds only: this ring's reader table gives its `initialised` bits loom twins, so a
    /// model can check the metrics walk against a registration (model 8w in
    /// `docs/verification.md`). Other models leave them out (see `InitialisedBits`).
    #[cfg(replay_ring_loom)]
    #[doc(hidden)]
    pub fn loom_model_metrics_walk(mut self) -> Self {
        self.walk = WalkModel(true);
        self
    }

    /// Allocates the ring: the slots (all of them, or the first [`initial_slots`](Self::initial_slots)),
    /// and the reader table's first segment. Nothing else is allocated after this,
    /// except the slot segments a ring built with `initial_slots < capacity` grows into and the
    /// reader-table segments that registrations beyond the first 64 entries open
    /// ([`max_readers`](Self::max_readers)).
    ///
    /// # Errors
    ///
    /// A [`BuildError`] on a zero or absurd capacity, zero or too many readers, a first id outside
    /// `1..u64::MAX`, or when the allocator refuses the slot array.
    ///
    /// ```
    /// use replay_ring::{BuildError, ReplayRing};
    ///
    /// assert!(ReplayRing::<u8>::builder().capacity(3).build().is_ok());
    /// assert_eq!(
    ///     ReplayRing::<u8>::builder().first_id(0).build().unwrap_err(),
    ///     BuildError::InvalidFirstId(0)
    /// );
    /// ```
    pub fn build(self) -> Result<(Producer<T>, ReplayRing<T>), BuildError> {
        let capacity = self.window()?;
        // Clamped first: `capacity` is a power of two, so rounding up cannot pass it (or overflow).
        let initial_slots = self
            .initial_slots
            .map_or(capacity, |n| n.clamp(1, capacity).next_power_of_two());
        let slots =
            Slots::new(capacity, initial_slots).map_err(|_| BuildError::AllocationFailed)?;
        let asymmetric = init_fences();
        let shared = Arc::new(Shared {
            head: CachePadded::new(AtomicU64::new(self.first_id - 1)),
            floor: CachePadded::new(AtomicU64::new(self.first_id)),
            slots,
            trackers: SlotTrackers::new(capacity),
            first_id: self.first_id,
            readers: ReaderTable::new(self.max_readers, self.walk),
            waiters: WaitList::new(),
            producer_waiting: CachePadded::new(AtomicBool::new(false)),
            producer_waker: AtomicWaker::new(),
            #[cfg(not(replay_ring_loom))]
            producer_thread_waker: crate::blocking::ThreadWaker::new(),
            asymmetric_reader_wakeup: asymmetric && self.wakeup_fences == WakeupFences::Asymmetric,
            asymmetric_producer_wakeup: asymmetric,
            closed: AtomicBool::new(false),
            close_reason: Mutex::new(None),
            producer_full: AtomicU64::new(0),
            producer_waits: AtomicU64::new(0),
            resumes_below_floor: AtomicU64::new(0),
            resumes_ahead_of_head: AtomicU64::new(0),
        });
        let ring = ReplayRing {
            shared: shared.clone(),
        };
        Ok((Producer::new(shared), ring))
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
    /// # Errors
    ///
    /// As [`Builder::build`]: a [`BuildError`] on a zero or absurd capacity, or zero or too many
    /// readers.
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
    /// The wake-up fences this ring's pushes and parked readers run with: what
    /// [`Builder::wakeup_fences`](crate::Builder::wakeup_fences) asked for, except that a ring
    /// asked for [`WakeupFences::Asymmetric`] runs with [`WakeupFences::Symmetric`] where the
    /// `membarrier` system call was unavailable when the process built its first ring (other
    /// systems than Linux, old kernels, a sandbox that forbids it, Miri). Both are correct; log
    /// this at startup to know which cost the pushes pay. (The producer's own waits for space use
    /// the system call whenever it is available, whatever this says: see [`WakeupFences`].)
    ///
    /// ```
    /// use replay_ring::{ReplayRing, WakeupFences};
    ///
    /// let (_p, ring) = ReplayRing::<u8>::new(16, 1).unwrap();
    /// assert_eq!(ring.wakeup_fences(), WakeupFences::Symmetric);
    ///
    /// let (_p, ring) = ReplayRing::<u8>::builder()
    ///     .wakeup_fences(WakeupFences::Asymmetric)
    ///     .build()
    ///     .unwrap();
    /// if ring.wakeup_fences() == WakeupFences::Symmetric {
    ///     eprintln!("membarrier unavailable: every push pays a full fence");
    /// }
    /// ```
    pub fn wakeup_fences(&self) -> WakeupFences {
        if self.shared.asymmetric_reader_wakeup {
            WakeupFences::Asymmetric
        } else {
            WakeupFences::Symmetric
        }
    }
}
