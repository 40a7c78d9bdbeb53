//! Counters of a [`RingEventStore`](crate::RingEventStore).

use std::sync::atomic::{AtomicU64, Ordering};

/// A monotonic counter.
#[derive(Debug, Default)]
pub(crate) struct Counter(AtomicU64);

impl Counter {
    pub(crate) fn inc(&self) {
        // Relaxed: a statistic; it orders nothing and is read only for reporting.
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    fn get(&self) -> u64 {
        // Relaxed: pairs with the Relaxed increments; a report may lag by a few events.
        self.0.load(Ordering::Relaxed)
    }
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) events_stored: Counter,
    pub(crate) priming_stored: Counter,
    pub(crate) events_delivered: Counter,
    pub(crate) streams_created: Counter,
    pub(crate) streams_completed: Counter,
    pub(crate) streams_expired: Counter,
    pub(crate) resumes_ok: Counter,
    pub(crate) resumes_below_floor: Counter,
    pub(crate) resumes_ahead_of_head: Counter,
    pub(crate) resumes_malformed: Counter,
    pub(crate) resumes_stream_lost: Counter,
    pub(crate) resumes_session_lost: Counter,
    pub(crate) resumes_foreign_session: Counter,
    pub(crate) resumes_busy: Counter,
    pub(crate) resumes_stream_ended: Counter,
    pub(crate) resumes_unsupported_version: Counter,
    pub(crate) backpressure_waits: Counter,
    pub(crate) backpressure_timeouts: Counter,
    pub(crate) streams_ended_with_error: Counter,
    pub(crate) server_disconnects: Counter,
    pub(crate) event_log_failures: Counter,
    pub(crate) remote_resumes: Counter,
}

impl Counters {
    pub(crate) fn snapshot(&self) -> StoreMetrics {
        StoreMetrics {
            events_stored: self.events_stored.get(),
            priming_stored: self.priming_stored.get(),
            events_delivered: self.events_delivered.get(),
            streams_created: self.streams_created.get(),
            streams_completed: self.streams_completed.get(),
            streams_expired: self.streams_expired.get(),
            resumes_ok: self.resumes_ok.get(),
            resumes_below_floor: self.resumes_below_floor.get(),
            resumes_ahead_of_head: self.resumes_ahead_of_head.get(),
            resumes_malformed: self.resumes_malformed.get(),
            resumes_stream_lost: self.resumes_stream_lost.get(),
            resumes_session_lost: self.resumes_session_lost.get(),
            resumes_foreign_session: self.resumes_foreign_session.get(),
            resumes_busy: self.resumes_busy.get(),
            resumes_stream_ended: self.resumes_stream_ended.get(),
            resumes_unsupported_version: self.resumes_unsupported_version.get(),
            backpressure_waits: self.backpressure_waits.get(),
            backpressure_timeouts: self.backpressure_timeouts.get(),
            streams_ended_with_error: self.streams_ended_with_error.get(),
            server_disconnects: self.server_disconnects.get(),
            event_log_failures: self.event_log_failures.get(),
            remote_resumes: self.remote_resumes.get(),
            ..StoreMetrics::default()
        }
    }
}

