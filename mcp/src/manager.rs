//! [`ReplayRingSessionManager`]: rmcp's `LocalSessionManager` with every SSE connection served
//! from the store's rings.
//!
//! rmcp 3.11 in event-store mode stores each event, then also writes it to the connection's own
//! channel; a resumed connection gets only `replay_events_after` (no live tail), and the resume is
//! not checked against the session. This wrapper keeps rmcp's session worker (routing, ids via the
//! store) but answers every POST stream, standalone GET and resume from a ring reader: replay and
//! live events come from one place, so there is no replay/live gap and no duplicate, and the
//! retention policy sees what each connection was sent.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{self, BoxStream};
use futures::{Stream, StreamExt};
use replay_ring_sse::{EventId, ResumeDecision};
use rmcp::model::{ClientJsonRpcMessage, ClientNotification, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError,
};
use rmcp::transport::streamable_http_server::session::{
    EventStore, EventStoreError, EventStream, RestoreOutcome, ServerSseMessage, SessionId,
    SessionManager,
};
use sync_wrapper::SyncWrapper;
use tokio::sync::watch;

use crate::refusal::{RefusalReason, ResumeRefusal};
use crate::store::{RingEventStore, StreamCap, StreamCaps};
use crate::stream::broken_frame;
use crate::stream_entry::StreamEntry;

/// Errors of [`ReplayRingSessionManager`].
#[derive(Debug)]
#[non_exhaustive]
pub enum ManagerError {
    /// From rmcp's `LocalSessionManager`.
    Local(LocalSessionManagerError),
    /// A request stream started without a priming event: set
    /// `StreamableHttpServerConfig::sse_retry` (and the manager's `session_config.sse_retry`).
    NoPrimingEvent,
    /// The store refused to open a connection.
    Refused(ResumeRefusal),
    /// The store failed.
    Store(String),
    /// The session holds its most request streams already (open, or ended within
    /// `completed_ttl`); see [`ReplayRingSessionManager::with_max_streams_per_session`].
    TooManyStreams {
        /// The cap.
        limit: usize,
        /// How long until the session has room at the earliest: until its first ended request
        /// stream is past `completed_ttl`, or `completed_ttl` while every stream is still open.
        retry_after: Duration,
    },
    /// The server holds its most request streams, across all sessions (open, or ended within
    /// `completed_ttl`); see [`ReplayRingSessionManager::with_max_streams`].
    TooManyServerStreams {
        /// The cap.
        limit: usize,
        /// How long until the server has room at the earliest: until its first ended request
        /// stream is past `completed_ttl`, or `completed_ttl` while every stream is still open.
        retry_after: Duration,
    },
    /// Every session the cap allows is open (see
    /// [`ReplayRingSessionManager::with_max_sessions`]).
    TooManySessions {
        /// The cap.
        limit: usize,
    },
}

/// The start of [`ManagerError::TooManySessions`]'s text, which rmcp passes on in its 500 and
/// the guard answers as 503 `too_many_sessions`.
pub(crate) const TOO_MANY_SESSIONS: &str = "too many MCP sessions";

/// The start of [`ManagerError::TooManyStreams`]'s text, which rmcp passes on in its 500 and the
/// guard answers as 503 `too_many_streams`.
pub(crate) const TOO_MANY_STREAMS: &str = "too many request streams in this MCP session";

/// The start of [`ManagerError::TooManyServerStreams`]'s text, which rmcp passes on in its 500
/// and the guard answers as 503 `too_many_streams`.
pub(crate) const TOO_MANY_SERVER_STREAMS: &str = "too many request streams on this server";

/// Precedes the whole seconds of the `retry_after` of [`ManagerError::TooManyStreams`] and
/// [`ManagerError::TooManyServerStreams`] in their text,
/// where the guard reads them for the 503's `Retry-After`.
pub(crate) const RETRY_AFTER_MARK: &str = "; retry after ";

/// `d` in whole seconds, rounded up, at least 1: a `Retry-After` that is never early.
pub(crate) fn retry_after_secs(d: Duration) -> u64 {
    // Saturating: a `completed_ttl` of `Duration::MAX` ("keep them all") is a setting, not a bug.
    d.as_secs()
        .saturating_add(u64::from(d.subsec_nanos() > 0))
        .max(1)
}

