//! Live tail: one producer thread, N reader threads, every event delivered to every reader
//! (scenarios 2 and 3, and the latency runs). One runner per peer, each used the way its docs
//! intend; the wait strategy of each is stated on its `Peer` variant and in docs/benchmarks.md.
//!
//! Timing: from the producer's first push (after every reader is ready) to the moment the last
//! reader has seen the last event. Latency: the producer stamps `sent[k]` just before pushing event
//! `k`; reader 0 subtracts it when it sees event `k` (all peers here are FIFO and lossless, so the
//! k-th event a reader sees is event k).

use std::sync::atomic::{
    AtomicU64,
    Ordering::{Relaxed, SeqCst},
};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, Throughput};
use crossbeam::utils::CachePadded;
use replay_ring::{PushError, ReplayRing, WakeupFences};

use super::{now_ns, wait_until, Backoff, NaiveLog, Payload, CAPACITY};

/// The implementations compared in the live-tail scenarios.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    /// replay-ring, `try_push` / `drain` (consecutive batches under one pin) in spin-then-yield
    /// loops, built with `WakeupFences::Asymmetric` (the crate's setting for readers that poll).
    ReplayRingSpin,
    /// replay-ring, `push().await` / `read_coalesced().await` (batch), one current-thread tokio
    /// runtime per thread: waiting threads park. Default `WakeupFences::Symmetric`.
    ReplayRingAsync,
    /// `tokio::sync::broadcast`: `send` from a plain thread, `recv().await` on a current-thread
    /// runtime. `send` never waits (it overwrites); the producer keeps it lossless by waiting,
    /// after every `CAPACITY/2` sends, until `len() <= CAPACITY/2`.
    TokioBroadcast,
    /// async-broadcast (overflow off: the sender waits when full): `broadcast_direct().await` /
    /// `recv_direct().await`, one current-thread runtime per thread.
    AsyncBroadcast,
    /// bus: blocking `broadcast` / `recv` (bus spins, then parks).
    Bus,
    /// disruptor: single producer, `publish` (busy-spins when full), managed consumer threads with
    /// `BusySpinWithSpinLoopHint`; with more threads than cores, `Sleep` (10 µs) instead.
    Disruptor,
    /// crossbeam-channel `bounded`: blocking `send` / `recv`. Not a broadcast (one reader only).
    CrossbeamChannel,
    /// crossbeam `ArrayQueue`: `push` / `pop` in spin-then-yield loops. One reader only.
    ArrayQueue,
    /// rtrb SPSC ring: `push` / `read_chunk` (batch, zero-copy) in spin-then-yield loops. One
    /// reader only.
    Rtrb,
    /// The naive `Mutex<VecDeque>` event log: the reader polls `replay_from(cursor)` in a
    /// spin-then-yield loop; the producer spins while the log is full.
    NaiveLog,
}

impl Peer {
    /// Every peer, replay-ring first.
    pub const ALL: [Peer; 10] = [
        Peer::ReplayRingSpin,
        Peer::ReplayRingAsync,
        Peer::TokioBroadcast,
        Peer::AsyncBroadcast,
        Peer::Bus,
        Peer::Disruptor,
        Peer::CrossbeamChannel,
        Peer::ArrayQueue,
        Peer::Rtrb,
        Peer::NaiveLog,
    ];

    /// Benchmark id.
    pub fn name(self) -> &'static str {
        match self {
            Peer::ReplayRingSpin => "replay-ring-spin",
            Peer::ReplayRingAsync => "replay-ring-async",
            Peer::TokioBroadcast => "tokio-broadcast",
            Peer::AsyncBroadcast => "async-broadcast",
            Peer::Bus => "bus",
            Peer::Disruptor => "disruptor",
            Peer::CrossbeamChannel => "crossbeam-channel",
            Peer::ArrayQueue => "crossbeam-arrayqueue",
            Peer::Rtrb => "rtrb",
            Peer::NaiveLog => "naive-log",
        }
    }

    /// Whether every reader sees every event (so it takes part in the fan-out scenario).
    pub fn broadcasts(self) -> bool {
        !matches!(self, Peer::CrossbeamChannel | Peer::ArrayQueue | Peer::Rtrb)
    }
}

