//! Scenario 8: what the reader table's size costs the producer. One reader is parked (its `read()`
//! future polled to `Pending`, so it is registered as waiting) while the producer pushes; the table
//! is built with room for 1, 64, 4,096 or 65,536 readers. Every `CAPACITY/2` pushes the reader
//! drains what was pushed, the window is released and the reader parks again, as a caught-up
//! reader does. The push cost should not depend on how many table entries are empty.
//!
//! `replay-ring-registered`: the same, with the rest of the table (`table - 1` entries) held by
//! registered readers that have read an event and then gone quiet the way a caught-up connection
//! does (their wait was woken, or dropped): every segment of the table is allocated and every entry
//! claimed, but only the measured reader waits. The push cost should not depend on them either.
//!
//! `replay-ring-stalled`: the window is full and each timed push follows the release of one event,
//! so every push recomputes the window limit and scans the reader pins. `table - 1` registered
//! readers each read an event and then stopped without waiting, the way a connection blocked on
//! a slow socket does (with a table of 1: no such readers, the baseline). Their entries were
//! active after their read; the push cost should not depend on them.
//!
//! `replay-ring-reading`: the window is full, and each timed round releases the oldest event,
//! pushes one, and lets every one of the `table` registered readers read it: readers that keep
//! reading while every push scans the pins. Reported per read; the cost of a read should not
//! depend on how many readers read alongside it (tables of 1, 64 and 4,096).
//!
//! `u64` payload, default (symmetric) wake-up fences. A table size the ring refuses to build is
//! skipped and noted in `<results>/table-size-notes.jsonl`.

mod common;

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Waker};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use replay_ring::{BuildError, Producer, ReplayRing};

use common::{js, record, reset_results, CAPACITY};

const TABLES: [usize; 4] = [1, 64, 4_096, 65_536];
const HALF: u64 = (CAPACITY / 2) as u64;

/// A `u64` ring of the suite's capacity with a reader table of `table` entries.
fn ring(table: usize) -> Result<(Producer<u64>, ReplayRing<u64>), BuildError> {
    ReplayRing::<u64>::builder()
        .capacity(CAPACITY)
        .max_readers(table)
        .build()
}

/// In a full window whose floor is `floor`: releases the oldest event (moving `floor` on) and
/// pushes one into its slot, returning its id.
fn release_and_push(producer: &mut Producer<u64>, ring: &ReplayRing<u64>, floor: &mut u64) -> u64 {
    ring.release_through(*floor).unwrap();
    *floor += 1;
    producer.try_push(0).unwrap()
}

/// Times `iters` pushes with one parked reader in a table of `table` entries; with `fill`, the
/// other `table - 1` entries are held by quiet readers (see the module docs).
fn parked_pushes(table: usize, fill: bool, iters: u64) -> Result<Duration, BuildError> {
    let (mut producer, ring) = ring(table)?;
    let mut reader = ring.reader().unwrap();
    let mut cx = Context::from_waker(Waker::noop());
    let mut quiet = Vec::new();
    if fill {
        let head = producer.try_push(0).unwrap();
        for _ in 1..table {
            let mut r = ring.resume(Some(head - 1)).unwrap();
            assert_eq!(r.try_read().unwrap().unwrap().last_id(), head);
            // Caught up: the wait registers (and leaves the pin scan); then it is dropped.
            assert!(pin!(r.read()).as_mut().poll(&mut cx).is_pending());
            quiet.push(r);
        }
        drop(reader.try_read().unwrap());
        ring.release_through(head).unwrap();
        // One lap of the window before the clock starts: its first push takes the dropped waits
        // off the wait list, and its first pin scan clears the summary bits the quiet readers
        // left when they parked (a one-time cost after a mass registration, together about 2 ms
        // at 65,536, that would otherwise be spread over however few pushes a sample has).
        for _ in 0..CAPACITY {
            let head = producer.try_push(0).unwrap();
            drop(reader.try_read().unwrap());
            ring.release_through(head).unwrap();
        }
    }
    let base = producer.next_id() - 1;
    let mut elapsed = Duration::ZERO;
    let mut pushed = 0;
    while pushed < iters {
        {
            // Park: the reader has caught up, so `read()` registers it as waiting.
            let mut read = pin!(reader.read());
            assert!(read.as_mut().poll(&mut cx).is_pending());
            let n = HALF.min(iters - pushed);
            let t0 = Instant::now();
            for i in pushed + 1..=pushed + n {
                assert!(producer.try_push(base + i).is_ok());
            }
            elapsed += t0.elapsed();
            pushed += n;
        }
        // Drain what was pushed (checking it) and release it.
        let batch = reader.try_read().unwrap().unwrap();
        assert_eq!(
            (batch.first_id(), batch.last_id()),
            (base + pushed - (pushed - 1) % HALF, base + pushed)
        );
        drop(batch);
        ring.release_through(base + pushed).unwrap();
    }
    drop(quiet);
    Ok(elapsed)
}

