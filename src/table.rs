//! The reader table: one entry per registered [`Reader`](crate::Reader), found by index, growing on
//! demand; and the *active* bitmap that lets the producer scan only the entries that may be pinned.
//!
//! Layout (see `docs/design.md`, "The reader table"):
//!
//! - Entries live in segments that double in size: segment 0 holds `base` entries (a power of two,
//!   at most 64), segment `k` holds `base << k`. A fixed directory of segment pointers means an
//!   entry never moves once allocated, so a reader keeps a plain pointer to its entry and the
//!   producer reaches any entry without a lock. Segments are allocated by registration, on demand,
//!   and freed with the ring. A segment is allocated, not written: each entry is initialised by the
//!   registration that first claims it, so opening a large segment costs no pass over it.
//! - Registration pops a free list (a Treiber stack with a generation tag against ABA) or, when it is
//!   empty, takes the next never-used index: O(1) amortised, never a scan.
//! - Per segment, bit `i` of `active` is set while entry `i` *may* be pinned, and bit `w` of
//!   `summary` is set while `active` word `w` may be non-zero; table-wide, bit `s` of
//!   `active_segments` is set while segment `s >= 1` may have a non-zero `active` word. A reader
//!   sets all three (leaf first) before its first pin after a park, and clears its leaf bit when it
//!   parks or leaves. The producer's pin scan visits only set segment bits, then set summary bits,
//!   then set leaf bits, and clears the leaf bit of every entry
//!   it finds unpinned twice in a row with no pin in between (a reader that pins again finds its
//!   bit cleared after its pin fence and sets it again): its cost follows the readers that are
//!   reading now, not the readers that are registered or that read once and stopped. A pinned
//!   entry's bit is set for every scan whose fence follows the reader's last pin fence.

use std::ptr::{self, NonNull};

use crossbeam_utils::CachePadded;

use crate::slots::{uninit_slots, Slot};
use crate::sync::{
    seq_cst_fence, AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, AtomicWaker, InitialisedBits,
    Ordering::{Acquire, Relaxed, Release},
    SlotTrackers, WalkModel,
};

/// `pin` value of a reader that borrows nothing.
pub(crate) const UNPINNED: u64 = 0;

/// Resume outcomes of one reader-table entry, written only by its current owner.
#[derive(Debug, Default)]
pub(crate) struct ReaderCounters {
    pub(crate) resumes_ok: AtomicU64,
    pub(crate) resumes_noop: AtomicU64,
}

impl ReaderCounters {
    /// Single-writer increment: a load and a store, no RMW.
    pub(crate) fn count(&self, counter: &AtomicU64) {
        // Relaxed: the entry's owner is the only writer, and a snapshot (`Metrics::collect`)
        // tolerates a value that is one behind. The counters outlive their owner, though: the next
        // owner's load must see the previous owner's last store, or a count is lost. That is
        // ordered by the free list, not here: the previous owner's Release CAS in `free` pairs with
        // the Acquire pop in `claim` (model 8, mutants `free_give_relaxed`/`free_take_relaxed`).
        counter.store(counter.load(Relaxed) + 1, Relaxed);
    }
}

/// The largest reader table [`Builder::max_readers`](crate::Builder::max_readers) accepts.
pub const MAX_READERS: usize = 1 << 24;

/// Segments in the directory. With `base >= 1`, segments `0..SEGMENTS` hold
/// `base * (2^SEGMENTS - 1) >= 2^25 - 1 > MAX_READERS` entries.
const SEGMENTS: usize = 25;

/// Entries in segment 0 at most: small tables (a few readers) allocate only what they ask for.
/// Under loom, 2: a four-entry table then has a second segment (entries 2 to 5), so a small model
/// exercises registrations racing into a segment that another one is installing.
const MAX_BASE: usize = if cfg!(replay_ring_loom) { 2 } else { 64 };

/// Bits used per bitmap word. Under loom, 2: with two entries in segment 0 (`MAX_BASE`), segment 0
/// is one leaf word, which the scan reads directly (no summary word, no segment bit), and the
/// second segment (entries 2 to 5) has two leaf words under one summary word and its own bit in
/// `active_segments`. So a small model whose reader sits on entry 2 or later exercises every
/// level of the bitmap (the logic is the same for any width).
const WORD_BITS: usize = if cfg!(replay_ring_loom) { 2 } else { 64 };

/// Low half of the free-list word: index + 1 of the top entry (0 = empty). High half: a generation
/// tag bumped by every push and pop, so a pop that raced with a pop-push of the same entry fails.
const INDEX_BITS: u32 = 32;
const INDEX_MASK: u64 = (1 << INDEX_BITS) - 1;

/// The tag half of a new free-list word: `head`'s tag plus one (wrapping). The `free_list_untagged`
/// mutant keeps the tag, so a pop that raced with a pop-and-push of the same entry succeeds with a
/// stale link (model 8b, `race8_entry_reuse`).
#[inline]
fn next_tag(head: u64) -> u64 {
    if crate::sync::mutant("free_list_untagged") {
        return head & !INDEX_MASK;
    }
    ((head >> INDEX_BITS) + 1) << INDEX_BITS
}

