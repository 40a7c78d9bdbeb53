//! `Reader::gating`: a reader that keeps its pin between polls, which gates the producer until the
//! guard is dropped (also when the thread unwinds past it).

// Ordinary builds only: a `--cfg replay_ring_loom` build swaps in loom atomics and drops the
// blocking API; its checks are the models in `loom-tests/`.
#![cfg(not(replay_ring_loom))]

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use replay_ring::{CloseReason, Gating, ReadError, ReplayRing};

#[path = "support/asleep.rs"]
mod asleep;
use asleep::{this_task, wait_until_asleep};

/// How long a threaded test may wait for the other side before it fails.
const DEADLINE: Duration = Duration::from_secs(60);

/// Every `(id, value)` the gate lends now, or `None` when it is caught up.
fn read_all(gate: &mut Gating<'_, u64>) -> Option<Vec<(u64, u64)>> {
    let batch = gate.try_read().unwrap()?;
    Some(batch.iter().map(|(id, v)| (id, *v)).collect())
}

#[test]
fn a_gate_lends_everything_in_order_across_wraparound_and_polls_empty_in_between() {
    let (mut producer, ring) = ReplayRing::<u64>::new(4, 1).unwrap();
    let mut reader = ring.reader().unwrap();
    let mut gate = reader.gating().unwrap();
    let mut seen = Vec::new();
    let mut next = 1;
    for round in 0..40u64 {
        assert_eq!(read_all(&mut gate), None, "nothing new in round {round}");
        for _ in 0..round % 4 + 1 {
            assert_eq!(producer.try_push(next * 10), Ok(next));
            next += 1;
        }
        seen.extend(read_all(&mut gate).expect("the round's events"));
        // The next poll moves the pin past the round; this release then frees every slot.
        assert_eq!(read_all(&mut gate), None);
        ring.release_through(next - 1).unwrap();
    }
    let expected: Vec<_> = (1..next).map(|id| (id, id * 10)).collect();
    assert_eq!(seen, expected);
    assert_eq!(gate.cursor(), next);
    drop(gate);
    assert_eq!(reader.cursor(), next);
}

#[test]
fn a_gate_that_stops_reading_holds_the_producer_until_it_is_dropped() {
    let (mut producer, ring) = ReplayRing::<u64>::new(2, 1).unwrap();
    let mut reader = ring.reader().unwrap();
    let gate = reader.gating().unwrap();
    producer.try_push(1).unwrap();
    producer.try_push(2).unwrap();
    // Released, but the gate's pin at 1 keeps the producer off id 1's slot, however long it waits.
    ring.release_through(2).unwrap();
    assert!(producer.try_push(3).unwrap_err().is_full());
    assert!(producer.try_push(3).unwrap_err().is_full());
    drop(gate);
    assert_eq!(producer.try_push(3), Ok(3));
    assert_eq!(producer.try_push(4), Ok(4));
    // The reader did not read 1 and 2: both were released, so it reports the gap.
    assert!(matches!(
        reader.try_read(),
        Err(ReadError::Gap {
            next: 1,
            floor: 3,
            head: 4
        })
    ));
}

#[test]
fn the_pin_moves_to_the_cursor_at_the_next_poll() {
    let (mut producer, ring) = ReplayRing::<u64>::new(2, 1).unwrap();
    let mut reader = ring.reader().unwrap();
    let mut gate = reader.gating().unwrap();
    producer.try_push(1).unwrap();
    assert_eq!(read_all(&mut gate), Some(vec![(1, 1)]));
    ring.release_through(1).unwrap();
    producer.try_push(2).unwrap();
    // The pin is still at 1 until the gate polls again.
    assert!(producer.try_push(3).unwrap_err().is_full());
    assert_eq!(read_all(&mut gate), Some(vec![(2, 2)]));
    // That poll moved the pin to 2: id 1's slot is free, id 2's (being read) is not.
    assert_eq!(producer.try_push(3), Ok(3));
    ring.release_through(2).unwrap();
    assert!(producer.try_push(4).unwrap_err().is_full());
    assert_eq!(read_all(&mut gate), Some(vec![(3, 3)]));
    assert_eq!(producer.try_push(4), Ok(4));
}

