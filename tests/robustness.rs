//! Misuse and failure in user code must not cost the stream anything: a leaked batch, a panicking
//! `Clone` or `Drop`, a batch at the very end of the id space, an unbounded timeout.

// Ordinary builds only: a `--cfg replay_ring_loom` build swaps in loom atomics and drops the
// blocking API; its checks are the models in `loom-tests/`.
#![cfg(not(replay_ring_loom))]

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use replay_ring::ReplayRing;

#[path = "support/asleep.rs"]
mod asleep;
use asleep::{this_task, wait_until_asleep};

#[test]
fn dropping_a_reader_clears_the_pin_of_a_leaked_batch() {
    let (mut producer, ring) = ReplayRing::<u8>::new(2, 1).unwrap();
    let mut reader = ring.reader().unwrap();
    producer.try_push(1).unwrap();
    producer.try_push(2).unwrap();
    std::mem::forget(reader.try_read().unwrap().unwrap());
    drop(reader);

    ring.release_through(2).unwrap();
    // Nobody borrows ids 1..=2 any more: their slots must be reusable.
    assert_eq!(producer.try_push(3), Ok(3));
    assert_eq!(producer.try_push(4), Ok(4));
    // And the freed table entry serves a new reader normally.
    let mut next = ring.resume(Some(2)).unwrap();
    assert_eq!(next.try_recv().unwrap().unwrap().id, 3);
}

#[test]
fn a_batch_ending_at_the_last_id_iterates_without_overflow() {
    let first_id = u64::MAX - 3;
    let (mut producer, ring) = ReplayRing::<u64>::builder()
        .capacity(4)
        .first_id(first_id)
        .build()
        .unwrap();
    while let Ok(id) = producer.try_push_with(|id| id) {
        assert!(id < u64::MAX);
    }
    assert_eq!(ring.head(), u64::MAX - 1);

    let mut reader = ring.resume(Some(first_id - 1)).unwrap();
    let batch = reader.try_read().unwrap().unwrap();
    assert_eq!(batch.last_id(), u64::MAX - 1);
    // A plain loop: it asks the iterator for one more item than there are events.
    let mut pairs = Vec::new();
    for (id, v) in batch.iter() {
        pairs.push((id, *v));
    }
    assert_eq!(
        pairs,
        [
            (u64::MAX - 3, u64::MAX - 3),
            (u64::MAX - 2, u64::MAX - 2),
            (u64::MAX - 1, u64::MAX - 1)
        ]
    );
}

#[test]
fn duration_max_means_wait_without_a_deadline() {
    let (mut producer, ring) = ReplayRing::<u8>::new(4, 1).unwrap();
    let mut reader = ring.reader().unwrap();

    // Ready immediately: an unbounded timeout must not overflow the deadline computation.
    assert!(producer.ready_timeout(Duration::MAX));
    assert_eq!(producer.push_timeout(1, Duration::MAX), Ok(1));
    assert_eq!(
        reader
            .read_timeout(Duration::MAX)
            .unwrap()
            .unwrap()
            .first_id(),
        1
    );

    // Not ready yet: the wait ends when the event arrives, however long that takes. The reader
    // waits on its own thread and the push comes once that thread sleeps in `recv_timeout`, so it
    // is the push that must wake it (a push before the park would be found without waiting);
    // this thread gives it 30 s to say so.
    let (task_tx, task_rx) = mpsc::channel();
    let (got_tx, got_rx) = mpsc::channel();
    let waiter = std::thread::spawn(move || {
        task_tx.send(this_task()).unwrap();
        let id = reader.recv_timeout(Duration::MAX).unwrap().unwrap().id;
        got_tx.send(id).unwrap();
        reader
    });
    if let Some(task) = task_rx.recv().unwrap() {
        wait_until_asleep(&task);
    }
    producer.try_push(2).unwrap();
    assert_eq!(
        got_rx.recv_timeout(Duration::from_secs(30)),
        Ok(2),
        "the reader was not woken by the push"
    );
    let reader = waiter.join().unwrap();

    // The producer side too: wait for space with no deadline until the reader's side releases
    // it, the release coming once the producer's thread sleeps in `push_timeout`.
    producer.try_push(3).unwrap();
    producer.try_push(4).unwrap();
    assert!(producer.try_push(5).unwrap_err().is_full());
    let (task_tx, task_rx) = mpsc::channel();
    let (got_tx, got_rx) = mpsc::channel();
    let waiter = std::thread::spawn(move || {
        task_tx.send(this_task()).unwrap();
        got_tx
            .send(producer.push_timeout(5, Duration::MAX))
            .unwrap();
    });
    if let Some(task) = task_rx.recv().unwrap() {
        wait_until_asleep(&task);
    }
    ring.release_through(1).unwrap();
    assert_eq!(
        got_rx.recv_timeout(Duration::from_secs(30)),
        Ok(Ok(5)),
        "the producer was not woken by the release"
    );
    waiter.join().unwrap();
    drop(reader);
}