/// One run's shape.
#[derive(Clone, Copy, Debug)]
pub struct TailCfg {
    /// Events pushed (ids 1..=events).
    pub events: u64,
    /// Reader threads.
    pub readers: usize,
    /// Push one event every `pace_ns` (latency runs); `None` = as fast as possible.
    pub pace_ns: Option<u64>,
    /// Record per-event latency at reader 0.
    pub latency: bool,
}

/// One run's outcome.
#[derive(Debug)]
pub struct TailOut {
    /// First push to the last reader seeing the last event.
    pub elapsed: Duration,
    /// Reader 0's push-to-seen latencies in ns, unsorted (empty unless `cfg.latency`).
    pub latencies: Vec<u64>,
}

type Stamps = Arc<Vec<AtomicU64>>;

/// Producer-side pacing and stamping.
struct Probe {
    stamps: Option<Stamps>,
    pace: Option<u64>,
    start: u64,
}

impl Probe {
    #[inline(always)]
    fn before_push(&self, i: u64) {
        if let Some(p) = self.pace {
            wait_until(self.start + i * p);
        }
        if let Some(s) = &self.stamps {
            // Relaxed: the queue's own publish/consume synchronisation orders it before the read.
            s[(i - 1) as usize].store(now_ns(), Relaxed);
        }
    }
}

/// Reader-side accounting.
#[derive(Default)]
struct Recorder {
    stamps: Option<Stamps>,
    lat: Vec<u64>,
    count: u64,
    sum: u64,
}

impl Recorder {
    fn new(stamps: Option<Stamps>, events: u64) -> Self {
        let lat = if stamps.is_some() {
            Vec::with_capacity(events as usize)
        } else {
            Vec::new()
        };
        Recorder {
            stamps,
            lat,
            count: 0,
            sum: 0,
        }
    }

    #[inline(always)]
    fn seen<T: Payload>(&mut self, v: &T) {
        self.count += 1;
        self.sum = self.sum.wrapping_add(v.touch());
        if let Some(s) = &self.stamps {
            // Relaxed: see `Probe::before_push`.
            let sent = s[(self.count - 1) as usize].load(Relaxed);
            self.lat.push(now_ns().saturating_sub(sent));
        }
    }

    /// Every event of a batch that comes as two slices.
    #[inline(always)]
    fn seen_all<T: Payload>(&mut self, a: &[T], b: &[T]) {
        a.iter().chain(b).for_each(|v| self.seen(v));
    }
}

/// What a reader thread hands back.
type ReaderDone = (Instant, Recorder);

/// Runs one live-tail scenario for `peer`. Panics if the peer cannot serve `cfg.readers` readers.
pub fn run<T: Payload>(peer: Peer, cfg: &TailCfg) -> TailOut {
    assert!(
        cfg.readers == 1 || peer.broadcasts(),
        "{peer:?} is not a broadcast"
    );
    let stamps: Option<Stamps> = cfg
        .latency
        .then(|| Arc::new((0..cfg.events).map(|_| AtomicU64::new(0)).collect()));
    let recorders: Vec<Recorder> = (0..cfg.readers)
        .map(|i| Recorder::new(if i == 0 { stamps.clone() } else { None }, cfg.events))
        .collect();
    let probe = Probe {
        stamps,
        pace: cfg.pace_ns,
        start: 0,
    };
    let (t0, done) = match peer {
        Peer::ReplayRingSpin => replay_ring_run::<T>(cfg, probe, recorders, false),
        Peer::ReplayRingAsync => replay_ring_run::<T>(cfg, probe, recorders, true),
        Peer::TokioBroadcast => tokio_run::<T>(cfg, probe, recorders),
        Peer::AsyncBroadcast => async_broadcast_run::<T>(cfg, probe, recorders),
        Peer::Bus => bus_run::<T>(cfg, probe, recorders),
        Peer::Disruptor => disruptor_run::<T>(cfg, probe, recorders),
        Peer::CrossbeamChannel => channel_run::<T>(cfg, probe, recorders),
        Peer::ArrayQueue => array_queue_run::<T>(cfg, probe, recorders),
        Peer::Rtrb => rtrb_run::<T>(cfg, probe, recorders),
        Peer::NaiveLog => naive_run::<T>(cfg, probe, recorders),
    };
    let mut end = t0;
    let mut latencies = Vec::new();
    for (i, (at, rec)) in done.into_iter().enumerate() {
        assert_eq!(rec.count, cfg.events, "{peer:?}: reader {i} missed events");
        end = end.max(at);
        std::hint::black_box(rec.sum);
        if i == 0 {
            latencies = rec.lat;
        }
    }
    TailOut {
        elapsed: end - t0,
        latencies,
    }
}

