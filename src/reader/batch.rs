//! The [`Batch`] a read lends: the pinned events as at most two slices, and what dropping it
//! consumes.

use std::fmt;
use std::slice;

use super::{unpin, Event, Reader};
use crate::sync::ReadTrack;

/// Events lent by a [`Reader`]: ids `first_id()..=last_id()`, in order, as at most two slices.
///
/// While a batch lives, the producer cannot overwrite its events (a full window backpressures it
/// instead), so hold it only as long as it takes to copy or write the events out.
///
/// # Dropping a batch consumes it
///
/// Dropping the batch marks its events read: the reader's next read starts at `last_id() + 1`.
/// [`mark_read(n)`](Self::mark_read) consumes only the first `n` and keeps the tail for the next
/// read (for example after a short socket write).
///
/// A panic in the code handling the batch consumes only what that code declared done: if the batch
/// is dropped by a panic that started while it was lent, only the first `n` events of the last
/// `mark_read(n)` count as read (none, without a `mark_read`), so a reader that survives the panic
/// (`catch_unwind`) gets the unfinished events again instead of skipping them. The same holds for
/// [`Reader::try_recv`] and [`Reader::recv`]: an event whose `Clone` panics stays unread, and for
/// a [`Reader::drain`] closure that panics.
///
/// One case is beyond what a drop can tell: a batch lent by `try_read` *while the thread is
/// already unwinding* (read in a destructor that runs during a panic), then dropped by a second
/// panic inside a `catch_unwind` there, looks like one dropped normally during the first panic and
/// is consumed whole. Handle such batches with `drain`, or call `mark_read` as each event is
/// done.
///
/// Leaking a batch (`mem::forget`) leaves its events pinned until the reader reads again or is
/// dropped; it never leaves a pin behind once the reader is gone.
///
/// There is no separate commit step because reading is not acknowledging. The cursor a batch
/// advances belongs to this reader alone, and events leave the window only through
/// [`ReplayRing::release_through`](crate::ReplayRing::release_through), which a server calls from its
/// retention policy (on the client's acknowledgement or after a resumption window), never because a
/// reader read something. So a server that reads a batch and then fails to write it to the socket
/// loses nothing for the client: the connection is gone, its reader is dropped with it, and the
/// client reconnects with the `Last-Event-ID` of the last event it did receive; those events are
/// still retained, and the resume replays them. An explicit commit would only add a way to forget
/// it, and re-delivering the same events on every read of a live connection would be the wrong
/// default.
#[must_use = "dropping a Batch marks its events read"]
pub struct Batch<'a, T> {
    reader: &'a mut Reader<T>,
    first: u64,
    last: u64,
    /// How many events, from the front, [`mark_read`](Self::mark_read) declared read; `None` until
    /// it is called, which means all of them on a normal drop.
    marked: Option<u64>,
    /// Whether the thread was already unwinding when the batch was lent, so that `Drop` can tell a
    /// panic that interrupted the handling of this batch from one that was already under way.
    lent_while_panicking: bool,
    /// Set while the crate's own code (a [`drain`](Reader::drain) closure, a clone out of the
    /// batch) handles the batch: a drop then can only be a panic out of that handling, also on a
    /// thread that was already unwinding, where `lent_while_panicking` cannot tell.
    in_handler: bool,
    #[allow(dead_code)] // Held only so loom tracks the reads; empty outside loom builds.
    tracks: Vec<ReadTrack>,
}

impl<T> fmt::Debug for Batch<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Batch")
            .field("first_id", &self.first)
            .field("last_id", &self.last)
            .finish()
    }
}

impl<'a, T> Batch<'a, T> {
    pub(super) fn new(reader: &'a mut Reader<T>, last: u64) -> Self {
        let first = reader.cursor;
        let shared = &*reader.shared;
        let tracks = if cfg!(replay_ring_loom) {
            (first..=last)
                .map(|id| {
                    // The slot's address first, as `as_slices` computes it: its directory load
                    // asserts that the segment was published before this id (`slots.rs`).
                    let _ = shared.slots.slot(id);
                    shared.trackers.get(shared.index(id)).read()
                })
                .collect()
        } else {
            Vec::new()
        };
        Batch {
            first,
            last,
            marked: None,
            lent_while_panicking: std::thread::panicking(),
            in_handler: false,
            tracks,
            reader,
        }
    }

    /// Id of the first event.
    ///
    /// ```
    /// let (mut producer, ring) = replay_ring::ReplayRing::<u8>::new(8, 1).unwrap();
    /// for n in 0..5 {
    ///     producer.try_push(n).unwrap();
    /// }
    /// let mut reader = ring.resume(Some(2)).unwrap();
    /// let batch = reader.try_read().unwrap().unwrap();
    /// assert_eq!((batch.first_id(), batch.last_id(), batch.len()), (3, 5, 3));
    /// assert!(!batch.is_empty());
    /// ```
    pub fn first_id(&self) -> u64 {
        self.first
    }

    /// Id of the last event: the head when the batch was lent, or the last id before a slot
    /// segment boundary (see [`as_slices`](Self::as_slices)).
    pub fn last_id(&self) -> u64 {
        self.last
    }

    /// Number of events (never 0).
    pub fn len(&self) -> usize {
        (self.last - self.first + 1) as usize
    }

