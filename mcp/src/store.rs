//! [`RingEventStore`]: rmcp's [`EventStore`] on replay-ring, one ring per SSE stream.
//!
//! Ids are the SSE layer's wire format `<stream>.<epoch>.<seq>` ([`replay_ring_sse::EventId`]):
//! rmcp's own stream names (a UUID per request, `<session>:common` for the GET stream) are too long
//! for the grammar, so each stream gets a short name `s<n>` and the store keeps the mapping.
//! `store_event` returns only after the event is in the ring (the ring assigns the id and commits
//! the payload in one push), so an id a client has seen is always replayable until it is released.

// A refusal is built once per rejected request (a cold path) and is plain data; boxing it would
// only add an allocation (the SSE layer makes the same call for `Refused`).
#![allow(clippy::result_large_err)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use parking_lot::Mutex;
use replay_ring::{CloseReason, ReplayRing};
use replay_ring_sse::{
    Epoch, EventId, PublishError, Publisher, Retention, RetentionConfig, StreamId, StreamIdentity,
};
use rmcp::model::{RequestId, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::{
    EventStore, EventStoreError, EventStream, ServerSseMessage, SessionId,
};

use crate::config::StoreConfig;
#[cfg(feature = "redis")]
use crate::gate::Gate;
use crate::metrics::{Counters, StoreMetrics};
#[cfg(feature = "redis")]
use crate::redis_log::{Lease, LogWriter, RedisEventLog};
use crate::registry::Streams;
#[cfg(feature = "redis")]
use crate::remote_readers::RemoteReaders;
use crate::stream_entry::{EntryParts, StreamEntry, Writer};

mod binding;
mod resume;

/// How often a backpressured push re-reads its deadline while it waits (a client that leaves
/// shortens it).
const ATTENDANCE_RECHECK: Duration = Duration::from_millis(250);

/// The least age at which an unbound request stream counts as an orphan, once no POST that
/// started before it was created is under way (a POST binds its stream after the priming event,
/// which on a loaded machine can take any time: `binding.rs`). It is kept short because ending an
/// orphan also ends the wait of a POST that raced its session's `DELETE`.
const ORPHAN_GRACE: Duration = Duration::from_millis(100);

/// The age at which an unbound request stream is an orphan even while an older POST is under way.
/// A POST binds its stream a few awaits after the priming event (rmcp's session worker, one Redis
/// round trip); one that takes longer than this is stuck, and must not keep every other session's
/// orphans (their rings, their Redis streams) for as long as it stays stuck.
const BIND_WAIT_LIMIT: Duration = Duration::from_secs(30);

/// Why the streams of a deleted (or expired) MCP session end.
fn session_closed() -> CloseReason {
    CloseReason::error("session closed")
}

/// Why a request's stream ends when another request of its session takes its id while it runs.
fn reused_request_id() -> CloseReason {
    CloseReason::error(
        "another request of this session was sent with this request's id while it was running; \
         the id's response goes to that request",
    )
}

/// The caps on request streams that [`RingEventStore::reserve_request_stream`] holds to.
#[derive(Clone, Copy, Debug)]
pub(crate) struct StreamCaps {
    /// Per MCP session.
    pub(crate) per_session: usize,
    /// In the whole store, across its sessions.
    pub(crate) total: usize,
}

/// Which of the [`StreamCaps`] refused a request stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StreamCap {
    /// [`StreamCaps::per_session`].
    Session,
    /// [`StreamCaps::total`].
    Server,
}

/// A request stream of a session counted under the caps before the stream exists: taken over by
/// [`RingEventStore::bind`], or given back when dropped (the request failed before its stream).
pub(crate) struct StreamSlot {
    store: RingEventStore,
    session: SessionId,
    taken: bool,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        if !self.taken {
            let mut streams = self.store.inner.streams.lock();
            streams.count_request_stream(&self.session, false);
        }
    }
}

pub(crate) struct Inner {
    pub(crate) config: StoreConfig,
    epoch: Epoch,
    next_stream: AtomicU64,
    streams: Mutex<Streams>,
    /// POSTs whose request stream may exist but is not bound yet.
    pub(crate) binds: binding::BindsInFlight,
    pub(crate) counters: Counters,
    /// Where every stream's events are also written, when the store runs on Redis.
    #[cfg(feature = "redis")]
    pub(crate) log: Option<RedisEventLog>,
    /// Connections served from Redis, per stream (they count against `max_readers` as a ring's
    /// readers do).
    #[cfg(feature = "redis")]
    pub(crate) remote_readers: Arc<RemoteReaders>,
}

