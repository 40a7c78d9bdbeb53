//! Shared pieces of the benchmark suite: run-size configuration (full vs quick/test mode), the two
//! payload types, a spin-then-yield backoff, the clock used for latency, result files for the
//! non-criterion scenarios, and the naive `Mutex<VecDeque>` event log that the seeds describe.
//!
//! Every bench binary includes this module with `mod common;`, and each uses only part of it.
#![allow(dead_code)]

pub mod fanout;
pub mod tail;

use std::collections::VecDeque;
use std::fs::{self, OpenOptions};
use std::hint::black_box;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion};

/// Ring capacity used by every peer in the push and live-tail scenarios (a power of two, because
/// disruptor and replay-ring require or round to one).
pub const CAPACITY: usize = 1024;

/// Size of the `Bytes` payloads.
pub const BYTES_LEN: usize = 256;

/// `true` under `cargo test --benches` (criterion's test mode: no `--bench` flag), with
/// `cargo bench -- --test`, or with `BENCH_QUICK=1`: every scenario then runs a small, fast size.
pub fn quick() -> bool {
    static QUICK: OnceLock<bool> = OnceLock::new();
    *QUICK.get_or_init(|| {
        let args: Vec<String> = std::env::args().collect();
        let bench = args.iter().any(|a| a == "--bench");
        let test = args.iter().any(|a| a == "--test");
        std::env::var_os("BENCH_QUICK").is_some_and(|v| v != "0") || !bench || test
    })
}

/// Full size in a real run, `small` in quick mode.
pub fn sized(full: u64, small: u64) -> u64 {
    if quick() {
        small
    } else {
        full
    }
}

/// Events per live-tail run (scenarios 2 and 3).
pub fn tail_events() -> u64 {
    sized(1_000_000, 5_000)
}

/// Number of readers for the fan-out scenario: `BENCH_READERS` (default 2, the machine's cores).
pub fn fanout_readers() -> usize {
    std::env::var("BENCH_READERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n >= 1)
        .unwrap_or(2)
}

/// Criterion settings sized to keep the full suite within ~15 minutes on two cores.
pub fn criterion(warm_up_ms: u64, measure_ms: u64, samples: usize) -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(warm_up_ms))
        .measurement_time(Duration::from_millis(measure_ms))
        .sample_size(samples)
        .configure_from_args()
}

/// Runs `body` in the criterion group `<prefix>/<T::NAME>` (the directory names that
/// scripts/bench-report parses), then finishes the group.
pub fn group<T: Payload>(
    c: &mut Criterion,
    prefix: &str,
    body: impl FnOnce(&mut BenchmarkGroup<'_, WallTime>),
) {
    let mut g = c.benchmark_group(format!("{prefix}/{}", T::NAME));
    body(&mut g);
    g.finish();
}

/// A payload type of the suite: `u64`, or a 256-byte `Bytes` cloned from a pool of distinct buffers
/// (a clone is a reference-count increment, as when a server fans one encoded frame out).
pub trait Payload: Clone + Default + std::fmt::Debug + Send + Sync + 'static {
    /// Label in benchmark ids and reports.
    const NAME: &'static str;
    /// What the producer makes payloads from.
    type Source: Clone + Send + 'static;
    /// A fresh source.
    fn source() -> Self::Source;
    /// The payload for event `i` (no allocation).
    fn make(source: &Self::Source, i: u64) -> Self;
    /// Reads the payload the way a consumer would look at it (value / length and first byte).
    fn touch(&self) -> u64;
    /// Whether this is the payload `make(source, i)` returns: the check a reader makes that it got
    /// event `i` (`u64`: the value; `Bytes`: the pool buffer, so ids are told apart modulo the
    /// pool size, and the reader's count covers the rest).
    fn is_event(&self, source: &Self::Source, i: u64) -> bool;
}

