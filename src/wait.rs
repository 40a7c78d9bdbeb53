//! The wait list: finds parked readers without touching idle ones (blocking waits are in
//! `blocking.rs`).
//!
//! Async waits park their `Waker` in their own reader-table entry (or the producer's field), all
//! allocated when the handle is created. The fences of the wake-up protocol (register, fence,
//! re-check; publish, fence, wake) live next to the state they guard, in `shared.rs`, `reader.rs`
//! and `producer.rs`; `docs/design.md` ("Waking readers") has the argument.

use crossbeam_utils::CachePadded;

use crate::sync::{
    AtomicU64,
    Ordering::{AcqRel, Acquire, Relaxed, Release},
};
use crate::table::{ReaderEntry, ReaderTable};

/// The readers parked for new events: a lock-free stack of reader-table indices (index + 1; 0 is
/// the empty list). A parking reader pushes itself once; the producer takes the whole list with one
/// `swap` and wakes each entry on it. So a push costs one load while nobody waits, and one wake per
/// parked reader otherwise — never a visit to an idle entry — and a woken reader is not woken again
/// until it parks again.
///
/// Each entry's `queued` flag says "on a list the producer has not finished waking". Both sides
/// change it only with RMWs, so they agree on who owns the next step:
/// - a reader whose `swap(true)` returns `true` is still listed: the producer's later
///   `swap(false)` reads the reader's `true`, synchronizes with it, and so wakes the waker the
///   reader registered just before. (The waker's own state word gives the same guarantee, since
///   registering and waking are RMWs on it; the RMWs here keep the argument local.)
/// - the producer reads `wait_next` *before* clearing `queued`, since the reader may push itself
///   again (rewriting `wait_next`) as soon as it sees `false`.
pub(crate) struct WaitList {
    head: CachePadded<AtomicU64>,
}

impl WaitList {
    pub(crate) fn new() -> Self {
        WaitList {
            head: CachePadded::new(AtomicU64::new(0)),
        }
    }

    /// Puts reader `index` (whose waker is already registered) on the list, unless it is still on
    /// it. The caller then issues its half of the wake-up fence and re-checks.
    pub(crate) fn enqueue(&self, index: usize, entry: &ReaderEntry) {
        // AcqRel: the Release half publishes the waker registered before; the Acquire half pairs
        // with the producer's `swap(false)`, which read `wait_next` before it.
        let listing = crate::sync::ord("enqueue_queued_relaxed", AcqRel, Relaxed);
        if entry.queued.swap(true, listing) && !crate::sync::mutant("requeue_while_listed") {
            return;
        }
        // Relaxed: a stale head only makes the CAS below fail and retry.
        let mut head = self.head.load(Relaxed);
        loop {
            // Relaxed: published by the Release CAS below.
            entry.wait_next.store(head, Relaxed);
            // Release: pairs with the producer's Acquire `swap` in `wake_all`, so it sees
            // `wait_next` and the registered waker.
            let publish = crate::sync::ord("wait_push_relaxed", Release, Relaxed);
            match self
                .head
                .compare_exchange(head, index as u64 + 1, publish, Relaxed)
            {
                Ok(_) => return,
                Err(actual) => head = actual,
            }
        }
    }

    /// Whether no reader is parked. Producer side, after its half of the wake-up fence.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        // Relaxed: ordered by the caller's fence (the store-buffering pair in `docs/design.md`).
        self.head.load(Relaxed) == 0
    }

    /// Takes every parked reader off the list and wakes it. If a waker panics (wakers are user
    /// code), the rest of the list is still woken and the first panic is resumed afterwards: a
    /// reader left behind would keep its `queued` flag set and never be listed, or woken, again.
    #[cold]
    pub(crate) fn wake_all(&self, table: &ReaderTable) {
        // Acquire: pairs with the Release CAS in `enqueue` (and, through the release sequence of
        // CASes, with every reader pushed before), so every listed reader's `wait_next` link is
        // seen (the `wake_take_relaxed` mutant).
        let mut next = self
            .head
            .swap(0, crate::sync::ord("wake_take_relaxed", Acquire, Relaxed));
        let mut panic = None;
        while next != 0 {
            // SAFETY: only a claim's owner lists its entry (`enqueue`), after the claim, with the
            // Release CAS our Acquire swap pairs with (through the list's release sequence).
            let entry = unsafe { table.entry(next as usize - 1) };
            let clear_first = crate::sync::mutant("clear_queued_before_next");
            if clear_first {
                // The mutant's step, with the real one's ordering (see below): only its place moves.
                entry.queued.swap(false, AcqRel);
            }
            // Relaxed: written before the Release CAS our swap synchronized with.
            next = entry.wait_next.load(Relaxed);
            // AcqRel: Release orders our `wait_next` load before the reader's next push; Acquire
            // pairs with a reader's `swap(true)` that found the entry still listed, so the wake
            // below sees the waker it registered.
            if !clear_first {
                let unlisting = crate::sync::ord("wake_queued_relaxed", AcqRel, Relaxed);
                entry.queued.swap(false, unlisting);
            }
            if let Err(payload) = wake_catching_panic(entry) {
                panic.get_or_insert(payload);
            }
            if crate::sync::mutant("wake_first_only") {
                return;
            }
        }
        if let Some(payload) = panic {
            std::panic::resume_unwind(payload);
        }
    }
}

/// Wakes `entry`'s registered waker, returning its panic instead of unwinding through the list.
#[cfg(not(replay_ring_loom))]
fn wake_catching_panic(entry: &ReaderEntry) -> std::thread::Result<()> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| entry.waker.wake()))
}

/// Under loom a panic is the model checker reporting a failure: let it through.
#[cfg(replay_ring_loom)]
fn wake_catching_panic(entry: &ReaderEntry) -> std::thread::Result<()> {
    entry.waker.wake();
    Ok(())
}
