//! The example server's pieces: configuration, shared state, the producer task, the axum router
//! and the per-connection event-stream body. `main.rs` parses flags and serves; the integration
//! test (`tests/sse_server.rs`) includes this file to run the same router in-process.

use std::convert::Infallible;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use bytes::{Bytes, BytesMut};
use replay_ring::{CloseReason, Producer, PushError, ReadError, ReplayRing};
use replay_ring_sse::{
    encode_event, encode_keep_alive, encode_priming, resume, BackpressureClock, ConnectionId,
    Epoch, Frame, HttpResponse, Retention, RetentionConfig, StreamId, StreamIdentity, StreamState,
    LAST_EVENT_ID_HEADER,
};
use tokio::sync::Notify;
use tokio::time::{sleep, sleep_until, Instant};

/// The browser page, served at `/`.
pub const PAGE: &str = include_str!("page.html");

/// Server settings (one stream per server).
#[derive(Debug, Clone)]
pub struct Config {
    /// Ring capacity (rounded up to a power of two by the ring).
    pub capacity: usize,
    /// Events per second; 0 = as fast as the window allows.
    pub rate: f64,
    /// Produce this many events, then close with `Completed` (`None` = forever).
    pub events: Option<u64>,
    /// Retention settings.
    pub retention: RetentionConfig,
    /// Idle time after which a keep-alive comment is sent.
    pub keep_alive: Duration,
    /// Reconnection delay announced in the priming event's `retry:`.
    pub retry: Duration,
    /// Simultaneous connections (ring readers).
    pub max_readers: usize,
    /// Stream name used in event ids.
    pub stream: StreamId,
    /// Stream epoch; a fresh random one per process unless given.
    pub epoch: Epoch,
    /// Start producing immediately instead of at the first `/events` request.
    pub eager: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            capacity: 1024,
            rate: 20.0,
            events: None,
            retention: RetentionConfig::default(),
            keep_alive: Duration::from_secs(15),
            retry: Duration::from_millis(1000),
            max_readers: 16,
            stream: StreamId::new("events").expect("valid stream name"),
            epoch: Epoch::generate(),
            eager: false,
        }
    }
}

/// Server-level counters (the ring's own are in `ReplayRing::metrics`).
#[derive(Debug, Default)]
pub struct Counters {
    /// Event-stream responses opened (200).
    pub streams_opened: AtomicU64,
    /// Refused `/events` requests, by status.
    pub refused_400: AtomicU64,
    /// 404: stream or session lost.
    pub refused_404: AtomicU64,
    /// 409: cursor ahead of head.
    pub refused_409: AtomicU64,
    /// 416: cursor below the floor.
    pub refused_416: AtomicU64,
    /// 503: no reader slot.
    pub refused_503: AtomicU64,
    /// Keep-alive comments sent.
    pub keep_alives: AtomicU64,
    /// Event frames written to connections.
    pub frames_written: AtomicU64,
    /// Streams closed by the producer's backpressure bound.
    pub backpressure_timeouts: AtomicU64,
}

fn bump(counter: &AtomicU64) {
    // Relaxed: statistics only; nothing is ordered by these counters.
    counter.fetch_add(1, Ordering::Relaxed);
}

/// State shared by the handlers and the producer.
#[derive(Debug)]
pub struct AppState {
    /// The stream's window.
    pub ring: ReplayRing<Bytes>,
    /// Name and epoch, for ids and `Last-Event-ID` checks.
    pub identity: StreamIdentity,
    /// Retention policy, shared by every connection and the producer (locked per batch).
    pub retention: Mutex<Retention>,
    /// Settings.
    pub config: Config,
    /// Counters for `/metrics`.
    pub counters: Counters,
    started: AtomicBool,
    start: Notify,
}

impl AppState {
    fn retention(&self) -> MutexGuard<'_, Retention> {
        // A panic while holding the lock leaves plain data behind; keep serving.
        self.retention.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lets the producer start (idempotent).
    pub fn start_producer(&self) {
        // Relaxed: the Notify carries the wake-up; the flag only avoids redundant notifications.
        if !self.started.swap(true, Ordering::Relaxed) {
            self.start.notify_one();
        }
    }
}

