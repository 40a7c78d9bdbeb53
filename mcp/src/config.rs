//! [`StoreConfig`]: how a [`RingEventStore`](crate::RingEventStore) sizes, retains and ends its
//! streams, with the defaults it starts from.

use std::time::Duration;

use replay_ring::ReplayRing;
use replay_ring_sse::{ConfigError, RetentionConfig, SlowConsumerPolicy};
use rmcp::transport::streamable_http_server::session::ServerSseMessage;

/// Default events retained per stream.
pub const DEFAULT_CAPACITY: usize = 1024;
/// Default slots a stream's ring allocates up front (see [`StoreConfig::initial_slots`]).
pub const DEFAULT_INITIAL_SLOTS: usize = 16;
/// Default simultaneous connections (readers) per stream.
pub const DEFAULT_MAX_READERS: usize = 4;
/// Default time a completed request stream stays resumable (rmcp's own cache keeps 60 s too).
pub const DEFAULT_COMPLETED_TTL: Duration = Duration::from_secs(60);
/// Default `retry:` hint sent when the server ends a connection (rmcp's default `sse_retry`).
pub const DEFAULT_RETRY: Duration = Duration::from_secs(3);

/// Settings of a [`RingEventStore`](crate::RingEventStore).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreConfig {
    /// Events retained per stream (rounded up to a power of two by the ring).
    pub capacity: usize,
    /// Slots each stream's ring allocates when the stream is created (rounded up to a power of
    /// two, at most `capacity`); the ring grows, in segments that double, up to `capacity` as
    /// events arrive ([`replay_ring::Builder::initial_slots`]). The default, 16, holds a typical
    /// request stream (a few progress notifications and the result) without growing, so an idle
    /// or short stream costs 16 slots instead of `capacity` (with the default 1,024, about 60
    /// times less slot memory); a long stream pays a few allocations on the producer's slow path
    /// as it first reaches 32, 64, … events. Set it to `capacity` to allocate everything up front.
    pub initial_slots: usize,
    /// Simultaneous connections per stream (reader slots).
    pub max_readers: usize,
    /// Resumption window and backpressure bound, shared with every replay-ring SSE server.
    pub retention: RetentionConfig,
    /// How long a finished request stream stays resumable.
    pub completed_ttl: Duration,
    /// `retry:` hint on frames that end a connection on purpose. Keep it equal to rmcp's
    /// `StreamableHttpServerConfig::sse_retry`.
    pub retry: Duration,
    /// End each connection (with a `retry:` hint, SEP-1699 polling) after this many events;
    /// `None` keeps connections open until their stream completes.
    pub frames_per_connection: Option<usize>,
    /// When a connection may no longer hold its stream back (the SSE layer's policy): one whose
    /// transport takes nothing for the write timeout, or that lags while another connection of
    /// the stream keeps up, is cut; it then holds events only as a departed client does, and its
    /// connection ends with a `retry:` hint.
    pub slow_consumer: SlowConsumerPolicy,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            capacity: DEFAULT_CAPACITY,
            initial_slots: DEFAULT_INITIAL_SLOTS,
            max_readers: DEFAULT_MAX_READERS,
            retention: RetentionConfig::default(),
            completed_ttl: DEFAULT_COMPLETED_TTL,
            retry: DEFAULT_RETRY,
            frames_per_connection: None,
            slow_consumer: SlowConsumerPolicy::default(),
        }
    }
}

impl StoreConfig {
    /// Checks that every stream can work with these settings, as
    /// [`RingEventStore::new`](crate::RingEventStore::new) does (it panics otherwise): call it
    /// first where the settings come from outside, such as command-line flags.
    ///
    /// # Errors
    /// The first setting found wrong, as a [`ConfigError`]: the ring's own ([`ConfigError::Ring`]:
    /// a zero or too large `capacity`, zero or too many `max_readers`), a `retry` longer than
    /// [`MAX_RETRY`](replay_ring_sse::MAX_RETRY), a `slow_consumer` policy that cannot work.
    ///
    /// ```
    /// use std::time::Duration;
    /// use replay_ring_mcp::StoreConfig;
    /// use replay_ring_sse::ConfigError;
    /// assert!(StoreConfig::default().check().is_ok());
    /// assert!(StoreConfig { capacity: 0, ..StoreConfig::default() }.check().is_err());
    /// let forever = StoreConfig { retry: Duration::MAX, ..StoreConfig::default() };
    /// assert_eq!(forever.check(), Err(ConfigError::RetryTooLong(Duration::MAX)));
    /// ```
    pub fn check(&self) -> Result<(), ConfigError> {
        ReplayRing::<ServerSseMessage>::builder()
            .capacity(self.capacity)
            .max_readers(self.max_readers)
            .check()?;
        ConfigError::check_retry(self.retry)?;
        self.slow_consumer.check()
    }
}
