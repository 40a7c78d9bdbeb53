//! [`RingStream`]: one SSE connection served from a stream's ring — replay, then live events,
//! until the stream completes, the server ends the connection on purpose, or the stream breaks
//! (then an explicit JSON-RPC error is the last frame, never a silent end).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use futures::Stream;
use replay_ring_sse::ConnectionId;
use replay_ring::{CloseReason, Event, ReadError, Reader};
use rmcp::model::{ErrorCode, ErrorData, JsonRpcError, JsonRpcVersion2_0, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::ServerSseMessage;
use sync_wrapper::SyncWrapper;

use crate::store::{Inner, StreamEntry};

/// JSON-RPC error code of the explicit "this stream broke" event (implementation-defined range).
pub const STREAM_BROKEN_CODE: i32 = -32000;

type Signal = Pin<Box<dyn Future<Output = ()> + Send>>;

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
    /// Ids below this are not reported to the retention policy again.
    written: u64,
    /// End the connection (with a `retry:` hint) once everything available was sent.
    end_when_caught_up: bool,
    /// Events sent on this connection.
    frames: usize,
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
        let start = reader.cursor().saturating_sub(1);
        let conn = {
            let mut retention = entry.retention.lock();
            let conn = retention.connect(start);
            if let Some(acked) = acknowledged {
                // A resume with `x` proves the client holds `..= x`.
                let _ = retention.acknowledge(&entry.ring, acked);
            }
            conn
        };
        let mut rx = entry.disconnect_signal();
        rx.mark_unchanged();
        let disconnect: Signal = Box::pin(async move {
            // An error means the stream was dropped from the store: nothing to end then.
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        });
        RingStream {
            entry,
            reader: SyncWrapper::new(reader),
            disconnect: SyncWrapper::new(disconnect),
            conn,
            store,
            state: State::Open,
            written: start,
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

    /// The explicit last frame when the stream breaks: a JSON-RPC error for the request the stream
    /// answers (so the client's call fails now instead of waiting forever).
    fn broken(&self, message: String, data: serde_json::Value) -> ServerSseMessage {
        self.store.counters.streams_ended_with_error.inc();
        let error = ErrorData::new(ErrorCode(STREAM_BROKEN_CODE), message, Some(data));
        let msg = ServerJsonRpcMessage::Error(JsonRpcError {
            jsonrpc: JsonRpcVersion2_0,
            id: self.entry.request(),
            error,
        });
        ServerSseMessage::from_message(msg)
    }

    fn retry_frame(&self) -> ServerSseMessage {
        ServerSseMessage::retry(self.store.config.retry)
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
        if self
            .store
            .config
            .frames_per_connection
            .is_some_and(|limit| self.frames >= limit)
        {
            self.store.counters.server_disconnects.inc();
            self.state = State::Ending(Some(self.retry_frame()));
        }
        if event.id > self.written {
            self.written = event.id;
            if let Some(conn) = &self.conn {
                let now = Instant::now();
                let mut retention = self.entry.retention.lock();
                retention.on_written(conn, event.id, now);
                // May free space for a producer waiting on a full window (it is woken by the ring).
                retention.release_expired(&self.entry.ring, now);
            }
        }
        event.data
    }
}

impl Stream for RingStream {
    type Item = ServerSseMessage;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<ServerSseMessage>> {
        let this = &mut *self;
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
            if this.disconnect.get_mut().as_mut().poll(cx).is_ready() {
                this.end_when_caught_up = true;
            }
            return match Pin::new(this.reader.get_mut()).poll_next(cx) {
                Poll::Ready(Some(Ok(event))) => Poll::Ready(Some(this.on_event(event))),
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
            self.entry.retention.lock().disconnect(conn, Instant::now());
        }
    }
}
