//! Race 2a: a reader drains consecutive batches under one pin, which it advances between batches
//! without a fence, while the producer releases and reuses the slots behind it; and the same for a
//! gating reader, which keeps the pin between polls, including polls that find nothing.
#![cfg(replay_ring_loom)]

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;

use loom::thread;
use replay_ring::{Producer, ReadError, Reader, ReplayRing};
use replay_ring_loom_tests::{
    check_batch, check_cursors, drop_and_check_ledger, maker, model, ring_with, Bound, Ev, Ledger,
};

/// The producer thread of both models: push 2 (a fresh slot), release 1, push 3 into id 1's slot
/// (refused while the reader's pin is still 1); if that was accepted, `on_reuse` runs, then release
/// 2 and push 4 into id 2's slot (refused while the pin is <= 2). Returns the producer.
fn spawn_releasing_producer(
    mut producer: Producer<Ev>,
    ring: &ReplayRing<Ev>,
    ledger: &Arc<Ledger>,
    on_reuse: fn(),
) -> thread::JoinHandle<Producer<Ev>> {
    let (ring, ledger) = (ring.clone(), ledger.clone());
    thread::spawn(move || {
        // A slot that never held a value: cannot be refused.
        assert_eq!(producer.try_push_with(maker(&ledger)).ok(), Some(2));
        assert_eq!(ring.release_through(1), Ok(2));
        check_cursors(&ring);
        if producer.try_push_with(maker(&ledger)).is_ok() {
            on_reuse();
            assert_eq!(ring.release_through(2), Ok(3));
            check_cursors(&ring);
            // Either outcome is legal; accepted only once no pin is <= 2.
            let _ = producer.try_push_with(maker(&ledger));
        }
        producer
    })
}

/// Drops the reader, joins the producer, and checks the cursors and that every value was dropped
/// exactly once.
fn finish(
    reader: Reader<Ev>,
    producer_thread: thread::JoinHandle<Producer<Ev>>,
    ring: ReplayRing<Ev>,
    ledger: &Arc<Ledger>,
) {
    drop(reader);
    let producer = producer_thread.join().unwrap();
    check_cursors(&ring);
    let head = ring.head();
    drop_and_check_ledger(ledger, head, Some(producer), ring);
}

/// Executions in which one drain lent two or more batches (so it advanced its pin). A ghost
/// counter outside loom's view: it only proves, after the model, that the advance was explored.
static ADVANCING_DRAINS: AtomicUsize = AtomicUsize::new(0);

/// 1 while the gate of the gating model lives (a ghost flag, as above).
static GATE_LIVE: AtomicUsize = AtomicUsize::new(0);

/// Executions in which the push of 3 reused id 1's slot while the gate still lived: only an advance
/// of the gate's pin past 1 allows that (lending two batches does not show it: a gate whose pin
/// stayed at 1 lends them too).
static REUSE_UNDER_GATE: AtomicUsize = AtomicUsize::new(0);

