//! Race 2 (the hazard race): a release advances the floor while a reader starts a replay at the old
//! floor, and the producer wants to reuse the released slot.
#![cfg(replay_ring_loom)]

use loom::thread;
use std::sync::Arc;

use replay_ring::{Producer, ReadError, ReplayRing, ResumeError};
use replay_ring_loom_tests::{
    check_batch, check_cursors, drop_and_check_ledger, maker, model, ring_with, Bound, Ev, Flag,
    Ledger,
};

/// Capacity 2, full before the threads start (ids 1 and 2, floor 1). Releaser: release id 1.
/// Producer: try to push 3 into id 1's slot. Reader (main): resume after id 0, i.e. replay from
/// the floor. Exactly one of three things may happen to id 1: the reader pins it first (the push is
/// refused and the reader reads the original), the release wins (the resume fails with
/// `BelowFloor`), or both happen without overlap. Never: the reader reads id 1's slot while or
/// after the producer writes id 3 there.
#[test]
fn release_vs_replay_at_floor() {
    model("release_vs_replay_at_floor", Bound::Preemptions(4), || {
        hazard(1, 0, 1, false)
    });
}

/// The same race with the replaying reader on reader-table entry 2, in the table's second segment,
/// behind a segment bit and a summary word of the active bitmap (loom builds put two entries in
/// segment 0, a single leaf word with no summary, and use two bits per bitmap word, so segment 1's
/// entries 2–3 and 4–5 are two leaf words under one summary word; entries 0 and 1 belong to idle
/// readers). The producer tries twice, so its second pin scan depends on the first having put back
/// the segment and summary bits it took.
#[test]
fn release_vs_replay_at_floor_behind_summary() {
    model(
        "release_vs_replay_at_floor_behind_summary",
        Bound::Preemptions(3),
        || hazard(4, 2, 2, false),
    );
}

/// The same race with the replaying reader in the table's second segment (loom builds put two
/// entries in segment 0; entries 0 and 1 belong to idle readers) while another thread registers a
/// reader too: whichever of the two registrations comes first installs segment 1, and the other
/// may find it installed and pin before the installer has raised the producer's scan bound. Each
/// registration raises the bound itself, so the producer's pin scan visits the replaying reader.
#[test]
fn release_vs_replay_in_a_segment_another_registration_installs() {
    model(
        "release_vs_replay_in_a_segment_another_registration_installs",
        Bound::Preemptions(3),
        || hazard(4, 2, 1, true),
    );
}

/// A read refused at the floor reports a consistent window. Capacity 4, a live reader at id 1,
/// then id 1 pushed. Producer: push id 2 (no fence: the window has room). Releaser: release
/// through 2 once it sees id 2. Reader (main): one read, which may still see a head of 1. If the
/// release wins, the read is a `Gap` whose snapshot must satisfy `floor <= head + 1`: the reader's
/// floor load synchronizes with the releaser, which saw id 2 before it raised the floor, so the
/// head the reader loads next is at least 2. Nothing else orders them (the producer issues no
/// fence).
#[test]
fn gap_snapshot_after_a_release_by_another_thread() {
    model(
        "gap_snapshot_after_a_release_by_another_thread",
        Bound::Exhaustive,
        || {
            let ledger = Ledger::new(2);
            let (mut producer, ring) = ring_with(&ledger, 4, 1, 0);
            let mut reader = ring.reader().unwrap();
            assert_eq!(producer.try_push_with(maker(&ledger)).ok(), Some(1));

            let (producer_thread, releaser) = push_2_and_release_it(producer, &ring, &ledger);

            match reader.try_read() {
                Ok(Some(batch)) => {
                    check_batch(&batch, 1);
                }
                Ok(None) => panic!("id 1 was pushed before the read"),
                Err(ReadError::Gap { next, floor, head }) => assert!(
                    next == 1 && floor == 3 && floor <= head + 1,
                    "wrong gap: next {next}, floor {floor}, head {head}"
                ),
                Err(e) => panic!("unexpected {e:?}"),
            }
            drop(reader);
            releaser.join().unwrap();
            let producer = producer_thread.join().unwrap();
            drop_and_check_ledger(&ledger, 2, Some(producer), ring);
        },
    );
}

/// A resume refused below the floor reports a consistent window too. Capacity 4, id 1 pushed.
/// Producer: push id 2. Releaser: release through 2 once it sees id 2. Main: resume after id 0,
/// which may still see a head of 1. If the release wins, the refusal's snapshot must satisfy
/// `floor <= head + 1`: `resume`'s floor load synchronizes with the releaser, which saw id 2
/// before it raised the floor, so the head `resume` loads next is at least 2. With a head of 1,
/// a resume after id 1 would be classified a no-op at the head of a window whose floor is 3.
#[test]
fn resume_snapshot_after_a_release_by_another_thread() {
    model(
        "resume_snapshot_after_a_release_by_another_thread",
        Bound::Exhaustive,
        || {
            beside_a_release_by_another_thread(|ring| match ring.resume(Some(0)) {
                Ok(reader) => drop(reader),
                Err(ResumeError::BelowFloor {
                    requested,
                    floor,
                    head,
                }) => assert!(
                    requested == 0 && floor == 3 && floor <= head + 1,
                    "wrong refusal: requested {requested}, floor {floor}, head {head}"
                ),
                Err(e) => panic!("unexpected {e:?}"),
            })
        },
    );
}

