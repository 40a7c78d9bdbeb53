//! The resumption window's clock: a fixed ring of `(lo, id, written-at)` checkpoints saying when
//! each written position was reached, so that what was written one window ago can be released.
//! Ids at or below a live period's first cursor that no checkpoint recorded before it were
//! written to no connection (a backlog published while nobody was connected): they fall between
//! checkpoints, where only departed clients' claims hold them.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::CHECKPOINTS;

/// Checkpoint slots: one window holds at most `CHECKPOINTS + 1` un-expired checkpoints, so with
/// expired ones taken regularly the ring never has to merge entries.
const SLOTS: usize = CHECKPOINTS + 2;

/// `(lo, id, at)`: every id in `lo + 1..=id` had been written to every live connection at `at`.
type Checkpoint = (u64, u64, Instant);

#[derive(Debug)]
pub(super) struct Checkpoints {
    /// How long a written position stays protected.
    window: Duration,
    /// Ids, and instants, increase front to back (`lo` is at least the previous entry's `id`).
    /// Never grows past `SLOTS` (no reallocation).
    entries: VecDeque<Checkpoint>,
    /// Newest written position not yet checkpointed (kept to honour the granularity).
    pending: Option<Checkpoint>,
    /// Highest id checkpointed or pending.
    recorded: u64,
    /// The first cursor of the current live period: ids up to it that were not recorded before
    /// the period began were written to no connection.
    unwritten_through: u64,
}

impl Checkpoints {
    pub(super) fn new(window: Duration) -> Self {
        Checkpoints {
            window,
            entries: VecDeque::with_capacity(SLOTS),
            pending: None,
            recorded: 0,
            unwritten_through: 0,
        }
    }

    /// A connection starts at `cursor`; `first`: no other is live. The first connection of a
    /// period leaves the ids up to its cursor that no checkpoint recorded yet written to nobody
    /// (a backlog published while nobody was connected). Ids above the cursor of any connection
    /// are to be written to it: those written to nobody so far join the checkpoint above them,
    /// whose window they keep, as any backlog a connection resumes into does.
    pub(super) fn on_connect(&mut self, cursor: u64, first: bool) {
        if first && cursor > self.recorded.max(self.unwritten_through) {
            // What was recorded stays apart from what comes after the unwritten ids.
            if let Some(pending) = self.pending.take() {
                self.push(pending);
            }
            self.unwritten_through = cursor;
            return;
        }
        self.unwritten_through = self.unwritten_through.min(cursor);
        let mut previous = 0;
        for (lo, id, _) in self.entries.iter_mut().chain(self.pending.iter_mut()) {
            if *lo > cursor {
                *lo = cursor.max(previous);
            }
            previous = *id;
        }
    }

    /// Notes that every id `<= id` was written by `now` (ids written to nobody excepted, see
    /// [`on_connect`](Self::on_connect)).
    pub(super) fn record(&mut self, id: u64, now: Instant) {
        if id <= self.recorded {
            return;
        }
        let lo = self.recorded.max(self.unwritten_through);
        if id <= lo {
            // Nothing to checkpoint: these ids were written to nobody before this period. Not
            // marked recorded either, so that a connection resuming below them later (which
            // lowers `unwritten_through`) checkpoints them when they are written to it.
            return;
        }
        self.recorded = id;
        self.pending = Some(match self.pending {
            // Coalesced with the position not checkpointed yet (`lo` is its `id`).
            Some((pending_lo, _, _)) => (pending_lo, id, now),
            None => (lo, id, now),
        });
        self.flush_pending(now);
    }

    /// Moves `pending` into the checkpoints once the newest checkpoint is a granule
    /// (`window / CHECKPOINTS`) old. Later checkpointing only delays a release, so coalescing is
    /// always safe.
    pub(super) fn flush_pending(&mut self, now: Instant) {
        let Some(pending) = self.pending else {
            return;
        };
        let granularity = self.window / CHECKPOINTS as u32;
        let due = match self.entries.back() {
            Some(&(_, _, last)) => now.saturating_duration_since(last) >= granularity,
            None => true,
        };
        if due {
            self.push(pending);
            self.pending = None;
        }
    }

    fn push(&mut self, checkpoint: Checkpoint) {
        let (mut lo, id, at) = checkpoint;
        if self.entries.len() == SLOTS {
            // Merge into the newest entry, keeping the later time: releases only get later.
            if let Some((back_lo, _, _)) = self.entries.pop_back() {
                lo = back_lo;
            }
        }
        self.entries.push_back((lo, id, at));
    }

    /// When the oldest position still protected was written, if any.
    pub(super) fn oldest(&self) -> Option<Instant> {
        self.entries
            .front()
            .or(self.pending.as_ref())
            .map(|&(_, _, at)| at)
    }

