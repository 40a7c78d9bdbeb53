//! The single producer: assigns ids eagerly, writes slots, publishes `head`, and is backpressured
//! (never evicts) when the window is full.

use std::cell::UnsafeCell;
use std::fmt;
use std::future::poll_fn;
use std::task::{Context, Poll};
#[cfg(not(replay_ring_loom))]
use std::time::Duration;

use crate::error::{CloseReason, PushError};
use crate::prefetch;
use crate::ring::ReplayRing;
use crate::shared::{Shared, LAST_ID};
use crate::slots::Slot;
use crate::sync::{
    heavy_fence, lock, ord, seq_cst_fence, Arc,
    Ordering::{Acquire, Relaxed, Release},
};

/// The writing end of a stream. There is exactly one per ring; it is `Send` but not `Clone`.
///
/// Every accepted event gets the next id (1, 2, 3, …); a refused push consumes none. When the window
/// is full the producer is told ([`try_push`](Self::try_push) → [`PushError::Full`]) or waits
/// ([`push`](Self::push), [`push_timeout`](Self::push_timeout)); it never drops a retained event.
///
/// The waiting operations come in one family, as in `crossbeam-channel`: `try_*` never waits, the
/// `async fn` waits for a wake-up, and `*_timeout` blocks the thread up to a deadline
/// ([`try_push`](Self::try_push) / [`push`](Self::push) / [`push_timeout`](Self::push_timeout), and
/// [`ready`](Self::ready) / [`ready_timeout`](Self::ready_timeout)).
///
/// Dropping the producer closes the stream with [`CloseReason::ProducerDropped`].
///
/// ```
/// use replay_ring::{CloseReason, ReadError, ReplayRing};
///
/// let (mut producer, ring) = ReplayRing::<String>::new(16, 1).unwrap();
/// let mut reader = ring.reader().unwrap();
/// let id = producer.try_push_with(|id| format!("id: {id}\ndata: hello\n\n")).unwrap();
/// assert_eq!(id, 1);
/// producer.close(CloseReason::Completed);
///
/// assert_eq!(reader.try_recv().unwrap().unwrap().data, "id: 1\ndata: hello\n\n");
/// assert_eq!(reader.try_recv(), Err(ReadError::Closed(CloseReason::Completed)));
/// ```
pub struct Producer<T> {
    shared: Arc<Shared<T>>,
    /// The id the next accepted push gets (`head + 1`; only this handle writes `head`).
    next_id: u64,
    /// Ids below this bound may be written without looking at shared state: their slots' previous
    /// occupants were released and unpinned when it was computed, and stay so (the floor only grows
    /// and new pins start at or above the floor); and their slot segments are allocated.
    write_limit: u64,
    /// Every slot segment is allocated: `refresh_limit` no longer looks for one to grow.
    fully_grown: bool,
    /// `min(write_limit, run_start + run_len)`: the one bound the fast path checks. Ids below it
    /// have room and a cached slot address; at or above it, `prepare_slow` refreshes whichever of
    /// the two ran out.
    fast_limit: u64,
    /// Address cache for `write_slot`: the slots of ids `run_start .. run_start + run_len` are
    /// contiguous from `run_base` (the rest of one segment; for a single-segment ring, the rest of
    /// the array). The producer's ids only grow, so it is recomputed once per segment per lap, on
    /// the slow path, and the fast path stays one compare and one add, as with a plain array.
    run_start: u64,
    run_len: u64,
    run_base: *mut Slot<T>,
    /// The first id whose slot already holds a value (`first_id + capacity`): from here on a push
    /// replaces, and drops, the slot's previous occupant.
    first_reuse: u64,
    /// How many slots ahead of the one it writes a push takes ownership of a slot's cache line
    /// (`prefetch.rs`); 0 = not at all.
    prefetch_ahead: u64,
    full: u64,
    waits: u64,
    waiting: bool,
    closed: bool,
}

// SAFETY: the producer moves `T` values into slots and drops replaced ones, which needs only
// `T: Send`; it never hands out `&T`. `run_base` points into a slot segment owned by `shared`,
// which the producer keeps alive, and is used only through `&mut self`.
unsafe impl<T: Send> Send for Producer<T> {}
// SAFETY: `&Producer` exposes only `next_id()`, `floor()`, `head()`, `ring()` and `Debug`: plain
// fields, an atomic load of the ring's `floor` and an `Arc` clone, none of which touches a slot or
// `run_base`; every write needs `&mut self`.
unsafe impl<T: Send> Sync for Producer<T> {}

