//! Scenario 5: catch-up under load. The producer pushes as fast as it can while keeping a rolling
//! retention of `BACKLOG` events (it releases everything older every 1,024 pushes). A reader thread
//! reconnects 16,384 events behind the head once per millisecond (or back to back, if a catch-up
//! takes longer) and replays the backlog (touching every event) until it has caught up with the
//! head it saw at reconnect. Reported: the producer's ns/push without and with the catch-up reader
//! (the slowdown), the catch-ups done and the time per catch-up.
//!
//! Only replay-ring and the naive `Mutex<VecDeque>` log can replay. Not a criterion bench: the
//! producer and the reader are measured at once; results go to `<results>/catch_up.jsonl`.

mod common;

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use replay_ring::{ReadError, ReplayRing, ResumeError};

use common::{consume, js, record, reset_results, ring_full, sized, Backoff, NaiveLog, Payload};

const BACKLOG: u64 = 16_384;
/// Twice the backlog: room for the producer to run on while a replay pins the old end.
const RING: usize = 32_768;
const RELEASE_EVERY: u64 = 1_024;
/// One reconnect per millisecond: the same offered load for both implementations.
const CATCH_UP_EVERY: Duration = Duration::from_millis(1);

/// What a catch-up reader did while the producer ran.
#[derive(Default)]
struct ReaderStats {
    catch_ups: u64,
    total: Duration,
    gaps: u64,
}

fn ns_per(d: Duration, n: u64) -> f64 {
    d.as_nanos() as f64 / n as f64
}

/// One producer run: fills `BACKLOG` events through `try_push` (a refused value comes back as
/// `Err`), starts `catch_up` on a reader thread if given, then times `pushes` more pushes (retried
/// with spin-then-yield while full), calling `release(id)` every `RELEASE_EVERY` pushes to keep the
/// last `BACKLOG` events.
#[inline(always)]
fn producer_run<T: Payload, R>(
    pushes: u64,
    catch_up: Option<impl FnMut(&mut ReaderStats) -> bool + Send + 'static>,
    mut try_push: impl FnMut(T) -> Result<R, T>,
    mut release: impl FnMut(u64),
) -> (Duration, ReaderStats) {
    let src = T::source();
    for i in 1..=BACKLOG {
        assert!(try_push(T::make(&src, i)).is_ok(), "full");
    }
    let stop = Arc::new(AtomicBool::new(false));
    let handle = catch_up.map(|f| spawn_reader(stop.clone(), f));
    let mut backoff = Backoff::default();
    let t0 = Instant::now();
    for i in BACKLOG + 1..=BACKLOG + pushes {
        backoff.push(T::make(&src, i), &mut try_push);
        if i % RELEASE_EVERY == 0 {
            release(i - BACKLOG);
        }
    }
    let elapsed = t0.elapsed();
    stop.store(true, Relaxed);
    let stats = handle.map(|h| h.join().unwrap()).unwrap_or_default();
    (elapsed, stats)
}

/// The catch-up reader: once per `CATCH_UP_EVERY` (back to back if a catch-up takes longer) until
/// `stop`, runs and times `catch_up`, which returns `false` for an attempt that did not replay (not
/// counted).
fn spawn_reader(
    stop: Arc<AtomicBool>,
    mut catch_up: impl FnMut(&mut ReaderStats) -> bool + Send + 'static,
) -> thread::JoinHandle<ReaderStats> {
    thread::spawn(move || {
        let mut stats = ReaderStats::default();
        let mut next = Instant::now();
        while !stop.load(Relaxed) {
            let now = Instant::now();
            if now < next {
                thread::sleep(next - now);
            }
            next += CATCH_UP_EVERY;
            let t = Instant::now();
            if catch_up(&mut stats) {
                stats.catch_ups += 1;
                stats.total += t.elapsed();
            }
        }
        stats
    })
}

