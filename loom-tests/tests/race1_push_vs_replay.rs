//! Race 1: the producer pushes (and the window wraps around) while a reader resumes and replays.
#![cfg(replay_ring_loom)]

use loom::thread;
use replay_ring::ResumeError;
use replay_ring_loom_tests::{
    check_batch, check_cursors, drop_and_check_ledger, maker, model, ring_with, Bound, Flag, Ledger,
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
            let ledger = Ledger::new(4);
            let (mut producer, ring) = ring_with(&ledger, 2, 1, 2);
            assert_eq!(ring.release_through(1), Ok(2));
            let released_2 = Flag::default();

            let producer_thread = {
                let ledger = ledger.clone();
                let ring = ring.clone();
                let released_2 = released_2.clone();
                thread::spawn(move || {
                    // Slot of id 1: released before the threads started, and never pinned (the
                    // reader pins 2 or higher), so this push cannot be refused.
                    assert_eq!(producer.try_push_with(maker(&ledger)).ok(), Some(3));
                    assert_eq!(ring.release_through(2), Ok(3));
                    released_2.set();
                    check_cursors(&ring);
                    // Refused while the reader still pins id 2; either outcome is legal.
                    let _ = producer.try_push_with(maker(&ledger));
                    producer
                })
            };
            let started_after_release = released_2.get();
            match ring.resume(Some(1)) {
                Ok(mut reader) => {
                    let mut next = 2;
                    for _ in 0..2 {
                        check_cursors(&ring);
                        if let Some(batch) =
                            reader.try_read().expect("no gap: the replay was pinned")
                        {
                            if next == 2 {
                                assert!(
                                !started_after_release,
                                "released id returned: a resume started after release_through(2) \
                                 completed replayed id 2"
                            );
                            }
                            next = check_batch(&batch, next) + 1;
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
        },
    );
}
