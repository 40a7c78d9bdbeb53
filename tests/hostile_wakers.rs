//! Wakers are executor code the ring calls. One whose `clone`, `wake` or `drop` panics gets its
//! panic back, and leaves nothing broken behind it: not the table entry it used (which the next
//! reader reuses), not the producer's wake-ups. And a panic that interrupts the handling of a
//! batch on a thread that was already unwinding consumes only what was handled.

// Ordinary builds only: a `--cfg replay_ring_loom` build swaps in loom's wakers.
#![cfg(not(replay_ring_loom))]

use std::future::Future;
use std::ops::ControlFlow;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, RawWaker, RawWakerVTable, Wake, Waker};

use replay_ring::{Reader, ReplayRing};

fn poll<F: Future + ?Sized>(f: Pin<&mut F>, waker: &Waker) -> Poll<F::Output> {
    f.poll(&mut Context::from_waker(waker))
}

/// Counts its wakes. Relaxed (the increment and every load): these tests spawn no thread and the
/// ring calls a waker synchronously, inside the push or release that wakes it, so each wake is
/// sequenced before the load that checks it on the same thread; the count guards no other data.
struct Counting(AtomicUsize);

impl Wake for Counting {
    fn wake(self: Arc<Self>) {
        // Relaxed: see `Counting`.
        self.0.fetch_add(1, Relaxed);
    }
}

fn counting() -> (Arc<Counting>, Waker) {
    let c = Arc::new(Counting(AtomicUsize::new(0)));
    (c.clone(), Waker::from(c))
}

// A waker whose `clone`, `wake` and `drop` panic while their flag is set.
//
// Relaxed (every access of the flags): a test sets a flag, the ring calls the waker, which reads
// it, and the test clears it, all on the test's own thread (no thread is spawned here, and the
// ring calls wakers synchronously from the poll, push, release or drop that uses them), so
// program order orders them. Across tests, the flags are used only while `serial()`'s mutex is
// held, and its unlock and the next lock order one test's last store before the next test's
// first access. No other data is published through a flag, so SeqCst would add nothing.
static CLONE_PANICS: AtomicBool = AtomicBool::new(false);
static WAKE_PANICS: AtomicBool = AtomicBool::new(false);
static DROP_PANICS: AtomicBool = AtomicBool::new(false);

/// The hostile waker's `clone`: panics while `CLONE_PANICS` is set.
///
/// # Safety
///
/// None needed: `unsafe fn` only because `RawWakerVTable` requires that signature. The data
/// pointer is not read, and nothing else needs a caller's promise.
unsafe fn hostile_clone(_: *const ()) -> RawWaker {
    // Relaxed: set by the test on this same thread (see the flags).
    if CLONE_PANICS.load(Relaxed) {
        panic!("waker clone panics");
    }
    RawWaker::new(std::ptr::null(), &HOSTILE)
}

/// The hostile waker's `wake` and `wake_by_ref`: panic while `WAKE_PANICS` is set (unless the
/// thread is already unwinding).
///
/// # Safety
///
/// As for [`hostile_clone`]: none needed.
unsafe fn hostile_wake(_: *const ()) {
    // Relaxed: set by the test on this same thread (see the flags).
    if WAKE_PANICS.load(Relaxed) && !std::thread::panicking() {
        panic!("waker wake panics");
    }
}

/// The hostile waker's `drop`: panics while `DROP_PANICS` is set (unless the thread is already
/// unwinding).
///
/// # Safety
///
/// As for [`hostile_clone`]: none needed.
unsafe fn hostile_drop(_: *const ()) {
    // Relaxed: set by the test on this same thread (see the flags).
    if DROP_PANICS.load(Relaxed) && !std::thread::panicking() {
        panic!("waker drop panics");
    }
}

static HOSTILE: RawWakerVTable =
    RawWakerVTable::new(hostile_clone, hostile_wake, hostile_wake, hostile_drop);