/// One reader's entry. Cache-padded (128 bytes on x86-64 and aarch64) so readers never share a line.
pub(crate) struct ReaderEntry {
    /// `UNPINNED`, or the lowest id this reader may be borrowing. While `pin = p`, the producer does
    /// not overwrite any id `>= p` (it scans the pins of active entries before reusing a slot).
    pub(crate) pin: AtomicU64,
    /// Where the reader parks its waker while it waits for new events.
    pub(crate) waker: AtomicWaker,
    /// On the wait list, or taken off it by a producer that has not woken it yet (`wait.rs`).
    /// Only RMWs touch it, so a reader that finds it set knows a wake is still to come.
    pub(crate) queued: AtomicBool,
    /// The next entry on the wait list (index + 1; 0 ends the list). Written by the reader before it
    /// publishes itself on the list, read by the producer after it took the list.
    pub(crate) wait_next: AtomicU64,
    /// The next entry on the free list (index + 1; 0 ends it).
    free_next: AtomicU64,
    /// Set while a `Reader` owns this entry (for `Metrics::readers_active`).
    pub(crate) claimed: AtomicBool,
    /// Set by the reader at every pin, cleared by a pin scan that finds the entry unpinned: the
    /// scan deactivates only an entry that has not pinned since the previous scan that found it
    /// unpinned (a second chance), so a reader that keeps reading while every push scans is not
    /// deactivated and activated again per read. A hint only: which entries a scan clears does not
    /// matter to the hazard argument (race 2b).
    pub(crate) touched: AtomicBool,
    /// Resume outcomes, written only by the reader that owns the entry (uncontended). They survive
    /// the entry's reuse, so the ring's totals stay exact.
    pub(crate) counters: ReaderCounters,
    /// The waker of the owner's blocking waits, in place (`blocking.rs`): neither a registration
    /// nor a wait allocates for it.
    #[cfg(not(replay_ring_loom))]
    pub(crate) thread_waker: crate::blocking::ThreadWaker,
}

impl ReaderEntry {
    fn new() -> Self {
        ReaderEntry {
            pin: AtomicU64::new(UNPINNED),
            waker: AtomicWaker::new(),
            queued: AtomicBool::new(false),
            wait_next: AtomicU64::new(0),
            free_next: AtomicU64::new(0),
            claimed: AtomicBool::new(false),
            touched: AtomicBool::new(false),
            counters: ReaderCounters::default(),
            #[cfg(not(replay_ring_loom))]
            thread_waker: crate::blocking::ThreadWaker::new(),
        }
    }
}

struct Segment {
    /// Entry `i`, once a registration has initialised it. Segment 0's entries are initialised with
    /// the table; a later segment's entry by the registration that first claims it (`claim`), not
    /// by the segment's installer: opening a segment costs one allocation rather than a pass over
    /// all of it (128 MiB at the millionth reader), and pages of entries never claimed stay untouched.
    /// Every index that reaches `entry` was handed out by `claim` after that initialisation and
    /// was passed on by an Acquire that follows it (see `ReaderTable::initialise`).
    entries: Box<[Slot<CachePadded<ReaderEntry>>]>,
    /// Which entries are initialised: read by the walks that can meet an entry whose claim has not
    /// initialised it yet (the metrics walk and `Drop`), and by a debug assertion in `entry`. The
    /// initialisation reaches every other access through the Release/Acquire chains that hand the
    /// index over, which loom checks through `trackers`.
    initialised: InitialisedBits,
    /// Loom builds: one tracked cell per entry, written by `initialise` and read by every `entry`,
    /// so a model reports any access that the initialisation does not happen-before (nothing
    /// outside loom).
    trackers: SlotTrackers,
    /// Bit `i % WORD_BITS` of word `i / WORD_BITS`: entry `i` may be pinned.
    active: Box<[AtomicU64]>,
    /// Bit `w % WORD_BITS` of word `w / WORD_BITS`: `active[w]` may be non-zero. Empty when
    /// `active` is a single word: the scan then reads that word directly.
    summary: Box<[AtomicU64]>,
}

// SAFETY: the entries are written once each, by the claim that owns the index before anyone else
// can reach it (`ReaderTable::initialise`), and only shared as `&ReaderEntry` afterwards, which
// is `Sync` (atomics and locks; checked below).
unsafe impl Sync for Segment {}
const _: () = {
    fn send_and_sync<T: Send + Sync>() {}
    let _ = send_and_sync::<ReaderEntry>;
};