    /// Always `false`: an empty read returns `None` instead of a batch.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The events in id order: the first slice starts at `first_id()`, the second (possibly empty)
    /// continues where the ring wrapped around. Zero-copy.
    ///
    /// In a ring built with [`Builder::initial_slots`](crate::Builder::initial_slots) below its
    /// capacity, the slots live in segments that double in size, and the second slice continues in
    /// the segment after the first one's; the batch then ends at that segment's end if the head is
    /// further on (the next read continues there).
    ///
    /// ```
    /// let (mut producer, ring) = replay_ring::ReplayRing::<u32>::new(4, 1).unwrap();
    /// for n in 1..=4 {
    ///     producer.try_push(n).unwrap();
    /// }
    /// ring.release_through(2).unwrap();
    /// producer.try_push(5).unwrap(); // reuses the slot of id 1
    /// let mut reader = ring.resume(Some(2)).unwrap();
    /// let batch = reader.try_read().unwrap().unwrap();
    /// // Id k lives in slot k % 4: id 3 ends the array, ids 4 and 5 start it again.
    /// assert_eq!(batch.as_slices(), (&[3][..], &[4, 5][..]));
    /// assert_eq!(batch.iter().map(|(id, v)| (id, *v)).collect::<Vec<_>>(), [(3, 3), (4, 4), (5, 5)]);
    /// ```
    pub fn as_slices(&self) -> (&[T], &[T]) {
        let slots = &self.reader.shared.slots;
        let len = self.len() as u64;
        let (first, first_len) = slots.run(self.first, len);
        // `first_len <= len`, so the id after the first run is at most `last + 1 <= LAST_ID + 1`.
        let rest = len - first_len as u64;
        let (second, second_len) = if rest == 0 {
            (first, 0)
        } else {
            slots.run(self.first + first_len as u64, rest)
        };
        // `Reader::borrow_available` ends the batch where two runs end.
        debug_assert_eq!(first_len as u64 + second_len as u64, len);
        // SAFETY: ids `first..=last` were published (`last <= head`, loaded with Acquire) so their
        // slots are initialised and their segments' directory entries are visible (`slots.rs`),
        // and this reader's pin at `first` keeps the producer from overwriting any of them while
        // `self` lives. `UnsafeCell<MaybeUninit<T>>` has `T`'s layout; each run lies inside one
        // allocated segment (`Slots::run`), the two are disjoint (fewer than `capacity`
        // consecutive ids), and only shared references are created (readers never write).
        unsafe {
            (
                slice::from_raw_parts(first.cast::<T>(), first_len),
                slice::from_raw_parts(second.cast::<T>(), second_len),
            )
        }
    }

    /// `(id, &event)` pairs in id order.
    ///
    /// ```
    /// let (mut producer, ring) = replay_ring::ReplayRing::<char>::new(2, 1).unwrap();
    /// let mut reader = ring.reader().unwrap();
    /// producer.try_push('x').unwrap();
    /// producer.try_push('y').unwrap();
    /// let batch = reader.try_read().unwrap().unwrap();
    /// assert_eq!(batch.iter().collect::<Vec<_>>(), [(1, &'x'), (2, &'y')]);
    /// ```
    pub fn iter(&self) -> impl Iterator<Item = (u64, &T)> + '_ {
        let (a, b) = self.as_slices();
        // Bounded, not `first..`: an open range would overflow past `u64::MAX` when asked for the
        // item after the last event of a batch that ends at `u64::MAX - 1`.
        (self.first..=self.last).zip(a.iter().chain(b))
    }

    /// Marks only the first `n` events as read (clamped to the batch length): the next read starts
    /// at `first_id() + n`. The rest stay retained (unless released) and pinned no longer. The last
    /// call wins, and it holds even if the batch is dropped by a panic, so a handler can call it as
    /// it makes progress.
    ///
    /// ```
    /// let (mut producer, ring) = replay_ring::ReplayRing::<u8>::new(4, 1).unwrap();
    /// let mut reader = ring.reader().unwrap();
    /// for n in 1..=3 {
    ///     producer.try_push(n).unwrap();
    /// }
    /// let mut batch = reader.try_read().unwrap().unwrap();
    /// batch.mark_read(1); // say only one event fit into the socket
    /// drop(batch);
    /// assert_eq!(reader.try_read().unwrap().unwrap().first_id(), 2);
    /// ```
    pub fn mark_read(&mut self, n: usize) {
        self.marked = Some((n as u64).min(self.last - self.first + 1));
    }

    /// How many events the drop consumes: what `mark_read` declared; otherwise all of them, unless a
    /// panic started while the batch was lent, or left the crate's own handling of it (then none:
    /// the handler did not finish them).
    pub(super) fn consumed(&self) -> u64 {
        match self.marked {
            Some(n) => n,
            None if self.in_handler => 0,
            None if std::thread::panicking() && !self.lent_while_panicking => 0,
            None => self.last - self.first + 1,
        }
    }

    /// Runs `handle` on the batch as its handler: if `handle` panics, the drop consumes only what
    /// `mark_read` declared, even on a thread that was already unwinding when the batch was lent
    /// (a destructor reading during a panic), where `Drop` alone cannot tell a second panic.
    pub(crate) fn handle<R>(&mut self, handle: impl FnOnce(&mut Self) -> R) -> R {
        self.in_handler = true;
        let result = handle(self);
        self.in_handler = false;
        result
    }

    pub(super) fn take_first(mut self) -> Event<T>
    where
        T: Clone,
    {
        // Clone before marking, as the handler: if `clone` panics, the event stays unread.
        let data = self.handle(|batch| batch.as_slices().0[0].clone());
        self.mark_read(1);
        Event {
            id: self.first,
            data,
        }
    }
}

impl<T> Drop for Batch<'_, T> {
    fn drop(&mut self) {
        // End loom's read tracking before the unpin makes the slots writable again.
        self.tracks.clear();
        // `first + consumed <= last + 1 <= LAST_ID + 1`: no overflow.
        self.reader.cursor = self.first + self.consumed();
        if !self.reader.draining {
            unpin(&self.reader.shared, self.reader.entry());
        }
    }
}
