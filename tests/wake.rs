//! Who gets woken, and how often: a parked reader is woken once per wait, a dropped wait (a
//! reader's or the producer's) or reader releases its waker, and readers by the hundred thousand neither slow the producer down nor miss
//! a wake-up.

// Ordinary builds only: a `--cfg replay_ring_loom` build swaps in loom atomics and drops the
// blocking API; its checks are the models in `loom-tests/`.
#![cfg(not(replay_ring_loom))]

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use replay_ring::ReplayRing;

/// A waker that counts its wake-ups.
#[derive(Default)]
struct CountingWaker(AtomicUsize);

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, SeqCst);
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, SeqCst);
    }
}

impl CountingWaker {
    fn new() -> (Arc<CountingWaker>, Waker) {
        let counter = Arc::new(CountingWaker::default());
        let waker = Waker::from(counter.clone());
        (counter, waker)
    }
    fn wakes(&self) -> usize {
        self.0.load(SeqCst)
    }
}

fn poll<F: Future + ?Sized>(future: std::pin::Pin<&mut F>, waker: &Waker) -> Poll<F::Output> {
    future.poll(&mut Context::from_waker(waker))
}

/// Polls `wait` once (it must park), then drops it: the ring holds a clone of `waker` while it
/// waits and releases it with the future.
fn park_then_drop<F: Future>(wait: F, counter: &Arc<CountingWaker>, waker: &Waker) {
    {
        let mut wait = pin!(wait);
        assert!(poll(wait.as_mut(), waker).is_pending(), "the wait parks");
        assert_eq!(
            Arc::strong_count(counter),
            3,
            "ours, `waker`, the ring's clone"
        );
    }
    assert_eq!(Arc::strong_count(counter), 2, "the ring released the waker");
}

#[test]
fn a_parked_reader_is_woken_once_per_wait() {
    let (mut producer, ring) = ReplayRing::<u32>::new(16, 2).unwrap();
    let mut reader = ring.reader().unwrap();
    let (counter, waker) = CountingWaker::new();
    {
        let mut read = pin!(reader.read());
        assert!(poll(read.as_mut(), &waker).is_pending());
        producer.try_push(1).unwrap();
        assert_eq!(counter.wakes(), 1, "the push wakes the parked reader");
        producer.try_push(2).unwrap();
        producer.try_push(3).unwrap();
        assert_eq!(counter.wakes(), 1, "not woken again before it waits again");
        let Poll::Ready(batch) = poll(read.as_mut(), &waker) else {
            panic!("woken with events available")
        };
        assert_eq!(
            batch.unwrap().len(),
            3,
            "a woken reader reads everything published since"
        );
    }
    // Waits again: woken again, once.
    let mut read = pin!(reader.read());
    assert!(poll(read.as_mut(), &waker).is_pending());
    producer.try_push(4).unwrap();
    producer.try_push(5).unwrap();
    assert_eq!(counter.wakes(), 2);
}

#[test]
fn a_read_future_dropped_while_pending_releases_its_waker() {
    let (mut producer, ring) = ReplayRing::<u32>::new(16, 2).unwrap();
    let mut reader = ring.reader().unwrap();
    let (counter, waker) = CountingWaker::new();
    park_then_drop(reader.read(), &counter, &waker);
    producer.try_push(1).unwrap();
    assert_eq!(counter.wakes(), 0, "the abandoned wait is not woken");

    // Still listed from the abandoned wait: the push took it off the list without waking anyone.
    // Reading id 1 and waiting again parks and is woken normally.
    assert_eq!(reader.try_read().unwrap().unwrap().first_id(), 1);
    let (again, waker) = CountingWaker::new();
    let mut read = pin!(reader.read());
    assert!(poll(read.as_mut(), &waker).is_pending());
    producer.try_push(2).unwrap();
    assert_eq!(again.wakes(), 1);
    assert_eq!(counter.wakes(), 0);
}

