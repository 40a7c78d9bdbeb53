//! The retention policy every server shares: when events may leave the window, and when a
//! backpressured producer must give up (explicitly, never by dropping).
//!
//! Events leave the window only through [`ReplayRing::release_through`], for two reasons:
//!
//! 1. **Acknowledgement.** A resume with `Last-Event-ID = x` proves the client has `..= x`.
//! 2. **Resumption window.** An event written to a live connection more than
//!    [`RetentionConfig::resumption_window`] ago is released: a client that has been away longer
//!    than that gets an explicit gap on resume.
//!
//! Neither ever releases an event that a live connection has not written yet (the release is
//! capped at the slowest live connection), so a connected reader never sees a gap.
//!
//! With nobody connected, each client that left is promised one resumption window from its
//! departure for what came after the last event written to it (its **claim**; the policy's
//! creation claims everything for one window). What was written to a connection keeps the window
//! of its writing; what was written to nobody (published while nobody was connected, below the
//! cursor a later visit started at) is held by claims alone. So a client that visits at the head
//! and leaves holds what it was written for a window from its writing and what came after it for
//! a window from its departure, never the backlog before it, and a stream nobody follows keeps
//! publishing instead of filling up and ending. One window after the last departure everything
//! is releasable. This holds only
//! where the policy sees every connection of the stream (one process); a replica of a stream
//! shared through a network store turns it off
//! ([`with_vacancy_release`](Retention::with_vacancy_release)).
//!
//! A connection that stops taking data would hold the window forever, so the
//! [`SlowConsumerPolicy`] decides when a live connection is **cut**: from then on it holds events
//! exactly as a disconnected client does (for one resumption window), and its writer ends the
//! response with an explicit error frame where the socket still takes one.
//!
//! Time is passed in (`now: Instant`) so tests can drive it without sleeping. Nothing here
//! allocates after construction: written positions go into a fixed table of connections and a
//! fixed ring of [`CHECKPOINTS`] `(id, Instant)` pairs.
//!
//! Every per-batch call is O(log connections): the slowest live connection, the fastest one and
//! the oldest pending write are kept in fixed-size tournament trees over the table, so a written
//! batch never walks the other connections, and the slow-consumer check visits only the
//! connections it cuts.

mod checkpoints;
mod claims;
mod connection_id;
mod min_tree;
#[cfg(test)]
mod naive;
#[cfg(test)]
mod tests;

use std::cmp::Reverse;
use std::time::{Duration, Instant};

use replay_ring::{ReleaseError, ReplayRing};

use crate::deadline::after;
use crate::slow_consumer::{ConsumerProgress, SlowConsumerPolicy, Verdict, Window};
use checkpoints::Checkpoints;
use claims::Claims;
pub use connection_id::ConnectionId;
use connection_id::TableTag;
use min_tree::MinTree;

/// Number of `(id, written-at)` checkpoints kept; the window is tracked with a granularity of
/// `resumption_window / CHECKPOINTS` (events are released at most that much later than due, never
/// earlier).
///
/// ```
/// assert_eq!(replay_ring_sse::CHECKPOINTS, 64);
/// ```
pub const CHECKPOINTS: usize = 64;

/// Default [`RetentionConfig::resumption_window`]: 30 s (two 15 s keep-alive periods).
///
/// ```
/// use replay_ring_sse::{RetentionConfig, DEFAULT_RESUMPTION_WINDOW};
/// assert_eq!(RetentionConfig::default().resumption_window, DEFAULT_RESUMPTION_WINDOW);
/// ```
pub const DEFAULT_RESUMPTION_WINDOW: Duration = Duration::from_secs(30);
/// Default [`RetentionConfig::backpressure_timeout`]: 10 s.
///
/// ```
/// use replay_ring_sse::{RetentionConfig, DEFAULT_BACKPRESSURE_TIMEOUT};
/// assert_eq!(RetentionConfig::default().backpressure_timeout, DEFAULT_BACKPRESSURE_TIMEOUT);
/// ```
pub const DEFAULT_BACKPRESSURE_TIMEOUT: Duration = Duration::from_secs(10);

/// Retention settings.
///
/// ```
/// use replay_ring_sse::RetentionConfig;
/// use std::time::Duration;
///
/// let c = RetentionConfig::default();
/// assert_eq!(c.resumption_window, Duration::from_secs(30));
/// assert_eq!(c.backpressure_timeout, Duration::from_secs(10));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionConfig {
    /// How long an event stays replayable after it was written to a live connection.
    /// Size the ring for it: `capacity >= event rate × window`, or the producer is backpressured
    /// by events that are merely waiting out their window; a client that comes back near the end
    /// of its window holds what it missed for another window from its return: up to twice that
    /// once it has caught up, longer while it keeps leaving before it has (`docs/protocol.md`,
    /// "Sizing").
    pub resumption_window: Duration,
    /// How long the producer may wait for space before the stream is closed with
    /// [`CloseReason::BackpressureTimeout`](replay_ring::CloseReason::BackpressureTimeout).
    pub backpressure_timeout: Duration,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig {
            resumption_window: DEFAULT_RESUMPTION_WINDOW,
            backpressure_timeout: DEFAULT_BACKPRESSURE_TIMEOUT,
        }
    }
}