/// Capacity 2. Before the threads start: id 1 pushed, and the reader resumed after id 0 (pinned at
/// 1). Producer thread: push 2 (a fresh slot), release 1, push 3 into id 1's slot (refused while
/// the pin is still 1); if that was accepted, release 2 and push 4 into id 2's slot (refused while
/// the pin is <= 2). Reader (main thread): two drains. The first lends id 1, and, when id 2 is
/// already published, advances its pin to 2 and lends id 2 as a second batch, which lets the push
/// of 3 reuse id 1's slot while the drain is still running. The second drain pins and checks the
/// floor afresh, and may find its next id released (`Gap`). Checked: every lent slot holds its own
/// id, batches continue the reader's sequence, and loom reports any reuse of a slot not ordered
/// after the reads of it.
#[test]
fn drain_vs_reuse_behind_the_advancing_pin() {
    model(
        "drain_vs_reuse_behind_the_advancing_pin",
        Bound::Preemptions(5),
        || {
            let ledger = Ledger::new(4);
            let (producer, ring) = ring_with(&ledger, 2, 1, 1);
            let mut reader = ring.resume(Some(0)).unwrap();

            let producer_thread = spawn_releasing_producer(producer, &ring, &ledger, || {});

            let mut next = 1;
            for drain in 0..2 {
                let start = next;
                let mut batches = 0;
                let result = reader.drain(|batch| {
                    next = check_batch(batch, next) + 1;
                    batches += 1;
                    ControlFlow::Continue(())
                });
                check_cursors(&ring);
                match result {
                    Ok(read) => assert_eq!(read, next - start, "drain miscounted"),
                    Err(ReadError::Gap {
                        next: gap_at,
                        floor,
                        head,
                    }) => {
                        assert!(drain == 1, "the first drain was pinned by the resume");
                        assert!(
                            gap_at == next && next < floor && floor <= head + 1,
                            "wrong gap: next {gap_at} (expected {next}), floor {floor}, head {head}"
                        );
                        break;
                    }
                    Err(e) => panic!("unexpected {e:?}"),
                }
                if batches >= 2 {
                    // SeqCst on a ghost counter: schedule order only.
                    ADVANCING_DRAINS.fetch_add(1, SeqCst);
                }
            }
            assert!(next >= 2, "the replay pinned by the resume was not lent");
            finish(reader, producer_thread, ring, &ledger);
        },
    );
    assert!(
        // SeqCst on a ghost counter: schedule order only.
        ADVANCING_DRAINS.load(SeqCst) > 0,
        "no execution lent two batches in one drain: the model never advanced a pin"
    );
}

/// As the drain model, with a gate: the reader (resumed after 0, so pinned at 1) takes
/// `Reader::gating` and polls three times, advancing its pin after each batch (a poll may also find
/// nothing). The producer does as above: the push of 3 reuses id 1's slot once the pin has moved
/// past 1, while the gate may still be reading; a ghost counter asserts, after the model, that some
/// execution did so while the gate lived. A gate never sees `Gap`: nothing it has yet to read
/// can be reused under its pin. Checked: every lent slot holds its own id, batches continue the
/// reader's sequence, and loom reports any reuse of a slot not ordered after the reads of it.
#[test]
fn gating_vs_reuse_behind_the_advancing_pin() {
    model(
        "gating_vs_reuse_behind_the_advancing_pin",
        Bound::Preemptions(5),
        || {
            let ledger = Ledger::new(4);
            let (producer, ring) = ring_with(&ledger, 2, 1, 1);
            let mut reader = ring.resume(Some(0)).unwrap();

            let producer_thread = spawn_releasing_producer(producer, &ring, &ledger, || {
                // SeqCst on ghost counters: schedule order only.
                if GATE_LIVE.load(SeqCst) == 1 {
                    REUSE_UNDER_GATE.fetch_add(1, SeqCst);
                }
            });

            let mut next = 1;
            {
                let mut gate = reader.gating().expect("the resume pinned the replay");
                // SeqCst on a ghost flag: schedule order only.
                GATE_LIVE.store(1, SeqCst);
                for _ in 0..3 {
                    if let Some(batch) = gate.try_read().expect("a gate never sees a gap") {
                        next = check_batch(&batch, next) + 1;
                    }
                    check_cursors(&ring);
                }
                assert_eq!(gate.cursor(), next, "the gate's cursor lags what it lent");
                // SeqCst on a ghost flag: schedule order only.
                GATE_LIVE.store(0, SeqCst);
            }
            assert!(next >= 2, "the replay pinned by the resume was not lent");
            finish(reader, producer_thread, ring, &ledger);
        },
    );
    assert!(
        // SeqCst on a ghost counter: schedule order only.
        REUSE_UNDER_GATE.load(SeqCst) > 0,
        "no execution reused id 1's slot while the gate lived: the model never advanced a pin"
    );
}
