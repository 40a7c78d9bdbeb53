//! After construction, push, read, release, resume and both kinds of wait allocate nothing.
//! Counted with a global allocator, on the test's own thread only.

// Ordinary builds only: a `--cfg replay_ring_loom` build swaps in loom atomics and drops the
// blocking API; its checks are the models in `loom-tests/`.
#![cfg(not(replay_ring_loom))]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use replay_ring::ReplayRing;

struct Counting;

thread_local! {
    /// Only this test's thread is counted (the harness's own threads, and the other tests running
    /// in parallel, allocate as they please).
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    /// Allocations (and reallocations) counted on this thread.
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
    /// Bytes they asked for.
    static BYTES: Cell<usize> = const { Cell::new(0) };
}

fn count(bytes: usize) {
    ALLOCATIONS.with(|a| a.set(a.get() + 1));
    BYTES.with(|b| b.set(b.get() + bytes));
}

fn allocations() -> usize {
    ALLOCATIONS.with(Cell::get)
}

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            count(layout.size());
        }
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            count(new_size);
        }
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn poll_once<F: Future>(future: F) -> Poll<F::Output> {
    let mut future = pin!(future);
    future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
}

#[test]
fn push_read_gate_release_resume_and_waits_allocate_nothing() {
    let (mut producer, ring) = ReplayRing::<Bytes>::new(64, 4).unwrap();
    let payload = Bytes::from(vec![7u8; 256]);
    // `Bytes` from a `Vec` allocates its shared header on the first clone; do that now.
    drop(payload.clone());
    let mut live = ring.reader().unwrap();
    // Nothing is warmed up: the first blocking wait of each handle must not allocate either (its
    // thread waker comes with the reader-table entry, or with the producer).
    COUNTING.with(|c| c.set(true));
    assert!(live
        .read_timeout(std::time::Duration::from_micros(1))
        .unwrap()
        .is_none());
    let mut fresh = ring.resume(Some(ring.head())).unwrap();
    assert!(fresh
        .read_timeout(std::time::Duration::from_micros(1))
        .unwrap()
        .is_none());
    drop(fresh);
    for round in 0..if cfg!(miri) { 5 } else { 1_000u64 } {
        for _ in 0..48 {
            producer.try_push(payload.clone()).unwrap();
        }
        let batch = live.try_read().unwrap().unwrap();
        let bytes: usize = batch.iter().map(|(_, b)| b.len()).sum();
        assert_eq!(bytes, 48 * 256);
        drop(batch);
        // Resume, replay (zero-copy), and drop a second reader.
        let mut resumed = ring.resume(Some(ring.head() - 10)).unwrap();
        assert_eq!(resumed.try_read().unwrap().unwrap().len(), 10);
        drop(resumed);
        ring.release_through(ring.head()).unwrap();
        // A gate: pinned once, then polled (a batch, then nothing).
        producer.try_push(payload.clone()).unwrap();
        let mut gate = live.gating().unwrap();
        assert_eq!(gate.try_read().unwrap().unwrap().len(), 1);
        assert!(gate.try_read().unwrap().is_none());
        drop(gate);
        ring.release_through(ring.head()).unwrap();
        // Async waits register in the fixed waker table: nothing is allocated per wait.
        assert!(poll_once(live.read()).is_pending());
        if round % 100 == 0 {
            let _ = ring.metrics();
        }
    }
    // A full window: the producer's async wait registers its waker, again without allocating.
    while producer.try_push(payload.clone()).is_ok() {}
    assert!(poll_once(producer.ready()).is_pending());
    assert!(!producer.ready_timeout(std::time::Duration::from_micros(1)));
    COUNTING.with(|c| c.set(false));

    assert_eq!(allocations(), 0, "the hot path allocated");
}

