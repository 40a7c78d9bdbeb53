//! Loopback chaos proxy for SSE tests: forwards HTTP/1.1 requests to one upstream port, logs each
//! request (method, path, `Last-Event-ID`, status), and can cut event streams after k frames or after
//! a delay, throttle how fast it reads event streams (a slow consumer), and hold new requests back (a
//! client kept away). All knobs except the listen/upstream addresses can change while it runs.
//!
//! Heads and request bodies pass through byte for byte. Response bodies are de-chunked to count SSE
//! frames and re-chunked towards the client (chunk boundaries may differ, payload bytes never do),
//! so a cut can end exactly after a frame and the client still sees a truncated, not a finished, body.
//! Each request gets its own upstream connection, so a cut never poisons a pooled one.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{watch, Notify};
use tokio::task::{JoinHandle, JoinSet};

use crate::http::{encode_chunk, Buffered, ChunkedDecoder, Head, LAST_CHUNK};
use crate::sse::FrameScanner;

/// Sentinel for "off" in the atomic knobs.
const OFF: u64 = u64::MAX;
/// How much of a response body the log keeps (enough for a JSON error body).
const BODY_PREFIX: usize = 4096;
/// `SO_RCVBUF` an upstream socket with [`ProxyConfig::upstream_recv_buffer`] gets once its reads are
/// unthrottled (the kernel caps it at `net.core.rmem_max`).
pub const WIDE_RECV_BUFFER: usize = 4 << 20;

/// Largest single read from upstream when not throttled.
const MAX_READ: usize = 64 * 1024;

/// Start-up configuration of a [`ChaosProxy`].
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// Where requests go; must be a loopback address.
    pub upstream: SocketAddr,
    /// Where to listen; must be loopback. Default `127.0.0.1:0` (any free port).
    pub listen: SocketAddr,
    /// Cut each event stream after this many event frames (keep-alives do not count).
    pub cut_after_frames: Option<usize>,
    /// Cut each event stream this long after its response head arrived.
    pub cut_after: Option<Duration>,
    /// Cut the first this-many resumed event streams (a `GET` with `Last-Event-ID`) just before
    /// their first frame with data: the client gets the response head, any priming events (an id
    /// and no data), and nothing of a replayed event past the bytes of it that shared a read with
    /// what came before. The cut counts as one after the frames forwarded.
    pub cut_resumes_before_data: usize,
    /// Read responses from upstream at most this many bytes per second (`Some(0)` pauses reads).
    pub throttle_bytes_per_sec: Option<u64>,
    /// `SO_RCVBUF` for upstream sockets, so a throttled read backs up into the server quickly.
    /// Once an event stream's reads are unthrottled (`set_throttle(None)`), its socket's buffer
    /// is widened to [`WIDE_RECV_BUFFER`] for the rest of the connection: a buffer smaller than
    /// loopback's segments makes the kernel drop segments it advertised room for, and each
    /// dropped segment then waits for the server's retransmission timer, whose backoff grows
    /// while the proxy is blocked on a slow client.
    pub upstream_recv_buffer: Option<u32>,
    /// After a cut, keep reading (and discarding) the upstream stream, so the server believes
    /// its writes were delivered — as when a network path dies beyond the server's socket.
    pub drain_upstream_after_cut: bool,
    /// Start with new requests held back (see [`ProxyHandle::set_hold`]).
    pub hold: bool,
    /// Print a line per request start/finish to stderr (the binary turns this on).
    pub log_to_stderr: bool,
}

impl ProxyConfig {
    /// Pass-through configuration for `upstream`.
    pub fn new(upstream: SocketAddr) -> Self {
        Self {
            upstream,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            cut_after_frames: None,
            cut_after: None,
            cut_resumes_before_data: 0,
            throttle_bytes_per_sec: None,
            upstream_recv_buffer: None,
            drain_upstream_after_cut: false,
            hold: false,
            log_to_stderr: false,
        }
    }
}

