//! [`StreamEntry`]: one SSE stream of the MCP store — its ring, its writer, and what it is bound
//! to (session, request), with the clocks the store's backpressure bound and sweeps read.

use std::time::{Duration, Instant};

use parking_lot::Mutex;
use replay_ring::{Producer, ReplayRing};
use replay_ring_sse::{Publisher, RetentionConfig, SharedRetention, StreamIdentity, StreamState};
use rmcp::model::RequestId;
use rmcp::transport::streamable_http_server::session::{ServerSseMessage, SessionId};

use crate::gate::Gate;
#[cfg(feature = "redis")]
use crate::redis_log::LogWriter;

/// One SSE stream: its ring, its publisher, and what it is bound to.
pub(crate) struct StreamEntry {
    pub(crate) identity: StreamIdentity,
    pub(crate) ring: ReplayRing<ServerSseMessage>,
    /// The producer with the shared retention policy and the one backpressure loop, and the
    /// stream's external event log.
    pub(crate) writer: tokio::sync::Mutex<Writer>,
    /// The durable mark when the events also go to an external log (connections wait for it).
    pub(crate) gate: Option<Gate>,
    /// The Redis producer lease, renewable while the writer is busy.
    #[cfg(feature = "redis")]
    pub(crate) lease: crate::redis_log::Lease,
    /// The stream's Redis stream, for the maintenance that runs while the writer is busy.
    #[cfg(feature = "redis")]
    pub(crate) log_stream: Option<replay_ring_redis::RedisStream>,
    /// The connections other replicas serve this stream to, counted in `retention` (a request
    /// stream's only; lock it after `retention`).
    #[cfg(feature = "redis")]
    pub(crate) remote_progress: Mutex<crate::remote_progress::RemoteProgress>,
    /// The publisher's retention policy, which the stream's connections report to.
    pub(crate) retention: SharedRetention,
    /// The session this stream belongs to (known at creation for the GET stream, at the POST for
    /// request streams). A resume naming another session is refused.
    pub(crate) session: Mutex<Option<SessionId>>,
    /// The JSON-RPC request a request stream answers (for the explicit error if it breaks).
    pub(crate) request: Mutex<Option<RequestId>>,
    /// When the stream ended (completed, or closed by backpressure); it is forgotten
    /// `completed_ttl` later.
    pub(crate) closed_at: Mutex<Option<Instant>>,
    /// Since when the window has been full without a slot freed.
    pub(crate) full_since: Mutex<Option<Instant>>,
    /// Since when no connection has been reading the stream (`None` while one is).
    pub(crate) unattended_since: Mutex<Option<Instant>>,
    /// Bumped to end every live connection of this stream (SEP-1699 server-side disconnect).
    pub(crate) disconnect: tokio::sync::watch::Sender<u64>,
    /// Set once the stream's session is gone: a push waiting for room then ends the stream at
    /// once instead of at the backpressure bound.
    pub(crate) forgotten: tokio::sync::watch::Sender<bool>,
    /// Notified when the last connection reading the stream leaves ([`vacated`](Self::vacated)).
    pub(crate) vacated: tokio::sync::Notify,
    /// The session's GET stream (`<session>:common`), not a request's.
    pub(crate) is_common: bool,
    /// Created by an MCP session's worker (a request stream of a session, or its GET stream):
    /// resumable only by that session, never by a request without one. Only rmcp's stateless
    /// (2026-07-28) requests create streams without a session.
    pub(crate) session_scoped: bool,
    pub(crate) created_at: Instant,
}

/// A stream being created: everything but its writer.
pub(crate) struct EntryParts {
    pub(crate) identity: StreamIdentity,
    pub(crate) ring: ReplayRing<ServerSseMessage>,
    pub(crate) retention: SharedRetention,
    pub(crate) session: Option<SessionId>,
    pub(crate) is_common: bool,
    pub(crate) session_scoped: bool,
}