/// rmcp [`EventStore`] backed by one [`ReplayRing`] per stream. Cheap to clone (an `Arc`).
///
/// Use it through [`ReplayRingSessionManager`](crate::ReplayRingSessionManager), which binds
/// streams to sessions and serves every SSE connection from the ring; rmcp's own
/// `LocalSessionManager::with_event_store` alone would replay without a session check and would
/// not tail live events after a resume.
#[derive(Clone)]
pub struct RingEventStore {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for RingEventStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RingEventStore")
            .field("config", &self.inner.config)
            .field("epoch", &self.inner.epoch)
            .finish_non_exhaustive()
    }
}

impl Default for RingEventStore {
    fn default() -> Self {
        Self::new(StoreConfig::default())
    }
}

impl RingEventStore {
    /// A store with a fresh random epoch (ids from before a restart are recognised as lost).
    ///
    /// # Panics
    /// If `config` fails [`StoreConfig::check`] (a zero or too large capacity, zero or too many
    /// readers): no stream could be built, and every request would fail. Call `check` first
    /// where the settings come from outside.
    pub fn new(config: StoreConfig) -> Self {
        Self::with_epoch(config, Epoch::generate())
    }

    /// A store with a given epoch (tests).
    ///
    /// # Panics
    /// As [`new`](Self::new).
    pub fn with_epoch(config: StoreConfig, epoch: Epoch) -> Self {
        if let Err(e) = config.check() {
            panic!("invalid StoreConfig: {e}");
        }
        RingEventStore {
            inner: Arc::new(Inner {
                config,
                epoch,
                next_stream: AtomicU64::new(1),
                streams: Mutex::new(Streams::default()),
                binds: Default::default(),
                counters: Counters::default(),
                #[cfg(feature = "redis")]
                log: None,
                #[cfg(feature = "redis")]
                remote_readers: Default::default(),
            }),
        }
    }

    /// A store whose streams also keep their events in Redis (`log`), so that a client's resume
    /// can be served by any replica ([`remote_resume`](Self::remote_resume)), with a fresh random
    /// epoch. Each event is in Redis before any connection sends it; when Redis refuses or cannot
    /// be reached the stream ends with an explicit error instead. Called inside a tokio runtime,
    /// it starts a task that runs [`maintain_event_log`](Self::maintain_event_log) every third
    /// of the lease until the store is dropped.
    ///
    /// ```no_run
    /// use replay_ring_mcp::{RedisEventLog, RingEventStore, StoreConfig};
    ///
    /// # async fn run() -> Result<(), replay_ring_redis::Error> {
    /// let log = RedisEventLog::connect("redis://127.0.0.1:6379/", Default::default()).await?;
    /// let store = RingEventStore::with_redis(StoreConfig::default(), log);
    /// # Ok(()) }
    /// ```
    ///
    /// # Panics
    /// As [`new`](Self::new).
    #[cfg(feature = "redis")]
    pub fn with_redis(config: StoreConfig, log: RedisEventLog) -> Self {
        Self::with_redis_epoch(config, log, Epoch::generate())
    }

    /// [`with_redis`](Self::with_redis) with a given epoch (tests). Two stores on one Redis must
    /// never share an epoch: the epoch names their Redis streams.
    ///
    /// # Panics
    /// As [`new`](Self::new).
    #[cfg(feature = "redis")]
    pub fn with_redis_epoch(config: StoreConfig, log: RedisEventLog, epoch: Epoch) -> Self {
        let mut store = Self::with_epoch(config, epoch);
        if let Some(inner) = Arc::get_mut(&mut store.inner) {
            inner.log = Some(log);
        }
        store.spawn_log_maintenance();
        store
    }

    /// The Redis event log, when the store has one.
    #[cfg(feature = "redis")]
    pub fn event_log(&self) -> Option<&RedisEventLog> {
        self.inner.log.as_ref()
    }

    /// The settings.
    pub fn config(&self) -> &StoreConfig {
        &self.inner.config
    }

    /// The epoch every id of this store carries.
    pub fn epoch(&self) -> Epoch {
        self.inner.epoch
    }

    /// Counters, plus the rings' windows summed over the live streams.
    pub fn metrics(&self) -> StoreMetrics {
        let streams = self.inner.streams.lock();
        let mut m = self.inner.counters.snapshot();
        m.streams_open = streams.by_rmcp.len() as u64;
        for entry in streams.by_rmcp.values() {
            let r = entry.ring.metrics();
            m.producer_waits += r.producer_waits;
            m.producer_full += r.producer_full;
            m.readers_active += r.readers_active as u64;
            m.retained += r.head + 1 - r.floor;
            let stats = entry.retention.lock().stats();
            m.ack_releases += stats.ack_releases;
            m.window_releases += stats.window_releases;
            m.slow_consumers_cut += stats.slow_consumers_cut;
        }
        #[cfg(feature = "redis")]
        {
            m.readers_active += self.inner.remote_readers.total() as u64;
        }
        m
    }