impl<T> fmt::Debug for Producer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Producer")
            .field("next_id", &self.next_id)
            .field("write_limit", &self.write_limit)
            .finish()
    }
}

impl<T> Producer<T> {
    pub(crate) fn new(shared: Arc<Shared<T>>) -> Self {
        let next_id = shared.first_id;
        let first_reuse = next_id.saturating_add(shared.capacity());
        let fully_grown = shared.slots.segments() == 1;
        // Only segment 0 is allocated: a lazy ring starts with the ids whose slots exist (none, if
        // `first_id` maps past segment 0; the first push then grows).
        let write_limit = if fully_grown {
            first_reuse
        } else {
            allocated_until(&shared, next_id, first_reuse)
        };
        Producer {
            shared,
            next_id,
            write_limit,
            fully_grown,
            // Empty: the first push takes the slow path and locates its run.
            fast_limit: next_id,
            run_start: 0,
            run_len: 0,
            run_base: std::ptr::null_mut(),
            first_reuse,
            prefetch_ahead: prefetch::slots_ahead(std::mem::size_of::<Slot<T>>()) as u64,
            full: 0,
            waits: 0,
            waiting: false,
            closed: false,
        }
    }

    /// The id the next accepted push will get. Pushes that are refused do not advance it.
    ///
    /// ```
    /// let (mut producer, _ring) = replay_ring::ReplayRing::<u8>::new(1, 1).unwrap();
    /// assert_eq!(producer.next_id(), 1);
    /// producer.try_push(0).unwrap();
    /// assert!(producer.try_push(0).is_err());
    /// assert_eq!(producer.next_id(), 2);
    /// ```
    pub fn next_id(&self) -> u64 {
        self.next_id
    }

    /// The ring's oldest retained id, as [`ReplayRing::floor`]: the window has room while
    /// `next_id() < floor() + capacity` (and no reader still borrows the slot to reuse).
    ///
    /// ```
    /// let (mut producer, ring) = replay_ring::ReplayRing::<u8>::new(1, 1).unwrap();
    /// producer.try_push(1).unwrap();
    /// assert_eq!(producer.floor(), 1);
    /// ring.release_through(1).unwrap();
    /// assert_eq!(producer.floor(), 2);
    /// ```
    pub fn floor(&self) -> u64 {
        self.shared.floor()
    }

    /// The ring's newest id, as [`ReplayRing::head`]: `next_id() - 1`, since only this producer
    /// publishes.
    ///
    /// ```
    /// let (mut producer, _ring) = replay_ring::ReplayRing::<u8>::new(4, 1).unwrap();
    /// assert_eq!(producer.head(), 0);
    /// producer.try_push(1).unwrap();
    /// assert_eq!(producer.head(), 1);
    /// ```
    pub fn head(&self) -> u64 {
        self.next_id - 1
    }

    /// A handle on this producer's ring.
    ///
    /// ```
    /// let (mut producer, _ring) = replay_ring::ReplayRing::<u8>::new(4, 1).unwrap();
    /// producer.try_push(1).unwrap();
    /// assert_eq!(producer.ring().head(), 1);
    /// ```
    pub fn ring(&self) -> ReplayRing<T> {
        ReplayRing {
            shared: self.shared.clone(),
        }
    }

    /// Appends `value` if there is room, returning its id. Never waits.
    ///
    /// # Errors
    ///
    /// [`PushError::Full`] when every slot holds an unreleased event or one a reader is borrowing;
    /// [`PushError::IdsExhausted`] after id `u64::MAX - 1`. Either way `value` comes back and no id
    /// is consumed.
    ///
    /// # Panics
    ///
    /// If a parked reader's waker panics when woken (a waker is the reader's executor's code): the
    /// event is published first, every other parked reader is still woken, and then the panic
    /// continues from this call. The same holds for every push and for closing.
    ///
    /// If the `Drop` of the value this event's slot held before panics: the event is published
    /// first too, so its id is used although this call never returns it. Do not push the value
    /// again after catching such a panic: it is in the stream (`next_id() - 1`).
    ///
    /// ```
    /// let (mut producer, _ring) = replay_ring::ReplayRing::<u8>::new(2, 1).unwrap();
    /// assert_eq!(producer.try_push(b'a'), Ok(1));
    /// assert_eq!(producer.try_push(b'b'), Ok(2));
    /// assert!(producer.try_push(b'c').unwrap_err().is_full());
    /// ```
    pub fn try_push(&mut self, value: T) -> Result<u64, PushError<T>> {
        match self.try_push_with(|_| value) {
            Ok(id) => Ok(id),
            Err(PushError::Full(f)) => Err(PushError::Full(f(0))),
            Err(PushError::IdsExhausted(f)) => Err(PushError::IdsExhausted(f(0))),
        }
    }

