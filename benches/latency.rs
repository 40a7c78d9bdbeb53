//! Scenario 2, latency: push-to-seen latency of one live-tailing reader, per peer and payload.
//!
//! Two runs per peer: **paced** (one event every `PACE_NS`, well below every peer's capacity, so the
//! number is the hand-off cost including any wake-up) and **saturated** (the 1,000,000-event
//! throughput run with timestamps: the number is mostly queueing, about capacity / throughput).
//! Paced runs are repeated three times and each percentile is the median over the runs.
//! Not a criterion bench: percentiles are written to `<results>/latency.jsonl`.

mod common;

use bytes::Bytes;

use common::tail::{run, Peer, TailCfg};
use common::{js, percentile, record, reset_results, sized, tail_events, Payload};

/// One event every 10 µs (100,000 events/s).
const PACE_NS: u64 = 10_000;

/// Runs `reps` times; reports the median over runs of each percentile (one run can lose its core to
/// another process for milliseconds on a shared machine).
fn measure<T: Payload>(peer: Peer, mode: &str, cfg: TailCfg, reps: usize) {
    let mut runs: Vec<[u64; 4]> = (0..reps)
        .map(|_| {
            let mut lat = run::<T>(peer, &cfg).latencies;
            lat.sort_unstable();
            [
                percentile(&lat, 0.50),
                percentile(&lat, 0.99),
                percentile(&lat, 0.999),
                lat.last().copied().unwrap_or(0),
            ]
        })
        .collect();
    let mut median = |k: usize| {
        runs.sort_unstable_by_key(|r| r[k]);
        runs[runs.len() / 2][k].to_string()
    };
    let (p50, p99, p999, max) = (median(0), median(1), median(2), median(3));
    record(
        "latency.jsonl",
        &[
            ("peer", js(peer.name())),
            ("payload", js(T::NAME)),
            ("mode", js(mode)),
            ("events", cfg.events.to_string()),
            ("runs", reps.to_string()),
            ("p50_ns", p50),
            ("p99_ns", p99),
            ("p999_ns", p999),
            ("max_ns", max),
        ],
    );
}

fn all<T: Payload>() {
    for peer in Peer::ALL {
        let paced = TailCfg {
            events: sized(100_000, 2_000),
            readers: 1,
            pace_ns: Some(PACE_NS),
            latency: true,
        };
        measure::<T>(peer, "paced", paced, if common::quick() { 1 } else { 3 });
        let saturated = TailCfg {
            events: tail_events(),
            readers: 1,
            pace_ns: None,
            latency: true,
        };
        measure::<T>(peer, "saturated", saturated, 1);
    }
}

fn main() {
    reset_results("latency.jsonl");
    all::<u64>();
    all::<Bytes>();
}
