//! Scenario 3: one producer, `BENCH_READERS` readers (default 2), every reader sees every event.
//! Only broadcasting peers take part (crossbeam and rtrb hand each event to one consumer).
//! On a 2-core machine three busy threads share two cores: the spin loops yield after a short spin.

mod common;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion};

use common::tail::{bench_group, Peer};
use common::{fanout_readers, tail_events, Payload};

fn fan_out<T: Payload>(c: &mut Criterion) {
    let readers = fanout_readers();
    let peers = Peer::ALL.into_iter().filter(|p| p.broadcasts());
    bench_group::<T>(
        c,
        &format!("s3_fanout{readers}"),
        tail_events(),
        readers,
        peers,
    );
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
