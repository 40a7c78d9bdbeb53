//! Async fan-out (scenario 7): one producer thread, `R` reader tasks on a multi-thread tokio
//! runtime (one worker per core), every reader sees every event, nothing is lost.
//!
//! - **replay-ring**: the producer `push().await`s on a current-thread runtime (it waits when the
//!   window is full); each reader task `read_coalesced().await`s a batch (zero-copy slices) and
//!   acknowledges it. The window is released in steps of a quarter of the capacity once every reader has read a
//!   step ([`StepAcks`]: one shared counter per step, O(1) per reader and step, whatever `R`).
//! - **tokio-broadcast**: `send` from the producer thread; `send` never waits (it overwrites), so
//!   the producer keeps it lossless by waiting, after every `CAPACITY/2` sends, until
//!   `len() <= CAPACITY/2`; readers `recv().await` (one clone per event and reader). A `Lagged`
//!   error panics the run.
//! - **async-broadcast**: overflow off (the sender waits when full); `broadcast_direct().await` /
//!   `recv_direct().await`.
//!
//! Every reader checks every event it gets: the id (replay-ring's batch ids) and the payload are
//! those of the next event, and at the end it has seen exactly `events` of them. A peer that loses,
//! duplicates or reorders an event fails the run (a panic) instead of posting a number.
//!
//! Timing: from the producer's first push, once every reader task has started, to the last reader
//! seeing the last event. Latency: the producer stamps event `k` just before pushing it; a sample
//! of readers (every `R / LATENCY_READERS`-th) subtracts the stamp when it sees `k`.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::AcqRel, Ordering::Acquire};
use std::sync::atomic::{Ordering::Relaxed, Ordering::Release};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam::utils::CachePadded;
use replay_ring::{BuildError, ReplayRing};
use tokio::runtime::Runtime;

use super::{now_ns, wait_until, Backoff, Payload, CAPACITY};

/// The implementations compared in the async fan-out scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AsyncPeer {
    /// replay-ring: `push().await`, `read_coalesced().await` (batches), step releases.
    ReplayRing,
    /// `tokio::sync::broadcast`, kept lossless by the producer waiting on `len()`.
    TokioBroadcast,
    /// async-broadcast with overflow off.
    AsyncBroadcast,
    /// replay-ring with the producer publishing [`COALESCE`] events per `try_push_many` (one `head`
    /// store and one wake-up per run instead of one per event): the coalesced-wake-up variant,
    /// compared against [`AsyncPeer::ReplayRing`] (not part of [`AsyncPeer::ALL`]).
    ReplayRingCoalesced,
}

/// Events per publish in [`AsyncPeer::ReplayRingCoalesced`].
pub const COALESCE: u64 = 16;

impl AsyncPeer {
    /// Every peer, replay-ring first.
    pub const ALL: [AsyncPeer; 3] = [
        AsyncPeer::ReplayRing,
        AsyncPeer::TokioBroadcast,
        AsyncPeer::AsyncBroadcast,
    ];

    /// Benchmark id.
    pub fn name(self) -> &'static str {
        match self {
            AsyncPeer::ReplayRing => "replay-ring",
            AsyncPeer::TokioBroadcast => "tokio-broadcast",
            AsyncPeer::AsyncBroadcast => "async-broadcast",
            AsyncPeer::ReplayRingCoalesced => "replay-ring-coalesced",
        }
    }
}

/// Reader counts of the scenario: full runs, and test/quick mode (kept small for CI).
pub fn reader_counts() -> &'static [usize] {
    if super::quick() {
        &[1, 10, 100]
    } else {
        &[1, 10, 100, 1_000, 10_000]
    }
}

/// Events per throughput run with `readers` readers: about 1,000,000 deliveries, at least 256 events
/// and at most 100,000.
pub fn events_for(readers: usize) -> u64 {
    if super::quick() {
        return 200;
    }
    (1_000_000 / readers as u64).clamp(256, 100_000)
}

/// Readers that record latency samples (spread evenly over the `R` readers).
pub const LATENCY_READERS: usize = 100;

