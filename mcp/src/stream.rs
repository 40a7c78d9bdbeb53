//! [`RingStream`]: one SSE connection served from a stream's ring — replay, then live events,
//! until the stream completes, the server ends the connection on purpose, or the stream breaks
//! (then an explicit JSON-RPC error is the last frame, never a silent end).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::Stream;
use replay_ring::{CloseReason, Event, ReadError, Reader};
use replay_ring_sse::{ConnectionId, Refused, Resumed, Retention};
use rmcp::model::{
    ErrorCode, ErrorData, JsonRpcError, JsonRpcVersion2_0, RequestId, ServerJsonRpcMessage,
};
use rmcp::transport::streamable_http_server::session::ServerSseMessage;
use sync_wrapper::SyncWrapper;

use crate::gate::{Durable, Gate};
use crate::refusal::{RefusalReason, ResumeRefusal};
use crate::store::{Inner, RingEventStore};
use crate::stream_entry::StreamEntry;

/// JSON-RPC error code of the explicit "this stream broke" event (implementation-defined range).
pub const STREAM_BROKEN_CODE: i32 = -32000;

type Signal = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The explicit last frame of a connection whose stream cannot go on. On a request stream: a
/// JSON-RPC error for that request, so the client's call fails now instead of waiting forever. A
/// stream that answers no request (the session's GET stream) has no request an error could name,
/// and an error without an id is not a message the clients accept: it ends the connection with a
/// `retry:` hint instead, and the client's reconnect gets the explicit HTTP status.
pub(crate) fn broken_frame(
    request: Option<RequestId>,
    message: String,
    data: serde_json::Value,
    retry: Duration,
) -> ServerSseMessage {
    let Some(id) = request else {
        return ServerSseMessage::retry(retry);
    };
    let error = ErrorData::new(ErrorCode(STREAM_BROKEN_CODE), message, Some(data));
    ServerSseMessage::from_message(ServerJsonRpcMessage::Error(JsonRpcError {
        jsonrpc: JsonRpcVersion2_0,
        id: Some(id),
        error,
    }))
}

/// What the gate says about an event.
enum GateVerdict {
    Send,
    Wait,
    Failed(Arc<str>),
}

enum State {
    Open,
    /// One last frame to send, then the end.
    Ending(Option<ServerSseMessage>),
    Done,
}

/// An SSE connection's event source: a registered ring reader, replay first, then live.
///
/// `Sync` (rmcp requires it) through [`SyncWrapper`]: the stream is only ever polled through
/// `&mut`.
pub struct RingStream {
    entry: Arc<StreamEntry>,
    reader: SyncWrapper<Reader<ServerSseMessage>>,
    disconnect: SyncWrapper<Signal>,
    conn: Option<ConnectionId>,
    store: Arc<Inner>,
    state: State,
    /// Every id up to here was taken by the transport (reported to the retention policy).
    written: u64,
    /// The newest id handed to the transport; it is taken when the transport asks for more.
    handed: u64,
    /// End the connection (with a `retry:` hint) once everything available was sent.
    end_when_caught_up: bool,
    /// Events sent on this connection.
    frames: usize,
    /// The stream's durable mark, when its events also go to an external log.
    gate: Option<tokio::sync::watch::Receiver<Durable>>,
    /// Completes when the durable mark moves (set while an event waits for it).
    gate_wait: Option<SyncWrapper<Signal>>,
    /// An event read from the ring that is not durable yet.
    held: Option<Event<ServerSseMessage>>,
}

impl std::fmt::Debug for RingStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RingStream")
            .field("stream", &self.entry.identity.stream)
            .field("written", &self.written)
            .finish_non_exhaustive()
    }
}

impl RingStream {
    /// A connection whose reader is registered; `acknowledged` is the client's cursor on a resume.
    pub(crate) fn new(
        entry: Arc<StreamEntry>,
        reader: Reader<ServerSseMessage>,
        acknowledged: Option<u64>,
        store: Arc<Inner>,
    ) -> Self {
        let conn = {
            let mut retention = entry.retention.lock();
            Self::connect(&entry, &mut retention, &reader, acknowledged)
        };
        Self::connected(entry, reader, conn, store)
    }