/// Spawns one thread per reader; each waits on the barrier, runs `body`, and reports.
fn spawn_readers<R: Send + 'static>(
    readers: Vec<R>,
    recorders: Vec<Recorder>,
    barrier: &Arc<Barrier>,
    body: impl Fn(R, &mut Recorder) + Send + Sync + Clone + 'static,
) -> Vec<thread::JoinHandle<ReaderDone>> {
    readers
        .into_iter()
        .zip(recorders)
        .map(|(r, mut rec)| {
            let barrier = barrier.clone();
            let body = body.clone();
            thread::spawn(move || {
                barrier.wait();
                body(r, &mut rec);
                (Instant::now(), rec)
            })
        })
        .collect()
}

/// The shape of every run but disruptor's (which manages its own threads): spawns a thread per
/// reader running `read`, waits until all are ready, starts the clock and the pacing origin, runs
/// `produce` on this thread, and joins the readers.
#[inline(always)]
fn drive<T: Payload, R: Send + 'static>(
    mut probe: Probe,
    readers: Vec<R>,
    recorders: Vec<Recorder>,
    read: impl Fn(R, &mut Recorder) + Send + Sync + Clone + 'static,
    produce: impl FnOnce(&Probe, &T::Source),
) -> (Instant, Vec<ReaderDone>) {
    let barrier = Arc::new(Barrier::new(readers.len() + 1));
    let handles = spawn_readers(readers, recorders, &barrier, read);
    let source = T::source();
    barrier.wait();
    probe.start = now_ns();
    let t0 = Instant::now();
    produce(&probe, &source);
    (t0, handles.into_iter().map(|h| h.join().unwrap()).collect())
}

/// The producer loop: events 1..=n, each paced and stamped by the probe, then handed to `push`
/// with its id.
#[inline(always)]
fn produce<T: Payload>(n: u64, probe: &Probe, source: &T::Source, mut push: impl FnMut(u64, T)) {
    for i in 1..=n {
        probe.before_push(i);
        push(i, T::make(source, i));
    }
}

/// `produce` through a non-blocking push that hands the value back when full: retried with
/// spin-then-yield.
#[inline(always)]
fn produce_spin<T: Payload, R>(
    n: u64,
    probe: &Probe,
    source: &T::Source,
    mut try_push: impl FnMut(T) -> Result<R, T>,
) {
    let mut backoff = Backoff::default();
    produce(n, probe, source, |_, v| {
        backoff.push(v, &mut try_push);
    });
}

/// `produce` through an async push, on a current-thread runtime.
#[inline(always)]
fn produce_async<T: Payload>(
    n: u64,
    probe: &Probe,
    source: &T::Source,
    mut push: impl AsyncFnMut(T),
) {
    current_thread_rt().block_on(async {
        for i in 1..=n {
            probe.before_push(i);
            push(T::make(source, i)).await;
        }
    });
}

/// A polling reader's loop until it has seen `n` events: `poll` returns whether it found any;
/// spin-then-yield while it finds none.
#[inline(always)]
fn poll_until(rec: &mut Recorder, n: u64, mut poll: impl FnMut(&mut Recorder) -> bool) {
    let mut backoff = Backoff::default();
    while rec.count < n {
        if poll(rec) {
            backoff.reset();
        } else {
            backoff.snooze();
        }
    }
}

/// A blocking reader's loop until it has seen `n` events.
#[inline(always)]
fn recv_until<T: Payload>(rec: &mut Recorder, n: u64, mut recv: impl FnMut() -> T) {
    while rec.count < n {
        let v = recv();
        rec.seen(&v);
    }
}

/// `recv_until` through an async receive, on a current-thread runtime.
#[inline(always)]
fn recv_until_async<T: Payload>(rec: &mut Recorder, n: u64, mut recv: impl AsyncFnMut() -> T) {
    current_thread_rt().block_on(async {
        while rec.count < n {
            let v = recv().await;
            rec.seen(&v);
        }
    });
}