    /// Appends the value `make(id)` if there is room, returning `id`. `make` learns the event's id
    /// before the event exists (eager assignment), so it can write `id:` into its own SSE frame. If the
    /// push is refused, `make` is handed back uncalled and no id is consumed. If `make` panics, the
    /// panic comes back to the caller and no id is consumed either: the next push is handed the
    /// same id, so a closure should not publish its id anywhere before it has returned.
    ///
    /// # Errors
    ///
    /// As [`try_push`](Self::try_push), with `make` (uncalled) in place of the value.
    ///
    /// ```
    /// let (mut producer, ring) = replay_ring::ReplayRing::<String>::new(4, 1).unwrap();
    /// let id = producer.try_push_with(|id| format!("event {id}")).unwrap();
    /// let mut reader = ring.resume(Some(0)).unwrap();
    /// assert_eq!(reader.try_recv().unwrap().unwrap().data, format!("event {id}"));
    /// ```
    #[inline]
    pub fn try_push_with<F: FnOnce(u64) -> T>(&mut self, make: F) -> Result<u64, PushError<F>> {
        let id = self.next_id;
        if id > LAST_ID {
            return Err(PushError::IdsExhausted(make));
        }
        if id >= self.fast_limit && !self.prepare_slow(id) {
            self.count_full();
            return Err(PushError::Full(make));
        }
        let value = make(id);
        let old = self.write_slot(id, value);
        let shared = &*self.shared;
        // Release: pairs with the Acquire loads of `head` in readers, so the slot write above
        // happens-before any read of it.
        shared
            .head
            .store(id, ord("publish_relaxed", Release, Relaxed));
        self.next_id = id + 1;
        shared.wake_readers();
        // Dropped after the publish: a panicking `Drop` cannot leave the ring half-updated.
        drop(old);
        Ok(id)
    }

    /// Moves `value` into the slot of `id` (`next_id <= id < write_limit`, not yet published) and
    /// returns the slot's previous occupant, if any.
    #[inline]
    fn write_slot(&mut self, id: u64, value: T) -> Option<T> {
        // `id < fast_limit` (checked by the caller), so `id < write_limit`, its segment is
        // allocated (by this producer: `refresh_limit`), and it lies in the cached run.
        debug_assert!(id < self.fast_limit && id.wrapping_sub(self.run_start) < self.run_len);
        // SAFETY: `run_start <= id < run_start + run_len` (ids only grow, and the run was located
        // at an earlier or equal id, by `prepare_slow`), so this stays inside that run,
        // within one allocated segment.
        let cell = unsafe { self.run_base.add((id - self.run_start) as usize) };
        // Only below `fast_limit`: that slot is in the same run, and its occupant was released,
        // so no reader is reading it (the line it shares with its neighbours may still be read).
        if self.prefetch_ahead != 0 && self.fast_limit - id > self.prefetch_ahead {
            debug_assert!(id + self.prefetch_ahead - self.run_start < self.run_len);
            prefetch::prefetch_for_write(cell.wrapping_add(self.prefetch_ahead as usize));
        }
        let shared = &*self.shared;
        let index = shared.index(id);
        let replaced = id >= self.first_reuse;
        let _track = shared.trackers.get(index).write();
        // SAFETY: `cell` points into an allocated segment, which lives as long as `shared`.
        // `id < write_limit`, so the slot's previous occupant `id - capacity` was released
        // and no reader pin covers it (see `refresh_limit`); readers only touch ids `<= head`, and
        // `id > head`. So nobody else accesses this slot now. It was initialised iff an earlier id
        // mapped to it (`replaced`).
        unsafe {
            let cell = UnsafeCell::raw_get(cell);
            let old = replaced.then(|| (*cell).assume_init_read());
            (*cell).write(value);
            old
        }
    }