fn hostile() -> Waker {
    // SAFETY: the vtable's functions ignore the data pointer, and none of them frees anything.
    unsafe { Waker::from_raw(RawWaker::new(std::ptr::null(), &HOSTILE)) }
}

/// The flags are global: one hostile test at a time, each starting with every flag off.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for flag in [&CLONE_PANICS, &WAKE_PANICS, &DROP_PANICS] {
        // Relaxed: under the `SERIAL` lock (see the flags).
        flag.store(false, Relaxed);
    }
    guard
}

/// A `read()` polled with a waker whose `clone` panics, then the reader dropped: the next reader
/// gets the same table entry (`max_readers` 1) and is woken by the next push.
#[test]
fn a_waker_whose_clone_panics_leaves_the_entry_working_for_the_next_reader() {
    let _serial = serial();
    let (mut producer, ring) = ReplayRing::<u32>::new(8, 1).unwrap();
    let mut first = ring.reader().unwrap();
    {
        let waker = hostile();
        let mut read = Box::pin(first.read());
        // Relaxed: the waker reads it on this thread (see the flags).
        CLONE_PANICS.store(true, Relaxed);
        let polled = catch_unwind(AssertUnwindSafe(|| poll(read.as_mut(), &waker)));
        // Relaxed: the waker reads it on this thread (see the flags).
        CLONE_PANICS.store(false, Relaxed);
        assert!(polled.is_err(), "the clone's panic reaches the poller");
    }
    drop(first);
    let mut next = ring.reader().unwrap();
    let (count, waker) = counting();
    let mut read = Box::pin(next.read());
    assert!(poll(read.as_mut(), &waker).is_pending());
    producer.try_push(1).unwrap();
    // Relaxed: the wake ran inside the call above, on this thread (see `Counting`).
    assert_eq!(count.0.load(Relaxed), 1, "the push woke the parked reader");
}

/// The same for the producer's `ready()`: its next wait is woken by a release.
#[test]
fn a_waker_whose_clone_panics_leaves_the_producers_wake_ups_working() {
    let _serial = serial();
    let (mut producer, ring) = ReplayRing::<u32>::new(1, 1).unwrap();
    producer.try_push(1).unwrap();
    {
        let waker = hostile();
        let mut ready = Box::pin(producer.ready());
        // Relaxed: the waker reads it on this thread (see the flags).
        CLONE_PANICS.store(true, Relaxed);
        let polled = catch_unwind(AssertUnwindSafe(|| poll(ready.as_mut(), &waker)));
        // Relaxed: the waker reads it on this thread (see the flags).
        CLONE_PANICS.store(false, Relaxed);
        assert!(polled.is_err());
    }
    let (count, waker) = counting();
    let mut ready = Box::pin(producer.ready());
    assert!(
        poll(ready.as_mut(), &waker).is_pending(),
        "the window is full"
    );
    ring.release_through(1).unwrap();
    // Relaxed: the wake ran inside the call above, on this thread (see `Counting`).
    assert_eq!(count.0.load(Relaxed), 1, "the release woke the producer");
    assert!(poll(ready.as_mut(), &waker).is_ready());
}

/// A reader whose registered waker panics when dropped: the panic leaves `Reader::drop`, and the
/// table entry is free all the same.
#[test]
fn a_waker_whose_drop_panics_does_not_leak_the_readers_entry() {
    let _serial = serial();
    let (_producer, ring) = ReplayRing::<u32>::new(8, 1).unwrap();
    let mut reader = ring.reader().unwrap();
    let waker = hostile();
    {
        let mut read = Box::pin(reader.read());
        assert!(poll(read.as_mut(), &waker).is_pending());
        // Keeps the waker registered, for the reader's own drop to release.
        std::mem::forget(read);
    }
    // Relaxed: the waker reads it on this thread (see the flags).
    DROP_PANICS.store(true, Relaxed);
    let dropped = catch_unwind(AssertUnwindSafe(move || drop(reader)));
    // Relaxed: the waker reads it on this thread (see the flags).
    DROP_PANICS.store(false, Relaxed);
    assert!(dropped.is_err(), "the waker's panic leaves Reader::drop");
    assert_eq!(ring.metrics().readers_active, 0);
    assert!(ring.reader().is_ok(), "the only entry is free again");
}