    /// The stream rmcp calls `rmcp_id`, created on first use (with its Redis stream when the
    /// store has an event log); `session_scoped` for a stream an MCP session creates.
    pub(crate) async fn entry_for(
        &self,
        rmcp_id: &str,
        session_scoped: bool,
    ) -> Result<Arc<StreamEntry>, EventStoreError> {
        {
            let mut streams = self.inner.streams.lock();
            if let Some(entry) = streams.by_rmcp.get(rmcp_id) {
                return Ok(entry.clone());
            }
            self.sweep(&mut streams, Instant::now());
        }
        let (entry, writer) = self.build(rmcp_id, session_scoped)?;
        #[cfg(feature = "redis")]
        let entry = self.attach_log(entry, writer).await?;
        #[cfg(not(feature = "redis"))]
        let entry = Self::finish(entry, writer);
        let existing = {
            let mut streams = self.inner.streams.lock();
            let existing = streams.by_rmcp.get(rmcp_id).cloned();
            if existing.is_none() {
                streams.by_rmcp.insert(rmcp_id.to_owned(), entry.clone());
                streams.by_name.insert(entry.identity.stream, entry.clone());
                self.inner.counters.streams_created.inc();
            }
            existing
        };
        match existing {
            // Created concurrently (the GET stream by two requests at once): keep the first.
            Some(existing) => {
                #[cfg(feature = "redis")]
                Self::discard(&entry).await;
                Ok(existing)
            }
            None => Ok(entry),
        }
    }

    fn finish(entry: EntryParts, writer: Writer) -> Arc<StreamEntry> {
        Arc::new(entry.with_writer(writer, None))
    }

    /// Creates the Redis stream of a new stream, takes its producer lease, and records the MCP
    /// session of a session's GET stream.
    #[cfg(feature = "redis")]
    async fn attach_log(
        &self,
        entry: EntryParts,
        mut writer: Writer,
    ) -> Result<Arc<StreamEntry>, EventStoreError> {
        let Some(log) = self.inner.log.clone() else {
            return Ok(Self::finish(entry, writer));
        };
        let capacity = entry.ring.capacity();
        let (stream, producer) = log
            .create(self.inner.epoch, &entry.identity.stream, capacity)
            .await?;
        if let Some(session) = &entry.session {
            log.set_owner(&stream, session, None).await?;
        }
        let gate = Gate::new();
        let lease = Lease::default();
        let log_stream = stream.clone();
        writer.log = Some(LogWriter::new(
            log,
            stream,
            producer,
            gate.clone(),
            lease.clone(),
        ));
        let mut entry = entry.with_writer(writer, Some(gate));
        entry.lease = lease;
        entry.log_stream = Some(log_stream);
        Ok(Arc::new(entry))
    }

    /// Deletes the Redis stream (and session owner key) of a stream that lost a creation race:
    /// nobody writes or reads it. Best effort: what a failure leaves expires with the stream TTL.
    #[cfg(feature = "redis")]
    async fn discard(entry: &StreamEntry) {
        let writer = entry.writer.lock().await;
        if let Some(log) = &writer.log {
            let _ = log.log().clear_owner(log.stream()).await;
            let _ = log.stream().delete().await;
        }
    }

