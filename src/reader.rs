//! Readers: a resume positions a reader, a pinned [`Batch`] lends the replayed (or live) events as at
//! most two slices, and the live tail waits on the reader's own waker slot.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::ptr::NonNull;
use std::task::{Context, Poll};
#[cfg(not(replay_ring_loom))]
use std::time::Duration;

use crate::error::ReadError;
use crate::shared::Shared;
use crate::sync::{
    heavy_fence, lock, ord, seq_cst_fence, Arc,
    Ordering::{Acquire, Relaxed, Release},
};
use crate::table::{ReaderEntry, UNPINNED};

mod batch;
mod drain;
mod gating;

pub use batch::Batch;
pub use gating::Gating;

/// [`Reader::read_coalesced`] lets a batch grow to this many events before it reads, while the
/// producer keeps publishing (or to half the window, if that is less). In scenario 7
/// (`docs/benchmarks.md`, one reader task) targets of 8 and 16 events measured the same, and 32
/// and 64 worse: the reader then falls behind.
#[cfg(all(feature = "tokio", not(replay_ring_loom)))]
pub const COALESCE_TARGET: u64 = 16;

/// At most this many yields to the scheduler per [`Reader::read_coalesced`]: a bound on the delay
/// it adds to a batch (each yield is one pass of the tokio worker's loop: its other ready tasks
/// and its I/O driver).
#[cfg(all(feature = "tokio", not(replay_ring_loom)))]
pub const COALESCE_MAX_YIELDS: u32 = 4;

/// Pins `next` in entry `index`, then checks it is still retained. On `Err(floor)` the entry is
/// unpinned again. A fixed number of steps, no retry loop: (after a park) the active-bit RMWs (leaf,
/// summary, segment: up to three), one store, one fence, one load of the active bit, (if the
/// producer deactivated the entry) those RMWs again and a second fence, and one load of the floor.
///
/// # Safety
///
/// The caller owns `index`: a claim handed it out to the caller and it was not freed since.
pub(crate) unsafe fn pin_and_check<T>(
    shared: &Shared<T>,
    index: usize,
    active: &mut bool,
    next: u64,
) -> Result<(), u64> {
    if !*active && !crate::sync::mutant("skip_activate") {
        // Before the pin store (and so before the fence below): the producer's pin scan, after its
        // own fence, then visits this entry whenever it must see the pin (race 2).
        shared.readers.activate(index);
        *active = true;
    }
    // SAFETY: the caller's claim handed `index` out (our contract).
    let entry = unsafe { shared.readers.entry(index) };
    // Release: pairs with the producer's Acquire pin scan, so this reader's earlier reads of ids
    // below `next` happen-before the producer overwrites them.
    entry.pin.store(next, ord("pin_relaxed", Release, Relaxed));
    // Relaxed: a hint for the producer's scan, on the line of the pin just stored; it orders
    // nothing (see `ReaderEntry::touched`).
    entry.touched.store(true, Relaxed);
    // SeqCst fence: pairs with the producer's fence in `refresh_limit` (between its floor load and its
    // pin scan). Either the producer sees this pin, or the floor load below sees every release the
    // producer based its reuse on.
    seq_cst_fence("no_pin_fence");
    // The producer's scan clears the active bit of an entry it finds unpinned (`table.rs`), so ours
    // may be gone since we set it. That clear and this check pair through the fence above and the
    // one between the producer's clear and its re-load of the pins: either the producer saw our
    // pin and set the bit again, or we see the bit cleared here and set it again ourselves, then
    // fence again so that the argument above holds for the set bit.
    let recheck =
        !crate::sync::mutant("skip_active_recheck") && !crate::sync::mutant("skip_activate");
    if recheck && !shared.readers.is_active(index) {
        shared.readers.reactivate(index);
        seq_cst_fence("no_reactivate_fence");
    }
    // Acquire: pairs with the Release half of `release_through`'s `fetch_max`. The fence above
    // makes the hazard argument; this synchronization is what keeps a refusal's snapshot
    // consistent: the releaser read a `head` of at least `floor - 1` before it raised the floor,
    // so the `head` a `Gap` or `BelowFloor` reads after this load is at least that too
    // (`floor <= head + 1`; the `pin_floor_relaxed` mutant).
    let floor = shared
        .floor
        .load(ord("pin_floor_relaxed", Acquire, Relaxed));
    if next < floor && !crate::sync::mutant("skip_floor_check") {
        unpin(shared, entry);
        return Err(floor);
    }
    Ok(())
}

/// Ends a borrow and wakes the producer if it was waiting for the slots it held.
fn unpin<T>(shared: &Shared<T>, entry: &ReaderEntry) {
    // Release: pairs with the producer's Acquire pin scan; our slot reads happen-before its reuse.
    entry
        .pin
        .store(UNPINNED, ord("unpin_relaxed", Release, Relaxed));
    shared.wake_producer();
}

