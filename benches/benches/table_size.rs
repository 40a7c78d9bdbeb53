//! Scenario 8: what the reader table's size costs the producer. One reader is parked (its `read()`
//! future polled to `Pending`, so it is registered as waiting) while the producer pushes; the table
//! is built with room for 1, 64, 4,096 or 65,536 readers. Every `CAPACITY/2` pushes the reader
//! drains what was pushed, the window is released and the reader parks again, as a caught-up
//! reader does. The push cost should not depend on how many table entries are empty.
//!
//! `u64` payload, default (symmetric) wake-up fences. A table size the ring refuses to build is
//! skipped and noted in `<results>/table-size-notes.jsonl`.

mod common;

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Waker};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use replay_ring::{BuildError, ReplayRing};

use common::{js, record, reset_results, CAPACITY};

const TABLES: [usize; 4] = [1, 64, 4_096, 65_536];
const HALF: u64 = (CAPACITY / 2) as u64;

/// Times `iters` pushes with one parked reader in a table of `table` entries.
fn parked_pushes(table: usize, iters: u64) -> Result<Duration, BuildError> {
    let (mut producer, ring) = ReplayRing::<u64>::builder()
        .capacity(CAPACITY)
        .max_readers(table)
        .build()?;
    let mut reader = ring.reader().unwrap();
    let mut cx = Context::from_waker(Waker::noop());
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
                assert!(producer.try_push(i).is_ok());
            }
            elapsed += t0.elapsed();
            pushed += n;
        }
        // Drain what was pushed (checking it) and release it.
        let batch = reader.try_read().unwrap().unwrap();
        assert_eq!(
            (batch.first_id(), batch.last_id()),
            (pushed - (pushed - 1) % HALF, pushed)
        );
        drop(batch);
        ring.release_through(pushed).unwrap();
    }
    Ok(elapsed)
}

fn table_size(c: &mut Criterion) {
    reset_results("table-size-notes.jsonl");
    let mut g = c.benchmark_group("s8_table/u64");
    g.throughput(Throughput::Elements(1));
    for table in TABLES {
        if let Err(e) = parked_pushes(table, 1) {
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
            b.iter_custom(|iters| parked_pushes(table, iters).unwrap())
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
