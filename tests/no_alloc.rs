//! After construction, push, read, release, resume and both kinds of wait allocate nothing.
//! Counted with a global allocator, on the test's own thread only.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use replay_ring::ReplayRing;

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);
thread_local! {
    /// Only this test's thread is counted (the harness's own threads allocate as they please).
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            ALLOCATIONS.fetch_add(1, SeqCst);
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
            ALLOCATIONS.fetch_add(1, SeqCst);
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
fn push_read_release_resume_and_waits_allocate_nothing() {
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

    assert_eq!(ALLOCATIONS.load(SeqCst), 0, "the hot path allocated");
}
