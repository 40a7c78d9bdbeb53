//! The per-event hot path allocates nothing: encoding events into a reused buffer and the
//! retention bookkeeping (`on_written`, `release_expired`), after warm-up.
//!
//! A counting global allocator that counts only on the measuring thread (the test harness's own
//! threads allocate at unpredictable times).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use replay_ring::ReplayRing;
use replay_ring_sse::{encode_event, Epoch, Retention, RetentionConfig, StreamId, StreamIdentity};

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Set on the measuring thread only. `const` initialisation: reading it never allocates.
    static MEASURING: Cell<bool> = const { Cell::new(false) };
}

fn count() {
    if MEASURING.with(Cell::get) {
        // Relaxed: a statistic read by the same thread after the measured section.
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: forwards every call unchanged to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn hot_path_does_not_allocate() {
    let me = StreamIdentity::new(StreamId::new("events").unwrap(), Epoch::new(0xabc));
    let (mut producer, ring) = ReplayRing::<u64>::new(64, 2).unwrap();
    let config = RetentionConfig {
        resumption_window: Duration::from_millis(64),
        ..Default::default()
    };
    let mut retention = Retention::new(config, 2);
    let conn = retention.connect(0).unwrap();
    let mut reader = ring.reader().unwrap();
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let payload = br#"{"n":123456,"kind":"progress"}"#;
    let t0 = Instant::now();

    let mut run = |from: u64, to: u64, buf: &mut BytesMut| {
        for t in from..to {
            let now = t0 + Duration::from_millis(t);
            while producer.try_push(t).is_err() {
                // Full: only time releases; advance the checkpoints as a server's producer does.
                assert!(retention
                    .release_expired(&ring, now + Duration::from_secs(1))
                    .is_some());
            }
            let batch = reader.try_read().unwrap().unwrap();
            let mut last = 0;
            for (id, _) in batch.iter() {
                encode_event(buf, me.event_id(id), None, payload).unwrap();
                last = id;
            }
            drop(batch);
            buf.clear(); // the "socket" took the bytes
            retention.on_written(&conn, last, now);
            retention.release_expired(&ring, now);
        }
    };
    run(0, 500, &mut buf); // warm-up
                           // Relaxed: single-threaded measurement.
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    MEASURING.with(|m| m.set(true));
    run(500, 10_500, &mut buf);
    MEASURING.with(|m| m.set(false));
    let after = ALLOCATIONS.load(Ordering::Relaxed);
    assert_eq!(after - before, 0, "allocations on the per-event path");
    assert!(
        ring.floor() > 9_000,
        "the window kept moving: floor {}",
        ring.floor()
    );
}