impl std::fmt::Display for ManagerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ManagerError::Local(e) => write!(f, "{e}"),
            ManagerError::NoPrimingEvent => f.write_str(
                "request stream has no priming event; configure sse_retry so every stream starts with an id",
            ),
            ManagerError::Refused(r) => write!(f, "{r}"),
            ManagerError::Store(e) => f.write_str(e),
            ManagerError::TooManyStreams { limit, retry_after } => write!(
                f,
                "{TOO_MANY_STREAMS}: it holds {limit} (open, or ended within the completed-stream TTL){RETRY_AFTER_MARK}{} s",
                retry_after_secs(*retry_after)
            ),
            ManagerError::TooManyServerStreams { limit, retry_after } => write!(
                f,
                "{TOO_MANY_SERVER_STREAMS}: it holds {limit}, across its MCP sessions (open, or ended within the completed-stream TTL){RETRY_AFTER_MARK}{} s",
                retry_after_secs(*retry_after)
            ),
            ManagerError::TooManySessions { limit } => {
                write!(f, "{TOO_MANY_SESSIONS}: all {limit} are open")
            }
        }
    }
}

impl std::error::Error for ManagerError {}

impl From<LocalSessionManagerError> for ManagerError {
    fn from(e: LocalSessionManagerError) -> Self {
        ManagerError::Local(e)
    }
}

/// The SSE message stream a [`ReplayRingSessionManager`] hands to rmcp for each connection: boxed,
/// and `Sync` as rmcp requires.
pub struct ManagerStream(SyncWrapper<BoxStream<'static, ServerSseMessage>>);

impl std::fmt::Debug for ManagerStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ManagerStream")
    }
}

impl ManagerStream {
    fn new(s: impl Stream<Item = ServerSseMessage> + Send + 'static) -> Self {
        ManagerStream(SyncWrapper::new(s.boxed()))
    }
}

impl Stream for ManagerStream {
    type Item = ServerSseMessage;
    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<ServerSseMessage>> {
        self.0.get_mut().as_mut().poll_next(cx)
    }
}

/// rmcp's [`LocalSessionManager`] with replay-ring behind every SSE connection.
///
/// ```
/// use std::sync::Arc;
/// use replay_ring_mcp::{ReplayRingSessionManager, RingEventStore, StoreConfig};
/// use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
///
/// let store = RingEventStore::new(StoreConfig::default());
/// let manager = Arc::new(ReplayRingSessionManager::new(store, LocalSessionManager::default()));
/// ```
#[derive(Debug)]
pub struct ReplayRingSessionManager {
    inner: LocalSessionManager,
    store: RingEventStore,
    max_sessions: usize,
    max_streams_per_session: usize,
    max_streams: usize,
    /// Held from the count of open sessions to the new one's creation, so concurrent `initialize`
    /// requests cannot all pass the cap (sessions are created rarely; this costs nothing else).
    creating: tokio::sync::Mutex<()>,
    /// One entry per open session, dropped when it closes (`close_session`, which every way a
    /// session ends goes through): a call waiting on the session's worker watches it
    /// (`unless_closed`).
    open: parking_lot::Mutex<HashMap<SessionId, watch::Sender<()>>>,
}

/// Default [`ReplayRingSessionManager::with_max_sessions`]: 10,000 sessions at once.
pub const DEFAULT_MAX_SESSIONS: usize = 10_000;
/// Default [`ReplayRingSessionManager::with_max_streams_per_session`]: 1,024 request streams.
pub const DEFAULT_MAX_STREAMS_PER_SESSION: usize = 1024;
/// Default [`ReplayRingSessionManager::with_max_streams`]: 65,536 request streams across all
/// sessions.
pub const DEFAULT_MAX_STREAMS: usize = 65_536;

impl ReplayRingSessionManager {
    /// Wraps `local` (its `session_config` is kept) and installs `store` as its event store.
    pub fn new(store: RingEventStore, local: LocalSessionManager) -> Self {
        let inner = local.with_event_store(Arc::new(SessionEvents(store.clone())));
        ReplayRingSessionManager {
            inner,
            store,
            max_sessions: DEFAULT_MAX_SESSIONS,
            max_streams_per_session: DEFAULT_MAX_STREAMS_PER_SESSION,
            max_streams: DEFAULT_MAX_STREAMS,
            creating: tokio::sync::Mutex::new(()),
            open: parking_lot::Mutex::new(HashMap::new()),
        }
    }