impl Segment {
    /// A segment of `len` entries, none initialised: one allocation, no pass over the entries.
    fn new(len: usize, walk: WalkModel) -> Segment {
        let words = len.div_ceil(WORD_BITS);
        let summary_words = if words == 1 {
            0
        } else {
            words.div_ceil(WORD_BITS)
        };
        // `initialised` records which entries hold a value. Out of memory aborts, as a `Vec`'s
        // growth does.
        let entries = uninit_slots(len).unwrap_or_else(|_| {
            let layout = std::alloc::Layout::array::<Slot<CachePadded<ReaderEntry>>>(len);
            std::alloc::handle_alloc_error(layout.expect("at most MAX_READERS entries"))
        });
        Segment {
            entries,
            initialised: InitialisedBits::new(len, walk),
            trackers: SlotTrackers::new(len),
            active: (0..words).map(|_| AtomicU64::new(0)).collect(),
            summary: (0..summary_words).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Writes a new entry at `offset`.
    ///
    /// # Safety
    ///
    /// Entry `offset` is uninitialised, and no other thread accesses it until something this
    /// thread publishes later leads there.
    unsafe fn initialise(&self, offset: usize) {
        {
            let _track = self.trackers.get(offset).write();
            // SAFETY: the caller owns `offset` exclusively (this function's contract), so nothing
            // reads or writes the cell concurrently; it held no value, so nothing is leaked.
            unsafe { (*self.entries[offset].get()).write(CachePadded::new(ReaderEntry::new())) };
        }
        // After the tracked write ends: a walk may read the entry as soon as it sees the bit.
        self.initialised.set(offset);
    }

    fn is_initialised(&self, offset: usize) -> bool {
        self.initialised.is_set(offset)
    }

    /// Entry `offset`.
    ///
    /// # Safety
    ///
    /// The entry is initialised, and its initialisation happens-before this call: the index was
    /// handed out by a claim (at any time before: an entry is never de-initialised while its
    /// segment lives), and reached the caller through its own claim or through an Acquire that
    /// follows the initialisation. A debug assertion checks the first half.
    #[inline]
    unsafe fn entry(&self, offset: usize) -> &ReaderEntry {
        // Unordered: a check only, which must not add an edge that would hide a missing one.
        debug_assert!(
            self.initialised.is_set_unordered(offset),
            "entry {offset} used before its claim"
        );
        let _track = self.trackers.get(offset).read();
        // SAFETY: the entry is initialised and its initialisation happens-before this read (this
        // function's contract); it is never written again while the segment lives, so a shared
        // reference to it never aliases a write.
        unsafe { (*self.entries[offset].get()).assume_init_ref() }
    }

    /// Visits the pin of every entry whose active bit is set in leaf word `word`, and deactivates
    /// the entries it finds unpinned, so that a reader that read once and then stopped reading
    /// (without waiting, which would deactivate it itself) is not visited again until it pins
    /// again. Returns whether the word may still be non-zero.
    fn scan_word(&self, word: usize, limit: &mut u64) -> bool {
        // Acquire: pairs with the Release RMWs in `set_bits` (from `activate` and `reactivate`)
        // and `deactivate`.
        let active =
            self.active[word].load(crate::sync::ord("active_scan_relaxed", Acquire, Relaxed));
        let mut idle = 0;
        for b in bits(active) {
            let pin = self.pin_of(word, b);
            if pin != UNPINNED {
                *limit = (*limit).min(pin);
            } else if !self.second_chance(word, b) {
                idle |= 1 << b;
            }
        }
        if idle == 0 {
            return active != 0;
        }
        // Relaxed: ordered by the fence below. Returns the word as it is now, other readers'
        // concurrent activations included. An RMW, not a store of `active & !idle`: a store
        // would erase the bit of a reader of this word that set it since our load (the
        // `leaf_clear_store` mutant, model 2cd).
        let left = if crate::sync::mutant("leaf_clear_store") {
            let now = self.active[word].load(Relaxed);
            self.active[word].store(now & !idle, Relaxed);
            now & !idle
        } else {
            self.active[word].fetch_and(!idle, Relaxed) & !idle
        };
        // SeqCst fence: pairs with the fence in `reader::pin_and_check` between the pin store and
        // the active-bit check. Either the re-load below sees that reader's pin (and the bit goes
        // back), or the reader sees its bit cleared and sets it again before it loads the floor.
        seq_cst_fence("no_deactivate_fence");
        let mut back = 0;
        for b in bits(idle) {
            let pin = self.pin_of(word, b);
            if pin != UNPINNED {
                back |= 1 << b;
                *limit = (*limit).min(pin);
            }
        }
        if back != 0 && !crate::sync::mutant("deactivated_not_restored") {
            // Relaxed: only this producer scans; its next scan, on this thread, sees it. An RMW,
            // not a store of the word with `back` added: a store would erase the bit of another
            // reader of this word that set it since (the `restore_store` mutant, model 2cr).
            if crate::sync::mutant("restore_store") {
                let now = self.active[word].load(Relaxed);
                self.active[word].store(now | back, Relaxed);
            } else {
                self.active[word].fetch_or(back, Relaxed);
            }
        }
        if crate::sync::mutant("keep_ignores_back") {
            return left != 0;
        }
        left | back != 0
    }

    /// Whether unpinned entry `b` of leaf word `word` has pinned since a scan last found it
    /// unpinned (then it stays active this time; see `ReaderEntry::touched`). Loom builds give no
    /// second chance, so the models clear every unpinned entry at the first scan that finds it.
    fn second_chance(&self, word: usize, b: usize) -> bool {
        if cfg!(replay_ring_loom) {
            return false;
        }
        // SAFETY: the active bit of `b` was set, and so the entry initialised (see `pin_of`).
        let touched = unsafe { &self.entry(word * WORD_BITS + b).touched };
        // Relaxed: a hint, read and cleared only here; its value orders nothing.
        touched.load(Relaxed) && {
            touched.store(false, Relaxed);
            true
        }
    }

    /// The pin of entry `b` of leaf word `word`, whose active bit `scan_word` found set.
    fn pin_of(&self, word: usize, b: usize) -> u64 {
        // SAFETY: a claim's owner sets its entry's active bit (`activate`, `reactivate`) after
        // the claim initialised the entry, with a Release RMW that `scan_word`'s Acquire load of
        // the word pairs with; so the initialisation happens-before this read. The only other
        // set is the scan's own restore of a bit it found pinned (`back` in `scan_word`), on this
        // thread, after a read of the same entry that was already ordered so.
        let entry = unsafe { self.entry(word * WORD_BITS + b) };
        // Acquire: pairs with the Release pin and unpin stores in `reader.rs`, so the reader's
        // earlier slot reads happen-before we overwrite them.
        entry
            .pin
            .load(crate::sync::ord("pin_scan_relaxed", Acquire, Relaxed))
    }
}

/// Registration failed: `limit` readers exist.
#[derive(Debug)]
pub(crate) struct TableFull;

pub(crate) struct ReaderTable {
    /// The most entries that may be claimed at once (`Builder::max_readers`).
    limit: usize,
    /// `log2` of segment 0's length.
    base_shift: u32,
    first: Segment,
    /// Segments `1..SEGMENTS`; null until registration first needs one. Never replaced or freed
    /// before the table is dropped.
    more: [AtomicPtr<Segment>; SEGMENTS - 1],
    /// Segments `1..=grown` may be installed (a bound for the scans; each pointer is still checked).
    grown: AtomicUsize,
    /// Bit `s` (segments `1..SEGMENTS`): segment `s` may have a non-zero `active` word. Set by a
    /// reader after its leaf and summary bits, taken and put back by the pin scan like a summary
    /// word, so a scan passes over every segment whose readers are all unpinned (registered but
    /// idle, or gone) with one load, however large the table grew. Segment 0 (at most 64 entries)
    /// is always scanned.
    active_segments: CachePadded<AtomicU64>,
    /// Free list: `tag << 32 | (index + 1)`.
    free: CachePadded<AtomicU64>,
    /// Indices `0..fresh` have been handed out at least once; the next fresh claim takes `fresh`.
    fresh: AtomicUsize,
    /// Passed to every segment's `initialised` bitmap (loom builds: see `WalkModel`).
    walk: WalkModel,
}

impl ReaderTable {
    /// A table for up to `limit` readers (`1..=MAX_READERS`, checked by the builder), with the first
    /// `min(limit, 64)` entries (rounded up to a power of two) allocated now.
    pub(crate) fn new(limit: usize, walk: WalkModel) -> Self {
        let base = limit.min(MAX_BASE).next_power_of_two();
        let first = Segment::new(base, walk);
        // Segment 0 is ready before any registration: a ring's first readers (at most 64) claim
        // their entries without allocating.
        for offset in 0..base {
            // SAFETY: the table is not shared yet.
            unsafe { first.initialise(offset) };
        }
        ReaderTable {
            limit,
            base_shift: base.trailing_zeros(),
            first,
            more: std::array::from_fn(|_| AtomicPtr::new(ptr::null_mut())),
            grown: AtomicUsize::new(0),
            active_segments: CachePadded::new(AtomicU64::new(0)),
            free: CachePadded::new(AtomicU64::new(0)),
            fresh: AtomicUsize::new(0),
            walk,
        }
    }

    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// `(segment, offset)` of entry `index`.
    #[inline]
    fn locate(&self, index: usize) -> (usize, usize) {
        let seg = ((index >> self.base_shift) + 1).ilog2() as usize;
        (seg, index - self.segment_bounds(seg).0)
    }

    /// `(first index, full length)` of segment `seg`.
    #[inline]
    fn segment_bounds(&self, seg: usize) -> (usize, usize) {
        (
            ((1usize << seg) - 1) << self.base_shift,
            1usize << (self.base_shift as usize + seg),
        )
    }

    #[inline]
    fn segment(&self, seg: usize) -> Option<&Segment> {
        if seg == 0 {
            return Some(&self.first);
        }
        // Acquire: pairs with the Release CAS in `install`, so the segment's initialisation is seen.
        let p = self.more[seg - 1].load(crate::sync::ord("segment_load_relaxed", Acquire, Relaxed));
        // SAFETY: a non-null pointer came from `Box::into_raw` in `install` and is freed only in
        // `Drop`, which needs `&mut self`.
        unsafe { p.as_ref() }
    }

    /// The segment holding an index that has been handed out (so its segment is installed).
    #[inline]
    fn segment_of(&self, index: usize) -> (&Segment, usize) {
        let (seg, offset) = self.locate(index);
        let segment = self
            .segment(seg)
            .expect("an index is handed out only after its segment is installed");
        (segment, offset)
    }

    /// The entry at `index`.
    ///
    /// # Safety
    ///
    /// `index` was handed out by [`claim`](Self::claim) (at any time before: entries are never
    /// de-initialised while the table lives), and that claim happens-before this call: the caller
    /// made it, or reached the index through an Acquire that follows it (the wait list, the free
    /// list).
    #[inline]
    pub(crate) unsafe fn entry(&self, index: usize) -> &ReaderEntry {
        let (segment, offset) = self.segment_of(index);
        // SAFETY: the claim that handed `index` out initialised the entry first (`initialise`,
        // or the table's constructor for segment 0), and happens-before this call (our contract).
        unsafe { segment.entry(offset) }
    }

    /// A pointer to the entry at `index` that stays valid as long as the table lives.
    ///
    /// # Safety
    ///
    /// As for [`entry`](Self::entry).
    pub(crate) unsafe fn entry_ptr(&self, index: usize) -> NonNull<ReaderEntry> {
        // SAFETY: our contract is `entry`'s.
        NonNull::from(unsafe { self.entry(index) })
    }

    /// Claims an entry: the most recently freed one, or a fresh one (allocating its segment if
    /// needed). O(1) amortised: a CAS loop that retries only when another claim or free succeeded.
    pub(crate) fn claim(&self) -> Result<usize, TableFull> {
        // Acquire (load and CAS): pairs with the Release CAS in `free`, so the previous owner's use
        // of the entry happens-before ours.
        let mut head = self
            .free
            .load(crate::sync::ord("free_take_relaxed", Acquire, Relaxed));
        while head & INDEX_MASK != 0 {
            let index = (head & INDEX_MASK) as usize - 1;
            // Relaxed: a stale `next` (the entry was popped and pushed again meanwhile) is caught by
            // the tag in the CAS below.
            // SAFETY: only `free` pushes an index, one its owner got from a claim; our Acquire
            // load or failed CAS of `free` pairs with the Release CAS that pushed it.
            let next = unsafe { self.entry(index) }.free_next.load(Relaxed);
            let new = next_tag(head) | next;
            let take = crate::sync::ord("free_take_relaxed", Acquire, Relaxed);
            match self.free.compare_exchange(head, new, take, take) {
                Ok(_) => return Ok(self.hand_out(index)),
                Err(actual) => head = actual,
            }
        }
        // Relaxed: the count only hands out distinct indices; the segment pointer carries the data.
        let mut fresh = self.fresh.load(Relaxed);
        loop {
            if fresh >= self.limit {
                return Err(TableFull);
            }
            match self
                .fresh
                .compare_exchange(fresh, fresh + 1, Relaxed, Relaxed)
            {
                Ok(_) => break,
                Err(actual) => fresh = actual,
            }
        }
        self.install(self.locate(fresh).0);
        self.initialise(fresh);
        Ok(self.hand_out(fresh))
    }

    /// Completes a claim of `index` before the index leaves `claim`: raises the scan bound
    /// `grown` to the entry's segment and marks the entry claimed (for the metrics).
    fn hand_out(&self, index: usize) -> usize {
        let seg = self.locate(index).0;
        if seg > 0 && !crate::sync::mutant("grown_by_installer_only") {
            // Every claim in segment `seg` raises `grown` itself, before its owner can set the
            // entry's active bit and pin: an RMW sequenced before the owner's `fence(SeqCst)` in
            // `pin_and_check`, so a producer whose scan fence follows that fence reads `grown >=
            // seg` and visits the entry (race 2 in docs/design.md). The installer's own raise
            // is not enough: another registration can find the segment installed and pin before
            // the installer's `fetch_max` lands, and an entry reused from the free list was
            // installed by someone else entirely. Release: pairs with the Acquire load in
            // `min_pin`, as belt and braces: the scan needs the value, which the fences deliver,
            // and its data comes through the segment pointer and the leaf bit (`docs/
            // verification.md`, `grown_raise_relaxed`).
            self.grown.fetch_max(
                seg,
                crate::sync::ord("grown_raise_relaxed", Release, Relaxed),
            );
        }
        // SAFETY: `index` is this claim's: popped from the free list or fresh and initialised.
        let entry = unsafe { self.entry(index) };
        // Relaxed: only metrics read it.
        entry.claimed.store(true, Relaxed);
        index
    }

    /// Writes the entry of `index`, a fresh index this claim just took (its segment installed),
    /// unless it is in segment 0, which the table initialised. No other thread can reach the entry
    /// yet: a fresh index is taken once (the CAS on `fresh`), and the entry becomes reachable only
    /// through what its owner publishes later, with Release (its active bits, the wait list, the
    /// free list) or through `initialised` (the metrics walk).
    fn initialise(&self, index: usize) {
        if self.locate(index).0 > 0 {
            let (segment, offset) = self.segment_of(index);
            // SAFETY: as above: this claim's CAS on `fresh` made the index ours alone, and nothing
            // leads to the entry until we publish it.
            unsafe { segment.initialise(offset) };
        }
    }

    /// Makes sure segment `seg` exists. Racing installers allocate one each; one wins, the others
    /// free theirs.
    #[cold]
    fn install(&self, seg: usize) {
        if seg == 0 || self.segment(seg).is_some() {
            return;
        }
        // Full length even for the last segment, past the limit: the loom models rely on it for
        // a second segment with a summary word; untouched entries cost address space only.
        let len = self.segment_bounds(seg).1;
        let new = Box::into_raw(Box::new(Segment::new(len, self.walk)));
        // Release: pairs with the Acquire load in `segment`, publishing the segment's bitmaps (its
        // entries are initialised later, one by one, by their claims). Relaxed on failure: the
        // loser only frees its own copy, and reaches the winner's segment through that Acquire load
        // (`initialise`, via `segment_of`).
        let publish = crate::sync::ord("segment_install_relaxed", Release, Relaxed);
        match self.more[seg - 1].compare_exchange(ptr::null_mut(), new, publish, Relaxed) {
            Ok(_) => {
                if crate::sync::mutant("grown_by_installer_only") {
                    // The mutant: only the installer raises `grown` (see `hand_out`).
                    self.grown.fetch_max(seg, Release);
                }
            }
            // SAFETY: `new` came from `Box::into_raw` above and was never shared.
            Err(_) => drop(unsafe { Box::from_raw(new) }),
        }
    }

    /// Returns entry `index` to the free list. Its owner must have unpinned it and cleared its
    /// active bit; it may still be on the wait list (the producer's next wake takes it off).
    ///
    /// # Safety
    ///
    /// The caller owns `index` (its claim handed it out and it was not freed since), and gives it
    /// up: a second `free` of it would let two claims hand it out at once.
    pub(crate) unsafe fn free(&self, index: usize) {
        // SAFETY: the caller's claim handed `index` out (our contract).
        let entry = unsafe { self.entry(index) };
        // Relaxed: only metrics read it.
        entry.claimed.store(false, Relaxed);
        // Relaxed: only a first guess for the CAS below, which fails and reloads on a stale one.
        let mut head = self.free.load(Relaxed);
        loop {
            // Relaxed: published by the Release CAS below.
            entry.free_next.store(head & INDEX_MASK, Relaxed);
            let new = next_tag(head) | (index as u64 + 1);
            // Release: pairs with the Acquire CAS in `claim`; our use of the entry happens-before
            // the next owner's.
            let give = crate::sync::ord("free_give_relaxed", Release, Relaxed);
            match self.free.compare_exchange(head, new, give, Relaxed) {
                Ok(_) => return,
                Err(actual) => head = actual,
            }
        }
    }

    /// Marks entry `index` for the pin scan. Must precede the fence that follows the pin store it
    /// covers: in `reader::pin_and_check`, before the pin store, or after it when the reader finds
    /// its bit cleared by a scan (then a second fence follows).
    pub(crate) fn activate(&self, index: usize) {
        self.set_bits(index, !crate::sync::mutant("skip_active_summary"), true);
    }

    /// [`activate`](Self::activate) again, for a reader that found its bit cleared by a pin scan
    /// (race 2b): that scan may have dropped the summary and segment bits too, so all are set again.
    pub(crate) fn reactivate(&self, index: usize) {
        let upper = !crate::sync::mutant("reactivate_leaf_only");
        self.set_bits(index, upper, upper);
    }

    /// Sets entry `index`'s leaf bit, then (if asked: only mutants leave them out) its summary bit
    /// and its segment bit. Always an RMW at every level, even on a bit that is already set, so a
    /// scan that takes a bit synchronizes with every reader that set it before.
    fn set_bits(&self, index: usize, summary: bool, segment_bit: bool) {
        let (segment, offset) = self.segment_of(index);
        let word = offset / WORD_BITS;
        // Release (all three): pairs with the producer's Acquire take of `active_segments` and of
        // `summary` in `min_pin`, and its Acquire load of `active` in `Segment::scan_word` (which
        // `min_pin` calls); see the hazard argument on `min_pin`.
        // Leaf first, then summary, then segment.
        let set = crate::sync::ord("leaf_set_relaxed", Release, Relaxed);
        segment.active[word].fetch_or(1 << (offset % WORD_BITS), set);
        // The `set_only_if_clear` mutant skips an upper-level set when a load finds the bit set
        // already (by another reader), so no take synchronizes with this reader's set.
        let set_if_clear = |word: &AtomicU64, bit: u64| {
            !(crate::sync::mutant("set_only_if_clear") && word.load(Relaxed) & bit != 0)
        };
        if summary && !segment.summary.is_empty() {
            let set = crate::sync::ord("summary_set_relaxed", Release, Relaxed);
            let (summary, bit) = (&segment.summary[word / WORD_BITS], 1 << (word % WORD_BITS));
            if set_if_clear(summary, bit) {
                summary.fetch_or(bit, set);
            }
        }
        let seg = self.locate(index).0;
        if segment_bit && seg > 0 && !crate::sync::mutant("skip_segment_bit") {
            let set = crate::sync::ord("segment_set_relaxed", Release, Relaxed);
            if set_if_clear(&self.active_segments, 1 << seg) {
                self.active_segments.fetch_or(1 << seg, set);
            }
        }
    }

    /// Whether entry `index`'s active bit is set. The reader's check after its pin fence.
    pub(crate) fn is_active(&self, index: usize) -> bool {
        let (segment, offset) = self.segment_of(index);
        // Relaxed: ordered by the caller's fence (see `reader::pin_and_check`).
        segment.active[offset / WORD_BITS].load(Relaxed) & (1 << (offset % WORD_BITS)) != 0
    }

    /// Clears entry `index`'s active bit. Its pin must be `UNPINNED` already.
    pub(crate) fn deactivate(&self, index: usize) {
        let (segment, offset) = self.segment_of(index);
        // Release: pairs with the producer's Acquire load of `active` in `Segment::scan_word`
        // (called by `min_pin`): the reader's earlier slot reads (before its unpin) happen-before
        // a reuse decided without its pin.
        segment.active[offset / WORD_BITS].fetch_and(
            !(1 << (offset % WORD_BITS)),
            crate::sync::ord("deactivate_relaxed", Release, Relaxed),
        );
    }

    /// `min(limit, every pin of an active entry)`. Producer only, after its floor load and
    /// `fence(SeqCst)` (race 2 in `docs/design.md`).
    ///
    /// A summary word is *taken* (swapped to 0) before its leaf words are read, and the bits of
    /// leaf words found non-zero are put back. Taking first is what makes clearing safe: a reader
    /// that sets its leaf bit and then its summary bit either lands its summary bit after our swap
    /// (it stays set for the next scan), or before it — then our Acquire swap synchronizes with its
    /// Release set, and our leaf load sees its leaf bit. The segment bits above the summary words
    /// are taken and put back the same way.
    pub(crate) fn min_pin(&self, mut limit: u64) -> u64 {
        // Scans one segment; returns whether it may still have a non-zero leaf word.
        let mut scan = |segment: &Segment| -> bool {
            if segment.summary.is_empty() {
                return segment.scan_word(0, &mut limit);
            }
            let mut non_empty = false;
            for (s, summary) in segment.summary.iter().enumerate() {
                // Relaxed: a summary bit set before a reader's fence is seen by this load, which
                // follows our fence (or it was taken by an earlier scan of ours, which put it back).
                if summary.load(Relaxed) == 0 {
                    continue;
                }
                // Acquire: pairs with the Release `fetch_or` in `set_bits` (from `activate` and
                // `reactivate`).
                let taken = summary.swap(
                    0,
                    crate::sync::ord("summary_take_relaxed", Acquire, Relaxed),
                );
                let mut keep = 0;
                for w in bits(taken) {
                    if segment.scan_word(s * WORD_BITS + w, &mut limit) {
                        keep |= 1 << w;
                    }
                }
                if keep != 0 && !crate::sync::mutant("summary_not_restored") {
                    // Relaxed: only this producer reads summaries; its later Acquire swap sees it.
                    // An RMW: a load and a store would erase a reader's bit set in between (the
                    // `summary_put_back_store` mutant, model 2cp).
                    if crate::sync::mutant("summary_put_back_store") {
                        let now = summary.load(Relaxed);
                        summary.store(now | keep, Relaxed);
                    } else {
                        summary.fetch_or(keep, Relaxed);
                    }
                }
                non_empty |= keep != 0;
            }
            non_empty
        };
        scan(&self.first);
        // Acquire: pairs with the Release `fetch_max` in `hand_out`. Read after our fence: every
        // reader whose pin fence precedes it raised `grown` to its segment before that fence.
        let grown = self
            .grown
            .load(crate::sync::ord("grown_load_relaxed", Acquire, Relaxed));
        // Segments 1..=grown (grown < SEGMENTS <= 64).
        let mask = ((1u64 << grown) - 1) << 1;
        // Relaxed: as for a summary word, a segment bit set before a reader's fence is seen by this
        // load, which follows our fence (or it was taken by an earlier scan of ours, which put it
        // back). One load while no reader outside segment 0 is reading.
        if self.active_segments.load(Relaxed) & mask == 0 {
            return limit;
        }
        // Acquire: pairs with the Release `fetch_or` in `set_bits`, so the summary and leaf bits
        // a reader set before its segment bit are seen by the scan of its segment. Only the bits
        // within `grown` are taken: the others stay for a scan whose bound covers them.
        let take = crate::sync::ord("segment_take_relaxed", Acquire, Relaxed);
        let taken = self.active_segments.fetch_and(!mask, take) & mask;
        let mut keep = 0;
        for seg in bits(taken) {
            // A registration installed the segment before its reader set the bit; should the
            // pointer still read null, the bit stays set rather than be lost.
            if self.segment(seg).is_none_or(&mut scan) {
                keep |= 1 << seg;
            }
        }
        if keep != 0 && !crate::sync::mutant("segment_bit_not_restored") {
            // Relaxed: only this producer takes segment bits; its later Acquire take sees them.
            // An RMW, as for a summary word (the `segment_put_back_store` mutant, model 2cq).
            if crate::sync::mutant("segment_put_back_store") {
                let now = self.active_segments.load(Relaxed);
                self.active_segments.store(now | keep, Relaxed);
            } else {
                self.active_segments.fetch_or(keep, Relaxed);
            }
        }
        limit
    }

    /// Every entry handed out so far (claimed or free). Cold paths only (metrics).
    pub(crate) fn for_each_entry(&self, mut f: impl FnMut(&ReaderEntry)) {
        // Relaxed: a racing claim may or may not be counted; each segment pointer is checked.
        let fresh = self.fresh.load(Relaxed);
        for index in 0..fresh {
            let (seg, offset) = self.locate(index);
            match self.segment(seg) {
                Some(segment) if segment.is_initialised(offset) => {
                    // SAFETY: `is_initialised`'s Acquire load saw the bit that `initialise` set
                    // with Release after writing the entry.
                    f(unsafe { segment.entry(offset) })
                }
                _ => {}
            }
        }
    }
}

impl Drop for ReaderTable {
    fn drop(&mut self) {
        for slot in &self.more {
            // Relaxed: `&mut self`, no other thread can touch the table.
            let p = slot.load(Relaxed);
            if !p.is_null() {
                // SAFETY: installed by `install` from `Box::into_raw`, freed only here, once.
                drop(unsafe { Box::from_raw(p) });
            }
        }
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        for offset in self.initialised.set_offsets() {
            // SAFETY: the bit says the entry holds a value; `&mut self`: nothing else uses it, and
            // it is dropped once (the segment goes with it).
            unsafe { self.entries[offset].get_mut().assume_init_drop() };
        }
    }
}

/// The indices of the set bits of `word`, lowest first.
fn bits(mut word: u64) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        if word == 0 {
            return None;
        }
        let b = word.trailing_zeros() as usize;
        word &= word - 1;
        Some(b)
    })
}

