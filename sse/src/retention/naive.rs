//! The connection table's first form, kept as the reference the property test compares
//! [`Retention`](super::Retention) against: every query walks all connections (O(connections)
//! per written batch), which is easy to check by reading.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use replay_ring::{ReleaseError, ReplayRing};

use super::{ConnectionId, RetentionConfig, RetentionStats, CHECKPOINTS, SLOTS};
use crate::slow_consumer::{ConsumerProgress, SlowConsumerPolicy, Verdict, Window};

#[derive(Debug, Clone, Copy)]
enum Entry {
    Free,
    Live(ConsumerProgress),
    Cut(Verdict),
}

#[derive(Debug)]
pub(super) struct NaiveRetention {
    config: RetentionConfig,
    policy: SlowConsumerPolicy,
    connections: Vec<Entry>,
    checkpoints: VecDeque<(u64, Instant)>,
    pending: Option<(u64, Instant)>,
    recorded: u64,
    vacant_since: Instant,
    stats: RetentionStats,
}

impl NaiveRetention {
    pub(super) fn new(config: RetentionConfig, max_connections: usize) -> Self {
        NaiveRetention {
            config,
            policy: SlowConsumerPolicy::default(),
            connections: vec![Entry::Free; max_connections],
            checkpoints: VecDeque::with_capacity(SLOTS),
            pending: None,
            recorded: 0,
            vacant_since: Instant::now(),
            stats: RetentionStats::default(),
        }
    }

    pub(super) fn opened_at(mut self, at: Instant) -> Self {
        self.vacant_since = at;
        self
    }

    pub(super) fn with_slow_consumer_policy(mut self, policy: SlowConsumerPolicy) -> Self {
        self.policy = policy;
        self
    }

    pub(super) fn stats(&self) -> RetentionStats {
        self.stats
    }

    pub(super) fn live_connections(&self) -> usize {
        self.connections
            .iter()
            .filter(|c| matches!(c, Entry::Live(_)))
            .count()
    }

    pub(super) fn connect(&mut self, written_through: u64) -> Option<ConnectionId> {
        match self
            .connections
            .iter()
            .position(|c| matches!(c, Entry::Free))
        {
            Some(i) => {
                self.connections[i] = Entry::Live(ConsumerProgress {
                    written_through,
                    write_pending_since: None,
                });
                Some(ConnectionId(i))
            }
            None => {
                self.stats.connections_refused += 1;
                None
            }
        }
    }

    pub(super) fn disconnect(&mut self, conn: ConnectionId, now: Instant) {
        let was_live = matches!(self.connections[conn.0], Entry::Live(_));
        self.connections[conn.0] = Entry::Free;
        if was_live {
            self.vacant_since = self.vacant_since.max(now);
        }
        if let Some(min) = self.live_min() {
            self.record(min, now);
        }
    }

    fn live(&self) -> impl Iterator<Item = &ConsumerProgress> {
        self.connections.iter().filter_map(|c| match c {
            Entry::Live(p) => Some(p),
            _ => None,
        })
    }

    fn live_min(&self) -> Option<u64> {
        self.live().map(|p| p.written_through).min()
    }

    pub(super) fn on_write_pending(&mut self, conn: &ConnectionId, now: Instant) {
        if let Entry::Live(p) = &mut self.connections[conn.0] {
            p.write_pending_since.get_or_insert(now);
        }
    }

    pub(super) fn cut_verdict(&self, conn: &ConnectionId) -> Option<Verdict> {
        match self.connections[conn.0] {
            Entry::Cut(verdict) => Some(verdict),
            _ => None,
        }
    }

    pub(super) fn cut_slow_consumers<T>(&mut self, ring: &ReplayRing<T>, now: Instant) -> usize {
        let floor = ring.floor();
        let window = Window {
            floor,
            head: ring.head(),
            capacity: ring.capacity(),
        };
        self.cut_slow_consumers_in(window, now)
    }

