//! Behaviour of the core ring: bad input, ids at the limit, drops, waits, close, the Stream.

// Ordinary builds only: a `--cfg replay_ring_loom` build swaps in loom atomics and drops the
// blocking API; its checks are the models in `loom-tests/`.
#![cfg(not(replay_ring_loom))]

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[cfg(feature = "stream")]
use futures_util::StreamExt;
use replay_ring::{
    BuildError, CloseReason, PushError, ReadError, Reader, ReleaseError, ReplayRing, ResumeError,
    MAX_CAPACITY, MAX_READERS,
};

#[path = "support/asleep.rs"]
mod asleep;
use asleep::{this_task, wait_until_asleep};

/// A payload that counts its drops, to prove each value is dropped exactly once.
#[derive(Debug, Clone)]
struct Counted {
    id: u64,
    drops: Arc<AtomicUsize>,
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.drops.fetch_add(1, SeqCst);
    }
}

/// The ids of the batch `reader` lends now (which must not be empty).
fn next_batch_ids<T: Sync>(reader: &mut Reader<T>) -> Vec<u64> {
    let batch = reader.try_read().unwrap().expect("events are available");
    batch.iter().map(|(id, _)| id).collect()
}

#[test]
fn bad_configurations_are_errors_not_panics() {
    // `check` (which allocates nothing) and `build` agree on every configuration.
    let build = |capacity, readers, first| {
        let builder = ReplayRing::<u64>::builder()
            .capacity(capacity)
            .max_readers(readers)
            .first_id(first);
        let checked = builder.check();
        let built = builder.build().map(|_| ());
        assert_eq!(
            checked, built,
            "capacity {capacity}, readers {readers}, first id {first}"
        );
        built
    };
    assert_eq!(build(0, 1, 1), Err(BuildError::ZeroCapacity));
    assert_eq!(
        build(MAX_CAPACITY + 1, 1, 1),
        Err(BuildError::CapacityTooLarge {
            requested: MAX_CAPACITY + 1,
            max: MAX_CAPACITY
        })
    );
    assert!(matches!(
        build(usize::MAX, 1, 1),
        Err(BuildError::CapacityTooLarge { .. })
    ));
    assert_eq!(build(4, 0, 1), Err(BuildError::ZeroReaders));
    assert_eq!(
        build(4, MAX_READERS + 1, 1),
        Err(BuildError::TooManyReaders {
            requested: MAX_READERS + 1,
            max: MAX_READERS
        })
    );
    assert_eq!(build(4, 1, 0), Err(BuildError::InvalidFirstId(0)));
    assert_eq!(
        build(4, 1, u64::MAX),
        Err(BuildError::InvalidFirstId(u64::MAX))
    );
    assert_eq!(build(4, 1, u64::MAX - 1), Ok(()));
    // Errors explain themselves.
    assert_eq!(
        BuildError::ZeroCapacity.to_string(),
        "capacity must be at least 1"
    );
}

#[test]
#[cfg_attr(
    miri,
    ignore = "Miri aborts on an allocation it cannot serve instead of returning null"
)]
fn a_huge_payload_times_capacity_is_refused() {
    // The slot array's size overflows: refused before asking the allocator.
    // The maximum it names is the one for this payload: 2^23 - 1 slots of 2^40 bytes fit in
    // isize::MAX (2^63 - 1) bytes, so the largest power of two is 2^22.
    let err = ReplayRing::<[u8; 1 << 40]>::new(1 << 30, 1).unwrap_err();
    assert_eq!(
        err,
        BuildError::CapacityTooLarge {
            requested: 1 << 30,
            max: 1 << 22
        }
    );
    assert_eq!(
        err.to_string(),
        "capacity 1073741824 exceeds the maximum of 4194304"
    );
    // Even a capacity far below MAX_CAPACITY: 8 slots of 2^60 bytes, where 4 fit.
    assert_eq!(
        ReplayRing::<[u8; 1 << 60]>::new(8, 1).unwrap_err(),
        BuildError::CapacityTooLarge {
            requested: 8,
            max: 4
        }
    );
    assert_eq!(
        ReplayRing::<[u8; 1 << 60]>::builder().capacity(8).check(),
        Err(BuildError::CapacityTooLarge {
            requested: 8,
            max: 4
        })
    );
    // 1 PiB fits in an isize but not in this machine: the allocator's refusal is an error too.
    let err = ReplayRing::<[u8; 1 << 20]>::new(1 << 30, 1).unwrap_err();
    assert_eq!(err, BuildError::AllocationFailed);
}

