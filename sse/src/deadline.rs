//! Deadlines computed from configured durations. `Duration::MAX` is the usual way to say
//! "never", and `Instant + Duration` panics past the clock's range, so every deadline the crate
//! derives from a setting goes through [`after`], and every timeout it hands to code that adds it
//! to the clock itself (hyper) through [`capped`].

use std::time::{Duration, Instant};

/// Thirty years: later than any deadline a setting means in practice, and within the range of
/// every platform's `Instant` from now.
const FAR: Duration = Duration::from_secs(30 * 365 * 86_400);

/// `at + d`, or a point too far ahead to matter (`at` + thirty years) where that does not fit in
/// an `Instant`.
///
/// ```ignore
/// let now = Instant::now();
/// assert!(after(now, Duration::MAX) > now);
/// ```
pub(crate) fn after(at: Instant, d: Duration) -> Instant {
    at.checked_add(d)
        .unwrap_or_else(|| at.checked_add(FAR).unwrap_or(at))
}

/// [`after`] for tokio's clock (which a paused test runtime moves).
#[cfg(feature = "axum")]
pub(crate) fn after_tokio(at: tokio::time::Instant, d: Duration) -> tokio::time::Instant {
    tokio::time::Instant::from_std(after(at.into_std(), d))
}

/// `d`, at most thirty years.
#[cfg(feature = "axum")]
pub(crate) fn capped(d: Duration) -> Duration {
    d.min(FAR)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_overflows_and_keeps_what_fits() {
        let now = Instant::now();
        assert_eq!(
            after(now, Duration::from_secs(5)),
            now + Duration::from_secs(5)
        );
        assert!(after(now, Duration::MAX) >= now + FAR);
    }

    #[cfg(feature = "axum")]
    #[test]
    fn capped_keeps_what_fits() {
        assert_eq!(capped(Duration::MAX), FAR);
        assert_eq!(capped(Duration::from_secs(1)), Duration::from_secs(1));
    }
}
