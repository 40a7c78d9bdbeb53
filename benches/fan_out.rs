//! Scenario 3: one producer, `BENCH_READERS` readers (default 2), every reader sees every event.
//! Only broadcasting peers take part (crossbeam and rtrb hand each event to one consumer).
//! On a 2-core machine three busy threads share two cores: the spin loops yield after a short spin.

mod common;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};

use common::tail::{run, Peer, TailCfg};
use common::{fanout_readers, tail_events, Payload};

fn fan_out<T: Payload>(c: &mut Criterion) {
    let n = tail_events();
    let readers = fanout_readers();
    let mut g = c.benchmark_group(format!("s3_fanout{readers}/{}", T::NAME));
    g.sampling_mode(SamplingMode::Flat);
    // Deliveries: every reader sees every event.
    g.throughput(Throughput::Elements(n));
    for peer in Peer::ALL.into_iter().filter(|p| p.broadcasts()) {
        let cfg = TailCfg {
            events: n,
            readers,
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
    fan_out::<u64>(c);
    fan_out::<Bytes>(c);
}

criterion_group! {
    name = group;
    config = common::criterion(300, 2000, 10);
    targets = benches
}
criterion_main!(group);