/// Entries a retention table starts with (fewer if its `max_connections` is smaller); it doubles
/// as connections arrive.
const INITIAL_CONNECTIONS: usize = if cfg!(test) { 1 } else { 64 };

/// Counters of what the policy released, for metrics.
///
/// ```
/// let (mut p, ring) = replay_ring::ReplayRing::<u8>::new(4, 1).unwrap();
/// p.try_push(1).unwrap();
/// let mut r = replay_ring_sse::Retention::new(Default::default(), 1);
/// r.acknowledge(&ring, 1).unwrap();
/// assert_eq!(r.stats().ack_releases, 1);
/// assert_eq!(r.stats().window_releases, 0);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetentionStats {
    /// Releases triggered by a resume's acknowledgement.
    pub ack_releases: u64,
    /// Releases triggered by the resumption window expiring.
    pub window_releases: u64,
    /// Connections refused because the table was full.
    pub connections_refused: u64,
    /// Connections cut by the [`SlowConsumerPolicy`].
    pub slow_consumers_cut: u64,
}

/// One entry of the connection table.
#[derive(Debug, Clone, Copy)]
enum Entry {
    Free,
    Live {
        progress: ConsumerProgress,
        /// Its pending write was seen waiting past the lag grace (at some look, possibly one with
        /// a later `now` than the current: the lag rule re-checks before cutting).
        past_grace: bool,
    },
    /// Cut by the slow-consumer policy; holds nothing, keeps its entry until it disconnects.
    Cut(Verdict),
}

impl Entry {
    fn live(progress: ConsumerProgress) -> Self {
        Entry::Live {
            progress,
            past_grace: false,
        }
    }
}

/// Indexes over the connection table, kept in step with it by [`Retention::set_entry`]: each
/// answers one question the per-batch calls ask in O(1), and is updated in O(log connections).
///
/// The lag rule's three indexes (`fastest`, `within_grace`, `past_grace`) are kept only while the
/// policy has a lag rule (`lag_rule`): a per-batch update touches each index's tree, and a policy
/// without the rule would pay for three of the five on every write for nothing.
#[derive(Debug)]
struct Indexes {
    /// Number of live entries.
    live: usize,
    /// Whether the lag rule's indexes are maintained (they are empty otherwise).
    lag_rule: bool,
    /// Free entries, keyed by their own index: the smallest is the one `connect` takes.
    free: MinTree<usize>,
    /// Live connections' written-through ids: the smallest caps every release.
    slowest: MinTree<u64>,
    /// Live connections' written-through ids, largest first: the lag rule's "another keeps up".
    fastest: MinTree<Reverse<u64>>,
    /// Live connections' pending-write instants: the write-timeout rule and the next deadline.
    pending: MinTree<Instant>,
    /// The pending-write instants of connections not yet seen past the lag grace.
    within_grace: MinTree<Instant>,
    /// Written-through ids of connections seen past the lag grace: the lag rule's candidates,
    /// furthest behind first.
    past_grace: MinTree<u64>,
}

impl Indexes {
    fn new(max_connections: usize, lag_rule: bool) -> Self {
        // Without a lag rule its indexes stay empty (no slots: `min` and `find` answer `None`).
        let lag_slots = if lag_rule { max_connections } else { 0 };
        Indexes {
            live: 0,
            lag_rule,
            free: MinTree::from_fn(max_connections, Some),
            slowest: MinTree::new(max_connections),
            fastest: MinTree::new(lag_slots),
            pending: MinTree::new(max_connections),
            within_grace: MinTree::new(lag_slots),
            past_grace: MinTree::new(lag_slots),
        }
    }
}

