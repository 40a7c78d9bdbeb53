//! The store's counters through the `metrics` facade (feature `metrics`).

use metrics::{counter, gauge};

use crate::{RingEventStore, StoreMetrics};

/// Fields that are not monotonic: the store's state right now, and the rings' counters summed over
/// the live streams (a stream that is forgotten takes its share with it). Published as gauges.
const GAUGES: [&str; 8] = [
    "streams_open",
    "retained",
    "readers_active",
    "producer_full",
    "producer_waits",
    "ack_releases",
    "window_releases",
    "slow_consumers_cut",
];

impl RingEventStore {
    /// Publishes a snapshot of [`metrics()`](Self::metrics) to the installed `metrics` recorder.
    /// Call it before each scrape (e.g. in the `/metrics` handler).
    ///
    /// Every field of [`StoreMetrics`] becomes `replay_ring_mcp_<field>`, plus
    /// `replay_ring_mcp_resumes_refused_total` ([`StoreMetrics::refused`]). Monotonic counters
    /// (`events_stored`, `resumes_*`, `backpressure_*`, …) are counters set to their absolute
    /// values. `streams_open`, `retained`, `readers_active` and the sums over live rings
    /// (`producer_full`, `producer_waits`, `ack_releases`, `window_releases`,
    /// `slow_consumers_cut`) are gauges: they fall when a stream is forgotten. The series carry no
    /// labels; give each store its own recorder (`metrics::with_local_recorder`) when a process
    /// serves several.
    ///
    /// ```
    /// use metrics_exporter_prometheus::PrometheusBuilder;
    /// use replay_ring_mcp::{RingEventStore, StoreConfig};
    ///
    /// let store = RingEventStore::new(StoreConfig::default());
    /// let recorder = PrometheusBuilder::new().build_recorder();
    /// metrics::with_local_recorder(&recorder, || store.record_metrics());
    /// let text = recorder.handle().render();
    /// assert!(text.contains("# TYPE replay_ring_mcp_events_stored counter"));
    /// assert!(text.contains("replay_ring_mcp_streams_open 0"));
    /// ```
    pub fn record_metrics(&self) {
        self.metrics().record();
    }
}

impl StoreMetrics {
    /// Publishes this snapshot to the installed `metrics` recorder, as
    /// [`RingEventStore::record_metrics`] describes.
    pub fn record(&self) {
        for (field, value) in self.fields() {
            let name = format!("replay_ring_mcp_{field}");
            if GAUGES.contains(&field) {
                gauge!(name).set(value as f64);
            } else {
                counter!(name).absolute(value);
            }
        }
    }
}