    /// Takes the checkpoints at least one window old by `now` and returns the highest id they
    /// cover, capped at `cap` (the slowest live connection): a checkpoint past the cap stays for
    /// a later release. Call `flush_pending(now)` first so a due pending position counts.
    pub(super) fn take_expired(&mut self, now: Instant, cap: Option<u64>) -> Option<u64> {
        let mut target = None;
        while let Some(&(_, id, at)) = self.entries.front() {
            if now.saturating_duration_since(at) < self.window {
                break;
            }
            match cap {
                Some(cap) if id > cap => {
                    // Expired, but a live connection still needs part of it: release up to the cap
                    // and keep the checkpoint for later.
                    target = Some(target.unwrap_or(0).max(cap));
                    break;
                }
                _ => {
                    target = Some(id);
                    self.entries.pop_front();
                }
            }
        }
        target
    }

    /// The end of the run of ids written to nobody that starts what the checkpoints hold: the
    /// oldest checkpoint's `lo`, or the first cursor of the live period when nothing is
    /// checkpointed (ids above it are to be written to a live connection and get checkpoints).
    /// Call after [`take_expired`](Self::take_expired), which takes the checkpoints below it.
    pub(super) fn unwritten_front(&self) -> u64 {
        self.entries
            .front()
            .or(self.pending.as_ref())
            .map_or(self.unwritten_through, |&(lo, _, _)| lo)
    }

    /// With nobody connected: the end of the longest run of ids, from the oldest retained,
    /// each written at least one window before `now` or written to nobody and at most
    /// `unclaimed` (no departed client's claim covers it; `None`: nothing is claimed), up to
    /// `head`. Takes the checkpoints it passes. Call `flush_pending(now)` first.
    pub(super) fn take_vacant(
        &mut self,
        now: Instant,
        unclaimed: Option<u64>,
        head: u64,
    ) -> Option<u64> {
        let free = unclaimed.map_or(head, |u| u.min(head));
        let mut target = 0;
        while let Some(&(lo, id, at)) = self.entries.front().or(self.pending.as_ref()) {
            if lo > target {
                // Written to nobody: what no claim covers may go.
                if free < lo {
                    target = target.max(free);
                    return (target > 0).then_some(target);
                }
                target = lo;
            }
            if now.saturating_duration_since(at) < self.window {
                return (target > 0).then_some(target);
            }
            target = id;
            if self.entries.pop_front().is_none() {
                self.pending = None;
            }
        }
        target = target.max(free);
        (target > 0).then_some(target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: Duration = Duration::from_secs(64);
    const S: Duration = Duration::from_secs(1);

    #[test]
    fn a_backlog_below_a_period_is_released_by_claims_while_its_writes_wait_their_window() {
        let t0 = Instant::now();
        let mut c = Checkpoints::new(WINDOW);
        // A live period: 1..=10 written at 0 s.
        c.record(10, t0);
        // Nobody connected; a visit starts at 100 and is written through 120 at 70 s.
        c.on_connect(100, true);
        c.record(120, t0 + 70 * S);
        let at = t0 + 71 * S;
        c.flush_pending(at);
        // 1..=10 expired, 11..=100 written to nobody: with nothing claimed above 100, through 100.
        assert_eq!(c.take_vacant(at, Some(100), 130), Some(100));
        // 101..=120 wait for their window, whatever is unclaimed.
        assert_eq!(c.take_vacant(at, Some(130), 130), Some(100));
        assert_eq!(c.take_vacant(t0 + 134 * S, Some(130), 130), Some(130));
    }

    #[test]
    fn a_claim_below_the_backlog_holds_it() {
        let t0 = Instant::now();
        let mut c = Checkpoints::new(WINDOW);
        c.on_connect(100, true);
        c.record(120, t0);
        // A departed client claims what came after 50.
        assert_eq!(c.take_vacant(t0 + S, Some(50), 130), Some(50));
        assert_eq!(c.take_vacant(t0 + S, None, 130), Some(100));
    }

    #[test]
    fn a_resume_into_ids_written_to_nobody_gives_them_the_window_of_the_checkpoint_above() {
        let t0 = Instant::now();
        let mut c = Checkpoints::new(WINDOW);
        c.record(10, t0);
        c.on_connect(100, true);
        c.record(150, t0 + 70 * S);
        c.flush_pending(t0 + 70 * S);
        assert_eq!(c.take_vacant(t0 + 71 * S, None, 150), Some(100));
        // A second connection resumes at 40: 41..=100 are to be written to it.
        c.on_connect(40, false);
        assert_eq!(c.entries.back(), Some(&(40, 150, t0 + 70 * S)));
        assert_eq!(c.take_vacant(t0 + 71 * S, None, 150), Some(40));
        // Written to nobody, and now to it, below the checkpoint: covered by it, not recorded.
        c.record(160, t0 + 72 * S);
        assert_eq!(c.take_vacant(t0 + 134 * S, None, 160), Some(150));
    }
}