/// Moves a drain's or a gate's pin forward to `cursor`, the id its reader yields next (above the
/// pin it replaces), and wakes the producer if it was waiting for the slots this frees.
///
/// No fence and no floor check: the ids at or above the old pin stayed protected since
/// `pin_and_check` validated it, and the new pin is higher (docs/design.md, "Draining").
#[inline]
fn advance_pin<T>(shared: &Shared<T>, entry: &ReaderEntry, cursor: u64) {
    // Relaxed: this reader is the only writer of its pin. From the `pin_and_check` that set a
    // drain's or gate's first pin (its own, or the resume's) to its guard's unpin, the pin is never
    // `UNPINNED` (docs/design.md, "Draining").
    debug_assert!({
        let pin = entry.pin.load(Relaxed);
        pin != UNPINNED && pin < cursor
    });
    // Release: pairs with the producer's Acquire pin scan (`Segment::scan_word` in table.rs): the
    // reads of every id below the new pin happen-before the producer overwrites one of them.
    entry
        .pin
        .store(cursor, ord("advance_pin_relaxed", Release, Relaxed));
    // The `advance_without_wake` mutant leaves a producer parked for these slots asleep until
    // the drain or gate ends (model 3d).
    if !crate::sync::mutant("advance_without_wake") {
        shared.wake_producer();
    }
}

/// One event, cloned out of the ring (see [`Reader::try_recv`]).
///
/// ```
/// let (mut producer, ring) = replay_ring::ReplayRing::<u8>::new(4, 1).unwrap();
/// producer.try_push(5).unwrap();
/// let event = ring.resume(Some(0)).unwrap().try_recv().unwrap().unwrap();
/// assert_eq!((event.id, event.data), (1, 5));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event<T> {
    /// The event's id.
    pub id: u64,
    /// The payload.
    pub data: T,
}

/// A registered reader: replays from where it was resumed, then follows live events.
///
/// Obtained from [`ReplayRing::resume`](crate::ReplayRing::resume) or
/// [`ReplayRing::reader`](crate::ReplayRing::reader). Each reader owns one entry of the ring's reader
/// table until it is dropped; the entry (and its wakers) is then reused by a later registration.
///
/// A reader never skips: if its next event was released before it read it, every read returns
/// [`ReadError::Gap`]. The one exception loses nothing: a reader returned by
/// [`resume`](crate::ReplayRing::resume) holds its replay pinned from the resume to its first read,
/// so those events stay readable (and are lent by that read) even if they are released meanwhile;
/// a read lends at most up to a slot segment boundary of a ring built with
/// [`Builder::initial_slots`](crate::Builder::initial_slots), and `try_recv` one event, and what
/// the first read leaves is read like any other event.
/// The pin also holds the producer back if the window is full, so read (or drop) a resumed
/// reader promptly; a resumed reader leaked with `mem::forget` before its first read holds it
/// back for good (and any leaked reader keeps its table entry). After the producer closes the
/// stream and the reader has read everything retained, reads return [`ReadError::Closed`].
///
/// Reads come in two shapes, each in the `crossbeam-channel` family of `try_*` (never waits), an
/// `async fn` (waits for a wake-up) and `*_timeout` (blocks the thread up to a deadline):
///
/// - zero-copy batches: [`try_read`](Self::try_read), [`read`](Self::read),
///   [`read_timeout`](Self::read_timeout) lend every available event as a [`Batch`];
///   [`drain`](Self::drain) lends batch after batch until the reader has caught up, paying the
///   pin's fence once instead of per batch (for readers that poll a busy stream);
/// - one event at a time, cloned out: [`try_recv`](Self::try_recv), [`recv`](Self::recv),
///   [`recv_timeout`](Self::recv_timeout), and the `futures_core::Stream` impl (feature `stream`).
///
/// ```
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// use replay_ring::{CloseReason, ReadError, ReplayRing};
///
/// let (mut producer, ring) = ReplayRing::<u32>::new(64, 2).unwrap();
/// let mut reader = ring.reader().unwrap();
/// let task = tokio::spawn(async move {
///     let mut seen = Vec::new();
///     loop {
///         match reader.read().await {
///             Ok(batch) => seen.extend(batch.iter().map(|(id, v)| (id, *v))),
///             Err(ReadError::Closed(reason)) => return (seen, reason),
///             Err(gap) => panic!("{gap}"),
///         }
///     }
/// });
/// for n in 1..=10 {
///     producer.push(n * n).await.unwrap();
/// }
/// producer.close(CloseReason::Completed);
/// let (seen, reason) = task.await.unwrap();
/// assert_eq!(seen.len(), 10);
/// assert!(seen.iter().all(|&(id, v)| v == (id * id) as u32));
/// assert!(reason.is_completed());
/// # });
/// ```
pub struct Reader<T> {
    shared: Arc<Shared<T>>,
    index: usize,
    /// `shared.readers.entry(index)`, cached: entries never move while the table lives.
    entry: NonNull<ReaderEntry>,
    /// The next id this reader yields.
    cursor: u64,
    /// The pin at `cursor` is already set and validated (after a replaying resume).
    pinned: bool,
    /// This entry's active bit is set (the producer's pin scan visits it). Cleared when it parks.
    active: bool,
    /// A waker is registered (and the entry is, or was, on the wait list) for a pending wait.
    waiting: bool,
    /// A waker may be registered in the entry (from any earlier wait): released on drop.
    registered: bool,
    /// A blocking wait recorded its thread in the entry's thread waker: released on drop (a
    /// reader that never blocked skips that lock).
    blocked: bool,
    /// A `Gap` or `Closed` already reported: the reader is finished.
    done: bool,
    /// The last wait ended without parking: the reader is keeping up with a busy producer, so once
    /// caught up `read_coalesced` yields to the scheduler before it waits.
    chasing: bool,
    /// Inside [`drain`](Self::drain): a dropped batch leaves the pin to the drain, which advances it
    /// or (through its guard) clears it.
    draining: bool,
}