    /// Builds a stream's ring and publisher (not yet registered).
    fn build(
        &self,
        rmcp_id: &str,
        session_scoped: bool,
    ) -> Result<(EntryParts, Writer), EventStoreError> {
        let cfg = &self.inner.config;
        // Relaxed: a unique counter; nothing is published through it.
        let n = self.inner.next_stream.fetch_add(1, Ordering::Relaxed);
        let name = StreamId::new(&format!("s{n}")).map_err(|e| Box::new(e) as EventStoreError)?;
        let (producer, ring) = ReplayRing::<ServerSseMessage>::builder()
            .capacity(cfg.capacity)
            .initial_slots(cfg.initial_slots)
            .max_readers(cfg.max_readers)
            .build()
            .map_err(|e| Box::new(e) as EventStoreError)?;
        // The publisher's own bound is the longest `push` allows (a client connected, see
        // `StreamEntry::backpressure_deadline`); `push` applies the shorter ones itself.
        let longest = RetentionConfig {
            backpressure_timeout: cfg
                .retention
                .backpressure_timeout
                .saturating_add(cfg.retention.resumption_window),
            ..cfg.retention
        };
        let publisher = Publisher::new(producer, longest);
        let (is_common, session) = match rmcp_id.strip_suffix(":common") {
            Some(session) => (true, Some(SessionId::from(session))),
            None => (false, None),
        };
        // The publisher's retention is new and empty: give it this store's slow-consumer policy.
        // With a Redis event log, a request stream's table also has room for the connections
        // other replicas serve it to (`remote_progress.rs`), so that they never take a place a
        // connection here needs.
        #[cfg(feature = "redis")]
        let remote = if self.inner.log.is_some() && !is_common {
            cfg.max_readers
        } else {
            0
        };
        #[cfg(not(feature = "redis"))]
        let remote = 0;
        let retention = Retention::new(cfg.retention, ring.max_readers().saturating_add(remote))
            .with_slow_consumer_policy(cfg.slow_consumer);
        // Release by vacancy only on the session's GET stream, whose ids reach a client only
        // through a connection (a request stream's may reach one on rmcp's own channel, its
        // stateless streams). No client can name the stream before it has connected once, so a
        // window that fills before anyone connected is released rather than waited on: the
        // notifications of a session whose client never opens the GET stream never hold up or
        // fail the calls that send them. With a Redis log this holds too, at a price: a
        // connection that another replica serves from Redis is not seen here, so a window after
        // the last one here left, what it has not read yet may be released under it (it then
        // ends with an explicit gap).
        *publisher.retention().lock() = if is_common {
            retention
                .with_vacancy_release(true)
                .with_creation_claim_until_full()
        } else {
            retention.with_vacancy_release(false)
        };
        let parts = EntryParts {
            identity: StreamIdentity::new(name, self.inner.epoch),
            retention: publisher.retention().clone(),
            ring,
            session,
            is_common,
            // A stream named for a session is that session's, whoever stores into it.
            session_scoped: session_scoped || is_common,
        };
        let writer = Writer {
            publisher,
            #[cfg(feature = "redis")]
            log: None,
        };
        Ok((parts, writer))
    }

    /// Forgets streams that ended (completed or closed) `completed_ttl` ago, and ends and forgets
    /// orphans: request streams a session's worker created whose POST never bound them (the POST
    /// was cancelled, or its session was deleted, between the priming event and the binding),
    /// `completed_ttl` after their creation but no sooner than [`ORPHAN_GRACE`] (a tenth of a
    /// second), and only once every POST that started before the stream was created has bound
    /// its stream or gone, or [`BIND_WAIT_LIMIT`] after their creation in any case. No request
    /// can ever resume an orphan (it belongs to no session).
    fn sweep(&self, streams: &mut Streams, now: Instant) {
        let ttl = self.inner.config.completed_ttl;
        let orphan_age = ttl.max(ORPHAN_GRACE);
        // A stream created after the oldest POST under way started may be that POST's.
        let oldest_binding = self.inner.binds.oldest();
        let orphans: Vec<String> = streams
            .by_rmcp
            .iter()
            .filter(|(_, e)| {
                let age = now.saturating_duration_since(e.created_at);
                e.session_scoped
                    && e.session().is_none()
                    && age >= orphan_age
                    && (oldest_binding.is_none_or(|started| started > e.created_at)
                        || age >= BIND_WAIT_LIMIT)
            })
            .map(|(k, _)| k.clone())
            .collect();
        for k in orphans {
            Self::end_and_forget(streams, &k);
            self.inner.counters.streams_expired.inc();
        }
        let expired: Vec<String> = streams
            .by_rmcp
            .iter()
            .filter(|(_, e)| {
                e.closed_at
                    .lock()
                    .is_some_and(|at| now.saturating_duration_since(at) >= ttl)
            })
            .map(|(k, _)| k.clone())
            .collect();
        for k in expired {
            streams.remove(&k);
            self.inner.counters.streams_expired.inc();
        }
    }

    /// Every stream in the store.
    #[cfg(feature = "redis")]
    pub(crate) fn entries(&self) -> Vec<Arc<StreamEntry>> {
        self.inner
            .streams
            .lock()
            .by_rmcp
            .values()
            .cloned()
            .collect()
    }

    /// Looks a wire id's stream up by name.
    pub(crate) fn entry_by_event_id(&self, id: &EventId) -> Option<Arc<StreamEntry>> {
        self.inner.streams.lock().by_name.get(&id.stream).cloned()
    }