#[test]
fn capacity_rounds_up_to_a_power_of_two() {
    for (asked, got) in [(1, 1), (2, 2), (3, 4), (1000, 1024), (1024, 1024)] {
        let (_p, ring) = ReplayRing::<u8>::new(asked, 1).unwrap();
        assert_eq!(ring.capacity(), got);
    }
}

/// A ring that starts at a later id never held the ids before it: a resume from below them is
/// `BelowFloor`, and its message says the ids are not retained rather than that they were released.
#[test]
fn a_resume_from_before_the_first_id_is_below_the_floor() {
    let (mut producer, ring) = ReplayRing::<u8>::builder()
        .capacity(4)
        .first_id(41)
        .build()
        .unwrap();
    assert_eq!(producer.try_push(1), Ok(41));
    assert_eq!(producer.try_push(2), Ok(42));
    let err = ring.resume(Some(10)).unwrap_err();
    assert_eq!(
        err,
        ResumeError::BelowFloor {
            requested: 10,
            floor: 41,
            head: 42
        }
    );
    assert_eq!(
        err.to_string(),
        "cannot resume after id 10: events 11..=40 are not retained (retained 41..=42)"
    );
    let mut reader = ring.resume(Some(40)).unwrap();
    let batch = reader.try_read().unwrap().unwrap();
    assert_eq!((batch.first_id(), batch.as_slices().0), (41, &[1u8, 2][..]));
}

#[test]
fn ids_stop_before_u64_max_and_never_wrap() {
    let (mut producer, ring) = ReplayRing::<u8>::builder()
        .capacity(8)
        .first_id(u64::MAX - 3)
        .build()
        .unwrap();
    assert_eq!(producer.try_push(1), Ok(u64::MAX - 3));
    assert_eq!(producer.try_push(2), Ok(u64::MAX - 2));
    assert_eq!(producer.try_push(3), Ok(u64::MAX - 1));
    let err = producer.try_push(4).unwrap_err();
    assert_eq!(err, PushError::IdsExhausted(4));
    assert_eq!(producer.next_id(), u64::MAX);
    assert_eq!(ring.head(), u64::MAX - 1);
    // Everything at the limit still works: release all, resume at the head, resume past it.
    assert_eq!(ring.release_through(u64::MAX - 1), Ok(u64::MAX));
    assert!(ring.resume(Some(u64::MAX - 1)).is_ok());
    assert_eq!(
        ring.resume(Some(u64::MAX)).unwrap_err(),
        ResumeError::AheadOfHead {
            requested: u64::MAX,
            head: u64::MAX - 1
        }
    );
    assert_eq!(
        ring.release_through(u64::MAX),
        Err(ReleaseError::AheadOfHead {
            requested: u64::MAX,
            head: u64::MAX - 1
        })
    );
}

#[test]
fn too_many_readers_is_an_error_and_slots_are_reused() {
    let (_p, ring) = ReplayRing::<u8>::new(4, 2).unwrap();
    let a = ring.reader().unwrap();
    let _b = ring.reader().unwrap();
    assert_eq!(ring.reader().unwrap_err().limit, 2);
    drop(a);
    assert!(ring.reader().is_ok());
    // A failed resume does not leak its slot either.
    assert!(ring.resume(Some(5)).is_err());
    assert!(ring.resume(Some(5)).is_err());
    assert_eq!(ring.metrics().readers_active, 1);
}

