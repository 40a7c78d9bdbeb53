//! Race 8: a reader-table entry freed on one thread and claimed on another. The free list's
//! Release push and Acquire pop order the first owner's use of the entry before the second's:
//! here, the per-entry resume counters, which only their owner writes (a load and a store, no
//! RMW), so a second owner that did not see the first's store would lose a count. Model 8b: the
//! free list's generation tag, which makes a pop that raced with a pop-and-push of the same entry
//! fail its CAS (the ABA problem of a Treiber stack). Model 8w: the metrics walk, which visits
//! every entry handed out so far, beside a registration that initialises a fresh entry: the walk
//! reads an entry only once its `initialised` bit says so, and that bit's Release/Acquire pair
//! orders the entry's initialisation before the walk's read.
#![cfg(replay_ring_loom)]

use loom::thread;
use replay_ring::{ReplayRing, ResumeError, TooManyReaders};
use replay_ring_loom_tests::{drop_and_check_ledger, model, ring_with, Bound, Ledger};

/// Resumes at head 1 and drops the reader: 1 if the resume succeeded, 0 if the entry was taken.
fn resume_at_head<T: Sync>(ring: &ReplayRing<T>) -> u64 {
    match ring.resume(Some(1)) {
        Ok(reader) => {
            drop(reader);
            1
        }
        Err(ResumeError::TooManyReaders(_)) => 0,
        Err(e) => panic!("unexpected {e:?}"),
    }
}

/// One reader entry, id 1 pushed. Two threads each resume at the head (a no-op resume, counted in
/// the entry it claims) and drop the reader; a resume that finds the entry taken is refused. After
/// both, the ring's count of no-op resumes equals the resumes that succeeded.
#[test]
fn an_entry_freed_on_one_thread_is_claimed_on_another() {
    model(
        "an_entry_freed_on_one_thread_is_claimed_on_another",
        Bound::Exhaustive,
        || {
            let ledger = Ledger::new(1);
            let (producer, ring) = ring_with(&ledger, 2, 1, 1);
            let other = {
                let ring = ring.clone();
                thread::spawn(move || resume_at_head(&ring))
            };
            let mine = resume_at_head(&ring);
            let succeeded = mine + other.join().unwrap();
            let counted = ring.metrics().resumes_noop;
            assert_eq!(
                counted, succeeded,
                "lost count: {succeeded} resumes at the head, {counted} counted"
            );
            drop_and_check_ledger(&ledger, 1, Some(producer), ring);
        },
    );
}

/// Two reader entries, both on the free list (entry 1 on top, linked to entry 0). The other thread
/// registers one reader: its claim loads the list's head (entry 1) and its link (entry 0), then
/// CASes. Meanwhile this thread registers two readers (popping entries 1 and 0) and drops the
/// first (pushing entry 1 back, now linked to nothing). The list's head word then names entry 1
/// again, as when the other claim loaded it; only the tag tells the two words apart. Were that
/// CAS to succeed, it would install the stale link to entry 0, which a live reader holds, and a
/// third registration would get entry 0 a second time. So whenever two readers are live on the
/// table of two, a third registration must be refused.
#[test]
fn a_pop_that_raced_with_a_pop_and_push_of_its_entry_fails() {
    model(
        "a_pop_that_raced_with_a_pop_and_push_of_its_entry_fails",
        Bound::Exhaustive,
        || {
            let ledger = Ledger::new(0);
            let (producer, ring) = ring_with(&ledger, 2, 2, 0);
            // Entries 0 and 1 claimed fresh, then freed in that order: the list is 1 -> 0.
            let (first, second) = (ring.reader().unwrap(), ring.reader().unwrap());
            drop(first);
            drop(second);
            let other = {
                let ring = ring.clone();
                // Refused when this thread holds both entries at that moment.
                thread::spawn(move || ring.reader().ok())
            };
            let popped = ring.reader().ok();
            let kept = ring.reader().ok();
            drop(popped);
            let theirs = other.join().unwrap();
            let live = usize::from(kept.is_some()) + usize::from(theirs.is_some());
            let third = ring.reader();
            assert!(
                live < 2 || matches!(third, Err(TooManyReaders { .. })),
                "free list corrupted: a third reader registered beside {live} live on a table of two"
            );
            drop((third, kept, theirs));
            drop_and_check_ledger(&ledger, 0, Some(producer), ring);
        },
    );
}

/// Three reader entries: segment 0 holds two (initialised with the table, both claimed here), so
/// this thread's next registration claims the first entry of segment 1, installing the segment and
/// initialising the entry, while the other thread takes the ring's metrics. The walk meets the
/// fresh index whenever it reads the claim's count of handed-out entries; it must read the entry
/// only if its initialisation happens-before (loom's tracked write reports any other read), and
/// count it active only once claimed. Afterwards the metrics see all three readers.
///
/// The walk runs on the spawned thread on purpose. Loom 0.7.3 compares a write with the last access
/// to its atomic only, so when a thread loads and then writes an atomic that another thread loaded
/// earlier in the schedule loom runs first (here the claim's load and CAS of the fresh-entry
/// count, against the walk's load), it never tries the write before that other load
/// (tokio-rs/loom#166, #392). With the roles swapped, this model ran a single execution.
#[test]
fn a_metrics_walk_beside_a_registration_into_a_fresh_segment() {
    model(
        "a_metrics_walk_beside_a_registration_into_a_fresh_segment",
        Bound::Exhaustive,
        || {
            let (producer, ring) = ReplayRing::<u64>::builder()
                .capacity(2)
                .max_readers(3)
                .loom_model_metrics_walk()
                .build()
                .unwrap();
            let held = (ring.reader().unwrap(), ring.reader().unwrap());
            let walk = {
                let ring = ring.clone();
                thread::spawn(move || ring.metrics().readers_active)
            };
            let third = ring.reader().unwrap();
            let during = walk.join().unwrap();
            assert!(
                (2..=3).contains(&during),
                "metrics walk beside a registration counted {during} active readers"
            );
            assert_eq!(ring.metrics().readers_active, 3);
            drop((held, third, producer, ring));
        },
    );
}
