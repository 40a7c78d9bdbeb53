//! The stream's counters through the `metrics` facade (feature `metrics`).

use bytes::Bytes;
use futures_util::FutureExt;
use metrics::{counter, gauge};

use super::SseStream;
use crate::backend::{Backend, Counters};

impl SseStream {
    /// Publishes a snapshot of the stream's counters to the installed `metrics` recorder, labelled
    /// `stream="<name>"`: counters are set to their absolute values, gauges to their current ones.
    /// Call it before each scrape (e.g. in the `/metrics` handler).
    ///
    /// | name | kind | meaning |
    /// |---|---|---|
    /// | `replay_ring_events_enqueued_total` | counter | events published |
    /// | `replay_ring_events_released_total` | counter | events released from the window |
    /// | `replay_ring_resumes_ok_total`, `_noop_total` | counter | resumes that replayed, resumes at the head |
    /// | `replay_ring_resumes_below_floor_total` | counter | resumes refused below the floor (416) |
    /// | `replay_ring_resumes_ahead_of_head_total` | counter | resumes refused ahead of the head (409) |
    /// | `replay_ring_producer_full_total`, `_waits_total` | counter | pushes that found the window full, waits for space |
    /// | `replay_ring_readers_active`, `_floor`, `_head`, `_capacity`, `_closed` | gauge | the window now |
    /// | `replay_ring_ack_releases_total`, `_window_releases_total` | counter | releases by acknowledgement, by the resumption window |
    /// | `replay_ring_slow_consumers_cut_total` | counter | connections cut by the slow-consumer policy |
    /// | `replay_ring_streams_opened_total` | counter | event-stream responses opened |
    /// | `replay_ring_refused_{400,404,409,416,503}_total` | counter | requests refused, by status |
    /// | `replay_ring_frames_written_total`, `_keep_alives_total` | counter | event frames, keep-alive comments written |
    /// | `replay_ring_backpressure_timeouts_total` | counter | streams closed by the backpressure bound |
    ///
    /// ```
    /// use replay_ring_sse::axum::{SseConfig, SseStream};
    /// use replay_ring_sse::{Epoch, StreamId, StreamIdentity};
    ///
    /// let me = StreamIdentity::new(StreamId::new("events").unwrap(), Epoch::new(1));
    /// let (stream, _producer) = SseStream::new(me, SseConfig::default()).unwrap();
    /// stream.record_metrics(); // a no-op until a recorder is installed
    /// ```
    pub fn record_metrics(&self) {
        // Every backend future of the ring is ready on its first poll.
        if let Some(Ok((counters, closed))) = self.backend_counters().now_or_never() {
            self.record_metrics_from(&counters, closed);
        }
    }
}

/// The same series for a stream over any backend, whose counters may take a request to read.
impl<B: Backend<Payload = Bytes>> SseStream<B> {
    /// The backend's counters and whether the stream is closed (for a network backend, a request
    /// or two), for [`record_metrics_from`](Self::record_metrics_from). Read them first, then
    /// record, so a per-server recorder (`metrics::with_local_recorder`) need not be held across
    /// an await.
    ///
    /// # Errors
    /// [`Unavailable`](crate::backend::Unavailable) if the backend could not be read.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn backend_counters(&self) -> Result<(Counters, bool), crate::backend::Unavailable> {
        let backend = self.backend();
        let counters = backend.counters().await?;
        let closed = backend.close_reason().await?.is_some();
        Ok((counters, closed))
    }

    /// Publishes the endpoint's own counters with the backend's `counters` (see
    /// [`record_metrics`](SseStream::record_metrics) for the series).
    ///
    /// ```
    /// use replay_ring_sse::axum::{SseConfig, SseStream};
    /// use replay_ring_sse::backend::Counters;
    /// use replay_ring_sse::{Epoch, StreamId, StreamIdentity};
    ///
    /// let me = StreamIdentity::new(StreamId::new("events").unwrap(), Epoch::new(1));
    /// let (stream, _producer) = SseStream::new(me, SseConfig::default()).unwrap();
    /// stream.record_metrics_from(&Counters::default(), false); // a no-op without a recorder
    /// ```
    pub fn record_metrics_from(&self, backend: &Counters, closed: bool) {
        let stream = self.identity().stream.as_str().to_owned();
        let labels = [("stream", stream)];
        let retention = self.with_retention(|r| r.stats());
        let endpoint = self.stats();
        let counters = [
            ("replay_ring_events_enqueued_total", backend.events_enqueued),
            ("replay_ring_events_released_total", backend.events_released),
            ("replay_ring_resumes_ok_total", backend.resumes_ok),
            ("replay_ring_resumes_noop_total", backend.resumes_noop),
            (
                "replay_ring_resumes_below_floor_total",
                backend.resumes_below_floor,
            ),
            (
                "replay_ring_resumes_ahead_of_head_total",
                backend.resumes_ahead_of_head,
            ),
            ("replay_ring_producer_full_total", backend.producer_full),
            ("replay_ring_producer_waits_total", backend.producer_waits),
            ("replay_ring_ack_releases_total", retention.ack_releases),
            (
                "replay_ring_window_releases_total",
                retention.window_releases,
            ),
            (
                "replay_ring_slow_consumers_cut_total",
                retention.slow_consumers_cut,
            ),
            ("replay_ring_streams_opened_total", endpoint.streams_opened),
            ("replay_ring_refused_400_total", endpoint.refused_400),
            ("replay_ring_refused_404_total", endpoint.refused_404),
            ("replay_ring_refused_409_total", endpoint.refused_409),
            ("replay_ring_refused_416_total", endpoint.refused_416),
            ("replay_ring_refused_503_total", endpoint.refused_503),
            ("replay_ring_frames_written_total", endpoint.frames_written),
            ("replay_ring_keep_alives_total", endpoint.keep_alives),
            (
                "replay_ring_backpressure_timeouts_total",
                endpoint.backpressure_timeouts,
            ),
        ];
        for (name, value) in counters {
            counter!(name, &labels).absolute(value);
        }
        let gauges = [
            ("replay_ring_readers_active", backend.readers_active as f64),
            ("replay_ring_floor", backend.floor as f64),
            ("replay_ring_head", backend.head as f64),
            ("replay_ring_capacity", backend.capacity as f64),
            ("replay_ring_closed", if closed { 1.0 } else { 0.0 }),
        ];
        for (name, value) in gauges {
            gauge!(name, &labels).set(value);
        }
    }
}