    pub(super) fn cut_slow_consumers_in(&mut self, window: Window, now: Instant) -> usize {
        // The two smallest lags, so each connection's "smallest lag among the others" is O(1).
        let mut best: Option<(usize, u64)> = None;
        let mut second: Option<u64> = None;
        for (i, c) in self.connections.iter().enumerate() {
            if let Entry::Live(p) = c {
                let lag = p.lag(window.head);
                match best {
                    Some((_, b)) if lag >= b => second = Some(second.map_or(lag, |s| s.min(lag))),
                    _ => {
                        second = best.map(|(_, b)| b);
                        best = Some((i, lag));
                    }
                }
            }
        }
        let mut cut = 0;
        for i in 0..self.connections.len() {
            let Entry::Live(p) = self.connections[i] else {
                continue;
            };
            let others = match best {
                Some((b, _)) if b == i => second,
                other => other.map(|(_, lag)| lag),
            };
            let verdict = self.policy.judge(&p, &window, others, now);
            if verdict.is_cut() {
                self.connections[i] = Entry::Cut(verdict);
                self.stats.slow_consumers_cut += 1;
                cut += 1;
            }
        }
        if cut > 0 {
            self.vacant_since = self.vacant_since.max(now);
            if let Some(min) = self.live_min() {
                self.record(min, now);
            }
        }
        cut
    }

    pub(super) fn on_written(&mut self, conn: &ConnectionId, through: u64, now: Instant) {
        if let Entry::Live(p) = &mut self.connections[conn.0] {
            p.written_through = p.written_through.max(through);
            p.write_pending_since = None;
        }
        if let Some(min) = self.live_min() {
            self.record(min, now);
        }
    }

    fn granularity(&self) -> Duration {
        self.config.resumption_window / CHECKPOINTS as u32
    }

    fn record(&mut self, id: u64, now: Instant) {
        if id <= self.recorded {
            return;
        }
        self.recorded = id;
        self.pending = Some((id, now));
        self.flush_pending(now);
    }

    fn flush_pending(&mut self, now: Instant) {
        let Some((id, at)) = self.pending else {
            return;
        };
        let due = match self.checkpoints.back() {
            Some(&(_, last)) => now.saturating_duration_since(last) >= self.granularity(),
            None => true,
        };
        if !due {
            return;
        }
        if self.checkpoints.len() == SLOTS {
            // Merge into the newest entry, keeping the later time: releases only get later.
            self.checkpoints.pop_back();
        }
        self.checkpoints.push_back((id, at));
        self.pending = None;
    }

    pub(super) fn release_expired<T>(&mut self, ring: &ReplayRing<T>, now: Instant) -> Option<u64> {
        let window = Window {
            floor: ring.floor(),
            head: ring.head(),
            capacity: ring.capacity(),
        };
        let target = self.release_target(window, now)?;
        let before = ring.floor();
        match ring.release_through(target) {
            Ok(floor) if floor > before => {
                self.stats.window_releases += 1;
                Some(floor)
            }
            _ => None,
        }
    }

    pub(super) fn release_target(&mut self, window: Window, now: Instant) -> Option<u64> {
        self.cut_slow_consumers_in(window, now);
        self.flush_pending(now);
        let head = window.head;
        let window = self.config.resumption_window;
        let cap = self.live_min();
        if cap.is_none() && now.saturating_duration_since(self.vacant_since) >= window {
            self.checkpoints.clear();
            self.pending = None;
            return Some(head);
        }
        let mut target = None;
        while let Some(&(id, at)) = self.checkpoints.front() {
            if now.saturating_duration_since(at) < window {
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
                    self.checkpoints.pop_front();
                }
            }
        }
        target
    }

    pub(super) fn ack_target(&self, acked: u64) -> u64 {
        self.live_min().map_or(acked, |min| min.min(acked))
    }

    pub(super) fn note_ack_release(&mut self) {
        self.stats.ack_releases += 1;
    }

    pub(super) fn next_expiry(&self) -> Option<Instant> {
        let mut starts: Vec<Instant> = self
            .checkpoints
            .front()
            .or(self.pending.as_ref())
            .map(|oldest| oldest.1)
            .into_iter()
            .collect();
        if self.live_connections() == 0 {
            starts.push(self.vacant_since);
        }
        let window = starts
            .into_iter()
            .min()
            .map(|start| start + self.config.resumption_window);
        let stall = self
            .live()
            .filter_map(|p| self.policy.stall_deadline(p))
            .min();
        match (window, stall) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    pub(super) fn acknowledge<T>(
        &mut self,
        ring: &ReplayRing<T>,
        acked: u64,
    ) -> Result<u64, ReleaseError> {
        if acked > ring.head() {
            return Err(ReleaseError::AheadOfHead {
                requested: acked,
                head: ring.head(),
            });
        }
        let through = self.ack_target(acked);
        let before = ring.floor();
        let floor = ring.release_through(through)?;
        if floor > before {
            self.note_ack_release();
        }
        Ok(floor)
    }
}
