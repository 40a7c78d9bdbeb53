//! The per-event hot path allocates nothing: encoding events into a reused buffer and the
//! retention bookkeeping (`on_written`, `release_expired`), after warm-up.
//!
//! A counting global allocator that counts only on the measuring thread, per thread (the test
//! harness's own threads, and tests running in parallel, allocate at unpredictable times).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use replay_ring::ReplayRing;
use replay_ring_sse::{encode_event, Epoch, Retention, RetentionConfig, StreamId, StreamIdentity};

struct Counting;

thread_local! {
    /// Set on the measuring thread only. `const` initialisation: reading it never allocates.
    static MEASURING: Cell<bool> = const { Cell::new(false) };
    /// Allocations made by this thread while it was measuring (per thread, so tests running in
    /// parallel do not see each other's allocations).
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

fn count() {
    if MEASURING.with(Cell::get) {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
    }
}

fn allocations() -> usize {
    ALLOCATIONS.with(Cell::get)
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
    let before = allocations();
    MEASURING.with(|m| m.set(true));
    run(500, 10_500, &mut buf);
    MEASURING.with(|m| m.set(false));
    assert_eq!(
        allocations() - before,
        0,
        "allocations on the per-event path"
    );
    assert!(
        ring.floor() > 9_000,
        "the window kept moving: floor {}",
        ring.floor()
    );
}

/// A stream nobody connected to whose window filled ends its creation's claim
/// ([`Retention::with_creation_claim_until_full`]) in place: the release that ends it allocates
/// nothing either.
#[test]
fn ending_the_creation_claim_does_not_allocate() {
    let (mut producer, ring) = ReplayRing::<u64>::new(64, 1).unwrap();
    let mut retention =
        Retention::new(RetentionConfig::default(), 1).with_creation_claim_until_full();
    let now = Instant::now();
    assert_eq!(retention.release_expired(&ring, now), None, "claimed");
    for i in 0..64 {
        producer.try_push(i).unwrap();
    }
    let before = allocations();
    MEASURING.with(|m| m.set(true));
    let released = retention.release_expired(&ring, now);
    MEASURING.with(|m| m.set(false));
    assert_eq!(allocations() - before, 0, "allocations ending the claim");
    assert_eq!(released, Some(65), "nothing is claimed any more");
}

/// Publishing through the [`Publisher`] and reading through the backend [`Tail`] into a reused
/// buffer allocate nothing per event either (the payload is a static `Bytes`; cloning one out of
/// the ring bumps a reference count).
#[test]
fn publisher_and_backend_tail_do_not_allocate_per_event() {
    use bytes::Bytes;
    use replay_ring_sse::backend::Tail;
    use replay_ring_sse::Publisher;

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (producer, ring) = ReplayRing::<Bytes>::new(64, 2).unwrap();
        let mut publisher = Publisher::new(producer, RetentionConfig::default());
        let mut tail = ring.reader().unwrap();
        let mut out: Vec<(u64, Bytes)> = Vec::with_capacity(64);
        let payload = Bytes::from_static(br#"{"n":123456,"kind":"progress"}"#);

        let mut before = 0;
        for round in 0..10_500u64 {
            if round == 500 {
                before = allocations();
                MEASURING.with(|m| m.set(true));
            }
            let id = publisher.publish_with(|_| payload.clone()).await.unwrap();
            assert_eq!(id, round + 1);
            let n = Tail::next_batch(&mut tail, &mut out).await.unwrap();
            assert_eq!((n, out[0].0), (1, id));
            ring.release_through(id).unwrap();
        }
        MEASURING.with(|m| m.set(false));
        assert_eq!(
            allocations() - before,
            0,
            "allocations on the publish + tail path"
        );
        assert_eq!(ring.head(), 10_500);
    });
}
