//! The slot storage: a fixed directory of segments whose sizes double, so a ring can start with a
//! few slots and grow, on the producer's slow path, up to its capacity.
//!
//! With `S0 = initial_slots` (a power of two, `l = log2(S0)`), segment 0 holds the slot indices
//! `[0, S0)` and segment `k >= 1` holds `[S0 << (k - 1), S0 << k)`; there are
//! `log2(capacity / S0) + 1` segments. A ring built with `initial_slots == capacity` (the default)
//! has a single segment, the whole array, allocated up front: its slot addresses, batches and
//! wrap-around are those of a plain array.
//!
//! Segment 0 is allocated when the ring is built. The others are allocated by the producer, the
//! first time the window reaches them, and published by storing their pointer in the directory
//! before any slot in them is written. A segment is never replaced or freed before the ring drops.
//!
//! Ordering (`docs/design.md`, "The races"): the directory is read and written with `Relaxed`. The
//! producer stores a segment's pointer before it writes a slot in that segment, and so before the
//! `Release` store of `head` that publishes the slot (`Producer::try_push_with`). A reader touches
//! the slot of id `i` only for `i <= head` where it loaded `head` with `Acquire`
//! (`Reader::borrow_available`), so the pointer store happens-before the reader's directory load,
//! which therefore sees it. The segment's memory itself is uninitialised storage; its contents are
//! the slot values, ordered by the same `head` pair. The producer, the only writer, reads its own
//! stores, and caches the address of the run of slots it is filling (`Producer::prepare_slow`).

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::ptr;

use crate::sync::{AtomicPtr, Ordering::Relaxed};

/// One slot: a value of the id that last mapped to it, or nothing yet.
pub(crate) type Slot<T> = UnsafeCell<MaybeUninit<T>>;

/// The segment directory and the geometry of the slot indices.
pub(crate) struct Slots<T> {
    /// Pointer to the first slot of each segment; null until allocated. Segment 0 is allocated at
    /// build time. Written once per segment, by the producer (`grow`); never replaced.
    directory: Box<[AtomicPtr<Slot<T>>]>,
    /// `capacity - 1`: id `k` lives at index `k & mask`.
    mask: u64,
    /// `log2(initial_slots)`: segment 0's length is `1 << shift`.
    shift: u32,
}

/// Allocation of a segment failed (only at build time; growth aborts on OOM like `Vec`).
#[derive(Debug)]
pub(crate) struct AllocError;

impl<T> Slots<T> {
    /// `capacity` and `initial` are powers of two with `1 <= initial <= capacity`; allocates
    /// segment 0 (`initial` slots).
    pub(crate) fn new(capacity: usize, initial: usize) -> Result<Self, AllocError> {
        debug_assert!(capacity.is_power_of_two() && initial.is_power_of_two());
        debug_assert!(initial <= capacity);
        let segments = (capacity / initial).trailing_zeros() as usize + 1;
        let directory: Box<[AtomicPtr<Slot<T>>]> = (0..segments)
            .map(|_| AtomicPtr::new(ptr::null_mut()))
            .collect();
        let slots = Slots {
            directory,
            mask: capacity as u64 - 1,
            shift: initial.trailing_zeros(),
        };
        let first = allocate_segment::<T>(initial).ok_or(AllocError)?;
        // Relaxed: the ring is not shared yet; handing it to another thread (the `Arc` inside a
        // moved handle) orders this store.
        slots.directory[0].store(first, Relaxed);
        Ok(slots)
    }

    pub(crate) fn capacity(&self) -> u64 {
        self.mask + 1
    }

    /// How many segments the directory has (1 for a ring built with `initial_slots == capacity`).
    pub(crate) fn segments(&self) -> usize {
        self.directory.len()
    }

    /// Index of the slot holding id `id`.
    #[inline]
    pub(crate) fn index(&self, id: u64) -> usize {
        (id & self.mask) as usize
    }

    /// The segment holding slot index `index`.
    #[inline]
    pub(crate) fn segment_of(&self, index: usize) -> usize {
        (usize::BITS - (index >> self.shift).leading_zeros()) as usize
    }

    /// The first slot index of segment `k`: 0, then `S0 << (k - 1)`.
    #[inline]
    pub(crate) fn segment_start(&self, k: usize) -> usize {
        ((1usize << k) >> 1) << self.shift
    }

    /// The number of slots in segment `k`: `S0`, then `S0 << (k - 1)`.
    #[inline]
    pub(crate) fn segment_len(&self, k: usize) -> usize {
        (1usize << k.saturating_sub(1)) << self.shift
    }

    /// Whether segment `k` is allocated. For the producer (the only writer of the directory) and
    /// for tests; readers never need to ask (see the module doc).
    pub(crate) fn is_allocated(&self, k: usize) -> bool {
        // Relaxed: the producer reads its own stores; see the module doc for readers.
        !self.directory[k].load(Relaxed).is_null()
    }

