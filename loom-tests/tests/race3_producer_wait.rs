//! Race 3: a producer waiting for space must be woken by whatever frees it — a release (the floor
//! advances) or a reader finishing (its pin ends, or moves forward). A lost wake-up shows up as a
//! loom deadlock.
#![cfg(replay_ring_loom)]

use loom::thread;
use replay_ring_loom_tests::{
    check_batch, drop_and_check_ledger, model, one_event_pinned, read_pinned, release_and_check,
    ring_with, spawn_waiting_push, Bound, Ledger,
};

/// Capacity 1, id 1 pushed. Producer: `push_with(2).await` (waits for space). Releaser (main):
/// release id 1. The push must complete.
#[test]
fn producer_wait_vs_release() {
    model("producer_wait_vs_release", Bound::Exhaustive, || {
        let ledger = Ledger::new(2);
        let (producer, ring) = ring_with(&ledger, 1, 1, 1);

        let producer_thread = spawn_waiting_push(producer, &ledger, 2);
        release_and_check(&ring, 1);

        let producer = producer_thread.join().unwrap();
        assert_eq!(ring.head(), 2);
        drop_and_check_ledger(&ledger, 2, Some(producer), ring);
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
            let (producer, ring, mut reader) = one_event_pinned(&ledger, true);

            let producer_thread = spawn_waiting_push(producer, &ledger, 2);
            assert_eq!(read_pinned(&mut reader, 1), 1);

            let producer = producer_thread.join().unwrap();
            drop(reader);
            assert_eq!(ring.head(), 2);
            drop_and_check_ledger(&ledger, 2, Some(producer), ring);
        },
    );
}

/// Both at once: the producer needs the release *and* the reader's unpin; whichever comes last
/// must wake it. Three threads, so preemption-bounded.
#[test]
fn producer_wait_vs_release_and_reader() {
    model(
        "producer_wait_vs_release_and_reader",
        Bound::Preemptions(4),
        || {
            let ledger = Ledger::new(2);
            let (producer, ring, mut reader) = one_event_pinned(&ledger, false);

            let producer_thread = spawn_waiting_push(producer, &ledger, 2);
            let releaser = {
                let ring = ring.clone();
                thread::spawn(move || release_and_check(&ring, 1))
            };
            assert_eq!(read_pinned(&mut reader, 1), 1);

            releaser.join().unwrap();
            let producer = producer_thread.join().unwrap();
            drop(reader);
            assert_eq!(ring.head(), 2);
            drop_and_check_ledger(&ledger, 2, Some(producer), ring);
        },
    );
}

/// Capacity 1, id 1 pushed and already released, a reader resumed from 0 pinning it. Producer:
/// `push_with(2).await` (waits for the pin to move). Reader (main): opens a gate, reads id 1, and
/// polls again, which advances the gate's pin past id 1 (docs/design.md, "Draining": "The
/// wake-up"); then, with the gate still open, it waits for the producer's push to complete and
/// reads id 2. Only the advance can wake the producer: the gate's own unpin comes after the wait.
#[test]
fn producer_wait_vs_gate_advance() {
    model("producer_wait_vs_gate_advance", Bound::Exhaustive, || {
        let ledger = Ledger::new(2);
        let (producer, ring, mut reader) = one_event_pinned(&ledger, true);

        let producer_thread = spawn_waiting_push(producer, &ledger, 2);
        let mut gate = reader.gating().unwrap();
        let first = gate.try_read().unwrap().expect("id 1 is pinned");
        check_batch(&first, 1);
        drop(first);
        // Advances the pin from 1 to 2 and wakes the producer; lends id 2 if it is there already.
        let lent = gate.try_read().unwrap().map(|batch| check_batch(&batch, 2));
        let producer = producer_thread.join().unwrap();
        if lent.is_none() {
            let second = gate.try_read().unwrap().expect("id 2 was pushed");
            check_batch(&second, 2);
        }
        drop(gate);
        drop(reader);
        assert_eq!(ring.head(), 2);
        drop_and_check_ledger(&ledger, 2, Some(producer), ring);
    });
}
