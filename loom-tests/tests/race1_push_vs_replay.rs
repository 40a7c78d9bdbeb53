//! Race 1: the producer pushes (and the window wraps around) while a reader resumes and replays;
//! and the same for a run of events published at once (`try_push_many`).
#![cfg(replay_ring_loom)]

use std::ops::ControlFlow;
use std::sync::Arc;

use loom::thread;
use replay_ring::{Batch, Producer, ReplayRing, ResumeError};
use replay_ring_loom_tests::{
    check_batch, check_cursors, drop_and_check_ledger, maker, model, ring_with, Bound, Ev, Flag,
    Ledger,
};

/// Capacity 2. Before the threads start: ids 1 and 2 pushed, 1 released (floor 2, head 2).
/// Producer thread: push 3 (reuses id 1's slot), release 2, try to push 4 (reuses id 2's slot,
/// refused while the reader pins 2). Reader (main thread): resume after id 1, then two reads.
/// The second read can span the wrap (id 3 ends the array, id 4 starts it).
#[test]
fn push_vs_replay_across_wraparound() {
    model(
        "push_vs_replay_across_wraparound",
        Bound::Preemptions(5),
        || {
            replay_after_1_against(Reads::TwoTryReads, |producer, ring, ledger, released_2| {
                // Slot of id 1: released before the threads started, and never pinned (the
                // reader pins 2 or higher), so this push cannot be refused.
                assert_eq!(producer.try_push_with(maker(ledger)).ok(), Some(3));
                assert_eq!(ring.release_through(2), Ok(3));
                released_2.set();
                check_cursors(ring);
                // Refused while the reader still pins id 2; either outcome is legal.
                let _ = producer.try_push_with(maker(ledger));
            })
        },
    );
}

/// The batch publish of `try_push_many` against a replay that drains. As above, but the producer
/// thread releases 2, then makes one `try_push_many` of ids 3 and 4. Id 3 reuses id 1's slot,
/// which no reader can pin (the reader pins 2 or higher); id 4 reuses id 2's, which the batch may
/// take only once the reader's pin has moved past 2. So the batch may ask for room for id 4 while
/// id 3 is written and not yet published, and publishes one or both with a single `head` store.
/// Reader (main thread): resume after id 1, then two drains. With the light fence modelled as
/// nothing, the producer issues no fence after the run's writes, and only the publish orders them
/// before a drain that pins again and lends the run (docs/verification.md, model 1m, says why the
/// other configuration needs model 1g).
#[test]
fn push_many_vs_replay_across_wraparound() {
    model(
        "push_many_vs_replay_across_wraparound",
        Bound::Preemptions(5),
        || {
            replay_after_1_against(Reads::TwoDrains, |producer, ring, ledger, released_2| {
                assert_eq!(ring.release_through(2), Ok(3));
                released_2.set();
                // The values are made only as the batch takes them: one it cannot place is never
                // made, so the ledger counts exactly the ids pushed.
                let mut values = (3..=4).map(|id| maker(ledger)(id));
                let pushed = producer.try_push_many(&mut values);
                assert!(
                    (1..=2).contains(&pushed),
                    "push mismatch: id 3's slot was free, yet the batch pushed {pushed}"
                );
                assert_eq!(producer.next_id(), 3 + pushed as u64);
                check_cursors(ring);
            })
        },
    );
}

/// How the reader of models 1 and 1m reads its replay.
#[derive(Clone, Copy)]
enum Reads {
    /// Two `try_read`s, the cursors checked before each.
    TwoTryReads,
    /// Two `drain`s, the cursors checked after each.
    TwoDrains,
}

