//! Resumes served from the Redis event log (feature `redis`): a `GET` with `Last-Event-ID` for a
//! stream this process does not hold — another replica's, or one it has forgotten — is checked
//! against the MCP session recorded with the stream in Redis, then answered from Redis: the
//! events after the cursor, then live ones until the stream ends, or an explicit refusal. A
//! request stream's connection reports its progress, which the owning replica counts as a
//! connection of the stream (`remote_progress.rs`).

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures::stream::{self, BoxStream, StreamExt};
use http::{HeaderValue, Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use replay_ring::CloseReason;
use replay_ring_redis::{
    Error as RedisError, ReadItem, RedisReader, RedisStream, RedisStreamState,
};
use replay_ring_sse::{
    decide, EventId, Frame, ResumeDecision, StreamIdentity, StreamState, EVENT_STREAM_CONTENT_TYPE,
};
use rmcp::model::RequestId;
use serde_json::Value;
use sync_wrapper::SyncWrapper;

use crate::layer::{refusal_response, Body};
use crate::progress_report::{report_every, ProgressReporter};
use crate::redis_log::RedisEventLog;
use crate::refusal::RefusalReason;
use crate::remote_readers::RemoteSlot;
use crate::store::RingEventStore;
use crate::stream::broken_frame;
use crate::stream_entry::StreamEntry;

/// Idle time after which a resumed connection gets a keep-alive comment and checks that the
/// stream's producer is still alive (sooner when the lease is shorter).
const KEEP_ALIVE: Duration = Duration::from_secs(15);

impl RingEventStore {
    /// Records the MCP session and JSON-RPC request of a request stream in Redis (for the
    /// session check on other replicas). A failure only means other replicas cannot serve this
    /// stream's resumes: they answer `404`, and this replica still can.
    pub(crate) async fn record_owner(&self, entry: &StreamEntry) {
        let (Some(session), request) = (entry.session(), entry.request()) else {
            return;
        };
        let writer = entry.writer.lock().await;
        if let Some(log) = writer.log.as_ref() {
            let _ = log
                .log()
                .set_owner(log.stream(), &session, request.as_ref())
                .await;
        }
    }

    /// Ends the Redis stream of a stream whose MCP session was deleted, in the background (the
    /// caller cannot wait): its owner is forgotten first, so that a resume on another replica is
    /// answered `404 session_lost` as here, and readers there get the end.
    pub(crate) fn close_log_later(entry: Arc<StreamEntry>, reason: CloseReason) {
        if entry.gate.is_none() {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let mut writer = entry.writer.lock().await;
                if let Some(log) = writer.log.as_mut() {
                    let _ = log.log().clear_owner(log.stream()).await;
                    let _ = log.close(reason).await;
                }
            });
        }
    }

    /// Records in Redis that the MCP session `session` was deleted, so that no replica resumes its
    /// streams any more. A failure is not reported: the replicas then go on serving resumes of
    /// the deleted session's streams until those expire, as they would have before the `DELETE`.
    pub(crate) async fn mark_session_gone(&self, session: &str) {
        if let Some(log) = &self.inner.log {
            let _ = log.mark_session_gone(session).await;
        }
    }

    /// Runs [`maintain_event_log`](Self::maintain_event_log) every third of the lease, in the
    /// current tokio runtime (if any), until the store is dropped.
    pub(crate) fn spawn_log_maintenance(&self) {
        let (Some(log), Ok(runtime)) = (&self.inner.log, tokio::runtime::Handle::try_current())
        else {
            return;
        };
        let every = report_every(log);
        let store = Arc::downgrade(&self.inner);
        runtime.spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                let Some(inner) = store.upgrade() else {
                    return;
                };
                RingEventStore { inner }.maintain_event_log().await;
            }
        });
    }

    /// Housekeeping of the Redis event log (a store made by
    /// [`with_redis`](Self::with_redis) inside a tokio runtime runs it on its own, every third of
    /// `RedisConfig::lease`): renews the
    /// producer lease of every open stream (so other replicas know its producer is alive; a
    /// lease that lapsed while Redis did not answer is taken again, when nobody else took it and
    /// Redis kept every event) and releases in Redis what the rings
    /// released. Returns how many streams it looked at. Without an event log it does nothing.
    ///
    /// # Cancel safety
    /// Cancel safe: each step is idempotent and the next run continues.
    pub async fn maintain_event_log(&self) -> usize {
        if self.inner.log.is_none() {
            return 0;
        }
        let entries = self.entries();
        // The request streams' reports, 64 reads at a time on the one multiplexed connection
        // (a round trip per 64 streams, not per stream), and before the writers: a push waiting
        // for room holds its writer, and a report may be that room.
        stream::iter(&entries)
            .for_each_concurrent(REPORT_READS_AT_ONCE, |entry| {
                self.count_remote_readers(entry)
            })
            .await;
        for entry in &entries {
            // A busy writer may be waiting for room for up to the backpressure bound, longer
            // than a lease: its lease is renewed without it.
            let Ok(mut writer) = entry.writer.try_lock() else {
                entry.lease.renew().await;
                continue;
            };
            if let Some(log) = writer.log.as_mut() {
                log.renew().await;
                let _ = log.release(entry.ring.floor().saturating_sub(1)).await;
            }
        }
        entries.len()
    }

    /// Counts in an open request stream's retention the connections other replicas serve it to,
    /// from their reports in Redis (`remote_progress.rs`), and releases what that allows.
    async fn count_remote_readers(&self, entry: &StreamEntry) {
        let (Some(log), Some(stream)) = (&self.inner.log, &entry.log_stream) else {
            return;
        };
        if entry.is_common || entry.closed_at.lock().is_some() {
            return;
        }
        let read = log.remote_readers(stream).await;
        let now = Instant::now();
        let dead_after = remote_reader_dead_after(log);
        let forget = {
            let mut retention = entry.retention.lock();
            let mut remote = entry.remote_progress.lock();
            let forget = match read {
                Ok(read) => {
                    // A report past the head was not written by a reader of this stream (the
                    // head only moves here, before Redis has the event): not counted, removed.
                    let head = entry.ring.head();
                    let (reports, past_head): (Vec<_>, Vec<_>) =
                        read.reports.into_iter().partition(|r| r.through <= head);
                    let mut forget = remote.apply(
                        &mut retention,
                        &reports,
                        now,
                        dead_after,
                        self.config().max_readers,
                    );
                    forget.extend(past_head.into_iter().map(|r| r.token.into_bytes()));
                    forget.extend(read.junk);
                    forget
                }
                Err(_) => {
                    remote.expire_unread(&mut retention, now, dead_after);
                    Vec::new()
                }
            };
            entry.on_connections_changed(retention.live_connections());
            retention.release_expired(&entry.ring, now);
            forget
        };
        let _ = log.forget_readers(stream, &forget).await;
    }

    /// Serves a resume from Redis when the cursor's stream is not held by this process, after
    /// checking that `session` owns it. `None` when the store has no event log, the cursor does
    /// not parse, the stream is held here (the local path serves it), or Redis has no such stream
    /// of this session: the caller then answers as without Redis (a `404`).
    ///
    /// The answer is either a `200` event stream (events after the cursor, then live ones until
    /// the stream ends; the end of a stream that failed is an explicit JSON-RPC error for its
    /// request) or an explicit refusal: `416`/`409` outside the window, `410` at the last id of a
    /// stream that has ended (or whose producer is gone), `503` when Redis cannot be reached.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads, except for releasing in Redis the events up to the cursor (a
    /// resume acknowledges them), which is idempotent.
    pub async fn remote_resume(
        &self,
        session: Option<&str>,
        last_event_id: &[u8],
    ) -> Option<Response<Body>> {
        let log = self.inner.log.as_ref()?;
        let session = session?;
        let id = EventId::parse_bytes(last_event_id).ok()?;
        if id.epoch == self.epoch() && self.entry_by_event_id(&id).is_some() {
            return None;
        }
        let unavailable = |_e: RedisError| Some(self.unavailable_response());
        let stream = match log.open(id.epoch, &id.stream).await {
            Ok(s) => s,
            Err(e) if e.is_stream_lost() || matches!(e, RedisError::Corrupt { .. }) => return None,
            Err(e) => return unavailable(e),
        };
        let owner = match log.owner(&stream).await {
            Ok(Some(owner)) if owner.session == session => owner,
            Ok(_) => return None,
            Err(e) => return unavailable(e),
        };
        // The owner record of a stream its replica had already forgotten outlives the session.
        match log.session_gone(session).await {
            Ok(false) => {}
            Ok(true) => return None,
            Err(e) => return unavailable(e),
        }
        let state = match stream.state().await {
            Ok(s) => s,
            Err(e) if e.is_stream_lost() => return None,
            Err(e) => return unavailable(e),
        };
        // The wire identity: the store stream's name and the owning store's epoch.
        let identity = StreamIdentity::new(id.stream, id.epoch);
        let window = StreamState {
            identity,
            floor: state.floor,
            head: state.head,
        };
        let decision = decide(Some(&window), Some(last_event_id));
        if !decision.is_accepted() {
            return Some(self.refused(RefusalReason::Decision(decision), Some(window)));
        }
        if id.seq >= state.head {
            let ended = match &state.closed {
                Some(reason) => Some(reason.clone()),
                None => match log.producer_gone(&stream).await {
                    Ok(false) => None,
                    // It may have closed, or appended, while the lease was looked at again.
                    Ok(true) => match stream.state().await {
                        Ok(now) if now.closed.is_some() => now.closed,
                        Ok(now) if now.head > id.seq => None,
                        Ok(_) => Some(producer_gone()),
                        Err(e) if e.is_stream_lost() => return None,
                        Err(e) => return unavailable(e),
                    },
                    Err(e) => return unavailable(e),
                },
            };
            if let Some(reason) = ended {
                return Some(self.refused(RefusalReason::StreamEnded(reason), Some(window)));
            }
        }
        // At most `max_readers` connections per stream, as on the owning replica: each one
        // served from Redis also holds a Redis connection for its blocking reads.
        let limit = self.config().max_readers;
        let Some(slot) = RemoteSlot::take(&self.inner.remote_readers, identity, limit) else {
            let busy = ResumeDecision::Busy { limit };
            return Some(self.refused(RefusalReason::Decision(busy), Some(window)));
        };
        // A resume with `x` proves the client holds `..= x` (as on the owning replica).
        let _ = stream.release_through(id.seq).await;
        let reader = match stream.resume(Some(id.seq)).await {
            Ok(r) => r,
            Err(RedisError::Gap {
                requested,
                floor,
                head,
            }) => {
                let d = ResumeDecision::Gap {
                    requested,
                    floor,
                    head,
                };
                let window = StreamState {
                    identity,
                    floor,
                    head,
                };
                return Some(self.refused(RefusalReason::Decision(d), Some(window)));
            }
            Err(RedisError::AheadOfHead { requested, head }) => {
                let d = ResumeDecision::Mismatch { requested, head };
                return Some(self.refused(RefusalReason::Decision(d), Some(window)));
            }
            Err(e) if e.is_stream_lost() => return None,
            Err(e) => return unavailable(e),
        };
        self.inner.counters.remote_resumes.inc();
        let reporter = ProgressReporter::new(
            log.clone(),
            stream.clone(),
            reader_token(self.epoch()),
            owner.request.is_some(),
        );
        let connection = RemoteConnection {
            reader,
            stream,
            log: log.clone(),
            identity,
            request: owner.request,
            retry: self.config().retry,
            done: false,
            sent: id.seq,
            written: id.seq,
            reporter,
            _slot: slot,
        };
        // The cursor first, as on the owning replica (`ReplayRingSessionManager::resume`): a
        // client cut before the first replayed event still reconnects with it.
        let priming = connection.priming(id.seq);
        Some(event_stream_response(
            stream::iter([priming]).chain(connection.frames()).boxed(),
        ))
    }

    fn refused(&self, reason: RefusalReason, state: Option<StreamState>) -> Response<Body> {
        refusal_response(&self.count_refusal(reason, state))
    }

    fn unavailable_response(&self) -> Response<Body> {
        let refusal =
            self.count_refusal(RefusalReason::Decision(ResumeDecision::Unavailable), None);
        // `Retry-After: 1`, as every other 503 of the guard and of the SSE layer.
        refusal_response(&refusal)
    }
}

