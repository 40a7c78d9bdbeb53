//! The timeouts and the connection cap that [`serve`](fn@super::serve) applies, and their
//! defaults.

use std::io;
use std::time::Duration;

/// Timeouts and the connection cap of [`serve`](fn@super::serve):
///
/// | setting | default | closes a connection that … |
/// |---|---|---|
/// | [`header_read_timeout`](Self::header_read_timeout) | 10 s | has not sent a complete request head this long after it opened or its previous response ended (half-sent headers, silent or idle keep-alive connections) |
/// | [`body_read_timeout`](Self::body_read_timeout) | 30 s | has not sent its request body in full this long after the request head (a body trickled a byte at a time): the handler reading it gets [`BodyTimedOut`](crate::axum::BodyTimedOut) as a body error, answers it, and the connection closes |
/// | [`write_timeout`](Self::write_timeout) | 10 s | has had response bytes waiting that its socket did not accept for this long (a client that stopped reading); on Linux also, as the socket's `TCP_USER_TIMEOUT`, has had bytes sent that the peer did not acknowledge, or a closed receive window, for twice this long (a client whose network vanished: an event stream's keep-alives make sure there are such bytes, so it is closed within a keep-alive interval plus twice this, about 35 s at the defaults; a client that stopped reading on a stream too slow to fill the send buffer soon is closed this way too, without the `slow_consumer` frame; counted in [`ServeStats::unacknowledged_timeouts`](super::ServeStats::unacknowledged_timeouts)) |
/// | [`idle_timeout`](Self::idle_timeout) | 60 s | moved no byte in either direction for this long (a stalled request body, a handler that never answers; checked every quarter of the timeout, so closed up to a quarter later); event streams stay alive with their keep-alive comments, so keep [`SseConfig::keep_alive`](crate::axum::SseConfig::keep_alive) below it |
/// | [`max_connections`](Self::max_connections) | half the file-descriptor limit (32..=16384; 512 where unknown) | would exceed the cap: it gets `503 Service Unavailable` with `Retry-After: 1` and a JSON body, then is closed; while 64 such answers are already under way (each reads the request head first and takes up to 2 s), it is closed without one |
/// | [`shutdown_grace`](Self::shutdown_grace) | 5 s | is still open this long after [`serve_with_shutdown`](super::serve_with_shutdown)'s signal (an event stream never finishes by itself: its client resumes elsewhere with `Last-Event-ID`) |
///
///
/// ```
/// use replay_ring_sse::axum::ServeConfig;
/// use std::time::Duration;
///
/// let c = ServeConfig { max_connections: 1000, ..ServeConfig::default() };
/// assert_eq!(c.header_read_timeout, Duration::from_secs(10));
/// assert_eq!(c.idle_timeout, Duration::from_secs(60));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeConfig {
    /// Time to send a complete request head, from the connection's start or the end of its
    /// previous response.
    pub header_read_timeout: Duration,
    /// Time to send a complete request body, from its request head (a body sent a byte now and
    /// then moves bytes, so the idle timeout does not close it).
    pub body_read_timeout: Duration,
    /// Time response bytes may wait for a socket that accepts none; on Linux, twice this is the
    /// time sent bytes may go unacknowledged by the peer (`TCP_USER_TIMEOUT`).
    pub write_timeout: Duration,
    /// Time a connection may move no byte in either direction. The watchdog checks every quarter
    /// of it, so an idle connection is closed between this and a quarter more after its last byte.
    pub idle_timeout: Duration,
    /// Connections served at once; more get an explicit 503. Values above `u32::MAX` count as
    /// `u32::MAX`.
    pub max_connections: usize,
    /// After a shutdown signal, how long open connections may take to finish before they are
    /// closed (see [`serve_with_shutdown`](super::serve_with_shutdown)).
    pub shutdown_grace: Duration,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_connections: default_max_connections(),
            shutdown_grace: Duration::from_secs(5),
        }
    }
}

impl ServeConfig {
    /// Refuses the settings under which no request could be served.
    pub(super) fn check(&self) -> io::Result<()> {
        let timeouts = [
            ("header_read_timeout", self.header_read_timeout),
            ("body_read_timeout", self.body_read_timeout),
            ("write_timeout", self.write_timeout),
            ("idle_timeout", self.idle_timeout),
        ];
        if let Some((name, _)) = timeouts.iter().find(|(_, t)| t.is_zero()) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("ServeConfig::{name} is zero: every connection would be closed unanswered"),
            ));
        }
        if self.max_connections == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "ServeConfig::max_connections is 0: every request would be refused",
            ));
        }
        Ok(())
    }
}

/// Half the soft `RLIMIT_NOFILE` (the other half stays for the application's own files), clamped
/// to 32..=16384; 512 where the limit cannot be read.
fn default_max_connections() -> usize {
    #[cfg(unix)]
    {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes one `rlimit` through the valid, exclusively borrowed pointer.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
            let soft = usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX);
            return (soft / 2).clamp(32, 16_384);
        }
    }
    512
}