    /// At most `max` request streams per MCP session (default
    /// [`DEFAULT_MAX_STREAMS_PER_SESSION`]), counting those open and those ended less than
    /// `completed_ttl` ago, which still retain their events: a request that would open one more
    /// is answered 503 `too_many_streams` (by [`ResumeGuardLayer`](crate::ResumeGuardLayer)) and
    /// never reaches the session; its `Retry-After` is when the session has room again at the
    /// earliest (see [`ManagerError::TooManyStreams`]). Without a
    /// cap, one session that keeps starting long calls and never reads them holds up to
    /// `capacity` events for every one of them. Notifications and responses open no stream and
    /// are never refused.
    ///
    /// ```
    /// use replay_ring_mcp::{ReplayRingSessionManager, RingEventStore, StoreConfig};
    /// use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    ///
    /// let store = RingEventStore::new(StoreConfig::default());
    /// let manager = ReplayRingSessionManager::new(store, LocalSessionManager::default())
    ///     .with_max_streams_per_session(64);
    /// assert_eq!(manager.max_streams_per_session(), 64);
    /// ```
    ///
    /// # Panics
    ///
    /// If `max` is 0: no request could ever be answered.
    #[must_use]
    pub fn with_max_streams_per_session(mut self, max: usize) -> Self {
        assert!(
            max > 0,
            "max_streams_per_session must be at least 1: with 0 no request could be answered"
        );
        self.max_streams_per_session = max;
        self
    }

    /// The cap on request streams per session.
    pub fn max_streams_per_session(&self) -> usize {
        self.max_streams_per_session
    }

    /// At most `max` request streams across all sessions (default [`DEFAULT_MAX_STREAMS`]),
    /// counted as [`with_max_streams_per_session`](Self::with_max_streams_per_session) counts
    /// them: the bound on what the store's streams retain in all, at most `max` times
    /// `capacity` events. A request that would open one more is answered 503 `too_many_streams`
    /// (by [`ResumeGuardLayer`](crate::ResumeGuardLayer)) and never reaches its session; its
    /// `Retry-After` is when the server has room again at the earliest (see
    /// [`ManagerError::TooManyServerStreams`]). The per-session cap bounds one session; this one
    /// bounds a client that opens many sessions, or many clients together. Since an ended
    /// stream counts for `completed_ttl`, it also bounds the server's sustained rate of
    /// requests: at the defaults, 65,536 per 60 s, about 1,090 a second.
    ///
    /// ```
    /// use replay_ring_mcp::{ReplayRingSessionManager, RingEventStore, StoreConfig};
    /// use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    ///
    /// let store = RingEventStore::new(StoreConfig::default());
    /// let manager = ReplayRingSessionManager::new(store, LocalSessionManager::default())
    ///     .with_max_streams(4_096);
    /// assert_eq!(manager.max_streams(), 4_096);
    /// ```
    ///
    /// # Panics
    ///
    /// If `max` is 0: no request could ever be answered.
    #[must_use]
    pub fn with_max_streams(mut self, max: usize) -> Self {
        assert!(
            max > 0,
            "max_streams must be at least 1: with 0 no request could be answered"
        );
        self.max_streams = max;
        self
    }

    /// The cap on request streams across all sessions.
    pub fn max_streams(&self) -> usize {
        self.max_streams
    }

    /// At most `max` MCP sessions at once (default [`DEFAULT_MAX_SESSIONS`]): with that many
    /// open, [`ResumeGuardLayer`](crate::ResumeGuardLayer) answers a request that would open
    /// another with 503 `too_many_sessions` and `Retry-After`. rmcp closes a session after its
    /// `keep_alive` without activity (300 s by default), so without a cap a client opening
    /// sessions in a loop holds memory for every one of them until then.
    ///
    /// # Panics
    ///
    /// If `max` is 0: no session could ever open.
    #[must_use]
    pub fn with_max_sessions(mut self, max: usize) -> Self {
        assert!(
            max > 0,
            "max_sessions must be at least 1: with 0 no session could open"
        );
        self.max_sessions = max;
        self
    }

    /// The session cap.
    pub fn max_sessions(&self) -> usize {
        self.max_sessions
    }

    /// MCP sessions open right now.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: it only reads the session table (under rmcp's read lock) and changes nothing.
    pub async fn session_count(&self) -> usize {
        self.inner.sessions.read().await.len()
    }

    /// The store.
    pub fn store(&self) -> &RingEventStore {
        &self.store
    }

    /// The wrapped rmcp manager.
    pub fn local(&self) -> &LocalSessionManager {
        &self.inner
    }