/// How long a connection served from Redis stays idle before it writes a keep-alive and checks
/// that the stream's producer is still there.
fn idle_interval(log: &RedisEventLog) -> Duration {
    KEEP_ALIVE.min(log.backend().config().lease)
}

/// After how long without a moving report the owning replica takes a remote reader for gone: a
/// live reader reports every [`report_every`], which the owner reads as often; three of those
/// intervals and two commands' time. Replicas share one `RedisConfig`, so both sides use the
/// same interval.
fn remote_reader_dead_after(log: &RedisEventLog) -> Duration {
    3 * report_every(log) + 2 * log.backend().config().response_timeout
}

/// How many streams' reports one maintenance pass reads at once.
const REPORT_READS_AT_ONCE: usize = 64;

/// Tells connections served from Redis apart across replicas: the store's epoch (random per
/// process) and a count.
fn reader_token(epoch: replay_ring_sse::Epoch) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    // Relaxed: a unique counter; nothing is published through it.
    format!("{epoch}-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// The end of a stream whose producer's lease lapsed without a close: its replica is gone, or
/// lost Redis in the middle of the stream (it then ends the stream itself, but cannot record the
/// end in Redis), which this replica cannot tell apart.
fn producer_gone() -> CloseReason {
    CloseReason::error(
        "the replica producing the stream is gone, or lost its connection to Redis, without \
         closing it",
    )
}

/// One connection served from Redis.
struct RemoteConnection {
    reader: RedisReader,
    stream: RedisStream,
    log: RedisEventLog,
    identity: StreamIdentity,
    request: Option<RequestId>,
    retry: Duration,
    done: bool,
    /// The last id of the frames handed to the transport.
    sent: u64,
    /// The last id of the frames the transport took.
    written: u64,
    /// Reports `written` to the owning replica.
    reporter: ProgressReporter,
    /// Held until the connection's frames are dropped.
    _slot: RemoteSlot,
}

impl RemoteConnection {
    /// The connection's SSE frames, ending after the stream's end (or an explicit error).
    fn frames(self) -> BoxStream<'static, Bytes> {
        stream::unfold(self, |mut c| async move {
            if c.done {
                return None;
            }
            let frame = c.next_frame().await;
            Some((frame, c))
        })
        .boxed()
    }

    async fn next_frame(&mut self) -> Bytes {
        // Asked for the next frame: the transport took the last one.
        self.written = self.sent;
        if self.reporter.due().is_some_and(|at| at <= Instant::now()) {
            self.reporter.report(self.written).await;
        }
        // Check the producer at least once per lease, so a gone one is noticed within a lease.
        let idle_at = Instant::now() + idle_interval(&self.log);
        // While it waits for events the connection keeps reporting on time (what it wrote last
        // may be the room the producer waits for), beside the read, which a report never
        // cancels; `None` once the connection has been idle for the interval.
        let item = {
            let (reporter, written) = (&mut self.reporter, self.written);
            let read = self.reader.recv();
            tokio::pin!(read);
            loop {
                let wake = reporter.due().map_or(idle_at, |at| at.min(idle_at));
                tokio::select! {
                    biased;
                    item = &mut read => break Some(item),
                    () = tokio::time::sleep_until(wake.into()) => {
                        if Instant::now() >= idle_at {
                            break None;
                        }
                        reporter.report(written).await;
                    }
                }
            }
        };
        match item {
            Some(Ok(ReadItem::Events(events))) => {
                let mut buf = BytesMut::new();
                for (seq, payload) in events {
                    if let Err(e) = self.encode(&mut buf, seq, &payload) {
                        buf.extend_from_slice(&self.broken("stream_failed", &e));
                        self.done = true;
                        break;
                    }
                    self.sent = seq;
                }
                buf.freeze()
            }
            Some(Ok(ReadItem::Closed(CloseReason::Completed))) => {
                self.done = true;
                Bytes::new()
            }
            Some(Ok(ReadItem::Closed(reason))) => {
                self.done = true;
                self.broken("stream_closed", &reason.to_string())
            }
            Some(Err(RedisError::Gap { floor, .. })) => {
                self.done = true;
                let next = self.reader.last_id() + 1;
                let reason = format!(
                    "events from {next} were released before they were sent (floor {floor})"
                );
                self.broken("replay_gap", &reason)
            }
            Some(Err(e)) if e.is_stream_lost() => {
                self.done = true;
                self.broken("stream_closed", &format!("stream lost: {e}"))
            }
            // Redis cannot be reached: end this connection with a retry hint; the reconnect
            // resumes from the last id sent, or is answered 503 while Redis is still down.
            Some(Err(_)) => {
                self.done = true;
                self.retry_frame()
            }
            None => match self.producer_state().await {
                Some(reason) => {
                    self.done = true;
                    self.broken("stream_closed", &reason.to_string())
                }
                None => Bytes::from_static(replay_ring_sse::KEEP_ALIVE),
            },
        }
    }

    /// After an idle period: `Some` when the producer is gone without closing the stream.
    async fn producer_state(&self) -> Option<CloseReason> {
        // The reader sees a close or new events on its next read.
        let moved =
            |state: RedisStreamState| state.closed.is_some() || state.head > self.reader.last_id();
        if moved(self.stream.state().await.ok()?)
            || !self.log.producer_gone(&self.stream).await.ok()?
        {
            return None;
        }
        // It may have closed, or taken the lease back and appended, while it was looked at again.
        (!moved(self.stream.state().await.ok()?)).then(producer_gone)
    }

    fn encode(&self, buf: &mut BytesMut, seq: u64, payload: &[u8]) -> Result<(), String> {
        let v: Value = serde_json::from_slice(payload).map_err(|e| e.to_string())?;
        let data = match &v["message"] {
            Value::Null => String::new(),
            m => m.to_string(),
        };
        let mut frame = Frame::new()
            .id(self.identity.event_id(seq))
            .data(data.as_bytes());
        if let Some(ms) = v["retry"].as_u64() {
            frame = frame.retry(Duration::from_millis(ms));
        }
        frame.encode_into(buf).map_err(|e| e.to_string())
    }

    /// The explicit last frame (a JSON-RPC error for the stream's request, or a retry hint on
    /// the GET stream), as on the owning replica.
    fn broken(&self, code: &str, reason: &str) -> Bytes {
        let stream = self.identity.stream.to_string();
        let data = serde_json::json!({ "error": code, "stream": stream, "reason": reason });
        let message = format!("event stream {stream}: {reason}");
        let frame = broken_frame(self.request.clone(), message, data, self.retry);
        let mut buf = BytesMut::new();
        match frame.message.as_deref() {
            Some(m) => {
                let json = serde_json::to_string(m).unwrap_or_default();
                let _ = Frame::new().data(json.as_bytes()).encode_into(&mut buf);
            }
            None => return self.retry_frame(),
        }
        buf.freeze()
    }

    /// The event that names the cursor `seq` (empty data, the `retry:` hint): it sets the
    /// client's last event id before any replayed event arrives.
    fn priming(&self, seq: u64) -> Bytes {
        let mut buf = BytesMut::new();
        let _ = Frame::new()
            .id(self.identity.event_id(seq))
            .retry(self.retry)
            .data(b"")
            .encode_into(&mut buf);
        buf.freeze()
    }

    fn retry_frame(&self) -> Bytes {
        let mut buf = BytesMut::new();
        let _ = Frame::new().retry(self.retry).encode_into(&mut buf);
        buf.freeze()
    }
}

/// A `200 text/event-stream` response carrying `frames`.
fn event_stream_response(frames: BoxStream<'static, Bytes>) -> Response<Body> {
    let frames = SyncStream(SyncWrapper::new(frames))
        .filter(|b| std::future::ready(!b.is_empty()))
        .map(|b| Ok::<_, Infallible>(http_body::Frame::data(b)));
    let body = BodyExt::boxed(StreamBody::new(SyncStream(SyncWrapper::new(
        frames.boxed(),
    ))));
    let mut response = Response::new(body);
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(EVENT_STREAM_CONTENT_TYPE),
    );
    headers.insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache"),
    );
    response
}

/// A `Sync` stream (the response body must be) over a stream only ever polled through `&mut`.
struct SyncStream<S>(SyncWrapper<S>);

impl<S: futures::Stream + Unpin> futures::Stream for SyncStream<S> {
    type Item = S::Item;
    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<S::Item>> {
        self.0.get_mut().poll_next_unpin(cx)
    }
}