fn current_thread_rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

/// replay-ring and the naive log retain until released: readers release in steps of a quarter of
/// the capacity (a retention policy acknowledging in chunks, not per event).
const RELEASE_STEP: u64 = (CAPACITY / 4) as u64;

/// A polling reader that has just read fewer events than this lets the next batch form before it
/// polls again (`BATCH_WAIT_SPINS` spin-loop hints). A reader that polls again at once takes the
/// `head` and slot cache lines from the producer every few events, and both sides then pay a
/// cache-line transfer per few events; a reader that lets half a window accumulate reads whole
/// lines the producer has finished with (docs/benchmarks.md, scenario 2).
const BATCH_TARGET: usize = CAPACITY / 2;

/// Spin-loop hints a polling reader waits after a batch shorter than `BATCH_TARGET`.
const BATCH_WAIT_SPINS: u32 = 64;

/// Per-reader acknowledgements: a reader acks what it has read, then releases through the minimum
/// over all readers (so a slower reader never finds its next event released).
struct Acks(Vec<CachePadded<AtomicU64>>);

impl Acks {
    /// Acks for `n` readers, all zero.
    fn shared(n: usize) -> Arc<Self> {
        Arc::new(Acks(
            (0..n)
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
        ))
    }

    /// One `Acker` per reader, sharing one set of acks.
    fn for_readers(n: usize) -> Vec<Acker> {
        let acks = Acks::shared(n);
        (0..n)
            .map(|i| Acker {
                i,
                acks: acks.clone(),
                released: 0,
            })
            .collect()
    }

    /// Records `id` for reader `i`; returns the id every reader has read through.
    #[inline]
    fn ack(&self, i: usize, id: u64) -> u64 {
        // A single reader's ack is the minimum: nothing to share (and no full barrier per batch,
        // which the SeqCst store below is on x86).
        if self.0.len() == 1 {
            return id;
        }
        // SeqCst store and loads: two readers acking their last batches at the same time must not
        // both miss the other's ack (store buffering), or neither releases and a full ring stalls
        // the producer for good. The ring orders the slot accesses itself.
        self.0[i].store(id, SeqCst);
        self.0.iter().map(|a| a.load(SeqCst)).min().unwrap_or(id)
    }
}

/// Reader `i`'s side of `Acks`.
struct Acker {
    i: usize,
    acks: Arc<Acks>,
    released: u64,
}

impl Acker {
    /// Acks `last`; calls `release(min)` once every reader is `RELEASE_STEP` past the last release.
    #[inline]
    fn ack(&mut self, last: u64, release: impl FnOnce(u64)) {
        let min = self.acks.ack(self.i, last);
        if min >= self.released + RELEASE_STEP {
            release(min);
            self.released = min;
        }
    }
}

/// Waits for the barrier (all readers ready), starts the clock and the pacing origin.
fn start(barrier: &Barrier, probe: &mut Probe) -> Instant {
    barrier.wait();
    probe.start = now_ns();
    Instant::now()
}