/// Models 1 and 1m: capacity 2, ids 1 and 2 pushed and id 1 released before the threads start.
/// `produce` runs on the producer thread and sets its flag once its `release_through(2)` has
/// returned. The main thread resumes after id 1 and reads as `reads` says: every batch continues
/// the replay from id 2, and none holds id 2 if the resume started after that release; or the
/// resume is refused with the one legal `BelowFloor`. Then the producer is joined, and every value
/// must have been dropped exactly once.
fn replay_after_1_against(
    reads: Reads,
    produce: fn(&mut Producer<Ev>, &ReplayRing<Ev>, &Arc<Ledger>, &Flag),
) {
    let ledger = Ledger::new(4);
    let (mut producer, ring) = ring_with(&ledger, 2, 1, 2);
    assert_eq!(ring.release_through(1), Ok(2));
    let released_2 = Flag::default();

    let producer_thread = {
        let (ledger, ring, released_2) = (ledger.clone(), ring.clone(), released_2.clone());
        thread::spawn(move || {
            produce(&mut producer, &ring, &ledger, &released_2);
            producer
        })
    };
    let started_after_release = released_2.get();
    match ring.resume(Some(1)) {
        Ok(mut reader) => {
            let mut next = 2;
            let mut lent = |batch: &Batch<'_, Ev>| {
                if next == 2 {
                    assert!(
                        !started_after_release,
                        "released id returned: a resume started after release_through(2) \
                         completed replayed id 2"
                    );
                }
                next = check_batch(batch, next) + 1;
            };
            for _ in 0..2 {
                match reads {
                    Reads::TwoTryReads => {
                        check_cursors(&ring);
                        if let Some(batch) =
                            reader.try_read().expect("no gap: the replay was pinned")
                        {
                            lent(&batch);
                        }
                    }
                    Reads::TwoDrains => {
                        let drained = reader.drain(|batch| {
                            lent(batch);
                            ControlFlow::Continue(())
                        });
                        drained.expect("no gap: the replay was pinned");
                        check_cursors(&ring);
                    }
                }
            }
            assert!(
                next > 2,
                "replay empty: resume(Some(1)) with head >= 2 lent nothing"
            );
        }
        Err(ResumeError::BelowFloor {
            requested, floor, ..
        }) => {
            assert_eq!(
                (requested, floor),
                (1, 3),
                "replay mismatch: wrong BelowFloor"
            );
        }
        Err(e) => panic!("replay mismatch: unexpected {e:?}"),
    }

    let producer = producer_thread.join().unwrap();
    check_cursors(&ring);
    let head = ring.head();
    drop_and_check_ledger(&ledger, head, Some(producer), ring);
}

/// The batch publish of `try_push_many` against a gating reader. Capacity 4. Before the threads
/// start: id 1 pushed and released, and the reader resumed at the head and gating (pinned) from
/// id 2. Producer thread: one `try_push_many` of ids 2 and 3, into slots that never held a value
/// and below the write limit the producer already knows (ids up to 4), so it cannot be refused
/// and needs no pin scan: no fence of the producer's comes between its slot writes and its `head`
/// store. Reader (main thread): three polls of the gate, which lends what it finds with no fence
/// of its own after the one that set its pin.
#[test]
fn push_many_vs_gate() {
    model("push_many_vs_gate", Bound::Exhaustive, || {
        let ledger = Ledger::new(3);
        let (mut producer, ring) = ring_with(&ledger, 4, 1, 1);
        assert_eq!(ring.release_through(1), Ok(2));
        let mut reader = ring.resume(Some(1)).expect("a resume at the head");
        let mut gate = reader.gating().expect("nothing was released past the head");

        let producer_thread = {
            let ledger = ledger.clone();
            let ring = ring.clone();
            thread::spawn(move || {
                let mut values = (2..=3).map(|id| maker(&ledger)(id));
                assert_eq!(
                    producer.try_push_many(&mut values),
                    2,
                    "push mismatch: the batch was refused fresh slots"
                );
                check_cursors(&ring);
                producer
            })
        };

        let mut next = 2;
        for _ in 0..3 {
            if let Some(batch) = gate.try_read().expect("a gate never sees a gap") {
                next = check_batch(&batch, next) + 1;
            }
            check_cursors(&ring);
        }
        drop(gate);
        drop(reader);
        let producer = producer_thread.join().unwrap();
        check_cursors(&ring);
        let head = ring.head();
        assert_eq!(head, 3, "the batch published {head}, not its last id");
        drop_and_check_ledger(&ledger, head, Some(producer), ring);
    });
}
