//! When one consumer may no longer hold the stream back: the slow-consumer policy.
//!
//! Every live connection holds back the events it has not written yet (the retention policy never
//! releases them), so a client that stops reading would eventually fill the window, make the
//! producer wait and, past the backpressure bound, end the stream for everyone. The policy judges
//! each consumer and says when it must be **cut**: after that it holds events only as a
//! disconnected client does (for the resumption window), so if it reconnects in time it resumes
//! with nothing lost, and if not it gets an explicit gap.
//!
//! A consumer is cut when either
//!
//! 1. **its socket accepts nothing** for [`write_timeout`](SlowConsumerPolicy::write_timeout):
//!    a write was handed to the transport and not taken for that long; or
//! 2. **it lags**: the window is full, it is more than
//!    [`max_lag_percent`](SlowConsumerPolicy::max_lag_percent) of the window behind the head, its
//!    transport has not taken its last write for [`lag_grace`](SlowConsumerPolicy::lag_grace), and
//!    another consumer keeps up (lags at most that much). A lone consumer is never cut for lag
//!    (there is nobody it holds back), nor is one that is only waiting to be scheduled (its last
//!    write was taken: it is not blocked on its socket). This cuts a blocked consumer sooner than
//!    the write timeout, but only once it holds everyone else back.
//!
//! "Accepts nothing" is the socket's view: the kernel's send buffer (and the client's receive
//! buffer) take data from a client that stopped reading until they are full, which on a quiet
//! stream can take many minutes. Until then such a client holds its connection and its reader
//! slot, but not the window: what its socket took counts as written.
//!
//! The logic is pure (time is passed in) so any store can apply it: [`Retention`](crate::Retention)
//! applies it to its connections; the transport only reports when a write started and when it was
//! taken.
//!
//! The policy is applied when retention runs: each time a connection plans a release after it
//! wrote, and while the producer waits on a full window. A connection stalled alone on a
//! stream whose window still has room is therefore cut only once the window fills, when it
//! would start to hold the producer back; until then it holds nothing back, and the server's
//! write timeout (`replay_ring_sse::axum::serve`) may close it first.

use std::fmt;
use std::time::{Duration, Instant};

use crate::deadline::after;
use crate::ConfigError;

/// Default [`SlowConsumerPolicy::write_timeout`]: 5 s, half the default backpressure timeout, so
/// a stalled consumer is cut before the producer would give up.
///
/// ```
/// use replay_ring_sse::{SlowConsumerPolicy, DEFAULT_WRITE_TIMEOUT};
/// assert_eq!(SlowConsumerPolicy::default().write_timeout, Some(DEFAULT_WRITE_TIMEOUT));
/// ```
pub const DEFAULT_WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// Default [`SlowConsumerPolicy::lag_grace`]: 1 s, to ride out a busy machine's scheduling delays.
///
/// ```
/// use replay_ring_sse::{SlowConsumerPolicy, DEFAULT_LAG_GRACE};
/// assert_eq!(SlowConsumerPolicy::default().lag_grace, DEFAULT_LAG_GRACE);
/// ```
pub const DEFAULT_LAG_GRACE: Duration = Duration::from_secs(1);

/// Default [`SlowConsumerPolicy::max_lag_percent`]: 50 % of the window.
///
/// ```
/// use replay_ring_sse::{SlowConsumerPolicy, DEFAULT_MAX_LAG_PERCENT};
/// assert_eq!(SlowConsumerPolicy::default().max_lag_percent, Some(DEFAULT_MAX_LAG_PERCENT));
/// ```
pub const DEFAULT_MAX_LAG_PERCENT: u8 = 50;

/// The slow-consumer settings. `None` disables a rule.
///
/// Keep `write_timeout` below the backpressure timeout
/// ([`RetentionConfig::backpressure_timeout`](crate::RetentionConfig::backpressure_timeout)):
/// otherwise a consumer that stopped reading holds the window until the producer gives up.
///
/// ```
/// use replay_ring_sse::{SlowConsumerPolicy, ConsumerProgress, Verdict, Window};
/// use std::time::{Duration, Instant};
///
/// let policy = SlowConsumerPolicy::default();
/// let t0 = Instant::now();
/// let window = Window { floor: 1, head: 64, capacity: 64 };
/// let stalled = ConsumerProgress { written_through: 10, write_pending_since: Some(t0) };
/// assert_eq!(policy.judge(&stalled, &window, None, t0 + Duration::from_secs(4)), Verdict::Keep);
/// assert_eq!(
///     policy.judge(&stalled, &window, None, t0 + Duration::from_secs(5)),
///     Verdict::Stalled { waited: Duration::from_secs(5) }
/// );
/// // 54 events behind a full 64-event window, blocked on its socket for a second, while another
/// // consumer is at the head: lagging.
/// let t1 = t0 + Duration::from_secs(1);
/// assert_eq!(
///     policy.judge(&stalled, &window, Some(0), t1),
///     Verdict::Lagging { lag: 54, limit: 32 }
/// );
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlowConsumerPolicy {
    /// Cut a consumer whose pending write has not been taken by its transport for this long.
    /// Keep it below [`RetentionConfig::backpressure_timeout`](crate::RetentionConfig::backpressure_timeout):
    /// a client that stops reading holds the window until it is cut, and with the lag rule off
    /// (or no other consumer keeping up) a cut that comes later than the producer's bound comes
    /// after the stream has ended, for everyone. `None` turns the rule off; zero is refused by
    /// [`check`](Self::check).
    pub write_timeout: Option<Duration>,
    /// Cut a consumer that is more than this share of the window (1..=100, percent) behind the head
    /// and blocked on its socket (a write pending), while the window is full and another consumer
    /// is within it. `None` turns the rule off; a value outside `1..=100` is refused by
    /// [`check`](Self::check) (and counts as the nearest bound where the policy is used
    /// unchecked).
    pub max_lag_percent: Option<u8>,
    /// How long a lagging consumer's pending write must have waited before the lag rule applies.
    pub lag_grace: Duration,
}