fn join(handles: Vec<thread::JoinHandle<ReaderDone>>) -> Vec<ReaderDone> {
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

// replay-ring's runner keeps its loops written out rather than using `drive` / `produce_spin` /
// `poll_until` / `Acker`: A/B runs of s2_tail/u64/replay-ring-spin against the explicit form
// measured 7-15% lower with either the shared loops or the shared scaffolding (code layout of
// the headline peer's hot loops, not logic), so the measured code stays as it was at 230ff88.
fn replay_ring_run<T: Payload>(
    cfg: &TailCfg,
    mut probe: Probe,
    recorders: Vec<Recorder>,
    is_async: bool,
) -> (Instant, Vec<ReaderDone>) {
    // Polling readers rarely park: the configuration the crate recommends for them is asymmetric
    // wake-up fences; readers that park per event (async) keep the symmetric default.
    let fences = if is_async {
        WakeupFences::Symmetric
    } else {
        WakeupFences::Asymmetric
    };
    let (mut producer, ring) = ReplayRing::<T>::builder()
        .capacity(CAPACITY)
        .max_readers(cfg.readers)
        .wakeup_fences(fences)
        .build()
        .unwrap();
    let n = cfg.events;
    let acks = Acks::shared(cfg.readers);
    let readers: Vec<_> = (0..cfg.readers)
        .map(|i| (i, ring.reader().unwrap(), ring.clone(), acks.clone()))
        .collect();
    let barrier = Arc::new(Barrier::new(cfg.readers + 1));
    let handles = spawn_readers(
        readers,
        recorders,
        &barrier,
        move |(i, mut r, ring, acks), rec| {
            let mut released = 0;
            let mut after_batch = |last: u64| {
                let min = acks.ack(i, last);
                if min >= released + RELEASE_STEP {
                    ring.release_through(min).unwrap();
                    released = min;
                }
            };
            if is_async {
                current_thread_rt().block_on(async {
                    while rec.count < n {
                        let batch = r.read_coalesced().await.unwrap();
                        let (a, b) = batch.as_slices();
                        a.iter().chain(b).for_each(|v| rec.seen(v));
                        let last = batch.last_id();
                        drop(batch);
                        after_batch(last);
                    }
                });
            } else {
                // A gating reader keeps its pin between polls, as a disruptor consumer's sequence
                // gates its producer: one pin fence for the whole run instead of one per batch.
                let mut backoff = Backoff::default();
                let mut gate = r.gating().unwrap();
                while rec.count < n {
                    match gate.try_read().unwrap() {
                        Some(batch) => {
                            let (a, b) = batch.as_slices();
                            a.iter().chain(b).for_each(|v| rec.seen(v));
                            let (len, last) = (batch.len(), batch.last_id());
                            drop(batch);
                            after_batch(last);
                            backoff.reset();
                            if len < BATCH_TARGET {
                                for _ in 0..BATCH_WAIT_SPINS {
                                    std::hint::spin_loop();
                                }
                            }
                        }
                        None => backoff.snooze(),
                    }
                }
            }
        },
    );
    let source = T::source();
    let t0 = start(&barrier, &mut probe);
    if is_async {
        current_thread_rt().block_on(async {
            for i in 1..=n {
                probe.before_push(i);
                producer.push(T::make(&source, i)).await.unwrap();
            }
        });
    } else {
        let mut backoff = Backoff::default();
        for i in 1..=n {
            probe.before_push(i);
            let mut v = T::make(&source, i);
            loop {
                match producer.try_push(v) {
                    Ok(_) => break,
                    Err(PushError::Full(back)) => {
                        v = back;
                        backoff.snooze();
                    }
                    Err(e) => panic!("{e}"),
                }
            }
            backoff.reset();
        }
    }
    (t0, join(handles))
}

fn tokio_run<T: Payload>(
    cfg: &TailCfg,
    probe: Probe,
    recorders: Vec<Recorder>,
) -> (Instant, Vec<ReaderDone>) {
    use tokio::sync::broadcast;
    let (tx, _) = broadcast::channel::<T>(CAPACITY);
    let n = cfg.events;
    let rxs: Vec<_> = (0..cfg.readers).map(|_| tx.subscribe()).collect();
    let read = move |mut rx: broadcast::Receiver<T>, rec: &mut Recorder| {
        recv_until_async(rec, n, async || {
            rx.recv()
                .await
                .unwrap_or_else(|e| panic!("tokio broadcast: {e}"))
        });
    };
    let half = (CAPACITY / 2) as u64;
    drive::<T, _>(probe, rxs, recorders, read, |probe, source| {
        let mut backoff = Backoff::default();
        produce(n, probe, source, |i, v| {
            tx.send(v).unwrap();
            if i % half == 0 {
                // Never more than CAPACITY queued: no receiver can lag (and lose events).
                while tx.len() > half as usize {
                    backoff.snooze();
                }
                backoff.reset();
            }
        });
    })
}

fn async_broadcast_run<T: Payload>(
    cfg: &TailCfg,
    probe: Probe,
    recorders: Vec<Recorder>,
) -> (Instant, Vec<ReaderDone>) {
    let (tx, rx) = async_broadcast::broadcast::<T>(CAPACITY);
    let n = cfg.events;
    let mut rxs = vec![rx];
    while rxs.len() < cfg.readers {
        rxs.push(rxs[0].new_receiver());
    }
    let read = move |mut rx: async_broadcast::Receiver<T>, rec: &mut Recorder| {
        recv_until_async(rec, n, async || rx.recv_direct().await.unwrap());
    };
    drive::<T, _>(probe, rxs, recorders, read, |probe, source| {
        produce_async(n, probe, source, async |v: T| {
            tx.broadcast_direct(v).await.unwrap();
        });
    })
}

fn bus_run<T: Payload>(
    cfg: &TailCfg,
    probe: Probe,
    recorders: Vec<Recorder>,
) -> (Instant, Vec<ReaderDone>) {
    let mut bus = bus::Bus::<T>::new(CAPACITY);
    let n = cfg.events;
    let rxs: Vec<_> = (0..cfg.readers).map(|_| bus.add_rx()).collect();
    let read = move |mut rx: bus::BusReader<T>, rec: &mut Recorder| {
        recv_until(rec, n, || rx.recv().unwrap());
    };
    drive::<T, _>(probe, rxs, recorders, read, |probe, source| {
        produce(n, probe, source, |_, v| bus.broadcast(v));
    })
}

fn disruptor_run<T: Payload>(
    cfg: &TailCfg,
    mut probe: Probe,
    recorders: Vec<Recorder>,
) -> (Instant, Vec<ReaderDone>) {
    use disruptor::{build_single_producer, BusySpinWithSpinLoopHint, Producer, Sequence, Sleep};
    let n = cfg.events;
    let done: Arc<Mutex<Vec<(usize, ReaderDone)>>> = Arc::default();
    let mut recorders: Vec<Option<Recorder>> = recorders.into_iter().map(Some).collect();
    let mut handler = |i: usize| {
        let mut rec = recorders[i].take().unwrap();
        let done = done.clone();
        move |e: &T, seq: Sequence, _end_of_batch: bool| {
            rec.seen(e);
            if seq as u64 + 1 == n {
                let rec = std::mem::take(&mut rec);
                done.lock().unwrap().push((i, (Instant::now(), rec)));
            }
        }
    };
    fn publish_all<T: Payload>(mut p: impl Producer<T>, probe: &mut Probe, n: u64) -> Instant {
        let source = T::source();
        probe.start = now_ns();
        let t0 = Instant::now();
        for i in 1..=n {
            probe.before_push(i);
            p.publish(|e| *e = T::make(&source, i));
        }
        // Dropping the producer joins the consumer threads once they have handled everything.
        t0
    }
    // Busy-spinning consumers need a core each; with more threads than cores they would spin
    // while the producer waits for a time slice, so they sleep instead (disruptor's own answer,
    // its issue #1).
    let t0 = if cfg.readers >= 2 && oversubscribed(cfg.readers) {
        let b = build_single_producer(CAPACITY, T::default, Sleep::new(DISRUPTOR_SLEEP));
        let mut b = b
            .handle_events_with(handler(0))
            .handle_events_with(handler(1));
        for i in 2..cfg.readers {
            b = b.handle_events_with(handler(i));
        }
        publish_all(b.build(), &mut probe, n)
    } else {
        let b = build_single_producer(CAPACITY, T::default, BusySpinWithSpinLoopHint);
        let b = b.handle_events_with(handler(0));
        if cfg.readers == 1 {
            publish_all(b.build(), &mut probe, n)
        } else {
            let mut b = b.handle_events_with(handler(1));
            for i in 2..cfg.readers {
                b = b.handle_events_with(handler(i));
            }
            publish_all(b.build(), &mut probe, n)
        }
    };
    let mut out = std::mem::take(&mut *done.lock().unwrap());
    out.sort_by_key(|(i, _)| *i);
    (t0, out.into_iter().map(|(_, d)| d).collect())
}

/// How long an idle disruptor consumer sleeps when the threads outnumber the cores.
pub const DISRUPTOR_SLEEP: Duration = Duration::from_micros(10);

/// Whether `readers` reader threads plus the producer outnumber the available cores.
pub fn oversubscribed(readers: usize) -> bool {
    let cores = thread::available_parallelism().map_or(1, |n| n.get());
    readers + 1 > cores
}

fn channel_run<T: Payload>(
    cfg: &TailCfg,
    probe: Probe,
    recorders: Vec<Recorder>,
) -> (Instant, Vec<ReaderDone>) {
    let (tx, rx) = crossbeam::channel::bounded::<T>(CAPACITY);
    let n = cfg.events;
    let read = move |rx: crossbeam::channel::Receiver<T>, rec: &mut Recorder| {
        recv_until(rec, n, || rx.recv().unwrap());
    };
    drive::<T, _>(probe, vec![rx], recorders, read, |probe, source| {
        produce(n, probe, source, |_, v| tx.send(v).unwrap());
    })
}

fn array_queue_run<T: Payload>(
    cfg: &TailCfg,
    probe: Probe,
    recorders: Vec<Recorder>,
) -> (Instant, Vec<ReaderDone>) {
    let q = Arc::new(crossbeam::queue::ArrayQueue::<T>::new(CAPACITY));
    let n = cfg.events;
    let read = move |q: Arc<crossbeam::queue::ArrayQueue<T>>, rec: &mut Recorder| {
        poll_until(rec, n, |rec| match q.pop() {
            Some(v) => {
                rec.seen(&v);
                true
            }
            None => false,
        });
    };
    drive::<T, _>(probe, vec![q.clone()], recorders, read, |probe, source| {
        produce_spin(n, probe, source, |v| q.push(v));
    })
}

fn rtrb_run<T: Payload>(
    cfg: &TailCfg,
    probe: Probe,
    recorders: Vec<Recorder>,
) -> (Instant, Vec<ReaderDone>) {
    let (mut tx, rx) = rtrb::RingBuffer::<T>::new(CAPACITY);
    let n = cfg.events;
    let read = move |mut rx: rtrb::Consumer<T>, rec: &mut Recorder| {
        poll_until(rec, n, |rec| {
            let slots = rx.slots();
            if slots == 0 {
                return false;
            }
            let chunk = rx.read_chunk(slots).unwrap();
            let (a, b) = chunk.as_slices();
            rec.seen_all(a, b);
            chunk.commit_all();
            true
        });
    };
    drive::<T, _>(probe, vec![rx], recorders, read, |probe, source| {
        produce_spin(n, probe, source, |v| {
            tx.push(v).map_err(|rtrb::PushError::Full(back)| back)
        });
    })
}

fn naive_run<T: Payload>(
    cfg: &TailCfg,
    probe: Probe,
    recorders: Vec<Recorder>,
) -> (Instant, Vec<ReaderDone>) {
    let log = Arc::new(NaiveLog::<T>::new(CAPACITY));
    let n = cfg.events;
    let readers: Vec<_> = Acks::for_readers(cfg.readers)
        .into_iter()
        .map(|acker| (log.clone(), acker))
        .collect();
    let read = move |(log, mut acker): (Arc<NaiveLog<T>>, Acker), rec: &mut Recorder| {
        let mut cursor = 0;
        poll_until(rec, n, |rec| {
            let events = log.replay_from(cursor);
            let Some(&(last, _)) = events.last() else {
                return false;
            };
            events.iter().for_each(|(_, v)| rec.seen(v));
            cursor = last;
            acker.ack(last, |min| log.release_through(min));
            true
        });
    };
    drive::<T, _>(probe, readers, recorders, read, |probe, source| {
        produce_spin(n, probe, source, |v| log.push(v));
    })
}

/// One criterion group `<prefix>/<T::NAME>` timing whole live-tail runs of `events` events with
/// `readers` readers for each of `peers` (bench id: the peer's name). Throughput is events per
/// reader: every reader sees every event.
pub fn bench_group<T: Payload>(
    c: &mut Criterion,
    prefix: &str,
    events: u64,
    readers: usize,
    peers: impl Iterator<Item = Peer>,
) {
    let cfg = TailCfg {
        events,
        readers,
        pace_ns: None,
        latency: false,
    };
    super::group::<T>(c, prefix, |g| {
        g.sampling_mode(SamplingMode::Flat);
        g.throughput(Throughput::Elements(events));
        for peer in peers {
            g.bench_function(peer.name(), |b| {
                b.iter_custom(|iters| (0..iters).map(|_| run::<T>(peer, &cfg).elapsed).sum())
            });
        }
    });
}