/// How one proxied exchange ended (so far).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Request received, not yet forwarded (possibly held).
    Pending,
    /// Response head forwarded; body still flowing.
    Streaming,
    /// Body forwarded completely.
    Complete,
    /// The proxy cut the stream after this many event frames.
    CutAfterFrames(usize),
    /// The proxy cut the stream on its schedule.
    CutOnSchedule,
    /// The client went away first.
    ClientClosed,
    /// Upstream closed or broke before the body was complete.
    UpstreamClosed,
    /// Upstream could not be reached or sent garbage; the client got a 502 if possible.
    UpstreamError(String),
}

impl Outcome {
    /// Whether the proxy deliberately cut this exchange.
    pub fn is_cut(&self) -> bool {
        matches!(self, Outcome::CutAfterFrames(_) | Outcome::CutOnSchedule)
    }
}

/// What the proxy saw of one request/response exchange.
#[derive(Debug, Clone)]
pub struct RequestLog {
    /// Order of arrival, from 0.
    pub seq: usize,
    /// Client connection number, from 0.
    pub conn: usize,
    /// Request method.
    pub method: String,
    /// Request target as sent.
    pub path: String,
    /// The request's `Last-Event-ID` header, verbatim.
    pub last_event_id: Option<String>,
    /// All request header fields.
    pub request_headers: Vec<(String, String)>,
    /// The raw request body as forwarded.
    pub request_body: Vec<u8>,
    /// Response status line, once received.
    pub status_line: Option<String>,
    /// Response status code, once received.
    pub status: Option<u16>,
    /// Response header fields.
    pub response_headers: Vec<(String, String)>,
    /// Whether the response was `text/event-stream`.
    pub event_stream: bool,
    /// Event frames forwarded to the client.
    pub frames: usize,
    /// Keep-alive frames forwarded (comments and keep-alive events).
    pub keep_alive_frames: usize,
    /// `id:` values of forwarded frames, in order.
    pub frame_ids: Vec<String>,
    /// `id:` values of forwarded frames without data (priming events: they set the client's last
    /// event id and dispatch nothing), in order; each is in `frame_ids` too.
    pub priming_ids: Vec<String>,
    /// Event frames read from upstream after a cut and discarded (drain mode).
    pub dropped_frames: usize,
    /// Payload bytes forwarded to the client.
    pub body_bytes: u64,
    /// First bytes of the response payload.
    pub body_prefix: Vec<u8>,
    /// How the exchange ended.
    pub outcome: Outcome,
}

