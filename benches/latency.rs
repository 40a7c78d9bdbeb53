//! Scenario 2, latency: push-to-seen latency of one live-tailing reader, per peer and payload.
//!
//! Two runs per peer: **paced** (one event every `PACE_NS`, well below every peer's capacity, so the
//! number is the hand-off cost including any wake-up) and **saturated** (the 1,000,000-event
//! throughput run with timestamps: the number is mostly queueing, about capacity / throughput).
//! Not a criterion bench: percentiles are written to `<results>/latency.jsonl`.

mod common;

use bytes::Bytes;

use common::tail::{run, Peer, TailCfg};
use common::{js, percentile, record, reset_results, sized, tail_events, Payload};

/// One event every 10 µs (100,000 events/s).
const PACE_NS: u64 = 10_000;

fn measure<T: Payload>(peer: Peer, mode: &str, cfg: TailCfg) {
    let out = run::<T>(peer, &cfg);
    let mut lat = out.latencies;
    lat.sort_unstable();
    record(
        "latency.jsonl",
        &[
            ("peer", js(peer.name())),
            ("payload", js(T::NAME)),
            ("mode", js(mode)),
            ("events", cfg.events.to_string()),
            ("p50_ns", percentile(&lat, 0.50).to_string()),
            ("p99_ns", percentile(&lat, 0.99).to_string()),
            ("p999_ns", percentile(&lat, 0.999).to_string()),
            ("max_ns", lat.last().copied().unwrap_or(0).to_string()),
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
        measure::<T>(peer, "paced", paced);
        let saturated = TailCfg {
            events: tail_events(),
            readers: 1,
            pace_ns: None,
            latency: true,
        };
        measure::<T>(peer, "saturated", saturated);
    }
}

fn main() {
    reset_results("latency.jsonl");
    all::<u64>();
    all::<Bytes>();
}
