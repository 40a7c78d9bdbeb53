//! Scenario 7: async fan-out. One producer thread, R = 1, 10, 100, 1,000, 10,000 reader tasks on a
//! multi-thread tokio runtime (one worker per core); every reader sees every event, checked event
//! by event (see `common/fanout.rs`). Throughput = deliveries per second (events × readers).
//!
//! A configuration replay-ring cannot build (a reader table larger than its maximum) is skipped
//! and noted in `<results>/async-fanout-notes.jsonl`.

mod common;

use bytes::Bytes;
use criterion::{
    criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode, Throughput,
};

use common::fanout::{events_for, reader_counts, run, runtime, AsyncPeer, FanoutCfg};
use common::{js, record, reset_results, Payload};

fn fan_out<T: Payload>(c: &mut Criterion) {
    let rt = runtime();
    common::group::<T>(c, "s7_async_fanout", |g| {
        g.sampling_mode(SamplingMode::Flat);
        for &readers in reader_counts() {
            let cfg = FanoutCfg {
                events: events_for(readers),
                readers,
                pace_ns: None,
                latency: false,
            };
            g.throughput(Throughput::Elements(cfg.events * readers as u64));
            for peer in AsyncPeer::ALL {
                // One probe run: checks the configuration is supported (and warms the runtime).
                if let Err(e) = run::<T>(&rt, peer, &cfg) {
                    record(
                        "async-fanout-notes.jsonl",
                        &[
                            ("peer", js(peer.name())),
                            ("payload", js(T::NAME)),
                            ("readers", readers.to_string()),
                            ("skipped", js(&e.0)),
                        ],
                    );
                    continue;
                }
                g.bench_with_input(BenchmarkId::new(peer.name(), readers), &cfg, |b, cfg| {
                    b.iter_custom(|iters| {
                        (0..iters)
                            .map(|_| run::<T>(&rt, peer, cfg).unwrap().elapsed)
                            .sum()
                    })
                });
            }
        }
    });
}

fn benches(c: &mut Criterion) {
    reset_results("async-fanout-notes.jsonl");
    fan_out::<u64>(c);
    fan_out::<Bytes>(c);
}

criterion_group! {
    name = group;
    config = common::criterion(10, 500, 10);
    targets = benches
}
criterion_main!(group);