impl RequestLog {
    /// Response header `name` (case-insensitive).
    pub fn response_header(&self, name: &str) -> Option<&str> {
        self.response_headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Totals over the log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters {
    /// Client connections accepted.
    pub connections: u64,
    /// Requests seen.
    pub requests: usize,
    /// Event frames forwarded.
    pub frames: usize,
    /// Keep-alive frames forwarded (comments and keep-alive events).
    pub keep_alive_frames: usize,
    /// Streams cut after k frames.
    pub cuts_after_frames: usize,
    /// Streams cut on schedule.
    pub cuts_on_schedule: usize,
    /// Payload bytes forwarded.
    pub body_bytes: u64,
}

struct Shared {
    upstream: SocketAddr,
    upstream_recv_buffer: Option<u32>,
    drain_after_cut: bool,
    log_to_stderr: bool,
    /// Runtime knobs, `OFF` = disabled. Each is read independently and guards no other data, so
    /// every access is Relaxed; the value takes effect at the next frame/read that loads it.
    cut_after_frames: AtomicUsize,
    cut_after_ms: AtomicU64,
    /// How many resumed streams are still to be cut before their first data frame.
    resume_cuts_left: AtomicUsize,
    /// Throttle and hold live in watch channels so a paused reader / held request wakes on change.
    throttle: watch::Sender<Option<u64>>,
    hold: watch::Sender<bool>,
    connections: AtomicU64,
    logs: Mutex<Vec<RequestLog>>,
    changed: Notify,
}

impl Shared {
    fn logs(&self) -> MutexGuard<'_, Vec<RequestLog>> {
        // A panic in another connection task must not hide the log from the test.
        self.logs.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn update(&self, idx: usize, f: impl FnOnce(&mut RequestLog)) {
        {
            let mut logs = self.logs();
            f(&mut logs[idx]);
            if self.log_to_stderr {
                let l = &logs[idx];
                if l.outcome != Outcome::Streaming && l.outcome != Outcome::Pending {
                    eprintln!(
                        "chaos-proxy #{} {} {} last-event-id={:?} -> {} frames={} outcome={:?}",
                        l.seq,
                        l.method,
                        l.path,
                        l.last_event_id,
                        l.status_line.as_deref().unwrap_or("-"),
                        l.frames,
                        l.outcome
                    );
                }
            }
        }
        self.changed.notify_waiters();
    }
}

/// The proxy; see [`ChaosProxy::start`].
pub struct ChaosProxy;

impl ChaosProxy {
    /// Binds the listener and starts serving on the current tokio runtime.
    pub async fn start(config: ProxyConfig) -> io::Result<ProxyHandle> {
        if !config.upstream.ip().is_loopback() || !config.listen.ip().is_loopback() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "chaos proxy is loopback-only",
            ));
        }
        let listener = TcpListener::bind(config.listen).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            upstream: config.upstream,
            upstream_recv_buffer: config.upstream_recv_buffer,
            drain_after_cut: config.drain_upstream_after_cut,
            log_to_stderr: config.log_to_stderr,
            cut_after_frames: AtomicUsize::new(config.cut_after_frames.unwrap_or(usize::MAX)),
            cut_after_ms: AtomicU64::new(config.cut_after.map_or(OFF, |d| d.as_millis() as u64)),
            resume_cuts_left: AtomicUsize::new(config.cut_resumes_before_data),
            throttle: watch::Sender::new(config.throttle_bytes_per_sec),
            hold: watch::Sender::new(config.hold),
            connections: AtomicU64::new(0),
            logs: Mutex::new(Vec::new()),
            changed: Notify::new(),
        });
        let accept = tokio::spawn(accept_loop(listener, shared.clone()));
        Ok(ProxyHandle {
            addr,
            shared,
            accept,
        })
    }
}

/// A running proxy. Dropping it stops the listener and every connection it serves.
pub struct ProxyHandle {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

impl Drop for ProxyHandle {
    fn drop(&mut self) {
        // Aborting the accept task drops its JoinSet, which aborts every connection task.
        self.accept.abort();
    }
}

impl ProxyHandle {
    /// The listening address (loopback).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT` for this proxy.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Snapshot of the request log, in arrival order.
    pub fn requests(&self) -> Vec<RequestLog> {
        self.shared.logs().clone()
    }

    /// Totals over the log.
    pub fn counters(&self) -> Counters {
        let logs = self.shared.logs();
        let mut c = Counters {
            // Relaxed: a statistic; pairs with the Relaxed increment in accept_loop only.
            connections: self.shared.connections.load(Ordering::Relaxed),
            requests: logs.len(),
            ..Counters::default()
        };
        for l in logs.iter() {
            c.frames += l.frames;
            c.keep_alive_frames += l.keep_alive_frames;
            c.body_bytes += l.body_bytes;
            match l.outcome {
                Outcome::CutAfterFrames(_) => c.cuts_after_frames += 1,
                Outcome::CutOnSchedule => c.cuts_on_schedule += 1,
                _ => {}
            }
        }
        c
    }

    /// Cut event streams after `k` event frames (`None`: never). Applies to open streams too.
    pub fn set_cut_after_frames(&self, k: Option<usize>) {
        // Relaxed: a standalone knob, loaded Relaxed at each frame in pump_body.
        self.shared
            .cut_after_frames
            .store(k.unwrap_or(usize::MAX), Ordering::Relaxed);
    }

    /// Cut event streams this long after their head (`None`: never). Applies to new responses.
    pub fn set_cut_after(&self, d: Option<Duration>) {
        // Relaxed: a standalone knob, loaded Relaxed once per response in pump_body.
        self.shared
            .cut_after_ms
            .store(d.map_or(OFF, |d| d.as_millis() as u64), Ordering::Relaxed);
    }

