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

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use replay_ring_sse::{
    BackpressureClock, Epoch, EventId, LastEventIdError, Refused, ResumeDecision, Resumed,
    Retention, RetentionConfig, StreamId, StreamIdentity, StreamState,
};
use replay_ring::{CloseReason, Producer, PushError, ReplayRing};
use rmcp::model::{RequestId, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::{
    EventStore, EventStoreError, EventStream, ServerSseMessage, SessionId,
};

use crate::metrics::{Counters, StoreMetrics};
use crate::stream::RingStream;

/// Default events retained per stream.
pub const DEFAULT_CAPACITY: usize = 1024;
/// Default simultaneous connections (readers) per stream.
pub const DEFAULT_MAX_READERS: usize = 4;
/// Default time a completed request stream stays resumable (rmcp's own cache keeps 60 s too).
pub const DEFAULT_COMPLETED_TTL: Duration = Duration::from_secs(60);
/// Default `retry:` hint sent when the server ends a connection (rmcp's default `sse_retry`).
pub const DEFAULT_RETRY: Duration = Duration::from_secs(3);
/// Shortest wait between two attempts of a backpressured push (a fallback bound; releases wake the
/// producer directly).
const MIN_BACKPRESSURE_POLL: Duration = Duration::from_millis(10);

/// Settings of a [`RingEventStore`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreConfig {
    /// Events retained per stream (rounded up to a power of two by the ring).
    pub capacity: usize,
    /// Simultaneous connections per stream (reader slots).
    pub max_readers: usize,
    /// Resumption window and backpressure bound, shared with every replay-ring SSE server.
    pub retention: RetentionConfig,
    /// How long a finished request stream stays resumable.
    pub completed_ttl: Duration,
    /// `retry:` hint on frames that end a connection on purpose. Keep it equal to rmcp's
    /// `StreamableHttpServerConfig::sse_retry`.
    pub retry: Duration,
    /// End each connection (with a `retry:` hint, SEP-1699 polling) after this many events;
    /// `None` keeps connections open until their stream completes.
    pub frames_per_connection: Option<usize>,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            capacity: DEFAULT_CAPACITY,
            max_readers: DEFAULT_MAX_READERS,
            retention: RetentionConfig::default(),
            completed_ttl: DEFAULT_COMPLETED_TTL,
            retry: DEFAULT_RETRY,
            frames_per_connection: None,
        }
    }
}

/// Why a resume was refused, with everything an explicit answer needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResumeRefusal {
    /// The SSE layer's decision (`Gap`, `Mismatch`, `InvalidCursor`, `StreamLost`, `SessionLost`,
    /// `Busy`).
    pub decision: ResumeDecision,
    /// The stream's window, when the stream exists.
    pub state: Option<StreamState>,
    /// The cursor names a stream of another session.
    pub foreign_session: bool,
}

impl std::fmt::Display for ResumeRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.foreign_session {
            f.write_str("the Last-Event-ID belongs to a stream of another session")
        } else {
            write!(f, "{}", self.decision)
        }
    }
}

impl std::error::Error for ResumeRefusal {}

/// One SSE stream: its ring, its producer, and what it is bound to.
pub(crate) struct StreamEntry {
    pub(crate) identity: StreamIdentity,
    pub(crate) ring: ReplayRing<ServerSseMessage>,
    /// `None` once the stream was closed (completed, or ended by backpressure).
    producer: tokio::sync::Mutex<Option<Producer<ServerSseMessage>>>,
    pub(crate) retention: Mutex<Retention>,
    /// The session this stream belongs to (known at creation for the GET stream, at the POST for
    /// request streams). A resume naming another session is refused.
    session: Mutex<Option<SessionId>>,
    /// The JSON-RPC request a request stream answers (for the explicit error if it breaks).
    request: Mutex<Option<RequestId>>,
    completed_at: Mutex<Option<Instant>>,
    /// Bumped to end every live connection of this stream (SEP-1699 server-side disconnect).
    disconnect: tokio::sync::watch::Sender<u64>,
    is_common: bool,
}

impl StreamEntry {
    pub(crate) fn session(&self) -> Option<SessionId> {
        self.session.lock().clone()
    }

    pub(crate) fn request(&self) -> Option<RequestId> {
        self.request.lock().clone()
    }

    pub(crate) fn disconnect_signal(&self) -> tokio::sync::watch::Receiver<u64> {
        self.disconnect.subscribe()
    }

    fn state(&self) -> StreamState {
        StreamState::of(self.identity, &self.ring)
    }
}