    /// `id` reached `fast_limit`: refreshes the window limit if that is what ran out (returning
    /// whether `id` fits), and points the address cache at `id`'s run if that is what ran out.
    #[cold]
    #[inline(never)]
    fn prepare_slow(&mut self, id: u64) -> bool {
        if id >= self.write_limit && !self.refresh_limit(id) {
            return false;
        }
        if id.wrapping_sub(self.run_start) >= self.run_len {
            // `id < write_limit`: its segment is allocated.
            let (base, len) = self.shared.slots.run(id, u64::MAX);
            self.run_start = id;
            self.run_len = len as u64;
            self.run_base = base;
        }
        self.update_fast_limit();
        true
    }

    /// Counts a push (or a batch) the full window refused, for [`Metrics::producer_full`](crate::Metrics::producer_full).
    fn count_full(&mut self) {
        self.full += 1;
        // Relaxed: a statistic with a single writer (this producer).
        self.shared.producer_full.store(self.full, Relaxed);
    }

    fn update_fast_limit(&mut self) {
        let run_end = self.run_start.saturating_add(self.run_len);
        self.fast_limit = self.write_limit.min(run_end);
    }

    /// Appends values taken from `values` while there is room, and publishes them all with one
    /// `head` store and one wake-up fence: the per-event cost of [`try_push`](Self::try_push)
    /// without its per-event fence. Returns how many were appended; they got the ids
    /// `next_id() - n .. next_id()`, in order.
    ///
    /// A value is taken from the iterator only once it has a slot, so the values that did not fit
    /// stay in `values` (stopping early means the window is full, or ids are exhausted:
    /// [`try_push`](Self::try_push) of the next value says which). Readers see the whole run at
    /// once. If the iterator or a replaced value's `Drop` panics, the events written so far are
    /// published before the panic continues.
    ///
    /// ```
    /// let (mut producer, ring) = replay_ring::ReplayRing::<u32>::new(4, 1).unwrap();
    /// let mut reader = ring.reader().unwrap();
    /// let mut values = [10, 20, 30, 40, 50, 60].into_iter();
    /// assert_eq!(producer.try_push_many(&mut values), 4); // the window holds 4
    /// assert_eq!(values.next(), Some(50)); // not taken
    /// let batch = reader.try_read().unwrap().unwrap();
    /// let events: Vec<_> = batch.iter().map(|(id, v)| (id, *v)).collect();
    /// assert_eq!(events, [(1, 10), (2, 20), (3, 30), (4, 40)]);
    /// ```
    pub fn try_push_many<I: Iterator<Item = T>>(&mut self, values: &mut I) -> usize {
        /// Publishes the ids written so far when dropped, including during a panic.
        struct Publish<'a, T> {
            producer: &'a mut Producer<T>,
            next: u64,
        }
        impl<T> Drop for Publish<'_, T> {
            fn drop(&mut self) {
                let producer = &mut *self.producer;
                if self.next == producer.next_id {
                    return;
                }
                let shared = &*producer.shared;
                // Release: pairs with the Acquire loads of `head` in readers, so every slot write
                // of the run happens-before any read of it (as in `try_push_with`).
                shared
                    .head
                    .store(self.next - 1, ord("publish_many_relaxed", Release, Relaxed));
                producer.next_id = self.next;
                shared.wake_readers();
            }
        }

        let first = self.next_id;
        let mut run = Publish {
            next: first,
            producer: self,
        };
        loop {
            let id = run.next;
            if id > LAST_ID {
                break;
            }
            if id >= run.producer.fast_limit && !run.producer.prepare_slow(id) {
                // A refusal when values are known to be left, or when nothing was appended (the
                // iterator cannot be asked for a value it would have to keep).
                let (left, most) = values.size_hint();
                if left > 0 || (id == first && most != Some(0)) {
                    run.producer.count_full();
                }
                break;
            }
            let Some(value) = values.next() else { break };
            let old = run.producer.write_slot(id, value);
            run.next = id + 1;
            // A panicking `Drop` here unwinds through `run`, which publishes ids up to `id`.
            drop(old);
        }
        let next = run.next;
        drop(run);
        (next - first) as usize
    }

    /// Recomputes `write_limit` from the floor and the reader pins, and, in a ring that is still
    /// growing, allocates the slot segment of `id` if the floor and pins leave room for it. Returns
    /// whether `id` fits (`next_id <= id`; `try_push_many` asks for the id its unpublished run
    /// reached).
    #[cold]
    fn refresh_limit(&mut self, id: u64) -> bool {
        let shared = &*self.shared;
        // Acquire: pairs with the Release half of `release_through`'s `fetch_max`. Belt and braces:
        // the exclusion between a reader's floor check and our pin scan already follows from the
        // two SeqCst fences plus coherence (C++20 [atomics.order]/4; docs/verification.md shows the
        // Relaxed mutant survives), and on x86-64 both orderings are the same instruction.
        let floor_ordering = ord("floor_acquire_relaxed", Acquire, Relaxed);
        // The mutant loads the floor after the fence instead of before it.
        let floor_after_fence = crate::sync::mutant("floor_after_fence");
        if floor_after_fence {
            seq_cst_fence("no_pin_scan_fence");
        }
        let floor = shared.floor.load(floor_ordering);
        // The floor alone rules `id` out: no fence and no pin scan (whose lines draining readers
        // write per batch) for a producer that retries while the window is full.
        if floor_bars(shared, floor, id) {
            return false;
        }
        if !floor_after_fence {
            // SeqCst fence: pairs with the fence in `reader::pin_and_check` between the pin store
            // and the floor load. Either we see that reader's pin, or it sees a floor at least
            // this one.
            seq_cst_fence("no_pin_scan_fence");
        }
        // Only entries that may be pinned: the active bitmap (`table.rs`) is read after the fence,
        // and a reader's bit is set before its pin fence (before its pin store, or again after it:
        // race 2b), so it is visited whenever the hazard argument needs its pin.
        let limit = shared.readers.min_pin(floor);
        self.write_limit = limit.saturating_add(shared.capacity());
        if !self.fully_grown {
            if id < self.write_limit {
                // Allocated before any slot of the segment is written, and so before the `head`
                // store that publishes one: the ordering argument is in `slots.rs`.
                shared.slots.grow(shared.slots.segment_of(shared.index(id)));
            }
            self.write_limit = allocated_until(shared, self.next_id, self.write_limit);
            self.fully_grown = (0..shared.slots.segments()).all(|k| shared.slots.is_allocated(k));
        }
        // Never above `write_limit`, which may also have dropped (to a segment not grown yet).
        self.update_fast_limit();
        let room = id < self.write_limit;
        if room {
            // Also ends a wait whose `ready()` future was dropped while pending.
            self.stop_waiting();
        }
        room
    }

    /// Ready when one push would be accepted (or ids are exhausted, which `try_push` reports).
    ///
    /// `cx` may carry a blocking wait's waker, a plain pointer into the shared state
    /// (`ThreadWaker::bind`): store `cx.waker()` nowhere but `producer_waker`, and never hand `cx`
    /// to code outside the crate.
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.next_id < self.write_limit
            || self.next_id > LAST_ID
            || self.refresh_limit(self.next_id)
        {
            return Poll::Ready(());
        }
        let shared = &*self.shared;
        shared.producer_waker.register(cx.waker());
        if !self.waiting {
            self.waiting = true;
            self.waits += 1;
            // Relaxed: statistic with a single writer.
            shared.producer_waits.store(self.waits, Relaxed);
        }
        // Relaxed: ordered by the fence below.
        shared.producer_waiting.store(true, Relaxed);
        // Heavy half of an asymmetric SeqCst fence: pairs with the light half in
        // `Shared::wake_producer` (after a release or an unpin). Either that side sees
        // `producer_waiting`, or our re-check below sees its change.
        heavy_fence("no_producer_wait_fence", shared.asymmetric_producer_wakeup);
        if self.refresh_limit(self.next_id) {
            self.stop_waiting();
            return Poll::Ready(());
        }
        Poll::Pending
    }

    fn stop_waiting(&mut self) {
        if self.waiting {
            self.waiting = false;
            // Relaxed: a stale `true` only costs a releaser one spurious wake.
            self.shared.producer_waiting.store(false, Relaxed);
        }
    }

    /// Waits until a push would be accepted: until enough events are released and no reader is
    /// still borrowing the slot to reuse. Also returns once ids are exhausted (the next push then
    /// reports [`PushError::IdsExhausted`]).
    ///
    /// Only this producer fills the window, so after `ready()` returns, the next
    /// [`try_push`](Self::try_push) succeeds unless ids are exhausted.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future before it completes loses nothing and releases the task's
    /// waker (the next release wakes nobody), and a later call waits afresh. This is the building
    /// block for a push that must survive cancellation (for example inside `tokio::select!`):
    /// `producer.ready().await; producer.try_push(value)`.
    ///
    /// ```
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let (mut producer, ring) = replay_ring::ReplayRing::<u8>::new(1, 1).unwrap();
    /// producer.try_push(1).unwrap();
    /// tokio::spawn(async move { ring.release_through(1).unwrap() });
    /// producer.ready().await;
    /// assert_eq!(producer.try_push(2), Ok(2)); // guaranteed: only this producer fills the window
    /// # });
    /// ```
    pub async fn ready(&mut self) {
        /// Dropped while pending, lowers the flag and releases the task's waker, so the next
        /// release does not wake (or keep alive) a task that no longer waits.
        struct EndWait<'a, T>(&'a mut Producer<T>);
        impl<T> Drop for EndWait<'_, T> {
            fn drop(&mut self) {
                let producer = &mut *self.0;
                // Only a wait that registered has a waker to release: the fast path (room at the
                // first poll) costs no atomic operation here. `waiting` stays set: a `ready()`
                // polled again before there is room continues the same wait (`producer_waits`
                // counts full windows, not futures), and the push that finds room ends it.
                if producer.waiting {
                    // Relaxed: no one waits now; the next `poll_ready` raises it again before its
                    // fence and re-check.
                    producer.shared.producer_waiting.store(false, Relaxed);
                    drop(producer.shared.producer_waker.take());
                }
            }
        }
        let wait = EndWait(self);
        poll_fn(|cx| wait.0.poll_ready(cx)).await;
        wait.0.stop_waiting();
    }

    /// Appends `value`, waiting for space if the window is full.
    ///
    /// # Errors
    ///
    /// Only [`PushError::IdsExhausted`] (with `value`): a full window is waited out, never reported.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe for the value: `value` moves into the future, so dropping the future while
    /// it waits for space drops `value` with it. No id is consumed in that case and the stream is
    /// unaffected. To keep the value across cancellation, await [`ready`](Self::ready) (cancel
    /// safe) and then call [`try_push`](Self::try_push).
    ///
    /// ```
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let (mut producer, ring) = replay_ring::ReplayRing::<u8>::new(1, 1).unwrap();
    /// producer.push(1).await.unwrap();
    /// let releaser = tokio::spawn(async move { ring.release_through(1).unwrap() });
    /// assert_eq!(producer.push(2).await, Ok(2)); // waited for the release
    /// releaser.await.unwrap();
    /// # });
    /// ```
    pub async fn push(&mut self, value: T) -> Result<u64, PushError<T>> {
        self.ready().await;
        self.try_push(value)
    }

    /// Like [`push`](Self::push), with the id passed to `make` before the value is built.
    ///
    /// # Errors
    ///
    /// Only [`PushError::IdsExhausted`], with `make` uncalled.
    ///
    /// # Cancel safety
    ///
    /// As for [`push`](Self::push): dropping the future while it waits drops `make` uncalled and
    /// consumes no id.
    ///
    /// ```
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let (mut producer, ring) = replay_ring::ReplayRing::<String>::new(4, 1).unwrap();
    /// let id = producer.push_with(|id| format!("id: {id}")).await.unwrap();
    /// let mut reader = ring.resume(Some(0)).unwrap();
    /// assert_eq!(reader.recv().await.unwrap().data, format!("id: {id}"));
    /// # });
    /// ```
    pub async fn push_with<F: FnOnce(u64) -> T>(&mut self, make: F) -> Result<u64, PushError<F>> {
        self.ready().await;
        self.try_push_with(make)
    }

    /// Ends the stream. Readers read everything still retained, then get
    /// [`ReadError::Closed`](crate::ReadError::Closed) with `reason`.
    ///
    /// ```
    /// use replay_ring::{CloseReason, ReadError, ReplayRing};
    ///
    /// let (mut producer, ring) = ReplayRing::<u8>::new(4, 1).unwrap();
    /// let mut reader = ring.reader().unwrap();
    /// producer.try_push(1).unwrap();
    /// producer.close(CloseReason::error("tool failed"));
    /// assert_eq!(reader.try_recv().unwrap().unwrap().id, 1); // drained first
    /// assert_eq!(reader.try_recv(), Err(ReadError::Closed(CloseReason::error("tool failed"))));
    /// ```
    pub fn close(mut self, reason: CloseReason) {
        self.close_inner(reason);
    }

    fn close_inner(&mut self, reason: CloseReason) {
        if self.closed {
            return;
        }
        self.closed = true;
        let shared = &*self.shared;
        *lock(&shared.close_reason) = Some(reason);
        // Release: pairs with the Acquire loads of `closed` in readers; every `head` publish and the
        // reason happen-before a reader that sees the stream closed.
        shared
            .closed
            .store(true, ord("closed_relaxed", Release, Relaxed));
        shared.wake_readers();
    }
}