/// Producer run for replay-ring; with `reader`, a catch-up reader runs meanwhile.
fn replay_ring<T: Payload>(pushes: u64, reader: bool) -> (Duration, ReaderStats) {
    let (mut p, ring) = ReplayRing::<T>::builder()
        .capacity(RING)
        .max_readers(1)
        .build()
        .unwrap();
    let reader_ring = ring.clone();
    let catch_up = reader.then_some(move |stats: &mut ReaderStats| {
        let head = reader_ring.head();
        let mut r = match reader_ring.resume(Some(head.saturating_sub(BACKLOG))) {
            Ok(r) => r,
            Err(ResumeError::BelowFloor { .. }) => return false,
            Err(e) => panic!("{e}"),
        };
        let mut sum = 0u64;
        while r.cursor() <= head {
            match r.try_read() {
                Ok(Some(batch)) => {
                    let (a, b) = batch.as_slices();
                    sum = a
                        .iter()
                        .chain(b)
                        .map(Payload::touch)
                        .fold(sum, u64::wrapping_add);
                }
                Ok(None) => unreachable!("events up to the head are published"),
                Err(ReadError::Gap { .. }) => {
                    stats.gaps += 1;
                    break;
                }
                Err(e) => panic!("{e}"),
            }
        }
        consume(sum);
        true
    });
    producer_run(
        pushes,
        catch_up,
        |v| ring_full(p.try_push(v)),
        |id| {
            ring.release_through(id).unwrap();
        },
    )
}

/// The same with the naive log.
fn naive<T: Payload>(pushes: u64, reader: bool) -> (Duration, ReaderStats) {
    let log = Arc::new(NaiveLog::<T>::new(RING));
    let reader_log = log.clone();
    let catch_up = reader.then_some(move |_: &mut ReaderStats| {
        let head = reader_log.head();
        let events = reader_log.replay_from(head.saturating_sub(BACKLOG));
        consume(
            events
                .iter()
                .map(|(_, v)| v.touch())
                .fold(0, u64::wrapping_add),
        );
        drop(events);
        true
    });
    producer_run(
        pushes,
        catch_up,
        |v| log.push(v),
        |id| log.release_through(id),
    )
}

/// Median of `runs` results of `f`, by producer time.
fn median(runs: usize, f: impl Fn() -> (Duration, ReaderStats)) -> (Duration, ReaderStats) {
    let mut all: Vec<_> = (0..runs).map(|_| f()).collect();
    all.sort_by_key(|(d, _)| *d);
    all.swap_remove(runs / 2)
}

fn scenario<T: Payload>(peer: &str, f: fn(u64, bool) -> (Duration, ReaderStats)) {
    let pushes = sized(2_000_000, 20_000);
    let runs = if common::quick() { 1 } else { 5 };
    let (alone, _) = median(runs, || f(pushes, false));
    let (loaded, stats) = median(runs, || f(pushes, true));
    let per_catch_up = if stats.catch_ups == 0 {
        0.0
    } else {
        stats.total.as_nanos() as f64 / stats.catch_ups as f64
    };
    record(
        "catch_up.jsonl",
        &[
            ("peer", js(peer)),
            ("payload", js(T::NAME)),
            ("backlog", BACKLOG.to_string()),
            ("pushes", pushes.to_string()),
            ("push_ns_alone", format!("{:.2}", ns_per(alone, pushes))),
            ("push_ns_catch_up", format!("{:.2}", ns_per(loaded, pushes))),
            (
                "slowdown",
                format!("{:.3}", loaded.as_secs_f64() / alone.as_secs_f64()),
            ),
            ("catch_ups", stats.catch_ups.to_string()),
            ("catch_up_us", format!("{:.1}", per_catch_up / 1e3)),
            ("gaps", stats.gaps.to_string()),
        ],
    );
}

fn main() {
    reset_results("catch_up.jsonl");
    scenario::<u64>("replay-ring", replay_ring::<u64>);
    scenario::<u64>("naive-log", naive::<u64>);
    scenario::<Bytes>("replay-ring", replay_ring::<Bytes>);
    scenario::<Bytes>("naive-log", naive::<Bytes>);
}
