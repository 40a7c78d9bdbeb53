//! Coalesced wake-ups: does publishing events in runs (one `head` store and one wake-up per run)
//! speed up async fan-out? The scenario 7 workload (one producer thread, R reader tasks on a
//! multi-thread runtime, every reader checks every event), run twice in the same process:
//!
//! - `replay-ring`: `push().await` per event, so a parked reader can be woken once per event;
//! - `replay-ring-coalesced`: `ready().await`, then `try_push_many` of up to
//!   [`COALESCE`](common::fanout::COALESCE) events, so whoever waits is woken once per run and
//!   reads the run as one batch.
//!
//! Readers already coalesce on their side: a woken reader reads everything published since in one
//! batch, and is not woken again until it waits again.

mod common;

use bytes::Bytes;
use criterion::{
    criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode, Throughput,
};

use common::fanout::{events_for, reader_counts, run, runtime, AsyncPeer, FanoutCfg};
use common::Payload;

fn coalescing<T: Payload>(c: &mut Criterion) {
    let rt = runtime();
    common::group::<T>(c, "wake_coalescing", |g| {
        g.sampling_mode(SamplingMode::Flat);
        for &readers in reader_counts() {
            let cfg = FanoutCfg {
                events: events_for(readers),
                readers,
                pace_ns: None,
                latency: false,
            };
            g.throughput(Throughput::Elements(cfg.events * readers as u64));
            for peer in [AsyncPeer::ReplayRing, AsyncPeer::ReplayRingCoalesced] {
                // One probe run: checks the configuration is supported (and warms the runtime).
                if run::<T>(&rt, peer, &cfg).is_err() {
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
    coalescing::<u64>(c);
    coalescing::<Bytes>(c);
}

criterion_group! {
    name = group;
    config = common::criterion(10, 500, 10);
    targets = benches
}
criterion_main!(group);