/// A pinned (resumed) reader dropped while the producer waits with a waker that panics when
/// woken: the pin is cleared, the panic leaves `Reader::drop`, and the entry is free.
#[test]
fn a_producer_waker_that_panics_in_a_readers_drop_does_not_leak_the_entry() {
    let _serial = serial();
    let (mut producer, ring) = ReplayRing::<u32>::new(2, 1).unwrap();
    producer.try_push(1).unwrap();
    producer.try_push(2).unwrap();
    let reader = ring.resume(Some(0)).unwrap();
    ring.release_through(2).unwrap();
    let waker = hostile();
    {
        let mut ready = Box::pin(producer.ready());
        assert!(
            poll(ready.as_mut(), &waker).is_pending(),
            "the pin holds the window"
        );
        std::mem::forget(ready);
    }
    // Relaxed: the waker reads it on this thread (see the flags).
    WAKE_PANICS.store(true, Relaxed);
    let dropped = catch_unwind(AssertUnwindSafe(move || drop(reader)));
    // Relaxed: the waker reads it on this thread (see the flags).
    WAKE_PANICS.store(false, Relaxed);
    assert!(
        dropped.is_err(),
        "the producer waker's panic leaves Reader::drop"
    );
    assert_eq!(producer.try_push(3), Ok(3));
    assert!(ring.reader().is_ok(), "the only entry is free again");
}

/// Runs `during` in a destructor while the thread unwinds from another panic, as a guard that
/// flushes on failure would.
fn while_unwinding(during: impl FnOnce()) {
    struct OnUnwind<F: FnOnce()>(Option<F>);
    impl<F: FnOnce()> Drop for OnUnwind<F> {
        fn drop(&mut self) {
            if let Some(during) = self.0.take() {
                let _ = catch_unwind(AssertUnwindSafe(during));
            }
        }
    }
    let unwound = catch_unwind(AssertUnwindSafe(|| {
        let _guard = OnUnwind(Some(during));
        panic!("the first failure");
    }));
    assert!(unwound.is_err());
}

/// A `drain` closure that panics on a thread already unwinding: the batch is not consumed, as
/// on any other thread.
#[test]
fn a_drain_closure_that_panics_while_the_thread_unwinds_consumes_nothing() {
    let (mut producer, ring) = ReplayRing::<u32>::new(4, 1).unwrap();
    let mut reader: Reader<u32> = ring.reader().unwrap();
    producer.try_push(1).unwrap();
    while_unwinding(|| {
        let _ = reader.drain(|_| -> ControlFlow<()> { panic!("the handler fails") });
    });
    assert_eq!(reader.cursor(), 1, "event 1 is lent again");
    assert_eq!(reader.try_recv().unwrap().unwrap().id, 1);
}

/// `try_recv` of an event whose `Clone` panics, on a thread already unwinding: the event stays
/// unread, and so do the events after it.
#[test]
fn a_clone_that_panics_in_try_recv_while_the_thread_unwinds_reads_nothing() {
    #[derive(Debug)]
    struct Fragile;
    impl Clone for Fragile {
        fn clone(&self) -> Self {
            panic!("clone fails");
        }
    }
    let (mut producer, ring) = ReplayRing::<Fragile>::new(4, 1).unwrap();
    let mut reader = ring.reader().unwrap();
    for _ in 1..=3 {
        producer.try_push(Fragile).unwrap();
    }
    while_unwinding(|| {
        let _ = reader.try_recv();
    });
    assert_eq!(reader.cursor(), 1);
    let ids: Vec<u64> = reader
        .try_read()
        .unwrap()
        .unwrap()
        .iter()
        .map(|(id, _)| id)
        .collect();
    assert_eq!(ids, [1, 2, 3]);
}