impl Payload for u64 {
    const NAME: &'static str = "u64";
    type Source = ();
    fn source() {}
    #[inline(always)]
    fn make(_: &(), i: u64) -> u64 {
        i
    }
    #[inline(always)]
    fn touch(&self) -> u64 {
        *self
    }
    #[inline(always)]
    fn is_event(&self, _: &(), i: u64) -> bool {
        *self == i
    }
}

/// Distinct 256-byte buffers the `Bytes` payloads cycle through.
const POOL: usize = 4096;

impl Payload for Bytes {
    const NAME: &'static str = "bytes256";
    type Source = &'static [Bytes];
    /// One process-wide pool, built once before any measurement. Every buffer is cloned once at
    /// build time so that its shared header (the reference count) is allocated then, all headers
    /// together: allocated lazily in the middle of a run, a header could land in a cache line with
    /// the first bytes of another buffer, and the producer's count updates would then bounce
    /// against the reader's payload reads (false sharing that is the pool's, not the ring's).
    fn source() -> Self::Source {
        static POOL_BYTES: OnceLock<Vec<Bytes>> = OnceLock::new();
        POOL_BYTES.get_or_init(|| {
            let pool: Vec<Bytes> = (0..POOL)
                .map(|i| Bytes::from(vec![(i % 251) as u8; BYTES_LEN]))
                .collect();
            for b in &pool {
                drop(b.clone());
            }
            pool
        })
    }
    #[inline(always)]
    fn make(source: &Self::Source, i: u64) -> Bytes {
        source[i as usize % POOL].clone()
    }
    #[inline(always)]
    fn touch(&self) -> u64 {
        self.len() as u64 + u64::from(self[0])
    }
    #[inline(always)]
    fn is_event(&self, source: &Self::Source, i: u64) -> bool {
        self.as_ptr() == source[i as usize % POOL].as_ptr()
    }
}

/// Spin briefly, then yield: two busy threads fit two cores, but the fan-out scenario runs three.
#[derive(Default)]
pub struct Backoff(u32);

impl Backoff {
    /// One wait step.
    #[inline]
    pub fn snooze(&mut self) {
        if self.0 < 64 {
            std::hint::spin_loop();
            self.0 += 1;
        } else {
            std::thread::yield_now();
        }
    }

    /// Progress was made: spin again next time.
    #[inline]
    pub fn reset(&mut self) {
        self.0 = 0;
    }

    /// Offers `v` to `try_push` until it is taken, snoozing after each refusal (a refused value
    /// comes back as `Err`), then resets. Generic in the closure so each caller's loop stays
    /// monomorphic and inlined.
    #[inline(always)]
    pub fn push<T, R>(&mut self, mut v: T, mut try_push: impl FnMut(T) -> Result<R, T>) -> R {
        loop {
            match try_push(v) {
                Ok(r) => {
                    self.reset();
                    return r;
                }
                Err(back) => {
                    v = back;
                    self.snooze();
                }
            }
        }
    }
}

/// replay-ring's `try_push` result in the form `Backoff::push` takes: `Full` hands the value back,
/// any other error is a bug in the bench.
#[inline(always)]
pub fn ring_full<T>(r: Result<u64, replay_ring::PushError<T>>) -> Result<u64, T> {
    match r {
        Ok(id) => Ok(id),
        Err(replay_ring::PushError::Full(back)) => Err(back),
        Err(e) => panic!("{e}"),
    }
}

/// Nanoseconds since a process-wide origin (TSC-backed `Instant` on this machine, ~25 ns a call).
#[inline]
pub fn now_ns() -> u64 {
    static BASE: OnceLock<Instant> = OnceLock::new();
    BASE.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// Waits until `now_ns() >= deadline` (pacing the producer in latency runs), yielding the core
/// meanwhile: a paced producer is idle between events, and when it shares a core with its reader
/// (another process holds the other one) a busy wait would keep the reader off the core for a
/// whole time slice.
#[inline]
pub fn wait_until(deadline: u64) {
    while now_ns() < deadline {
        std::thread::yield_now();
    }
}

/// Sorted-sample percentile (`q` in 0..=1).
pub fn percentile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[rank]
}