/// Per-stream retention state. Share it between a stream's connections behind a mutex; every
/// per-batch method ([`on_written`](Self::on_written), [`on_write_pending`](Self::on_write_pending),
/// [`release_expired`](Self::release_expired), [`next_expiry`](Self::next_expiry)) is
/// O(log connections) plus O(log connections) per connection it cuts, and allocation-free.
///
/// ```
/// use replay_ring_sse::{Retention, RetentionConfig};
/// use replay_ring::ReplayRing;
/// use std::time::{Duration, Instant};
///
/// let config = RetentionConfig { resumption_window: Duration::from_secs(5), ..Default::default() };
/// let (mut producer, ring) = ReplayRing::<u32>::new(8, 2).unwrap();
/// let mut retention = Retention::new(config, 2);
/// let t0 = Instant::now();
///
/// let conn = retention.connect(0).unwrap();       // live from the start
/// for n in 1..=4 { producer.try_push(n).unwrap(); }
/// retention.on_written(&conn, 4, t0);             // the writer flushed ids 1..=4 at t0
///
/// assert_eq!(retention.release_expired(&ring, t0 + Duration::from_secs(4)), None);
/// assert_eq!(retention.release_expired(&ring, t0 + Duration::from_secs(5)), Some(5));
/// assert_eq!(ring.floor(), 5);
/// ```
#[derive(Debug)]
pub struct Retention {
    config: RetentionConfig,
    policy: SlowConsumerPolicy,
    /// Written-through position per connection. Grows (doubling, up to `max_connections`) when a
    /// connection finds no free entry. Changed only through [`set_entry`](Self::set_entry), which
    /// keeps `indexes` in step.
    connections: Vec<Entry>,
    /// The most connections the table takes; `connect` refuses one more.
    max_connections: usize,
    indexes: Indexes,
    /// When each written position was reached: what a release one window later may free.
    checkpoints: Checkpoints,
    /// What departed clients may still come back for (the policy's creation counts as one
    /// departure). Read only while no connection is live.
    claims: Claims,
    /// Whether a vacancy of one window releases everything (this policy sees every connection).
    release_when_vacant: bool,
    /// Whether the creation's claim ends once the window is full before any connection.
    creation_claim_until_full: bool,
    /// Whether any connection was ever made (the creation's claim is then no longer the only one
    /// that may protect anything).
    ever_connected: bool,
    stats: RetentionStats,
    /// Stamped on the ids this table issues.
    tag: TableTag,
}

impl Retention {
    /// A policy for a stream with at most `max_connections` simultaneous connections, with the
    /// default [`SlowConsumerPolicy`].
    ///
    /// ```
    /// let r = replay_ring_sse::Retention::new(Default::default(), 4);
    /// assert_eq!(r.live_connections(), 0);
    /// ```
    pub fn new(config: RetentionConfig, max_connections: usize) -> Self {
        // The table grows with the connections actually open, so a backend without a reader limit
        // (`usize::MAX`) costs what its connections use, not what it would allow.
        let initial = max_connections.min(INITIAL_CONNECTIONS);
        Retention {
            config,
            policy: SlowConsumerPolicy::default(),
            connections: vec![Entry::Free; initial],
            max_connections,
            indexes: Indexes::new(
                initial,
                SlowConsumerPolicy::default().max_lag_percent.is_some(),
            ),
            checkpoints: Checkpoints::new(config.resumption_window),
            claims: Claims::new(config.resumption_window, Instant::now()),
            release_when_vacant: true,
            creation_claim_until_full: false,
            ever_connected: false,
            stats: RetentionStats::default(),
            tag: TableTag::new(),
        }
    }

    /// Whether everything retained is released once no connection has been live for a whole
    /// resumption window (default `true`). Turn it off where this policy does not see every
    /// reader of the stream: a replica serving a stream shared through a network store, whose
    /// other replicas' clients may still read. Then, with nobody connected here, events this
    /// replica's connections did not write are never released by time (the other replicas
    /// release them).
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// let (mut p, ring) = replay_ring::ReplayRing::<u8>::new(4, 1).unwrap();
    /// let mut r = replay_ring_sse::Retention::new(Default::default(), 1).with_vacancy_release(false);
    /// p.try_push(1).unwrap();
    /// assert_eq!(r.release_expired(&ring, Instant::now() + Duration::from_secs(3600)), None);
    /// ```
    #[must_use = "the setting is on the returned Retention; the original is consumed"]
    pub fn with_vacancy_release(mut self, enabled: bool) -> Self {
        self.release_when_vacant = enabled;
        self
    }

    /// A policy whose creation claim (everything, for one window, for a client that may come for
    /// the first events) ends once the window is full while no client has connected yet, instead
    /// of holding the producer for a client that may never come. For a stream whose ids reach
    /// clients only through connections this policy sees, so that no client can come back for
    /// an event before one has connected: with vacancy release on, a full window nobody has
    /// connected to is then released at once. The MCP store's session GET streams are such
    /// streams: no client can name one before its first connection, and a session whose client
    /// never opens it must not have its notifications fill it (and then fail).
    ///
    /// ```
    /// use std::time::Instant;
    /// let (mut p, ring) = replay_ring::ReplayRing::<u8>::new(4, 1).unwrap();
    /// let mut r = replay_ring_sse::Retention::new(Default::default(), 1)
    ///     .with_creation_claim_until_full();
    /// for n in 1..=3 { p.try_push(n).unwrap(); }
    /// assert_eq!(r.release_expired(&ring, Instant::now()), None, "claimed while not full");
    /// p.try_push(4).unwrap();
    /// assert_eq!(r.release_expired(&ring, Instant::now()), Some(5));
    /// ```
    #[must_use = "the setting is on the returned Retention; the original is consumed"]
    pub fn with_creation_claim_until_full(mut self) -> Self {
        self.creation_claim_until_full = true;
        self
    }

