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
use replay_ring::ReadError;
use replay_ring_loom_tests::{
    check_batch, drop_and_check_ledger, maker, model, read_against_a_release_and_reuse,
    read_against_a_release_and_reuse_beside, ring_with, Bound, Ledger,
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

/// The scan's put-backs and clears are RMWs (model 2cp, 2cq, 2cd): a reader's first read while
/// the producer's first scan writes back a word the reader sets a bit in. Written as a load and a
/// store, the scan's write could erase the reader's bit, set between the two, and the second scan
/// would then skip the reader's pin. Capacity 4 for 2cp and 2cq, so that a replay can pin id 4
/// and keep its word's bit set through the scans without holding back the pushes; ids 1 to 4
/// pushed, id 1 released; the reader on entry 2 registered when the head was 1 and never read.
///
/// 2cp: the replay on entry 4 (leaf word 1 of the second segment, under the same summary word as
/// the reader's leaf word 0): the first scan puts back the summary bit of word 1.
#[test]
fn first_read_while_the_scan_puts_back_a_summary_word() {
    model(
        "first_read_while_the_scan_puts_back_a_summary_word",
        Bound::Preemptions(3),
        || first_read_beside_a_replay_of_id_4(5, 4),
    );
}

/// 2cq: the replay on entry 6, in the third segment: the first scan puts back the third
/// segment's bit in `active_segments`, the word the reader sets its segment bit in.
#[test]
fn first_read_while_the_scan_puts_back_the_segment_bits() {
    model(
        "first_read_while_the_scan_puts_back_the_segment_bits",
        Bound::Preemptions(3),
        || first_read_beside_a_replay_of_id_4(7, 6),
    );
}

/// 2cd: capacity 2, as model 2c, with a reader on entry 3 (the reader's own leaf word) that read
/// id 1 before the threads start, so is active and unpinned: the first scan clears its bit in the
/// word the reader sets its leaf bit in.
#[test]
fn first_read_while_the_scan_clears_its_leaf_word() {
    model(
        "first_read_while_the_scan_clears_its_leaf_word",
        Bound::Preemptions(3),
        || first_read_beside_an_idle_reader_on_entry_3(false),
    );
}

/// Models 2cp and 2cq: a table of `entries`, every entry but the reader's (2) and the replay's
/// (`replay_entry`, the last) held by a reader that never reads.
fn first_read_beside_a_replay_of_id_4(entries: usize, replay_entry: usize) {
    let ledger = Ledger::new(6);
    let (mut producer, ring) = ring_with(&ledger, 4, entries, 1);
    let mut others: Vec<_> = (0..2).map(|_| ring.reader().unwrap()).collect();
    // Entry 2: registered at the head (id 1), never read, so not active.
    let reader = ring.reader().unwrap();
    for _ in 3..replay_entry {
        others.push(ring.reader().unwrap());
    }
    for id in 2..=4 {
        assert_eq!(producer.try_push_with(maker(&ledger)).ok(), Some(id));
    }
    // Pins id 4: its word keeps a bit set through every scan, and the pushes of 5 and 6 (into the
    // slots of ids 1 and 2) stay below it.
    others.push(ring.resume(Some(3)).unwrap());
    assert_eq!(ring.release_through(1), Ok(2));
    read_against_a_release_and_reuse(producer, ring, &ledger, reader, others);
}

/// 2cr: as 2cd, with the idle reader on entry 3 reading again, on a third thread, while the
/// producer's first scan runs. That scan clears entry 3's bit, finds its reader pinned again, and
/// puts the bit back while the reader on entry 2 may be setting its own bit in the same word:
/// only a put-back that is a read-modify-write keeps both bits, and so lets the second scan find
/// the reader on entry 2 pinned at id 2.
#[test]
fn first_read_while_the_scan_restores_a_pinned_bit() {
    model(
        "first_read_while_the_scan_restores_a_pinned_bit",
        Bound::Preemptions(3),
        || first_read_beside_an_idle_reader_on_entry_3(true),
    );
}

/// Models 2cd and 2cr: capacity 2; entries 0 and 1 held by readers that never read; the reader
/// on entry 2 registered at the head (id 1) and never read, so not active; the reader on entry 3
/// read id 1 and stopped, so active and unpinned; then id 1 released and id 2 pushed. With
/// `read_again`, the reader on entry 3 reads id 2 on a third thread while the producer scans.
fn first_read_beside_an_idle_reader_on_entry_3(read_again: bool) {
    let ledger = Ledger::new(4);
    let (mut producer, ring) = ring_with(&ledger, 2, 4, 1);
    let mut others: Vec<_> = (0..2).map(|_| ring.reader().unwrap()).collect();
    let reader = ring.reader().unwrap();
    let mut idle = ring.resume(Some(0)).unwrap();
    check_batch(&idle.try_read().unwrap().unwrap(), 1);
    assert_eq!(ring.release_through(1), Ok(2));
    assert_eq!(producer.try_push_with(maker(&ledger)).ok(), Some(2));
    let beside = if read_again {
        Some(thread::spawn(move || {
            match idle.try_read() {
                Ok(Some(batch)) => {
                    check_batch(&batch, 2);
                }
                // Released before the pin was validated.
                Ok(None) | Err(ReadError::Gap { .. }) => {}
                Err(e) => panic!("read mismatch: unexpected {e:?}"),
            }
            idle
        }))
    } else {
        others.push(idle);
        None
    };
    read_against_a_release_and_reuse_beside(producer, ring, &ledger, reader, others, beside);
}