    /// Runs `call`, which waits for session `id`'s worker to answer, unless the session is
    /// closed first: then it is `SessionNotFound`, as if it had been closed before.
    ///
    /// rmcp's session handle sends its worker a request that carries a reply channel, and waits
    /// for the reply. A worker that quits (a `DELETE`, an idle timeout) just as the request is
    /// sent can leave the request in its closed queue, neither answered nor dropped while the
    /// handle lives: tokio's mpsc keeps a value sent through a permit taken before the receiver
    /// was dropped (tokio-rs/tokio#7714). The call would then wait forever, and with it the
    /// client's request. Every way a session ends goes through
    /// [`close_session`](SessionManager::close_session), which drops the session's entry in
    /// `open`: the call is abandoned then. Dropping it is safe: the handle it held goes with it,
    /// and the stuck request with the last handle.
    ///
    /// The entry is this session's, taken before the call starts: a session restored later
    /// under the same id (rmcp's session store) has its own, and does not keep this call waiting.
    async fn unless_closed<T>(
        &self,
        id: &SessionId,
        call: impl std::future::Future<Output = Result<T, ManagerError>>,
    ) -> Result<T, ManagerError> {
        let gone = || ManagerError::from(LocalSessionManagerError::SessionNotFound(id.clone()));
        // No entry: the session was closed (rmcp had removed it before), or never opened.
        let Some(mut open) = self.open.lock().get(id).map(watch::Sender::subscribe) else {
            return Err(gone());
        };
        tokio::select! {
            // The call first: one that is ready is not refused for a close that came after it.
            biased;
            answered = call => answered,
            // Nothing is ever sent: `changed` returns only once the entry was dropped.
            _ = open.changed() => Err(gone()),
        }
    }

    /// A second connection to a session's GET stream while one follows it live: keep-alives only,
    /// so a message is never delivered twice (rmcp's "shadow" streams do the same). Once the live
    /// one leaves, it ends with a `retry:` hint: its client reconnects and takes over, instead of
    /// holding a stream that never carries anything. A shadow opened by a resume starts with its
    /// cursor (see [`cursor_priming`](Self::cursor_priming)), so that reconnect names it.
    fn shadow(&self, entry: Arc<StreamEntry>, cursor: Option<&str>) -> ManagerStream {
        let retry = self.store.config().retry;
        let priming = cursor.map(|c| self.cursor_priming(c));
        let vacated = stream::once(async move {
            entry.vacated().await;
            ServerSseMessage::retry(retry)
        });
        ManagerStream::new(stream::iter(priming).chain(vacated))
    }

    /// The first event of a resumed connection: the client's own cursor, with empty data and the
    /// `retry:` hint. Clients dispatch nothing for it, but it sets the connection's last event id
    /// before any replayed event arrives. The TypeScript SDK tracks that id per connection and
    /// does not start it from the cursor it resumed with, so a resumed connection cut before its
    /// first complete event would otherwise reconnect with no `Last-Event-ID` at all, and the
    /// request's remaining messages would never reach it.
    fn cursor_priming(&self, cursor: &str) -> ServerSseMessage {
        ServerSseMessage::priming(cursor, self.store.config().retry)
    }

    /// The explicit answer when a resume that passed the tower check is refused after all (the
    /// window moved in between): the cursor's priming event, then a JSON-RPC error for the
    /// stream's request when it has one, else a `retry:` hint that ends the connection, so the
    /// client's reconnect, which the priming event makes name the cursor, gets the explicit HTTP
    /// status from [`ResumeGuardLayer`](crate::ResumeGuardLayer). Never an empty stream.
    ///
    /// Every reader slot taken is not final: the connection ends with the cursor and a `retry:`
    /// hint, and the client resumes from the same place once a slot is free. (An error response
    /// would end the request, whose result may still arrive on another connection.)
    fn refusal_stream(&self, last_event_id: &str, refusal: &ResumeRefusal) -> ManagerStream {
        let cursor = EventId::parse(last_event_id).ok();
        // Only a cursor that parsed is echoed (the guard refuses the others before rmcp).
        let priming = cursor.as_ref().map(|_| self.cursor_priming(last_event_id));
        if matches!(
            refusal.reason,
            RefusalReason::Decision(ResumeDecision::Busy { .. })
        ) {
            if let Some(priming) = priming {
                return ManagerStream::new(stream::iter([priming]));
            }
        }
        let request = cursor
            .and_then(|id| self.store.entry_by_event_id(&id))
            .and_then(|entry| entry.request());
        let data = serde_json::json!({
            "error": refusal.code(),
            "floor": refusal.state.map(|s| s.floor),
            "head": refusal.state.map(|s| s.head),
        });
        let retry = self.store.config().retry;
        let frame = broken_frame(request, refusal.to_string(), data, retry);
        ManagerStream::new(stream::iter(priming).chain(stream::iter([frame])))
    }
}