#[cfg(all(test, not(replay_ring_loom)))]
mod tests {
    use super::*;

    /// The per-reader memory documented in `docs/design.md` ("The reader table").
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn an_entry_is_one_128_byte_padded_block() {
        assert_eq!(std::mem::size_of::<CachePadded<ReaderEntry>>(), 128);
    }

    #[test]
    fn indices_map_to_segments_without_gaps() {
        for limit in [1, 3, 64, 100, 5_000] {
            let table = ReaderTable::new(limit, WalkModel::default());
            let base = 1usize << table.base_shift;
            let mut expected = (0, 0);
            for index in 0..limit {
                assert_eq!(
                    table.locate(index),
                    expected,
                    "limit {limit}, index {index}"
                );
                expected.1 += 1;
                if expected.1 == base << expected.0 {
                    expected = (expected.0 + 1, 0);
                }
            }
        }
    }

    /// The entry of `index`, which this test claimed from `table` on this thread.
    fn claimed(table: &ReaderTable, index: usize) -> &ReaderEntry {
        // SAFETY: every caller passes an index that `claim` returned on this thread.
        unsafe { table.entry(index) }
    }

    /// Segments are written entry by entry as claims reach them.
    #[test]
    fn claims_initialise_their_entries_not_their_segments() {
        let table = ReaderTable::new(100, WalkModel::default()); // segment 0: 64 entries; segment 1: 128
        let count = |table: &ReaderTable| {
            let mut n = 0;
            table.for_each_entry(|_| n += 1);
            n
        };
        for _ in 0..64 {
            table.claim().unwrap();
        }
        assert!(table.segment(1).is_none());
        assert_eq!(count(&table), 64);
        table.claim().unwrap();
        let second = table.segment(1).unwrap();
        assert_eq!(second.entries.len(), 128);
        assert_eq!((0..128).filter(|&i| second.is_initialised(i)).count(), 1);
        assert_eq!(count(&table), 65);
        for _ in 65..100 {
            table.claim().unwrap();
        }
        assert!(table.claim().is_err());
        assert_eq!(count(&table), 100);
        assert_eq!((0..128).filter(|&i| second.is_initialised(i)).count(), 36);
    }