#[test]
fn a_partial_mark_read_lends_the_rest_again() {
    let (mut producer, ring) = ReplayRing::<u64>::new(8, 1).unwrap();
    let mut reader = ring.reader().unwrap();
    let mut gate = reader.gating().unwrap();
    for v in 1..=5 {
        producer.try_push(v).unwrap();
    }
    let mut batch = gate.try_read().unwrap().unwrap();
    assert_eq!(batch.len(), 5);
    batch.mark_read(2);
    drop(batch);
    assert_eq!(gate.cursor(), 3);
    assert_eq!(read_all(&mut gate), Some(vec![(3, 3), (4, 4), (5, 5)]));
    drop(ring);
}

#[test]
fn a_gate_on_a_released_cursor_reports_the_gap_and_never_skips() {
    let (mut producer, ring) = ReplayRing::<u64>::new(4, 1).unwrap();
    let mut reader = ring.reader().unwrap();
    producer.try_push(1).unwrap();
    producer.try_push(2).unwrap();
    ring.release_through(1).unwrap();
    let gap = ReadError::Gap {
        next: 1,
        floor: 2,
        head: 2,
    };
    assert_eq!(reader.gating().unwrap_err(), gap);
    // The reader is finished: later reads, and later gates, report the same gap.
    assert_eq!(reader.gating().unwrap_err(), gap);
    assert_eq!(reader.try_read().unwrap_err(), gap);
    // ... and the failed gates left no pin behind.
    ring.release_through(2).unwrap();
    for id in 3..=6 {
        assert_eq!(producer.try_push(id), Ok(id));
    }
}

#[test]
fn a_gate_on_a_resumed_reader_lends_the_replay_first() {
    let (mut producer, ring) = ReplayRing::<u64>::new(4, 2).unwrap();
    for v in 1..=3 {
        producer.try_push(v).unwrap();
    }
    let mut reader = ring.resume(Some(1)).unwrap();
    let mut gate = reader.gating().unwrap();
    assert_eq!(read_all(&mut gate), Some(vec![(2, 2), (3, 3)]));
    assert_eq!(read_all(&mut gate), None);
}

#[test]
fn a_gate_reads_what_is_left_then_reports_closed_again_and_again() {
    let (mut producer, ring) = ReplayRing::<u64>::new(4, 1).unwrap();
    let mut reader = ring.reader().unwrap();
    let mut gate = reader.gating().unwrap();
    producer.try_push(1).unwrap();
    producer.try_push(2).unwrap();
    producer.close(CloseReason::Completed);
    assert_eq!(read_all(&mut gate), Some(vec![(1, 1), (2, 2)]));
    let closed = ReadError::Closed(CloseReason::Completed);
    assert_eq!(gate.try_read().unwrap_err(), closed);
    assert_eq!(gate.try_read().unwrap_err(), closed);
    drop(gate);
    assert_eq!(reader.try_read().unwrap_err(), closed);
    assert_eq!(reader.gating().unwrap_err(), closed);
    drop(ring);
}

#[test]
fn a_panic_while_a_batch_is_lent_consumes_nothing_and_clears_the_pin() {
    let (mut producer, ring) = ReplayRing::<u64>::new(2, 1).unwrap();
    let mut reader = ring.reader().unwrap();
    producer.try_push(1).unwrap();
    producer.try_push(2).unwrap();
    let result = catch_unwind(AssertUnwindSafe(|| {
        let mut gate = reader.gating().unwrap();
        let _batch = gate.try_read().unwrap().unwrap();
        panic!("handler failed");
    }));
    assert!(result.is_err());
    assert_eq!(
        reader.cursor(),
        1,
        "a batch dropped by a panic is not consumed"
    );
    ring.release_through(2).unwrap();
    // No pin survived the unwinding: the producer may reuse both slots.
    assert_eq!(producer.try_push(3), Ok(3));
    assert_eq!(producer.try_push(4), Ok(4));
}

