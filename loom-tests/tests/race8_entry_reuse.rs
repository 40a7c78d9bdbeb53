//! Race 8: a reader-table entry freed on one thread and claimed on another. The free list's
//! Release push and Acquire pop order the first owner's use of the entry before the second's:
//! here, the per-entry resume counters, which only their owner writes (a load and a store, no
//! RMW), so a second owner that did not see the first's store would lose a count.
#![cfg(replay_ring_loom)]

use loom::thread;
use replay_ring::{ReplayRing, ResumeError};
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
