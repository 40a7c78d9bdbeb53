//! Settings a stream cannot honour, refused when the stream is built rather than discovered on
//! the wire.

use std::error::Error;
use std::fmt;
use std::time::Duration;

use replay_ring::BuildError;

/// The shortest keep-alive interval a stream accepts (other than `Duration::ZERO`, which turns
/// keep-alives off). A keep-alive says "the connection is alive, the stream is quiet"; written more
/// often than every 10 ms it is no longer an idle signal but a stream of its own, on every
/// connection.
///
/// ```
/// use std::time::Duration;
/// use replay_ring_sse::MIN_KEEP_ALIVE;
/// assert_eq!(MIN_KEEP_ALIVE, Duration::from_millis(10));
/// ```
pub const MIN_KEEP_ALIVE: Duration = Duration::from_millis(10);

/// The longest reconnection delay a stream announces in `retry:`: 2³¹ − 1 ms, about 24.8 days.
/// Browsers keep timer delays as a signed 32-bit count of milliseconds and run a longer one at
/// once, so EventSource implementations that schedule the reconnection with `setTimeout` (the
/// polyfills, Node's `eventsource`) would reconnect immediately, in a loop, on a longer delay.
///
/// ```
/// use std::time::Duration;
/// use replay_ring_sse::MAX_RETRY;
/// assert_eq!(MAX_RETRY, Duration::from_millis(2_147_483_647));
/// ```
pub const MAX_RETRY: Duration = Duration::from_millis(i32::MAX as u64);

/// A setting a stream cannot work with, found when the stream is built (by
/// `SseConfig::check` and `SseStream::new` of the `axum` feature, and by the MCP store's own
/// check), so that a bad flag is refused at startup with the setting's name instead of showing up
/// as a flood of frames or a client that reconnects in a loop.
///
/// ```
/// use std::time::Duration;
/// use replay_ring_sse::{ConfigError, SlowConsumerPolicy};
///
/// let policy = SlowConsumerPolicy { max_lag_percent: Some(0), ..SlowConsumerPolicy::default() };
/// assert_eq!(policy.check(), Err(ConfigError::MaxLagPercent(0)));
/// assert!(ConfigError::RetryTooLong(Duration::MAX).to_string().starts_with("retry"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// The ring cannot be built with this capacity or number of connections.
    Ring(BuildError),
    /// A keep-alive interval shorter than [`MIN_KEEP_ALIVE`] (and not zero, which turns
    /// keep-alives off).
    KeepAliveTooShort(Duration),
    /// A `retry:` delay longer than [`MAX_RETRY`].
    RetryTooLong(Duration),
    /// A slow-consumer lag share outside `1..=100` percent (`None` turns the lag rule off).
    MaxLagPercent(u8),
    /// A slow-consumer write timeout of zero, which would cut every connection whose socket
    /// is momentarily full (`None` turns the rule off).
    ZeroWriteTimeout,
}

impl ConfigError {
    /// `Err(RetryTooLong)` when `retry` is longer than [`MAX_RETRY`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use replay_ring_sse::{ConfigError, MAX_RETRY};
    /// assert_eq!(ConfigError::check_retry(MAX_RETRY), Ok(()));
    /// assert!(ConfigError::check_retry(MAX_RETRY + Duration::from_millis(1)).is_err());
    /// ```
    pub fn check_retry(retry: Duration) -> Result<(), ConfigError> {
        if retry > MAX_RETRY {
            return Err(ConfigError::RetryTooLong(retry));
        }
        Ok(())
    }

    /// `Err(KeepAliveTooShort)` when `keep_alive` is neither zero (off) nor at least
    /// [`MIN_KEEP_ALIVE`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use replay_ring_sse::ConfigError;
    /// assert_eq!(ConfigError::check_keep_alive(Duration::ZERO), Ok(()));
    /// assert!(ConfigError::check_keep_alive(Duration::from_nanos(1)).is_err());
    /// ```
    pub fn check_keep_alive(keep_alive: Duration) -> Result<(), ConfigError> {
        if !keep_alive.is_zero() && keep_alive < MIN_KEEP_ALIVE {
            return Err(ConfigError::KeepAliveTooShort(keep_alive));
        }
        Ok(())
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Ring(e) => e.fmt(f),
            ConfigError::KeepAliveTooShort(interval) => write!(
                f,
                "keep_alive of {interval:?} is shorter than the {MIN_KEEP_ALIVE:?} minimum \
                 (zero turns keep-alives off)"
            ),
            ConfigError::RetryTooLong(delay) => write!(
                f,
                "retry of {delay:?} is longer than 2147483647 ms (about 24.8 days), the longest \
                 delay a browser timer holds: a client scheduling its reconnection with one would \
                 reconnect at once"
            ),
            ConfigError::MaxLagPercent(percent) => write!(
                f,
                "max_lag_percent {percent} is outside 1..=100 (None turns the lag rule off)"
            ),
            ConfigError::ZeroWriteTimeout => f.write_str(
                "a write_timeout of zero would cut every connection whose socket is momentarily \
                 full (None turns the rule off)",
            ),
        }
    }
}

// `Ring` displays the ring's error itself, so it is not also given as the source (a chain of
// causes would say it twice).
impl Error for ConfigError {}

impl From<BuildError> for ConfigError {
    fn from(e: BuildError) -> Self {
        ConfigError::Ring(e)
    }
}