/// A gating reader against a producer on another thread and a releaser that releases everything
/// as soon as it is published: the gate alone protects what it has yet to read, so every value is
/// its own id (a reused slot would hold `id + capacity`), in order, and no gap ever appears.
#[test]
fn a_gate_against_a_concurrent_producer_and_releaser_reads_every_event_intact() {
    const EVENTS: u64 = if cfg!(miri) { 200 } else { 300_000 };
    let (mut producer, ring) = ReplayRing::<u64>::new(8, 1).unwrap();
    let mut reader = ring.reader().unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let releaser = {
        let (ring, done) = (ring.clone(), done.clone());
        thread::spawn(move || {
            while !done.load(SeqCst) {
                ring.release_through(ring.head()).unwrap();
                thread::yield_now();
            }
        })
    };
    // The producer starts once the gate holds the pin: before it, the releaser could free id 1.
    let gate_set = Arc::new(Barrier::new(2));
    let reader_thread = thread::spawn({
        let gate_set = gate_set.clone();
        move || {
            let deadline = Instant::now() + DEADLINE;
            let mut gate = reader.gating().unwrap();
            gate_set.wait();
            let mut next = 1;
            loop {
                assert!(Instant::now() < deadline, "timed out at id {next}");
                match gate.try_read() {
                    Ok(Some(batch)) => {
                        for (id, value) in batch.iter() {
                            assert_eq!((id, *value), (next, next), "skip, repeat or torn read");
                            next += 1;
                        }
                    }
                    Ok(None) => thread::yield_now(),
                    Err(ReadError::Closed(CloseReason::Completed)) => return next - 1,
                    Err(other) => panic!("unexpected {other}"),
                }
            }
        }
    });
    gate_set.wait();
    for id in 1..=EVENTS {
        assert_eq!(producer.push_timeout(id, DEADLINE), Ok(id), "stuck at {id}");
    }
    producer.close(CloseReason::Completed);
    assert_eq!(reader_thread.join().unwrap(), EVENTS);
    done.store(true, SeqCst);
    releaser.join().unwrap();
}

#[test]
fn a_leaked_gate_holds_the_producer_only_until_the_reader_reads_again() {
    let (mut producer, ring) = ReplayRing::<u64>::new(2, 1).unwrap();
    let mut reader = ring.reader().unwrap();
    producer.try_push(1).unwrap();
    let mut gate = reader.gating().unwrap();
    assert_eq!(read_all(&mut gate), Some(vec![(1, 1)]));
    std::mem::forget(gate);
    producer.try_push(2).unwrap();
    ring.release_through(1).unwrap();
    // The leaked pin (at 1: the gate never polled again) still holds id 1's slot.
    assert!(producer.try_push(3).unwrap_err().is_full());
    // A read pins afresh and unpins when its batch is dropped, as without the leak.
    let batch = reader.try_read().unwrap().unwrap();
    assert_eq!(batch.first_id(), 2);
    drop(batch);
    assert_eq!(producer.try_push(3), Ok(3));
    ring.release_through(2).unwrap();
    assert_eq!(producer.try_push(4), Ok(4));
}

#[test]
fn a_leaked_gate_is_cleared_by_a_read_that_finds_nothing_and_wakes_a_waiting_producer() {
    let (mut producer, ring) = ReplayRing::<u64>::new(2, 1).unwrap();
    let mut reader = ring.reader().unwrap();
    producer.try_push(1).unwrap();
    producer.try_push(2).unwrap();
    let mut gate = reader.gating().unwrap();
    assert_eq!(read_all(&mut gate), Some(vec![(1, 1), (2, 2)]));
    // Leaked before its next poll: the pin stays at 1 although the reader has read everything.
    std::mem::forget(gate);
    ring.release_through(2).unwrap();
    assert!(producer.try_push(3).unwrap_err().is_full());
    // The producer waits for space; the reader's next read, which has nothing to lend, clears
    // the leaked pin and wakes it (or, if the woken push lands before the read looks at the
    // head, lends it). The read comes once the producer waits, and where the system shows it,
    // once its thread sleeps: then it is the read that must wake it.
    assert_eq!(ring.metrics().producer_waits, 0);
    let (task_tx, task_rx) = mpsc::channel();
    let pusher = thread::spawn(move || {
        task_tx.send(this_task()).unwrap();
        let started = Instant::now();
        (producer.push_timeout(3, DEADLINE), started.elapsed())
    });
    let deadline = Instant::now() + DEADLINE;
    while ring.metrics().producer_waits < 1 {
        assert!(Instant::now() < deadline, "the producer never waited");
        thread::yield_now();
    }
    if let Some(task) = task_rx.recv().unwrap() {
        wait_until_asleep(&task);
    }
    if let Some(batch) = reader.try_read().unwrap() {
        assert_eq!((batch.first_id(), batch.last_id()), (3, 3));
    }
    let (pushed, waited) = pusher.join().unwrap();
    assert_eq!(pushed, Ok(3));
    // A wait that reaches its timeout looks once more, and would find the room: it must not.
    assert!(waited < DEADLINE, "the producer was not woken");
}
