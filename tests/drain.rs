//! `Reader::drain`: consecutive batches under one pin that advances with the cursor, released when
//! the drain returns (also when the closure panics).

// Ordinary builds only: a `--cfg replay_ring_loom` build swaps in loom atomics and drops the
// blocking API; its checks are the models in `loom-tests/`.
#![cfg(not(replay_ring_loom))]

use std::ops::ControlFlow::{self, Break, Continue};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use replay_ring::{CloseReason, ReadError, Reader, ReplayRing};

/// How long a threaded test may wait for the other side before it fails.
const DEADLINE: Duration = Duration::from_secs(60);

/// Polls `done()` holds, failing the test after [`DEADLINE`].
fn poll_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::yield_now();
    }
}

/// Drains `reader` into `seen` as `(id, value)` pairs, returning the drain's result.
fn drain_into(reader: &mut Reader<u64>, seen: &mut Vec<(u64, u64)>) -> Result<u64, ReadError> {
    reader.drain(|batch| {
        seen.extend(batch.iter().map(|(id, v)| (id, *v)));
        Continue(())
    })
}

#[test]
fn drain_lends_everything_in_order_across_wraparound() {
    let (mut producer, ring) = ReplayRing::<u64>::new(4, 1).unwrap();
    let mut reader = ring.reader().unwrap();
    let mut seen = Vec::new();
    let mut next = 1;
    let mut wrapped = 0;
    // Rounds of 1 to 4 events wrap the 4-slot array many times, so batches start at every slot
    // and some are lent as two slices.
    for round in 0..40u64 {
        let n = round % 4 + 1;
        for _ in 0..n {
            assert_eq!(producer.try_push(next * 10), Ok(next));
            next += 1;
        }
        let read = reader
            .drain(|batch| {
                wrapped += usize::from(!batch.as_slices().1.is_empty());
                seen.extend(batch.iter().map(|(id, v)| (id, *v)));
                Continue(())
            })
            .unwrap();
        assert_eq!(
            read, n,
            "round {round}: one drain reads everything available"
        );
        ring.release_through(ring.head()).unwrap();
    }
    let expected: Vec<_> = (1..next).map(|id| (id, id * 10)).collect();
    assert_eq!(seen, expected);
    assert!(wrapped > 0, "no batch was lent as two slices");
    assert_eq!(reader.cursor(), next);
    // Caught up: nothing to lend, `f` is not called.
    assert_eq!(reader.drain(|_| panic!("nothing to lend")), Ok(0));
}

#[test]
fn drain_lends_a_replay_and_events_pushed_while_it_runs_as_later_batches() {
    let (mut producer, ring) = ReplayRing::<u64>::new(8, 1).unwrap();
    for id in 1..=3 {
        producer.try_push(id).unwrap();
    }
    let mut reader = ring.resume(Some(1)).unwrap();
    let mut batches = Vec::new();
    let read = reader.drain(|batch| {
        batches.push((batch.first_id(), batch.last_id()));
        assert!(batch.iter().all(|(id, v)| *v == id));
        if batches.len() < 3 {
            producer.try_push(producer.next_id()).unwrap();
        }
        Continue(())
    });
    assert_eq!(read, Ok(4));
    assert_eq!(batches, [(2, 3), (4, 4), (5, 5)]);
}

#[test]
fn drain_reports_a_gap_when_its_first_batch_was_released() {
    let (mut producer, ring) = ReplayRing::<u64>::new(4, 1).unwrap();
    let mut reader = ring.reader().unwrap();
    for id in 1..=3 {
        producer.try_push(id).unwrap();
    }
    ring.release_through(2).unwrap();
    let gap = ReadError::Gap {
        next: 1,
        floor: 3,
        head: 3,
    };
    assert_eq!(
        reader.drain(|_| panic!("a released event was lent")),
        Err(gap.clone())
    );
    // The reader is finished, and held no pin: every slot can be reused.
    assert_eq!(
        reader.drain(|_| panic!("a released event was lent")),
        Err(gap)
    );
    ring.release_through(3).unwrap();
    for id in 4..=7 {
        assert_eq!(producer.try_push(id), Ok(id));
    }
}

#[test]
fn the_pin_holds_between_batches_and_is_gone_when_the_drain_returns() {
    let (mut producer, ring) = ReplayRing::<u64>::new(2, 1).unwrap();
    let mut reader = ring.reader().unwrap();
    producer.try_push(1).unwrap();
    producer.try_push(2).unwrap();
    let mut refused = 0;
    let read = reader.drain(|batch| {
        assert_eq!((batch.first_id(), batch.last_id()), (1, 2));
        // Released, but the drain's pin at 1 keeps the producer off the slot of id 1.
        ring.release_through(2).unwrap();
        if producer.try_push(3).unwrap_err().is_full() {
            refused += 1;
        }
        Continue(())
    });
    assert_eq!((read, refused), (Ok(2), 1));
    // Caught up, so the drain unpinned on return: both slots are free.
    assert_eq!(producer.try_push(3), Ok(3));
    assert_eq!(producer.try_push(4), Ok(4));
}