/// Bytes one `build()` allocates, counted on this thread.
fn bytes_to_build(initial_slots: Option<usize>) -> usize {
    let mut builder = ReplayRing::<[u8; 128]>::builder()
        .capacity(1024)
        .max_readers(4);
    if let Some(n) = initial_slots {
        builder = builder.initial_slots(n);
    }
    let before = BYTES.with(Cell::get);
    COUNTING.with(|c| c.set(true));
    let built = builder.build().unwrap();
    COUNTING.with(|c| c.set(false));
    let bytes = BYTES.with(Cell::get) - before;
    drop(built);
    bytes
}

#[test]
fn checking_settings_allocates_nothing() {
    // The largest window and reader table a `[u8; 128]` ring may have: building it would take
    // over 128 GiB; checking it takes nothing.
    let builder = ReplayRing::<[u8; 128]>::builder()
        .capacity(replay_ring::MAX_CAPACITY)
        .max_readers(replay_ring::MAX_READERS);
    COUNTING.with(|c| c.set(true));
    let checked = builder.check();
    COUNTING.with(|c| c.set(false));
    assert_eq!(checked, Ok(()));
    assert_eq!(allocations(), 0, "check() allocated");
}

#[test]
fn an_idle_lazy_ring_allocates_only_its_first_segment() {
    let eager = bytes_to_build(None);
    let lazy = bytes_to_build(Some(16));
    // The eager ring holds all 1,024 slots of 128 bytes; the lazy one 16 of them, plus a directory
    // of 7 segment pointers (16, 16, 32, … 512 slots). Everything else is the same.
    let slot = 128;
    assert_eq!(eager - lazy, (1024 - 16) * slot - 6 * size_of::<usize>());
    assert!(lazy < 16 * 1024, "an idle lazy ring took {lazy} bytes");
}

#[test]
fn a_fully_grown_lazy_ring_allocates_nothing_on_push_read_resume_and_wait() {
    let (mut producer, ring) = ReplayRing::<Bytes>::builder()
        .capacity(64)
        .initial_slots(2)
        .max_readers(4)
        .build()
        .unwrap();
    let payload = Bytes::from(vec![7u8; 256]);
    drop(payload.clone());
    let mut live = ring.reader().unwrap();
    // Growing allocates: segments [2,4), [4,8), … [32,64) as the first lap reaches them.
    COUNTING.with(|c| c.set(true));
    let before = allocations();
    for _ in 0..64 {
        producer.try_push(payload.clone()).unwrap();
    }
    let grown = allocations() - before;
    COUNTING.with(|c| c.set(false));
    assert_eq!(grown, 5, "one allocation per segment after the first");
    while let Some(batch) = live.try_read().unwrap() {
        drop(batch);
    }
    ring.release_through(ring.head()).unwrap();

    // After one full lap: nothing allocates any more.
    let before = allocations();
    COUNTING.with(|c| c.set(true));
    for _ in 0..if cfg!(miri) { 3 } else { 500u64 } {
        for _ in 0..48 {
            producer.try_push(payload.clone()).unwrap();
        }
        let mut read = 0;
        while let Some(batch) = live.try_read().unwrap() {
            read += batch.iter().map(|(_, b)| b.len()).sum::<usize>();
        }
        assert_eq!(read, 48 * 256);
        let mut resumed = ring.resume(Some(ring.head() - 40)).unwrap();
        let mut replayed = 0;
        while let Some(batch) = resumed.try_read().unwrap() {
            replayed += batch.len();
        }
        assert_eq!(replayed, 40);
        drop(resumed);
        ring.release_through(ring.head()).unwrap();
        assert!(poll_once(live.read()).is_pending());
    }
    while producer.try_push(payload.clone()).is_ok() {}
    assert!(poll_once(producer.ready()).is_pending());
    assert!(!producer.ready_timeout(std::time::Duration::from_micros(1)));
    COUNTING.with(|c| c.set(false));
    assert_eq!(allocations() - before, 0, "the hot path allocated");
}

