//! Rings built with `Builder::initial_slots` below their capacity: the slot array grows in
//! segments (`initial_slots`, `initial_slots`, `2 × initial_slots`, …) as the window first reaches
//! them. Batches end at segment boundaries, everything else behaves as in an eager ring.

// Ordinary builds only: a `--cfg replay_ring_loom` build swaps in loom atomics and drops the
// blocking API; its checks are the models in `loom-tests/`.
#![cfg(not(replay_ring_loom))]

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;

use replay_ring::{Batch, Producer, Reader, ReplayRing};

fn lazy<T: Send>(capacity: usize, initial: usize, first_id: u64) -> (Producer<T>, ReplayRing<T>) {
    ReplayRing::builder()
        .capacity(capacity)
        .initial_slots(initial)
        .first_id(first_id)
        .max_readers(4)
        .build()
        .unwrap()
}

/// Every batch a reader lends until it has caught up, as `(first_id, last_id)`, checking that each
/// value is its own id.
fn batches(reader: &mut Reader<u64>) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    while let Some(batch) = reader.try_read().unwrap() {
        out.push(checked_span(&batch));
    }
    out
}

/// A batch's `(first_id, last_id)`, after checking that its slices cover it and that each value is
/// its own id.
fn checked_span(batch: &Batch<'_, u64>) -> (u64, u64) {
    let (a, b) = batch.as_slices();
    assert_eq!(a.len() + b.len(), batch.len());
    assert!(
        batch.iter().all(|(id, v)| *v == id),
        "slot holds another id"
    );
    (batch.first_id(), batch.last_id())
}

fn push_ids(producer: &mut Producer<u64>, through: u64) {
    while producer.next_id() <= through {
        let id = producer.next_id();
        assert_eq!(producer.try_push(id), Ok(id));
    }
}

#[test]
fn capacity_is_the_full_capacity_not_a_segment() {
    let (_p, ring) = lazy::<u64>(1000, 3, 1);
    assert_eq!(ring.capacity(), 1024);
    assert_eq!(ring.metrics().capacity, 1024);
}

#[test]
fn a_lazy_ring_fills_its_whole_capacity_and_then_backpressures() {
    let (mut producer, ring) = lazy::<u64>(16, 1, 1);
    push_ids(&mut producer, 16);
    assert!(producer.try_push(17).unwrap_err().is_full());
    let mut reader = ring.resume(Some(0)).unwrap();
    // Index of id k is k % 16. Segments: [0,1) [1,2) [2,4) [4,8) [8,16). Id 1 starts segment 1,
    // so its batch is segment 1 and segment 2 (ids 1..=3), then segments 3 and 4, then the wrap.
    assert_eq!(batches(&mut reader), [(1, 3), (4, 15), (16, 16)]);
}

#[test]
fn initial_slots_are_rounded_up_and_clamped() {
    // The batch boundaries show the segment sizes. Head 15, cursor at id 1 (index 1).
    let first_batch = |initial: usize| {
        let (mut producer, ring) = lazy::<u64>(16, initial, 1);
        push_ids(&mut producer, 15);
        let mut reader = ring.resume(Some(0)).unwrap();
        batches(&mut reader)[0]
    };
    // 0 is clamped to 1: segments [0,1) [1,2) [2,4) …: ids 1..=3.
    assert_eq!(first_batch(0), (1, 3));
    assert_eq!(first_batch(1), (1, 3));
    // 3 is rounded up to 4: [0,4) [4,8) [8,16): index 1 to the end of [4,8), ids 1..=7.
    assert_eq!(first_batch(3), (1, 7));
    assert_eq!(first_batch(4), (1, 7));
    // 5 rounds up to 8: [0,8) [8,16): ids 1..=15 in one batch.
    assert_eq!(first_batch(5), (1, 15));
    // Above the capacity: clamped to it, one segment (the eager layout).
    assert_eq!(first_batch(1 << 40), (1, 15));
    assert_eq!(first_batch(16), (1, 15));
}