impl EntryParts {
    pub(crate) fn with_writer(self, writer: Writer, gate: Option<Gate>) -> StreamEntry {
        StreamEntry {
            identity: self.identity,
            ring: self.ring,
            retention: self.retention,
            writer: tokio::sync::Mutex::new(writer),
            gate,
            #[cfg(feature = "redis")]
            lease: Default::default(),
            #[cfg(feature = "redis")]
            log_stream: None,
            #[cfg(feature = "redis")]
            remote_progress: Default::default(),
            session: Mutex::new(self.session),
            request: Mutex::new(None),
            closed_at: Mutex::new(None),
            full_since: Mutex::new(None),
            unattended_since: Mutex::new(Some(Instant::now())),
            disconnect: tokio::sync::watch::channel(0).0,
            forgotten: tokio::sync::watch::channel(false).0,
            vacated: tokio::sync::Notify::new(),
            is_common: self.is_common,
            session_scoped: self.session_scoped,
            created_at: Instant::now(),
        }
    }
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

    /// Whether a disconnect was asked for since the count was `seen`.
    pub(crate) fn disconnected_since(&self, seen: u64) -> bool {
        *self.disconnect.borrow() != seen
    }

    /// Returns once no connection is reading the stream.
    pub(crate) async fn vacated(&self) {
        loop {
            // Registered before the check, so a departure between the two is not missed.
            let notified = self.vacated.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.retention.lock().live_connections() == 0 {
                return;
            }
            notified.await;
        }
    }

    /// The window clients can see: when the event log failed, the event it refused has an id in
    /// the ring but was never sent, so the stream's head is its last durable id.
    pub(crate) fn state(&self) -> StreamState {
        let mut state = StreamState::of(self.identity, &self.ring);
        if let Some(durable) = self.gate.as_ref().and_then(Gate::failed_through) {
            state.head = state.head.min(durable);
        }
        state
    }

    /// The number of connections reading the stream changed to `live`.
    pub(crate) fn on_connections_changed(&self, live: usize) {
        let mut unattended = self.unattended_since.lock();
        match (live, *unattended) {
            (0, None) => {
                *unattended = Some(Instant::now());
                self.vacated.notify_waiters();
            }
            (0, Some(_)) => {}
            _ => *unattended = None,
        }
    }

    /// When a backpressured push started waiting, for the bound: when the window filled up or,
    /// while no client is connected, when the last one left, whichever came first. rmcp stores a
    /// session's events one at a time, so a stream can only fill up once the session worker is
    /// done waiting on another one; counting from the departure of its client lets abandoned
    /// streams time out together instead of one bound after another.
    pub(crate) fn waiting_since(&self, now: Instant) -> Instant {
        let filled = self.full_since.lock().unwrap_or(now);
        let unattended = self.unattended_since.lock().unwrap_or(now);
        filled.min(unattended).min(now)
    }

    /// When a backpressured push that began waiting at `since`
    /// ([`waiting_since`](Self::waiting_since)) gives up: `retention.backpressure_timeout` later,
    /// plus one `resumption_window` while a client is connected. A connected client's window
    /// fills with events it was sent, which stay replayable for their resumption window and are
    /// then released: a stream faster than `capacity / resumption_window` fills up with every
    /// client keeping up, and is paced by those releases rather than closed. A connected client
    /// that stops reading is cut by the slow-consumer policy; from then on the stream is
    /// unattended, and the plain bound applies.
    pub(crate) fn backpressure_deadline(
        &self,
        since: Instant,
        retention: &RetentionConfig,
    ) -> Instant {
        let attended = self.unattended_since.lock().is_none();
        let grace = if attended {
            retention.resumption_window
        } else {
            Duration::ZERO
        };
        since + retention.backpressure_timeout + grace
    }

    /// No free slot: the next push has to wait for a release.
    pub(crate) fn is_full(&self) -> bool {
        self.ring.head() + 1 - self.ring.floor() >= self.ring.capacity() as u64
    }

    /// Starts the time-to-live of a stream that has ended.
    pub(crate) fn mark_closed(&self) {
        self.closed_at.lock().get_or_insert_with(Instant::now);
    }
}

/// What writes one stream: the ring's publisher and, with the feature `redis`, the Redis log.
pub(crate) struct Writer {
    pub(crate) publisher: Publisher<Producer<ServerSseMessage>>,
    #[cfg(feature = "redis")]
    pub(crate) log: Option<LogWriter>,
}