/// What registered readers cost in heap: the figure `docs/design.md` gives ("Memory per registered
/// reader"). Segments double, so up to about twice the registered entries are allocated; each
/// entry is a 128-byte cache-padded slot plus its blocking-wait waker.
#[test]
#[cfg_attr(
    miri,
    ignore = "a size measurement at 100,000 readers: too slow under Miri"
)]
fn a_registered_reader_costs_at_most_180_bytes_of_heap() {
    const READERS: usize = 100_000;
    let (_producer, ring) = ReplayRing::<u64>::builder()
        .capacity(64)
        .max_readers(READERS)
        .build()
        .unwrap();
    let mut readers = Vec::with_capacity(READERS);
    let before = BYTES.with(Cell::get);
    COUNTING.with(|c| c.set(true));
    for _ in 0..READERS {
        readers.push(ring.reader().unwrap());
    }
    COUNTING.with(|c| c.set(false));
    let per_reader = (BYTES.with(Cell::get) - before) / READERS;
    eprintln!("{READERS} readers: {per_reader} bytes of heap each");
    // 131,008 entries of 128 bytes for 100,000 readers (segments double), plus bitmaps: any
    // allocation per reader on top (a waker, say) would take it past 180.
    assert!(
        per_reader <= 180,
        "{per_reader} bytes per registered reader"
    );
}

/// Runs `f` with this thread's allocations counted: `(allocations, bytes)`.
fn counted(f: impl FnOnce()) -> (usize, usize) {
    let (a0, b0) = (allocations(), BYTES.with(Cell::get));
    COUNTING.with(|c| c.set(true));
    f();
    COUNTING.with(|c| c.set(false));
    (allocations() - a0, BYTES.with(Cell::get) - b0)
}

#[test]
fn opening_a_reader_table_segment_allocates_the_segment_not_its_entries() {
    // The table starts with 64 ready entries; the 65th registration opens a segment of 128, whose
    // entries are written one by one by the registrations that claim them.
    let (_producer, ring) = ReplayRing::<u64>::builder()
        .capacity(8)
        .max_readers(1 << 20)
        .build()
        .unwrap();
    let mut readers: Vec<_> = (0..63).map(|_| ring.reader().unwrap()).collect();
    readers.reserve(4);
    let (last_ready, _) = counted(|| readers.push(ring.reader().unwrap()));
    assert_eq!(last_ready, 0, "an entry of the first segment comes ready");
    let (opening, opening_bytes) = counted(|| readers.push(ring.reader().unwrap()));
    // The segment: its header, its entries and three bitmaps, not a waker (or any other
    // allocation) for each of the 128 entries.
    assert!(
        opening <= 5,
        "opening a 128-entry segment made {opening} allocations"
    );
    assert!(
        opening_bytes < 128 * 128 + 1024,
        "opening a 128-entry segment asked for {opening_bytes} bytes"
    );
    // In an open segment, a never-used entry and a reused one come without allocating, whether
    // taken by `reader()` or by `resume()`.
    let (second, _) = counted(|| readers.push(ring.reader().unwrap()));
    assert_eq!(second, 0, "a registration into an open segment allocated");
    let head = ring.head();
    let (resumed, _) = counted(|| readers.push(ring.resume(Some(head)).unwrap()));
    assert_eq!(resumed, 0, "a resume into an open segment allocated");
    drop(readers.pop());
    let (reused, _) = counted(|| readers.push(ring.resume(Some(head)).unwrap()));
    assert_eq!(reused, 0, "a resume that reuses an entry allocated");
    // The metrics walk meets the entries claimed so far, and only those.
    assert_eq!(ring.metrics().readers_active, 67);
    drop(readers.drain(..10));
    assert_eq!(ring.metrics().readers_active, 57);
    // A blocking wait on an entry of the new segment works and allocates nothing.
    let reader = readers.last_mut().unwrap();
    let (waits, _) = counted(|| {
        assert!(reader
            .read_timeout(std::time::Duration::from_micros(1))
            .unwrap()
            .is_none())
    });
    assert_eq!(waits, 0);
}
