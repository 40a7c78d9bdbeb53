//! Race 2b: the producer's pin scan deactivates a reader it finds unpinned (so that readers that
//! read once and stopped cost a push nothing), while that reader pins again.
//!
//! The reader's entry is active and unpinned when the threads start: it read once and has not
//! waited since. Producer: push the next id (its pin scan may clear the reader's active bit), then
//! release the reader's next id and push again, into that id's slot. Reader (main): read once.
//! Whatever the order, a reader that lends its next id must keep it from the second push: its pin
//! must be visited by the second scan, so the reader sets its bit again when it finds it cleared
//! after its pin fence, and a producer that finds the pin when it re-loads it after clearing the
//! bit puts the bit back.
#![cfg(replay_ring_loom)]

use replay_ring::Reader;
use replay_ring_loom_tests::{
    check_batch, maker, model, read_against_a_release_and_reuse, ring_with, Bound, Ev, Ledger,
};

/// Capacity 1. The reader's next id (2) is pushed by the producer thread, so the scan that clears
/// the reader's bit happens-before the reader's pin: the reader must not trust its own record that
/// it is active.
#[test]
fn scan_deactivates_before_the_reader_pins_again() {
    model(
        "scan_deactivates_before_the_reader_pins_again",
        Bound::Exhaustive,
        || deactivate_then_pin(1, 0),
    );
}

/// Capacity 2. The reader's next id (2) is already published, so the reader may pin while the
/// producer's first scan clears its bit and re-loads its pin: either the producer sees the pin and
/// puts the bit back, or the reader sees the cleared bit and sets it again.
#[test]
fn scan_deactivates_while_the_reader_pins() {
    model(
        "scan_deactivates_while_the_reader_pins",
        Bound::Exhaustive,
        || deactivate_then_pin(2, 0),
    );
}

/// As the previous model, with the reader on reader-table entry 2: behind a summary word of the
/// active bitmap (loom builds use two bits per bitmap word and two entries in segment 0; entries 0
/// and 1 belong to readers that never read). The scan takes the summary word before it clears the
/// reader's leaf bit, and keeps it only if the leaf word is still non-zero, so a reader that sets
/// its bit again must set the summary bit too.
#[test]
fn scan_deactivates_while_the_reader_pins_behind_a_summary_word() {
    model(
        "scan_deactivates_while_the_reader_pins_behind_a_summary_word",
        Bound::Exhaustive,
        || deactivate_then_pin(2, 2),
    );
}

/// Id 1 pushed, read by the reader and released (floor 2); with capacity 2, id 2 pushed too.
/// The producer then pushes the next id, releases id 2 and pushes into id 2's slot. `idle` readers
/// that never read are registered first, on the table's first entries.
fn deactivate_then_pin(capacity: usize, idle: usize) {
    {
        let ledger = Ledger::new(4);
        let prepushed = capacity as u64;
        let (mut producer, ring) = ring_with(&ledger, capacity, idle + 1, 1);
        let idle: Vec<_> = (0..idle).map(|_| ring.reader().unwrap()).collect();
        let mut reader = ring.resume(Some(0)).unwrap();
        read_id_1(&mut reader);
        assert_eq!(ring.release_through(1), Ok(2));
        for id in 2..=prepushed {
            assert_eq!(producer.try_push_with(maker(&ledger)).ok(), Some(id));
        }

        read_against_a_release_and_reuse(producer, ring, &ledger, reader, idle);
    }
}

/// Reads the reader's first batch, which must be exactly id 1, and drops it (unpinning).
fn read_id_1(reader: &mut Reader<Ev>) {
    let batch = reader.try_read().unwrap().expect("id 1 is pinned");
    assert_eq!(check_batch(&batch, 1), 1, "read mismatch: id 1 alone");
}