// SAFETY: a reader lends `&T` to whichever thread owns it while the producer moves `T`s in on
// another: that needs `T: Send + Sync`. Its other fields are plain data and an `Arc`.
unsafe impl<T: Send + Sync> Send for Reader<T> {}
// SAFETY: `&Reader` exposes only `cursor()`, `floor()`, `head()`, `Debug` and (feature `stream`)
// `is_terminated()`: they read the reader's own plain fields or load the ring's `floor` and `head`
// atomics, and none touches a slot, the entry's pin or a `T`. Every read, which lends `&T`, needs
// `&mut self`.
unsafe impl<T: Send + Sync> Sync for Reader<T> {}

impl<T> fmt::Debug for Reader<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reader")
            .field("entry", &self.index)
            .field("cursor", &self.cursor)
            .finish()
    }
}

impl<T> Reader<T> {
    /// A reader on entry `index`; `active` says whether `pin_and_check` set its active bit.
    ///
    /// # Safety
    ///
    /// The caller owns `index` (a claim handed it out to the caller and it was not freed since)
    /// and hands it over: the reader uses it as its own and frees it when dropped.
    pub(crate) unsafe fn new(
        shared: Arc<Shared<T>>,
        index: usize,
        cursor: u64,
        pinned: bool,
        active: bool,
    ) -> Self {
        Reader {
            // SAFETY: the caller's claim handed `index` out (our contract).
            entry: unsafe { shared.readers.entry_ptr(index) },
            shared,
            index,
            cursor,
            pinned,
            active,
            waiting: false,
            registered: false,
            blocked: false,
            done: false,
            chasing: false,
            draining: false,
        }
    }

    fn entry(&self) -> &ReaderEntry {
        // SAFETY: the entry lives in a table segment that is freed only when `Shared` drops, and
        // `self.shared` keeps it alive; entries never move.
        unsafe { self.entry.as_ref() }
    }

    /// The id this reader yields next. After a resume from `x`, it is `x + 1`.
    ///
    /// ```
    /// let (mut producer, ring) = replay_ring::ReplayRing::<u8>::new(4, 2).unwrap();
    /// producer.try_push(1).unwrap();
    /// producer.try_push(2).unwrap();
    /// assert_eq!(ring.resume(Some(1)).unwrap().cursor(), 2);
    /// assert_eq!(ring.reader().unwrap().cursor(), 3); // live: after the head
    /// ```
    pub fn cursor(&self) -> u64 {
        self.cursor
    }

    /// The ring's oldest retained id, as [`ReplayRing::floor`](crate::ReplayRing::floor). A
    /// reader whose cursor falls below it has lost events (its next read is a
    /// [`ReadError::Gap`]), unless it came from [`ReplayRing::resume`](crate::ReplayRing::resume)
    /// and has not read yet: its replay stays pinned until its first read, which lends events
    /// below the floor.
    ///
    /// ```
    /// let (mut producer, ring) = replay_ring::ReplayRing::<u8>::new(4, 1).unwrap();
    /// let reader = ring.reader().unwrap();
    /// producer.try_push(1).unwrap();
    /// producer.try_push(2).unwrap();
    /// ring.release_through(1).unwrap();
    /// assert_eq!((reader.floor(), reader.head(), reader.cursor()), (2, 2, 1));
    /// ```
    pub fn floor(&self) -> u64 {
        self.shared.floor()
    }

