//! [`Reader::gating`]: a reader that keeps its pin between reads, including reads that find
//! nothing, the way a disruptor consumer's sequence gates its producer. Each read then costs a head
//! load and, after a batch, a plain pin store and the producer wake-up check: no pin fence and no
//! floor check. Why that is sound is the argument for
//! [`Reader::drain`] (`docs/design.md`, "Draining"): a gate is a drain whose loop may also poll an
//! empty ring.

use std::fmt;

use super::{advance_pin, unpin, Batch, Reader};
use crate::error::ReadError;
use crate::sync::{
    ord,
    Ordering::{Acquire, Relaxed},
};

/// A [`Reader`] that holds its pin until this guard is dropped, so that it can poll without a
/// memory fence per read. Obtained from [`Reader::gating`].
///
/// While the guard lives, the producer does not reuse the slot of any id at or after the reader's
/// cursor, nor those of the batch [`try_read`](Self::try_read) lent last (until the next call
/// moves the pin), even ids the retention policy has released: the reader gates the producer,
/// and a gating reader that stops reading fills the window and makes the producer wait (or
/// refuse with `Full`).
/// Dropping the guard, or the thread unwinding past it, clears the pin. Leaking it
/// (`mem::forget`) leaves the pin set until the reader's next read or wait, or its drop.
///
/// **Polling a busy stream:** a reader that polls again as soon as it has handled a batch keeps up
/// with the producer a few events at a time, and each poll takes the cache lines of `head` and of
/// the slot being written away from the producer, so both threads wait for a cache-line transfer
/// every few events. When a batch comes back short, spinning briefly before the next poll (a few
/// dozen [`std::hint::spin_loop`] hints) lets the next batch form: the reader then reads whole
/// lines the producer has finished with. With a capacity of 1,024 on a 2-core Intel VM, a
/// two-thread `u64` stream ran at 170–210 million events per second with the loop below and at
/// 26–52 million with the same loop polling again at once (`docs/benchmarks.md`, scenario 2). The
/// spin adds at most its own length to the latency of an event that arrives during it.
///
/// ```
/// use std::hint::spin_loop;
/// use replay_ring::{PushError, ReadError, ReplayRing};
///
/// let (mut producer, ring) = ReplayRing::<u64>::new(1024, 1).unwrap();
/// let mut reader = ring.reader().unwrap();
/// let consumer = std::thread::spawn(move || {
///     let mut gate = reader.gating().unwrap();
///     let mut sum = 0;
///     loop {
///         match gate.try_read() {
///             Ok(Some(batch)) => {
///                 let short = batch.len() < 512;
///                 let (a, b) = batch.as_slices();
///                 sum += a.iter().chain(b).sum::<u64>();
///                 let last = batch.last_id();
///                 drop(batch);
///                 // This consumer is the only one that needs the events: let the window move.
///                 ring.release_through(last).unwrap();
///                 if short {
///                     // Let the next batch form before polling again.
///                     (0..64).for_each(|_| spin_loop());
///                 }
///             }
///             Ok(None) => spin_loop(),
///             Err(ReadError::Closed(_)) => return sum,
///             Err(e) => panic!("{e}"),
///         }
///     }
/// });
/// for i in 1..=10_000 {
///     let mut v = i;
///     while let Err(PushError::Full(back)) = producer.try_push(v) {
///         v = back;
///         spin_loop();
///     }
/// }
/// drop(producer); // closes the stream: the consumer's reads end once it has read everything
/// assert_eq!(consumer.join().unwrap(), (1..=10_000).sum::<u64>());
/// ```
///
/// Releases do not stop a gate: if the retention policy releases events the gate has not read yet,
/// the gate still lends them (they are intact: the pin kept their slots), in order. A read after
/// the guard is dropped checks the floor again and reports [`ReadError::Gap`] if the reader's next
/// event was released.
///
/// ```
/// let (mut producer, ring) = replay_ring::ReplayRing::<u32>::new(4, 1).unwrap();
/// let mut reader = ring.reader().unwrap();
/// let mut gate = reader.gating().unwrap();
/// assert!(gate.try_read().unwrap().is_none());
/// producer.try_push(10).unwrap();
/// producer.try_push(20).unwrap();
/// let batch = gate.try_read().unwrap().unwrap();
/// assert_eq!(batch.as_slices(), (&[10, 20][..], &[][..]));
/// drop(batch);
/// ring.release_through(2).unwrap();
/// assert_eq!(gate.try_read().unwrap().map(|b| b.len()), None);
/// drop(gate);
/// assert_eq!(reader.cursor(), 3);
/// ```
#[must_use = "the pin is cleared when the guard is dropped"]
pub struct Gating<'a, T> {
    reader: &'a mut Reader<T>,
    /// The pin the entry holds: the cursor when it was last stored.
    pin: u64,
}