#[test]
fn a_ready_future_dropped_while_pending_releases_its_waker() {
    let (mut producer, ring) = ReplayRing::<u32>::new(1, 1).unwrap();
    producer.try_push(1).unwrap();
    let (counter, waker) = CountingWaker::new();
    park_then_drop(producer.ready(), &counter, &waker);
    // Waiting again before there is room continues the same wait: one full window, one wait.
    assert!(poll(pin!(producer.ready()).as_mut(), &waker).is_pending());
    assert_eq!(ring.metrics().producer_waits, 1);
    assert_eq!(Arc::strong_count(&counter), 2);
    ring.release_through(1).unwrap();
    assert_eq!(counter.wakes(), 0, "the abandoned waits are not woken");

    // A later wait waits afresh and is woken by the next release.
    producer.try_push(2).unwrap();
    let (again, waker) = CountingWaker::new();
    let mut ready = pin!(producer.ready());
    assert!(poll(ready.as_mut(), &waker).is_pending());
    ring.release_through(2).unwrap();
    assert_eq!(again.wakes(), 1);
    assert!(poll(ready.as_mut(), &waker).is_ready());
    assert_eq!(counter.wakes(), 0);
}

#[test]
fn a_blocking_wait_after_a_dropped_ready_future_counts_as_a_wait_of_its_own() {
    let (mut producer, ring) = ReplayRing::<u32>::new(1, 1).unwrap();
    producer.try_push(1).unwrap();
    let (counter, waker) = CountingWaker::new();
    park_then_drop(producer.ready(), &counter, &waker);
    assert_eq!(ring.metrics().producer_waits, 1);
    assert!(!producer.ready_timeout(Duration::ZERO));
    assert_eq!(ring.metrics().producer_waits, 2);
    assert!(producer.push_timeout(2, Duration::ZERO).is_err());
    assert_eq!(ring.metrics().producer_waits, 3);
    assert_eq!(counter.wakes(), 0);
}

#[test]
fn a_dropped_reader_releases_its_waker_and_its_entry() {
    let (mut producer, ring) = ReplayRing::<u32>::new(16, 1).unwrap();
    let mut reader = ring.reader().unwrap();
    let (counter, waker) = CountingWaker::new();
    assert!(poll(pin!(reader.read()).as_mut(), &waker).is_pending());
    // Even a wait that was not dropped first: dropping the reader releases the waker.
    let mut other_reader = {
        let mut read = Box::pin(reader.read());
        assert!(poll(read.as_mut(), &waker).is_pending());
        std::mem::forget(read); // leak the future: only the reader's drop can release the waker
        drop(reader);
        assert_eq!(
            Arc::strong_count(&counter),
            2,
            "the ring released the waker"
        );
        // The entry is free again, although it may still be on the wait list.
        ring.reader().unwrap()
    };
    let (second, waker) = CountingWaker::new();
    assert!(poll(pin!(other_reader.read()).as_mut(), &waker).is_pending());
    let mut read = pin!(other_reader.read());
    assert!(poll(read.as_mut(), &waker).is_pending());
    producer.try_push(1).unwrap();
    assert_eq!(counter.wakes(), 0);
    assert_eq!(second.wakes(), 1, "the entry's new owner is woken");
    assert!(poll(read.as_mut(), &waker).is_ready());
}