#[test]
fn try_push_many_grows_across_segments_without_stopping_early() {
    let (mut producer, ring) = lazy::<u64>(32, 2, 1);
    let mut reader = ring.reader().unwrap();
    let mut values = 1..=40u64;
    // One run through segments [0,2) [2,4) [4,8) [8,16) [16,32): all 32 fit, as in an eager ring.
    assert_eq!(producer.try_push_many(&mut values), 32);
    assert_eq!(values.next(), Some(33));
    let got = batches(&mut reader);
    assert_eq!(got.first().unwrap().0, 1);
    assert_eq!(got.last().unwrap().1, 32);
    assert!(got.windows(2).all(|w| w[0].1 + 1 == w[1].0), "{got:?}");
}

#[test]
fn ids_that_start_mid_array_grow_the_segment_they_start_in() {
    // first_id 13 maps to index 13, in segment [8,16); the window then wraps into segment 0.
    let (mut producer, ring) = lazy::<u64>(16, 2, 13);
    let mut reader = ring.resume(Some(12)).unwrap();
    push_ids(&mut producer, 28);
    assert!(producer.try_push(29).unwrap_err().is_full());
    // Segments [0,2) [2,4) [4,8) [8,16): 13..=15 ends [8,16), 16..=17 is segment 0 (the wrap).
    let got = batches(&mut reader);
    assert_eq!(got, [(13, 17), (18, 23), (24, 28)]);
}

#[test]
fn wrap_around_across_segments_and_resume_from_any_id() {
    let (mut producer, ring) = lazy::<u64>(8, 1, 1);
    let rounds = if cfg!(miri) { 3 } else { 20 };
    for round in 0..rounds {
        let head = (round + 1) * 5;
        push_ids(&mut producer, head);
        // Every resume in the window yields exactly x + 1 ..= head, in batches that tile it.
        for x in ring.floor() - 1..head {
            let mut reader = ring.resume(Some(x)).unwrap();
            let got = batches(&mut reader);
            assert_eq!(got.first().unwrap().0, x + 1, "{got:?}");
            assert_eq!(got.last().unwrap().1, head, "{got:?}");
            assert!(got.windows(2).all(|w| w[0].1 + 1 == w[1].0), "{got:?}");
            // Segments are [0,1) [1,2) [2,4) [4,8): at most two in a batch, so at most 6 ids
            // (the rest of [2,4) and all of [4,8)).
            assert!(got.iter().all(|(a, b)| b - a < 6), "{got:?}");
        }
        ring.release_through(head - 3).unwrap();
    }
}

#[test]
fn a_batch_ends_at_a_segment_boundary_and_the_next_read_continues() {
    let (mut producer, ring) = lazy::<u64>(64, 4, 1);
    let mut reader = ring.reader().unwrap();
    push_ids(&mut producer, 40);
    // [0,4) [4,8) [8,16) [16,32) [32,64): from index 1, segments 0 and 1 (ids 1..=7), then
    // segments 2 and 3 (8..=31), then segment 4 up to the head.
    let first = reader.try_read().unwrap().unwrap();
    assert_eq!((first.first_id(), first.last_id()), (1, 7));
    assert_eq!(first.as_slices(), (&[1, 2, 3][..], &[4, 5, 6, 7][..]));
    drop(first);
    let second = reader.try_read().unwrap().unwrap();
    assert_eq!((second.first_id(), second.last_id()), (8, 31));
    assert_eq!(second.as_slices().0.len(), 8);
    assert_eq!(second.as_slices().1.len(), 16);
    drop(second);
    let third = reader.try_read().unwrap().unwrap();
    assert_eq!((third.first_id(), third.last_id()), (32, 40));
    drop(third);
    assert!(reader.try_read().unwrap().is_none());
    // One event at a time crosses the boundaries the same way.
    push_ids(&mut producer, 50);
    for id in 41..=50 {
        assert_eq!(reader.try_recv().unwrap().unwrap().data, id);
    }
}