    /// A scan deactivates every entry it finds unpinned that has not pinned since the previous
    /// scan (none here has: no second chance), so the next scan visits only the pinned ones.
    #[test]
    fn a_scan_deactivates_unpinned_entries_and_keeps_pinned_ones() {
        let readers = 5_000;
        let table = ReaderTable::new(readers, WalkModel::default());
        let indices: Vec<usize> = (0..readers).map(|_| table.claim().unwrap()).collect();
        for &i in &indices {
            table.activate(i);
        }
        let (pinned_a, pinned_b) = (indices[7], indices[4_321]);
        // Relaxed (every store in this test): one thread does the stores and the scans, in
        // program order.
        claimed(&table, pinned_a).pin.store(40, Relaxed);
        claimed(&table, pinned_b).pin.store(30, Relaxed);

        assert_eq!(table.min_pin(100), 30);
        let active: Vec<usize> = indices
            .iter()
            .copied()
            .filter(|&i| table.is_active(i))
            .collect();
        assert_eq!(active, [pinned_a, pinned_b]);
        // Only the pinned entries are left to visit, and they still bound the limit.
        assert_eq!(table.min_pin(100), 30);

        // An unpinned entry leaves at the next scan; one that pins again after setting its bit
        // (as `reader::pin_and_check` does when it finds the bit cleared) is visited again.
        claimed(&table, pinned_b).pin.store(UNPINNED, Relaxed);
        assert_eq!(table.min_pin(100), 40);
        assert!(!table.is_active(pinned_b));
        table.activate(indices[99]);
        claimed(&table, indices[99]).pin.store(20, Relaxed);
        assert_eq!(table.min_pin(100), 20);
        assert!(table.is_active(indices[99]) && table.is_active(pinned_a));
    }