#[test]
fn many_registered_readers_few_parked() {
    const READERS: usize = if cfg!(miri) { 300 } else { 100_000 };
    let (mut producer, ring) = ReplayRing::<u64>::builder()
        .capacity(64)
        .max_readers(READERS)
        .build()
        .unwrap();
    // Pushes work while the table fills up: registration never blocks the producer.
    let mut idle = Vec::with_capacity(READERS);
    for n in 0..READERS - 3 {
        idle.push(ring.reader().unwrap());
        if n % 1_000 == 0 {
            let id = producer.try_push(n as u64).unwrap();
            ring.release_through(id).unwrap();
        }
    }
    // Pushes work with every reader registered and idle.
    for _ in 0..1_000 {
        let id = producer.try_push(0).unwrap();
        ring.release_through(id).unwrap();
    }
    // Three live readers fill the table; then one more is refused.
    let mut parked: Vec<_> = (0..3).map(|_| ring.reader().unwrap()).collect();
    assert_eq!(ring.reader().unwrap_err().limit, READERS);
    assert_eq!(ring.metrics().readers_active, READERS);
    // Move one parked reader to the very first entry (freed and reclaimed: the free list).
    drop(idle.swap_remove(0));
    parked[0] = ring.reader().unwrap();

    // They park; a push wakes each exactly once, a second push wakes nobody again.
    let wakers: Vec<_> = parked.iter().map(|_| CountingWaker::new()).collect();
    let mut reads: Vec<_> = parked.iter_mut().map(|r| Box::pin(r.read())).collect();
    for (read, (_, waker)) in reads.iter_mut().zip(&wakers) {
        assert!(poll(read.as_mut(), waker).is_pending());
    }
    let head = producer.try_push(7).unwrap();
    producer.try_push(8).unwrap();
    for (read, (counter, waker)) in reads.iter_mut().zip(&wakers) {
        assert_eq!(counter.wakes(), 1);
        let Poll::Ready(Ok(batch)) = poll(read.as_mut(), waker) else {
            panic!("a woken reader has events")
        };
        assert_eq!((batch.first_id(), batch.len()), (head, 2));
    }
    drop(reads);

    // Churn: half the idle readers leave and as many register again, through the free list.
    idle.truncate(idle.len() / 2);
    let missing = READERS - 3 - idle.len();
    idle.extend((0..missing).map(|_| ring.reader().unwrap()));
    assert_eq!(ring.metrics().readers_active, READERS);
    assert!(ring.reader().is_err());
    drop(idle);
    assert_eq!(ring.metrics().readers_active, 3);
}

#[test]
fn registration_churn_from_many_threads() {
    const THREADS: usize = 4;
    const ROUNDS: usize = if cfg!(miri) { 50 } else { 20_000 };
    let (mut producer, ring) = ReplayRing::<u64>::new(8, THREADS).unwrap();
    let done = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let ring = ring.clone();
            let done = done.clone();
            std::thread::spawn(move || {
                for _ in 0..ROUNDS {
                    // Each thread holds at most one reader, so a claim can never find the table
                    // full: at least one entry is neither held nor being freed.
                    let mut reader = ring.reader().expect("an entry is free");
                    let batch = reader.try_read();
                    if let Ok(Some(batch)) = batch {
                        assert!(batch.iter().all(|(id, v)| id == *v));
                    }
                }
                done.fetch_add(1, SeqCst);
            })
        })
        .collect();
    let mut id = 0;
    while done.load(SeqCst) < THREADS {
        if let Ok(pushed) = producer.try_push(id + 1) {
            id = pushed;
            ring.release_through(id).unwrap();
        }
        std::thread::yield_now();
    }
    for h in handles {
        h.join().unwrap();
    }
    let m = ring.metrics();
    assert_eq!(m.readers_active, 0);
    let all: Vec<_> = (0..THREADS).map(|_| ring.reader().unwrap()).collect();
    assert_eq!(ring.metrics().readers_active, THREADS);
    drop(all);
}

/// A waker that panics when woken (a bug in someone's executor).
struct PanickingWaker;

impl Wake for PanickingWaker {
    fn wake(self: Arc<Self>) {
        panic!("this waker panics");
    }
}