/// Directory for the JSON-lines results of the non-criterion scenarios: `BENCH_RESULTS_DIR`, else
/// `$CARGO_TARGET_DIR/bench-results`, else the workspace's `target/bench-results`.
pub fn results_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("BENCH_RESULTS_DIR") {
        return dir.into();
    }
    // Benchmarks run with the package folder as their working directory; the workspace's target
    // folder is one level up.
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
    target.join("bench-results")
}

/// Appends one JSON object (given as pre-rendered `"key": value` pairs) to `<results>/<file>`, and
/// echoes it on stdout. Quick runs write `<file>.quick` so they never overwrite a real run.
pub fn record(file: &str, fields: &[(&str, String)]) {
    let body: Vec<String> = fields.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
    let line = format!("{{{}}}", body.join(","));
    println!("{line}");
    let dir = results_dir();
    if fs::create_dir_all(&dir).is_err() {
        return;
    }
    let name = if quick() {
        format!("{file}.quick")
    } else {
        file.to_string()
    };
    if let Ok(mut f) = OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(name))
    {
        let _ = writeln!(f, "{line}");
    }
}

/// Truncates a result file at the start of a run.
pub fn reset_results(file: &str) {
    let name = if quick() {
        format!("{file}.quick")
    } else {
        file.to_string()
    };
    let _ = fs::remove_file(results_dir().join(name));
}

/// A JSON string value.
pub fn js(s: &str) -> String {
    format!("\"{s}\"")
}

/// Sink for touched values so the optimiser keeps the reads.
#[inline(always)]
pub fn consume(x: u64) {
    black_box(x);
}

/// The naive store the seeds describe (and most MCP SDKs ship): a `Mutex<VecDeque<(id, event)>>`,
/// full = refuse (backpressure, as in the seeds' `EventLog`), replay = clone every event with a
/// larger id out under the lock.
pub struct NaiveLog<T> {
    inner: Mutex<NaiveInner<T>>,
    capacity: usize,
}

struct NaiveInner<T> {
    events: VecDeque<(u64, T)>,
    head: u64,
}

impl<T: Clone> NaiveLog<T> {
    /// An empty log that holds at most `capacity` events.
    pub fn new(capacity: usize) -> Self {
        NaiveLog {
            inner: Mutex::new(NaiveInner {
                events: VecDeque::with_capacity(capacity),
                head: 0,
            }),
            capacity,
        }
    }

    /// An empty log that allocates only as events arrive (up to `capacity`).
    pub fn lazy(capacity: usize) -> Self {
        NaiveLog {
            inner: Mutex::new(NaiveInner {
                events: VecDeque::new(),
                head: 0,
            }),
            capacity,
        }
    }

    /// Appends with the next id, or hands the value back when full.
    #[inline]
    pub fn push(&self, value: T) -> Result<u64, T> {
        let mut g = self.inner.lock().unwrap();
        if g.events.len() >= self.capacity {
            return Err(value);
        }
        g.head += 1;
        let id = g.head;
        g.events.push_back((id, value));
        Ok(id)
    }

    /// The seeds' `replay_from`: every retained event with an id above `last`, cloned out.
    pub fn replay_from(&self, last: u64) -> Vec<(u64, T)> {
        let g = self.inner.lock().unwrap();
        g.events
            .iter()
            .filter(|(id, _)| *id > last)
            .cloned()
            .collect()
    }

    /// Drops every event up to and including `id`.
    pub fn release_through(&self, id: u64) {
        let mut g = self.inner.lock().unwrap();
        while g.events.front().is_some_and(|(e, _)| *e <= id) {
            g.events.pop_front();
        }
    }

    /// Newest id.
    pub fn head(&self) -> u64 {
        self.inner.lock().unwrap().head
    }
}
