//! The SSE load client: C connections to `GET /events`, every frame counted and checked.
//!
//! Each connection follows its stream until the server ends it (`event: end`) and checks that its
//! ids are gap-free from the first event it got, or from id 1 with [`LoadSpec::from_first`]
//! (`replay_ring_sse::client::ContinuityVerifier`; the example server's wire ids are checked for
//! their stream and epoch too),
//! that the payload names the same id, and that it got every id up to the last one published. A
//! server that lags a connection (tokio broadcast's `Lagged`) shows up as a gap: counted in
//! `dropped`, never hidden. With [`LoadSpec::reconnect_at`] each connection also leaves mid-stream
//! and resumes with `Last-Event-ID`, and must continue from the next id.
//!
//! The measurement window opens once all C connections have their response headers: delivered
//! events/s = frames received in the window / window length; CPU per delivered event = the
//! server's CPU time over the window / those frames; RSS per connection = (server RSS with all C
//! connected - RSS before the first) / C. Latency: receive time minus the payload's publish time,
//! for events published inside the window, on up to [`LATENCY_CONNECTIONS`] connections.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Release;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Acquire, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use http_body_util::{BodyDataStream, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use replay_ring_sse::client::{ContinuityError, ContinuityVerifier};
use replay_ring_sse::{EventId, KEEP_ALIVE_EVENT_NAME};
use serde::Serialize;
use tokio::net::TcpStream;
use tokio::sync::{Notify, Semaphore};

use crate::payload::{decode, unix_ns};
use crate::proc_stats::{cpu_ns, rss_bytes};

/// Connections that record latency samples (spread over all C).
pub const LATENCY_CONNECTIONS: usize = 1_000;

/// Connection attempts in flight at once (keeps the listen backlog from overflowing).
const CONNECTS_IN_FLIGHT: usize = 256;

/// One load run.
#[derive(Debug, Clone)]
pub struct LoadSpec {
    /// The server.
    pub addr: SocketAddr,
    /// The server's pid, for `/proc` readings (`None`: not measured).
    pub server_pid: Option<u32>,
    /// Connections to open.
    pub connections: usize,
    /// The id of the last event the server publishes (each stream must reach it).
    pub events: u64,
    /// Give up (and report the unfinished connections) after this long.
    pub timeout: Duration,
    /// Every connection was open before the server published its first event (a server started
    /// with `--start-after C`): each must get id 1 first. Ids a server without priming events
    /// (the baseline) skipped before a connection's first event count as dropped; a connection
    /// of the example server whose priming event names a cursor other than 0 (it joined after
    /// the first publish) fails with that mismatch as its error.
    pub from_first: bool,
    /// Each connection leaves once it has the event with this id and comes back at once with
    /// `Last-Event-ID` (the wire id of that event), as a client whose network dropped: it must get
    /// the rest of the stream from the next id, gap-free (`None`: stay connected). The server must
    /// accept a resume (the example server; the baseline has none) and have room for the
    /// reconnection while the old connection is still being closed.
    pub reconnect_at: Option<u64>,
}

/// What one run measured. Serialized as one JSON line by the `sse-load` bin.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LoadReport {
    /// Connections asked for.
    pub connections: usize,
    /// Connections that got a 200 and an event stream.
    pub connected: usize,
    /// Connections refused or failed before their stream started (first error in `errors`).
    pub failed: usize,
    /// Connections that reached the last event and the end of the stream with no gap.
    pub complete: usize,
    /// Event frames received, in total.
    pub frames: u64,
    /// Event frames received inside the measurement window.
    pub window_frames: u64,
    /// Window length in seconds.
    pub window_s: f64,
    /// `window_frames / window_s`.
    pub events_per_s: f64,
    /// Ids skipped, summed over connections (a lagging server's drops).
    pub dropped: u64,
    /// Ids received twice or out of order.
    pub duplicates: u64,
    /// Connections that left and resumed ([`LoadSpec::reconnect_at`]).
    pub reconnects: usize,
    /// Keep-alive events (`event: keep-alive`, a server's `--keep-alive-event`) received: skipped,
    /// like keep-alive comments, which are not counted.
    pub keep_alive_events: u64,
    /// Latency samples.
    pub latency_samples: usize,
    /// Publish-to-client latency percentiles, ns (`None` without samples).
    pub p50_ns: Option<u64>,
    /// 99th percentile.
    pub p99_ns: Option<u64>,
    /// 99.9th percentile.
    pub p999_ns: Option<u64>,
    /// Server RSS before the first connection, bytes.
    pub rss_before: Option<u64>,
    /// Server RSS with every connection open, bytes.
    pub rss_connected: Option<u64>,
    /// `(rss_connected - rss_before) / connected`.
    pub rss_per_connection: Option<f64>,
    /// Server CPU time (user + system) over the window, ns.
    pub cpu_ns: Option<u64>,
    /// `cpu_ns / window_frames`.
    pub cpu_ns_per_event: Option<f64>,
    /// First few errors, for the log.
    pub errors: Vec<String>,
}