/// The multi-thread runtime the readers run on: one worker per core.
pub fn runtime() -> Runtime {
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .unwrap()
}

/// Why a peer could not run a configuration (replay-ring's reader table has a maximum size).
#[derive(Debug)]
pub struct Unsupported(pub String);

/// One run's shape.
#[derive(Clone, Copy, Debug)]
pub struct FanoutCfg {
    /// Events pushed (ids 1..=events).
    pub events: u64,
    /// Reader tasks.
    pub readers: usize,
    /// Push one event every `pace_ns`; `None` = as fast as the peer takes them.
    pub pace_ns: Option<u64>,
    /// Record latency samples.
    pub latency: bool,
}

/// One run's outcome.
#[derive(Debug)]
pub struct FanoutOut {
    /// First push to the last reader seeing the last event.
    pub elapsed: Duration,
    /// Push-to-seen latencies in ns of the sampled readers, unsorted (empty unless `cfg.latency`).
    pub latencies: Vec<u64>,
}

/// Per-event push stamps, indexed by id - 1.
type Stamps = Arc<Vec<AtomicU64>>;

/// A reader's check of what it receives, and its latency samples.
struct Check<T: Payload> {
    source: T::Source,
    /// The id this reader must see next.
    next: u64,
    events: u64,
    stamps: Option<Stamps>,
    lat: Vec<u64>,
    sum: u64,
}

impl<T: Payload> Check<T> {
    fn new(events: u64, stamps: Option<Stamps>) -> Self {
        let lat = if stamps.is_some() {
            Vec::with_capacity(events as usize)
        } else {
            Vec::new()
        };
        Check {
            source: T::source(),
            next: 1,
            events,
            stamps,
            lat,
            sum: 0,
        }
    }

    fn done(&self) -> bool {
        self.next > self.events
    }

    /// Event `self.next` arrived with payload `v`.
    #[inline(always)]
    fn seen(&mut self, v: &T) {
        assert!(
            self.next <= self.events && v.is_event(&self.source, self.next),
            "reader expected event {} of {}, got {v:?}",
            self.next,
            self.events
        );
        self.sum = self.sum.wrapping_add(v.touch());
        if let Some(s) = &self.stamps {
            // Relaxed: the peer's own publish/consume synchronisation orders the stamp before this.
            let sent = s[(self.next - 1) as usize].load(Relaxed);
            self.lat.push(now_ns().saturating_sub(sent));
        }
        self.next += 1;
    }
}

/// Releases replay-ring's window once every reader has read a step: one counter per step in
/// flight (the window holds `CAPACITY / STEP` steps), incremented by each reader as it reads past
/// the step's last id; the reader that completes the count releases through that id.
pub struct StepAcks {
    counts: Vec<CachePadded<AtomicUsize>>,
    readers: usize,
}

/// Events per release step: a quarter of the window, as in the live-tail scenarios.
const STEP: u64 = (CAPACITY / 4) as u64;

impl StepAcks {
    fn new(readers: usize) -> Self {
        StepAcks {
            counts: (0..CAPACITY as u64 / STEP)
                .map(|_| CachePadded::new(AtomicUsize::new(0)))
                .collect(),
            readers,
        }
    }

    /// This reader has read every id up to `last`, having read up to `prev` before.
    #[inline]
    fn read_through<T: Send>(&self, prev: u64, last: u64, ring: &ReplayRing<T>) {
        for step in prev / STEP + 1..=last / STEP {
            let count = &self.counts[(step % self.counts.len() as u64) as usize];
            // AcqRel: the last reader of a step sees every other reader's increment (and through
            // them, that they are done with the step's events) before it releases them.
            if count.fetch_add(1, AcqRel) + 1 == self.readers {
                // Release: the reset happens-before the release below, which the producer must
                // observe (Acquire on the floor) before pushing the events that let any reader
                // reach step + counts.len(), the next user of this counter.
                count.store(0, Release);
                ring.release_through(step * STEP).unwrap();
            }
        }
    }
}