#[cfg(not(replay_ring_loom))]
impl<T> Producer<T> {
    /// Appends `value`, blocking the thread up to `timeout` for space. On timeout the value comes
    /// back in [`PushError::Full`] and no id is consumed. For servers without an async runtime.
    /// A `timeout` too large to add to the current time (such as `Duration::MAX`) waits without a
    /// deadline.
    ///
    /// # Errors
    ///
    /// [`PushError::Full`] (with `value`) when no space appeared within `timeout`;
    /// [`PushError::IdsExhausted`] after id `u64::MAX - 1`.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let (mut producer, ring) = replay_ring::ReplayRing::<u8>::new(1, 1).unwrap();
    /// producer.try_push(1).unwrap();
    /// let err = producer.push_timeout(2, Duration::from_millis(1)).unwrap_err();
    /// assert!(err.is_full());
    /// ring.release_through(1).unwrap();
    /// assert_eq!(producer.push_timeout(2, Duration::from_secs(1)), Ok(2));
    /// ```
    pub fn push_timeout(&mut self, value: T, timeout: Duration) -> Result<u64, PushError<T>> {
        if self.ready_timeout(timeout) {
            self.try_push(value)
        } else {
            self.count_full();
            Err(PushError::Full(value))
        }
    }

    /// Blocks up to `timeout` until a push would be accepted. Returns whether it would (`true` also
    /// once ids are exhausted, which the push then reports).
    /// A `timeout` too large to add to the current time (such as `Duration::MAX`) waits without a
    /// deadline.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let (mut producer, ring) = replay_ring::ReplayRing::<u8>::new(1, 1).unwrap();
    /// assert!(producer.ready_timeout(Duration::ZERO));
    /// producer.try_push(1).unwrap();
    /// assert!(!producer.ready_timeout(Duration::from_millis(1)));
    /// ring.release_through(1).unwrap();
    /// assert!(producer.ready_timeout(Duration::ZERO));
    /// ```
    #[must_use = "the window may still be full when this returns false"]
    pub fn ready_timeout(&mut self, timeout: Duration) -> bool {
        let deadline = crate::blocking::deadline_after(timeout);
        // A `ready()` dropped while pending leaves its wait open for a future polled again; a
        // blocking call is a wait of its own (`Metrics::producer_waits` counts each one).
        self.stop_waiting();
        // SAFETY: the waker goes only to this thread's stack and, through `poll_ready`, into
        // `producer_waker`; both it and `producer_thread_waker` are fields of the ring's shared
        // state, and every thread that wakes it (a releaser, an unpinning reader) holds a handle
        // on the ring.
        let waker = unsafe { self.shared.producer_thread_waker.bind() };
        let ready = crate::blocking::block_on_deadline(waker, deadline, |cx| self.poll_ready(cx));
        self.stop_waiting();
        ready.is_some()
    }
}

/// Whether `floor` alone leaves no room for `id`: the window ends at the lowest of the floor and
/// the reader pins, plus the capacity, so `id >= floor + capacity` is full whatever the pins say.
fn floor_bars<T>(shared: &Shared<T>, floor: u64, id: u64) -> bool {
    id >= floor.saturating_add(shared.capacity())
}

/// The first id `>= from` (and `<= limit`) whose slot segment is not allocated yet, or `limit`.
/// Walks one segment at a time from `from`'s, wrapping to segment 0 after the last one: at most
/// `segments + 1` steps, on the producer's slow path only.
fn allocated_until<T>(shared: &Shared<T>, from: u64, limit: u64) -> u64 {
    let slots = &shared.slots;
    let mut id = from;
    while id < limit {
        let index = slots.index(id);
        let k = slots.segment_of(index);
        if !slots.is_allocated(k) {
            return id;
        }
        let left = (slots.segment_start(k) + slots.segment_len(k) - index) as u64;
        id = id.saturating_add(left);
    }
    limit
}

impl<T> Drop for Producer<T> {
    fn drop(&mut self) {
        self.close_inner(CloseReason::ProducerDropped);
    }
}