    /// The ring's newest id, as [`ReplayRing::head`](crate::ReplayRing::head): `head() - cursor() + 1`
    /// events are ready for this reader (none when the cursor is past the head).
    ///
    /// ```
    /// let (mut producer, ring) = replay_ring::ReplayRing::<u8>::new(4, 1).unwrap();
    /// let mut reader = ring.reader().unwrap();
    /// producer.try_push(7).unwrap();
    /// assert_eq!((reader.head(), reader.cursor()), (1, 1));
    /// reader.try_recv().unwrap();
    /// assert_eq!((reader.head(), reader.cursor()), (1, 2));
    /// ```
    pub fn head(&self) -> u64 {
        self.shared.head()
    }

    /// `Ok(true)` when at least one event is available at the cursor; the terminal errors once the
    /// stream is closed and drained.
    fn available(&mut self) -> Result<bool, ReadError> {
        if self.pinned {
            return Ok(true);
        }
        // Acquire: pairs with the producer's Release publish.
        if self.cursor <= self.shared.head.load(Acquire) {
            return Ok(true);
        }
        self.end_if_closed()
    }

    /// Caught up with a head read earlier: the terminal error if the stream has closed and nothing
    /// is left to read, `Ok(true)` if an event arrived before the close, `Ok(false)` otherwise.
    fn end_if_closed(&mut self) -> Result<bool, ReadError> {
        // Acquire: pairs with the Release store in `Producer::close_inner`, which follows the last
        // publish; so the head re-read below is final (the `closed_load_relaxed` mutant).
        if self
            .shared
            .closed
            .load(ord("closed_load_relaxed", Acquire, Relaxed))
        {
            // Acquire: pairs with the producer's Release publish. The final head is already
            // ordered before us by the `closed` Acquire above (and coherence), so this value
            // needs no more than that; `borrow_available` loads `head` again before it lends.
            if self.cursor <= self.shared.head.load(Acquire) {
                return Ok(true);
            }
            let reason = lock(&self.shared.close_reason)
                .clone()
                .unwrap_or(crate::CloseReason::ProducerDropped);
            return Err(self.finish(ReadError::Closed(reason)));
        }
        Ok(false)
    }

    /// How many events are ready to lend, for `read_coalesced`'s yields: one load of `head` on the
    /// common path (the line whose hand-offs the yields are there to save). `u64::MAX` stands for
    /// "do not wait for more": the reader is pinned by a replay, or the stream closed with events
    /// left. An error as `has_next`.
    #[cfg(all(feature = "tokio", not(replay_ring_loom)))]
    fn ready_events(&mut self) -> Result<u64, ReadError> {
        if self.draining || self.done || self.pinned {
            return Ok(if self.has_next()? { u64::MAX } else { 0 });
        }
        // Acquire: pairs with the producer's Release publish (only a count here; `read` loads
        // `head` again before it lends anything).
        let head = self.shared.head.load(Acquire);
        if self.cursor <= head {
            return Ok(head + 1 - self.cursor);
        }
        Ok(if self.end_if_closed()? { u64::MAX } else { 0 })
    }

    /// Whether an event is ready to lend (`Ok(false)`: caught up). A finished reader reports its
    /// terminal error again.
    fn has_next(&mut self) -> Result<bool, ReadError> {
        if self.draining {
            // No drain or gate is running (each borrows the reader mutably), so this was left by a
            // `Gating` guard leaked with `mem::forget`: clear its pin (waking a producer that
            // waits for it), and let batches unpin again.
            self.draining = false;
            unpin(&self.shared, self.entry());
        }
        if self.done {
            return Err(self.terminal_error());
        }
        self.available()
    }

    fn finish(&mut self, error: ReadError) -> ReadError {
        self.done = true;
        self.waiting = false;
        error
    }

    /// Pins the cursor and checks it against the floor (unless a resume already did), so that the
    /// next batch may be lent. Ends the reader with [`ReadError::Gap`] if the cursor was released.
    fn pin_cursor(&mut self) -> Result<(), ReadError> {
        if !self.pinned {
            let shared = &*self.shared;
            // SAFETY: `self.index` is this reader's own claim (`Reader::new`'s contract), freed only
            // when the reader drops.
            let pinned =
                unsafe { pin_and_check(shared, self.index, &mut self.active, self.cursor) };
            if let Err(floor) = pinned {
                // Acquire: pairs with the producer's Release publish; for the error's content only.
                let head = shared.head.load(Acquire);
                let gap = ReadError::Gap {
                    next: self.cursor,
                    floor,
                    head,
                };
                return Err(self.finish(gap));
            }
        }
        self.pinned = false;
        Ok(())
    }

    /// The last id of a batch lent from the cursor with the head at `head`: the head, or an earlier
    /// slot segment boundary so that the batch is at most two contiguous runs (a single-segment
    /// ring's bound is at least `cursor + capacity - 1 >= head`; the next read continues).
    fn batch_last(&self, head: u64) -> u64 {
        let shared = &*self.shared;
        debug_assert!(self.cursor <= head && head - self.cursor < shared.capacity());
        head.min(shared.slots.batch_end(self.cursor))
    }