/// A payload whose `clone` panics while `fail` is set.
#[derive(Debug)]
struct FragileClone {
    id: u64,
    fail: Arc<AtomicBool>,
}

impl Clone for FragileClone {
    fn clone(&self) -> Self {
        if self.fail.swap(false, SeqCst) {
            panic!("clone of event {} failed", self.id);
        }
        FragileClone {
            id: self.id,
            fail: self.fail.clone(),
        }
    }
}

fn fragile_ring(
    events: u64,
) -> (
    replay_ring::Producer<FragileClone>,
    replay_ring::Reader<FragileClone>,
    Arc<AtomicBool>,
) {
    let fail = Arc::new(AtomicBool::new(false));
    let (mut producer, ring) = ReplayRing::<FragileClone>::new(8, 1).unwrap();
    let reader = ring.reader().unwrap();
    for _ in 0..events {
        producer
            .try_push_with(|id| FragileClone {
                id,
                fail: fail.clone(),
            })
            .unwrap();
    }
    (producer, reader, fail)
}

#[test]
fn a_panicking_clone_in_try_recv_skips_nothing() {
    let (_producer, mut reader, fail) = fragile_ring(2);
    fail.store(true, SeqCst);
    let caught = catch_unwind(AssertUnwindSafe(|| reader.try_recv()));
    assert!(caught.is_err(), "the clone was meant to panic");
    assert_eq!(reader.cursor(), 1);
    assert_eq!(reader.try_recv().unwrap().unwrap().id, 1);
    assert_eq!(reader.try_recv().unwrap().unwrap().id, 2);
}

#[test]
fn a_panicking_clone_in_recv_timeout_skips_nothing() {
    let (_producer, mut reader, fail) = fragile_ring(1);
    fail.store(true, SeqCst);
    let caught = catch_unwind(AssertUnwindSafe(|| {
        reader.recv_timeout(Duration::from_secs(10))
    }));
    assert!(caught.is_err(), "the clone was meant to panic");
    let event = reader.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(event.map(|e| e.id), Some(1));
}

#[test]
fn a_panic_while_handling_a_batch_consumes_only_what_was_marked_read() {
    let (mut producer, ring) = ReplayRing::<u64>::new(8, 1).unwrap();
    let mut reader = ring.reader().unwrap();
    for _ in 0..4 {
        producer.try_push_with(|id| id).unwrap();
    }

    // Nothing marked: a handler that panics halfway consumes nothing.
    let caught = catch_unwind(AssertUnwindSafe(|| {
        let batch = reader.try_read().unwrap().unwrap();
        for (id, _) in batch.iter() {
            assert!(id < 2, "handler failed at {id}");
        }
    }));
    assert!(caught.is_err());
    assert_eq!(reader.cursor(), 1);

    // Progress marked as it goes: exactly the marked prefix is consumed.
    let caught = catch_unwind(AssertUnwindSafe(|| {
        let mut batch = reader.try_read().unwrap().unwrap();
        assert_eq!(batch.first_id(), 1);
        let ids: Vec<u64> = batch.iter().map(|(id, _)| id).collect();
        for (done, id) in ids.into_iter().enumerate() {
            assert!(id < 3, "handler failed at {id}");
            batch.mark_read(done + 1);
        }
    }));
    assert!(caught.is_err());
    assert_eq!(reader.cursor(), 3);

    // A normal drop still consumes the whole batch.
    let batch = reader.try_read().unwrap().unwrap();
    assert_eq!((batch.first_id(), batch.last_id()), (3, 4));
    drop(batch);
    assert_eq!(reader.cursor(), 5);
}