    /// Binds a request stream (found by one of its ids) to its session and JSON-RPC request,
    /// which takes over `slot` (the stream's place under the session's cap). Returns the
    /// stream's disconnect count as its first connection must take it: a disconnect asked for
    /// before the bind is counted here, so [`StreamEntry::disconnected_since`] tells the
    /// connection, opened after a few awaits, that it should end as soon as it has caught up,
    /// whether the disconnect came before the bind or during those awaits.
    pub(crate) fn bind(
        &self,
        entry: &Arc<StreamEntry>,
        session: &SessionId,
        request: Option<RequestId>,
        slot: Option<StreamSlot>,
    ) -> u64 {
        let mut streams = self.inner.streams.lock();
        *entry.session.lock() = Some(session.clone());
        // Read under the lock `disconnect_request_stream` counts under.
        let seen = *entry.disconnect.borrow();
        let Some(r) = request else {
            return seen;
        };
        // Counted from here until `Streams::remove`, if it is still held (a stream swept in the
        // meantime is never removed again: its slot is given back instead).
        let held = streams
            .by_name
            .get(&entry.identity.stream)
            .is_some_and(|e| Arc::ptr_eq(e, entry));
        if held {
            *entry.request.lock() = Some(r.clone());
            match slot {
                Some(mut slot) => slot.taken = true,
                None => streams.count_request_stream(session, true),
            }
        }
        let key = (session.clone(), r);
        if streams.pending_disconnects.remove(&key) {
            entry.disconnect.send_modify(|g| *g += 1);
        }
        if streams.take_pending_cancel(&key, Instant::now()) {
            Self::end_cancelled(entry.clone());
        }
        if held {
            if let Some(replaced) = streams.by_request.insert(key, entry.clone()) {
                if !Arc::ptr_eq(&replaced, entry) && replaced.closed_at.lock().is_none() {
                    // A request with the id of one still running (a client bug: JSON-RPC ids are
                    // unique among requests in flight). rmcp routes that id's response to the new
                    // request now, so the running one would wait for it for good: it ends here
                    // with an explicit error instead.
                    let reason = reused_request_id();
                    #[cfg(feature = "redis")]
                    Self::close_log_later(replaced.clone(), reason.clone());
                    Self::close_when_free(replaced, reason);
                }
            }
        }
        seen
    }

    /// A place for one more request stream of `session`, if it holds fewer than `caps.per_session`
    /// and the store fewer than `caps.total` (open, or ended less than `completed_ttl` ago: those
    /// past it are swept first), counted at once so that concurrent requests cannot all pass. At
    /// a cap, `Err` with the cap and how long until there is room under it at the earliest: until
    /// the first ended request stream it counts is past `completed_ttl`, or, with every such
    /// stream still open, `completed_ttl` (a stream leaves the count that long after it ends).
    pub(crate) fn reserve_request_stream(
        &self,
        session: &SessionId,
        caps: StreamCaps,
    ) -> Result<StreamSlot, (StreamCap, Duration)> {
        let mut streams = self.inner.streams.lock();
        let full = |streams: &Streams| {
            let held = streams.per_session.get(session).copied().unwrap_or(0);
            if held >= caps.per_session {
                Some(StreamCap::Session)
            } else if streams.request_streams >= caps.total {
                Some(StreamCap::Server)
            } else {
                None
            }
        };
        if full(&streams).is_some() {
            // Without the store's housekeeping timer, a refusal must not last for good.
            let now = Instant::now();
            self.sweep(&mut streams, now);
            if let Some(cap) = full(&streams) {
                let within = match cap {
                    StreamCap::Session => Some(session),
                    StreamCap::Server => None,
                };
                return Err((cap, self.room_after(&streams, within, now)));
            }
        }
        streams.count_request_stream(session, true);
        Ok(StreamSlot {
            store: self.clone(),
            session: session.clone(),
            taken: false,
        })
    }

    /// How long until one of the counted streams (of `session`, or of every session) leaves
    /// the count at the earliest.
    fn room_after(&self, streams: &Streams, session: Option<&SessionId>, now: Instant) -> Duration {
        let ttl = self.inner.config.completed_ttl;
        streams
            .by_rmcp
            .values()
            // Counted streams only: bound request streams (a session's GET stream may have ended
            // too, but it never counted).
            .filter(|e| e.request().is_some())
            .filter(|e| session.is_none_or(|s| e.session().as_ref() == Some(s)))
            .filter_map(|e| *e.closed_at.lock())
            .map(|at| ttl.saturating_sub(now.saturating_duration_since(at)))
            .min()
            .unwrap_or(ttl)
    }