    /// Pins and lends `cursor..=head`. Requires `available()` to have returned `Ok(true)`.
    fn borrow_available(&mut self) -> Result<Batch<'_, T>, ReadError> {
        self.pin_cursor()?;
        let shared = &*self.shared;
        // Acquire: pairs with the producer's Release publish: slots up to `head` are written, and
        // their slot segments' directory entries are stored (`slots.rs`).
        let head = shared.head.load(ord("lend_head_relaxed", Acquire, Relaxed));
        let last = self.batch_last(head);
        Ok(Batch::new(self, last))
    }

    /// Lends every event available now, from the cursor to the head, without copying; `Ok(None)` when
    /// the reader has caught up. Dropping the batch marks its events read (see [`Batch`]).
    ///
    /// A ring built with [`Builder::initial_slots`](crate::Builder::initial_slots) below its
    /// capacity may lend a batch that ends before the head, at a slot segment boundary; the next
    /// read continues from there, so a reader that reads until `Ok(None)` gets everything.
    ///
    /// # Errors
    ///
    /// [`ReadError::Gap`] when the reader's next event was released before it was read (the
    /// reader never skips it); [`ReadError::Closed`] once the stream has ended and everything
    /// retained was read. Both end the reader: every later read reports them again.
    ///
    /// ```
    /// let (mut producer, ring) = replay_ring::ReplayRing::<u8>::new(4, 1).unwrap();
    /// let mut reader = ring.reader().unwrap();
    /// assert!(reader.try_read().unwrap().is_none());
    /// producer.try_push(7).unwrap();
    /// producer.try_push(8).unwrap();
    /// let batch = reader.try_read().unwrap().unwrap();
    /// assert_eq!(batch.as_slices(), (&[7, 8][..], &[][..]));
    /// drop(batch);
    /// assert_eq!(reader.cursor(), 3);
    /// ```
    pub fn try_read(&mut self) -> Result<Option<Batch<'_, T>>, ReadError> {
        if !self.has_next()? {
            return Ok(None);
        }
        self.borrow_available().map(Some)
    }

    /// The error a finished reader keeps returning.
    fn terminal_error(&self) -> ReadError {
        let shared = &*self.shared;
        match shared.close_reason() {
            // Acquire: pairs with the producer's Release publish; the final head.
            Some(reason) if self.cursor > shared.head.load(Acquire) => ReadError::Closed(reason),
            _ => ReadError::Gap {
                next: self.cursor,
                // Acquire: pairs with the Release half of `release_through`'s `fetch_max`.
                floor: shared.floor.load(Acquire),
                // Acquire: pairs with the producer's Release publish.
                head: shared.head.load(Acquire),
            },
        }
    }

    /// Ready when a read would not return `Ok(None)`.
    ///
    /// `cx` may carry a blocking wait's waker, a plain pointer into the shared state
    /// (`ThreadWaker::bind`): store `cx.waker()` nowhere but this reader's entry, and never hand
    /// `cx` to code outside the crate (a tokio yield, for one, keeps the waker past the ring).
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ReadError>> {
        if self.has_next()? {
            // Found without parking: the reader is keeping up with a busy producer. Woken after
            // parking: the producer is not outpacing it, so the next read need not yield first.
            self.chasing = !self.waiting;
            self.waiting = false;
            return Poll::Ready(Ok(()));
        }
        let shared = &*self.shared;
        if self.active {
            // No batch is lent (it would borrow `self`) and no replay is pinned (`available` said
            // so): the pin is `UNPINNED`, and a parked reader leaves the producer's pin scan.
            shared.readers.deactivate(self.index);
            self.active = false;
        }
        // SAFETY: as in `entry` (a field borrow, so `self.waiting` stays writable).
        let entry = unsafe { self.entry.as_ref() };
        entry.waker.register(cx.waker());
        self.registered = true;
        let enqueue_late = crate::sync::mutant("enqueue_after_fence");
        if !enqueue_late {
            shared.waiters.enqueue(self.index, entry);
        }
        self.waiting = true;
        // Heavy half of an asymmetric SeqCst fence: pairs with the light half in
        // `Shared::wake_readers` after every publish and on close. Either the producer sees us on
        // the wait list, or we see its new `head` (or `closed`).
        heavy_fence("no_reader_wait_fence", shared.asymmetric_reader_wakeup);
        if enqueue_late {
            shared.waiters.enqueue(self.index, entry);
        }
        if self.available()? {
            // The producer published while we registered: we never slept. Take the waker back,
            // as an abandoned wait does, so that the push which still finds the entry listed
            // wakes nobody instead of scheduling this task again for nothing.
            self.chasing = true;
            self.abandon_wait();
            return Poll::Ready(Ok(()));
        }
        // Parked: if this wait is dropped (a `select!` that timed out), the next read must not
        // count as chasing.
        self.chasing = false;
        Poll::Pending
    }

    /// A wait ends without an event (its future was dropped, or it timed out): the registered waker
    /// is released, so no later push wakes (or keeps alive) a task that stopped waiting. The entry
    /// may still be on the wait list; the next push takes it off without waking anyone.
    fn abandon_wait(&mut self) {
        if self.waiting {
            self.waiting = false;
            self.registered = false;
            drop(self.entry().waker.take());
        }
    }

    /// Waits until at least one event is available and lends all available ones (or, in a ring
    /// built with [`Builder::initial_slots`](crate::Builder::initial_slots) below its capacity,
    /// those up to a slot segment boundary: see [`try_read`](Self::try_read)).
    ///
    /// # Errors
    ///
    /// [`ReadError::Gap`] when the reader's next event was released before it was read (the
    /// reader never skips it); [`ReadError::Closed`] once the stream has ended and everything
    /// retained was read. Both end the reader: every later read reports them again.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future before it completes consumes nothing (the cursor does not
    /// move, so the next read starts at the same event) and releases its waker, so no later push
    /// wakes the dropped task.
    ///
    /// A reader task that keeps up with a busy producer reads batches of one or two events this way;
    /// with the `tokio` feature, `read_coalesced` reads larger ones.
    ///
    /// ```
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let (mut producer, ring) = replay_ring::ReplayRing::<u8>::new(4, 1).unwrap();
    /// let mut reader = ring.reader().unwrap();
    /// tokio::spawn(async move { producer.push(9).await.unwrap(); producer });
    /// let batch = reader.read().await.unwrap();
    /// assert_eq!((batch.first_id(), batch.as_slices().0), (1, &[9][..]));
    /// # });
    /// ```
    pub async fn read(&mut self) -> Result<Batch<'_, T>, ReadError> {
        WaitReady { reader: self }.await?;
        self.borrow_available()
    }

    /// [`read`](Self::read) for a reader task that chases a busy producer: when the previous read
    /// found its events without parking and fewer than [`COALESCE_TARGET`] events (or half the
    /// window, if that is less) are ready now, it yields to the tokio scheduler, up to
    /// [`COALESCE_MAX_YIELDS`] times, for as long as each yield brings new events, then reads (or
    /// waits, if still nothing is ready). Read at once,
    /// such a reader lends batches of a few events, and each read takes the `head` cache line and
    /// the line of the slot the producer is filling away from the producer, whose next push then
    /// waits for them; the yields let the producer get ahead, so batches are larger. A producer
    /// that stops publishing ends the yields at once (a yield that brought nothing), and a reader
    /// woken from a park (an idle or slow stream) reads or waits at once, as `read` does.
    ///
    /// While it yields the reader pins nothing: a release past its cursor in the meantime (a
    /// retention policy cutting a slow reader) ends it with [`ReadError::Gap`], as it would a
    /// reader that was busy elsewhere.
    ///
    /// # Errors
    ///
    /// As [`read`](Self::read): [`ReadError::Gap`] and [`ReadError::Closed`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as `read`: a future dropped during its yield or its wait consumes nothing and
    /// leaves no waker registered.
    ///
    /// Scenario 7 in `docs/benchmarks.md` measures it: one reader task chasing a producer reads
    /// batches of 30–50 events this way, against about 3 when it yielded only once.
    ///
    /// Only for futures polled by a tokio task. tokio delivers the yield's wake-up from its
    /// scheduler once that has run its other ready tasks (or polled 61 of them) and its I/O driver;
    /// a read polled by another executor on a thread where a tokio scheduler is running (say
    /// `futures::executor::block_on` inside a tokio task) would block that scheduler and never be
    /// woken. Outside any tokio runtime the yield is an immediate self-wake.
    ///
    /// ```
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// // A window that holds the whole run, so nothing needs releasing.
    /// let (mut producer, ring) = replay_ring::ReplayRing::<u64>::new(16_384, 1).unwrap();
    /// let mut reader = ring.reader().unwrap();
    /// let task = tokio::spawn(async move {
    ///     let mut next = 1;
    ///     while next <= 10_000 {
    ///         let batch = reader.read_coalesced().await.unwrap();
    ///         assert_eq!(batch.first_id(), next);
    ///         next = batch.last_id() + 1;
    ///     }
    /// });
    /// for n in 1..=10_000 {
    ///     producer.push(n).await.unwrap();
    /// }
    /// task.await.unwrap();
    /// # });
    /// ```
    #[cfg(all(feature = "tokio", not(replay_ring_loom)))]
    pub async fn read_coalesced(&mut self) -> Result<Batch<'_, T>, ReadError> {
        if self.chasing {
            // A window too small for the target: half of it, so the reader never waits for more
            // than the producer can push before it needs a release.
            let target = COALESCE_TARGET.min(self.shared.capacity() / 2).max(1);
            let mut ready = self.ready_events()?;
            for _ in 0..COALESCE_MAX_YIELDS {
                if ready >= target {
                    break;
                }
                tokio::task::yield_now().await;
                let now = self.ready_events()?;
                if now == ready {
                    // Nothing was published during the yield: the producer is not busy.
                    break;
                }
                ready = now;
            }
        }
        self.read().await
    }

    /// Clones the next event out, if any. One pin per event: for throughput prefer
    /// [`try_read`](Self::try_read), which lends a whole batch.
    ///
    /// # Errors
    ///
    /// [`ReadError::Gap`] when the reader's next event was released before it was read (the
    /// reader never skips it); [`ReadError::Closed`] once the stream has ended and everything
    /// retained was read. Both end the reader: every later read reports them again.
    ///
    /// ```
    /// use replay_ring::Event;
    ///
    /// let (mut producer, ring) = replay_ring::ReplayRing::<&str>::new(4, 1).unwrap();
    /// let mut reader = ring.reader().unwrap();
    /// assert_eq!(reader.try_recv(), Ok(None));
    /// producer.try_push("a").unwrap();
    /// assert_eq!(reader.try_recv(), Ok(Some(Event { id: 1, data: "a" })));
    /// ```
    pub fn try_recv(&mut self) -> Result<Option<Event<T>>, ReadError>
    where
        T: Clone,
    {
        Ok(self.try_read()?.map(Batch::take_first))
    }

    /// Waits for the next event and clones it out.
    ///
    /// # Errors
    ///
    /// [`ReadError::Gap`] when the reader's next event was released before it was read (the
    /// reader never skips it); [`ReadError::Closed`] once the stream has ended and everything
    /// retained was read. Both end the reader: every later read reports them again.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the event is cloned and the cursor advanced only when the future completes, so
    /// dropping it loses no event.
    ///
    /// ```
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let (mut producer, ring) = replay_ring::ReplayRing::<u32>::new(4, 1).unwrap();
    /// let mut reader = ring.reader().unwrap();
    /// producer.try_push(7).unwrap();
    /// producer.try_push(8).unwrap();
    /// assert_eq!(reader.recv().await.unwrap().data, 7);
    /// assert_eq!(reader.recv().await.unwrap().data, 8); // one event at a time
    /// # });
    /// ```
    pub async fn recv(&mut self) -> Result<Event<T>, ReadError>
    where
        T: Clone,
    {
        self.read().await.map(Batch::take_first)
    }
}