    /// Counts `reader`'s connection in the stream's retention policy (`retention`, locked by the
    /// caller), which from then on releases nothing it has not sent; `acknowledged` is the
    /// client's cursor on a resume.
    pub(crate) fn connect(
        entry: &StreamEntry,
        retention: &mut Retention,
        reader: &Reader<ServerSseMessage>,
        acknowledged: Option<u64>,
    ) -> Option<ConnectionId> {
        let conn = retention.connect(reader.cursor().saturating_sub(1));
        if let Some(acked) = acknowledged {
            // A resume with `x` proves the client holds `..= x`.
            let _ = retention.acknowledge(&entry.ring, acked);
            // ... and that it left the connections other replicas served it that had written
            // no further (one left behind by a replica that died would hold the window).
            #[cfg(feature = "redis")]
            if !entry.is_common {
                entry
                    .remote_progress
                    .lock()
                    .supersede(retention, acked, Instant::now());
            }
        }
        entry.on_connections_changed(retention.live_connections());
        conn
    }

    /// The connection of `reader`, counted in the retention policy as `conn`.
    pub(crate) fn connected(
        entry: Arc<StreamEntry>,
        reader: Reader<ServerSseMessage>,
        conn: Option<ConnectionId>,
        store: Arc<Inner>,
    ) -> Self {
        let start = reader.cursor().saturating_sub(1);
        let mut rx = entry.disconnect_signal();
        rx.mark_unchanged();
        let disconnect: Signal = Box::pin(async move {
            // An error means the stream was dropped from the store: nothing to end then.
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        });
        let gate = entry.gate.as_ref().map(Gate::subscribe);
        RingStream {
            gate,
            gate_wait: None,
            held: None,
            entry,
            reader: SyncWrapper::new(reader),
            disconnect: SyncWrapper::new(disconnect),
            conn,
            store,
            state: State::Open,
            written: start,
            handed: start,
            end_when_caught_up: false,
            frames: 0,
        }
    }

    /// Ends this connection (not the stream) with a `retry:` hint once it has sent everything
    /// available: the SEP-1699 "server closes, client polls" mechanism.
    pub fn end_when_caught_up(&mut self) {
        self.end_when_caught_up = true;
    }

    /// The next id this connection will send.
    pub fn cursor(&mut self) -> u64 {
        self.reader.get_mut().cursor()
    }

    /// The explicit last frame when the stream breaks (see [`broken_frame`]).
    fn broken(&self, message: String, data: serde_json::Value) -> ServerSseMessage {
        self.store.counters.streams_ended_with_error.inc();
        broken_frame(self.entry.request(), message, data, self.store.config.retry)
    }

    fn retry_frame(&self) -> ServerSseMessage {
        ServerSseMessage::retry(self.store.config.retry)
    }

    /// The transport asks for more: what was handed before has been taken. Reports it to the
    /// retention policy (which may release events and so free a waiting producer, woken by the
    /// ring) and returns whether the slow-consumer policy has cut this connection meanwhile.
    fn on_taken(&mut self) -> bool {
        let Some(conn) = &self.conn else {
            return false;
        };
        let mut retention = self.entry.retention.lock();
        if self.handed > self.written {
            self.written = self.handed;
            let now = Instant::now();
            retention.on_written(conn, self.handed, now);
            retention.release_expired(&self.entry.ring, now);
        }
        retention.cut_verdict(conn).is_some()
    }

    /// Whether event `id` may be sent now; registers for a wake-up when it has to wait.
    fn gate_verdict(&mut self, id: u64, cx: &mut Context<'_>) -> GateVerdict {
        let Some(rx) = self.gate.as_mut() else {
            return GateVerdict::Send;
        };
        loop {
            {
                let durable = rx.borrow_and_update();
                if durable.through() >= id {
                    self.gate_wait = None;
                    return GateVerdict::Send;
                }
                if let Some(reason) = durable.failed() {
                    return GateVerdict::Failed(reason.clone());
                }
            }
            // The clone has seen the current mark: its `changed` completes on the next move.
            let wait = self.gate_wait.get_or_insert_with(|| {
                let mut rx = rx.clone();
                SyncWrapper::new(Box::pin(async move {
                    if rx.changed().await.is_err() {
                        std::future::pending::<()>().await;
                    }
                }))
            });
            match wait.get_mut().as_mut().poll(cx) {
                Poll::Ready(()) => self.gate_wait = None,
                Poll::Pending => return GateVerdict::Wait,
            }
        }
    }