/// Session bookkeeping is rmcp's `LocalSessionManager`'s; every SSE connection comes from a ring.
///
/// # Cancel safety
///
/// As `LocalSessionManager`'s methods: each awaits one round trip to the MCP session's worker. A
/// stream handed out and then dropped unregisters its reader, and the client's next resume is
/// answered from the ring as usual.
impl SessionManager for ReplayRingSessionManager {
    type Error = ManagerError;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    /// Creates a session unless the cap is reached. [`ResumeGuardLayer`](crate::ResumeGuardLayer)
    /// also refuses a request at the cap before rmcp reads its body; this check is the one that
    /// holds when many `initialize` requests arrive together (each passes the early check while its
    /// body is still on the way).
    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let _one_at_a_time = self.creating.lock().await;
        if self.session_count().await >= self.max_sessions {
            return Err(ManagerError::TooManySessions {
                limit: self.max_sessions,
            });
        }
        let (id, transport) = self.inner.create_session().await?;
        self.open.lock().insert(id.clone(), watch::Sender::new(()));
        Ok((id, transport))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        // Answered by the worker, like `create_stream`: not waited for past a close.
        let answer = async { Ok(self.inner.initialize_session(id, message).await?) };
        self.unless_closed(id, answer).await
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        Ok(self.inner.has_session(id).await?)
    }

    /// Forgets the session's streams (their live connections end: request streams with a JSON-RPC
    /// error, the GET stream with a `retry:` hint), then closes the session in rmcp.
    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        self.store.drop_session(id);
        let closed = self.inner.close_session(id).await;
        // Again once the session is gone: a GET stream created while it was closing was missed
        // by the first pass (`create_standalone_stream` checks for the session after creating
        // its stream, which covers one created after this).
        self.store.drop_session(id);
        // After rmcp removed it: a call waiting on its worker is abandoned.
        self.open.lock().remove(id);
        Ok(closed?)
    }

    /// The POST's stream: rmcp routes the request and stores the priming event; the connection
    /// is then served from the ring, bound to the session and the JSON-RPC request.
    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let request = match &message {
            ClientJsonRpcMessage::Request(r) => Some(r.id.clone()),
            _ => None,
        };
        // Refused before rmcp routes it: the request never reaches the session.
        let caps = StreamCaps {
            per_session: self.max_streams_per_session,
            total: self.max_streams,
        };
        let slot = match request {
            Some(_) => Some(self.store.reserve_request_stream(id, caps).map_err(
                |(cap, retry_after)| match cap {
                    StreamCap::Session => ManagerError::TooManyStreams {
                        limit: caps.per_session,
                        retry_after,
                    },
                    StreamCap::Server => ManagerError::TooManyServerStreams {
                        limit: caps.total,
                        retry_after,
                    },
                },
            )?),
            None => None,
        };
        // Until the stream is bound below, it belongs to no session: this keeps the sweep from
        // taking it for an orphan, however long the awaits in between take.
        let binding = self.store.start_binding();
        let local = async { Ok(self.inner.create_stream(id, message).await?) };
        let mut local = Box::pin(self.unless_closed(id, local).await?);
        // rmcp stores the priming event before it routes the request, so it is already queued.
        let priming = local.next().await.ok_or(ManagerError::NoPrimingEvent)?;
        // From here the ring serves the connection: dropping rmcp's receiver makes its own
        // channel sends fail fast (they are only a copy of what the store already holds).
        drop(local);
        let wire = priming
            .event_id
            .as_deref()
            .ok_or(ManagerError::NoPrimingEvent)?;
        let event_id = EventId::parse(wire).map_err(|e| ManagerError::Store(e.to_string()))?;
        let entry = self
            .store
            .entry_by_event_id(&event_id)
            .ok_or_else(|| ManagerError::Store(format!("stream of {wire} is not in the store")))?;
        let disconnects = self.store.bind(&entry, id, request, slot);
        // Bound: the stream belongs to the session now, so it is no orphan whatever follows.
        drop(binding);
        // Closed while the stream was being created (a `DELETE` racing this request):
        // `close_session` looked for the session's streams before this one was bound to it, so
        // nothing else would ever end or forget it.
        if !self.inner.has_session(id).await? {
            self.store.drop_session(id);
            return Err(LocalSessionManagerError::SessionNotFound(id.clone()).into());
        }
        // With a Redis event log: record the owner, so that another replica can check a resume
        // of this stream against its MCP session.
        #[cfg(feature = "redis")]
        self.store.record_owner(&entry).await;
        let mut live = self
            .store
            .live_stream(entry.clone(), event_id.seq - 1)
            .map_err(ManagerError::Refused)?;
        // Checked after the connection took the signal's count: a disconnect asked for before the
        // bind, or during the awaits since, is seen here; one asked for later, by the signal.
        if entry.disconnected_since(disconnects) {
            live.end_when_caught_up();
        }
        Ok(ManagerStream::new(live))
    }

    /// Passes the message to the session; a `notifications/cancelled` also ends the cancelled
    /// request's stream (no response will come for it), which rmcp's worker would otherwise hold
    /// open until the session ends.
    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        let cancelled = match &message {
            ClientJsonRpcMessage::Notification(n) => match &n.notification {
                ClientNotification::CancelledNotification(c) => c.params.request_id.clone(),
                _ => None,
            },
            _ => None,
        };
        self.inner.accept_message(id, message).await?;
        if let Some(request) = cancelled {
            self.store.cancel_request(id, &request);
        }
        Ok(())
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        if !self.inner.has_session(id).await? {
            return Err(LocalSessionManagerError::SessionNotFound(id.clone()).into());
        }
        let entry = self
            .store
            .entry_for(&format!("{id}:common"), true)
            .await
            .map_err(|e| ManagerError::Store(e.to_string()))?;
        // Closed while the stream was being created (with a Redis event log that takes round
        // trips): `close_session` may have looked for its streams before this one existed.
        if !self.inner.has_session(id).await? {
            self.store.drop_session(id);
            return Err(LocalSessionManagerError::SessionNotFound(id.clone()).into());
        }
        if entry.retention.lock().live_connections() > 0 {
            return Ok(self.shadow(entry, None));
        }
        let head = entry.ring.head();
        let priming = ServerSseMessage::priming(
            entry.identity.event_id(head).to_string(),
            self.store.config().retry,
        );
        let live = self
            .store
            .live_stream(entry, head)
            .map_err(ManagerError::Refused)?;
        // The priming id is the head, so a client that drops before any event resumes from here
        // instead of reconnecting without a cursor and missing what came in between.
        Ok(ManagerStream::new(stream::iter([priming]).chain(live)))
    }

    /// A resume bound to the session: the cursor as a priming event, the replay after
    /// `last_event_id`, then live events. A refusal here (the window moved after
    /// [`ResumeGuardLayer`](crate::ResumeGuardLayer)'s check) is still explicit, never an empty
    /// stream.
    ///
    /// A resume of the session's GET stream while another connection follows it live is a
    /// shadow too (as in rmcp): the messages go to one connection only, and once that one leaves,
    /// the shadow's `retry:` hint brings its client back with its `Last-Event-ID`, to the replay.
    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let followed_get_stream = EventId::parse(&last_event_id)
            .ok()
            .and_then(|cursor| self.store.entry_by_event_id(&cursor))
            .filter(|entry| {
                entry.is_common
                    && entry.session().as_deref() == Some(&**id)
                    && entry.retention.lock().live_connections() > 0
            });
        if let Some(entry) = followed_get_stream {
            return Ok(self.shadow(entry, Some(&last_event_id)));
        }
        match self.store.resume_stream(Some(id), last_event_id.as_bytes()) {
            Ok(s) => Ok(ManagerStream::new(
                stream::iter([self.cursor_priming(&last_event_id)]).chain(s),
            )),
            Err(refusal) => Ok(self.refusal_stream(&last_event_id, &refusal)),
        }
    }

    async fn restore_session(
        &self,
        id: SessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        let outcome = self.inner.restore_session(id.clone()).await?;
        if let RestoreOutcome::Restored(_) = &outcome {
            // A new entry: any call still waiting on the session's earlier worker watches the
            // earlier one, which its close dropped.
            self.open.lock().insert(id, watch::Sender::new(()));
        }
        Ok(outcome)
    }

    fn event_store(&self) -> Option<Arc<dyn EventStore>> {
        Some(Arc::new(self.store.clone()))
    }
}

