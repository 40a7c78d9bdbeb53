//! The resumption window's clock: a fixed ring of `(id, written-at)` checkpoints saying when each
//! written position was reached, so that what was written one window ago can be released.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::CHECKPOINTS;

/// Checkpoint slots: one window holds at most `CHECKPOINTS + 1` un-expired checkpoints, so with
/// expired ones taken regularly the ring never has to merge entries.
const SLOTS: usize = CHECKPOINTS + 2;

#[derive(Debug)]
pub(super) struct Checkpoints {
    /// How long a written position stays protected.
    window: Duration,
    /// `(id, instant)`: every id `<= id` had been written to every live connection at `instant`.
    /// Ids and instants increase front to back. Never grows past `SLOTS` (no reallocation).
    entries: VecDeque<(u64, Instant)>,
    /// Newest written position not yet checkpointed (kept to honour the granularity).
    pending: Option<(u64, Instant)>,
    /// Highest id checkpointed or pending.
    recorded: u64,
}

impl Checkpoints {
    pub(super) fn new(window: Duration) -> Self {
        Checkpoints {
            window,
            entries: VecDeque::with_capacity(SLOTS),
            pending: None,
            recorded: 0,
        }
    }

    /// Notes that every id `<= id` was written by `now`.
    pub(super) fn record(&mut self, id: u64, now: Instant) {
        if id <= self.recorded {
            return;
        }
        self.recorded = id;
        self.pending = Some((id, now));
        self.flush_pending(now);
    }

    /// Moves `pending` into the checkpoints once the newest checkpoint is a granule
    /// (`window / CHECKPOINTS`) old. Later checkpointing only delays a release, so coalescing is
    /// always safe.
    pub(super) fn flush_pending(&mut self, now: Instant) {
        let Some((id, at)) = self.pending else {
            return;
        };
        let granularity = self.window / CHECKPOINTS as u32;
        let due = match self.entries.back() {
            Some(&(_, last)) => now.saturating_duration_since(last) >= granularity,
            None => true,
        };
        if !due {
            return;
        }
        if self.entries.len() == SLOTS {
            // Merge into the newest entry, keeping the later time: releases only get later.
            self.entries.pop_back();
        }
        self.entries.push_back((id, at));
        self.pending = None;
    }

    /// Forgets every checkpoint: everything recorded was released.
    pub(super) fn clear(&mut self) {
        self.entries.clear();
        self.pending = None;
    }

    /// When the oldest position still protected was written, if any.
    pub(super) fn oldest(&self) -> Option<Instant> {
        self.entries
            .front()
            .or(self.pending.as_ref())
            .map(|&(_, at)| at)
    }

    /// Takes the checkpoints at least one window old by `now` and returns the highest id they
    /// cover, capped at `cap` (the slowest live connection): a checkpoint past the cap stays for
    /// a later release. Call `flush_pending(now)` first so a due pending position counts.
    pub(super) fn take_expired(&mut self, now: Instant, cap: Option<u64>) -> Option<u64> {
        let mut target = None;
        while let Some(&(id, at)) = self.entries.front() {
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
}