/// Shared between the connection tasks and the coordinator.
#[derive(Default)]
struct Shared {
    connected: AtomicUsize,
    failed: AtomicUsize,
    all_connected: Notify,
    /// Set when the window opens.
    measuring: AtomicBool,
    /// Unix ns at which the window opened.
    window_start_unix: AtomicU64,
}

/// One connection's tally.
#[derive(Debug, Default)]
struct ConnTally {
    frames: u64,
    window_frames: u64,
    last_received: Option<Instant>,
    last_id: Option<u64>,
    dropped: u64,
    duplicates: u64,
    reconnected: bool,
    keep_alive_events: u64,
    ended: bool,
    latencies: Vec<u64>,
    error: Option<String>,
}

/// Runs the load and returns the report. Connection-level failures are counted in the report;
/// `Err` only for a failure of the run itself.
pub async fn run(spec: &LoadSpec) -> io::Result<LoadReport> {
    let shared = Arc::new(Shared::default());
    let connects = Arc::new(Semaphore::new(CONNECTS_IN_FLIGHT));
    let rss_before = spec.server_pid.map(rss_bytes).transpose()?;
    let stride = spec.connections.div_ceil(LATENCY_CONNECTIONS).max(1);
    let deadline = tokio::time::Instant::now() + spec.timeout;
    let tasks: Vec<_> = (0..spec.connections)
        .map(|i| {
            let (shared, connects) = (shared.clone(), connects.clone());
            let conn = ConnSpec {
                addr: spec.addr,
                events: spec.events,
                from_first: spec.from_first,
                reconnect_at: spec.reconnect_at,
                sample: i % stride == 0,
            };
            tokio::spawn(async move {
                let work = connection(conn, &shared, &connects);
                match tokio::time::timeout_at(deadline, work).await {
                    Ok(tally) => tally,
                    Err(_) => ConnTally {
                        error: Some("timed out before the end of the stream".into()),
                        ..ConnTally::default()
                    },
                }
            })
        })
        .collect();

    // Window start: every connection has its stream (or failed).
    let everyone = async {
        loop {
            let notified = shared.all_connected.notified();
            // Acquire: pairs with the tasks' counter increments.
            let settled = shared.connected.load(Acquire) + shared.failed.load(Acquire);
            if settled >= spec.connections {
                break;
            }
            notified.await;
        }
    };
    let _ = tokio::time::timeout_at(deadline, everyone).await;
    let window_start = Instant::now();
    shared.window_start_unix.store(unix_ns(), Relaxed);
    // Release: the tasks read the window start after seeing the flag (Acquire).
    shared.measuring.store(true, Release);
    let rss_connected = spec.server_pid.map(rss_bytes).transpose()?;
    let cpu_start = spec.server_pid.map(cpu_ns).transpose()?;

    let mut tallies = Vec::with_capacity(tasks.len());
    for t in tasks {
        tallies.push(t.await.map_err(io::Error::other)?);
    }
    let cpu_end = spec.server_pid.map(cpu_ns).transpose()?;

    let mut report = LoadReport {
        connections: spec.connections,
        connected: shared.connected.load(Relaxed),
        failed: shared.failed.load(Relaxed),
        rss_before,
        rss_connected,
        ..LoadReport::default()
    };
    let mut window_end = window_start;
    let mut latencies = Vec::new();
    for t in tallies {
        report.frames += t.frames;
        report.window_frames += t.window_frames;
        report.dropped += t.dropped;
        report.duplicates += t.duplicates;
        report.reconnects += usize::from(t.reconnected);
        report.keep_alive_events += t.keep_alive_events;
        if let Some(at) = t.last_received {
            window_end = window_end.max(at);
        }
        let complete = t.ended
            && t.last_id == Some(spec.events)
            && t.duplicates == 0
            && (spec.reconnect_at.is_none() || t.reconnected);
        if t.error.is_none() && complete && t.dropped == 0 {
            report.complete += 1;
        }
        if let Some(e) = t.error {
            if report.errors.len() < 5 {
                report.errors.push(e);
            }
        } else if !complete && report.errors.len() < 5 {
            report.errors.push(format!(
                "stream ended at id {:?} of {} (end event: {})",
                t.last_id, spec.events, t.ended
            ));
        }
        latencies.extend(t.latencies);
    }
    report.window_s = (window_end - window_start).as_secs_f64();
    if report.window_s > 0.0 {
        report.events_per_s = report.window_frames as f64 / report.window_s;
    }
    latencies.sort_unstable();
    report.latency_samples = latencies.len();
    let pct = |q: f64| {
        (!latencies.is_empty())
            .then(|| latencies[((latencies.len() - 1) as f64 * q).round() as usize])
    };
    (report.p50_ns, report.p99_ns, report.p999_ns) = (pct(0.50), pct(0.99), pct(0.999));
    if let (Some(before), Some(after)) = (rss_before, rss_connected) {
        if report.connected > 0 {
            report.rss_per_connection =
                Some((after as f64 - before as f64) / report.connected as f64);
        }
    }
    if let (Some(a), Some(b)) = (cpu_start, cpu_end) {
        report.cpu_ns = Some(b - a);
        if report.window_frames > 0 {
            report.cpu_ns_per_event = Some((b - a) as f64 / report.window_frames as f64);
        }
    }
    Ok(report)
}