    /// The explicit end when the external event log failed before `id` was durable.
    fn log_failed(&self, reason: &str) -> ServerSseMessage {
        let stream = self.entry.identity.stream.to_string();
        let data = serde_json::json!({
            "error": "stream_closed", "stream": stream, "reason": reason,
        });
        self.broken(format!("event stream {stream} closed: {reason}"), data)
    }

    /// Sends `event` if the gate allows; else holds it (or ends the connection explicitly).
    fn gated(
        &mut self,
        event: Event<ServerSseMessage>,
        cx: &mut Context<'_>,
    ) -> Option<Poll<Option<ServerSseMessage>>> {
        match self.gate_verdict(event.id, cx) {
            GateVerdict::Send => Some(Poll::Ready(Some(self.on_event(event)))),
            GateVerdict::Wait => {
                self.held = Some(event);
                Some(Poll::Pending)
            }
            GateVerdict::Failed(reason) => {
                self.state = State::Ending(Some(self.log_failed(&reason)));
                None
            }
        }
    }

    fn on_error(&mut self, err: ReadError) -> Option<ServerSseMessage> {
        let stream = self.entry.identity.stream.to_string();
        match err {
            ReadError::Closed(CloseReason::Completed) => None,
            ReadError::Closed(reason) => {
                let data = serde_json::json!({
                    "error": "stream_closed", "stream": stream, "reason": reason.to_string(),
                });
                Some(self.broken(format!("event stream {stream} closed: {reason}"), data))
            }
            ReadError::Gap { next, floor, head } => {
                let data = serde_json::json!({
                    "error": "replay_gap", "stream": stream, "requested": next - 1,
                    "floor": floor, "head": head,
                });
                Some(self.broken(
                    format!("event stream {stream}: events from {next} were released before they were sent"),
                    data,
                ))
            }
            // `ReadError` is non-exhaustive: any other end is reported explicitly, never silently.
            other => {
                let data = serde_json::json!({
                    "error": "stream_failed", "stream": stream, "reason": other.to_string(),
                });
                Some(self.broken(format!("event stream {stream} failed: {other}"), data))
            }
        }
    }

    fn on_event(&mut self, event: Event<ServerSseMessage>) -> ServerSseMessage {
        self.store.counters.events_delivered.inc();
        self.frames += 1;
        // The last event of a stream that has ended is followed by its end (the result was in it,
        // or an explicit error follows), not by a retry hint: a resume at that id has nothing more
        // to send, so the end must come on this connection.
        let ended_here = self.entry.ring.is_closed() && event.id == self.entry.ring.head();
        if !ended_here
            && self
                .store
                .config
                .frames_per_connection
                .is_some_and(|limit| self.frames >= limit)
        {
            self.store.counters.server_disconnects.inc();
            self.state = State::Ending(Some(self.retry_frame()));
        }
        if event.id > self.handed {
            self.handed = event.id;
            if let Some(conn) = &self.conn {
                // Taken when the transport polls again; the slow-consumer policy cuts a
                // connection whose transport takes nothing for its write timeout.
                self.entry
                    .retention
                    .lock()
                    .on_write_pending(conn, Instant::now());
            }
        }
        event.data
    }
}

