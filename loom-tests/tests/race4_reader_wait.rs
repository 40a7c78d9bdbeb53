//! Race 4: a reader waiting for new events must be woken by the push that publishes them. A lost
//! wake-up shows up as a loom deadlock.
#![cfg(replay_ring_loom)]

use loom::future::block_on;
use loom::thread;
use replay_ring_loom_tests::{
    check_batch, drop_and_check_ledger, empty_ring_with_live_reader, maker, model, Bound, Ledger,
};

/// Capacity 2, a live reader at the empty head. Reader thread: `read().await` until it has seen
/// ids 1 and 2 (at most two reads: each returns at least one event). Producer (main): push 1, 2.
#[test]
fn reader_wait_vs_push() {
    model("reader_wait_vs_push", Bound::Exhaustive, || {
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