/// What one connection task does.
#[derive(Debug, Clone, Copy)]
struct ConnSpec {
    addr: SocketAddr,
    /// The last id of the stream.
    events: u64,
    from_first: bool,
    reconnect_at: Option<u64>,
    /// Records latency samples.
    sample: bool,
}

/// One connection, from connect to the end of its stream (with one reconnection, if asked).
async fn connection(spec: ConnSpec, shared: &Shared, connects: &Semaphore) -> ConnTally {
    let mut tally = ConnTally::default();
    let response = {
        let _permit = connects.acquire().await.expect("semaphore never closed");
        open(spec.addr, None).await
    };
    let mut body = match response {
        Ok(body) => {
            // Release: pairs with the coordinator's Acquire count.
            shared.connected.fetch_add(1, Release);
            body
        }
        Err(e) => {
            shared.failed.fetch_add(1, Release);
            tally.error = Some(e);
            shared.all_connected.notify_one();
            return tally;
        }
    };
    shared.all_connected.notify_one();
    let mut verifier = if spec.from_first {
        ContinuityVerifier::with_cursor(0)
    } else {
        ContinuityVerifier::new()
    };
    while let Some(cursor) = follow(body, &spec, shared, &mut verifier, &mut tally).await {
        // The old connection is closed with its body, dropped in `follow`.
        verifier.on_reconnect();
        tally.reconnected = true;
        body = match open(spec.addr, Some(&cursor)).await {
            Ok(body) => body,
            Err(e) => {
                tally.error = Some(format!("resume from {cursor}: {e}"));
                return tally;
            }
        };
    }
    if !tally.ended && tally.error.is_none() {
        tally.error = Some(format!(
            "stream closed at id {:?} of {} without an end event",
            tally.last_id, spec.events
        ));
    }
    tally
}

