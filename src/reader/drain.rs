//! [`Reader::drain`]: lends batch after batch under one pin, which advances with the cursor instead
//! of being cleared and set again. Why the later batches need no fence and no floor check is argued
//! in `docs/design.md` ("Draining: one pin for consecutive batches").

use std::ops::ControlFlow;

use super::{advance_pin, unpin, Batch, Reader};
use crate::error::ReadError;
use crate::sync::{
    ord,
    Ordering::{Acquire, Relaxed},
};

/// Owns the drain's pin: dropping it, on return or while unwinding out of the caller's closure,
/// clears the pin (and wakes a producer waiting for space), so no pin outlives
/// [`Reader::drain`].
struct Draining<'a, T> {
    reader: &'a mut Reader<T>,
}

impl<'a, T> Draining<'a, T> {
    /// Takes over a pin that `pin_and_check` (here or in a resume) set and validated.
    fn new(reader: &'a mut Reader<T>) -> Self {
        reader.draining = true;
        Draining { reader }
    }
}

impl<T> Drop for Draining<'_, T> {
    fn drop(&mut self) {
        self.reader.draining = false;
        unpin(&self.reader.shared, self.reader.entry());
    }
}

impl<T> Reader<T> {
    /// Lends every available batch to `f`, one after another, until the reader has caught up,
    /// keeping its pin between batches; returns how many events were read (`Ok(0)` when none was
    /// available).
    ///
    /// Each batch is what [`try_read`](Self::try_read) would lend at that moment, and dropping it
    /// after `f` returns consumes it the same way (all of it, or what [`Batch::mark_read`]
    /// declared; none of it if `f` panics without a `mark_read`). The drain stops when the reader has
    /// caught up with the head, when `f` returns [`ControlFlow::Break`], or when `f` marked only part
    /// of a batch read (a short write: the rest is lent again by the next read).
    ///
    /// **Why:** `try_read` sets the reader's pin and issues a full memory fence for every batch,
    /// and a reader that keeps up with a busy producer sees batches of one to three events. `drain`
    /// pays the fence once: for every later batch it only loads the head and moves the pin forward
    /// with a plain store. Use it in loops that poll a busy stream and hand each batch on quickly.
    ///
    /// **The cost:** between batches the pin stays set, so while `drain` runs the producer does not
    /// reuse the slot of any id at or after the reader's cursor, even one the retention policy has
    /// released (a reader that stops reading, on the other hand, never holds the producer back:
    /// the pin is always cleared when `drain` returns, including when `f` panics). For the same
    /// reason a drain may lend events that were released while it was running: they are intact,
    /// nothing is skipped, and the reader continues at its cursor as always. Only the first batch
    /// of a drain is checked against the floor.
    ///
    /// # Errors
    ///
    /// [`ReadError::Gap`] when the reader's next event was released before the drain started (the
    /// reader never skips it); [`ReadError::Closed`] once the stream has ended and everything
    /// retained was read. Both end the reader: every later read reports them again. A drain that lent
    /// at least one batch returns `Ok`; a `Closed` that follows is reported by the next read.
    ///
    /// ```
    /// use std::ops::ControlFlow;
    ///
    /// let (mut producer, ring) = replay_ring::ReplayRing::<u32>::new(2, 1).unwrap();
    /// let mut reader = ring.reader().unwrap();
    /// producer.try_push(10).unwrap();
    /// let mut seen = Vec::new();
    /// let read = reader.drain(|batch| {
    ///     seen.extend(batch.iter().map(|(id, v)| (id, *v)));
    ///     ring.release_through(batch.last_id()).unwrap();
    ///     if batch.first_id() == 1 {
    ///         // Arrives while the drain runs: lent as a second batch under the same pin.
    ///         producer.try_push(20).unwrap();
    ///     }
    ///     ControlFlow::Continue(())
    /// });
    /// assert_eq!(read, Ok(2));
    /// assert_eq!(seen, [(1, 10), (2, 20)]);
    /// // Caught up: nothing to lend, and the pin is gone, so both slots can be reused.
    /// assert_eq!(reader.drain(|_| ControlFlow::Continue(())), Ok(0));
    /// assert_eq!(producer.try_push(30), Ok(3));
    /// assert_eq!(producer.try_push(40), Ok(4));
    /// ```
    pub fn drain<F>(&mut self, mut f: F) -> Result<u64, ReadError>
    where
        F: FnMut(&mut Batch<'_, T>) -> ControlFlow<()>,
    {
        if !self.has_next()? {
            return Ok(0);
        }
        // The first batch pins and checks the floor exactly as `borrow_available` does.
        self.pin_cursor()?;
        let start = self.cursor;
        let draining = Draining::new(self);
        let reader = &mut *draining.reader;
        // Acquire: pairs with the producer's Release publish: slots up to `head` are written, and
        // their slot segments' directory entries are stored (`slots.rs`).
        let mut head = reader
            .shared
            .head
            .load(ord("lend_head_relaxed", Acquire, Relaxed));
        loop {
            // The pin is at `cursor` (validated, or advanced from a validated pin): see
            // "Draining" in docs/design.md for why the batch fits in the window. A ring with
            // several slot segments may end the batch before the head; the loop continues there.
            let last = reader.batch_last(head);
            let mut batch = Batch::new(reader, last);
            let flow = batch.handle(&mut f);
            let whole = batch.consumed() == batch.len() as u64;
            // Consumes the batch (moves the cursor); `draining` keeps the pin where it is.
            drop(batch);
            if flow.is_break() || !whole {
                break;
            }
            // Acquire: pairs with the producer's Release publish, as above.
            head = reader
                .shared
                .head
                .load(ord("lend_head_relaxed", Acquire, Relaxed));
            if reader.cursor > head {
                break;
            }
            advance_pin(&reader.shared, reader.entry(), reader.cursor);
        }
        let read = reader.cursor - start;
        drop(draining);
        Ok(read)
    }
}