/// Builds the shared state and the producer. Run [`run_producer`] and serve [`router`].
pub fn build(config: Config) -> Result<(Arc<AppState>, Producer<Bytes>), replay_ring::BuildError> {
    let (producer, ring) = ReplayRing::<Bytes>::builder()
        .capacity(config.capacity)
        .max_readers(config.max_readers)
        .build()?;
    let state = Arc::new(AppState {
        identity: StreamIdentity::new(config.stream, config.epoch),
        retention: Mutex::new(Retention::new(config.retention, config.max_readers)),
        ring,
        counters: Counters::default(),
        started: AtomicBool::new(false),
        start: Notify::new(),
        config,
    });
    if state.config.eager {
        state.start_producer();
    }
    Ok((state, producer))
}

/// Produces `{"n":id}` events at the configured rate. When the window is full it waits (backpressure),
/// releasing expired events as their window passes; past the bound it closes the stream with
/// `BackpressureTimeout`. Never drops an event.
pub async fn run_producer(mut producer: Producer<Bytes>, state: Arc<AppState>) {
    state.start.notified().await;
    let config = &state.config;
    let mut ticker = (config.rate > 0.0).then(|| {
        let mut t = tokio::time::interval(Duration::from_secs_f64(1.0 / config.rate));
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        t
    });
    let mut clock = BackpressureClock::new(config.retention.backpressure_timeout);
    let mut produced = 0u64;
    loop {
        if config.events.is_some_and(|n| produced >= n) {
            producer.close(CloseReason::Completed);
            return;
        }
        match &mut ticker {
            Some(t) => {
                t.tick().await;
            }
            // Unthrottled: still yield so connections get scheduled on a busy runtime.
            None => tokio::task::yield_now().await,
        }
        loop {
            match producer.try_push_with(|id| Bytes::from(format!("{{\"n\":{id}}}"))) {
                Ok(_) => {
                    clock.on_pushed();
                    produced += 1;
                    break;
                }
                Err(PushError::Full(_)) => {
                    let now = Instant::now();
                    let (released, expiry) = {
                        let mut retention = state.retention();
                        let released = retention.release_expired(&state.ring, now.into_std());
                        (released, retention.next_expiry())
                    };
                    if released.is_some() {
                        continue;
                    }
                    let deadline = match clock.on_full(now.into_std()) {
                        Ok(deadline) => deadline,
                        Err(reason) => {
                            bump(&state.counters.backpressure_timeouts);
                            producer.close(reason);
                            return;
                        }
                    };
                    let wake = expiry.map_or(deadline, |e| e.min(deadline));
                    tokio::select! {
                        _ = producer.ready() => {}
                        _ = sleep_until(Instant::from_std(wake)) => {}
                    }
                }
                Err(PushError::IdsExhausted(_)) => {
                    producer.close(CloseReason::error("event ids exhausted"));
                    return;
                }
                // `PushError` is non-exhaustive: end the stream explicitly on anything else.
                Err(other) => {
                    producer.close(CloseReason::error(other.to_string()));
                    return;
                }
            }
        }
    }
}

/// `GET /`, `GET /events`, `GET /metrics`.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/", get(page))
        .route("/events", get(events))
        .route("/metrics", get(metrics))
        .with_state(state)
}

async fn page() -> impl IntoResponse {
    ([(header::CACHE_CONTROL, "no-store")], Html(PAGE))
}

