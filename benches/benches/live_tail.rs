//! Scenario 2: one producer thread, one reader thread live-tailing `tail_events()` events
//! (1,000,000 in a real run). Criterion times one whole run per iteration; throughput is events per
//! second. Latency percentiles come from `benches/latency.rs`.

mod common;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion};

use common::tail::{bench_group, Peer};
use common::tail_events;

fn benches(c: &mut Criterion) {
    bench_group::<u64>(c, "s2_tail", tail_events(), 1, Peer::ALL.into_iter());
    bench_group::<Bytes>(c, "s2_tail", tail_events(), 1, Peer::ALL.into_iter());
}

criterion_group! {
    name = group;
    config = common::criterion(300, 2000, 10);
    targets = benches
}
criterion_main!(group);