    /// Read event streams at most `bps` bytes/s (`Some(0)` pauses, `None` unthrottled). Applies
    /// immediately, to open streams too.
    pub fn set_throttle(&self, bps: Option<u64>) {
        self.shared.throttle.send_replace(bps);
    }

    /// While `true`, requests are logged but not forwarded; releasing forwards them in order.
    pub fn set_hold(&self, hold: bool) {
        self.shared.hold.send_replace(hold);
    }

    /// Waits until `pred` holds for the log, up to `timeout`; returns the log that satisfied it,
    /// or the last one seen as the error.
    pub async fn wait_for(
        &self,
        timeout: Duration,
        mut pred: impl FnMut(&[RequestLog]) -> bool,
    ) -> Result<Vec<RequestLog>, Vec<RequestLog>> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.shared.changed.notified();
            tokio::pin!(notified);
            // Register before checking, so an update between check and await is not missed.
            notified.as_mut().enable();
            let logs = self.requests();
            if pred(&logs) {
                return Ok(logs);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Err(self.requests());
            }
        }
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                // Relaxed: a statistic and a connection number; nothing else is published with it.
                let conn = shared.connections.fetch_add(1, Ordering::Relaxed) as usize;
                let shared = shared.clone();
                conns.spawn(async move {
                    let _ = serve_client(shared, stream, conn).await;
                });
            }
            // Reap finished connection tasks so the set does not grow for the proxy's lifetime.
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

