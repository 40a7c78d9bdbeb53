//! Counter snapshot. Nothing here adds a contended atomic to push or read: enqueued and released
//! counts are derived from `head` and `floor`, producer counters are written only by the producer,
//! successful resumes are counted in each reader's own table entry, and only refused resumes (a cold
//! path) share a counter.

use crate::shared::Shared;
use crate::sync::{Ordering::Acquire, Ordering::Relaxed};

/// A point-in-time snapshot of a stream's counters, from [`ReplayRing::metrics`](crate::ReplayRing::metrics).
///
/// ```
/// let (mut producer, ring) = replay_ring::ReplayRing::<u8>::new(1, 1).unwrap();
/// producer.try_push(1).unwrap();
/// assert!(producer.try_push(2).is_err());
/// let m = ring.metrics();
/// assert_eq!((m.events_enqueued, m.producer_full, m.head, m.floor), (1, 1, 1, 1));
/// ```
///
/// Fields are read one by one, so a snapshot taken while the stream runs is not atomic across
/// fields (each is exact on its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Metrics {
    /// Events accepted by the producer (each got an id).
    pub events_enqueued: u64,
    /// Events that left the window through `release_through`.
    pub events_released: u64,
    /// Resumes that replayed a suffix.
    pub resumes_ok: u64,
    /// Resumes from exactly the head (nothing to replay).
    pub resumes_noop: u64,
    /// Resumes refused because the cursor was below the floor (`ResumeError::BelowFloor`).
    pub resumes_below_floor: u64,
    /// Resumes refused because the cursor was ahead of the head (`ResumeError::AheadOfHead`).
    pub resumes_ahead_of_head: u64,
    /// Pushes refused with `PushError::Full`, and `try_push_many` calls that stopped at a full
    /// window with values left (as the iterator's `size_hint` tells) or having appended nothing.
    pub producer_full: u64,
    /// Waits for space the producer began: times it found the window full and registered to be
    /// woken. A `ready()` or `push()` future counts once per full window (polled again, or made
    /// again after a cancel, before room appears, it continues the same wait); each blocking
    /// `ready_timeout` or `push_timeout` call that finds the window full counts once, even with a
    /// zero timeout.
    pub producer_waits: u64,
    /// Readers registered right now.
    pub readers_active: usize,
    /// Oldest retained id.
    pub floor: u64,
    /// Newest id.
    pub head: u64,
    /// Window capacity.
    pub capacity: usize,
}

impl Metrics {
    pub(crate) fn collect<T>(shared: &Shared<T>) -> Metrics {
        let mut m = Metrics {
            // Acquire: pairs with the Release publish of `head` / the Release half of the floor's
            // `fetch_max`; a snapshot should not show a floor ahead of what it says was enqueued.
            // Floor first: it never exceeds the head + 1 it was released against, and the head only
            // grows, so the snapshot keeps `floor <= head + 1`.
            floor: shared
                .floor
                .load(crate::sync::ord("metrics_floor_relaxed", Acquire, Relaxed)),
            head: shared.head.load(Acquire),
            capacity: shared.capacity() as usize,
            // Relaxed: statistics written by the producer alone.
            producer_full: shared.producer_full.load(Relaxed),
            producer_waits: shared.producer_waits.load(Relaxed),
            // Relaxed: statistics; see `ReplayRing::count_refusal`.
            resumes_below_floor: shared.resumes_below_floor.load(Relaxed),
            resumes_ahead_of_head: shared.resumes_ahead_of_head.load(Relaxed),
            ..Metrics::default()
        };
        let origin = shared.first_id - 1;
        m.events_enqueued = m.head - origin;
        m.events_released = m.floor.saturating_sub(1) - origin;
        shared.readers.for_each_entry(|slot| {
            // Relaxed (all below): statistics; see `ReaderCounters::count`.
            let c = &slot.counters;
            m.resumes_ok += c.resumes_ok.load(Relaxed);
            m.resumes_noop += c.resumes_noop.load(Relaxed);
            m.readers_active += usize::from(slot.claimed.load(Relaxed));
        });
        m
    }
}
