//! Race 7: a ring that grows its slot array (capacity 4 from one slot: segments [0,1), [1,2),
//! [2,4)) while a reader resumes and reads the segments the producer is allocating.
#![cfg(replay_ring_loom)]

use loom::thread;
use replay_ring::{Producer, ReplayRing};
use replay_ring_loom_tests::{
    check_batch, check_cursors, drop_and_check_ledger, maker, model, Bound, Ev, Ledger,
};

/// Capacity 4, `initial_slots(1)`: only segment 0 (index 0) exists when the threads start, and
/// ids 1, 2, 3 live at indices 1 (segment 1) and 2, 3 (segment 2). Producer thread: push 1, 2, 3,
/// each of the first two allocating its segment on the slow path before its slot is written and
/// its `head` published. Reader (main thread): resume after id 0 (a replay of whatever is
/// published, or at the head), then two reads; a read lends ids from two segments at once.
#[test]
fn growth_vs_resume_and_read() {
    model("growth_vs_resume_and_read", Bound::Exhaustive, || {
        let ledger = Ledger::new(3);
        let (mut producer, ring): (Producer<Ev>, ReplayRing<Ev>) = ReplayRing::builder()
            .capacity(4)
            .initial_slots(1)
            .max_readers(1)
            .build()
            .unwrap();

        let producer_thread = {
            let ledger = ledger.clone();
            thread::spawn(move || {
                for id in 1..=3 {
                    // Nothing is released or pinned below 4: every push fits.
                    assert_eq!(producer.try_push_with(maker(&ledger)).ok(), Some(id));
                }
                producer
            })
        };

        let mut reader = ring
            .resume(Some(0))
            .expect("0 is the floor - 1 or the head");
        let mut next = 1;
        for _ in 0..2 {
            check_cursors(&ring);
            if let Some(batch) = reader.try_read().expect("no gap: nothing is released") {
                next = check_batch(&batch, next) + 1;
            }
        }
        drop(reader);

        let producer = producer_thread.join().unwrap();
        assert_eq!(ring.head(), 3);
        drop_and_check_ledger(&ledger, 3, Some(producer), ring);
    });
}