#[cfg(not(replay_ring_loom))]
impl<T> Reader<T> {
    /// Blocks the thread up to `timeout` for at least one event and lends all available ones (up
    /// to a slot segment boundary, as [`try_read`](Self::try_read)); `Ok(None)` on timeout.
    /// A `timeout` too large to add to the current time (such as `Duration::MAX`) waits without a
    /// deadline.
    ///
    /// # Errors
    ///
    /// [`ReadError::Gap`] when the reader's next event was released before it was read (the
    /// reader never skips it); [`ReadError::Closed`] once the stream has ended and everything
    /// retained was read. Both end the reader: every later read reports them again.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let (mut producer, ring) = replay_ring::ReplayRing::<u8>::new(4, 1).unwrap();
    /// let mut reader = ring.reader().unwrap();
    /// assert!(reader.read_timeout(Duration::from_millis(1)).unwrap().is_none());
    /// std::thread::spawn(move || producer.try_push(5).unwrap());
    /// let batch = reader.read_timeout(Duration::from_secs(10)).unwrap().unwrap();
    /// assert_eq!(batch.as_slices().0, &[5]);
    /// ```
    pub fn read_timeout(&mut self, timeout: Duration) -> Result<Option<Batch<'_, T>>, ReadError> {
        let deadline = crate::blocking::deadline_after(timeout);
        // Tells drop to unbind the thread waker; a reader that never blocked skips that lock.
        self.blocked = true;
        // SAFETY: the waker goes only to this thread's stack and, through `poll_ready`, into this
        // reader's own table entry, whose `thread_waker` it points to; both live as long as the
        // ring's shared state (entries are freed only with the table), and whoever takes it out
        // of the entry to wake it holds that state.
        let waker = unsafe { self.entry().thread_waker.bind() };
        let ready = crate::blocking::block_on_deadline(waker, deadline, |cx| self.poll_ready(cx));
        match ready {
            None => {
                self.abandon_wait();
                Ok(None)
            }
            Some(Err(e)) => Err(e),
            Some(Ok(())) => self.borrow_available().map(Some),
        }
    }

    /// Blocks the thread up to `timeout` for the next event and clones it out; `Ok(None)` on
    /// timeout. One pin per event: for throughput prefer [`read_timeout`](Self::read_timeout).
    /// A `timeout` too large to add to the current time (such as `Duration::MAX`) waits without a
    /// deadline.
    ///
    /// # Errors
    ///
    /// [`ReadError::Gap`] when the reader's next event was released before it was read (the
    /// reader never skips it); [`ReadError::Closed`] once the stream has ended and everything
    /// retained was read. Both end the reader: every later read reports them again.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let (mut producer, ring) = replay_ring::ReplayRing::<u8>::new(4, 1).unwrap();
    /// let mut reader = ring.reader().unwrap();
    /// assert_eq!(reader.recv_timeout(Duration::from_millis(1)), Ok(None));
    /// std::thread::spawn(move || {
    ///     producer.try_push(5).unwrap();
    ///     producer.try_push(6).unwrap();
    /// });
    /// assert_eq!(reader.recv_timeout(Duration::from_secs(10)).unwrap().unwrap().data, 5);
    /// assert_eq!(reader.recv_timeout(Duration::from_secs(10)).unwrap().unwrap().data, 6);
    /// ```
    pub fn recv_timeout(&mut self, timeout: Duration) -> Result<Option<Event<T>>, ReadError>
    where
        T: Clone,
    {
        Ok(self.read_timeout(timeout)?.map(Batch::take_first))
    }
}