#[test]
fn a_panicking_waker_does_not_cost_the_other_parked_readers_their_wake_ups() {
    let (mut producer, ring) = ReplayRing::<u32>::new(16, 3).unwrap();
    let mut before = ring.reader().unwrap();
    let mut faulty = ring.reader().unwrap();
    let mut after = ring.reader().unwrap();
    let (before_count, before_waker) = CountingWaker::new();
    let (after_count, after_waker) = CountingWaker::new();
    let panicking = Waker::from(Arc::new(PanickingWaker));
    // Parked in this order, so the faulty reader sits between the two others on the wait list.
    let mut read_before = Box::pin(before.read());
    let mut read_faulty = Box::pin(faulty.read());
    let mut read_after = Box::pin(after.read());
    assert!(poll(read_before.as_mut(), &before_waker).is_pending());
    assert!(poll(read_faulty.as_mut(), &panicking).is_pending());
    assert!(poll(read_after.as_mut(), &after_waker).is_pending());

    // The push publishes, wakes everyone else, then reports the waker's panic.
    let pushed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| producer.try_push(1)));
    assert!(pushed.is_err(), "the waker's panic reaches the pusher");
    assert_eq!(
        ring.head(),
        1,
        "the event was published before the wake-ups"
    );
    assert_eq!((before_count.wakes(), after_count.wakes()), (1, 1));
    for read in [&mut read_before, &mut read_after] {
        let Poll::Ready(Ok(batch)) = poll(read.as_mut(), &before_waker) else {
            panic!("woken with an event available")
        };
        assert_eq!(batch.first_id(), 1);
    }
    drop((read_before, read_after, read_faulty));

    // Nobody is left marked as listed: each reader parks and is woken again.
    let mut reads: Vec<_> = [&mut before, &mut faulty, &mut after]
        .into_iter()
        .map(|r| Box::pin(r.read()))
        .collect();
    let counters: Vec<_> = (0..3).map(|_| CountingWaker::new()).collect();
    for (read, (_, waker)) in reads.iter_mut().zip(&counters) {
        // `before` and `after` still have event 1 to read; their next wait needs it read first.
        if let Poll::Ready(batch) = poll(read.as_mut(), waker) {
            drop(batch);
        }
    }
    drop(reads);
    for reader in [&mut before, &mut faulty, &mut after] {
        while let Ok(Some(batch)) = reader.try_read() {
            drop(batch);
        }
    }
    let mut reads: Vec<_> = [&mut before, &mut faulty, &mut after]
        .into_iter()
        .map(|r| Box::pin(r.read()))
        .collect();
    for (read, (_, waker)) in reads.iter_mut().zip(&counters) {
        assert!(poll(read.as_mut(), waker).is_pending());
    }
    producer.try_push(2).unwrap();
    for (counter, _) in &counters {
        assert_eq!(
            counter.wakes(),
            1,
            "every parked reader is woken by the next push"
        );
    }
}

#[test]
fn a_hundred_thousand_parked_readers_are_each_woken_exactly_once() {
    // Issue #11: readers by the ten thousand, all parked on one ring at once.
    const PARKED: usize = if cfg!(miri) { 100 } else { 100_000 };
    let (mut producer, ring) = ReplayRing::<u64>::builder()
        .capacity(64)
        .max_readers(PARKED)
        .build()
        .unwrap();
    let mut readers: Vec<_> = (0..PARKED).map(|_| ring.reader().unwrap()).collect();
    let counters: Vec<_> = (0..PARKED).map(|_| CountingWaker::new()).collect();
    for round in 1..=3u64 {
        let mut reads: Vec<_> = readers.iter_mut().map(|r| Box::pin(r.read())).collect();
        for (read, (_, waker)) in reads.iter_mut().zip(&counters) {
            assert!(poll(read.as_mut(), waker).is_pending());
        }
        let id = producer.try_push(round).unwrap();
        producer.try_push(round).unwrap();
        for (read, (counter, waker)) in reads.iter_mut().zip(&counters) {
            assert_eq!(counter.wakes() as u64, round, "one wake per wait");
            let Poll::Ready(Ok(batch)) = poll(read.as_mut(), waker) else {
                panic!("a woken reader has events")
            };
            assert_eq!((batch.first_id(), batch.len()), (id, 2));
        }
        drop(reads);
        ring.release_through(id + 1).unwrap();
    }
}

