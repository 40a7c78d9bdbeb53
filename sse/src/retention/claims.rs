//! What departed clients may still come back for, while nobody is connected.
//!
//! A connection that leaves (or is cut) at `t`, written through `w`, may resume from any id it
//! received; what it received up to `w` keeps the window of when it was written (the
//! checkpoints), and every id above `w` stays until `t + window`: the **claim** `(w, t + window)`.
//! Ids at or below every live claim are nobody's to come back for, however recently someone
//! left, so a visit that starts at the head and leaves again holds only what came after it. The
//! policy's creation counts as a departure through id 0 (a client may come back for anything
//! published in its first window; `Retention::with_creation_claim_until_full` ends that claim
//! when the window fills before anyone connected).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::CHECKPOINTS;
use crate::deadline::after;

/// Claims kept at once: with claims less than a granule apart merged, one window holds at most
/// `CHECKPOINTS + 1` of them.
const SLOTS: usize = CHECKPOINTS + 2;

#[derive(Debug)]
pub(super) struct Claims {
    window: Duration,
    /// `(through, since, until)`: ids above `through` stay until `until`; `since` is when the
    /// oldest departure merged into the claim happened. Both `through` and `until` increase
    /// front to back: a claim that protects no lower id and ends no later than a newer one is
    /// covered by it and dropped. Never grows past `SLOTS`.
    entries: VecDeque<(u64, Instant, Instant)>,
}

impl Claims {
    /// The claims of a policy created at `at`: everything, for one window.
    pub(super) fn new(window: Duration, at: Instant) -> Self {
        let mut claims = Claims {
            window,
            entries: VecDeque::with_capacity(SLOTS),
        };
        claims.record(0, at);
        claims
    }

    /// No claim at all: what the creation's claim becomes when a full window ends it before any
    /// client connected (`Retention::with_creation_claim_until_full`).
    #[cfg(test)]
    pub(super) fn none(window: Duration) -> Self {
        let mut claims = Claims::new(window, Instant::now());
        claims.clear();
        claims
    }

    /// Drops every claim, keeping the allocation (it is made once, at construction).
    pub(super) fn clear(&mut self) {
        self.entries.clear();
    }

    /// A connection written through `through` left at `now`.
    pub(super) fn record(&mut self, through: u64, now: Instant) {
        self.drop_ended(now);
        // Callers read the clock before they take the lock, so `now` may be a little older than a
        // departure recorded before: keep the ends monotone (a later end only delays a release).
        let until = after(now, self.window).max(self.entries.back().map_or(now, |&(_, _, u)| u));
        while self.entries.back().is_some_and(|&(w, _, _)| w >= through) {
            self.entries.pop_back();
        }
        // Merge into the newest claim (which protects more: its `through` is lower) while it
        // began less than a granule ago, or when full: a claim ends at most a granule late.
        let granularity = self.window / CHECKPOINTS as u32;
        let full = self.entries.len() == SLOTS;
        if let Some(back) = self.entries.back_mut() {
            if full || now.saturating_duration_since(back.1) < granularity {
                back.2 = until;
                return;
            }
        }
        self.entries.push_back((through, now, until));
    }

    /// The highest id no live claim protects at `now` (`None`: no claim is live, nothing is
    /// protected). Drops the claims that ended.
    pub(super) fn unclaimed_through(&mut self, now: Instant) -> Option<u64> {
        self.drop_ended(now);
        self.entries.front().map(|&(through, _, _)| through)
    }

    fn drop_ended(&mut self, now: Instant) {
        while self
            .entries
            .front()
            .is_some_and(|&(_, _, until)| until <= now)
        {
            self.entries.pop_front();
        }
    }

    /// When the oldest claim ends: when more may become unclaimed (a claim that ended after the
    /// last call given a clock is still counted, as due).
    pub(super) fn next_end(&self) -> Option<Instant> {
        self.entries.front().map(|&(_, _, until)| until)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: Duration = Duration::from_secs(64);
    const S: Duration = Duration::from_secs(1);

    #[test]
    fn a_departure_holds_only_what_came_after_it() {
        let t0 = Instant::now();
        let mut c = Claims::new(WINDOW, t0);
        assert_eq!(c.unclaimed_through(t0 + 10 * S), Some(0));
        c.record(500, t0 + 10 * S);
        // The creation's claim still holds everything after 0.
        assert_eq!(c.unclaimed_through(t0 + 20 * S), Some(0));
        // It ends: the departure at 10 s holds only what came after 500.
        assert_eq!(c.unclaimed_through(t0 + WINDOW), Some(500));
        assert_eq!(c.next_end(), Some(t0 + 10 * S + WINDOW));
        assert_eq!(c.unclaimed_through(t0 + 10 * S + WINDOW), None);
    }

    #[test]
    fn without_the_creation_claim_nothing_is_protected_until_a_departure() {
        let t0 = Instant::now();
        let mut c = Claims::none(WINDOW);
        assert_eq!(c.unclaimed_through(t0), None);
        assert_eq!(c.next_end(), None);
        c.record(7, t0 + S);
        assert_eq!(c.unclaimed_through(t0 + 2 * S), Some(7));
    }

    /// Claims whose creation claim has ended, and the instant they were created.
    fn past_the_creation_claim() -> (Instant, Claims) {
        let t0 = Instant::now();
        let mut c = Claims::new(WINDOW, t0);
        assert_eq!(c.unclaimed_through(t0 + WINDOW), None);
        (t0, c)
    }

    #[test]
    fn a_later_departure_through_less_covers_the_earlier_one() {
        let (t0, mut c) = past_the_creation_claim();
        c.record(500, t0 + 70 * S);
        c.record(300, t0 + 80 * S);
        assert_eq!(c.entries.len(), 1);
        assert_eq!(c.unclaimed_through(t0 + 140 * S), Some(300));
        assert_eq!(c.unclaimed_through(t0 + 80 * S + WINDOW), None);
    }

    #[test]
    fn departures_within_a_granule_merge_into_the_lower_claim() {
        let (t0, mut c) = past_the_creation_claim();
        c.record(100, t0 + 70 * S);
        c.record(200, t0 + 70 * S + S / 2);
        assert_eq!(c.entries.len(), 1);
        // The merged claim protects from 100 until the later departure's end.
        assert_eq!(c.unclaimed_through(t0 + 70 * S + WINDOW), Some(100));
        assert_eq!(c.unclaimed_through(t0 + 70 * S + S / 2 + WINDOW), None);
    }

    #[test]
    fn a_departure_every_granule_keeps_the_table_bounded() {
        let t0 = Instant::now();
        let mut c = Claims::new(WINDOW, t0);
        for k in 1..1000u32 {
            c.record(u64::from(k), t0 + k * S);
            assert!(c.entries.len() <= SLOTS);
            // Everything that left more than a window (and a granule) ago is unclaimed.
            let now = t0 + k * S;
            if let Some(through) = c.unclaimed_through(now) {
                assert!(through + 66 >= u64::from(k), "{through} at {k}");
            }
        }
    }
}