impl<T> fmt::Debug for Gating<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gating")
            .field("reader", &self.reader)
            .field("pin", &self.pin)
            .finish()
    }
}

impl<T> Reader<T> {
    /// Pins the reader at its cursor until the returned guard is dropped, for a thread that polls a
    /// busy stream: [`Gating::try_read`] then loads the head and, after a batch, moves the pin forward
    /// with a plain store, where [`try_read`](Self::try_read) sets the pin, issues a full memory
    /// fence and checks the floor for every batch, and [`drain`](Self::drain) for every call. (The
    /// advance, like an unpin, checks whether the producer waits for space: without membarrier,
    /// on other platforms than Linux or where it is blocked, that check is itself a full fence.)
    ///
    /// **The cost:** the reader gates the producer for as long as the guard lives (see [`Gating`]).
    /// Use it for a consumer thread that reads without pause; a reader that may stop reading should
    /// use the other reads, which hold nothing back between calls.
    ///
    /// # Errors
    ///
    /// [`ReadError::Gap`] when the reader's next event was already released (the reader never skips
    /// it); a finished reader's terminal error again. Once the guard exists nothing the reader has
    /// yet to read can be overwritten, so the guard's reads end only with [`ReadError::Closed`].
    pub fn gating(&mut self) -> Result<Gating<'_, T>, ReadError> {
        if self.done {
            return Err(self.terminal_error());
        }
        // Pins and checks the floor exactly as the first batch of a drain does.
        self.pin_cursor()?;
        self.draining = true;
        let pin = self.cursor;
        Ok(Gating { reader: self, pin })
    }
}

impl<T> Gating<'_, T> {
    /// Lends every event available now, from the cursor to the head, as
    /// [`Reader::try_read`] does (`Ok(None)` when caught up); dropping the batch marks its events
    /// read. The events it lends stay pinned until the next call, which moves the pin to the
    /// cursor.
    ///
    /// # Errors
    ///
    /// [`ReadError::Closed`] once the stream has ended and everything retained was read; it ends
    /// the reader, and every later read reports it again.
    #[inline]
    pub fn try_read(&mut self) -> Result<Option<Batch<'_, T>>, ReadError> {
        let reader = &mut *self.reader;
        if reader.done {
            return Err(reader.terminal_error());
        }
        if reader.cursor > self.pin {
            // No fence and no floor check, as for a drain's advance (`advance_pin`).
            advance_pin(&reader.shared, reader.entry(), reader.cursor);
            self.pin = reader.cursor;
        }
        // Acquire: pairs with the producer's Release publish: slots up to `head` are written, and
        // their slot segments' directory entries are stored (`slots.rs`).
        let mut head = reader
            .shared
            .head
            .load(ord("lend_head_relaxed", Acquire, Relaxed));
        if reader.cursor > head {
            if !reader.end_if_closed()? {
                return Ok(None);
            }
            // An event was published before the close: read the final head.
            // Acquire: as above.
            head = reader.shared.head.load(Acquire);
        }
        let last = reader.batch_last(head);
        Ok(Some(Batch::new(reader, last)))
    }

    /// The id the reader yields next.
    pub fn cursor(&self) -> u64 {
        self.reader.cursor
    }
}

impl<T> Drop for Gating<'_, T> {
    fn drop(&mut self) {
        self.reader.draining = false;
        unpin(&self.reader.shared, self.reader.entry());
    }
}