impl Default for SlowConsumerPolicy {
    fn default() -> Self {
        SlowConsumerPolicy {
            write_timeout: Some(DEFAULT_WRITE_TIMEOUT),
            max_lag_percent: Some(DEFAULT_MAX_LAG_PERCENT),
            lag_grace: DEFAULT_LAG_GRACE,
        }
    }
}

/// A stream's window at one instant, for the lag rule.
///
/// ```
/// let w = replay_ring_sse::Window { floor: 3, head: 10, capacity: 8 };
/// assert!(w.is_full());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Oldest retained id.
    pub floor: u64,
    /// Newest id.
    pub head: u64,
    /// How many events the window holds.
    pub capacity: usize,
}

impl Window {
    /// Whether the window holds `capacity` events (the producer cannot push).
    ///
    /// ```
    /// let w = replay_ring_sse::Window { floor: 4, head: 10, capacity: 8 };
    /// assert!(!w.is_full());
    /// ```
    pub fn is_full(&self) -> bool {
        (self.head + 1).saturating_sub(self.floor) >= self.capacity as u64
    }
}

/// What the policy knows about one consumer.
///
/// ```
/// let p = replay_ring_sse::ConsumerProgress { written_through: 7, write_pending_since: None };
/// assert_eq!(p.lag(10), 3);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsumerProgress {
    /// Every id `<= written_through` was taken by the consumer's transport.
    pub written_through: u64,
    /// When the write the transport has not taken yet was handed to it (`None`: nothing pending).
    pub write_pending_since: Option<Instant>,
}

impl ConsumerProgress {
    /// How many events behind `head` the consumer is.
    ///
    /// ```
    /// let p = replay_ring_sse::ConsumerProgress { written_through: 12, write_pending_since: None };
    /// assert_eq!(p.lag(10), 0);
    /// ```
    pub fn lag(&self, head: u64) -> u64 {
        head.saturating_sub(self.written_through)
    }
}

/// The policy's judgement of one consumer.
///
/// ```
/// use replay_ring_sse::Verdict;
/// assert!(!Verdict::Keep.is_cut());
/// assert_eq!(Verdict::Lagging { lag: 40, limit: 32 }.reason(), "lagging");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Keep serving it.
    Keep,
    /// Cut: its transport took nothing for `waited`.
    Stalled {
        /// How long the pending write had been waiting.
        waited: Duration,
    },
    /// Cut: `lag` events behind the head, over the `limit`, while another consumer keeps up.
    Lagging {
        /// Events behind the head.
        lag: u64,
        /// The configured limit in events.
        limit: u64,
    },
}

impl Verdict {
    /// Whether the consumer must be cut.
    ///
    /// ```
    /// use replay_ring_sse::Verdict;
    /// assert!(Verdict::Stalled { waited: std::time::Duration::from_secs(6) }.is_cut());
    /// ```
    pub fn is_cut(&self) -> bool {
        !matches!(self, Verdict::Keep)
    }

    /// A stable machine-readable reason: `"keep"`, `"write_timeout"` or `"lagging"`.
    ///
    /// ```
    /// use replay_ring_sse::Verdict;
    /// assert_eq!(Verdict::Stalled { waited: Default::default() }.reason(), "write_timeout");
    /// ```
    pub fn reason(&self) -> &'static str {
        match self {
            Verdict::Keep => "keep",
            Verdict::Stalled { .. } => "write_timeout",
            Verdict::Lagging { .. } => "lagging",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Verdict::Keep => f.write_str("consumer keeps up"),
            Verdict::Stalled { waited } => write!(
                f,
                "the connection accepted no data for {} ms; resume with Last-Event-ID",
                waited.as_millis()
            ),
            Verdict::Lagging { lag, limit } => write!(
                f,
                "the connection fell {lag} events behind (limit {limit}) while others kept up; resume with Last-Event-ID"
            ),
        }
    }
}

impl SlowConsumerPolicy {
    /// A policy that never cuts anyone.
    ///
    /// ```
    /// let p = replay_ring_sse::SlowConsumerPolicy::disabled();
    /// assert_eq!((p.write_timeout, p.max_lag_percent), (None, None));
    /// ```
    pub fn disabled() -> Self {
        SlowConsumerPolicy {
            write_timeout: None,
            max_lag_percent: None,
            lag_grace: DEFAULT_LAG_GRACE,
        }
    }