impl Stream for RingStream {
    type Item = ServerSseMessage;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<ServerSseMessage>> {
        let this = &mut *self;
        // Asked for more: what was handed before has been taken (also before a last frame).
        let cut = this.on_taken();
        loop {
            match &mut this.state {
                State::Done => return Poll::Ready(None),
                State::Ending(last) => {
                    let last = last.take();
                    this.state = State::Done;
                    if let Some(m) = last {
                        return Poll::Ready(Some(m));
                    }
                    continue;
                }
                State::Open => {}
            }
            if cut {
                // Cut by the slow-consumer policy: it no longer holds events back (only for a
                // resumption window, as a departed client), and its connection ends with a retry
                // hint: the stream goes on, and a client that reconnects resumes exactly.
                this.store.counters.server_disconnects.inc();
                this.state = State::Ending(Some(this.retry_frame()));
                continue;
            }
            if this.disconnect.get_mut().as_mut().poll(cx).is_ready() {
                this.end_when_caught_up = true;
            }
            if let Some(event) = this.held.take() {
                match this.gated(event, cx) {
                    Some(Poll::Pending) if this.end_when_caught_up => {
                        // Not durable yet, so not sent: a resume gets it.
                        this.held = None;
                        this.store.counters.server_disconnects.inc();
                        this.state = State::Ending(Some(this.retry_frame()));
                        continue;
                    }
                    Some(poll) => return poll,
                    None => continue,
                }
            }
            return match Pin::new(this.reader.get_mut()).poll_next(cx) {
                Poll::Ready(Some(Ok(event))) => match this.gated(event, cx) {
                    Some(poll) => poll,
                    None => continue,
                },
                Poll::Ready(Some(Err(err))) => {
                    this.state = State::Ending(this.on_error(err));
                    continue;
                }
                Poll::Ready(None) => {
                    this.state = State::Done;
                    Poll::Ready(None)
                }
                Poll::Pending if this.end_when_caught_up => {
                    // SEP-1699: end the connection, not the stream, with a retry hint.
                    this.store.counters.server_disconnects.inc();
                    this.state = State::Ending(Some(this.retry_frame()));
                    continue;
                }
                Poll::Pending => Poll::Pending,
            };
        }
    }
}

impl Drop for RingStream {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            // The departed client gets a full resumption window for what it has not seen.
            let mut retention = self.entry.retention.lock();
            retention.disconnect(conn, Instant::now());
            self.entry
                .on_connections_changed(retention.live_connections());
        }
    }
}

/// Opening the streams that connections read.
// A refusal is plain data built once per rejected request; see `store.rs`.
#[allow(clippy::result_large_err)]
impl RingEventStore {
    /// Opens a stream that replays everything after `last_event_id` and then tails live events
    /// until the stream completes. `session` (when given) must own the stream.
    ///
    /// # Errors
    ///
    /// The same refusals as [`check_resume`](Self::check_resume), plus `Busy` when every reader
    /// slot of the stream is taken.
    pub fn resume_stream(
        &self,
        session: Option<&str>,
        last_event_id: &[u8],
    ) -> Result<RingStream, ResumeRefusal> {
        let (entry, id) = self.locate(session, last_event_id)?;
        self.check_not_ended(&entry, id.seq)?;
        let resumed = replay_ring_sse::resume(&entry.ring, &entry.identity, Some(last_event_id))
            .map_err(|Refused { decision, state }| {
                self.count_refusal(RefusalReason::Decision(decision), state)
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
        // Registered and connected under the retention lock: a reader that starts at the head
        // holds no pin, so a release landing in between (a maintenance tick, a producer finding
        // the window full) could otherwise pass it before its connection caps releases at it.
        let mut retention = entry.retention.lock();
        let opened = entry.ring.resume(Some(after)).map(|reader| {
            let conn = RingStream::connect(&entry, &mut retention, &reader, None);
            (reader, conn)
        });
        drop(retention);
        let (reader, conn) = opened.map_err(|e| {
            self.count_refusal(RefusalReason::Decision(e.into()), Some(entry.state()))
        })?;
        Ok(RingStream::connected(
            entry,
            reader,
            conn,
            self.inner.clone(),
        ))
    }

    fn open(&self, entry: Arc<StreamEntry>, resumed: Resumed<ServerSseMessage>) -> RingStream {
        let Resumed {
            reader,
            acknowledged,
            ..
        } = resumed;
        RingStream::new(entry, reader, acknowledged, self.inner.clone())
    }
}
