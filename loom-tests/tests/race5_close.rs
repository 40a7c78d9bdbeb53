//! Race 5: closing the stream vs a producer that waits for space and a reader that waits for
//! events. Readers must drain every retained event, then see `Closed` — never hang, never lose the
//! tail.
#![cfg(replay_ring_loom)]

use std::future::Future;

use loom::future::block_on;
use loom::thread;
use replay_ring::{CloseReason, ReadError};
use replay_ring_loom_tests::{
    check_batch, check_cursors, drop_and_check_ledger, empty_ring_with_live_reader, maker, model,
    one_event_pinned, push_waiting, read_pinned, ring_with, Bound, Ledger,
};

/// Capacity 2, a live reader at the empty head. Producer thread: push 1, then close. Reader (main):
/// `read().await` until `Closed(Completed)`. It must read id 1 first — the close must not overtake
/// the last publish — and must not hang.
#[test]
fn close_vs_waiting_reader() {
    model("close_vs_waiting_reader", Bound::Preemptions(4), || {
        let ledger = Ledger::new(1);
        let (mut producer, ring, mut reader) = empty_ring_with_live_reader(&ledger);

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
        drop_and_check_ledger(&ledger, 1, None, ring);
    });
}

/// Capacity 1, id 1 pushed and released before the threads start, but pinned by a reader that
/// replays from 0. Producer thread: `push_with(2).await` (waits until the reader unpins id 1), then
/// close. Reader (main): read id 1 (pinned, no wait), then `read().await` for id 2; once the
/// producer is done, the reader must see `Closed(Completed)`. Neither side may hang. (The close
/// overtaking a *waiting* reader is `close_vs_waiting_reader`.)
#[test]
fn close_vs_waiting_producer_and_reader() {
    model(
        "close_vs_waiting_producer_and_reader",
        Bound::Preemptions(4),
        || {
            let ledger = Ledger::new(2);
            let (mut producer, ring, mut reader) = one_event_pinned(&ledger, true);

            let producer_thread = {
                let ledger = ledger.clone();
                thread::spawn(move || {
                    push_waiting(&mut producer, &ledger, 2);
                    producer.close(CloseReason::Completed);
                })
            };

            read_pinned(&mut reader, 1);
            // Waits for id 2 (the producer first waits for the unpin above, then pushes).
            {
                let batch = block_on(reader.read()).expect("id 2 comes before the close");
                check_batch(&batch, 2);
            }

            producer_thread.join().unwrap();
            assert_eq!(
                reader.try_read().err(),
                Some(ReadError::Closed(CloseReason::Completed)),
                "lost close: the stream is closed and drained"
            );
            check_cursors(&ring);
            drop(reader);
            drop_and_check_ledger(&ledger, 2, None, ring);
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
        let (mut producer, ring, mut reader) = one_event_pinned(&ledger, false);

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
        drop_and_check_ledger(&ledger, 1, None, ring);
    });
}

/// Capacity 2, a live reader at the empty head; non-blocking, so it also runs with the light fence
/// modelled as nothing. Producer thread: push 1, then close. Reader (main): up to three `try_read`s.
/// Whenever it sees `Closed`, it must already have read id 1: the close must not overtake the last
/// publish (`closed` is stored with Release after it, and loaded with Acquire before the final
/// re-read of `head`).
#[test]
fn close_vs_polling_reader() {
    model("close_vs_polling_reader", Bound::Exhaustive, || {
        let ledger = Ledger::new(1);
        let (mut producer, ring, mut reader) = empty_ring_with_live_reader(&ledger);

        let producer_thread = {
            let ledger = ledger.clone();
            thread::spawn(move || {
                assert_eq!(producer.try_push_with(maker(&ledger)).ok(), Some(1));
                producer.close(CloseReason::Completed);
            })
        };

        let mut next = 1;
        for _ in 0..3 {
            match reader.try_read() {
                Ok(Some(batch)) => next = check_batch(&batch, next) + 1,
                Ok(None) => {}
                Err(ReadError::Closed(CloseReason::Completed)) => {
                    assert_eq!(
                        next, 2,
                        "lost tail: the reader saw Closed before reading id {next}"
                    );
                    break;
                }
                Err(e) => panic!("replay mismatch: unexpected {e:?}"),
            }
        }

        producer_thread.join().unwrap();
        drop(reader);
        drop_and_check_ledger(&ledger, 1, None, ring);
    });
}

/// Capacity 2, no reader; non-blocking, so it also runs with the light fence modelled as nothing.
/// Producer thread: push 1, then close. Main: `ReplayRing::is_closed`, then `ReplayRing::head`,
/// the check the SSE backend's `ended_after` makes before it ends a stream: once the ring says it
/// is closed, the head it reports must be final (the `closed` Acquire in `is_closed` synchronizes
/// with the Release store that follows the last publish), or a client at cursor 1 would be told
/// the stream ended before id 1.
#[test]
fn is_closed_then_head_is_final() {
    model("is_closed_then_head_is_final", Bound::Exhaustive, || {
        let ledger = Ledger::new(1);
        let (mut producer, ring) = ring_with(&ledger, 2, 1, 0);

        let producer_thread = {
            let ledger = ledger.clone();
            thread::spawn(move || {
                assert_eq!(producer.try_push_with(maker(&ledger)).ok(), Some(1));
                producer.close(CloseReason::Completed);
            })
        };

        if ring.is_closed() {
            let head = ring.head();
            assert_eq!(
                head, 1,
                "lost tail: is_closed() returned true with the head at {head}, before id 1"
            );
        }

        producer_thread.join().unwrap();
        drop_and_check_ledger(&ledger, 1, None, ring);
    });
}