#[test]
fn a_full_reader_table_still_judges_the_cursor_first() {
    let (mut producer, ring) = ReplayRing::<u8>::new(4, 1).unwrap();
    for n in 1..=3 {
        producer.try_push(n).unwrap();
    }
    ring.release_through(1).unwrap();
    let _only = ring.reader().unwrap();

    // A cursor the stream never assigned is a state mismatch, whether or not there is room.
    assert_eq!(
        ring.resume(Some(9)).unwrap_err(),
        ResumeError::AheadOfHead {
            requested: 9,
            head: 3
        }
    );
    // So is a cursor below the floor.
    assert_eq!(
        ring.resume(Some(0)).unwrap_err(),
        ResumeError::BelowFloor {
            requested: 0,
            floor: 2,
            head: 3
        }
    );
    // Only a valid cursor (a replay or a no-op) meets the full table.
    for valid in [Some(1), Some(3), None] {
        match ring.resume(valid) {
            Err(ResumeError::TooManyReaders(full)) => assert_eq!(full.limit, 1),
            other => panic!("resume({valid:?}) with a full table: {other:?}"),
        }
    }
    let m = ring.metrics();
    assert_eq!((m.resumes_ahead_of_head, m.resumes_below_floor), (1, 1));
    assert_eq!((m.resumes_ok, m.resumes_noop, m.readers_active), (0, 0, 1));
}

#[test]
fn every_value_is_dropped_exactly_once() {
    let drops = Arc::new(AtomicUsize::new(0));
    let make = |id| Counted {
        id,
        drops: drops.clone(),
    };
    {
        let (mut producer, ring) = ReplayRing::<Counted>::new(4, 2).unwrap();
        let mut reader = ring.reader().unwrap();
        for round in 0..5u64 {
            for _ in 0..4 {
                producer.try_push_with(make).unwrap();
            }
            // A refused push hands the closure back uncalled: no value is built or dropped.
            assert!(producer.try_push_with(make).unwrap_err().is_full());
            let batch = reader.try_read().unwrap().unwrap();
            assert!(batch.iter().all(|(id, v)| v.id == id));
            drop(batch);
            ring.release_through(ring.head()).unwrap();
            // Released values stay in their slots until overwritten: 4 per earlier round.
            assert_eq!(drops.load(SeqCst), round as usize * 4);
        }
    }
    // 20 accepted values, each dropped once (overwritten or with the ring).
    assert_eq!(drops.load(SeqCst), 20);
}

#[test]
fn values_left_in_a_partially_filled_ring_are_dropped_with_it() {
    let drops = Arc::new(AtomicUsize::new(0));
    let (mut producer, ring) = ReplayRing::<Counted>::new(8, 1).unwrap();
    for id in 1..=3 {
        producer
            .try_push(Counted {
                id,
                drops: drops.clone(),
            })
            .unwrap();
    }
    drop(producer);
    assert_eq!(drops.load(SeqCst), 0);
    drop(ring);
    assert_eq!(drops.load(SeqCst), 3);
}

#[test]
fn a_full_window_refuses_until_released_and_refusals_consume_no_id() {
    let (mut producer, ring) = ReplayRing::<u32>::new(4, 1).unwrap();
    for v in 1..=4 {
        assert_eq!(producer.try_push(v), Ok(u64::from(v)));
    }
    // The floor alone rules these out (no reader pins anything).
    for _ in 0..3 {
        assert_eq!(producer.try_push(99).unwrap_err().into_inner(), 99);
    }
    assert_eq!(producer.next_id(), 5);
    ring.release_through(2).unwrap();
    // Exactly the two released slots come back, with the next ids.
    assert_eq!(producer.try_push(5), Ok(5));
    assert_eq!(producer.try_push(6), Ok(6));
    assert!(producer.try_push(7).unwrap_err().is_full());
    assert_eq!(ring.metrics().producer_full, 4);
    let mut reader = ring.resume(Some(2)).unwrap();
    assert_eq!(next_batch_ids(&mut reader), [3, 4, 5, 6]);
}

#[test]
fn a_lent_batch_backpressures_the_producer_even_after_release() {
    let (mut producer, ring) = ReplayRing::<u32>::new(2, 1).unwrap();
    let mut reader = ring.reader().unwrap();
    producer.try_push(1).unwrap();
    producer.try_push(2).unwrap();
    let batch = reader.try_read().unwrap().unwrap();
    ring.release_through(2).unwrap();
    // Released, but still lent: the slot of id 1 must not be overwritten.
    assert!(producer.try_push(3).unwrap_err().is_full());
    assert_eq!(batch.as_slices(), (&[1][..], &[2][..]));
    drop(batch);
    assert_eq!(producer.try_push(3), Ok(3));
    assert_eq!(ring.metrics().producer_full, 1);
}