fn to_axum(plan: &HttpResponse, body: Body) -> Response {
    let mut response = Response::new(body);
    *response.status_mut() =
        StatusCode::from_u16(plan.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    for (name, value) in &plan.headers {
        if let Ok(value) = HeaderValue::from_str(value) {
            response.headers_mut().append(*name, value);
        }
    }
    response
}

async fn events(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let last_event_id = headers.get(LAST_EVENT_ID_HEADER).map(HeaderValue::as_bytes);
    let resumed = match resume(&state.ring, &state.identity, last_event_id) {
        Ok(resumed) => resumed,
        Err(refused) => {
            let plan = HttpResponse::refused(&refused);
            bump(match plan.status {
                400 => &state.counters.refused_400,
                404 => &state.counters.refused_404,
                409 => &state.counters.refused_409,
                416 => &state.counters.refused_416,
                _ => &state.counters.refused_503,
            });
            return to_axum(&plan, Body::from(plan.body.clone()));
        }
    };
    let start = resumed.reader.cursor() - 1;
    let conn = {
        let mut retention = state.retention();
        let conn = retention.connect(start);
        if let (Some(_), Some(acked)) = (&conn, resumed.acknowledged) {
            // A resume acknowledges everything up to its cursor.
            let _ = retention.acknowledge(&state.ring, acked);
        }
        conn
    };
    let Some(conn) = conn else {
        // More connections than the retention table holds (cannot happen with max_readers
        // entries, kept for robustness): refuse explicitly.
        let refused = replay_ring_sse::Refused {
            decision: replay_ring_sse::ResumeDecision::Busy {
                limit: state.config.max_readers,
            },
            state: Some(resumed.state),
        };
        let plan = HttpResponse::refused(&refused);
        bump(&state.counters.refused_503);
        return to_axum(&plan, Body::from(plan.body.clone()));
    };
    state.start_producer();
    bump(&state.counters.streams_opened);
    // Snapshot after the acknowledgement, so the advertised floor is the one now in force.
    let plan = HttpResponse::stream(&StreamState::of(state.identity, &state.ring));
    let mut first = BytesMut::with_capacity(128);
    encode_priming(
        &mut first,
        state.identity.event_id(start),
        Some(state.config.retry),
    );
    let connection = Connection {
        state: state.clone(),
        reader: resumed.reader,
        conn: Some(conn),
        buf: BytesMut::with_capacity(16 * 1024),
        unconfirmed: None,
        first: Some(first.freeze()),
        finished: false,
    };
    let body = futures_util::stream::unfold(connection, |mut c| async move {
        let chunk = c.next_chunk().await?;
        Some((Ok::<Bytes, Infallible>(chunk), c))
    });
    to_axum(&plan, Body::from_stream(body))
}

/// One event-stream response: drains the reader as fast as the socket takes the bytes.
struct Connection {
    state: Arc<AppState>,
    reader: replay_ring::Reader<Bytes>,
    conn: Option<ConnectionId>,
    /// Reused encode buffer: each chunk is split off it, so steady state does not allocate.
    buf: BytesMut,
    /// Last id of the previous chunk: hyper asking for the next chunk means it took that one.
    unconfirmed: Option<u64>,
    first: Option<Bytes>,
    finished: bool,
}

impl Connection {
    async fn next_chunk(&mut self) -> Option<Bytes> {
        if let Some(first) = self.first.take() {
            return Some(first);
        }
        if self.finished {
            return None;
        }
        let now = Instant::now().into_std();
        if let (Some(through), Some(conn)) = (self.unconfirmed.take(), &self.conn) {
            let mut retention = self.state.retention();
            retention.on_written(conn, through, now);
            retention.release_expired(&self.state.ring, now);
        }
        let identity = self.state.identity;
        let keep_alive = self.state.config.keep_alive;
        let outcome = tokio::select! {
            read = self.reader.read() => match read {
                Ok(batch) => {
                    let mut last = 0;
                    for (id, payload) in batch.iter() {
                        // Cannot fail: no event name is given and the id is a validated EventId.
                        let _ = encode_event(&mut self.buf, identity.event_id(id), None, payload);
                        last = id;
                    }
                    let n = batch.len() as u64;
                    drop(batch);
                    // Relaxed: statistics.
                    self.state.counters.frames_written.fetch_add(n, Ordering::Relaxed);
                    self.unconfirmed = Some(last);
                    Ok(())
                }
                Err(e) => Err(e),
            },
            _ = sleep(keep_alive) => {
                bump(&self.state.counters.keep_alives);
                encode_keep_alive(&mut self.buf);
                let now = Instant::now().into_std();
                self.state.retention().release_expired(&self.state.ring, now);
                Ok(())
            }
        };
        if let Err(err) = outcome {
            self.finished = true;
            encode_terminal(&mut self.buf, &err);
        }
        Some(self.buf.split().freeze())
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.state
                .retention()
                .disconnect(conn, Instant::now().into_std());
        }
    }
}