#[derive(Default)]
struct Streams {
    by_rmcp: HashMap<String, Arc<StreamEntry>>,
    by_name: HashMap<StreamId, Arc<StreamEntry>>,
    by_request: HashMap<(SessionId, RequestId), Arc<StreamEntry>>,
    /// Disconnects asked for before the request's stream was bound (the tool ran first).
    pending_disconnects: std::collections::HashSet<(SessionId, RequestId)>,
}

impl Streams {
    fn remove(&mut self, rmcp_id: &str) {
        if let Some(entry) = self.by_rmcp.remove(rmcp_id) {
            self.by_name.remove(&entry.identity.stream);
            if let (Some(s), Some(r)) = (entry.session(), entry.request()) {
                self.by_request.remove(&(s, r));
            }
        }
    }
}

pub(crate) struct Inner {
    pub(crate) config: StoreConfig,
    epoch: Epoch,
    next_stream: AtomicU64,
    streams: Mutex<Streams>,
    pub(crate) counters: Counters,
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
    pub fn new(config: StoreConfig) -> Self {
        Self::with_epoch(config, Epoch::generate())
    }

    /// A store with a given epoch (tests).
    pub fn with_epoch(config: StoreConfig, epoch: Epoch) -> Self {
        RingEventStore {
            inner: Arc::new(Inner {
                config,
                epoch,
                next_stream: AtomicU64::new(1),
                streams: Mutex::new(Streams::default()),
                counters: Counters::default(),
            }),
        }
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
        }
        m
    }

    /// The stream rmcp calls `rmcp_id`, created on first use.
    pub(crate) fn entry_for(&self, rmcp_id: &str) -> Result<Arc<StreamEntry>, EventStoreError> {
        let mut streams = self.inner.streams.lock();
        if let Some(entry) = streams.by_rmcp.get(rmcp_id) {
            return Ok(entry.clone());
        }
        self.sweep(&mut streams, Instant::now());
        let cfg = &self.inner.config;
        // Relaxed: a unique counter; nothing is published through it.
        let n = self.inner.next_stream.fetch_add(1, Ordering::Relaxed);
        let name = StreamId::new(&format!("s{n}")).map_err(|e| Box::new(e) as EventStoreError)?;
        let (producer, ring) = ReplayRing::<ServerSseMessage>::builder()
            .capacity(cfg.capacity)
            .max_readers(cfg.max_readers)
            .build()
            .map_err(|e| Box::new(e) as EventStoreError)?;
        let (is_common, session) = match rmcp_id.strip_suffix(":common") {
            Some(session) => (true, Some(SessionId::from(session))),
            None => (false, None),
        };
        let entry = Arc::new(StreamEntry {
            identity: StreamIdentity::new(name, self.inner.epoch),
            ring,
            producer: tokio::sync::Mutex::new(Some(producer)),
            retention: Mutex::new(Retention::new(cfg.retention, cfg.max_readers)),
            session: Mutex::new(session),
            request: Mutex::new(None),
            completed_at: Mutex::new(None),
            disconnect: tokio::sync::watch::channel(0).0,
            is_common,
        });
        streams.by_rmcp.insert(rmcp_id.to_owned(), entry.clone());
        streams.by_name.insert(name, entry.clone());
        self.inner.counters.streams_created.inc();
        Ok(entry)
    }

    /// Drops finished request streams whose resumption time is over.
    fn sweep(&self, streams: &mut Streams, now: Instant) {
        let ttl = self.inner.config.completed_ttl;
        let expired: Vec<String> = streams
            .by_rmcp
            .iter()
            .filter(|(_, e)| {
                e.completed_at
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

    /// Looks a wire id's stream up by name.
    pub(crate) fn entry_by_event_id(&self, id: &EventId) -> Option<Arc<StreamEntry>> {
        self.inner.streams.lock().by_name.get(&id.stream).cloned()
    }

    /// Binds a request stream (found by one of its ids) to its session and JSON-RPC request.
    /// Returns whether a disconnect was already asked for (the connection should end as soon as
    /// it has caught up).
    pub(crate) fn bind(
        &self,
        entry: &Arc<StreamEntry>,
        session: &SessionId,
        request: Option<RequestId>,
    ) -> bool {
        *entry.session.lock() = Some(session.clone());
        let Some(r) = request else {
            return false;
        };
        *entry.request.lock() = Some(r.clone());
        let key = (session.clone(), r);
        let mut streams = self.inner.streams.lock();
        let pending = streams.pending_disconnects.remove(&key);
        streams.by_request.insert(key, entry.clone());
        pending
    }

    /// Housekeeping for a timer (the demo server runs it every second): releases events whose
    /// resumption window expired on every stream, and forgets completed streams past their TTL.
    /// Returns how many streams had events released.
    pub fn maintain(&self) -> usize {
        let now = Instant::now();
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
            if let Some(entry) = streams.by_rmcp.get(&k) {
                // Live readers of a deleted session end with an explicit "session closed" event
                // instead of idling. A push in progress holds the lock; it finishes on its own.
                if let Ok(mut producer) = entry.producer.try_lock() {
                    if let Some(p) = producer.take() {
                        p.close(CloseReason::error("session closed"));
                    }
                }
            }
            streams.remove(&k);
        }
        streams.pending_disconnects.retain(|(s, _)| &**s != session);
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

    /// Checks a `Last-Event-ID` against the stream it names and the session it must belong to,
    /// without opening a reader (the tower layer's check before rmcp sees the request).
    pub fn check_resume(
        &self,
        session: Option<&str>,
        last_event_id: &[u8],
    ) -> Result<StreamState, ResumeRefusal> {
        let (entry, _) = self.locate(session, last_event_id)?;
        let state = entry.state();
        match replay_ring_sse::decide(Some(&state), Some(last_event_id)) {
            d if d.is_accepted() => Ok(state),
            decision => Err(self.refused(ResumeRefusal {
                decision,
                state: Some(state),
                foreign_session: false,
            })),
        }
    }

    /// Parses the cursor, finds its stream, and checks the session binding.
    fn locate(
        &self,
        session: Option<&str>,
        last_event_id: &[u8],
    ) -> Result<(Arc<StreamEntry>, EventId), ResumeRefusal> {
        let refuse = |decision, state, foreign_session| {
            self.refused(ResumeRefusal {
                decision,
                state,
                foreign_session,
            })
        };
        let id = EventId::parse_bytes(last_event_id)
            .map_err(|e| refuse(ResumeDecision::InvalidCursor(e), None, false))?;
        if id.epoch != self.inner.epoch {
            let err = LastEventIdError::UnknownEpoch {
                stream: id.stream,
                got: id.epoch,
                current: self.inner.epoch,
            };
            return Err(refuse(ResumeDecision::StreamLost(err), None, false));
        }
        let Some(entry) = self.entry_by_event_id(&id) else {
            let err = LastEventIdError::UnknownStream { stream: id.stream };
            return Err(refuse(ResumeDecision::StreamLost(err), None, false));
        };
        // The window is enforced lazily: whatever expired is released before the decision.
        entry
            .retention
            .lock()
            .release_expired(&entry.ring, Instant::now());
        if let Some(session) = session {
            if entry.session().as_deref() != Some(session) {
                let err = LastEventIdError::UnknownStream { stream: id.stream };
                return Err(refuse(ResumeDecision::StreamLost(err), None, true));
            }
        }
        Ok((entry, id))
    }

    fn refused(&self, r: ResumeRefusal) -> ResumeRefusal {
        let c = &self.inner.counters;
        if r.foreign_session {
            c.resumes_foreign_session.inc();
        } else {
            match r.decision {
                ResumeDecision::Gap { .. } => c.resumes_below_floor.inc(),
                ResumeDecision::Mismatch { .. } => c.resumes_ahead_of_head.inc(),
                ResumeDecision::InvalidCursor(_) => c.resumes_malformed.inc(),
                ResumeDecision::StreamLost(_) => c.resumes_stream_lost.inc(),
                ResumeDecision::SessionLost => c.resumes_session_lost.inc(),
                _ => c.resumes_busy.inc(),
            }
        }
        r
    }

    /// Opens a stream that replays everything after `last_event_id` and then tails live events
    /// until the stream completes. `session` (when given) must own the stream.
    pub fn resume_stream(
        &self,
        session: Option<&str>,
        last_event_id: &[u8],
    ) -> Result<RingStream, ResumeRefusal> {
        let (entry, _) = self.locate(session, last_event_id)?;
        let resumed = replay_ring_sse::resume(&entry.ring, &entry.identity, Some(last_event_id))
            .map_err(|Refused { decision, state }| {
            self.refused(ResumeRefusal {
                decision,
                state,
                foreign_session: false,
            })
        })?;
        self.inner.counters.resumes_ok.inc();
        Ok(self.open(entry, resumed))
    }

    /// A stream for a new connection that starts right after `after` (no acknowledgement).
    pub(crate) fn live_stream(
        &self,
        entry: Arc<StreamEntry>,
        after: u64,
    ) -> Result<RingStream, ResumeRefusal> {
        let reader = entry.ring.resume(Some(after)).map_err(|e| {
            self.refused(ResumeRefusal {
                decision: e.into(),
                state: Some(entry.state()),
                foreign_session: false,
            })
        })?;
        Ok(RingStream::new(entry, reader, None, self.inner.clone()))
    }

    fn open(&self, entry: Arc<StreamEntry>, resumed: Resumed<ServerSseMessage>) -> RingStream {
        let Resumed {
            reader,
            acknowledged,
            ..
        } = resumed;
        RingStream::new(entry, reader, acknowledged, self.inner.clone())
    }

    /// Pushes one event, waiting (bounded) for space; the stream is closed with an explicit
    /// reason when the bound is reached. Never drops an event.
    async fn push(
        &self,
        entry: &StreamEntry,
        event: &ServerSseMessage,
    ) -> Result<u64, EventStoreError> {
        let counters = &self.inner.counters;
        let mut guard = entry.producer.lock().await;
        let Some(producer) = guard.as_mut() else {
            let reason = entry
                .ring
                .close_reason()
                .map_or_else(|| "closed".to_owned(), |r| r.to_string());
            return Err(format!("stream {} is closed: {reason}", entry.identity.stream).into());
        };
        let final_message = !entry.is_common
            && matches!(
                event.message.as_deref(),
                Some(ServerJsonRpcMessage::Response(_) | ServerJsonRpcMessage::Error(_))
            );
        let mut clock = BackpressureClock::new(self.inner.config.retention.backpressure_timeout);
        let identity = entry.identity;
        loop {
            let now = Instant::now();
            entry.retention.lock().release_expired(&entry.ring, now);
            let pushed = producer.try_push_with(|seq| {
                let mut m = event.clone();
                m.event_id = Some(identity.event_id(seq).to_string());
                m
            });
            match pushed {
                Ok(seq) => {
                    counters.events_stored.inc();
                    if event.message.is_none() {
                        counters.priming_stored.inc();
                    }
                    if final_message {
                        if let Some(p) = guard.take() {
                            p.close(CloseReason::Completed);
                        }
                        *entry.completed_at.lock() = Some(now);
                        counters.streams_completed.inc();
                    }
                    return Ok(seq);
                }
                Err(PushError::Full(_)) => {
                    if clock.waiting_since().is_none() {
                        counters.backpressure_waits.inc();
                    }
                    match clock.on_full(now) {
                        Ok(deadline) => {
                            let expiry = entry.retention.lock().next_expiry();
                            let wake = expiry.map_or(deadline, |e| e.min(deadline));
                            let wake = wake.max(now + MIN_BACKPRESSURE_POLL);
                            tokio::select! {
                                () = producer.ready() => {}
                                () = tokio::time::sleep_until(wake.into()) => {}
                            }
                        }
                        Err(reason) => {
                            counters.backpressure_timeouts.inc();
                            let message = format!(
                                "stream {} closed: {reason} with {} events unacknowledged; nothing was dropped",
                                identity.stream,
                                entry.ring.capacity()
                            );
                            if let Some(p) = guard.take() {
                                p.close(reason);
                            }
                            return Err(message.into());
                        }
                    }
                }
                Err(PushError::IdsExhausted(_)) => {
                    if let Some(p) = guard.take() {
                        p.close(CloseReason::error("event ids exhausted"));
                    }
                    return Err("event ids exhausted".into());
                }
                // `PushError` is non-exhaustive: end the stream explicitly on a refusal this
                // version does not know, as for exhausted ids.
                Err(other) => {
                    let message = other.to_string();
                    if let Some(p) = guard.take() {
                        p.close(CloseReason::error(message.as_str()));
                    }
                    return Err(message.into());
                }
            }
        }
    }
}

#[async_trait::async_trait]
impl EventStore for RingEventStore {
    async fn store_event(
        &self,
        stream_id: &str,
        event: &ServerSseMessage,
    ) -> Result<String, EventStoreError> {
        let entry = self.entry_for(stream_id)?;
        let seq = self.push(&entry, event).await?;
        Ok(entry.identity.event_id(seq).to_string())
    }

    /// Used by rmcp only for session-less (2026-07-28 stateless) GETs; session-bound resumes go
    /// through [`ReplayRingSessionManager`](crate::ReplayRingSessionManager), which also checks
    /// the session.
    async fn replay_events_after(
        &self,
        last_event_id: &str,
    ) -> Result<EventStream, EventStoreError> {
        let stream = self.resume_stream(None, last_event_id.as_bytes())?;
        Ok(Box::pin(stream))
    }
}