#[test]
fn a_reader_that_falls_out_of_the_window_gets_a_gap_never_a_skip() {
    let (mut producer, ring) = ReplayRing::<u32>::new(4, 1).unwrap();
    let mut reader = ring.reader().unwrap();
    for n in 1..=3 {
        producer.try_push(n).unwrap();
    }
    ring.release_through(2).unwrap();
    let gap = ReadError::Gap {
        next: 1,
        floor: 3,
        head: 3,
    };
    assert_eq!(reader.try_read().unwrap_err(), gap);
    // It stays failed: later events never appear after the hole.
    producer.try_push(4).unwrap();
    assert!(matches!(
        reader.try_read(),
        Err(ReadError::Gap { next: 1, .. })
    ));
    assert_eq!(
        gap.to_string(),
        "reader fell out of the window: needed id 1, retained 3..=3"
    );
}

#[test]
fn resume_decisions_cover_every_case() {
    let (mut producer, ring) = ReplayRing::<u32>::new(8, 8).unwrap();
    // Empty stream: resuming at 0 is a no-op, anything else is ahead.
    assert!(ring.resume(Some(0)).is_ok());
    assert_eq!(
        ring.resume(Some(1)).unwrap_err(),
        ResumeError::AheadOfHead {
            requested: 1,
            head: 0
        }
    );
    for n in 1..=6 {
        producer.try_push(n * 100).unwrap();
    }
    ring.release_through(3).unwrap(); // floor 4
                                      // floor - 1 is the oldest valid cursor.
    let mut r = ring.resume(Some(3)).unwrap();
    assert_eq!(next_batch_ids(&mut r), [4, 5, 6]);
    assert_eq!(
        ring.resume(Some(2)).unwrap_err(),
        ResumeError::BelowFloor {
            requested: 2,
            floor: 4,
            head: 6
        }
    );
    let err = ring.resume(Some(2)).unwrap_err().to_string();
    assert_eq!(
        err,
        "cannot resume after id 2: events 3..=3 are not retained (retained 4..=6)"
    );
    let mut noop = ring.resume(Some(6)).unwrap();
    assert!(noop.try_read().unwrap().is_none());
    let m = ring.metrics();
    assert_eq!(
        (
            m.resumes_ok,
            m.resumes_noop,
            m.resumes_below_floor,
            m.resumes_ahead_of_head
        ),
        (1, 2, 2, 1)
    );
}

#[test]
fn close_lets_readers_drain_then_reports_the_reason() {
    let (mut producer, ring) = ReplayRing::<u32>::new(4, 1).unwrap();
    let mut reader = ring.reader().unwrap();
    producer.try_push(1).unwrap();
    producer.close(CloseReason::error("tool crashed"));
    assert!(ring.is_closed());
    assert_eq!(reader.try_recv().unwrap().unwrap().id, 1);
    let closed = ReadError::Closed(CloseReason::error("tool crashed"));
    assert_eq!(reader.try_recv(), Err(closed.clone()));
    assert_eq!(reader.try_recv(), Err(closed));
}