    /// Allocates segment `k` if it is not allocated yet. Producer only, before it writes any slot
    /// of the segment (and so before the `head` store that publishes one).
    #[cold]
    pub(crate) fn grow(&self, k: usize) {
        if self.is_allocated(k) {
            return;
        }
        let segment = allocate_segment::<T>(self.segment_len(k))
            .unwrap_or_else(|| std::alloc::handle_alloc_error(layout_of::<T>(self.segment_len(k))));
        // Relaxed: the producer's Release store of `head` after it writes a slot of this segment
        // (`Producer::try_push_with`, `try_push_many`) pairs with the readers' Acquire loads of
        // `head` (`Reader::borrow_available`); that pair orders this store before every reader
        // load of the entry (the module doc has the argument).
        self.directory[k].store(segment, Relaxed);
    }

    /// The slot of id `id`. Dereferencing it needs its segment allocated: `id <= head` for a
    /// reader that loaded `head` with Acquire, or an id the producer is about to write after
    /// `grow`. Computing it needs nothing (the offset is applied with wrapping arithmetic).
    #[inline]
    pub(crate) fn slot(&self, id: u64) -> *mut Slot<T> {
        let index = self.index(id);
        let k = self.segment_of(index);
        // SAFETY: `index < capacity`, so `k < segments` (the last segment ends at `capacity`).
        let entry = unsafe { self.directory.get_unchecked(k) };
        // Relaxed: ordered by the `head` Release/Acquire pair (module doc).
        let base = entry.load(Relaxed);
        debug_assert!(
            !base.is_null(),
            "slot of id {id} read before its segment {k} was published"
        );
        // Wrapping: a caller that broke the contract above gets a pointer it must not dereference,
        // not undefined behaviour here; with the segment allocated, `base` points at
        // `segment_len(k)` slots and `index - segment_start(k) < segment_len(k)`, so this is the
        // in-bounds offset `add` would compute.
        base.wrapping_add(index - self.segment_start(k))
    }

    /// The contiguous run of slots that starts at id `first` and holds at most `max` ids: up to
    /// the end of `first`'s segment. Returns the first slot and the run's length (`>= 1` when
    /// `max >= 1`).
    #[inline]
    pub(crate) fn run(&self, first: u64, max: u64) -> (*mut Slot<T>, usize) {
        let index = self.index(first);
        let k = self.segment_of(index);
        let room = (self.segment_start(k) + self.segment_len(k) - index) as u64;
        (self.slot(first), room.min(max) as usize)
    }

    /// The last id a batch that starts at `first` may end at: the end of the run through `first`'s
    /// segment and the segment after it (segment 0 after the last one), so that a batch is at most
    /// two contiguous runs. At least `first + capacity - 1` for a single-segment ring.
    #[inline]
    pub(crate) fn batch_end(&self, first: u64) -> u64 {
        let index = self.index(first);
        let k = self.segment_of(index);
        let end = self.segment_start(k) + self.segment_len(k);
        let next = if k + 1 == self.segments() { 0 } else { k + 1 };
        let span = (end - index + self.segment_len(next)) as u64;
        first.saturating_add(span - 1)
    }
}

impl<T> Drop for Slots<T> {
    /// Frees the segments' memory (not the values: `Shared::drop` drops those first, and this runs
    /// after it even if a value's `Drop` panicked).
    fn drop(&mut self) {
        for (k, entry) in self.directory.iter().enumerate() {
            // Relaxed: `&mut self`, no other thread can touch the directory.
            let base = entry.load(Relaxed);
            if !base.is_null() {
                let len = self.segment_len(k);
                // SAFETY: allocated by `allocate_segment(len)` as a boxed slice of `len` slots,
                // freed only here, once. `Slot<T>` needs no drop.
                drop(unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(base, len)) });
            }
        }
    }
}

fn layout_of<T>(len: usize) -> std::alloc::Layout {
    // The builder checked that `capacity * size_of::<T>()` fits an `isize`.
    std::alloc::Layout::array::<Slot<T>>(len).expect("segment size checked at build time")
}

/// A boxed slice of `len` uninitialised slots, leaked to a pointer; `None` if the allocator refuses.
fn allocate_segment<T>(len: usize) -> Option<*mut Slot<T>> {
    let slots = uninit_slots::<T>(len).ok()?;
    Some(Box::into_raw(slots).cast::<Slot<T>>())
}

/// `len` slots holding no value, allocated without a pass over them in any build (also the
/// reader table's entries, which registrations write one by one).
pub(crate) fn uninit_slots<T>(
    len: usize,
) -> Result<Box<[Slot<T>]>, std::collections::TryReserveError> {
    let mut slots: Vec<Slot<T>> = Vec::new();
    slots.try_reserve_exact(len)?;
    // `set_len`, not `extend` with `len` uninitialised values: the latter is a pass over the whole
    // segment in an unoptimised build (seconds for a window of 2^30); this makes none in any build.
    // SAFETY: `try_reserve_exact` made room for `len` elements, and an `UnsafeCell<MaybeUninit<T>>`
    // has no validity requirement, so leaving them uninitialised makes `len` valid elements.
    unsafe { slots.set_len(len) };
    Ok(slots.into_boxed_slice())
}
