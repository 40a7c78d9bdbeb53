//! Scenario 2, latency: push-to-seen latency of one live-tailing reader, per peer and payload.
//!
//! Two runs per peer: **paced** (one event every `PACE_NS`, well below every peer's capacity, so the
//! number is the hand-off cost including any wake-up) and **saturated** (the 1,000,000-event
//! throughput run with timestamps: the number is mostly queueing, about capacity / throughput).
//! Paced runs are repeated three times (round-robin over the peers) and each percentile is the
//! median over the runs.
//! Not a criterion bench: percentiles are written to `<results>/latency.jsonl`.

mod common;

use bytes::Bytes;

use common::tail::{run, Peer, TailCfg};
use common::{js, percentile, record, reset_results, sized, tail_events, Payload};

/// One event every 10 µs (100,000 events/s).
const PACE_NS: u64 = 10_000;

/// The percentiles of one run.
fn one_run<T: Payload>(peer: Peer, cfg: &TailCfg) -> [u64; 4] {
    let mut lat = run::<T>(peer, cfg).latencies;
    lat.sort_unstable();
    [
        percentile(&lat, 0.50),
        percentile(&lat, 0.99),
        percentile(&lat, 0.999),
        lat.last().copied().unwrap_or(0),
    ]
}

/// Records the median over `runs` of each percentile.
fn report<T: Payload>(peer: Peer, mode: &str, events: u64, mut runs: Vec<[u64; 4]>) {
    let reps = runs.len();
    let mut median = |k: usize| {
        runs.sort_unstable_by_key(|r| r[k]);
        runs[reps / 2][k].to_string()
    };
    let (p50, p99, p999, max) = (median(0), median(1), median(2), median(3));
    record(
        "latency.jsonl",
        &[
            ("peer", js(peer.name())),
            ("payload", js(T::NAME)),
            ("mode", js(mode)),
            ("events", events.to_string()),
            ("runs", reps.to_string()),
            ("p50_ns", p50),
            ("p99_ns", p99),
            ("p999_ns", p999),
            ("max_ns", max),
        ],
    );
}

/// Paced runs go round-robin over the peers, `reps` rounds, so that a burst of load from another
/// process hits one run of several peers rather than every run of one peer.
fn all<T: Payload>() {
    let reps = if common::quick() { 1 } else { 3 };
    let paced = TailCfg {
        events: sized(100_000, 2_000),
        readers: 1,
        pace_ns: Some(PACE_NS),
        latency: true,
    };
    let mut runs: Vec<Vec<[u64; 4]>> = vec![Vec::new(); Peer::ALL.len()];
    for _ in 0..reps {
        for (i, peer) in Peer::ALL.into_iter().enumerate() {
            runs[i].push(one_run::<T>(peer, &paced));
        }
    }
    for (peer, r) in Peer::ALL.into_iter().zip(runs) {
        report::<T>(peer, "paced", paced.events, r);
    }
    let saturated = TailCfg {
        events: tail_events(),
        readers: 1,
        pace_ns: None,
        latency: true,
    };
    for peer in Peer::ALL {
        report::<T>(
            peer,
            "saturated",
            saturated.events,
            vec![one_run::<T>(peer, &saturated)],
        );
    }
}

fn main() {
    reset_results("latency.jsonl");
    all::<u64>();
    all::<Bytes>();
}