    /// The same policy as if created at `at` (the start of the vacancy clock), for tests that
    /// drive time themselves.
    #[cfg(test)]
    pub(crate) fn opened_at(mut self, at: Instant) -> Self {
        self.claims = Claims::new(self.config.resumption_window, at);
        self
    }

    /// The settings.
    ///
    /// ```
    /// let r = replay_ring_sse::Retention::new(Default::default(), 1);
    /// assert_eq!(r.config(), &replay_ring_sse::RetentionConfig::default());
    /// ```
    pub fn config(&self) -> &RetentionConfig {
        &self.config
    }

    /// Replaces the slow-consumer policy.
    ///
    /// ```
    /// use replay_ring_sse::{Retention, SlowConsumerPolicy};
    /// let r = Retention::new(Default::default(), 1).with_slow_consumer_policy(SlowConsumerPolicy::disabled());
    /// assert_eq!(r.slow_consumer_policy(), &SlowConsumerPolicy::disabled());
    /// ```
    #[must_use = "the policy is set on the returned Retention; the original is consumed"]
    pub fn with_slow_consumer_policy(mut self, policy: SlowConsumerPolicy) -> Self {
        self.policy = policy;
        let lag_rule = policy.max_lag_percent.is_some();
        if lag_rule != self.indexes.lag_rule {
            // Rebuild every index for the new policy from the table (normally still empty here).
            self.rebuild(self.connections.len(), lag_rule);
        }
        self
    }

    /// Rebuilds the table at `len` entries (the same or more) and every index from its entries.
    /// O(len log len); only when the policy's lag rule is switched or the table grows.
    fn rebuild(&mut self, len: usize, lag_rule: bool) {
        debug_assert!(len >= self.connections.len());
        let entries = std::mem::replace(&mut self.connections, vec![Entry::Free; len]);
        self.indexes = Indexes::new(len, lag_rule);
        for (i, entry) in entries.into_iter().enumerate() {
            if !matches!(entry, Entry::Free) {
                self.set_entry(i, entry);
            }
        }
    }

    /// The slow-consumer policy in force.
    ///
    /// ```
    /// let r = replay_ring_sse::Retention::new(Default::default(), 1);
    /// assert_eq!(r.slow_consumer_policy(), &replay_ring_sse::SlowConsumerPolicy::default());
    /// ```
    pub fn slow_consumer_policy(&self) -> &SlowConsumerPolicy {
        &self.policy
    }

    /// Release counters.
    ///
    /// ```
    /// let r = replay_ring_sse::Retention::new(Default::default(), 1);
    /// assert_eq!(r.stats().ack_releases, 0);
    /// ```
    pub fn stats(&self) -> RetentionStats {
        self.stats
    }

    /// Number of live connections (registered and not cut).
    ///
    /// ```
    /// let mut r = replay_ring_sse::Retention::new(Default::default(), 1);
    /// let c = r.connect(0).unwrap();
    /// assert_eq!(r.live_connections(), 1);
    /// r.disconnect(c, std::time::Instant::now());
    /// assert_eq!(r.live_connections(), 0);
    /// ```
    pub fn live_connections(&self) -> usize {
        self.indexes.live
    }

    /// Replaces entry `i` and updates every index to match.
    fn set_entry(&mut self, i: usize, entry: Entry) {
        let was_live = matches!(self.connections[i], Entry::Live { .. });
        let was_free = matches!(self.connections[i], Entry::Free);
        let (written, since, past_grace) = match entry {
            Entry::Live {
                progress,
                past_grace,
            } => (
                Some(progress.written_through),
                progress.write_pending_since,
                // Only a pending write can be past the grace.
                past_grace && progress.write_pending_since.is_some(),
            ),
            Entry::Free | Entry::Cut(_) => (None, None, false),
        };
        let entry = match entry {
            Entry::Live { progress, .. } => Entry::Live {
                progress,
                past_grace,
            },
            other => other,
        };
        self.connections[i] = entry;
        let ix = &mut self.indexes;
        match (was_live, written.is_some()) {
            (false, true) => ix.live += 1,
            (true, false) => ix.live -= 1,
            _ => {}
        }
        let is_free = matches!(entry, Entry::Free);
        if is_free != was_free {
            ix.free.set(i, is_free.then_some(i));
        }
        ix.slowest.set(i, written);
        ix.pending.set(i, since);
        if ix.lag_rule {
            ix.fastest.set(i, written.map(Reverse));
            ix.within_grace.set(i, since.filter(|_| !past_grace));
            ix.past_grace.set(i, written.filter(|_| past_grace));
        }
    }

