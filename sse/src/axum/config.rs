//! The settings of one resumable stream, and their defaults.

use std::time::Duration;

use bytes::Bytes;
use replay_ring::ReplayRing;

use crate::{ConfigError, RetentionConfig, SlowConsumerPolicy};

/// Default [`SseConfig::keep_alive`]: 15 s, as in the MCP SDKs.
///
/// ```
/// use replay_ring_sse::axum::{SseConfig, DEFAULT_KEEP_ALIVE};
/// assert_eq!(SseConfig::default().keep_alive, DEFAULT_KEEP_ALIVE);
/// ```
pub const DEFAULT_KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Default [`SseConfig::retry`]: 1 s.
///
/// ```
/// use replay_ring_sse::axum::{SseConfig, DEFAULT_RETRY};
/// assert_eq!(SseConfig::default().retry, Some(DEFAULT_RETRY));
/// ```
pub const DEFAULT_RETRY: Duration = Duration::from_secs(1);

/// Default [`SseConfig::max_connections`]: 10,000 simultaneous event-stream responses on one
/// stream. The reader table and the retention table grow with the connections actually open, so
/// a large limit costs nothing until it is used; [`serve`](super::serve)'s connection cap (half
/// the file-descriptor limit by default) usually binds first.
///
/// ```
/// use replay_ring_sse::axum::{SseConfig, DEFAULT_MAX_CONNECTIONS};
/// assert_eq!(SseConfig::default().max_connections, DEFAULT_MAX_CONNECTIONS);
/// ```
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;

/// Settings of one resumable stream.
///
/// ```
/// use replay_ring_sse::axum::SseConfig;
/// let c = SseConfig { capacity: 4096, ..SseConfig::default() };
/// assert_eq!(c.max_connections, 10_000);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SseConfig {
    /// Events the window holds (rounded up to a power of two). Size it for
    /// `event rate × resumption window`, or the producer waits for events to age out, and for
    /// about twice that if clients come back near the end of their window
    /// ([`RetentionConfig::resumption_window`](crate::RetentionConfig::resumption_window)). Used by
    /// [`SseStream::new`](super::SseStream::new); a backend passed to [`SseStream::with_backend`](super::SseStream::with_backend) has its own capacity.
    pub capacity: usize,
    /// Simultaneous event-stream responses (ring readers); one more is refused with 503
    /// (`too_many_readers`). Default [`DEFAULT_MAX_CONNECTIONS`]. Used by
    /// [`SseStream::new`](super::SseStream::new); with [`SseStream::with_backend`](super::SseStream::with_backend) the backend's
    /// [`max_readers`](crate::backend::Backend::max_readers) is the limit.
    pub max_connections: usize,
    /// When events leave the window, and how long the producer may wait for space.
    pub retention: RetentionConfig,
    /// When one connection may no longer hold the stream back.
    pub slow_consumer: SlowConsumerPolicy,
    /// Idle time after which a keep-alive is written: a `: keep-alive` comment, or an event with
    /// [`keep_alive_event`](Self::keep_alive_event). `Duration::ZERO` or
    /// `Duration::MAX`: none (a stream that stays silent for [`ServeConfig::idle_timeout`](super::ServeConfig::idle_timeout)
    /// is then closed by [`serve`](super::serve)). Otherwise at least
    /// [`MIN_KEEP_ALIVE`](crate::MIN_KEEP_ALIVE).
    pub keep_alive: Duration,
    /// Write each keep-alive as [`KEEP_ALIVE_EVENT`](crate::KEEP_ALIVE_EVENT) (`event: keep-alive`,
    /// empty data, no id) instead of a comment. Off by default. A browser page cannot see
    /// comments, so a connection that died without a close (a network that dropped it on the
    /// way) looks to it like a quiet stream, for as long as the operating system keeps the
    /// socket; with this on, a page that hears nothing for a few `keep_alive` intervals knows the
    /// connection is dead and can reconnect with its last id. Clients that read only unnamed
    /// (`message`) events ignore it; a client that treats every event as data must skip it (its
    /// name is [`KEEP_ALIVE_EVENT_NAME`](crate::KEEP_ALIVE_EVENT_NAME)).
    pub keep_alive_event: bool,
    /// Reconnection delay announced in the priming event (`None`: leave the client's default), at
    /// most [`MAX_RETRY`](crate::MAX_RETRY).
    pub retry: Option<Duration>,
    /// Whether a resume with `Last-Event-ID = x` releases `..= x` at once (capped at the slowest
    /// live connection). Off by default: on a stream that several clients follow, one client's
    /// cursor says nothing about another, disconnected client that may still resume from an older
    /// id within the resumption window, so only the window (and the slowest live connection)
    /// releases. Turn it on only when each stream has exactly one client (one stream per request
    /// or per user), where a resume really is that client's acknowledgement. The
    /// [`events`](super::events) and [`backend_events`](super::backend_events) handlers
    /// acknowledge on a `GET` only, never on a `HEAD`, and so do
    /// [`SseStream::respond_to_request`](super::SseStream::respond_to_request) and
    /// `respond_to_request_async`; [`SseStream::respond`](super::SseStream::respond) and
    /// `respond_async` answer every call as a `GET` (they acknowledge, and the response holds the
    /// window as a connection).
    pub acknowledge_on_resume: bool,
}

impl SseConfig {
    /// Checks the settings as [`SseStream::new`](super::SseStream::new) does: the ring's
    /// `capacity` and `max_connections`, a `keep_alive` of zero or at least
    /// [`MIN_KEEP_ALIVE`](crate::MIN_KEEP_ALIVE), a `retry` of at most
    /// [`MAX_RETRY`](crate::MAX_RETRY), and the [`slow_consumer`](Self::slow_consumer) policy.
    /// Call it first where the settings come from outside, such as command-line flags.
    ///
    /// # Errors
    ///
    /// The first setting found wrong, as a [`ConfigError`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use replay_ring_sse::axum::SseConfig;
    /// use replay_ring_sse::ConfigError;
    ///
    /// assert_eq!(SseConfig::default().check(), Ok(()));
    /// let flood = SseConfig { keep_alive: Duration::from_micros(1), ..SseConfig::default() };
    /// assert_eq!(flood.check(), Err(ConfigError::KeepAliveTooShort(Duration::from_micros(1))));
    /// ```
    pub fn check(&self) -> Result<(), ConfigError> {
        ReplayRing::<Bytes>::builder()
            .capacity(self.capacity)
            .max_readers(self.max_connections)
            .check()?;
        self.check_stream_settings()
    }

    /// The checks of [`check`](Self::check) that apply to every backend: all but the ring's
    /// `capacity` and `max_connections`, which a backend other than the ring decides itself.
    pub(crate) fn check_stream_settings(&self) -> Result<(), ConfigError> {
        ConfigError::check_keep_alive(self.keep_alive)?;
        if let Some(retry) = self.retry {
            ConfigError::check_retry(retry)?;
        }
        self.slow_consumer.check()
    }
}

impl Default for SseConfig {
    fn default() -> Self {
        SseConfig {
            capacity: 1024,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            retention: RetentionConfig::default(),
            slow_consumer: SlowConsumerPolicy::default(),
            keep_alive: DEFAULT_KEEP_ALIVE,
            keep_alive_event: false,
            retry: Some(DEFAULT_RETRY),
            acknowledge_on_resume: false,
        }
    }
}