impl<T> Drop for Reader<T> {
    fn drop(&mut self) {
        /// Frees the table entry when `drop` ends, also when the unpin's wake-up of the producer
        /// panics (a waker that panics), so that a panic never leaks the entry.
        struct FreeEntry<'a, T>(&'a Reader<T>);
        impl<T> Drop for FreeEntry<'_, T> {
            fn drop(&mut self) {
                let r = self.0;
                // SAFETY: `r.index` is this reader's own claim (`Reader::new`'s contract), given up
                // here as the reader drops; the entry pointer is not used after.
                unsafe {
                    r.shared
                        .free_reader_entry(r.index, r.active, r.registered, r.blocked)
                };
            }
        }
        let _free = FreeEntry(self);
        // Not only `self.pinned`: a `Batch` leaked with `mem::forget` never ran its unpin, and a
        // pin left in a freed entry would hold the producer back forever.
        // Relaxed: this reader is the only writer of its pin, so the load sees its own last store.
        if self.entry().pin.load(Relaxed) != UNPINNED {
            unpin(&self.shared, self.entry());
        }
    }
}

/// The wait inside [`Reader::read`]: ready when a read would lend at least one event (or fail).
/// Dropping it while pending abandons the wait (`Reader::abandon_wait`).
struct WaitReady<'a, T> {
    reader: &'a mut Reader<T>,
}