    /// Registers a connection whose reader starts after `written_through` (its cursor, or the
    /// head for a live subscription). `None` when the table is full.
    ///
    /// ```
    /// let mut r = replay_ring_sse::Retention::new(Default::default(), 1);
    /// let _a = r.connect(0).unwrap();
    /// assert!(r.connect(0).is_none());
    /// ```
    #[must_use = "a connection that is never disconnected holds back releases"]
    pub fn connect(&mut self, written_through: u64) -> Option<ConnectionId> {
        let len = self.connections.len();
        if self.indexes.free.min().is_none() && len < self.max_connections {
            // Full but allowed more: double (the free entries keep the smallest-index-first order
            // a fixed table of `max_connections` would have, so ids do not depend on the growth).
            let grown = len.saturating_mul(2).clamp(1, self.max_connections);
            self.rebuild(grown, self.indexes.lag_rule);
        }
        match self.indexes.free.min() {
            Some(i) => {
                self.ever_connected = true;
                let first = self.indexes.live == 0;
                self.checkpoints.on_connect(written_through, first);
                self.set_entry(
                    i,
                    Entry::live(ConsumerProgress {
                        written_through,
                        write_pending_since: None,
                    }),
                );
                Some(self.tag.issue(i))
            }
            None => {
                self.stats.connections_refused += 1;
                None
            }
        }
    }

    /// Unregisters a connection at `now`. Events it had not written but every remaining live
    /// connection had are checkpointed at `now`, unless they were checkpointed before it connected
    /// (a backlog it resumed into): the departed client gets a full window to come back for what
    /// arrived while it was connected, and the rest of their window for older events, so that no
    /// client extends how long an event is kept by leaving and resuming again. What came after the
    /// last event written to it stays one window after `now` while nobody is connected (its
    /// claim); if it was the last live connection, everything retained is releasable one window
    /// after `now` (unless a connection comes back before).
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// let (mut p, ring) = replay_ring::ReplayRing::<u8>::new(4, 2).unwrap();
    /// let mut r = replay_ring_sse::Retention::new(Default::default(), 2);
    /// let (fast, slow) = (r.connect(0).unwrap(), r.connect(0).unwrap());
    /// p.try_push(1).unwrap();
    /// let t0 = Instant::now();
    /// r.on_written(&fast, 1, t0);
    /// r.disconnect(slow, t0 + Duration::from_secs(5)); // id 1's window starts now
    /// assert_eq!(r.release_expired(&ring, t0 + Duration::from_secs(34)), None);
    /// assert_eq!(r.release_expired(&ring, t0 + Duration::from_secs(35)), Some(2));
    /// ```
    pub fn disconnect(&mut self, conn: ConnectionId, now: Instant) {
        let i = self.tag.index_of(&conn);
        let departed = match self.connections[i] {
            Entry::Live { progress, .. } => Some(progress.written_through),
            _ => None,
        };
        self.set_entry(i, Entry::Free);
        if let Some(through) = departed {
            self.claims.record(through, now);
        }
        if let Some(min) = self.live_min() {
            self.checkpoints.record(min, now);
        }
    }

    /// The slowest live connection's written-through id, if any connection is live.
    fn live_min(&self) -> Option<u64> {
        self.indexes.slowest.min()
    }

    /// Records that `conn`'s writer handed a chunk to its transport at `now` and is waiting for it
    /// to be taken; [`on_written`](Self::on_written) ends the wait. A wait longer than the policy's
    /// [`write_timeout`](SlowConsumerPolicy::write_timeout) gets the connection cut.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// let (_p, ring) = replay_ring::ReplayRing::<u8>::new(4, 1).unwrap();
    /// let mut r = replay_ring_sse::Retention::new(Default::default(), 1);
    /// let c = r.connect(0).unwrap();
    /// let t0 = Instant::now();
    /// r.on_write_pending(&c, t0);
    /// // When the policy may cut it: the lag grace (1 s; the lag rule also needs others keeping up).
    /// assert_eq!(r.next_expiry(), Some(t0 + Duration::from_secs(1)));
    /// r.release_expired(&ring, t0 + Duration::from_secs(5));
    /// assert!(r.cut_verdict(&c).is_some());
    /// ```
    pub fn on_write_pending(&mut self, conn: &ConnectionId, now: Instant) {
        let i = self.tag.index_of(conn);
        if let Entry::Live {
            mut progress,
            past_grace,
        } = self.connections[i]
        {
            if progress.write_pending_since.is_none() {
                progress.write_pending_since = Some(now);
                self.set_entry(
                    i,
                    Entry::Live {
                        progress,
                        past_grace,
                    },
                );
            }
        }
    }