/// Reads one response's event stream into `tally` until it ends, fails, or reaches
/// `spec.reconnect_at` (on this connection's first visit), where it returns the wire id to resume
/// from.
async fn follow(
    body: hyper::body::Incoming,
    spec: &ConnSpec,
    shared: &Shared,
    verifier: &mut ContinuityVerifier,
    tally: &mut ConnTally,
) -> Option<String> {
    let mut stream = BodyDataStream::new(body).eventsource();
    while let Some(event) = stream.next().await {
        let event = match event {
            Ok(event) => event,
            Err(e) => {
                tally.error = Some(format!("event stream: {e}"));
                break;
            }
        };
        match event.event.as_str() {
            "end" => {
                tally.ended = true;
                break;
            }
            "message" | "" => {}
            // No id, no data: the cursor stays where it is.
            KEEP_ALIVE_EVENT_NAME => {
                tally.keep_alive_events += 1;
                continue;
            }
            other => {
                tally.error = Some(format!("`event: {other}` {}", event.data));
                break;
            }
        }
        let received = Instant::now();
        // The example server's ids are `stream.epoch.seq` (whose stream and epoch must not change
        // within the connection); the baseline's are plain numbers.
        let (id, wire) = match EventId::parse(&event.id) {
            Ok(wire) => (wire.seq, Some(wire)),
            Err(_) => match event.id.parse::<u64>() {
                Ok(id) => (id, None),
                Err(_) => {
                    tally.error = Some(format!("unparsable id {:?}", event.id));
                    break;
                }
            },
        };
        if event.data.is_empty() {
            // A priming event (the example server's first frame: an id and no data) sets the
            // cursor, so the first real event is checked too.
            let primed = match &wire {
                Some(wire) => verifier.on_priming_id(wire),
                None => verifier.on_priming(id),
            };
            if let Err(e) = primed {
                tally.error = Some(e.to_string());
                break;
            }
            continue;
        }
        let checked = match &wire {
            Some(wire) => verifier.on_event_id(wire),
            None => verifier.on_event(id),
        };
        match checked {
            Ok(()) => {}
            Err(ContinuityError::Gap { expected, got, .. }) => tally.dropped += got - expected,
            Err(ContinuityError::Duplicate { .. }) => tally.duplicates += 1,
            Err(e) => {
                tally.error = Some(e.to_string());
                break;
            }
        }
        let payload = match decode(&event.data) {
            Ok(p) if p.n == id => p,
            _ => {
                tally.error = Some(format!("id {id}: payload {:?}", event.data));
                break;
            }
        };
        tally.frames += 1;
        tally.last_id = Some(tally.last_id.map_or(id, |l| l.max(id)));
        tally.last_received = Some(received);
        // Acquire: pairs with the coordinator's Release store; the window start is then visible.
        if shared.measuring.load(Acquire) {
            tally.window_frames += 1;
            if let (true, Some(t)) = (spec.sample, payload.t) {
                if t >= shared.window_start_unix.load(Relaxed) {
                    tally.latencies.push(unix_ns().saturating_sub(t));
                }
            }
        }
        if spec.reconnect_at == Some(id) && !tally.reconnected {
            return Some(event.id);
        }
    }
    None
}

/// Connects, sends `GET /events` (with `Last-Event-ID: cursor`, if given), and returns the body of
/// a `200 text/event-stream` response.
async fn open(addr: SocketAddr, cursor: Option<&str>) -> Result<hyper::body::Incoming, String> {
    let tcp = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect {addr}: {e}"))?;
    let _ = tcp.set_nodelay(true);
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(conn);
    let mut request = hyper::Request::get("/events")
        .header(hyper::header::HOST, addr.to_string())
        .header(hyper::header::ACCEPT, "text/event-stream");
    if let Some(cursor) = cursor {
        request = request.header("last-event-id", cursor);
    }
    let request = request
        .body(Empty::<Bytes>::new())
        .map_err(|e| e.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("request: {e}"))?;
    if response.status() != hyper::StatusCode::OK {
        return Err(format!("status {}", response.status()));
    }
    Ok(response.into_body())
}