    /// Checks that the policy can work: a `max_lag_percent` in `1..=100` and a non-zero
    /// `write_timeout` (`None` turns either rule off).
    ///
    /// # Errors
    ///
    /// [`ConfigError::MaxLagPercent`], [`ConfigError::ZeroWriteTimeout`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use replay_ring_sse::{ConfigError, SlowConsumerPolicy};
    /// assert_eq!(SlowConsumerPolicy::default().check(), Ok(()));
    /// let now = SlowConsumerPolicy { write_timeout: Some(Duration::ZERO), ..Default::default() };
    /// assert_eq!(now.check(), Err(ConfigError::ZeroWriteTimeout));
    /// ```
    pub fn check(&self) -> Result<(), ConfigError> {
        if let Some(percent) = self.max_lag_percent.filter(|p| !(1..=100).contains(p)) {
            return Err(ConfigError::MaxLagPercent(percent));
        }
        if self.write_timeout.is_some_and(|t| t.is_zero()) {
            return Err(ConfigError::ZeroWriteTimeout);
        }
        Ok(())
    }

    /// The lag limit in events for a window of `capacity` (at least 1), if the lag rule is on.
    ///
    /// ```
    /// let p = replay_ring_sse::SlowConsumerPolicy::default();
    /// assert_eq!(p.lag_limit(64), Some(32));
    /// assert_eq!(p.lag_limit(1), Some(1));
    /// ```
    pub fn lag_limit(&self, capacity: usize) -> Option<u64> {
        let percent = u64::from(self.max_lag_percent?.clamp(1, 100));
        Some((capacity as u64 * percent / 100).max(1))
    }

    /// Judges `consumer` at `now`. `others_min_lag` is the smallest lag among the *other* live
    /// consumers of the stream (`None` if it is alone).
    ///
    /// ```
    /// use replay_ring_sse::{ConsumerProgress, SlowConsumerPolicy, Verdict, Window};
    /// let p = SlowConsumerPolicy::default();
    /// let full = Window { floor: 1, head: 8, capacity: 8 };
    /// let since = std::time::Instant::now();
    /// let now = since + p.lag_grace;
    /// let behind = ConsumerProgress { written_through: 0, write_pending_since: Some(since) };
    /// // Alone, or with nobody keeping up: never cut for lag.
    /// assert_eq!(p.judge(&behind, &full, None, now), Verdict::Keep);
    /// assert_eq!(p.judge(&behind, &full, Some(7), now), Verdict::Keep);
    /// // Not blocked on its socket (only waiting to be scheduled): kept.
    /// let idle = ConsumerProgress { write_pending_since: None, ..behind };
    /// assert_eq!(p.judge(&idle, &full, Some(0), now), Verdict::Keep);
    /// assert!(p.judge(&behind, &full, Some(0), now).is_cut());
    /// ```
    pub fn judge(
        &self,
        consumer: &ConsumerProgress,
        window: &Window,
        others_min_lag: Option<u64>,
        now: Instant,
    ) -> Verdict {
        if let (Some(timeout), Some(since)) = (self.write_timeout, consumer.write_pending_since) {
            let waited = now.saturating_duration_since(since);
            if waited >= timeout {
                return Verdict::Stalled { waited };
            }
        }
        if let (Some(limit), Some(other)) = (self.lag_limit(window.capacity), others_min_lag) {
            let lag = consumer.lag(window.head);
            let blocked = consumer
                .write_pending_since
                .is_some_and(|since| now.saturating_duration_since(since) >= self.lag_grace);
            if blocked && window.is_full() && lag > limit && other <= limit {
                return Verdict::Lagging { lag, limit };
            }
        }
        Verdict::Keep
    }

    /// When the policy may next cut `consumer` if its transport takes nothing until then: the
    /// write timeout, or (with the lag rule on) the end of the lag grace. `None` while no write is
    /// pending.
    ///
    /// ```
    /// use replay_ring_sse::{ConsumerProgress, SlowConsumerPolicy};
    /// use std::time::{Duration, Instant};
    /// let t0 = Instant::now();
    /// let c = ConsumerProgress { written_through: 0, write_pending_since: Some(t0) };
    /// let no_lag_rule = SlowConsumerPolicy { max_lag_percent: None, ..Default::default() };
    /// assert_eq!(no_lag_rule.stall_deadline(&c), Some(t0 + Duration::from_secs(5)));
    /// assert_eq!(SlowConsumerPolicy::default().stall_deadline(&c), Some(t0 + Duration::from_secs(1)));
    /// ```
    pub fn stall_deadline(&self, consumer: &ConsumerProgress) -> Option<Instant> {
        let since = consumer.write_pending_since?;
        let timeout = self.write_timeout.map(|t| after(since, t));
        let lag = self.max_lag_percent.map(|_| after(since, self.lag_grace));
        match (timeout, lag) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}