/// Times `iters` pushes into a full window, each after releasing the oldest event, with `table - 1`
/// readers that read once and stopped (see the module docs).
fn stalled_pushes(table: usize, iters: u64) -> Duration {
    let (mut producer, ring) = ring(table).unwrap();
    let head = producer.try_push(0).unwrap();
    let stalled: Vec<_> = (1..table)
        .map(|_| {
            let mut r = ring.resume(Some(head - 1)).unwrap();
            assert_eq!(r.try_read().unwrap().unwrap().last_id(), head);
            r
        })
        .collect();
    while producer.try_push(0).is_ok() {}
    // Two releases and pushes before the clock starts: their pin scans are the first since the
    // readers stopped (the first finds that each read since the previous scan and lets it stay,
    // the second deactivates them all: a one-time cost of about 0.5 ms at 65,536).
    let mut floor = ring.floor();
    for _ in 0..2 {
        release_and_push(&mut producer, &ring, &mut floor);
    }
    let t0 = Instant::now();
    for _ in 0..iters {
        release_and_push(&mut producer, &ring, &mut floor);
    }
    let elapsed = t0.elapsed();
    drop(stalled);
    elapsed
}

/// Times `rounds` rounds of: release the oldest event, push one, and let each of `table` readers
/// read it, with the window full (see the module docs).
fn reading_rounds(table: usize, rounds: u64) -> Duration {
    let (mut producer, ring) = ring(table).unwrap();
    let mut readers: Vec<_> = (0..table).map(|_| ring.reader().unwrap()).collect();
    while producer.try_push(0).is_ok() {}
    for r in &mut readers {
        while r.try_read().unwrap().is_some() {}
    }
    let mut floor = ring.floor();
    let mut round = || {
        let id = release_and_push(&mut producer, &ring, &mut floor);
        for r in &mut readers {
            let batch = r.try_read().unwrap().unwrap();
            assert_eq!((batch.first_id(), batch.last_id()), (id, id));
        }
    };
    // Two rounds before the clock starts, as in `stalled_pushes`.
    round();
    round();
    let t0 = Instant::now();
    for _ in 0..rounds {
        round();
    }
    t0.elapsed()
}

/// Reading rounds per ring at least (a round at 4,096 readers takes about 50 µs).
const MIN_ROUNDS: u64 = 1024;

/// Pushes at least [`MIN_PUSHES`] per ring (criterion asks for few iterations when building the
/// ring takes long, as with 65,536 readers, and the clock's own cost would dominate), and scales
/// the time to `iters` pushes.
fn per_push(table: usize, fill: bool, iters: u64) -> Duration {
    let pushes = iters.max(MIN_PUSHES);
    let elapsed = parked_pushes(table, fill, pushes).unwrap();
    elapsed.mul_f64(iters as f64 / pushes as f64)
}

/// 64 park-and-push rounds.
const MIN_PUSHES: u64 = 64 * HALF;

fn table_size(c: &mut Criterion) {
    reset_results("table-size-notes.jsonl");
    let mut g = c.benchmark_group("s8_table/u64");
    g.throughput(Throughput::Elements(1));
    for table in TABLES {
        if let Err(e) = parked_pushes(table, false, 1) {
            record(
                "table-size-notes.jsonl",
                &[
                    ("table", table.to_string()),
                    ("skipped", js(&e.to_string())),
                ],
            );
            continue;
        }
        g.bench_function(BenchmarkId::new("replay-ring", table), |b| {
            b.iter_custom(|iters| per_push(table, false, iters))
        });
        if table > 1 {
            g.bench_function(BenchmarkId::new("replay-ring-registered", table), |b| {
                b.iter_custom(|iters| per_push(table, true, iters))
            });
        }
        if table <= 4_096 {
            // Per read: `table` reads per round.
            g.throughput(Throughput::Elements(table as u64));
            g.bench_function(BenchmarkId::new("replay-ring-reading", table), |b| {
                b.iter_custom(|iters| {
                    let rounds = iters.max(MIN_ROUNDS);
                    reading_rounds(table, rounds).mul_f64(iters as f64 / rounds as f64)
                })
            });
            g.throughput(Throughput::Elements(1));
        }
        g.bench_function(BenchmarkId::new("replay-ring-stalled", table), |b| {
            b.iter_custom(|iters| {
                let pushes = iters.max(MIN_PUSHES);
                stalled_pushes(table, pushes).mul_f64(iters as f64 / pushes as f64)
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = group;
    config = common::criterion(300, 1500, 20);
    targets = table_size
}
criterion_main!(group);