/// Counts its drops; the one with `panic` set panics in `drop` (unless already unwinding).
struct PanicOnDrop {
    drops: Arc<AtomicUsize>,
    panic: bool,
}

impl Drop for PanicOnDrop {
    fn drop(&mut self) {
        self.drops.fetch_add(1, SeqCst);
        if self.panic && !std::thread::panicking() {
            panic!("drop failed");
        }
    }
}

#[test]
fn a_panicking_drop_while_the_ring_drops_still_drops_every_other_value() {
    // Capacity 4 holding ids 3..=6, wrapped (slots 3, 0, 1, 2), so both halves are exercised; the
    // first one dropped panics.
    let drops = Arc::new(AtomicUsize::new(0));
    let (mut producer, ring) = ReplayRing::<PanicOnDrop>::new(4, 1).unwrap();
    for id in 1..=6u64 {
        if id > 4 {
            ring.release_through(id - 4).unwrap();
        }
        let value = PanicOnDrop {
            drops: drops.clone(),
            panic: id == 3,
        };
        assert_eq!(producer.try_push(value).ok(), Some(id));
    }
    assert_eq!(drops.load(SeqCst), 2, "ids 1 and 2 were replaced");
    drop(producer);

    let caught = catch_unwind(AssertUnwindSafe(move || drop(ring)));
    assert!(caught.is_err(), "the drop of id 3 was meant to panic");
    assert_eq!(drops.load(SeqCst), 6, "every value dropped exactly once");
}

#[test]
fn a_panicking_drop_in_the_middle_still_drops_the_rest() {
    let drops = Arc::new(AtomicUsize::new(0));
    let (mut producer, ring) = ReplayRing::<PanicOnDrop>::new(4, 1).unwrap();
    for id in 1..=4u64 {
        let value = PanicOnDrop {
            drops: drops.clone(),
            panic: id == 2,
        };
        producer.try_push(value).ok().unwrap();
    }
    drop(producer);
    let caught = catch_unwind(AssertUnwindSafe(move || drop(ring)));
    assert!(caught.is_err(), "the drop of id 2 was meant to panic");
    assert_eq!(drops.load(SeqCst), 4, "every value dropped exactly once");
}

/// A `try_push_with` closure that panics consumes no id: the panic reaches the caller, the next
/// push is handed the same id, and readers see the ids gap-free, each with the value the closure
/// that returned made for it.
#[test]
fn a_panicking_make_consumes_no_id() {
    let (mut producer, ring) = ReplayRing::<String>::new(4, 1).unwrap();
    let mut reader = ring.resume(Some(0)).unwrap();
    let mut offered = Vec::new();
    let panicked = catch_unwind(AssertUnwindSafe(|| {
        // The error would hand the closure back; this one never returns.
        let _ = producer.try_push_with(|id| -> String {
            offered.push(id);
            panic!("make failed for id {id}")
        });
    }));
    assert!(panicked.is_err());
    assert_eq!(ring.head(), 0, "nothing was published");
    let id = producer
        .try_push_with(|id| {
            offered.push(id);
            format!("event {id}")
        })
        .unwrap();
    assert_eq!((id, offered), (1, vec![1, 1]));
    assert_eq!(producer.try_push("event 2".into()), Ok(2));
    let got: Vec<_> = std::iter::from_fn(|| reader.try_recv().unwrap())
        .map(|e| (e.id, e.data))
        .collect();
    assert_eq!(got, vec![(1, "event 1".into()), (2, "event 2".into())]);
}