/// A hundred thousand reader tasks on one ring, on a two-worker runtime (most of them parked
/// when the events come): each gets every event, in order, then the close.
#[cfg(all(feature = "tokio", not(miri)))]
#[test]
fn a_hundred_thousand_reader_tasks_each_get_every_event_then_the_close() {
    const TASKS: usize = 100_000;
    const EVENTS: u64 = 20;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let (mut producer, ring) = ReplayRing::<u64>::builder()
        .capacity(64)
        .max_readers(TASKS)
        .build()
        .unwrap();
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let mut reader = ring.reader().unwrap();
            rt.spawn(async move {
                let mut next = 1;
                loop {
                    match reader.read().await {
                        Ok(batch) => {
                            for (id, v) in batch.iter() {
                                assert_eq!((id, *v), (next, next * 10));
                                next += 1;
                            }
                        }
                        Err(replay_ring::ReadError::Closed(reason)) => {
                            return (next - 1, reason.is_completed())
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
            })
        })
        .collect();
    assert_eq!(ring.metrics().readers_active, TASKS);
    rt.block_on(async {
        for n in 1..=EVENTS {
            producer.push(n * 10).await.unwrap();
        }
        producer.close(replay_ring::CloseReason::Completed);
        for task in tasks {
            assert_eq!(task.await.unwrap(), (EVENTS, true));
        }
    });
    assert_eq!(ring.metrics().readers_active, 0);
}

/// Polls `reader.read_coalesced()` once; the length and first id of the batch it lends, if any.
#[cfg(feature = "tokio")]
fn read_coalesced_once(
    reader: &mut replay_ring::Reader<u32>,
    waker: &Waker,
) -> Option<(usize, u64)> {
    let mut read = pin!(reader.read_coalesced());
    match poll(read.as_mut(), waker) {
        Poll::Ready(batch) => {
            let batch = batch.unwrap();
            Some((batch.len(), batch.first_id()))
        }
        Poll::Pending => None,
    }
}

/// A producer, its ring's one reader, and a counting waker with its count.
#[cfg(feature = "tokio")]
type KeepingUp = (
    replay_ring::Producer<u32>,
    replay_ring::Reader<u32>,
    Arc<CountingWaker>,
    Waker,
);

/// A one-reader ring whose reader has read id 1 with `read_coalesced` without parking (so it
/// counts as keeping up), and a counting waker that nothing has woken yet.
#[cfg(feature = "tokio")]
fn keeping_up_reader() -> KeepingUp {
    keeping_up_reader_in(16)
}

/// [`keeping_up_reader`] with a window of `capacity` events.
#[cfg(feature = "tokio")]
fn keeping_up_reader_in(capacity: usize) -> KeepingUp {
    let (mut producer, ring) = ReplayRing::<u32>::new(capacity, 1).unwrap();
    let mut reader = ring.reader().unwrap();
    let (counter, waker) = CountingWaker::new();
    producer.try_push(1).unwrap();
    assert_eq!(read_coalesced_once(&mut reader, &waker), Some((1, 1)));
    assert_eq!(counter.wakes(), 0, "events were there: no yield");
    (producer, reader, counter, waker)
}

/// `read_coalesced`: a reader that keeps up with the producer yields (outside a runtime, a yield
/// is a self-wake) while each yield brings new events, and reads once one brought nothing; with
/// nothing at all, it parks after that one yield. A reader woken from a park does not yield.
#[cfg(feature = "tokio")]
#[test]
fn read_coalesced_yields_while_events_arrive_and_not_after_a_park() {
    let (mut producer, mut reader, counter, waker) = keeping_up_reader();

    // Caught up after a read that did not park: the first poll yields and is not on the wait list.
    {
        let mut read = pin!(reader.read_coalesced());
        assert!(poll(read.as_mut(), &waker).is_pending());
        assert_eq!(counter.wakes(), 1, "the yield wakes its own task");
        producer.try_push(2).unwrap();
        producer.try_push(3).unwrap();
        assert_eq!(
            counter.wakes(),
            1,
            "a yielding reader is not parked: pushes wake nobody"
        );
        assert!(
            poll(read.as_mut(), &waker).is_pending(),
            "two events arrived during the yield: fewer than the target, so it yields again"
        );
        assert_eq!(counter.wakes(), 2);
        let Poll::Ready(batch) = poll(read.as_mut(), &waker) else {
            panic!("a yield that brought nothing ends the yields")
        };
        let batch = batch.unwrap();
        assert_eq!((batch.len(), batch.first_id()), (2, 2));
    }

    // Still keeping up; caught up again and nothing arrives: one yield, then it parks.
    {
        let mut read = pin!(reader.read_coalesced());
        assert!(poll(read.as_mut(), &waker).is_pending());
        assert_eq!(counter.wakes(), 3, "yielded once");
        assert!(poll(read.as_mut(), &waker).is_pending());
        assert_eq!(
            counter.wakes(),
            3,
            "the second poll parks instead of yielding again"
        );
        producer.try_push(4).unwrap();
        assert_eq!(counter.wakes(), 4, "the push wakes the parked reader");
        let Poll::Ready(batch) = poll(read.as_mut(), &waker) else {
            panic!("woken with an event available")
        };
        assert_eq!(batch.unwrap().first_id(), 4);
    }

    // Woken from a park: the next wait parks at once.
    let mut read = pin!(reader.read_coalesced());
    assert!(poll(read.as_mut(), &waker).is_pending());
    assert_eq!(counter.wakes(), 4, "no yield after a park");
    producer.try_push(5).unwrap();
    assert_eq!(
        counter.wakes(),
        5,
        "parked on the first poll, woken by the push"
    );
    let Poll::Ready(batch) = poll(read.as_mut(), &waker) else {
        panic!("woken with an event available")
    };
    assert_eq!(batch.unwrap().first_id(), 5);
}

/// `read_coalesced` under a producer that publishes one event per scheduler turn: it yields at
/// most `COALESCE_MAX_YIELDS` times, then lends everything that arrived.
#[cfg(feature = "tokio")]
#[test]
fn read_coalesced_stops_yielding_after_its_maximum() {
    use replay_ring::COALESCE_MAX_YIELDS;
    let (mut producer, mut reader, counter, waker) = keeping_up_reader();
    let mut read = pin!(reader.read_coalesced());
    for turn in 1..=COALESCE_MAX_YIELDS as usize {
        assert!(poll(read.as_mut(), &waker).is_pending());
        assert_eq!(counter.wakes(), turn, "yield {turn}");
        producer.try_push(turn as u32 + 1).unwrap();
    }
    let Poll::Ready(batch) = poll(read.as_mut(), &waker) else {
        panic!("after {COALESCE_MAX_YIELDS} yields it reads")
    };
    let batch = batch.unwrap();
    assert_eq!(
        (batch.len(), batch.first_id()),
        (COALESCE_MAX_YIELDS as usize, 2)
    );
    assert_eq!(counter.wakes(), COALESCE_MAX_YIELDS as usize);
}

/// `read_coalesced` reads at once, without yielding, when `COALESCE_TARGET` events are ready, and
/// stops yielding as soon as a yield brings the batch to the target.
#[cfg(feature = "tokio")]
#[test]
fn read_coalesced_reads_at_once_when_the_target_is_ready() {
    use replay_ring::COALESCE_TARGET;
    let (mut producer, mut reader, counter, waker) = keeping_up_reader_in(64);

    // A full target ready: no yield.
    for v in 0..COALESCE_TARGET as u32 {
        producer.try_push(v).unwrap();
    }
    assert_eq!(
        read_coalesced_once(&mut reader, &waker),
        Some((COALESCE_TARGET as usize, 2))
    );
    assert_eq!(counter.wakes(), 0, "the target was ready: no yield");

    // One short of it: one yield, during which the last one arrives.
    for v in 1..COALESCE_TARGET as u32 {
        producer.try_push(v).unwrap();
    }
    let mut read = pin!(reader.read_coalesced());
    assert!(poll(read.as_mut(), &waker).is_pending());
    assert_eq!(counter.wakes(), 1);
    producer.try_push(0).unwrap();
    let Poll::Ready(batch) = poll(read.as_mut(), &waker) else {
        panic!("the target is ready after the yield")
    };
    assert_eq!(batch.unwrap().len(), COALESCE_TARGET as usize);
    assert_eq!(counter.wakes(), 1, "one yield only");
}

/// A stream closed while `read_coalesced` yields: what was published before the close is lent,
/// then the read reports the close; with nothing left, the yield loop itself reports it.
#[cfg(feature = "tokio")]
#[test]
fn read_coalesced_reports_a_close_that_comes_during_its_yields() {
    use replay_ring::{CloseReason, ReadError};
    let (mut producer, mut reader, counter, waker) = keeping_up_reader();
    {
        let mut read = pin!(reader.read_coalesced());
        assert!(poll(read.as_mut(), &waker).is_pending(), "yields");
        producer.try_push(2).unwrap();
        producer.close(CloseReason::Completed);
        assert!(
            poll(read.as_mut(), &waker).is_pending(),
            "an event came: yields again"
        );
        let Poll::Ready(batch) = poll(read.as_mut(), &waker) else {
            panic!("nothing came during the second yield: it reads")
        };
        let batch = batch.unwrap();
        assert_eq!((batch.len(), batch.first_id()), (1, 2));
    }
    assert_eq!(counter.wakes(), 2);
    let mut read = pin!(reader.read_coalesced());
    assert_eq!(
        poll(read.as_mut(), &waker).map(|r| r.map(|b| b.len())),
        Poll::Ready(Err(ReadError::Closed(CloseReason::Completed))),
        "closed with nothing left: no yield"
    );
    assert_eq!(counter.wakes(), 2);
}

/// In a window smaller than twice `COALESCE_TARGET`, the target is half the window: a reader that
/// keeps up does not wait for more events than the producer can push before it must wait for
/// releases.
#[cfg(feature = "tokio")]
#[test]
fn read_coalesced_in_a_small_window_waits_for_at_most_half_of_it() {
    let (mut producer, mut reader, counter, waker) = keeping_up_reader_in(8);
    producer.ring().release_through(1).unwrap();
    for v in 2..=5 {
        producer.try_push(v).unwrap();
    }
    assert_eq!(
        read_coalesced_once(&mut reader, &waker),
        Some((4, 2)),
        "half the window of 8 is ready: read at once"
    );
    assert_eq!(counter.wakes(), 0, "no yield");
}

/// A wait that parked and was then dropped (a `select!` whose other branch won) does not make the
/// next `read_coalesced` yield: only reads that never parked count as keeping up.
#[cfg(feature = "tokio")]
#[test]
fn read_coalesced_after_a_dropped_parked_wait_parks_at_once() {
    let (_producer, mut reader, counter, waker) = keeping_up_reader();
    {
        let mut read = pin!(reader.read_coalesced());
        assert!(poll(read.as_mut(), &waker).is_pending(), "yields");
        assert!(poll(read.as_mut(), &waker).is_pending(), "parks");
    }
    assert_eq!(counter.wakes(), 1, "only the yield woke the task");
    assert_eq!(read_coalesced_once(&mut reader, &waker), None);
    assert_eq!(counter.wakes(), 1, "parked at once: no second yield");
}

/// Plain `read` never yields, also for a reader that keeps up.
#[test]
fn read_parks_at_once_even_when_keeping_up() {
    let (mut producer, ring) = ReplayRing::<u32>::new(16, 1).unwrap();
    let mut reader = ring.reader().unwrap();
    let (counter, waker) = CountingWaker::new();
    producer.try_push(1).unwrap();
    {
        let mut read = pin!(reader.read());
        assert!(poll(read.as_mut(), &waker).is_ready());
    }
    let mut read = pin!(reader.read());
    assert!(poll(read.as_mut(), &waker).is_pending());
    assert_eq!(counter.wakes(), 0, "registered, not yielded");
    producer.try_push(2).unwrap();
    assert_eq!(counter.wakes(), 1, "the push wakes the parked reader");
}

/// A read dropped during its yield consumes nothing: the next read lends the same events.
#[cfg(feature = "tokio")]
#[test]
fn a_read_dropped_while_yielding_loses_nothing() {
    let (mut producer, mut reader, counter, waker) = keeping_up_reader();
    assert_eq!(read_coalesced_once(&mut reader, &waker), None, "yields");
    assert_eq!(counter.wakes(), 1);
    producer.try_push(2).unwrap();
    producer.try_push(3).unwrap();
    let mut read = pin!(reader.read_coalesced());
    assert!(poll(read.as_mut(), &waker).is_pending(), "yields again");
    let Poll::Ready(batch) = poll(read.as_mut(), &waker) else {
        panic!("nothing arrived during the yield: it reads")
    };
    let batch = batch.unwrap();
    assert_eq!((batch.len(), batch.first_id()), (2, 2));
}

/// A tokio task chasing a producer on another thread with `read_coalesced` gets every event
/// exactly once, in order.
#[cfg(feature = "tokio")]
#[test]
fn a_chasing_task_on_a_multi_thread_runtime_gets_every_event_in_order() {
    const EVENTS: u64 = 200_000;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let (mut producer, ring) = ReplayRing::<u64>::new(64, 1).unwrap();
    let mut reader = ring.reader().unwrap();
    let releaser = ring.clone();
    let task = rt.spawn(async move {
        let mut next = 1;
        while next <= EVENTS {
            let batch = reader.read_coalesced().await.unwrap();
            for (id, v) in batch.iter() {
                assert_eq!((id, *v), (next, next * 3));
                next += 1;
            }
            drop(batch);
            releaser.release_through(next - 1).unwrap();
        }
        next - 1
    });
    rt.block_on(async {
        for i in 1..=EVENTS {
            assert_eq!(producer.push(i * 3).await.unwrap(), i);
        }
    });
    assert_eq!(rt.block_on(task).unwrap(), EVENTS);
}

/// A waker that, when the reader registers it (the wait list clones it), first has the producer
/// publish an event: the wait then ends on its own re-check, with its entry already listed.
struct PushOnRegister {
    producer: std::sync::Mutex<replay_ring::Producer<u32>>,
    armed: std::sync::atomic::AtomicBool,
    wakes: AtomicUsize,
}

static PUSH_ON_REGISTER: std::task::RawWakerVTable = std::task::RawWakerVTable::new(
    push_on_register_clone,
    push_on_register_wake,
    push_on_register_wake,
    |_| {},
);

fn push_on_register(state: &'static PushOnRegister) -> std::task::RawWaker {
    std::task::RawWaker::new(std::ptr::from_ref(state).cast(), &PUSH_ON_REGISTER)
}

/// # Safety
///
/// `data` must come from `push_on_register`: a `&'static PushOnRegister`.
unsafe fn push_on_register_clone(data: *const ()) -> std::task::RawWaker {
    // SAFETY: see the function's contract; the state is leaked, so it outlives every waker.
    let state: &'static PushOnRegister = unsafe { &*data.cast() };
    if state.armed.swap(false, SeqCst) {
        state.producer.lock().unwrap().try_push(1).unwrap();
    }
    push_on_register(state)
}

/// # Safety
///
/// As for `push_on_register_clone`.
unsafe fn push_on_register_wake(data: *const ()) {
    // SAFETY: as in `push_on_register_clone`.
    let state: &PushOnRegister = unsafe { &*data.cast() };
    state.wakes.fetch_add(1, SeqCst);
}

#[test]
fn a_wait_that_ends_on_its_re_check_is_not_woken_by_the_next_push() {
    let (producer, ring) = ReplayRing::<u32>::new(16, 1).unwrap();
    let mut reader = ring.reader().unwrap();
    let state: &'static PushOnRegister = Box::leak(Box::new(PushOnRegister {
        producer: std::sync::Mutex::new(producer),
        armed: std::sync::atomic::AtomicBool::new(true),
        wakes: AtomicUsize::new(0),
    }));
    // SAFETY: the vtable's functions uphold the `RawWaker` contract for a `'static` state.
    let waker = unsafe { Waker::from_raw(push_on_register(state)) };
    {
        let mut read = pin!(reader.read());
        let Poll::Ready(batch) = poll(read.as_mut(), &waker) else {
            panic!("the event published while the reader registered is found on the re-check")
        };
        assert_eq!(batch.unwrap().first_id(), 1);
    }
    assert!(!state.armed.load(SeqCst), "the reader registered its waker");
    state.producer.lock().unwrap().try_push(2).unwrap();
    assert_eq!(
        state.wakes.load(SeqCst),
        0,
        "the push that finds the entry still listed wakes nobody"
    );
    {
        let mut read = pin!(reader.read());
        let Poll::Ready(batch) = poll(read.as_mut(), &waker) else {
            panic!("id 2 is available")
        };
        assert_eq!(batch.unwrap().first_id(), 2);
    }
    // The entry is off the list now: the reader parks, lists itself again and is woken as usual.
    let mut read = pin!(reader.read());
    assert!(poll(read.as_mut(), &waker).is_pending());
    state.producer.lock().unwrap().try_push(3).unwrap();
    assert_eq!(state.wakes.load(SeqCst), 1, "the parked reader is woken");
    let Poll::Ready(batch) = poll(read.as_mut(), &waker) else {
        panic!("id 3 is available")
    };
    assert_eq!(batch.unwrap().first_id(), 3);
}