#[test]
fn the_pin_advances_to_each_new_batch() {
    let (mut producer, ring) = ReplayRing::<u64>::new(2, 1).unwrap();
    let mut reader = ring.reader().unwrap();
    producer.try_push(1).unwrap();
    let mut pushes = Vec::new();
    let read = reader.drain(|batch| {
        ring.release_through(batch.last_id()).unwrap();
        match batch.first_id() {
            1 => {
                // A fresh slot, then the slot of id 1: released, but pinned by this batch.
                pushes.push(producer.try_push(2).is_ok());
                pushes.push(producer.try_push(3).is_ok());
            }
            2 => {
                // The drain moved its pin to 2 before lending this batch: id 1's slot is free.
                pushes.push(producer.try_push(3).is_ok());
                // ... but not id 2's, which this batch is reading.
                pushes.push(producer.try_push(4).is_ok());
            }
            3 => {}
            other => panic!("unexpected batch at {other}"),
        }
        Continue(())
    });
    assert_eq!(pushes, [true, false, true, false]);
    assert_eq!(read, Ok(3));
    assert_eq!(producer.try_push(4), Ok(4));
}

#[test]
fn break_and_a_partial_mark_read_stop_the_drain() {
    let (mut producer, ring) = ReplayRing::<u64>::new(8, 1).unwrap();
    let mut reader = ring.reader().unwrap();
    for id in 1..=3 {
        producer.try_push(id).unwrap();
    }
    // `Break` after a whole batch: the batch counts as read, no further batch is lent.
    let mut calls = 0;
    let read = reader.drain(|_| {
        calls += 1;
        producer.try_push(producer.next_id()).unwrap();
        Break(())
    });
    assert_eq!((read, calls, reader.cursor()), (Ok(3), 1, 4));
    // A short write: only the first event is consumed, and the drain stops even though more
    // events are available; the next drain starts with the unconsumed one.
    let read = reader.drain(|batch| {
        assert_eq!(batch.first_id(), 4);
        producer.try_push(producer.next_id()).unwrap();
        batch.mark_read(0);
        Continue(())
    });
    assert_eq!((read, reader.cursor()), (Ok(0), 4));
    let mut seen = Vec::new();
    assert_eq!(drain_into(&mut reader, &mut seen), Ok(2));
    assert_eq!(seen, [(4, 4), (5, 5)]);
}

#[test]
fn a_panic_inside_the_drain_releases_the_pin_and_consumes_only_finished_batches() {
    let (mut producer, ring) = ReplayRing::<u64>::new(2, 1).unwrap();
    let mut reader = ring.reader().unwrap();
    producer.try_push(1).unwrap();
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        reader.drain(|batch| {
            if batch.first_id() == 1 {
                // Finished: consumed. The next batch (id 2) starts under an advanced pin.
                producer.try_push(2).unwrap();
                return Continue(());
            }
            panic!("the handler fails on id {}", batch.first_id());
        })
    }));
    assert!(outcome.is_err());
    // Id 2 was lent but not finished: the reader gets it again.
    assert_eq!(reader.cursor(), 2);
    // And no pin survived the panic: once released, both slots can be reused.
    ring.release_through(2).unwrap();
    assert_eq!(producer.try_push(3), Ok(3));
    assert_eq!(producer.try_push(4), Ok(4));
}

#[test]
fn a_drain_returns_what_is_left_then_closed() {
    let (mut producer, ring) = ReplayRing::<u64>::new(4, 1).unwrap();
    let mut reader = ring.reader().unwrap();
    producer.try_push(1).unwrap();
    producer.try_push(2).unwrap();
    producer.close(CloseReason::Completed);
    let mut seen = Vec::new();
    assert_eq!(drain_into(&mut reader, &mut seen), Ok(2));
    assert_eq!(seen, [(1, 1), (2, 2)]);
    let closed = Err(ReadError::Closed(CloseReason::Completed));
    assert_eq!(drain_into(&mut reader, &mut seen), closed);
    assert_eq!(drain_into(&mut reader, &mut seen), closed);
}

