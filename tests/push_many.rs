//! `Producer::try_push_many`: one publish for a run of events.

// Ordinary builds only: a `--cfg replay_ring_loom` build swaps in loom atomics and drops the
// blocking API; its checks are the models in `loom-tests/`.
#![cfg(not(replay_ring_loom))]

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use replay_ring::ReplayRing;

#[test]
fn a_run_stops_at_a_full_window_and_keeps_the_rest() {
    let (mut producer, ring) = ReplayRing::<u64>::new(8, 1).unwrap();
    let mut values = 1..=20u64;
    assert_eq!(producer.try_push_many(&mut values), 8);
    assert_eq!(
        values.next(),
        Some(9),
        "the value that did not fit was not taken"
    );
    assert_eq!(producer.next_id(), 9);
    assert_eq!(producer.try_push_many(&mut values), 0, "still full");
    ring.release_through(3).unwrap();
    assert_eq!(producer.try_push_many(&mut values), 3);
    assert_eq!(ring.head(), 11);
    let mut reader = ring.resume(Some(3)).unwrap();
    let batch = reader.try_read().unwrap().unwrap();
    let seen: Vec<_> = batch.iter().map(|(id, v)| (id, *v)).collect();
    // Ids 4..=8 hold 4..=8; ids 9..=11 hold the values 10..=12 (9 was taken by the test).
    let expected: Vec<_> = (4..=8)
        .map(|i| (i, i))
        .chain((9..=11).map(|i| (i, i + 1)))
        .collect();
    assert_eq!(seen, expected);
}

#[test]
fn a_run_the_full_window_refused_counts_as_a_refusal() {
    let (mut producer, ring) = ReplayRing::<u64>::new(4, 1).unwrap();
    let full = |ring: &ReplayRing<u64>| ring.metrics().producer_full;
    // Exactly filling the window refuses nothing: the iterator says it is empty.
    assert_eq!(producer.try_push_many(&mut (1..=4u64)), 4);
    assert_eq!(full(&ring), 0);
    // Nothing to append on a full window is not a refusal either.
    assert_eq!(producer.try_push_many(&mut std::iter::empty()), 0);
    assert_eq!(full(&ring), 0);
    // A run refused whole counts once, as a refused `try_push` does.
    assert_eq!(producer.try_push_many(&mut (5..=6u64)), 0);
    assert_eq!(full(&ring), 1);
    // So does one refused whole whose length is unknown.
    let mut unknown = (5..=6u64).filter(|_| true);
    assert_eq!(producer.try_push_many(&mut unknown), 0);
    assert_eq!(full(&ring), 2);
    // A run cut short with values left counts once.
    ring.release_through(2).unwrap();
    let mut values = vec![5u64, 6, 7].into_iter();
    assert_eq!(producer.try_push_many(&mut values), 2);
    assert_eq!(values.len(), 1);
    assert_eq!(full(&ring), 3);
    assert!(producer.try_push(8).unwrap_err().is_full());
    assert_eq!(full(&ring), 4, "and the refused push after it once more");
}

#[test]
fn an_empty_iterator_publishes_nothing() {
    let (mut producer, ring) = ReplayRing::<u64>::new(8, 1).unwrap();
    assert_eq!(producer.try_push_many(&mut std::iter::empty()), 0);
    assert_eq!((ring.head(), producer.next_id()), (0, 1));
}

#[derive(Default)]
struct CountingWaker(AtomicUsize);

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, SeqCst);
    }
}

#[test]
fn a_run_wakes_a_parked_reader_once_and_lends_it_whole() {
    let (mut producer, ring) = ReplayRing::<u64>::new(64, 1).unwrap();
    let mut reader = ring.reader().unwrap();
    let counter = Arc::new(CountingWaker::default());
    let waker = Waker::from(counter.clone());
    let mut read = pin!(reader.read());
    assert!(read
        .as_mut()
        .poll(&mut Context::from_waker(&waker))
        .is_pending());
    assert_eq!(producer.try_push_many(&mut (1..=10u64)), 10);
    assert_eq!(counter.0.load(SeqCst), 1);
    let Poll::Ready(Ok(batch)) = read.as_mut().poll(&mut Context::from_waker(&waker)) else {
        panic!("woken with events")
    };
    assert_eq!((batch.first_id(), batch.len()), (1, 10));
}

#[test]
fn a_panicking_iterator_publishes_what_was_written() {
    let (mut producer, ring) = ReplayRing::<u64>::new(8, 1).unwrap();
    let mut n = 0u64;
    let mut values = std::iter::from_fn(|| {
        n += 1;
        assert!(n <= 3, "source failed");
        Some(n * 10)
    });
    let result = catch_unwind(AssertUnwindSafe(|| producer.try_push_many(&mut values)));
    assert!(result.is_err());
    assert_eq!((ring.head(), producer.next_id()), (3, 4));
    let mut reader = ring.resume(Some(0)).unwrap();
    let batch = reader.try_read().unwrap().unwrap();
    assert_eq!(batch.as_slices().0, &[10, 20, 30]);
}

#[test]
fn runs_race_a_reader_across_wrap_around() {
    const EVENTS: u64 = if cfg!(miri) { 300 } else { 200_000 };
    let (mut producer, ring) = ReplayRing::<u64>::new(64, 1).unwrap();
    let mut reader = ring.reader().unwrap();
    let reader_ring = ring.clone();
    let consumer = std::thread::spawn(move || {
        let mut next = 1;
        while next <= EVENTS {
            if let Some(batch) = reader.read_timeout(Duration::from_secs(10)).unwrap() {
                for (id, v) in batch.iter() {
                    assert_eq!((id, *v), (next, next), "order or payload");
                    next += 1;
                }
                let last = batch.last_id();
                drop(batch);
                reader_ring.release_through(last).unwrap();
            }
        }
    });
    let mut run = 1u64;
    while producer.next_id() <= EVENTS {
        // Runs of 1..=37 values; what does not fit stays in the iterator, so rebuild it from
        // `next_id()` each time.
        let next = producer.next_id();
        let mut chunk = next..=EVENTS.min(next + run - 1);
        if producer.try_push_many(&mut chunk) == 0 {
            assert!(producer.ready_timeout(Duration::from_secs(10)));
        }
        run = run % 37 + 1;
    }
    consumer.join().unwrap();
    assert_eq!(ring.head(), EVENTS);
}