/// A metrics snapshot taken while another thread releases is consistent too: `Metrics::collect`
/// loads the floor, then the head, and its floor load synchronizes with the releaser, which saw
/// id 2 before it raised the floor, so a snapshot with floor 3 has a head of at least 2. (An
/// operator's dashboard computing `head + 1 - floor` would underflow otherwise.)
#[test]
fn metrics_snapshot_after_a_release_by_another_thread() {
    model(
        "metrics_snapshot_after_a_release_by_another_thread",
        Bound::Exhaustive,
        || {
            beside_a_release_by_another_thread(|ring| {
                let m = ring.metrics();
                assert!(
                    m.floor <= m.head + 1,
                    "wrong snapshot: floor {}, head {}",
                    m.floor,
                    m.head
                );
            })
        },
    );
}

/// A release that returns another thread's higher floor returns a consistent one: the caller's
/// `fetch_max` reads the releaser's floor 3 and synchronizes with it (its Acquire half), and that
/// releaser saw id 2 before it raised the floor, so the head the caller loads next is at least 2,
/// as `release_through` documents.
#[test]
fn release_result_after_a_release_by_another_thread() {
    model(
        "release_result_after_a_release_by_another_thread",
        Bound::Exhaustive,
        || {
            beside_a_release_by_another_thread(|ring| {
                let floor = ring.release_through(1).unwrap();
                let head = ring.head();
                assert!(
                    floor <= head + 1,
                    "wrong release result: floor {floor}, head {head}"
                );
            })
        },
    );
}

/// Models 2rs, 2rm and 2rr: a ring of capacity 4 holding id 1, the threads of
/// [`push_2_and_release_it`], and `main` on this thread meanwhile; then every event is dropped
/// exactly once.
fn beside_a_release_by_another_thread(main: impl FnOnce(&ReplayRing<Ev>)) {
    let ledger = Ledger::new(2);
    let (producer, ring) = ring_with(&ledger, 4, 1, 1);
    let (producer_thread, releaser) = push_2_and_release_it(producer, &ring, &ledger);
    main(&ring);
    releaser.join().unwrap();
    let producer = producer_thread.join().unwrap();
    drop_and_check_ledger(&ledger, 2, Some(producer), ring);
}

/// Starts the two threads of models 2r, 2rs, 2rm and 2rr: a producer that pushes id 2 (no fence:
/// the window has room) and returns itself, and a releaser that releases through 2 once it sees
/// id 2.
fn push_2_and_release_it(
    mut producer: Producer<Ev>,
    ring: &ReplayRing<Ev>,
    ledger: &Arc<Ledger>,
) -> (thread::JoinHandle<Producer<Ev>>, thread::JoinHandle<()>) {
    let producer_thread = {
        let ledger = ledger.clone();
        thread::spawn(move || {
            assert_eq!(producer.try_push_with(maker(&ledger)).ok(), Some(2));
            producer
        })
    };
    let releaser = {
        let ring = ring.clone();
        thread::spawn(move || {
            if ring.head() >= 2 {
                assert_eq!(ring.release_through(2), Ok(3));
            }
        })
    };
    (producer_thread, releaser)
}

/// `max_readers` entries, `idle` readers registered (and kept) before the threads start,
/// `attempts` push attempts by the producer, and with `registrant` one more thread that registers
/// a reader while the others run.
fn hazard(max_readers: usize, idle: usize, attempts: usize, registrant: bool) {
    {
        let ledger = Ledger::new(3);
        let (mut producer, ring) = ring_with(&ledger, 2, max_readers, 2);
        let _idle: Vec<_> = (0..idle).map(|_| ring.reader().unwrap()).collect();
        let released_1 = Flag::default();

        let releaser = {
            let ring = ring.clone();
            let released_1 = released_1.clone();
            thread::spawn(move || {
                assert_eq!(ring.release_through(1), Ok(2));
                released_1.set();
                check_cursors(&ring);
            })
        };
        let producer_thread = {
            let ledger = ledger.clone();
            thread::spawn(move || {
                // Accepted only if the release is visible and no pin covers id 1.
                for _ in 0..attempts {
                    if producer.try_push_with(maker(&ledger)).is_ok() {
                        break;
                    }
                }
                producer
            })
        };
        let registrant = registrant.then(|| {
            let ring = ring.clone();
            thread::spawn(move || ring.reader().unwrap())
        });
        let started_after_release = released_1.get();
        match ring.resume(Some(0)) {
            Ok(mut reader) => {
                assert!(
                    !started_after_release,
                    "released id returned: a resume started after release_through(1) completed \
                     replays id 1"
                );
                let batch = reader
                    .try_read()
                    .unwrap()
                    .expect("a pinned replay lends events");
                let last = check_batch(&batch, 1);
                assert!(
                    last >= 2,
                    "replay mismatch: replay of 1..=2 stopped at {last}"
                );
            }
            Err(ResumeError::BelowFloor {
                requested, floor, ..
            }) => {
                assert_eq!(
                    (requested, floor),
                    (0, 2),
                    "replay mismatch: wrong BelowFloor"
                );
            }
            Err(e) => panic!("replay mismatch: unexpected {e:?}"),
        }
        check_cursors(&ring);

        releaser.join().unwrap();
        let producer = producer_thread.join().unwrap();
        let registered = registrant.map(|t| t.join().unwrap());
        let head = ring.head();
        drop((_idle, registered));
        drop_and_check_ledger(&ledger, head, Some(producer), ring);
    }
}
