//! Race 4: a reader waiting for new events must be woken by the push that publishes them — also
//! after an abandoned wait, and when several readers wait. A lost wake-up shows up as a loom
//! deadlock.
#![cfg(replay_ring_loom)]

use std::future::Future;

use loom::future::block_on;
use loom::thread;
use replay_ring_loom_tests::{
    check_batch, drop_and_check_ledger, empty_ring_with_live_reader, maker, model, ring_with,
    Bound, Ledger,
};

/// Capacity 2, a live reader at the empty head. Reader thread: `read().await` until it has seen
/// ids 1 and 2 (at most two reads: each returns at least one event). Producer (main): push 1, 2.
#[test]
fn reader_wait_vs_push() {
    model("reader_wait_vs_push", Bound::Preemptions(4), || {
        let ledger = Ledger::new(2);
        let (mut producer, ring, mut reader) = empty_ring_with_live_reader(&ledger);

        let reader_thread = thread::spawn(move || {
            let mut next = 1;
            while next <= 2 {
                let batch = block_on(reader.read()).expect("stream still open");
                next = check_batch(&batch, next) + 1;
            }
            assert_eq!(next, 3, "order violation: read past the head");
        });
        assert_eq!(producer.try_push_with(maker(&ledger)).ok(), Some(1));
        assert_eq!(producer.try_push_with(maker(&ledger)).ok(), Some(2));

        reader_thread.join().unwrap();
        drop_and_check_ledger(&ledger, 2, Some(producer), ring);
    });
}

/// Capacity 2, a live reader at the empty head. Reader thread: polls `read()` once with a waker that
/// does nothing and drops that future (abandoning a wait that may have parked it on the wait list),
/// then `read().await`s id 1. Producer (main): pushes 1. The abandoned wait must not make the
/// second one miss its wake-up (the entry may still be listed when it parks again).
#[test]
fn abandoned_wait_then_wait() {
    model("abandoned_wait_then_wait", Bound::Exhaustive, || {
        let ledger = Ledger::new(1);
        let (mut producer, ring, mut reader) = empty_ring_with_live_reader(&ledger);

        let reader_thread = thread::spawn(move || {
            let mut next = 1;
            {
                let mut read = std::pin::pin!(reader.read());
                let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
                if let std::task::Poll::Ready(batch) = read.as_mut().poll(&mut cx) {
                    next = check_batch(&batch.expect("stream open"), 1) + 1;
                }
            }
            if next == 1 {
                let batch = block_on(reader.read()).expect("stream still open");
                next = check_batch(&batch, 1) + 1;
            }
            assert_eq!(next, 2);
        });
        assert_eq!(producer.try_push_with(maker(&ledger)).ok(), Some(1));

        reader_thread.join().unwrap();
        drop_and_check_ledger(&ledger, 1, Some(producer), ring);
    });
}

/// Capacity 2, two live readers at the empty head. Each reader thread: `read().await` for id 1.
/// Producer (main): pushes 1. One push must wake both parked readers: the whole wait list is taken
/// and every entry on it woken.
#[test]
fn two_parked_readers_one_push() {
    model("two_parked_readers_one_push", Bound::Preemptions(3), || {
        let ledger = Ledger::new(1);
        let (mut producer, ring) = ring_with(&ledger, 2, 2, 0);
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let mut reader = ring.reader().unwrap();
                thread::spawn(move || {
                    let batch = block_on(reader.read()).expect("stream still open");
                    assert_eq!(check_batch(&batch, 1), 1);
                })
            })
            .collect();
        assert_eq!(producer.try_push_with(maker(&ledger)).ok(), Some(1));

        for r in readers {
            r.join().unwrap();
        }
        drop_and_check_ledger(&ledger, 1, Some(producer), ring);
    });
}

/// Capacity 2, two live readers at the empty head. Reader B: `read().await` for id 1. Reader A:
/// `read().await` until it has seen ids 1 and 2. Producer (main): pushes 1, 2. Reader A may find
/// id 1 on the re-check after listing itself (so it stays listed without parking) and list itself
/// again for id 2 while the producer walks a list holding A then B: the producer must read A's
/// link before it lets A re-list (the `queued` rule), or it loses B and B never wakes.
#[test]
fn relisted_while_the_producer_walks_the_list() {
    model(
        "relisted_while_the_producer_walks_the_list",
        Bound::Preemptions(3),
        || {
            let ledger = Ledger::new(2);
            let (mut producer, ring) = ring_with(&ledger, 2, 2, 0);
            let mut reader_b = ring.reader().unwrap();
            let mut reader_a = ring.reader().unwrap();
            let b = thread::spawn(move || {
                let batch = block_on(reader_b.read()).expect("stream still open");
                check_batch(&batch, 1);
            });
            let a = thread::spawn(move || {
                let mut next = 1;
                while next <= 2 {
                    let batch = block_on(reader_a.read()).expect("stream still open");
                    next = check_batch(&batch, next) + 1;
                }
            });
            assert_eq!(producer.try_push_with(maker(&ledger)).ok(), Some(1));
            assert_eq!(producer.try_push_with(maker(&ledger)).ok(), Some(2));

            a.join().unwrap();
            b.join().unwrap();
            drop_and_check_ledger(&ledger, 2, Some(producer), ring);
        },
    );
}

/// Capacity 2, one reader entry. Reader thread: polls `read()` once with a waker that does nothing,
/// drops that future and the reader (its entry is freed, and may still be listed), then resumes a
/// new reader from 0, which claims the same entry, and `read().await`s id 1. Producer (main):
/// pushes 1. The new owner's wait must be woken even though its entry was listed by the old one.
#[test]
fn a_freed_entry_claimed_while_still_listed() {
    model(
        "a_freed_entry_claimed_while_still_listed",
        Bound::Exhaustive,
        || {
            let ledger = Ledger::new(1);
            let (mut producer, ring) = ring_with(&ledger, 2, 1, 0);
            let mut old = ring.reader().unwrap();
            let registry = ring.clone();
            let reader_thread = thread::spawn(move || {
                {
                    let mut read = std::pin::pin!(old.read());
                    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
                    let _ = read.as_mut().poll(&mut cx);
                }
                drop(old);
                let mut new = registry.resume(Some(0)).expect("id 1 is still retained");
                let batch = block_on(new.read()).expect("stream still open");
                assert_eq!(check_batch(&batch, 1), 1);
            });
            assert_eq!(producer.try_push_with(maker(&ledger)).ok(), Some(1));

            reader_thread.join().unwrap();
            drop_and_check_ledger(&ledger, 1, Some(producer), ring);
        },
    );
}