    /// Ends the stream answering `request` in `session` because the client cancelled the request
    /// (MCP `notifications/cancelled`): no response will come, so the stream is closed as
    /// complete. Its connections end once they have sent what was stored, a resume at its last id
    /// is answered 410 `stream_complete`, and it is forgotten `completed_ttl` later.
    pub fn cancel_request(&self, session: &str, request: &RequestId) {
        let key = (SessionId::from(session), request.clone());
        let mut streams = self.inner.streams.lock();
        match streams.by_request.get(&key) {
            Some(entry) => Self::end_cancelled(entry.clone()),
            None => streams.add_pending_cancel(key, Instant::now()),
        }
    }

    /// Closes a cancelled request's stream as complete, in a task: a push in progress (waiting
    /// for room) holds the writer until it is done.
    fn end_cancelled(entry: Arc<StreamEntry>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            let mut writer = entry.writer.lock().await;
            let _ = writer.publisher.close(CloseReason::Completed).await;
            entry.mark_closed();
            #[cfg(feature = "redis")]
            if let Some(log) = writer.log.as_mut() {
                let _ = log.close(CloseReason::Completed).await;
            }
        });
    }

    /// Housekeeping for a timer (the demo server runs it every second): releases events whose
    /// resumption window expired on every stream, and forgets completed streams past their TTL.
    /// Returns how many streams had events released.
    pub fn maintain(&self) -> usize {
        self.maintain_at(Instant::now())
    }

    /// [`maintain`](Self::maintain) as of `now` (tests pass a later instant to age streams).
    pub(crate) fn maintain_at(&self, now: Instant) -> usize {
        let entries: Vec<Arc<StreamEntry>> = {
            let mut streams = self.inner.streams.lock();
            self.sweep(&mut streams, now);
            streams.by_rmcp.values().cloned().collect()
        };
        entries
            .iter()
            .filter(|e| e.retention.lock().release_expired(&e.ring, now).is_some())
            .count()
    }

    /// Forgets every stream of a session (DELETE, or the session expired).
    pub fn drop_session(&self, session: &str) {
        let mut streams = self.inner.streams.lock();
        let gone: Vec<String> = streams
            .by_rmcp
            .iter()
            .filter(|(_, e)| e.session().as_deref() == Some(session))
            .map(|(k, _)| k.clone())
            .collect();
        for k in gone {
            Self::end_and_forget(&mut streams, &k);
        }
        streams.forget_pending(session);
    }

    /// Closes a stream whose session is gone and forgets it.
    fn end_and_forget(streams: &mut Streams, rmcp_id: &str) {
        if let Some(entry) = streams.by_rmcp.get(rmcp_id) {
            // Live connections of a deleted session end explicitly instead of idling (a request
            // stream with a JSON-RPC error, the GET stream with a retry hint whose reconnect gets
            // 404).
            entry.forgotten.send_replace(true);
            match entry.writer.try_lock() {
                // The ring records a close at once: the future is ready on its first poll.
                Ok(mut writer) => {
                    let _ = writer.publisher.close(session_closed()).now_or_never();
                }
                // A push in progress holds the writer: one waiting for room ends the stream
                // itself (`forgotten`); one past its wait does not, so close once it is done.
                Err(_) => Self::close_when_free(entry.clone(), session_closed()),
            }
            #[cfg(feature = "redis")]
            Self::close_log_later(entry.clone(), session_closed());
        }
        streams.remove(rmcp_id);
    }

    /// Closes a stream's ring with `reason` in a task, once a push in progress has let go of its
    /// writer (a no-op if that push closed it).
    fn close_when_free(entry: Arc<StreamEntry>, reason: CloseReason) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            let mut writer = entry.writer.lock().await;
            let _ = writer.publisher.close(reason).await;
            entry.mark_closed();
        });
    }

    /// Ends the live connections of the stream answering `request` in `session` (they get a
    /// `retry:` hint and a clean end; the stream itself goes on and stays resumable). This is the
    /// SEP-1699 "server closes the connection, client polls" mechanism. Each connection ends
    /// once it has sent what is available. A disconnect asked for before the POST's stream is
    /// bound (a fast tool) applies to that stream's first connection.
    pub fn disconnect_request_stream(&self, session: &str, request: &RequestId) {
        let key = (SessionId::from(session), request.clone());
        let mut streams = self.inner.streams.lock();
        match streams.by_request.get(&key) {
            Some(e) => e.disconnect.send_modify(|g| *g += 1),
            None => {
                streams.pending_disconnects.insert(key);
            }
        }
    }

    /// Pushes one event through the stream's [`Publisher`], which waits (bounded) for space and
    /// closes the stream with an explicit reason when the bound is reached. Never drops an event.
    ///
    /// The bound counts from [`StreamEntry::waiting_since`], which can be earlier than this call:
    /// the publisher is given that much less time, and the stream is closed the same way when it
    /// runs out.
    async fn push(
        &self,
        entry: &StreamEntry,
        event: &ServerSseMessage,
    ) -> Result<u64, EventStoreError> {
        let counters = &self.inner.counters;
        let mut writer = entry.writer.lock().await;
        let writer = &mut *writer;
        let publisher = &mut writer.publisher;
        let final_message = !entry.is_common
            && matches!(
                event.message.as_deref(),
                Some(ServerJsonRpcMessage::Response(_) | ServerJsonRpcMessage::Error(_))
            );
        let identity = entry.identity;
        let make = |seq| {
            let mut m = event.clone();
            m.event_id = Some(identity.event_id(seq).to_string());
            m
        };
        let retention = &self.inner.config.retention;
        let since = entry.waiting_since(Instant::now());
        if entry.is_full() {
            counters.backpressure_waits.inc();
        }
        // `publish_with` is polled before the deadline is checked, so an event with room is
        // always stored; a cancelled publish appends nothing, so the wait can be restarted to
        // re-read the deadline, which moves when the stream's client connects or leaves.
        let mut forgotten = entry.forgotten.subscribe();
        let published = loop {
            let deadline = entry.backpressure_deadline(since, retention);
            let recheck = Instant::now() + ATTENDANCE_RECHECK;
            let attempt = tokio::select! {
                biased;
                attempt = tokio::time::timeout_at(
                    deadline.min(recheck).into(),
                    publisher.publish_with(&make),
                ) => Some(attempt),
                _ = forgotten.wait_for(|gone| *gone) => None,
            };
            match attempt {
                Some(Ok(published)) => break Ok(published),
                Some(Err(elapsed)) if Instant::now() >= deadline => break Err(elapsed),
                Some(Err(_)) => {}
                // The session was deleted while this push waited for room: nobody may read the
                // stream again, so it ends now (its live connections with it), not at the bound.
                None => {
                    let reason = session_closed();
                    let _ = publisher.close(reason.clone()).await;
                    break Ok(Err(PublishError::Closed(Some(reason))));
                }
            }
        };
        let result = match published {
            Ok(Ok(seq)) => {
                #[cfg(feature = "redis")]
                if let Some(log) = writer.log.as_mut() {
                    // No connection sends `seq` before Redis has it (the gate); if Redis fails,
                    // the stream ends here, explicitly, after the last durable event.
                    if let Err(e) = log.append(seq, event, entry.ring.floor()).await {
                        counters.event_log_failures.inc();
                        // Readers on other replicas end too: with the reason if Redis still takes
                        // the close (a refusal such as OOM), else when the lease lapses (the
                        // producer is dropped either way, so nothing renews it).
                        let _ = log.close(CloseReason::error(e.clone())).await;
                        // An append whose reply was lost (Redis slower than the response
                        // timeout) may be in Redis, from the append or the close's resend: what
                        // Redis holds of it is sent here too, as other replicas replay it.
                        log.confirm_stored(seq).await;
                        log.fail(&e);
                        let _ = publisher.close(CloseReason::error(e.clone())).await;
                        entry.mark_closed();
                        return Err(EventStoreError::from(format!(
                            "stream {} closed: {e}",
                            identity.stream
                        )));
                    }
                }
                *entry.full_since.lock() = entry.is_full().then_some(Instant::now());
                counters.events_stored.inc();
                if event.message.is_none() {
                    counters.priming_stored.inc();
                }
                if final_message {
                    let _ = publisher.close(CloseReason::Completed).await;
                    counters.streams_completed.inc();
                }
                Ok(seq)
            }
            Ok(Err(PublishError::Closed(reason))) => {
                let reason = reason.map_or_else(|| "closed".to_owned(), |r| r.to_string());
                Err(format!("stream {} is closed: {reason}", identity.stream))
            }
            Ok(Err(e @ PublishError::BackpressureTimeout { .. })) => {
                counters.backpressure_timeouts.inc();
                Err(Self::backpressure_message(entry, &e))
            }
            Ok(Err(e)) => Err(format!("stream {}: {e}", identity.stream)),
            Err(_elapsed) => {
                let waited = since.elapsed();
                let _ = publisher
                    .close(CloseReason::BackpressureTimeout { waited })
                    .await;
                counters.backpressure_timeouts.inc();
                let e = PublishError::BackpressureTimeout { waited };
                Err(Self::backpressure_message(entry, &e))
            }
        };
        if publisher.is_closed() {
            entry.mark_closed();
            #[cfg(feature = "redis")]
            if let (Some(log), Some(reason)) = (writer.log.as_mut(), entry.ring.close_reason()) {
                // Readers on other replicas get every event, then the same end. If Redis cannot
                // record it, they end when the producer lease lapses (see `remote_resume`).
                let _ = log.close(reason).await;
            }
        }
        result.map_err(EventStoreError::from)
    }

    fn backpressure_message(entry: &StreamEntry, e: &PublishError) -> String {
        format!(
            "stream {} closed: {e}; {} events unacknowledged, nothing was dropped",
            entry.identity.stream,
            entry.ring.capacity()
        )
    }
}

