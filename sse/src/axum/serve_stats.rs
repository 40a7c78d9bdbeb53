//! What [`serve`](super::serve) counts: connections refused over the cap, connections it
//! closed because a limit ran out, and request bodies cut at their deadline. Process-wide (every
//! `serve` in the process adds to the same counters), kept in atomics and published on demand,
//! like a stream's counters, so an app that renders its own per-server recorder
//! (`metrics::with_local_recorder`) shows them too.

use std::sync::atomic::{AtomicU64, Ordering};

/// Why `serve` turned a connection away or closed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Closed {
    /// Over the connection cap.
    Refused = 0,
    /// A write waited longer than the write timeout.
    WriteTimeout = 1,
    /// No byte moved for the idle timeout.
    IdleTimeout = 2,
    /// Still open at the end of the shutdown grace.
    AtShutdown = 3,
    /// No complete request head within the header-read timeout.
    HeaderReadTimeout = 4,
    /// A request body still arriving at the body-read timeout.
    BodyReadTimeout = 5,
    /// Closed by the kernel: sent bytes unacknowledged, or the peer's receive window closed, for
    /// the socket's `TCP_USER_TIMEOUT`.
    Unacknowledged = 6,
}

static COUNTS: [AtomicU64; 7] = [const { AtomicU64::new(0) }; 7];

/// Counts one connection `why`.
pub(crate) fn count(why: Closed) {
    // Relaxed: independent statistics; nothing else is published through them.
    COUNTS[why as usize].fetch_add(1, Ordering::Relaxed);
}

fn get(why: Closed) -> u64 {
    // Relaxed: see `count`.
    COUNTS[why as usize].load(Ordering::Relaxed)
}

/// A snapshot of `serve`'s counters in this process (see [`serve_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServeStats {
    /// Connections over [`ServeConfig::max_connections`](super::ServeConfig::max_connections):
    /// answered `503`, or closed without an answer while 64 such answers were under way.
    pub connections_refused: u64,
    /// Connections closed because a write waited longer than the write timeout.
    pub write_timeouts: u64,
    /// Connections closed because no byte moved for the idle timeout.
    pub idle_timeouts: u64,
    /// Connections still open at the end of the shutdown grace, closed then.
    pub closed_at_shutdown: u64,
    /// Connections closed because no complete request head arrived within the header-read
    /// timeout: half-sent or trickled heads (slowloris), silent connections, and kept-alive
    /// connections that sent no next request.
    pub header_read_timeouts: u64,
    /// Request bodies still arriving at the body-read timeout (the handler got
    /// [`BodyTimedOut`](super::BodyTimedOut), and the connection closed after its answer).
    pub body_read_timeouts: u64,
    /// Connections the kernel closed (Linux, `TCP_USER_TIMEOUT`, twice the write timeout) because
    /// bytes sent went unacknowledged, or the client's receive window stayed closed, that long: a
    /// client whose network vanished, or one that stopped reading on a stream too slow to fill
    /// the send buffer within a write timeout. Such a connection gets no `slow_consumer` frame
    /// (its socket is gone).
    pub unacknowledged_timeouts: u64,
}

/// The counters of every [`serve`](super::serve) and
/// [`serve_with_shutdown`](super::serve_with_shutdown) in this process so far.
///
/// ```
/// let stats = replay_ring_sse::axum::serve_stats();
/// assert!(stats.connections_refused <= replay_ring_sse::axum::serve_stats().connections_refused);
/// ```
pub fn serve_stats() -> ServeStats {
    ServeStats {
        connections_refused: get(Closed::Refused),
        write_timeouts: get(Closed::WriteTimeout),
        idle_timeouts: get(Closed::IdleTimeout),
        closed_at_shutdown: get(Closed::AtShutdown),
        header_read_timeouts: get(Closed::HeaderReadTimeout),
        body_read_timeouts: get(Closed::BodyReadTimeout),
        unacknowledged_timeouts: get(Closed::Unacknowledged),
    }
}

/// Publishes [`serve_stats`] through the `metrics` facade to the current recorder, as counters
/// `replay_ring_http_connections_refused_total`, `replay_ring_http_write_timeouts_total`,
/// `replay_ring_http_idle_timeouts_total`, `replay_ring_http_closed_at_shutdown_total`,
/// `replay_ring_http_header_read_timeouts_total`, `replay_ring_http_body_read_timeouts_total` and
/// `replay_ring_http_unacknowledged_timeouts_total`
/// (absolute values: call it when the metrics are scraped, as
/// [`SseStream::record_metrics`](super::SseStream::record_metrics)).
///
/// ```
/// replay_ring_sse::axum::record_serve_metrics(); // a no-op until a recorder is installed
/// ```
#[cfg(feature = "metrics")]
pub fn record_serve_metrics() {
    let s = serve_stats();
    for (name, value) in [
        (
            "replay_ring_http_connections_refused_total",
            s.connections_refused,
        ),
        ("replay_ring_http_write_timeouts_total", s.write_timeouts),
        ("replay_ring_http_idle_timeouts_total", s.idle_timeouts),
        (
            "replay_ring_http_closed_at_shutdown_total",
            s.closed_at_shutdown,
        ),
        (
            "replay_ring_http_header_read_timeouts_total",
            s.header_read_timeouts,
        ),
        (
            "replay_ring_http_body_read_timeouts_total",
            s.body_read_timeouts,
        ),
        (
            "replay_ring_http_unacknowledged_timeouts_total",
            s.unacknowledged_timeouts,
        ),
    ] {
        metrics::counter!(name).absolute(value);
    }
}