/// The reader never lets go between batches unless it catches up, and each batch waits, inside
/// the drain, until the producer has filled every slot the advanced pin allows. Without the
/// advance the producer would be stuck behind the drain's first pin and this would time out.
#[test]
fn a_long_drain_lets_a_concurrent_producer_reuse_slots_behind_it() {
    const EVENTS: u64 = if cfg!(miri) { 60 } else { 20_000 };
    const CAPACITY: u64 = 4;
    let (mut producer, ring) = ReplayRing::<u64>::new(CAPACITY as usize, 1).unwrap();
    let mut reader = ring.reader().unwrap();
    let producer_thread = thread::spawn(move || {
        for id in 1..=EVENTS {
            assert_eq!(producer.push_timeout(id, DEADLINE), Ok(id), "stuck at {id}");
        }
    });
    let mut next = 1;
    let mut batches = 0u64;
    let mut drains = 0u64;
    let deadline = Instant::now() + DEADLINE;
    while next <= EVENTS {
        assert!(Instant::now() < deadline, "timed out at id {next}");
        let read = reader
            .drain(|batch| {
                for (id, value) in batch.iter() {
                    assert_eq!((id, *value), (next, next), "skip, repeat or torn read");
                    next += 1;
                }
                batches += 1;
                ring.release_through(batch.last_id()).unwrap();
                // With the pin at `first_id`, the producer may fill up to `first_id + CAPACITY - 1`.
                let room = (batch.first_id() + CAPACITY - 1).min(EVENTS);
                poll_until("the producer to fill the slots behind the pin", || {
                    ring.head() >= room
                });
                Continue(())
            })
            .unwrap();
        drains += u64::from(read > 0);
    }
    producer_thread.join().unwrap();
    assert_eq!(next, EVENTS + 1);
    eprintln!("{EVENTS} events in {batches} batches, {drains} drains");
}

/// Readers that drain and resume while a releaser releases ahead of them: every value read is its
/// own id (a slot reused under a drain would hold `id + capacity`), in order, or the reader gets
/// an explicit gap and resumes from the floor.
#[test]
fn drains_against_a_concurrent_producer_and_releaser_read_only_intact_values() {
    const EVENTS: u64 = if cfg!(miri) { 200 } else { 300_000 };
    const READERS: usize = 2;
    let (mut producer, ring) = ReplayRing::<u64>::builder()
        .capacity(8)
        .max_readers(READERS)
        .build()
        .unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..READERS)
        .map(|_| {
            let ring = ring.clone();
            let mut reader = ring.resume(Some(0)).unwrap();
            thread::spawn(move || {
                let deadline = Instant::now() + DEADLINE;
                let (mut events, mut gaps) = (0u64, 0u64);
                loop {
                    assert!(Instant::now() < deadline, "reader timed out");
                    let mut next = reader.cursor();
                    let result = reader.drain(|batch| {
                        assert_eq!(batch.first_id(), next, "a drain continues at the cursor");
                        for (id, value) in batch.iter() {
                            assert_eq!(*value, id, "the slot of id {id} was overwritten");
                        }
                        next = batch.last_id() + 1;
                        ControlFlow::Continue(())
                    });
                    match result {
                        Ok(0) => thread::yield_now(),
                        Ok(n) => events += n,
                        Err(ReadError::Closed(_)) => return (events, gaps),
                        Err(ReadError::Gap { next, floor, head }) => {
                            assert!(next < floor && floor <= head + 1);
                            gaps += 1;
                            drop(reader);
                            reader = resume_at_floor(&ring, floor);
                        }
                        Err(other) => panic!("unexpected {other}"),
                    }
                }
            })
        })
        .collect();
    let releaser = {
        let (ring, done) = (ring.clone(), done.clone());
        thread::spawn(move || {
            let mut releases = 0u64;
            while !done.load(SeqCst) {
                // Release everything: drains must hold the slots they read, nothing else does.
                ring.release_through(ring.head()).unwrap();
                releases += 1;
                thread::yield_now();
            }
            releases
        })
    };
    for id in 1..=EVENTS {
        assert_eq!(producer.push_timeout(id, DEADLINE), Ok(id), "stuck at {id}");
    }
    producer.close(CloseReason::Completed);
    let reports: Vec<_> = readers.into_iter().map(|r| r.join().unwrap()).collect();
    done.store(true, SeqCst);
    let releases = releaser.join().unwrap();
    eprintln!("(events, gaps) per reader {reports:?}, {releases} releases");
}

/// Resumes from `floor` (after `floor - 1`), following the floor up if the releaser overtakes us.
fn resume_at_floor(ring: &ReplayRing<u64>, mut floor: u64) -> Reader<u64> {
    loop {
        match ring.resume(Some(floor - 1)) {
            Ok(reader) => return reader,
            Err(replay_ring::ResumeError::BelowFloor { floor: newer, .. }) => {
                assert!(newer > floor, "the floor only grows");
                floor = newer;
            }
            Err(e) => panic!("unexpected resume error {e}"),
        }
    }
}