#[test]
fn a_drain_crosses_segment_boundaries_batch_by_batch() {
    let (mut producer, ring) = lazy::<u64>(64, 4, 1);
    let mut reader = ring.reader().unwrap();
    push_ids(&mut producer, 40);
    let mut lent = Vec::new();
    let read = reader.drain(|batch| {
        lent.push(checked_span(batch));
        std::ops::ControlFlow::Continue(())
    });
    // The same segment-bounded batches as `try_read` lends, all under one drain.
    assert_eq!(read, Ok(40));
    assert_eq!(lent, [(1, 7), (8, 31), (32, 40)]);
    assert_eq!(reader.cursor(), 41);
}

/// Counts its drops; the one with `panic` set panics in `drop` (unless already unwinding).
struct Counted {
    drops: Arc<AtomicUsize>,
    panic: bool,
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.drops.fetch_add(1, SeqCst);
        if self.panic && !std::thread::panicking() {
            panic!("drop failed");
        }
    }
}

fn push_counted(producer: &mut Producer<Counted>, drops: &Arc<AtomicUsize>, panic: bool) -> u64 {
    let value = Counted {
        drops: drops.clone(),
        panic,
    };
    producer.try_push(value).ok().unwrap()
}

#[test]
fn values_in_every_segment_are_dropped_once_with_the_ring() {
    let drops = Arc::new(AtomicUsize::new(0));
    // Capacity 16 from 1 slot: ids 3..=18 retained, over all five segments and the wrap.
    let (mut producer, ring) = lazy::<Counted>(16, 1, 1);
    for id in 1..=18u64 {
        if id > 16 {
            ring.release_through(id - 16).unwrap();
        }
        assert_eq!(push_counted(&mut producer, &drops, false), id);
    }
    assert_eq!(drops.load(SeqCst), 2, "ids 1 and 2 were replaced");
    drop(producer);
    drop(ring);
    assert_eq!(drops.load(SeqCst), 18, "every value dropped exactly once");
}

#[test]
fn a_partly_grown_ring_drops_only_what_it_holds() {
    let drops = Arc::new(AtomicUsize::new(0));
    let (mut producer, ring) = lazy::<Counted>(1024, 4, 1);
    for _ in 0..9 {
        push_counted(&mut producer, &drops, false);
    }
    drop((producer, ring));
    assert_eq!(drops.load(SeqCst), 9);
}

#[test]
fn a_panicking_drop_in_one_segment_still_drops_the_other_segments() {
    for panicking_id in [3u64, 9, 17, 18] {
        let drops = Arc::new(AtomicUsize::new(0));
        let (mut producer, ring) = lazy::<Counted>(16, 2, 1);
        for id in 1..=18u64 {
            if id > 16 {
                ring.release_through(id - 16).unwrap();
            }
            push_counted(&mut producer, &drops, id == panicking_id);
        }
        drop(producer);
        let caught = catch_unwind(AssertUnwindSafe(move || drop(ring)));
        assert!(
            caught.is_err(),
            "the drop of id {panicking_id} was meant to panic"
        );
        assert_eq!(
            drops.load(SeqCst),
            18,
            "id {panicking_id}: every value dropped once"
        );
    }
}

#[test]
fn a_lent_batch_in_a_new_segment_backpressures_the_producer() {
    let (mut producer, ring) = lazy::<u64>(8, 2, 1);
    push_ids(&mut producer, 8);
    let mut reader = ring.resume(Some(4)).unwrap();
    ring.release_through(8).unwrap();
    // The reader pins id 5 (segment [4,8)): ids 9..=12 reuse released, unpinned slots; 13 would
    // reuse id 5's slot.
    let batch = reader.try_read().unwrap().unwrap();
    assert_eq!((batch.first_id(), batch.last_id()), (5, 8));
    push_ids(&mut producer, 12);
    assert!(producer.try_push(13).unwrap_err().is_full());
    drop(batch);
    assert_eq!(producer.try_push(13), Ok(13));
}