/// The store as a session's worker sees it: every stream stored through it belongs to that
/// session (a request stream is bound to it at its POST, the GET stream by its name), so a
/// request without a session, such as rmcp's stateless replay, is refused it.
#[derive(Debug)]
struct SessionEvents(RingEventStore);

#[async_trait::async_trait]
impl EventStore for SessionEvents {
    async fn store_event(
        &self,
        stream_id: &str,
        event: &ServerSseMessage,
    ) -> Result<String, EventStoreError> {
        self.0.store_event_as(stream_id, event, true).await
    }

    /// Not reached: [`ReplayRingSessionManager::resume`] answers session resumes itself. Kept
    /// session-less, so it serves no session's stream.
    async fn replay_events_after(
        &self,
        last_event_id: &str,
    ) -> Result<EventStream, EventStoreError> {
        self.0.replay_events_after(last_event_id).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn manager() -> ReplayRingSessionManager {
        let store = RingEventStore::new(crate::StoreConfig::default());
        ReplayRingSessionManager::new(store, LocalSessionManager::default())
    }

    type Post = tokio::task::JoinHandle<Result<(), ManagerError>>;
    type Transport = <ReplayRingSessionManager as SessionManager>::Transport;

    /// A session opened as rmcp opens one, and a `ping` POSTed in it (the manager's
    /// `create_stream`, on a task) that waits for the session's worker and will never be
    /// answered. rmcp's worker can leave a request unanswered for good when it quits just as the
    /// request is sent (`unless_closed`); that race is a few instructions wide, so a worker that
    /// is never initialised stands in for it: it quits on the POST's request, keeping it (and its
    /// reply channel) in its exit status, which the returned transport holds.
    async fn a_post_the_worker_never_answers(
        manager: &Arc<ReplayRingSessionManager>,
    ) -> (SessionId, Transport, Post) {
        let (id, transport) = manager.create_session().await.unwrap();
        let ping: ClientJsonRpcMessage = serde_json::from_value(
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
        )
        .unwrap();
        let post = tokio::spawn({
            let (manager, id) = (manager.clone(), id.clone());
            async move { manager.create_stream(&id, ping).await.map(|_| ()) }
        });
        // On the tests' one-thread runtime the POST runs up to its wait for the worker's answer.
        tokio::task::yield_now().await;
        assert!(!post.is_finished(), "the POST did not reach the worker");
        (id, transport, post)
    }

    /// Waits for a POST that must be answered `SessionNotFound` for `id`.
    async fn assert_session_not_found(post: Post, id: &SessionId) {
        let answered = tokio::time::timeout(Duration::from_secs(10), post)
            .await
            .expect("the POST still waits for a worker of a closed session")
            .unwrap();
        assert!(
            matches!(
                answered,
                Err(ManagerError::Local(LocalSessionManagerError::SessionNotFound(ref s))) if s == id
            ),
            "{answered:?}"
        );
    }

    /// A POST whose session's worker never answers is answered once the session is closed (a
    /// `DELETE` racing it), not held open.
    #[tokio::test]
    async fn a_post_whose_worker_never_answers_ends_when_its_session_closes() {
        let manager = Arc::new(manager());
        let (id, _transport, post) = a_post_the_worker_never_answers(&manager).await;
        manager.close_session(&id).await.unwrap();
        assert_session_not_found(post, &id).await;
    }

    /// A session closed and restored under the same id (rmcp's session store) while a POST waits
    /// on its earlier worker: the POST is still answered, since it watched the earlier session.
    #[tokio::test]
    async fn a_post_waiting_on_a_closed_session_ends_though_its_id_was_restored() {
        let manager = Arc::new(manager());
        let (id, _transport, post) = a_post_the_worker_never_answers(&manager).await;
        manager.close_session(&id).await.unwrap();
        let restored = manager.restore_session(id.clone()).await.unwrap();
        assert!(matches!(restored, RestoreOutcome::Restored(_)));
        assert!(manager.has_session(&id).await.unwrap());
        assert_session_not_found(post, &id).await;
    }

    /// Between its priming event and its POST binding it, a request stream belongs to no session.
    /// A sweep in that gap (another session's request, the housekeeping timer) must not take it
    /// for an orphan, however short `completed_ttl` is.
    #[tokio::test]
    async fn a_request_stream_not_yet_bound_survives_a_sweep_with_a_zero_completed_ttl() {
        let store = RingEventStore::new(crate::StoreConfig {
            completed_ttl: Duration::ZERO,
            ..crate::StoreConfig::default()
        });
        let events = SessionEvents(store.clone());
        let priming = ServerSseMessage::priming("0", Duration::from_secs(1));
        events.store_event("req-1", &priming).await.unwrap();
        store.maintain();
        let later = ServerSseMessage::priming("0", Duration::from_secs(1));
        let id = events.store_event("req-1", &later).await;
        assert!(id.is_ok(), "the unbound stream was ended: {id:?}");
        assert_eq!(store.metrics().streams_expired, 0);
    }

    /// A POST can take any time between its stream's priming event and binding it (a loaded
    /// machine, a slow session worker). While it is under way, a sweep long after the orphan age
    /// leaves the stream alone; once the POST is gone without binding it, the stream is an orphan.
    #[tokio::test]
    async fn an_unbound_stream_is_kept_while_a_post_that_started_before_it_is_under_way() {
        let store = RingEventStore::new(crate::StoreConfig {
            completed_ttl: Duration::from_millis(200),
            ..crate::StoreConfig::default()
        });
        let events = SessionEvents(store.clone());
        let post = store.start_binding();
        let priming = ServerSseMessage::priming("0", Duration::from_secs(1));
        events.store_event("req-1", &priming).await.unwrap();
        // Long past the orphan age, short of the limit on a POST's wait.
        let later = Instant::now() + Duration::from_secs(20);
        store.maintain_at(later);
        assert_eq!(
            store.metrics().streams_expired,
            0,
            "the POST's stream was ended"
        );
        let next = ServerSseMessage::priming("0", Duration::from_secs(1));
        assert!(events.store_event("req-1", &next).await.is_ok());

        // The POST was cancelled before it bound its stream: an orphan.
        drop(post);
        store.maintain_at(later);
        assert_eq!(store.metrics().streams_expired, 1);
    }

    /// A POST stuck before binding its stream keeps other streams from being taken for orphans
    /// only up to a limit: past it, an unbound stream is an orphan even while that POST waits.
    #[tokio::test]
    async fn a_stuck_post_keeps_orphans_only_up_to_the_bind_wait_limit() {
        let store = RingEventStore::new(crate::StoreConfig {
            completed_ttl: Duration::from_millis(200),
            ..crate::StoreConfig::default()
        });
        let events = SessionEvents(store.clone());
        let _stuck = store.start_binding();
        let priming = ServerSseMessage::priming("0", Duration::from_secs(1));
        events.store_event("req-1", &priming).await.unwrap();
        store.maintain_at(Instant::now() + Duration::from_secs(20));
        assert_eq!(store.metrics().streams_expired, 0);
        store.maintain_at(Instant::now() + Duration::from_secs(3600));
        assert_eq!(store.metrics().streams_expired, 1);
    }

    /// Only a POST that started before a stream was created can be binding it: a later one does
    /// not keep an older orphan.
    #[tokio::test]
    async fn a_post_that_started_after_an_orphan_was_created_does_not_keep_it() {
        let store = RingEventStore::new(crate::StoreConfig {
            completed_ttl: Duration::from_millis(200),
            ..crate::StoreConfig::default()
        });
        let events = SessionEvents(store.clone());
        let priming = ServerSseMessage::priming("0", Duration::from_secs(1));
        events.store_event("req-1", &priming).await.unwrap();
        let _later_post = store.start_binding();
        store.maintain_at(Instant::now() + Duration::from_secs(3600));
        assert_eq!(store.metrics().streams_expired, 1);
    }

    #[test]
    #[should_panic(expected = "max_sessions must be at least 1")]
    fn a_cap_of_no_sessions_is_refused() {
        let _ = manager().with_max_sessions(0);
    }

    #[test]
    #[should_panic(expected = "max_streams_per_session must be at least 1")]
    fn a_cap_of_no_request_streams_is_refused() {
        let _ = manager().with_max_streams_per_session(0);
    }

    #[test]
    #[should_panic(expected = "max_streams must be at least 1")]
    fn a_server_cap_of_no_request_streams_is_refused() {
        let _ = manager().with_max_streams(0);
    }

    #[test]
    fn retry_after_is_whole_seconds_rounded_up_and_never_zero() {
        let secs = |ms| retry_after_secs(Duration::from_millis(ms));
        assert_eq!([secs(0), secs(1), secs(999), secs(1_000)], [1, 1, 1, 1]);
        assert_eq!([secs(1_001), secs(29_001), secs(30_000)], [2, 30, 30]);
        assert_eq!(retry_after_secs(Duration::MAX), u64::MAX);
    }
}