    /// Why `conn` was cut by the slow-consumer policy, if it was. Its writer should then end the
    /// response (with a final error frame) instead of writing more.
    ///
    /// ```
    /// let mut r = replay_ring_sse::Retention::new(Default::default(), 1);
    /// let c = r.connect(0).unwrap();
    /// assert_eq!(r.cut_verdict(&c), None);
    /// ```
    pub fn cut_verdict(&self, conn: &ConnectionId) -> Option<Verdict> {
        match self.connections[self.tag.index_of(conn)] {
            Entry::Cut(verdict) => Some(verdict),
            _ => None,
        }
    }

    /// Applies the slow-consumer policy to every live connection at `now`: cut connections stop
    /// holding events (what the others had written is checkpointed now, as on a disconnect).
    /// Returns how many were cut. [`release_expired`](Self::release_expired) calls it first.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// let (mut p, ring) = replay_ring::ReplayRing::<u8>::new(4, 2).unwrap();
    /// let mut r = replay_ring_sse::Retention::new(Default::default(), 2);
    /// let (fast, slow) = (r.connect(0).unwrap(), r.connect(0).unwrap());
    /// for n in 1..=4 { p.try_push(n).unwrap(); }
    /// let t0 = Instant::now();
    /// r.on_write_pending(&slow, t0); // its socket has not taken its first chunk
    /// let now = t0 + Duration::from_secs(1);
    /// r.on_written(&fast, 4, now);
    /// // The window is full, `slow` is 4 events behind (limit 2) and blocked for the lag grace
    /// // (1 s), `fast` keeps up.
    /// assert_eq!(r.cut_slow_consumers(&ring, now), 1);
    /// assert_eq!(r.cut_verdict(&slow).unwrap().reason(), "lagging");
    /// assert_eq!(r.live_connections(), 1);
    /// ```
    pub fn cut_slow_consumers<T>(&mut self, ring: &ReplayRing<T>, now: Instant) -> usize {
        let floor = ring.floor();
        let window = Window {
            floor,
            head: ring.head(),
            capacity: ring.capacity(),
        };
        self.cut_slow_consumers_in(window, now)
    }

