//! Race 3: a producer waiting for space must be woken by whatever frees it — a release (the floor
//! advances) or a reader finishing (its pin ends). A lost wake-up shows up as a loom deadlock.
#![cfg(replay_ring_loom)]

use loom::future::block_on;
use loom::thread;
use replay_ring::ReplayRing;
use replay_ring_loom_tests::{check_batch, check_cursors, maker, model, Bound, Ledger};

/// Capacity 1, id 1 pushed. Producer: `push_with(2).await` (waits for space). Releaser (main):
/// release id 1. The push must complete.
#[test]
fn producer_wait_vs_release() {
    model("producer_wait_vs_release", Bound::Exhaustive, || {
        let ledger = Ledger::new(2);
        let (mut producer, ring) = ReplayRing::<_>::builder()
            .capacity(1)
            .max_readers(1)
            .build()
            .unwrap();
        assert_eq!(producer.try_push_with(maker(&ledger)).ok(), Some(1));

        let producer_thread = {
            let ledger = ledger.clone();
            thread::spawn(move || {
                assert_eq!(block_on(producer.push_with(maker(&ledger))).ok(), Some(2));
                producer
            })
        };
        assert_eq!(ring.release_through(1), Ok(2));
        check_cursors(&ring);

        let producer = producer_thread.join().unwrap();
        assert_eq!(ring.head(), 2);
        drop(producer);
        drop(ring);
        ledger.assert_all_dropped_once(2);
    });
}

/// Capacity 1, id 1 pushed and already released, but a reader resumed from 0 still pins it.
/// Producer: `push_with(2).await` (waits for the pin to end). Reader (main): read id 1, drop the
/// batch (unpin). The push must complete, and must not overwrite id 1 while it is being read.
#[test]
fn producer_wait_vs_reader_finishing() {
    model(
        "producer_wait_vs_reader_finishing",
        Bound::Exhaustive,
        || {
            let ledger = Ledger::new(2);
            let (mut producer, ring) = ReplayRing::<_>::builder()
                .capacity(1)
                .max_readers(1)
                .build()
                .unwrap();
            assert_eq!(producer.try_push_with(maker(&ledger)).ok(), Some(1));
            let mut reader = ring.resume(Some(0)).unwrap();
            assert_eq!(ring.release_through(1), Ok(2));

            let producer_thread = {
                let ledger = ledger.clone();
                thread::spawn(move || {
                    assert_eq!(block_on(producer.push_with(maker(&ledger))).ok(), Some(2));
                    producer
                })
            };
            {
                let batch = reader.try_read().unwrap().expect("id 1 is pinned");
                assert_eq!(check_batch(&batch, 1), 1);
            }

            let producer = producer_thread.join().unwrap();
            drop(reader);
            assert_eq!(ring.head(), 2);
            drop(producer);
            drop(ring);
            ledger.assert_all_dropped_once(2);
        },
    );
}

/// Both at once: the producer needs the release *and* the reader's unpin; whichever comes last
/// must wake it. Three threads, so preemption-bounded.
#[test]
fn producer_wait_vs_release_and_reader() {
    model(
        "producer_wait_vs_release_and_reader",
        Bound::Preemptions(5),
        || {
            let ledger = Ledger::new(2);
            let (mut producer, ring) = ReplayRing::<_>::builder()
                .capacity(1)
                .max_readers(1)
                .build()
                .unwrap();
            assert_eq!(producer.try_push_with(maker(&ledger)).ok(), Some(1));
            let mut reader = ring.resume(Some(0)).unwrap();

            let producer_thread = {
                let ledger = ledger.clone();
                thread::spawn(move || {
                    assert_eq!(block_on(producer.push_with(maker(&ledger))).ok(), Some(2));
                    producer
                })
            };
            let releaser = {
                let ring = ring.clone();
                thread::spawn(move || {
                    assert_eq!(ring.release_through(1), Ok(2));
                    check_cursors(&ring);
                })
            };
            {
                let batch = reader.try_read().unwrap().expect("id 1 is pinned");
                assert_eq!(check_batch(&batch, 1), 1);
            }

            releaser.join().unwrap();
            let producer = producer_thread.join().unwrap();
            drop(reader);
            assert_eq!(ring.head(), 2);
            drop(producer);
            drop(ring);
            ledger.assert_all_dropped_once(2);
        },
    );
}
