//! Scenario 2: one producer thread, one reader thread live-tailing `tail_events()` events
//! (1,000,000 in a real run). Criterion times one whole run per iteration; throughput is events per
//! second. Latency percentiles come from `benches/latency.rs`.

mod common;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};

use common::tail::{run, Peer, TailCfg};
use common::{tail_events, Payload};

fn tail<T: Payload>(c: &mut Criterion) {
    let n = tail_events();
    let mut g = c.benchmark_group(format!("s2_tail/{}", T::NAME));
    g.sampling_mode(SamplingMode::Flat);
    g.throughput(Throughput::Elements(n));
    for peer in Peer::ALL {
        let cfg = TailCfg {
            events: n,
            readers: 1,
            pace_ns: None,
            latency: false,
        };
        g.bench_function(peer.name(), |b| {
            b.iter_custom(|iters| (0..iters).map(|_| run::<T>(peer, &cfg).elapsed).sum())
        });
    }
    g.finish();
}

fn benches(c: &mut Criterion) {
    tail::<u64>(c);
    tail::<Bytes>(c);
}

criterion_group! {
    name = group;
    config = common::criterion(300, 2000, 10);
    targets = benches
}
criterion_main!(group);