    /// [`cut_slow_consumers`](Self::cut_slow_consumers) against a window snapshot of any backend.
    pub(crate) fn cut_slow_consumers_in(&mut self, window: Window, now: Instant) -> usize {
        // Every verdict is taken against the table as it was before this look (as if all
        // connections were judged at once), so the fastest connection is read first. Without a
        // lag rule the index is empty and `others` is `None`, which only the lag rule reads.
        let fastest = self.indexes.fastest.min().map(|Reverse(id)| id);
        // The smallest lag among a connection's others, for every connection `judge` may cut:
        // the fastest's (see the lag rule below; the write-timeout rule does not read it).
        let others = fastest
            .filter(|_| self.indexes.live >= 2)
            .map(|id| window.head.saturating_sub(id));
        let mut cut = 0;
        // The lowest written-through position among the connections cut: one claim for the look.
        let mut cut_through: Option<u64> = None;
        // Write-timeout rule: the connections whose pending write waited longest, while any
        // waited the timeout. `judge` cuts each of them (the rule is checked first).
        if let Some(timeout) = self.policy.write_timeout {
            while let Some(i) = self
                .indexes
                .pending
                .find(|since| now.saturating_duration_since(since) >= timeout)
            {
                let Some(through) = self.judge_and_cut(i, window, others, now) else {
                    debug_assert!(false, "a connection past the write timeout was kept");
                    break;
                };
                cut_through = Some(cut_through.map_or(through, |t| t.min(through)));
                cut += 1;
            }
        }
        // Lag rule: applies only with the window full and the fastest connection keeping up.
        // A candidate lags more than the limit, so it is not the fastest: the smallest lag among
        // the others is the fastest's.
        let limit = self.policy.lag_limit(window.capacity);
        if let (Some(limit), Some(fastest_lag)) = (limit, others) {
            if window.is_full() && fastest_lag <= limit {
                let grace = self.policy.lag_grace;
                while let Some(i) = self
                    .indexes
                    .within_grace
                    .find(|since| now.saturating_duration_since(since) >= grace)
                {
                    self.mark_past_grace(i, true);
                }
                while let Some(i) = self
                    .indexes
                    .past_grace
                    .find(|written| window.head.saturating_sub(written) > limit)
                {
                    if let Some(through) = self.judge_and_cut(i, window, others, now) {
                        cut_through = Some(cut_through.map_or(through, |t| t.min(through)));
                        cut += 1;
                    } else {
                        // Past the grace at a later look than this one (callers' clocks race
                        // for the lock): not blocked yet at `now`, look again next time.
                        self.mark_past_grace(i, false);
                    }
                }
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

    /// Judges live connection `i` (`others`: the smallest lag among the other live connections
    /// before this look) and cuts it if the policy says so. Returns the written-through position
    /// of a connection it cut.
    fn judge_and_cut(
        &mut self,
        i: usize,
        window: Window,
        others: Option<u64>,
        now: Instant,
    ) -> Option<u64> {
        let Entry::Live { progress, .. } = self.connections[i] else {
            return None;
        };
        let verdict = self.policy.judge(&progress, &window, others, now);
        if !verdict.is_cut() {
            return None;
        }
        self.set_entry(i, Entry::Cut(verdict));
        self.stats.slow_consumers_cut += 1;
        Some(progress.written_through)
    }

    fn mark_past_grace(&mut self, i: usize, past_grace: bool) {
        if let Entry::Live { progress, .. } = self.connections[i] {
            self.set_entry(
                i,
                Entry::Live {
                    progress,
                    past_grace,
                },
            );
        }
    }

    /// Records that `conn` has written every id `<= through` to its socket at `now`. Call once per
    /// flushed batch, not per event.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// let (mut p, ring) = replay_ring::ReplayRing::<u8>::new(4, 2).unwrap();
    /// let mut r = replay_ring_sse::Retention::new(Default::default(), 2);
    /// let (fast, slow) = (r.connect(0).unwrap(), r.connect(0).unwrap());
    /// p.try_push(1).unwrap(); p.try_push(2).unwrap();
    /// let t0 = Instant::now();
    /// r.on_written(&fast, 2, t0);
    /// r.on_written(&slow, 1, t0);
    /// // Capped at the slowest live connection: id 2 stays.
    /// assert_eq!(r.release_expired(&ring, t0 + Duration::from_secs(60)), Some(2));
    /// ```
    pub fn on_written(&mut self, conn: &ConnectionId, through: u64, now: Instant) {
        let i = self.tag.index_of(conn);
        if let Entry::Live { progress, .. } = self.connections[i] {
            self.set_entry(
                i,
                Entry::live(ConsumerProgress {
                    written_through: progress.written_through.max(through),
                    write_pending_since: None,
                }),
            );
        }
        if let Some(min) = self.live_min() {
            self.checkpoints.record(min, now);
        }
    }

    /// Releases every event written to the live connections at least one resumption window before
    /// `now` (capped at the slowest live connection), after cutting slow consumers
    /// ([`cut_slow_consumers`](Self::cut_slow_consumers)). Returns the new floor if it moved.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// let (mut p, ring) = replay_ring::ReplayRing::<u8>::new(4, 1).unwrap();
    /// let mut r = replay_ring_sse::Retention::new(Default::default(), 1);
    /// let c = r.connect(0).unwrap();
    /// p.try_push(1).unwrap();
    /// let t0 = Instant::now();
    /// r.on_written(&c, 1, t0);
    /// assert_eq!(r.release_expired(&ring, t0), None);
    /// assert_eq!(r.release_expired(&ring, t0 + Duration::from_secs(30)), Some(2));
    /// ```
    pub fn release_expired<T>(&mut self, ring: &ReplayRing<T>, now: Instant) -> Option<u64> {
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

    /// The planning half of [`release_expired`](Self::release_expired) for a backend that releases
    /// asynchronously: cuts slow consumers against `window`, then returns the id to release
    /// through, if any (the caller releases it and reports a moved floor with
    /// [`note_window_release`](Self::note_window_release)). Expired checkpoints are consumed, as
    /// if released: a failed release is retried by the next one, which reaches at least as far.
    pub(crate) fn release_target(&mut self, window: Window, now: Instant) -> Option<u64> {
        self.cut_slow_consumers_in(window, now);
        if self.creation_claim_until_full && !self.ever_connected && window.is_full() {
            // Only the creation's claim can be live: nobody has left yet.
            self.claims.clear();
        }
        self.checkpoints.flush_pending(now);
        match self.live_min() {
            None if self.release_when_vacant => {
                vacant_release_target(&mut self.checkpoints, &mut self.claims, window.head, now)
            }
            Some(cap) if self.release_when_vacant => live_release_target(
                &mut self.checkpoints,
                &mut self.claims,
                cap,
                window.head,
                now,
            ),
            cap => self.checkpoints.take_expired(now, cap),
        }
    }

    /// Counts a release planned by [`release_target`](Self::release_target) that moved the floor.
    #[cfg(feature = "axum")] // the asynchronous backends' only caller is the axum endpoint
    pub(crate) fn note_window_release(&mut self) {
        self.stats.window_releases += 1;
    }

    /// How far a resume acknowledging `acked` may release: `acked`, capped at the slowest live
    /// connection (the planning half of [`acknowledge`](Self::acknowledge)).
    pub(crate) fn ack_target(&self, acked: u64) -> u64 {
        self.live_min().map_or(acked, |min| min.min(acked))
    }

    /// Counts an acknowledgement release that moved the floor.
    pub(crate) fn note_ack_release(&mut self) {
        self.stats.ack_releases += 1;
    }

    /// When the oldest checkpoint expires or a pending write reaches a slow-consumer deadline
    /// ([`SlowConsumerPolicy::stall_deadline`]): when [`release_expired`](Self::release_expired)
    /// may next release something, for a producer that waits on a full window.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// let mut r = replay_ring_sse::Retention::new(Default::default(), 1);
    /// let c = r.connect(0).unwrap();
    /// assert_eq!(r.next_expiry(), None);
    /// let t0 = Instant::now();
    /// r.on_written(&c, 3, t0);
    /// assert_eq!(r.next_expiry(), Some(t0 + Duration::from_secs(30)));
    /// ```
    pub fn next_expiry(&self) -> Option<Instant> {
        let oldest = self
            .checkpoints
            .oldest()
            .map(|start| after(start, self.config.resumption_window));
        // More becomes releasable when the oldest claim ends: with nobody connected, or when the
        // live connections started above a backlog written to nobody.
        let backlog = self.indexes.live == 0 || self.checkpoints.unwritten_front() > 0;
        let vacancy = (self.release_when_vacant && backlog)
            .then(|| self.claims.next_end())
            .flatten();
        let window = match (oldest, vacancy) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        // The deadline is monotone in the pending write's start: the oldest comes due first.
        let stall = self.indexes.pending.min().and_then(|since| {
            self.policy.stall_deadline(&ConsumerProgress {
                written_through: 0,
                write_pending_since: Some(since),
            })
        });
        match (window, stall) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// A resume with `Last-Event-ID = acked` acknowledges every id `<= acked`: release them (capped
    /// at the slowest other live connection). Call after the resuming reader is registered.
    /// Returns the floor.
    ///
    /// # Errors
    /// [`ReleaseError::AheadOfHead`] when `acked` is newer than the ring's head (the client's
    /// cursor is not from this stream); nothing is released then.
    ///
    /// ```
    /// use replay_ring::{ReleaseError, ReplayRing};
    /// let (mut p, ring) = ReplayRing::<u8>::new(8, 2).unwrap();
    /// for n in 1..=5 { p.try_push(n).unwrap(); }
    /// let mut r = replay_ring_sse::Retention::new(Default::default(), 2);
    /// assert_eq!(r.acknowledge(&ring, 3), Ok(4));
    /// assert_eq!(r.acknowledge(&ring, 9), Err(ReleaseError::AheadOfHead { requested: 9, head: 5 }));
    /// ```
    pub fn acknowledge<T>(
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

/// What to release with nobody connected (the policy and its naive reference share it): the
/// ids written at least a window ago, and those written to nobody that no departed client's
/// claim covers, as far as they run from the oldest retained. With no claim and no checkpoint
/// left, everything: no client that left may still come back for any of it (each was promised
/// one window from its departure).
fn vacant_release_target(
    checkpoints: &mut Checkpoints,
    claims: &mut Claims,
    head: u64,
    now: Instant,
) -> Option<u64> {
    // Also drops the claims that ended, so `next_expiry` names the next one.
    let unclaimed = claims.unclaimed_through(now);
    checkpoints.take_vacant(now, unclaimed, head)
}

/// What to release while connections are live, where the policy sees every connection (the
/// policy and its naive reference share it): the ids written to them at least a window ago,
/// capped at the slowest (`cap`), and the backlog written to nobody below the live period's first
/// cursor that no departed client's claim covers. A client that subscribes at the head holds
/// what it is written, never the backlog before it: a visit does not hold more than nobody.
fn live_release_target(
    checkpoints: &mut Checkpoints,
    claims: &mut Claims,
    cap: u64,
    head: u64,
    now: Instant,
) -> Option<u64> {
    let expired = checkpoints.take_expired(now, Some(cap));
    // Also drops the claims that ended, so `next_expiry` names the next one.
    let free = claims
        .unclaimed_through(now)
        .map_or(head, |u| u.min(head))
        .min(cap);
    let backlog = checkpoints.unwritten_front().min(free);
    match expired {
        Some(target) => Some(target.max(backlog)),
        None => (backlog > 0).then_some(backlog),
    }
}
