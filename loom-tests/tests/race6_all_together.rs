//! Race 6: two readers, the producer and a releaser, all at once, with non-blocking calls only (so
//! every interleaving ends). Safety only; liveness is covered by races 3–5.
#![cfg(replay_ring_loom)]

use loom::thread;
use replay_ring::{ReadError, ReplayRing, ResumeError};
use replay_ring_loom_tests::{
    check_batch, check_cursors, drop_and_check_ledger, maker, model, ring_with, Bound, Ledger,
};

/// Capacity 2, id 1 pushed before the threads start. Producer: two `try_push_with` attempts (ids 2
/// and 3 if accepted). Releaser: releases through whatever head it sees. Reader A: replays from the
/// start (`resume(Some(0))`), two reads. Reader B (main): a live reader, two reads. Every batch must
/// continue its reader's sequence with intact payloads; a replay or read that cannot be honoured
/// must be the typed error with consistent numbers; `floor <= head + 1` whenever anyone looks,
/// including in a `BelowFloor` snapshot.
#[test]
fn two_readers_producer_releaser() {
    model(
        "two_readers_producer_releaser",
        Bound::Preemptions(1),
        || {
            let ledger = Ledger::new(3);
            let (mut producer, ring) = ring_with(&ledger, 2, 2, 1);

            let producer_thread = {
                let ledger = ledger.clone();
                thread::spawn(move || {
                    for _ in 0..2 {
                        let _ = producer.try_push_with(maker(&ledger));
                    }
                    producer
                })
            };
            let releaser = {
                let ring = ring.clone();
                thread::spawn(move || {
                    let head = ring.head();
                    let floor = ring.release_through(head).expect("head is assigned");
                    assert_eq!(floor, head + 1, "release_through returned a stale floor");
                    check_cursors(&ring);
                })
            };
            let reader_a = {
                let ring = ring.clone();
                thread::spawn(move || match ring.resume(Some(0)) {
                    Ok(reader) => read_twice(&ring, reader, 1),
                    Err(ResumeError::BelowFloor {
                        requested,
                        floor,
                        head,
                    }) => {
                        assert_eq!(requested, 0);
                        assert!(
                            floor <= head + 1,
                            "cursor invariant violated: BelowFloor with floor {floor} > head {head} + 1"
                        );
                        assert!(floor >= 2, "replay mismatch: BelowFloor with floor {floor}");
                    }
                    Err(e) => panic!("replay mismatch: unexpected {e:?}"),
                })
            };

            check_cursors(&ring);
            let reader_b = ring.reader().unwrap();
            let start = reader_b.cursor();
            read_twice(&ring, reader_b, start);

            reader_a.join().unwrap();
            releaser.join().unwrap();
            let producer = producer_thread.join().unwrap();
            check_cursors(&ring);
            let head = ring.head();
            drop_and_check_ledger(&ledger, head, Some(producer), ring);
        },
    );
}

/// Two non-blocking reads that must continue the sequence from `next`; a `Gap` must be real.
fn read_twice(
    ring: &ReplayRing<replay_ring_loom_tests::Ev>,
    mut reader: replay_ring::Reader<replay_ring_loom_tests::Ev>,
    mut next: u64,
) {
    for _ in 0..2 {
        check_cursors(ring);
        match reader.try_read() {
            Ok(Some(batch)) => next = check_batch(&batch, next) + 1,
            Ok(None) => {}
            Err(ReadError::Gap {
                next: gap_next,
                floor,
                ..
            }) => {
                assert_eq!(
                    gap_next, next,
                    "order violation: gap reported at the wrong id"
                );
                assert!(
                    gap_next < floor,
                    "replay mismatch: gap at {gap_next} with floor {floor}"
                );
                return;
            }
            Err(e) => panic!("replay mismatch: unexpected {e:?}"),
        }
    }
}
