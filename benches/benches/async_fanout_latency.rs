//! Scenario 7, latency: producer-to-reader latency of the async fan-out at a paced rate, for each
//! reader count R. The rate keeps deliveries at about 1,000,000 per second (at most 100,000 events
//! per second): `pace = max(10 µs, R µs)` per event, well under every peer's throughput, so the
//! number is the hand-off cost, including waking parked reader tasks, not queueing.
//!
//! Percentiles over the samples of up to `LATENCY_READERS` readers spread over the R readers.
//! Not a criterion bench: results go to `<results>/async-fanout-latency.jsonl` (one line per peer,
//! payload and R); `scripts/bench-report` takes the median of each percentile over repeated runs.

mod common;

use bytes::Bytes;

use common::fanout::{reader_counts, run, runtime, AsyncPeer, FanoutCfg};
use common::{js, percentile, record, reset_results, Payload};

/// Nanoseconds between events with `readers` readers.
fn pace_ns(readers: usize) -> u64 {
    (readers as u64 * 1_000).max(10_000)
}

fn all<T: Payload>() {
    let rt = runtime();
    for &readers in reader_counts() {
        let pace = pace_ns(readers);
        // About a quarter of a second per run (a tenth in quick mode), at least 25 events.
        let events = if common::quick() {
            (100_000_000 / pace).clamp(20, 1_000)
        } else {
            (250_000_000 / pace).clamp(25, 25_000)
        };
        let cfg = FanoutCfg {
            events,
            readers,
            pace_ns: Some(pace),
            latency: true,
        };
        for peer in AsyncPeer::ALL {
            let Ok(out) = run::<T>(&rt, peer, &cfg) else {
                continue;
            };
            let mut lat = out.latencies;
            lat.sort_unstable();
            record(
                "async-fanout-latency.jsonl",
                &[
                    ("peer", js(peer.name())),
                    ("payload", js(T::NAME)),
                    ("readers", readers.to_string()),
                    ("events", events.to_string()),
                    ("pace_ns", pace.to_string()),
                    ("samples", lat.len().to_string()),
                    ("p50_ns", percentile(&lat, 0.50).to_string()),
                    ("p99_ns", percentile(&lat, 0.99).to_string()),
                    ("p999_ns", percentile(&lat, 0.999).to_string()),
                ],
            );
        }
    }
}

fn main() {
    reset_results("async-fanout-latency.jsonl");
    all::<u64>();
    all::<Bytes>();
}
