//! The state every handle shares: the slots, the `floor` and `head` cursors, the reader table, the
//! wakers and the close reason. This is the bottom layer: it imports no handle type.
//!
//! The protocol is explained once, with a diagram, in `docs/design.md`. The invariants are stated on
//! the fields they constrain.

use std::ptr;

use crossbeam_utils::CachePadded;

use crate::error::{CloseReason, TooManyReaders};
use crate::slots::Slots;
use crate::sync::{
    light_fence, lock, AtomicBool, AtomicU64, AtomicWaker, Mutex,
    Ordering::{Acquire, Relaxed},
    SlotTrackers,
};
use crate::table::{ReaderTable, TableFull};
use crate::wait::WaitList;

/// Ids stop one short of `u64::MAX` so that `head + 1` (the floor of an empty window) always fits.
pub(crate) const LAST_ID: u64 = u64::MAX - 1;

/// Everything the producer, the readers and the handles share.
pub(crate) struct Shared<T> {
    /// Newest published id; `first_id - 1` before the first push. Written only by the producer, with
    /// `Release` after the slot write; loaded with `Acquire` by readers before they touch a slot.
    pub(crate) head: CachePadded<AtomicU64>,
    /// Oldest retained id. Retained = `floor..=head`; invariant `floor <= head + 1`. Only grows,
    /// through `release_through`. The producer reuses the slot of id `k` only once `k < floor`
    /// *and* no reader pin is `<= k`.
    pub(crate) floor: CachePadded<AtomicU64>,
    /// Event storage. Id `k` lives at index `k & (capacity - 1)`, in a directory of segments that
    /// the producer allocates as the window first reaches them (`slots.rs`). Invariant: a segment
    /// is allocated before any id in it is published, and freed only with the ring. A std
    /// `UnsafeCell` per slot in every build so a run of slots can be lent out as one `&[T]`; loom
    /// sees the accesses through `trackers` (one per index, allocated with the ring: loom builds only).
    pub(crate) slots: Slots<T>,
    pub(crate) trackers: SlotTrackers,
    /// The first id this ring ever assigns (normally 1).
    pub(crate) first_id: u64,
    /// One entry per registered reader; grows on demand up to `max_readers`.
    pub(crate) readers: ReaderTable,
    /// The readers parked for new events (`wait.rs`).
    pub(crate) waiters: WaitList,
    /// Set by a producer about to sleep for space; releasers and unpinning readers then wake it.
    pub(crate) producer_waiting: CachePadded<AtomicBool>,
    pub(crate) producer_waker: AtomicWaker,
    /// The producer's blocking waits park on this (`blocking.rs`). Here rather than in the
    /// `Producer`, because the waker it hands out may sit in `producer_waker`, or be being woken
    /// by a releaser, after the producer is gone: the state every handle shares outlives both.
    #[cfg(not(replay_ring_loom))]
    pub(crate) producer_thread_waker: crate::blocking::ThreadWaker,
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
    /// Refused resumes. Shared, contended counters: a refusal may have no reader-table entry to
    /// count in (the cursor is checked before one is claimed), and refusals are a cold path.
    pub(crate) resumes_below_floor: AtomicU64,
    pub(crate) resumes_ahead_of_head: AtomicU64,
}

// SAFETY: the slots are written only by the unique `Producer` (needs `T: Send` to move values in and
// to drop them on whichever thread drops the ring) and borrowed as `&T` only through a `Reader`,
// which can only be created by `ReplayRing::resume` and `ReplayRing::reader`, whose `T: Sync`
// bounds make sharing sound.
// Slot access is serialised by the pin/floor protocol described on `Shared::floor`.
unsafe impl<T: Send> Send for Shared<T> {}
// SAFETY: as for `Send`; every other field is an atomic or a lock.
unsafe impl<T: Send> Sync for Shared<T> {}

impl<T> Shared<T> {
    pub(crate) fn capacity(&self) -> u64 {
        self.slots.capacity()
    }

    /// The oldest retained id, for every handle's `floor()`.
    #[inline]
    pub(crate) fn floor(&self) -> u64 {
        // Acquire: pairs with the Release half of `release_through`'s `fetch_max`, whose releaser
        // read a `head` of at least the new floor - 1 first; so a `head()` called after this
        // returns at least that, and a caller's `floor()`, then `head()` keeps `floor <= head + 1`
        // (I2; the `floor_getter_relaxed` mutant, model 6's `check_cursors`).
        self.floor
            .load(crate::sync::ord("floor_getter_relaxed", Acquire, Relaxed))
    }

    /// The newest published id, for every handle's `head()`.
    #[inline]
    pub(crate) fn head(&self) -> u64 {
        // Acquire: pairs with the producer's Release publish of `head`.
        self.head.load(Acquire)
    }

