//! The connection table's first form, kept as the reference the property test compares
//! [`Retention`](super::Retention) against: every query walks all connections (O(connections)
//! per written batch), which is easy to check by reading. Both keep their clock in the same
//! [`Checkpoints`] and their departures in the same [`Claims`]: the comparison is about which
//! connections hold the window.

use std::time::Instant;

use replay_ring::{ReleaseError, ReplayRing};

use super::checkpoints::Checkpoints;
use super::claims::Claims;
use super::{ConnectionId, RetentionConfig, RetentionStats, TableTag};
use crate::deadline::after;
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
    checkpoints: Checkpoints,
    claims: Claims,
    stats: RetentionStats,
    tag: TableTag,
}

impl NaiveRetention {
    pub(super) fn new(config: RetentionConfig, max_connections: usize) -> Self {
        NaiveRetention {
            config,
            policy: SlowConsumerPolicy::default(),
            connections: vec![Entry::Free; max_connections],
            checkpoints: Checkpoints::new(config.resumption_window),
            claims: Claims::new(config.resumption_window, Instant::now()),
            stats: RetentionStats::default(),
            tag: TableTag::new(),
        }
    }

    pub(super) fn opened_at(mut self, at: Instant) -> Self {
        self.claims = Claims::new(self.config.resumption_window, at);
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
                let first = self.live_connections() == 0;
                self.checkpoints.on_connect(written_through, first);
                self.connections[i] = Entry::Live(ConsumerProgress {
                    written_through,
                    write_pending_since: None,
                });
                Some(self.tag.issue(i))
            }
            None => {
                self.stats.connections_refused += 1;
                None
            }
        }
    }

    pub(super) fn disconnect(&mut self, conn: ConnectionId, now: Instant) {
        let i = self.tag.index_of(&conn);
        if let Entry::Live(p) = self.connections[i] {
            self.claims.record(p.written_through, now);
        }
        self.connections[i] = Entry::Free;
        if let Some(min) = self.live_min() {
            self.checkpoints.record(min, now);
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
        if let Entry::Live(p) = &mut self.connections[self.tag.index_of(conn)] {
            p.write_pending_since.get_or_insert(now);
        }
    }

    pub(super) fn cut_verdict(&self, conn: &ConnectionId) -> Option<Verdict> {
        match self.connections[self.tag.index_of(conn)] {
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
        let mut cut_through: Option<u64> = None;
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
                cut_through =
                    Some(cut_through.map_or(p.written_through, |t| t.min(p.written_through)));
            }
        }
        if let Some(through) = cut_through {
            self.claims.record(through, now);
            if let Some(min) = self.live_min() {
                self.checkpoints.record(min, now);
            }
        }
        cut
    }

    pub(super) fn on_written(&mut self, conn: &ConnectionId, through: u64, now: Instant) {
        if let Entry::Live(p) = &mut self.connections[self.tag.index_of(conn)] {
            p.written_through = p.written_through.max(through);
            p.write_pending_since = None;
        }
        if let Some(min) = self.live_min() {
            self.checkpoints.record(min, now);
        }
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
        self.checkpoints.flush_pending(now);
        match self.live_min() {
            Some(cap) => super::live_release_target(
                &mut self.checkpoints,
                &mut self.claims,
                cap,
                window.head,
                now,
            ),
            None => super::vacant_release_target(
                &mut self.checkpoints,
                &mut self.claims,
                window.head,
                now,
            ),
        }
    }

    pub(super) fn ack_target(&self, acked: u64) -> u64 {
        self.live_min().map_or(acked, |min| min.min(acked))
    }

    pub(super) fn note_ack_release(&mut self) {
        self.stats.ack_releases += 1;
    }

    pub(super) fn next_expiry(&self) -> Option<Instant> {
        let mut ends: Vec<Instant> = self
            .checkpoints
            .oldest()
            .map(|start| after(start, self.config.resumption_window))
            .into_iter()
            .collect();
        if self.live_connections() == 0 || self.checkpoints.unwritten_front() > 0 {
            ends.extend(self.claims.next_end());
        }
        let window = ends.into_iter().min();
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