/// Runs one async fan-out for `peer` on `rt`; `Err` if the peer cannot serve `cfg.readers`.
/// Panics if any reader misses, duplicates or reorders an event.
pub fn run<T: Payload>(
    rt: &Runtime,
    peer: AsyncPeer,
    cfg: &FanoutCfg,
) -> Result<FanoutOut, Unsupported> {
    let stamps: Option<Stamps> = cfg
        .latency
        .then(|| Arc::new((0..cfg.events).map(|_| AtomicU64::new(0)).collect()));
    let stride = cfg.readers.div_ceil(LATENCY_READERS);
    let checks: Vec<Check<T>> = (0..cfg.readers)
        .map(|i| Check::new(cfg.events, stamps.clone().filter(|_| i % stride == 0)))
        .collect();
    let probe = Probe {
        stamps,
        pace: cfg.pace_ns,
        start: 0,
    };
    let started = Arc::new(AtomicUsize::new(0));
    let (t0, handles) = match peer {
        AsyncPeer::ReplayRing => ring_run(rt, cfg, probe, checks, &started, 1)?,
        AsyncPeer::ReplayRingCoalesced => ring_run(rt, cfg, probe, checks, &started, COALESCE)?,
        AsyncPeer::TokioBroadcast => tokio_run(rt, cfg, probe, checks, &started),
        AsyncPeer::AsyncBroadcast => async_broadcast_run(rt, cfg, probe, checks, &started),
    };
    let done = rt.block_on(async {
        let mut out = Vec::with_capacity(handles.len());
        for h in handles {
            out.push(h.await.unwrap());
        }
        out
    });
    let mut end = t0;
    let mut latencies = Vec::new();
    for (i, (at, check)) in done.into_iter().enumerate() {
        assert!(
            check.done(),
            "{peer:?}: reader {i} saw {} of {} events",
            check.next - 1,
            cfg.events
        );
        std::hint::black_box(check.sum);
        end = end.max(at);
        latencies.extend(check.lat);
    }
    Ok(FanoutOut {
        elapsed: end - t0,
        latencies,
    })
}

type Handles<T> = Vec<tokio::task::JoinHandle<(Instant, Check<T>)>>;

/// Producer-side pacing and stamping.
struct Probe {
    stamps: Option<Stamps>,
    pace: Option<u64>,
    start: u64,
}

impl Probe {
    /// Waits until every reader task has started, then starts the clock and the pacing origin.
    fn start(&mut self, started: &AtomicUsize, readers: usize) -> Instant {
        let mut backoff = Backoff::default();
        // Acquire: pairs with each task's Release increment (nothing else is ordered by it).
        while started.load(Acquire) < readers {
            backoff.snooze();
        }
        self.start = now_ns();
        Instant::now()
    }

    #[inline(always)]
    fn before_push(&self, i: u64) {
        if let Some(p) = self.pace {
            wait_until(self.start + i * p);
        }
        if let Some(s) = &self.stamps {
            // Relaxed: the peer's publish/consume synchronisation orders it before the read.
            s[(i - 1) as usize].store(now_ns(), Relaxed);
        }
    }
}

/// A reader task's first step: count itself as started.
fn mark_started(started: &AtomicUsize) {
    // Release: pairs with the producer's Acquire wait in `Probe::start`.
    started.fetch_add(1, Release);
}

fn current_thread_rt() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

