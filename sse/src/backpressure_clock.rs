//! [`BackpressureClock`]: how long a producer has found the window full, and when it gives up.

use std::time::{Duration, Instant};

use replay_ring::CloseReason;

use crate::deadline::after;

/// Measures how long a producer has been backpressured and says when to give up.
///
/// ```
/// use replay_ring_sse::BackpressureClock;
/// use replay_ring::CloseReason;
/// use std::time::{Duration, Instant};
///
/// let mut clock = BackpressureClock::new(Duration::from_secs(2));
/// let t0 = Instant::now();
/// assert_eq!(clock.on_full(t0), Ok(t0 + Duration::from_secs(2)));   // start waiting
/// assert!(clock.on_full(t0 + Duration::from_secs(1)).is_ok());       // still within the bound
/// assert_eq!(clock.on_full(t0 + Duration::from_secs(2)),
///            Err(CloseReason::BackpressureTimeout { waited: Duration::from_secs(2) }));
/// clock.on_pushed();                                                 // space came: reset
/// assert_eq!(clock.waiting_since(), None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackpressureClock {
    bound: Duration,
    since: Option<Instant>,
}

impl BackpressureClock {
    /// A clock that gives up after `bound` of continuous backpressure.
    ///
    /// ```
    /// let c = replay_ring_sse::BackpressureClock::new(std::time::Duration::from_secs(1));
    /// assert_eq!(c.waiting_since(), None);
    /// ```
    pub fn new(bound: Duration) -> Self {
        BackpressureClock { bound, since: None }
    }

    /// The producer found the window full at `now`. `Ok(deadline)` to keep waiting until at most
    /// `deadline`; `Err` with the close reason once the bound is reached.
    ///
    /// # Errors
    /// [`CloseReason::BackpressureTimeout`] (with the time waited) once the current episode has
    /// lasted at least the bound; the producer should close the stream with it.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// let mut c = replay_ring_sse::BackpressureClock::new(Duration::from_millis(10));
    /// let t0 = Instant::now();
    /// assert!(c.on_full(t0).is_ok());
    /// assert!(c.on_full(t0 + Duration::from_millis(10)).is_err());
    /// ```
    pub fn on_full(&mut self, now: Instant) -> Result<Instant, CloseReason> {
        let since = *self.since.get_or_insert(now);
        let waited = now.saturating_duration_since(since);
        if waited >= self.bound {
            Err(CloseReason::BackpressureTimeout { waited })
        } else {
            Ok(after(since, self.bound))
        }
    }

    /// A push succeeded: the producer is no longer backpressured.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// let mut c = replay_ring_sse::BackpressureClock::new(Duration::from_millis(10));
    /// let t0 = Instant::now();
    /// c.on_full(t0).unwrap();
    /// c.on_pushed();
    /// assert!(c.on_full(t0 + Duration::from_millis(15)).is_ok()); // a new episode
    /// ```
    pub fn on_pushed(&mut self) {
        self.since = None;
    }

    /// When the current backpressure episode started.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// let mut c = replay_ring_sse::BackpressureClock::new(Duration::from_secs(1));
    /// let t0 = Instant::now();
    /// c.on_full(t0).unwrap();
    /// c.on_full(t0 + Duration::from_millis(5)).unwrap();
    /// assert_eq!(c.waiting_since(), Some(t0));
    /// ```
    pub fn waiting_since(&self) -> Option<Instant> {
        self.since
    }
}