impl<T> Future for WaitReady<'_, T> {
    type Output = Result<(), ReadError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.reader.poll_ready(cx)
    }
}

impl<T> Drop for WaitReady<'_, T> {
    fn drop(&mut self) {
        self.reader.abandon_wait();
    }
}

/// Terminated once the stream has yielded its gap or its end, so `futures::select!` can poll it
/// without `.fuse()`.
#[cfg(feature = "stream")]
impl<T: Clone> futures_core::stream::FusedStream for Reader<T> {
    fn is_terminated(&self) -> bool {
        self.done
    }
}

#[cfg(feature = "stream")]
impl<T: Clone> futures_core::Stream for Reader<T> {
    type Item = Result<Event<T>, ReadError>;

    /// Yields events in id order; on a gap or the end of the stream yields that error once, then
    /// `None`.
    fn poll_next(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        match this.poll_ready(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(e)) => Poll::Ready(Some(Err(e))),
            Poll::Ready(Ok(())) => {
                Poll::Ready(Some(this.borrow_available().map(Batch::take_first)))
            }
        }
    }
}

#[cfg(all(test, not(replay_ring_loom)))]
mod tests {
    use std::time::Duration;

    use crate::ReplayRing;

    /// A dropped reader's entry keeps neither the task waker nor the thread handle of its last
    /// wait, so a freed entry does not hold a thread that may have exited.
    #[test]
    fn a_dropped_reader_releases_the_thread_of_its_blocking_waits() {
        let (_producer, ring) = ReplayRing::<u8>::new(4, 1).unwrap();
        let mut reader = ring.reader().unwrap();
        let (shared, index) = (reader.shared.clone(), reader.index);
        assert!(reader
            .read_timeout(Duration::from_millis(1))
            .unwrap()
            .is_none());
        // SAFETY: `index` was handed out by the reader's claim; a freed entry stays initialised.
        let entry = unsafe { shared.readers.entry(index) };
        assert!(entry.thread_waker.is_bound());
        drop(reader);
        assert!(!entry.thread_waker.is_bound());
    }
}