/// The stream's last frame: `event: end` after `Completed`, `event: stream-error` otherwise. No id:
/// the client's cursor stays on the last real event.
fn encode_terminal(buf: &mut BytesMut, err: &ReadError) {
    let mut data = String::with_capacity(160);
    let name = match err {
        ReadError::Closed(CloseReason::Completed) => {
            data.push_str(r#"{"reason":"completed"}"#);
            "end"
        }
        ReadError::Closed(CloseReason::BackpressureTimeout { waited }) => {
            let _ = write!(
                data,
                r#"{{"error":"backpressure_timeout","waited_ms":{},"message":"producer backpressured past the bound; stream closed, nothing dropped"}}"#,
                waited.as_millis()
            );
            "stream-error"
        }
        ReadError::Closed(CloseReason::ProducerDropped) => {
            data.push_str(
                r#"{"error":"producer_dropped","message":"stream ended without completing"}"#,
            );
            "stream-error"
        }
        ReadError::Closed(_) => {
            data.push_str(
                r#"{"error":"stream_failed","message":"stream ended with an application error"}"#,
            );
            "stream-error"
        }
        ReadError::Gap { next, floor, head } => {
            let _ = write!(
                data,
                r#"{{"error":"replay_gap","requested":{},"floor":{floor},"head":{head},"message":"events were released before this connection wrote them"}}"#,
                next - 1
            );
            "stream-error"
        }
        // `ReadError` is non-exhaustive: any other end is still an explicit error frame.
        _ => {
            data.push_str(r#"{"error":"stream_failed","message":"stream ended"}"#);
            "stream-error"
        }
    };
    // Cannot fail: static event names without CR/LF.
    let _ = Frame::new()
        .event(name)
        .data(data.as_bytes())
        .encode_into(buf);
}

async fn metrics(State(state): State<Arc<AppState>>) -> impl IntoResponse {
    let m = state.ring.metrics();
    let r = state.retention().stats();
    let c = &state.counters;
    // Relaxed: statistics.
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let mut out = String::with_capacity(4096);
    let rows: [(&str, &str, &str, u64); 24] = [
        (
            "events_enqueued_total",
            "counter",
            "Events accepted by the producer.",
            m.events_enqueued,
        ),
        (
            "events_released_total",
            "counter",
            "Events released from the window.",
            m.events_released,
        ),
        (
            "resumes_ok_total",
            "counter",
            "Resumes that replayed a suffix.",
            m.resumes_ok,
        ),
        (
            "resumes_noop_total",
            "counter",
            "Resumes at the head.",
            m.resumes_noop,
        ),
        (
            "resumes_below_floor_total",
            "counter",
            "Resumes refused below the floor (416).",
            m.resumes_below_floor,
        ),
        (
            "resumes_ahead_of_head_total",
            "counter",
            "Resumes refused ahead of the head (409).",
            m.resumes_ahead_of_head,
        ),
        (
            "producer_full_total",
            "counter",
            "Pushes refused because the window was full.",
            m.producer_full,
        ),
        (
            "producer_waits_total",
            "counter",
            "Times the producer waited for space.",
            m.producer_waits,
        ),
        (
            "readers_active",
            "gauge",
            "Registered readers.",
            m.readers_active as u64,
        ),
        ("floor", "gauge", "Oldest retained id.", m.floor),
        ("head", "gauge", "Newest id.", m.head),
        ("capacity", "gauge", "Window capacity.", m.capacity as u64),
        (
            "ack_releases_total",
            "counter",
            "Releases by resume acknowledgement.",
            r.ack_releases,
        ),
        (
            "window_releases_total",
            "counter",
            "Releases by resumption-window expiry.",
            r.window_releases,
        ),
        (
            "streams_opened_total",
            "counter",
            "Event-stream responses opened.",
            load(&c.streams_opened),
        ),
        (
            "frames_written_total",
            "counter",
            "Event frames written.",
            load(&c.frames_written),
        ),
        (
            "keep_alives_total",
            "counter",
            "Keep-alive comments written.",
            load(&c.keep_alives),
        ),
        (
            "refused_400_total",
            "counter",
            "Resumes refused: invalid Last-Event-ID.",
            load(&c.refused_400),
        ),
        (
            "refused_404_total",
            "counter",
            "Resumes refused: stream or session lost.",
            load(&c.refused_404),
        ),
        (
            "refused_409_total",
            "counter",
            "Resumes refused: cursor ahead of head.",
            load(&c.refused_409),
        ),
        (
            "refused_416_total",
            "counter",
            "Resumes refused: cursor below floor.",
            load(&c.refused_416),
        ),
        (
            "refused_503_total",
            "counter",
            "Connections refused: no reader slot.",
            load(&c.refused_503),
        ),
        (
            "backpressure_timeouts_total",
            "counter",
            "Streams closed by the backpressure bound.",
            load(&c.backpressure_timeouts),
        ),
        (
            "closed",
            "gauge",
            "1 once the stream has ended.",
            u64::from(state.ring.is_closed()),
        ),
    ];
    for (name, kind, help, value) in rows {
        let _ = writeln!(out, "# HELP replay_ring_{name} {help}");
        let _ = writeln!(out, "# TYPE replay_ring_{name} {kind}");
        let _ = writeln!(out, "replay_ring_{name} {value}");
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out)
}