impl RingEventStore {
    /// `store_event` for a stream created `session_scoped` (by an MCP session) or not.
    pub(crate) async fn store_event_as(
        &self,
        stream_id: &str,
        event: &ServerSseMessage,
        session_scoped: bool,
    ) -> Result<String, EventStoreError> {
        let entry = self.entry_for(stream_id, session_scoped).await?;
        let seq = self.push(&entry, event).await?;
        Ok(entry.identity.event_id(seq).to_string())
    }
}

#[async_trait::async_trait]
impl EventStore for RingEventStore {
    /// Commits `event` to the ring of `stream_id` (created on first use) and returns its wire id.
    /// Waits while the window is full, at most the backpressure bound.
    ///
    /// # Errors
    ///
    /// The stream is closed (completed, closed by backpressure, or its MCP session was deleted),
    /// or the wait reached the bound (the stream is then closed, nothing dropped).
    ///
    /// # Cancel safety
    ///
    /// Cancelling never stores half an event or consumes an id: a cancelled call either stored
    /// the event (its id is lost to the caller, the event stays replayable) or stored nothing.
    /// With a Redis event log, a call cancelled while Redis is appending leaves the outcome to the
    /// next event: the producer resends the unconfirmed append first, so ids stay aligned, and if
    /// they cannot (Redis never received it) the next event ends the stream with an explicit
    /// error. Until then the event is not sent to any connection.
    async fn store_event(
        &self,
        stream_id: &str,
        event: &ServerSseMessage,
    ) -> Result<String, EventStoreError> {
        // Called directly by rmcp only on its stateless path; a session's worker stores through
        // the session manager's view of the store, which scopes its streams to the session.
        self.store_event_as(stream_id, event, false).await
    }

