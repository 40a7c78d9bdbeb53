//! Race 2c: a reader that sets its active bits while the producer's pin scan takes them.
//!
//! The reader is registered but has never read, so its leaf, summary and segment bits are set by
//! its first read, concurrently with the producer's first scan: that scan may take one of the
//! reader's bits at some level while it misses the bits below (its fence comes before the
//! reader's, so nothing orders those writes before its loads). Only the Acquire take
//! synchronizing with the reader's Release set makes it see them, keep the bit, and so let the
//! second scan, after a release past the reader's pin, find the pin. Models 2 and 2b start with
//! the reader's bits set, so their scans never race with the sets.
//!
//! Capacity 2; ids 1 and 2 pushed and id 1 released before the threads start. Producer: push 3
//! (first scan), release through 2, push 4 (second scan; id 4 reuses id 2's slot). Reader (main):
//! one read, of id 2.
#![cfg(replay_ring_loom)]

use loom::thread;
use replay_ring_loom_tests::{
    check_batch, drop_and_check_ledger, maker, model, read_against_a_release_and_reuse, ring_with,
    Bound, Ledger,
};

/// The reader on table entry 2, in the table's second segment (loom builds put two entries in
/// segment 0; entries 0 and 1 belong to idle readers): the first scan may take its segment bit
/// without seeing its summary bit.
#[test]
fn first_read_behind_a_segment_bit() {
    model("first_read_behind_a_segment_bit", Bound::Exhaustive, || {
        first_read_while_the_producer_scans(false)
    });
}

/// As above, with a second reader in the same segment (entry 4, another leaf word) that read id 1
/// before the threads start and so is active and unpinned: the segment bit is set before the
/// reader sets its own, and the first scan, synchronizing with the other reader's set, may take
/// the reader's summary bit without seeing its leaf bit.
#[test]
fn first_read_behind_a_summary_bit() {
    model(
        "first_read_behind_a_summary_bit",
        Bound::Preemptions(3),
        || first_read_while_the_producer_scans(true),
    );
}

/// A registration's first pin beside an active reader in the same leaf word. The producer's scan
/// may take the segment and summary bits the other reader set, then load a leaf word that already
/// holds the new entry's bit: only the new reader's Release set of its leaf bit, read by the
/// scan's Acquire load, orders the entry's initialisation (written by the registration that
/// claimed it) before the scan reads its pin.
///
/// Capacity 2, ids 1 and 2 pushed; entries 0 and 1 held by idle readers; a replay from id 1 holds
/// entry 2 (leaf word 0 of the second segment), and id 1 is released. Producer: push 3, whose
/// scan must find the replay's pin, so the push is refused. Main: resume after id 1, which claims
/// the fresh entry 3 (same leaf word), initialises it and pins id 2.
#[test]
fn a_fresh_entry_beside_an_active_one_in_its_leaf_word() {
    model(
        "a_fresh_entry_beside_an_active_one_in_its_leaf_word",
        Bound::Exhaustive,
        || {
            let ledger = Ledger::new(3);
            let (mut producer, ring) = ring_with(&ledger, 2, 4, 2);
            let idle: Vec<_> = (0..2).map(|_| ring.reader().unwrap()).collect();
            let replay = ring.resume(Some(0)).unwrap();
            assert_eq!(ring.release_through(1), Ok(2));

            let producer_thread = {
                let ledger = ledger.clone();
                thread::spawn(move || {
                    let pushed = producer.try_push_with(maker(&ledger)).is_ok();
                    (producer, pushed)
                })
            };
            drop(ring.resume(Some(1)).unwrap());
            let (producer, pushed) = producer_thread.join().unwrap();
            assert!(!pushed, "id 3 reused id 1's slot while the replay held it");
            drop(replay);
            drop(idle);
            drop_and_check_ledger(&ledger, 2, Some(producer), ring);
        },
    );
}

fn first_read_while_the_producer_scans(other_active: bool) {
    let ledger = Ledger::new(4);
    let readers = if other_active { 5 } else { 3 };
    let (mut producer, ring) = ring_with(&ledger, 2, readers, 1);
    let mut idle: Vec<_> = (0..2).map(|_| ring.reader().unwrap()).collect();
    // Entry 2: registered at the head (id 1), never read, so not active.
    let reader = ring.reader().unwrap();
    if other_active {
        // Entry 3 never reads; entry 4 reads id 1 and stops: active, unpinned.
        idle.push(ring.reader().unwrap());
        let mut other = ring.resume(Some(0)).unwrap();
        check_batch(&other.try_read().unwrap().unwrap(), 1);
        idle.push(other);
    }
    assert_eq!(ring.release_through(1), Ok(2));
    assert_eq!(producer.try_push_with(maker(&ledger)).ok(), Some(2));

    read_against_a_release_and_reuse(producer, ring, &ledger, reader, idle);
}