/// `per_publish` = 1: one `push().await` per event (a wake-up per event for whoever waits); more:
/// runs of up to `per_publish` events published by one `try_push_many` after `ready().await`.
fn ring_run<T: Payload>(
    rt: &Runtime,
    cfg: &FanoutCfg,
    mut probe: Probe,
    checks: Vec<Check<T>>,
    started: &Arc<AtomicUsize>,
    per_publish: u64,
) -> Result<(Instant, Handles<T>), Unsupported> {
    let built = ReplayRing::<T>::builder()
        .capacity(CAPACITY)
        .max_readers(cfg.readers)
        .build();
    let (mut producer, ring) = match built {
        Ok(built) => built,
        Err(e @ BuildError::TooManyReaders { .. }) => return Err(Unsupported(e.to_string())),
        Err(e) => panic!("{e}"),
    };
    let acks = Arc::new(StepAcks::new(cfg.readers));
    let handles = checks
        .into_iter()
        .map(|mut check| {
            let mut reader = ring.reader().unwrap();
            let (ring, acks, started) = (ring.clone(), acks.clone(), started.clone());
            rt.spawn(async move {
                mark_started(&started);
                let mut prev = 0;
                while !check.done() {
                    let batch = reader.read_coalesced().await.unwrap();
                    assert_eq!(
                        batch.first_id(),
                        check.next,
                        "replay-ring: batch out of order"
                    );
                    let (a, b) = batch.as_slices();
                    a.iter().chain(b).for_each(|v| check.seen(v));
                    let last = batch.last_id();
                    drop(batch);
                    acks.read_through(prev, last, &ring);
                    prev = last;
                }
                (Instant::now(), check)
            })
        })
        .collect();
    let source = T::source();
    let t0 = probe.start(started, cfg.readers);
    current_thread_rt().block_on(async {
        if per_publish == 1 {
            for i in 1..=cfg.events {
                probe.before_push(i);
                let id = producer.push(T::make(&source, i)).await.unwrap();
                debug_assert_eq!(id, i);
            }
            return;
        }
        let mut next = 1;
        while next <= cfg.events {
            producer.ready().await;
            let last = (next + per_publish - 1).min(cfg.events);
            // A value is taken from the iterator only once it has a slot, so stamps stay exact.
            let mut run = (next..=last).map(|i| {
                probe.before_push(i);
                T::make(&source, i)
            });
            next += producer.try_push_many(&mut run) as u64;
        }
    });
    Ok((t0, handles))
}

fn tokio_run<T: Payload>(
    rt: &Runtime,
    cfg: &FanoutCfg,
    mut probe: Probe,
    checks: Vec<Check<T>>,
    started: &Arc<AtomicUsize>,
) -> (Instant, Handles<T>) {
    use tokio::sync::broadcast;
    let (tx, _) = broadcast::channel::<T>(CAPACITY);
    let handles = checks
        .into_iter()
        .map(|mut check| {
            let mut rx = tx.subscribe();
            let started = started.clone();
            rt.spawn(async move {
                mark_started(&started);
                while !check.done() {
                    let v = rx
                        .recv()
                        .await
                        .unwrap_or_else(|e| panic!("tokio broadcast: {e}"));
                    check.seen(&v);
                }
                (Instant::now(), check)
            })
        })
        .collect();
    let source = T::source();
    let half = CAPACITY / 2;
    let t0 = probe.start(started, cfg.readers);
    let mut backoff = Backoff::default();
    for i in 1..=cfg.events {
        probe.before_push(i);
        tx.send(T::make(&source, i)).unwrap();
        if i % half as u64 == 0 {
            // Never more than CAPACITY queued: no receiver can lag (and lose events).
            while tx.len() > half {
                backoff.snooze();
            }
            backoff.reset();
        }
    }
    (t0, handles)
}

fn async_broadcast_run<T: Payload>(
    rt: &Runtime,
    cfg: &FanoutCfg,
    mut probe: Probe,
    checks: Vec<Check<T>>,
    started: &Arc<AtomicUsize>,
) -> (Instant, Handles<T>) {
    let (tx, rx) = async_broadcast::broadcast::<T>(CAPACITY);
    let handles = checks
        .into_iter()
        .map(|mut check| {
            let mut rx = rx.new_receiver();
            let started = started.clone();
            rt.spawn(async move {
                mark_started(&started);
                while !check.done() {
                    let v = rx.recv_direct().await.unwrap();
                    check.seen(&v);
                }
                (Instant::now(), check)
            })
        })
        .collect();
    // Only the readers' receivers may hold events back.
    drop(rx);
    let source = T::source();
    let t0 = probe.start(started, cfg.readers);
    current_thread_rt().block_on(async {
        for i in 1..=cfg.events {
            probe.before_push(i);
            tx.broadcast_direct(T::make(&source, i)).await.unwrap();
        }
    });
    (t0, handles)
}