    /// Index of the slot holding id `id`.
    #[inline]
    pub(crate) fn index(&self, id: u64) -> usize {
        self.slots.index(id)
    }

    /// Wakes every reader that registered for new events. Called after a publish.
    #[inline]
    pub(crate) fn wake_readers(&self) {
        // Light half of an asymmetric SeqCst fence: pairs with the heavy half in
        // `Reader::poll_ready` between its waiter registration and its `head` re-check, so either we
        // see the registration or it sees our `head` (store-buffering: a fence on both sides; the
        // sleeper pays for it, not the push).
        light_fence("no_push_wake_fence", self.asymmetric_reader_wakeup);
        // Ordered by the fence above; one load while nobody waits.
        if !self.waiters.is_empty() {
            self.waiters.wake_all(&self.readers);
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

    /// Claims a reader-table entry for a new [`Reader`](crate::Reader).
    pub(crate) fn claim_reader_entry(&self) -> Result<usize, TooManyReaders> {
        self.readers
            .claim()
            .map_err(|TableFull| TooManyReaders::new(self.readers.limit()))
    }

    /// Returns a reader-table entry to the pool. The entry must be unpinned; `active` says whether
    /// its active bit may be set, `waker` whether a waker may be registered in it, `thread`
    /// whether a blocking wait recorded its thread. The waker and the thread are released (a
    /// dropped reader keeps no task or thread handle alive); the entry may stay on the wait list
    /// until the next push, which then wakes nobody.
    ///
    /// # Safety
    ///
    /// The caller owns `index` (a claim handed it out and it was not freed since) and gives it up.
    pub(crate) unsafe fn free_reader_entry(
        &self,
        index: usize,
        active: bool,
        waker: bool,
        thread: bool,
    ) {
        if active {
            self.readers.deactivate(index);
        }
        // SAFETY: the claim that handed `index` out is the caller's (our contract).
        let entry = unsafe { self.readers.entry(index) };
        // Dropped once the entry is free: a waker whose `drop` panics then leaks no entry.
        let waker = if waker { entry.waker.take() } else { None };
        // A blocking wait's thread: the owner is gone, and no wait of it is pending. Only a reader
        // that blocked bound it (an entry is unbound when it is freed), so the others skip the lock.
        #[cfg(not(replay_ring_loom))]
        if thread {
            entry.thread_waker.unbind();
        }
        #[cfg(replay_ring_loom)]
        let _ = thread;
        // SAFETY: the caller owns `index` and gives it up (our contract); nothing here uses it after.
        unsafe { self.readers.free(index) };
        drop(waker);
    }

    pub(crate) fn close_reason(&self) -> Option<CloseReason> {
        // Acquire: pairs with the Release store of `closed` in `Producer::close_inner`, which
        // follows the write of the reason. The reason itself is ordered by the lock as well: the
        // producer unlocks before its `closed` store, so a lock taken after loading that store
        // comes after the producer's.
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
        // Their segments are allocated (each was published). The segments' memory is freed after
        // this, by `Slots::drop`, even if a value's `Drop` panics.
        let oldest = head.saturating_sub(self.capacity() - 1).max(self.first_id);
        drop_runs(&self.slots, oldest, head);
    }
}

/// Drops the values of ids `next..=last`, one contiguous run (at most one segment) at a time.
///
/// Like `Vec` and `VecDeque`: if one value's `Drop` panics, the slice drop glue still drops the rest
/// of its run, and the `rest` guard drops the later runs while unwinding. Nothing is leaked (a
/// second panic during unwinding aborts, as in `Vec`).
fn drop_runs<T>(slots: &Slots<T>, mut next: u64, last: u64) {
    while next <= last {
        let (first, len) = slots.run(next, last - next + 1);
        // `len >= 1` and `next + len - 1 <= last <= LAST_ID`: no overflow.
        next += len as u64;
        let rest = DropRest { slots, next, last };
        // SAFETY: only called from `Shared::drop` (`&mut`, so no reader or producer exists), over
        // ids `oldest..=head`: each slot holds the value of the id pushed into it last (not
        // overwritten since: the next writer would be `id + capacity > head`), so it is
        // initialised, its segment is allocated, and it is dropped exactly once, here (the runs are
        // disjoint: fewer than `capacity` consecutive ids). `Slot<T>` has the layout of `T`.
        unsafe { ptr::drop_in_place(ptr::slice_from_raw_parts_mut(first.cast::<T>(), len)) };
        std::mem::forget(rest);
    }
}

/// Drops the values of the runs after a run whose `Drop` panicked (see `drop_runs`).
struct DropRest<'a, T> {
    slots: &'a Slots<T>,
    next: u64,
    last: u64,
}

impl<T> Drop for DropRest<'_, T> {
    fn drop(&mut self) {
        drop_runs(self.slots, self.next, self.last);
    }
}