async fn serve_client(shared: Arc<Shared>, client: TcpStream, conn: usize) -> io::Result<()> {
    let _ = client.set_nodelay(true);
    let (cr, mut cw) = client.into_split();
    let mut creader = Buffered::new(cr);
    loop {
        let Some(req) = creader.read_head().await? else {
            return Ok(());
        };
        let mut parts = req.first_line.split(' ');
        let method = parts.next().unwrap_or_default().to_string();
        let path = parts.next().unwrap_or_default().to_string();
        let idx = {
            let mut logs = shared.logs();
            let seq = logs.len();
            logs.push(RequestLog {
                seq,
                conn,
                method: method.clone(),
                path,
                last_event_id: req.header("last-event-id").map(str::to_string),
                request_headers: req.headers.clone(),
                request_body: Vec::new(),
                status_line: None,
                status: None,
                response_headers: Vec::new(),
                event_stream: false,
                frames: 0,
                keep_alive_frames: 0,
                frame_ids: Vec::new(),
                priming_ids: Vec::new(),
                dropped_frames: 0,
                body_bytes: 0,
                body_prefix: Vec::new(),
                outcome: Outcome::Pending,
            });
            seq
        };
        shared.changed.notify_waiters();

        let body = read_request_body(&mut creader, &req).await?;
        shared.update(idx, |l| l.request_body = body.clone());

        let mut hold = shared.hold.subscribe();
        // Err only if the sender is gone, i.e. the proxy is shutting down.
        let _ = hold.wait_for(|held| !*held).await;

        let upstream = match connect_upstream(&shared).await {
            Ok(s) => s,
            Err(e) => {
                shared.update(idx, |l| l.outcome = Outcome::UpstreamError(e.to_string()));
                let _ = cw
                    .write_all(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    .await;
                return Err(e);
            }
        };
        let (ur, mut uw) = upstream.into_split();
        uw.write_all(&req.raw).await?;
        uw.write_all(&body).await?;
        let mut ureader = Buffered::new(ur);
        let resp = loop {
            match ureader.read_head().await {
                Ok(Some(h)) if is_interim(&h) => cw.write_all(&h.raw).await?,
                Ok(Some(h)) => break h,
                Ok(None) | Err(_) => {
                    shared.update(idx, |l| {
                        l.outcome = Outcome::UpstreamError("no response head".into())
                    });
                    let _ = cw
                        .write_all(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                        .await;
                    return Ok(());
                }
            }
        };
        let status = resp
            .first_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse::<u16>().ok());
        let event_stream = resp.header("content-type").is_some_and(|ct| {
            ct.trim()
                .to_ascii_lowercase()
                .starts_with("text/event-stream")
        });
        shared.update(idx, |l| {
            l.status_line = Some(resp.first_line.clone());
            l.status = status;
            l.response_headers = resp.headers.clone();
            l.event_stream = event_stream;
            l.outcome = Outcome::Streaming;
        });
        cw.write_all(&resp.raw).await?;

        let framing =
            if method.eq_ignore_ascii_case("HEAD") || matches!(status, Some(204) | Some(304)) {
                BodyFraming::Length(0)
            } else if resp.is_chunked() {
                BodyFraming::Chunked(ChunkedDecoder::new())
            } else if let Some(n) = resp.content_length() {
                BodyFraming::Length(n)
            } else {
                BodyFraming::UntilEof
            };
        let close_after = matches!(framing, BodyFraming::UntilEof)
            || resp.header_has_token("connection", "close")
            || req.header_has_token("connection", "close");
        let outcome = pump_body(
            &shared,
            idx,
            event_stream,
            framing,
            &mut ureader,
            &mut creader.inner,
            cw,
        )
        .await;
        let keep_going = outcome.0 == Outcome::Complete && !close_after;
        shared.update(idx, |l| l.outcome = outcome.0.clone());
        match outcome.1 {
            Some(w) if keep_going => cw = w,
            _ => return Ok(()),
        }
    }
}

/// 1xx responses other than 101 precede the real one.
fn is_interim(h: &Head) -> bool {
    let code = h.first_line.split(' ').nth(1).unwrap_or("");
    code.starts_with('1') && code != "101"
}

async fn read_request_body(
    creader: &mut Buffered<OwnedReadHalf>,
    req: &Head,
) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    if req.is_chunked() {
        // Forward the raw chunked bytes unchanged; decode only to find where the body ends.
        let mut dec = ChunkedDecoder::new();
        let mut sink = Vec::new();
        while !dec.is_done() {
            let piece = creader.read_some(MAX_READ).await?;
            if piece.is_empty() {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            let used = dec.feed(&piece, &mut sink)?;
            body.extend_from_slice(&piece[..used]);
            // Bytes past the body belong to the next pipelined request.
            creader.buf.splice(0..0, piece[used..].iter().copied());
            sink.clear();
        }
    } else if let Some(mut left) = req.content_length() {
        while left > 0 {
            let piece = creader
                .read_some(left.min(MAX_READ as u64) as usize)
                .await?;
            if piece.is_empty() {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            left -= piece.len() as u64;
            body.extend_from_slice(&piece);
        }
    }
    Ok(body)
}

async fn connect_upstream(shared: &Shared) -> io::Result<TcpStream> {
    let socket = if shared.upstream.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    if let Some(size) = shared.upstream_recv_buffer {
        // Set before connect so the advertised window (and its scaling) starts small.
        socket.set_recv_buffer_size(size)?;
    }
    let stream = socket.connect(shared.upstream).await?;
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

enum BodyFraming {
    Chunked(ChunkedDecoder),
    Length(u64),
    UntilEof,
}

impl BodyFraming {
    /// Next payload piece (possibly empty), reading at most `max` raw bytes; `None` when complete.
    async fn next_piece(
        &mut self,
        up: &mut Buffered<OwnedReadHalf>,
        max: usize,
    ) -> io::Result<Option<Vec<u8>>> {
        match self {
            BodyFraming::Length(0) => Ok(None),
            BodyFraming::Length(left) => {
                let piece = up.read_some(max.min(*left as usize)).await?;
                if piece.is_empty() {
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
                *left -= piece.len() as u64;
                Ok(Some(piece))
            }
            BodyFraming::Chunked(dec) => {
                if dec.is_done() {
                    return Ok(None);
                }
                let raw = up.read_some(max).await?;
                if raw.is_empty() {
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
                let mut out = Vec::new();
                dec.feed(&raw, &mut out)?;
                Ok(Some(out))
            }
            BodyFraming::UntilEof => {
                let piece = up.read_some(max).await?;
                Ok((!piece.is_empty()).then_some(piece))
            }
        }
    }

    fn is_chunked(&self) -> bool {
        matches!(self, BodyFraming::Chunked(_))
    }
}

/// Token bucket over upstream reads; re-reads the rate on every call.
struct Throttle {
    rate: watch::Receiver<Option<u64>>,
    since: Instant,
    used: u64,
    current: Option<u64>,
}

impl Throttle {
    /// Waits until reading is allowed; returns how many bytes may be read now.
    async fn permit(&mut self) -> usize {
        loop {
            let rate = *self.rate.borrow_and_update();
            if rate != self.current {
                self.current = rate;
                self.since = Instant::now();
                self.used = 0;
            }
            match rate {
                None => return MAX_READ,
                Some(0) => {
                    // Paused: wake only when the knob changes (or never, if the proxy is gone).
                    if self.rate.changed().await.is_err() {
                        std::future::pending::<()>().await;
                    }
                }
                Some(bps) => {
                    // Small steps (~20/s) keep the flow smooth rather than bursty.
                    let step = (bps / 20).clamp(1, MAX_READ as u64);
                    let earned = (self.since.elapsed().as_secs_f64() * bps as f64) as u64;
                    let available = earned.saturating_sub(self.used);
                    if available >= step {
                        return available.min(MAX_READ as u64) as usize;
                    }
                    let wait = Duration::from_secs_f64((step - available) as f64 / bps as f64);
                    // Rate limiting, not synchronisation; a knob change cuts the wait short.
                    let _ = tokio::time::timeout(wait, self.rate.changed()).await;
                }
            }
        }
    }

    fn consumed(&mut self, n: usize) {
        self.used += n as u64;
    }
}

/// Forwards the response body; returns the outcome and the client writer if it is still usable.
#[allow(clippy::too_many_arguments)]
async fn pump_body(
    shared: &Shared,
    idx: usize,
    event_stream: bool,
    mut framing: BodyFraming,
    up: &mut Buffered<OwnedReadHalf>,
    client_read: &mut OwnedReadHalf,
    mut cw: OwnedWriteHalf,
) -> (Outcome, Option<OwnedWriteHalf>) {
    let chunked = framing.is_chunked();
    // Relaxed: standalone knob, stored Relaxed by set_cut_after.
    let cut_ms = shared.cut_after_ms.load(Ordering::Relaxed);
    let cut_at = (event_stream && cut_ms != OFF)
        .then(|| tokio::time::Instant::now() + Duration::from_millis(cut_ms));
    let resumed = shared.logs()[idx].method == "GET" && shared.logs()[idx].last_event_id.is_some();
    // Until this resumed stream's first data frame: whether it may be cut there.
    let mut before_data = event_stream && resumed;
    // Only event streams are throttled: the page, its scripts and JSON answers load at full speed.
    let rate = if event_stream {
        shared.throttle.subscribe()
    } else {
        watch::channel(None).1
    };
    let mut throttle = Throttle {
        rate,
        since: Instant::now(),
        used: 0,
        current: None,
    };
    let mut scanner = FrameScanner::new();
    let mut frames = 0usize;
    let mut narrow = shared.upstream_recv_buffer.is_some();
    loop {
        let step = tokio::select! {
            r = async {
                let max = throttle.permit().await;
                if narrow && throttle.current.is_none() {
                    narrow = false;
                    // Best effort: a socket that refuses keeps its small buffer, which still works.
                    let _ = socket2::SockRef::from(up.inner.as_ref())
                        .set_recv_buffer_size(WIDE_RECV_BUFFER);
                }
                framing.next_piece(up, max).await
            } => r,
            _ = sleep_until_opt(cut_at) => {
                drop(cw);
                return (Outcome::CutOnSchedule, None);
            }
            _ = client_eof(client_read) => {
                return (Outcome::ClientClosed, None);
            }
        };
        let piece = match step {
            Ok(Some(p)) => p,
            Ok(None) => {
                if chunked && cw.write_all(LAST_CHUNK).await.is_err() {
                    return (Outcome::ClientClosed, None);
                }
                return (Outcome::Complete, Some(cw));
            }
            Err(_) => return (Outcome::UpstreamClosed, None),
        };
        throttle.consumed(piece.len());
        if piece.is_empty() {
            continue;
        }
        let mut send_len = piece.len();
        let mut cut = None;
        if event_stream {
            let ends = scanner.feed(&piece);
            let mut ids = Vec::new();
            let mut priming = Vec::new();
            let mut keep_alives = 0;
            let mut counted = 0;
            // Where the last complete frame of this piece ended.
            let mut complete = 0;
            for end in ends {
                if before_data && end.has_data {
                    before_data = false;
                    // Relaxed: a standalone counter; a stream that is cut takes one from it,
                    // and one that never carries data (a shadow, a retry hint) takes none.
                    let cut_here = shared
                        .resume_cuts_left
                        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                        .is_ok();
                    if cut_here {
                        send_len = complete;
                        cut = Some(frames);
                        break;
                    }
                }
                complete = end.end;
                if end.keep_alive {
                    keep_alives += 1;
                    continue;
                }
                frames += 1;
                counted += 1;
                if !end.has_data {
                    priming.extend(end.id.clone());
                }
                ids.extend(end.id);
                // Relaxed: standalone knob, stored Relaxed by set_cut_after_frames.
                let k = shared.cut_after_frames.load(Ordering::Relaxed);
                if frames >= k {
                    send_len = end.end;
                    cut = Some(frames);
                    break;
                }
            }
            shared.update(idx, |l| {
                l.frames += counted;
                l.keep_alive_frames += keep_alives;
                l.frame_ids.extend(ids);
                l.priming_ids.extend(priming);
            });
        }
        let data = &piece[..send_len];
        shared.update(idx, |l| {
            l.body_bytes += data.len() as u64;
            let room = BODY_PREFIX.saturating_sub(l.body_prefix.len());
            l.body_prefix
                .extend_from_slice(&data[..room.min(data.len())]);
        });
        let wrote = if data.is_empty() {
            // A cut before anything of this piece: an empty chunk would end the body cleanly.
            Ok(())
        } else if chunked {
            cw.write_all(&encode_chunk(data)).await
        } else {
            cw.write_all(data).await
        };
        if wrote.is_err() {
            return (Outcome::ClientClosed, None);
        }
        if let Some(n) = cut {
            let _ = cw.flush().await;
            // Dropping the write half sends FIN: the client sees a truncated body.
            drop(cw);
            if shared.drain_after_cut {
                drain(shared, idx, framing, up, scanner, &piece[send_len..]).await;
            }
            return (Outcome::CutAfterFrames(n), None);
        }
    }
}

/// Reads and discards the rest of a cut stream, counting the event frames the client never saw.
async fn drain(
    shared: &Shared,
    idx: usize,
    mut framing: BodyFraming,
    up: &mut Buffered<OwnedReadHalf>,
    mut scanner: FrameScanner,
    rest: &[u8],
) {
    let mut piece = rest.to_vec();
    loop {
        let n = scanner
            .feed(&piece)
            .iter()
            .filter(|e| !e.keep_alive)
            .count();
        if n > 0 {
            shared.update(idx, |l| l.dropped_frames += n);
        }
        match framing.next_piece(up, MAX_READ).await {
            Ok(Some(p)) => piece = p,
            _ => return,
        }
    }
}

async fn sleep_until_opt(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Resolves when the client closes its side (or errors); waits forever if it sends more data.
async fn client_eof(r: &mut OwnedReadHalf) {
    let mut b = [0u8; 1];
    match r.peek(&mut b).await {
        Ok(0) | Err(_) => {}
        Ok(_) => std::future::pending().await,
    }
}