#[test]
fn dropping_the_producer_closes_the_stream() {
    let (producer, ring) = ReplayRing::<u32>::new(4, 1).unwrap();
    let mut reader = ring.reader().unwrap();
    drop(producer);
    assert_eq!(
        reader.try_read().unwrap_err(),
        ReadError::Closed(CloseReason::ProducerDropped)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_producer_waits_for_release_and_readers_wait_for_pushes() {
    const N: u64 = 2_000;
    let (mut producer, ring) = ReplayRing::<u64>::new(4, 2).unwrap();
    let mut reader = ring.reader().unwrap();
    let acker = ring.clone();
    let consumer = tokio::spawn(async move {
        let mut expected = 1;
        loop {
            match reader.read().await {
                Ok(batch) => {
                    for (id, v) in batch.iter() {
                        assert_eq!((id, *v), (expected, expected * 3));
                        expected += 1;
                    }
                    let last = batch.last_id();
                    drop(batch);
                    acker.release_through(last).unwrap();
                }
                Err(ReadError::Closed(reason)) => return (expected - 1, reason),
                Err(e) => panic!("{e}"),
            }
        }
    });
    for _ in 0..N {
        producer.push_with(|id| id * 3).await.unwrap();
    }
    producer.close(CloseReason::Completed);
    let (last, reason) = consumer.await.unwrap();
    assert_eq!((last, reason), (N, CloseReason::Completed));
    assert!(
        ring.metrics().producer_waits > 0,
        "a window of 4 must have made the producer wait"
    );
}

#[test]
fn blocking_waits_time_out_and_wake() {
    let (mut producer, ring) = ReplayRing::<u64>::new(2, 2).unwrap();
    let mut reader = ring.reader().unwrap();
    assert!(reader
        .read_timeout(Duration::from_millis(5))
        .unwrap()
        .is_none());
    producer.try_push(1).unwrap();
    producer.try_push(2).unwrap();
    assert!(!producer.ready_timeout(Duration::from_millis(5)));
    // A producer blocked on a full window is woken by the release. The release comes once this
    // thread has begun its second wait (`producer_waits` is counted before it parks) and then
    // sleeps in `push_timeout`, so it is the release that must wake it: a release before the park
    // would be found by the wait's own re-check and test nothing.
    let producer_task = this_task();
    let releaser = std::thread::spawn({
        let ring = ring.clone();
        move || {
            let deadline = Instant::now() + Duration::from_secs(30);
            while ring.metrics().producer_waits < 2 {
                assert!(Instant::now() < deadline, "the producer never waited");
                std::thread::yield_now();
            }
            if let Some(task) = producer_task {
                wait_until_asleep(&task);
            }
            ring.release_through(2).unwrap();
        }
    });
    // A wait that reaches its timeout returns `Full`: `Ok` within it means the release woke it.
    let wait = Duration::from_secs(30);
    let started = Instant::now();
    assert_eq!(producer.push_timeout(3, wait), Ok(3));
    assert!(started.elapsed() < wait, "not woken by the release");
    releaser.join().unwrap();
    // The first reader never read ids 1 and 2, which are now released: an explicit gap.
    assert!(matches!(
        reader.read_timeout(Duration::from_secs(30)),
        Err(ReadError::Gap {
            next: 1,
            floor: 3,
            ..
        })
    ));
    // A reader blocked on an empty window is woken by the next push. The push comes once this
    // thread sleeps in `read_timeout`, so it is the push that must wake it.
    let mut live = ring.resume(Some(3)).unwrap();
    let reader_task = this_task();
    let pusher = std::thread::spawn(move || {
        if let Some(task) = reader_task {
            wait_until_asleep(&task);
        }
        producer.push_timeout(4, Duration::from_secs(30)).unwrap();
        producer
    });
    // A wait that reaches its timeout looks once more, and would find the event: it must not.
    let wait = Duration::from_secs(30);
    let started = Instant::now();
    let batch = live.read_timeout(wait).unwrap().unwrap();
    assert!(started.elapsed() < wait, "not woken by the push");
    assert_eq!((batch.first_id(), batch.as_slices().0[0]), (4, 4));
    drop(batch);
    drop(pusher.join().unwrap());
}

#[cfg(feature = "stream")]
#[tokio::test]
async fn the_stream_yields_events_then_the_close_reason() {
    let (mut producer, ring) = ReplayRing::<&'static str>::new(8, 1).unwrap();
    let reader = ring.resume(Some(0)).unwrap();
    producer.try_push("a").unwrap();
    producer.try_push("b").unwrap();
    producer.close(CloseReason::Completed);
    let items: Vec<_> = reader.collect().await;
    assert_eq!(items.len(), 3);
    assert_eq!(items[0].as_ref().unwrap().data, "a");
    assert_eq!(items[1].as_ref().unwrap().id, 2);
    assert_eq!(items[2], Err(ReadError::Closed(CloseReason::Completed)));
}

#[cfg(feature = "stream")]
#[tokio::test]
async fn the_stream_is_terminated_once_it_has_yielded_its_end() {
    use futures_util::stream::FusedStream;
    let (mut producer, ring) = ReplayRing::<u8>::new(8, 1).unwrap();
    let mut reader = ring.resume(Some(0)).unwrap();
    producer.try_push(1).unwrap();
    producer.close(CloseReason::Completed);
    assert!(!reader.is_terminated());
    assert_eq!(reader.next().await.unwrap().unwrap().id, 1);
    assert!(!reader.is_terminated(), "the end is yet to be yielded");
    assert_eq!(
        reader.next().await,
        Some(Err(ReadError::Closed(CloseReason::Completed)))
    );
    assert!(reader.is_terminated());
    assert_eq!(reader.next().await, None);
}

#[test]
fn handles_are_send_and_sync_where_they_should_be() {
    fn send<T: Send>() {}
    fn sync<T: Sync>() {}
    send::<replay_ring::Producer<std::cell::Cell<u8>>>();
    send::<ReplayRing<std::cell::Cell<u8>>>();
    sync::<ReplayRing<std::cell::Cell<u8>>>();
    send::<replay_ring::Reader<u8>>();
}

#[test]
fn an_abandoned_wait_does_not_hide_the_next_one() {
    use std::future::Future;
    use std::task::{Context, Waker};
    let poll_ready_once = |producer: &mut replay_ring::Producer<u8>| {
        let mut ready = std::pin::pin!(producer.ready());
        ready
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
            .is_pending()
    };
    let (mut producer, ring) = ReplayRing::<u8>::new(1, 1).unwrap();
    producer.try_push(1).unwrap();
    assert!(poll_ready_once(&mut producer)); // parks, then the future is dropped
    ring.release_through(1).unwrap();
    producer.try_push(2).unwrap();
    assert!(poll_ready_once(&mut producer));
    assert_eq!(ring.metrics().producer_waits, 2, "each wait is counted");
}

#[test]
fn a_resumed_reader_lends_its_replay_even_if_it_is_released_before_the_first_read() {
    let (mut producer, ring) = ReplayRing::<u32>::new(4, 2).unwrap();
    for n in 1..=4 {
        producer.try_push(n).unwrap();
    }
    let mut resumed = ring.resume(Some(0)).unwrap();
    assert_eq!(ring.release_through(4), Ok(5));
    // The replay is pinned from the resume on: it holds the full window back...
    assert!(producer.try_push(5).unwrap_err().is_full());
    // ...and is lent whole by the first read, nothing skipped.
    assert_eq!(next_batch_ids(&mut resumed), vec![1, 2, 3, 4]);
    assert_eq!(producer.try_push(5), Ok(5));
    // A reader that holds no pin when its next event is released gets the gap.
    let mut idle = ring.resume(Some(4)).unwrap();
    assert_eq!(next_batch_ids(&mut idle), vec![5]);
    producer.try_push(6).unwrap();
    ring.release_through(6).unwrap();
    assert!(matches!(idle.try_read(), Err(ReadError::Gap { .. })));
}

/// The pin a resume sets lasts until the first read, and that read lends what it can: on a ring
/// whose slots grow in segments, the replay up to the first segment boundary; through `try_recv`,
/// one event. After it the reader pins only while it borrows, like any reader (so that one that
/// stops reading never holds the producer back): a release that overtook it is an explicit `Gap`
/// at its cursor, never a skip.
#[test]
fn a_resumed_replay_is_pinned_until_the_first_read_and_then_read_like_any_events() {
    let (mut producer, ring) = ReplayRing::<u64>::builder()
        .capacity(64)
        .initial_slots(2)
        .max_readers(2)
        .build()
        .unwrap();
    for n in 1..=40 {
        producer.try_push(n).unwrap();
    }
    let mut lazy = ring.resume(Some(0)).unwrap();
    let mut one_at_a_time = ring.resume(Some(0)).unwrap();
    assert_eq!(ring.release_through(40), Ok(41));
    // The first reads lend released events that the resumes pinned.
    let first = next_batch_ids(&mut lazy);
    assert_eq!(first[0], 1);
    assert!(
        first.len() < 40,
        "the first segment boundary ends it: {first:?}"
    );
    assert_eq!(one_at_a_time.try_recv().unwrap().map(|e| e.id), Some(1));
    // The rest was released: an explicit gap at each cursor.
    let next = first.len() as u64 + 1;
    assert!(matches!(lazy.try_read(), Err(ReadError::Gap { next: n, floor: 41, .. }) if n == next));
    assert!(matches!(
        one_at_a_time.try_recv(),
        Err(ReadError::Gap {
            next: 2,
            floor: 41,
            ..
        })
    ));
}