/// A snapshot of the store's counters (monotonic since start) and gauges (summed over the
/// streams alive right now).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreMetrics {
    /// Events committed to a ring (priming events included).
    pub events_stored: u64,
    /// Priming events (empty data) committed.
    pub priming_stored: u64,
    /// Events handed to an SSE connection (replays count again).
    pub events_delivered: u64,
    /// Streams created.
    pub streams_created: u64,
    /// Request streams that stored their final response.
    pub streams_completed: u64,
    /// Ended streams (completed or closed) forgotten after `completed_ttl`.
    pub streams_expired: u64,
    /// Resumes accepted.
    pub resumes_ok: u64,
    /// Resumes refused: cursor below the retained floor (events released).
    pub resumes_below_floor: u64,
    /// Resumes refused: cursor ahead of the stream's head.
    pub resumes_ahead_of_head: u64,
    /// Resumes refused: `Last-Event-ID` is not a valid id.
    pub resumes_malformed: u64,
    /// Resumes refused: unknown stream or an epoch from before a restart.
    pub resumes_stream_lost: u64,
    /// Resumes refused: the session is gone.
    pub resumes_session_lost: u64,
    /// Resumes refused: the cursor belongs to another session's stream.
    pub resumes_foreign_session: u64,
    /// Resumes refused: every reader slot of the stream is taken.
    pub resumes_busy: u64,
    /// Resumes refused: the cursor is the last id of a stream that has ended (completed or closed).
    pub resumes_stream_ended: u64,
    /// Resumes refused: the request names an MCP protocol revision without resumable streams
    /// (2026-07-28 or later) in a session that negotiated an earlier one.
    pub resumes_unsupported_version: u64,
    /// Backpressure episodes (a push found the window full).
    pub backpressure_waits: u64,
    /// Streams closed because the window stayed full past the bound.
    pub backpressure_timeouts: u64,
    /// Connections that ended because their stream broke (closed or released): with a JSON-RPC
    /// error for the request on a request stream, with a `retry:` hint on the GET stream.
    pub streams_ended_with_error: u64,
    /// Connections ended on purpose by the server (SEP-1699 polling).
    pub server_disconnects: u64,
    /// Streams ended because their external event log (Redis) refused an event or could not be
    /// reached (always 0 without one).
    pub event_log_failures: u64,
    /// Resumes served from the external event log for a stream this process does not hold
    /// (another replica's, or one it has forgotten).
    pub remote_resumes: u64,
    /// Gauge: streams in the store.
    pub streams_open: u64,
    /// Gauge: events retained over all streams.
    pub retained: u64,
    /// Gauge: registered readers over all streams, and connections served from Redis.
    pub readers_active: u64,
    /// Sum over live rings: pushes that found the ring full.
    pub producer_full: u64,
    /// Sum over live rings: producer waits for space.
    pub producer_waits: u64,
    /// Sum over live rings: releases after a resume's acknowledgement.
    pub ack_releases: u64,
    /// Sum over live rings: releases after the resumption window.
    pub window_releases: u64,
    /// Sum over live rings: connections cut by the slow-consumer policy.
    pub slow_consumers_cut: u64,
}

impl StoreMetrics {
    /// `(name, value)` for every field, in declaration order.
    pub fn fields(&self) -> [(&'static str, u64); 31] {
        [
            ("events_stored", self.events_stored),
            ("priming_stored", self.priming_stored),
            ("events_delivered", self.events_delivered),
            ("streams_created", self.streams_created),
            ("streams_completed", self.streams_completed),
            ("streams_expired", self.streams_expired),
            ("resumes_ok", self.resumes_ok),
            ("resumes_below_floor", self.resumes_below_floor),
            ("resumes_ahead_of_head", self.resumes_ahead_of_head),
            ("resumes_malformed", self.resumes_malformed),
            ("resumes_stream_lost", self.resumes_stream_lost),
            ("resumes_session_lost", self.resumes_session_lost),
            ("resumes_foreign_session", self.resumes_foreign_session),
            ("resumes_busy", self.resumes_busy),
            ("resumes_stream_ended", self.resumes_stream_ended),
            (
                "resumes_unsupported_version",
                self.resumes_unsupported_version,
            ),
            ("backpressure_waits", self.backpressure_waits),
            ("backpressure_timeouts", self.backpressure_timeouts),
            ("streams_ended_with_error", self.streams_ended_with_error),
            ("server_disconnects", self.server_disconnects),
            ("event_log_failures", self.event_log_failures),
            ("remote_resumes", self.remote_resumes),
            ("streams_open", self.streams_open),
            ("retained", self.retained),
            ("readers_active", self.readers_active),
            ("producer_full", self.producer_full),
            ("producer_waits", self.producer_waits),
            ("ack_releases", self.ack_releases),
            ("window_releases", self.window_releases),
            ("slow_consumers_cut", self.slow_consumers_cut),
            ("resumes_refused_total", self.refused()),
        ]
    }

    /// All refused resumes.
    pub fn refused(&self) -> u64 {
        self.resumes_below_floor
            + self.resumes_ahead_of_head
            + self.resumes_malformed
            + self.resumes_stream_lost
            + self.resumes_session_lost
            + self.resumes_foreign_session
            + self.resumes_busy
            + self.resumes_stream_ended
            + self.resumes_unsupported_version
    }
}