    /// A scan that finds every reader of a segment unpinned drops the segment's bit, so later
    /// scans pass over the segment with one load; a reader that activates again brings it back.
    #[test]
    fn segments_whose_readers_are_all_unpinned_are_passed_over() {
        let table = ReaderTable::new(5_000, WalkModel::default());
        let indices: Vec<usize> = (0..5_000).map(|_| table.claim().unwrap()).collect();
        for &i in &indices {
            table.activate(i);
        }
        let segment_bit = |index: usize| 1u64 << table.locate(index).0;
        let last = indices[4_999];
        let every_later_segment = (segment_bit(last) - 1) << 1;
        // Relaxed (every access in this test): one thread does the stores, the scans and the
        // loads, in program order.
        assert_eq!(table.active_segments.load(Relaxed), every_later_segment);

        claimed(&table, last).pin.store(30, Relaxed);
        assert_eq!(table.min_pin(100), 30);
        assert_eq!(table.active_segments.load(Relaxed), segment_bit(last));

        claimed(&table, last).pin.store(UNPINNED, Relaxed);
        assert_eq!(table.min_pin(100), 100);
        assert_eq!(table.active_segments.load(Relaxed), 0);

        let middle = indices[1_000];
        table.activate(middle);
        claimed(&table, middle).pin.store(20, Relaxed);
        assert_eq!(table.min_pin(100), 20);
        assert_eq!(table.active_segments.load(Relaxed), segment_bit(middle));
    }

    /// An unpinned entry that pinned since the last scan that found it unpinned gets a second
    /// chance: it is deactivated by the next scan that finds it unpinned and untouched.
    #[test]
    fn a_reader_that_keeps_reading_is_not_deactivated_per_scan() {
        let table = ReaderTable::new(1, WalkModel::default());
        let i = table.claim().unwrap();
        table.activate(i);
        let entry = claimed(&table, i);
        // Between two reads at every scan: pinned (and touched) since the previous scan.
        for _ in 0..3 {
            // Relaxed: one thread does the store and the scan, in program order.
            entry.touched.store(true, Relaxed);
            assert_eq!(table.min_pin(100), 100);
            assert!(table.is_active(i));
        }
        // Stopped: the next scan finds it unpinned and untouched, and deactivates it.
        assert_eq!(table.min_pin(100), 100);
        assert!(!table.is_active(i));
    }
}
