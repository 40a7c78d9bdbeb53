//! Race 5: closing the stream vs a producer that waits for space and a reader that waits for
//! events. Readers must drain every retained event, then see `Closed` — never hang, never lose the
//! tail.
#![cfg(replay_ring_loom)]

use std::future::Future;

use loom::future::block_on;
use loom::thread;
use replay_ring::{CloseReason, ReadError, ReplayRing};
use replay_ring_loom_tests::{check_batch, check_cursors, maker, model, Bound, Ledger};

/// Capacity 2, a live reader at the empty head. Producer thread: push 1, then close. Reader (main):
/// `read().await` until `Closed(Completed)`. It must read id 1 first — the close must not overtake
/// the last publish — and must not hang.
#[test]
fn close_vs_waiting_reader() {
    model("close_vs_waiting_reader", Bound::Exhaustive, || {
        let ledger = Ledger::new(1);
        let (mut producer, ring) = ReplayRing::<_>::builder()
            .capacity(2)
            .max_readers(1)
            .build()
            .unwrap();
        let mut reader = ring.reader().unwrap();

        let producer_thread = {
            let ledger = ledger.clone();
            thread::spawn(move || {
                assert_eq!(producer.try_push_with(maker(&ledger)).ok(), Some(1));
                producer.close(CloseReason::Completed);
            })
        };

        let mut next = 1;
        // One event and the close: at most two waits.
        for _ in 0..2 {
            match block_on(reader.read()) {
                Ok(batch) => next = check_batch(&batch, next) + 1,
                Err(ReadError::Closed(CloseReason::Completed)) => break,
                Err(e) => panic!("replay mismatch: unexpected {e:?}"),
            }
        }
        assert_eq!(
            next, 2,
            "lost tail: the reader saw Closed before reading id {next}"
        );
        assert_eq!(
            reader.try_read().err(),
            Some(ReadError::Closed(CloseReason::Completed)),
            "a finished reader keeps reporting Closed"
        );

        producer_thread.join().unwrap();
        drop(reader);
        drop(ring);
        ledger.assert_all_dropped_once(1);
    });
}

/// Capacity 1, id 1 pushed before the threads start. Producer thread: `push_with(2).await` (waits
/// until the reader has read and released id 1), then close. Reader (main, replaying from 0):
/// `read().await` in a loop, releasing what it read, until `Closed(Completed)`. It must read
/// exactly 1, 2.
#[test]
fn close_vs_waiting_producer_and_reader() {
    model(
        "close_vs_waiting_producer_and_reader",
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

            let producer_thread = {
                let ledger = ledger.clone();
                thread::spawn(move || {
                    assert_eq!(block_on(producer.push_with(maker(&ledger))).ok(), Some(2));
                    producer.close(CloseReason::Completed);
                })
            };

            let mut next = 1;
            // Two events and the close: at most three waits.
            for _ in 0..3 {
                match block_on(reader.read()) {
                    Ok(batch) => {
                        next = check_batch(&batch, next) + 1;
                        let last = batch.last_id();
                        drop(batch);
                        assert_eq!(ring.release_through(last), Ok(last + 1));
                        check_cursors(&ring);
                    }
                    Err(ReadError::Closed(CloseReason::Completed)) => break,
                    Err(e) => panic!("replay mismatch: unexpected {e:?}"),
                }
            }
            assert_eq!(
                next, 3,
                "lost tail: the reader saw Closed before reading id {next}"
            );
            assert_eq!(
                reader.try_read().err(),
                Some(ReadError::Closed(CloseReason::Completed)),
                "a finished reader keeps reporting Closed"
            );

            producer_thread.join().unwrap();
            drop(reader);
            drop(ring);
            ledger.assert_all_dropped_once(2);
        },
    );
}

/// Capacity 1, id 1 pushed. Producer thread: polls `push_with(2)` once (it must wait: id 1 is
/// retained), gives up, and is dropped (`ProducerDropped`). Reader (main): reads id 1, then waits and
/// must see `Closed(ProducerDropped)`. Nothing may leak: the refused push built no payload and the
/// ring drops id 1 exactly once.
#[test]
fn close_vs_abandoned_wait() {
    model("close_vs_abandoned_wait", Bound::Exhaustive, || {
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
                let mut push = std::pin::pin!(producer.push_with(maker(&ledger)));
                let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
                assert!(
                    push.as_mut().poll(&mut cx).is_pending(),
                    "id 1 is never released, so there is no space"
                );
                // The abandoned wait and the producer are dropped here: the stream closes.
            })
        };

        {
            let batch = block_on(reader.read()).expect("id 1 is retained");
            assert_eq!(check_batch(&batch, 1), 1);
        }
        assert_eq!(
            block_on(reader.read()).err(),
            Some(ReadError::Closed(CloseReason::ProducerDropped))
        );

        producer_thread.join().unwrap();
        drop(reader);
        assert_eq!(ring.head(), 1);
        drop(ring);
        ledger.assert_all_dropped_once(1);
    });
}