    /// Used by rmcp only for session-less (2026-07-28 stateless) GETs; session-bound resumes go
    /// through [`ReplayRingSessionManager`](crate::ReplayRingSessionManager), which also checks
    /// the session.
    ///
    /// # Errors
    ///
    /// The [`ResumeRefusal`](crate::ResumeRefusal) of [`resume_stream`](RingEventStore::resume_stream).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is awaited; a dropped stream unregisters its reader.
    async fn replay_events_after(
        &self,
        last_event_id: &str,
    ) -> Result<EventStream, EventStoreError> {
        let stream = self.resume_stream(None, last_event_id.as_bytes())?;
        Ok(Box::pin(stream))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DEFAULT_COMPLETED_TTL;

    #[tokio::test]
    async fn an_ended_get_stream_is_not_taken_for_room_under_the_stream_cap() {
        let store = RingEventStore::new(StoreConfig::default());
        let session = SessionId::from("s");
        // The session's GET stream, ended (a backpressure timeout, a failed event log) while
        // the session lives on: it never counted, so its end frees nothing.
        store
            .entry_for("s:common", true)
            .await
            .unwrap()
            .mark_closed();
        let one_per_session = StreamCaps {
            per_session: 1,
            total: usize::MAX,
        };
        let _open = store
            .reserve_request_stream(&session, one_per_session)
            .ok()
            .unwrap();
        let wait = store
            .reserve_request_stream(&session, one_per_session)
            .err()
            .unwrap();
        assert_eq!(
            wait,
            (StreamCap::Session, DEFAULT_COMPLETED_TTL),
            "the one counted stream is still open"
        );
        // The same stream, under a server-wide cap of one: another session has no room either.
        let one_in_all = StreamCaps {
            per_session: usize::MAX,
            total: 1,
        };
        let wait = store
            .reserve_request_stream(&SessionId::from("t"), one_in_all)
            .err()
            .unwrap();
        assert_eq!(wait, (StreamCap::Server, DEFAULT_COMPLETED_TTL));
    }
}
