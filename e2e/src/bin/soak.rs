//! Soak load client for the SSE example server: many live clients that cut their connection at
//! random times and resume with `Last-Event-ID`, plus a few clients that stop reading, for a fixed
//! time. Every live client checks each event id against its own cursor (the next id must be
//! exactly cursor + 1, the first frame of a resumed connection must prime at the cursor), and the
//! run fails on any lost or duplicated event, any refused resume, or a live client that stopped
//! making progress. With `--server-pid` it samples the server's resident memory and fails if it
//! keeps growing after warm-up.
//!
//! ```text
//! soak --addr 127.0.0.1:8080 --clients 1000 --stalled 5 --seconds 600 --server-pid 1234
//! ```
//!
//! `scripts/soak` starts the server, raises the file-descriptor limit and runs this.

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use replay_ring_e2e::http::{Buffered, ChunkedDecoder};
use replay_ring_sse::EventId;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream};

/// Soak test: live clients with random cuts and stalled clients against one SSE stream.
#[derive(Debug, Parser)]
struct Args {
    /// The server's address.
    #[arg(long)]
    addr: SocketAddr,
    /// Path of the event stream.
    #[arg(long, default_value = "/events")]
    path: String,
    /// Live clients (each one cuts and resumes at random times).
    #[arg(long, default_value_t = 1000)]
    clients: usize,
    /// Clients that read the response head and then never read again.
    #[arg(long, default_value_t = 5)]
    stalled: usize,
    /// Length of the run.
    #[arg(long, default_value_t = 600)]
    seconds: u64,
    /// Mean time a live client stays connected before it cuts (exponentially distributed).
    #[arg(long, default_value_t = 20_000)]
    mean_connection_ms: u64,
    /// A live client that receives nothing (not even a keep-alive) for this long has stalled.
    #[arg(long, default_value_t = 40)]
    idle_limit_secs: u64,
    /// Server process to sample `VmRSS` from.
    #[arg(long)]
    server_pid: Option<u32>,
    /// Seconds between progress lines and memory samples.
    #[arg(long, default_value_t = 10)]
    sample_secs: u64,
    /// Samples skipped as warm-up before memory growth is judged.
    #[arg(long, default_value_t = 6)]
    warmup_samples: usize,
    /// Largest tolerated growth of the server's RSS from the end of warm-up to the end of the
    /// run, in percent (compares the mean of the first and the last three samples).
    #[arg(long, default_value_t = 10)]
    max_rss_growth_pct: u64,
}

/// Totals over every client, updated as they go.
#[derive(Debug, Default)]
struct Totals {
    events: AtomicU64,
    connections: AtomicU64,
    cuts: AtomicU64,
    server_closes: AtomicU64,
    lost: AtomicU64,
    duplicated: AtomicU64,
    priming_mismatches: AtomicU64,
    refused: AtomicU64,
    /// Events skipped by accepting explicit gaps (416 → resume from the floor).
    refused_events: AtomicU64,
    io_errors: AtomicU64,
    idle_stalls: AtomicU64,
    terminal_events: AtomicU64,
}

/// How one live client ended.
#[derive(Debug)]
struct ClientReport {
    cursor: Option<u64>,
    events: u64,
}

/// A small xorshift generator per client (no shared state, reproducible per client index).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Exponentially distributed duration with the given mean.
    fn exp(&mut self, mean: Duration) -> Duration {
        let u = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        mean.mul_f64(-(1.0 - u).max(1e-12).ln())
    }
}

/// One parsed event-stream frame (the server writes LF line ends only).
#[derive(Debug, Default)]
struct Frame {
    id: Option<String>,
    event: Option<String>,
    data: Option<String>,
}

/// Splits complete frames off the front of `buf`.
fn take_frames(buf: &mut Vec<u8>) -> Vec<Frame> {
    let mut frames = Vec::new();
    while let Some(end) = buf.windows(2).position(|w| w == b"\n\n") {
        let raw: Vec<u8> = buf.drain(..end + 2).collect();
        let mut frame = Frame::default();
        for line in String::from_utf8_lossy(&raw[..end]).split('\n') {
            if line.starts_with(':') {
                continue;
            }
            let (field, value) = line.split_once(':').unwrap_or((line, ""));
            let value = value.strip_prefix(' ').unwrap_or(value).to_string();
            match field {
                "id" => frame.id = Some(value),
                "event" => frame.event = Some(value),
                "data" => {
                    let data = frame.data.get_or_insert_with(String::new);
                    if !data.is_empty() {
                        data.push('\n');
                    }
                    data.push_str(&value);
                }
                _ => {}
            }
        }
        frames.push(frame);
    }
    frames
}

async fn connect(addr: SocketAddr, recv_buffer: Option<u32>) -> io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    if let Some(size) = recv_buffer {
        socket.set_recv_buffer_size(size)?;
    }
    tokio::time::timeout(Duration::from_secs(10), socket.connect(addr))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect"))?
}

async fn request(
    stream: &mut TcpStream,
    addr: SocketAddr,
    path: &str,
    cursor: Option<&str>,
) -> io::Result<()> {
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n");
    if let Some(c) = cursor {
        req.push_str(&format!("Last-Event-ID: {c}\r\n"));
    }
    req.push_str("\r\n");
    stream.write_all(req.as_bytes()).await
}

/// Why a connection ended.
enum End {
    Cut,
    ServerClosed,
    StreamEnded,
}

/// One live client: connect, read, cut at a random time, resume from its cursor, until `deadline`.
async fn live_client(
    args: Arc<Args>,
    index: usize,
    deadline: Instant,
    totals: Arc<Totals>,
) -> ClientReport {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (index as u64 + 1).wrapping_mul(0xff51afd7ed558ccd));
    // Stream name and epoch from the first id seen; later ids must match.
    let mut identity: Option<(String, u64)> = None;
    let mut cursor: Option<u64> = None;
    let mut events = 0u64;
    let mean = Duration::from_millis(args.mean_connection_ms);
    // Spread the initial connections over the first seconds.
    tokio::time::sleep(Duration::from_millis(rng.next() % 5_000)).await;
    while Instant::now() < deadline {
        let cut_at = (Instant::now() + rng.exp(mean)).min(deadline);
        let last = match (&identity, cursor) {
            (Some((stream, epoch)), Some(c)) => Some(format!("{stream}.{epoch:x}.{c}")),
            _ => None,
        };
        match connection(
            &args,
            last.as_deref(),
            cut_at,
            &mut identity,
            &mut cursor,
            &mut events,
            &totals,
        )
        .await
        {
            Ok(End::Cut) => {
                totals.cuts.fetch_add(1, Relaxed);
            }
            Ok(End::ServerClosed) => {
                totals.server_closes.fetch_add(1, Relaxed);
            }
            Ok(End::StreamEnded) => break,
            Err(e) => {
                totals.io_errors.fetch_add(1, Relaxed);
                if index < 3 {
                    eprintln!("client {index}: {e}");
                }
                // A retry delay, not synchronisation: a refused or failed connection backs off.
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
    ClientReport { cursor, events }
}

async fn connection(
    args: &Args,
    last: Option<&str>,
    cut_at: Instant,
    identity: &mut Option<(String, u64)>,
    cursor: &mut Option<u64>,
    events: &mut u64,
    totals: &Totals,
) -> io::Result<End> {
    let mut stream = connect(args.addr, None).await?;
    request(&mut stream, args.addr, &args.path, last).await?;
    totals.connections.fetch_add(1, Relaxed);
    let idle = Duration::from_secs(args.idle_limit_secs);
    let mut r = Buffered::new(stream);
    let head = tokio::time::timeout(idle, r.read_head())
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no response head"))??
        .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "closed before head"))?;
    let status: u16 = head
        .first_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    if status == 416 {
        // An explicit gap: the events after the cursor are gone. Count them as refused (never
        // as silently lost) and accept the loss the way a client should: resume from the floor.
        let floor: Option<u64> = head.header("replay-floor").and_then(|f| f.parse().ok());
        totals.refused.fetch_add(1, Relaxed);
        if let (Some(floor), Some(c)) = (floor, *cursor) {
            totals
                .refused_events
                .fetch_add(floor.saturating_sub(c + 1), Relaxed);
            *cursor = Some(floor - 1);
            return Ok(End::ServerClosed);
        }
    }
    if status != 200 {
        totals.refused.fetch_add(1, Relaxed);
        return Err(io::Error::other(format!("status {status} for {last:?}")));
    }
    let chunked = head.is_chunked();
    let mut decoder = ChunkedDecoder::new();
    let mut body = Vec::new();
    let mut first_frame = true;
    loop {
        let now = Instant::now();
        if now >= cut_at {
            return Ok(End::Cut);
        }
        let wait = (cut_at - now).min(idle);
        let bytes = match tokio::time::timeout(wait, r.read_some(64 * 1024)).await {
            Err(_) if Instant::now() >= cut_at => return Ok(End::Cut),
            Err(_) => {
                totals.idle_stalls.fetch_add(1, Relaxed);
                return Err(io::Error::new(io::ErrorKind::TimedOut, "idle"));
            }
            Ok(read) => read?,
        };
        if bytes.is_empty() {
            return Ok(End::ServerClosed);
        }
        if chunked {
            decoder.feed(&bytes, &mut body)?;
        } else {
            body.extend_from_slice(&bytes);
        }
        for frame in take_frames(&mut body) {
            let priming = first_frame;
            first_frame = false;
            if let Some(name) = frame.event.as_deref() {
                // `end` closes the stream; anything else named is a terminal error frame.
                totals.terminal_events.fetch_add(1, Relaxed);
                if name == "end" {
                    return Ok(End::StreamEnded);
                }
                return Ok(End::ServerClosed);
            }
            let Some(raw) = frame.id.as_deref() else {
                continue;
            };
            let id = EventId::parse(raw)
                .map_err(|e| io::Error::other(format!("bad id {raw:?}: {e}")))?;
            let this = (id.stream.as_str().to_string(), id.epoch.get());
            match identity {
                Some(known) if *known != this => {
                    return Err(io::Error::other(format!("stream changed to {raw}")));
                }
                _ => *identity = Some(this),
            }
            if priming && frame.data.as_deref() == Some("") {
                // The priming frame names the position the server resumes from.
                if let Some(c) = *cursor {
                    if id.seq != c {
                        totals.priming_mismatches.fetch_add(1, Relaxed);
                    }
                }
                cursor.get_or_insert(id.seq);
                continue;
            }
            match *cursor {
                Some(c) if id.seq == c + 1 => {}
                Some(c) if id.seq > c + 1 => {
                    totals.lost.fetch_add(id.seq - c - 1, Relaxed);
                }
                Some(_) => {
                    totals.duplicated.fetch_add(1, Relaxed);
                    continue;
                }
                None => {}
            }
            *cursor = Some(id.seq);
            *events += 1;
            totals.events.fetch_add(1, Relaxed);
        }
    }
}

/// A client that reads the response head and then holds the connection without reading. A small
/// receive buffer makes the server's writes back up soon.
async fn stalled_client(args: Arc<Args>, deadline: Instant) -> io::Result<u16> {
    let mut stream = connect(args.addr, Some(4096)).await?;
    request(&mut stream, args.addr, &args.path, None).await?;
    let mut r = Buffered::new(stream);
    let head = r
        .read_head()
        .await?
        .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "closed before head"))?;
    tokio::time::sleep_until(deadline.into()).await;
    drop(r);
    Ok(head
        .first_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0))
}

fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

fn mean(xs: &[u64]) -> f64 {
    xs.iter().sum::<u64>() as f64 / xs.len().max(1) as f64
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = Arc::new(Args::parse());
    let start = Instant::now();
    let deadline = start + Duration::from_secs(args.seconds);
    let totals = Arc::new(Totals::default());

    let stalled: Vec<_> = (0..args.stalled)
        .map(|_| tokio::spawn(stalled_client(args.clone(), deadline)))
        .collect();
    let clients: Vec<_> = (0..args.clients)
        .map(|i| tokio::spawn(live_client(args.clone(), i, deadline, totals.clone())))
        .collect();

    let mut rss = Vec::new();
    let mut ticker = tokio::time::interval(Duration::from_secs(args.sample_secs));
    ticker.tick().await;
    while Instant::now() + Duration::from_millis(100) < deadline {
        ticker.tick().await;
        let kib = args.server_pid.and_then(rss_kib);
        if let Some(k) = kib {
            rss.push(k);
        }
        println!(
            "t={:>4}s events={} connections={} cuts={} server_closes={} lost={} duplicated={} \
             refused={} io_errors={} rss_kib={}",
            start.elapsed().as_secs(),
            totals.events.load(Relaxed),
            totals.connections.load(Relaxed),
            totals.cuts.load(Relaxed),
            totals.server_closes.load(Relaxed),
            totals.lost.load(Relaxed),
            totals.duplicated.load(Relaxed),
            totals.refused.load(Relaxed),
            totals.io_errors.load(Relaxed),
            kib.map_or("-".into(), |k| k.to_string()),
        );
    }

    let mut reports = Vec::new();
    for c in clients {
        reports.push(c.await.expect("client task"));
    }
    let mut stalled_status = BTreeMap::<String, usize>::new();
    for s in stalled {
        let key = match s.await.expect("stalled task") {
            Ok(status) => format!("status {status}"),
            Err(e) => format!("error {}", e.kind()),
        };
        *stalled_status.entry(key).or_default() += 1;
    }

    let heads: Vec<u64> = reports.iter().filter_map(|r| r.cursor).collect();
    let newest = heads.iter().copied().max().unwrap_or(0);
    let oldest = heads.iter().copied().min().unwrap_or(0);
    let idle_clients = reports.iter().filter(|r| r.events == 0).count();
    let t = &totals;
    println!(
        "soak: {} live clients, {} stalled ({stalled_status:?}), {} s",
        args.clients, args.stalled, args.seconds
    );
    println!(
        "soak: events delivered {}, connections {}, cuts {}, server closes {}, terminal frames {}",
        t.events.load(Relaxed),
        t.connections.load(Relaxed),
        t.cuts.load(Relaxed),
        t.server_closes.load(Relaxed),
        t.terminal_events.load(Relaxed),
    );
    println!(
        "soak: lost {}, duplicated {}, priming mismatches {}, refused resumes {} ({} events \
         explicitly gone), io errors {} (idle stalls {})",
        t.lost.load(Relaxed),
        t.duplicated.load(Relaxed),
        t.priming_mismatches.load(Relaxed),
        t.refused.load(Relaxed),
        t.refused_events.load(Relaxed),
        t.io_errors.load(Relaxed),
        t.idle_stalls.load(Relaxed),
    );
    println!("soak: final cursors {oldest}..={newest}, clients without events {idle_clients}");
    let mut ok = t.lost.load(Relaxed) == 0
        && t.duplicated.load(Relaxed) == 0
        && t.priming_mismatches.load(Relaxed) == 0
        && t.refused.load(Relaxed) == 0
        && t.idle_stalls.load(Relaxed) == 0
        && idle_clients == 0;
    if rss.len() >= args.warmup_samples + 6 {
        let judged = &rss[args.warmup_samples..];
        let first = mean(&judged[..3]);
        let last = mean(&judged[judged.len() - 3..]);
        let growth = (last - first) / first * 100.0;
        println!(
            "soak: server RSS {:.0} KiB after warm-up, {:.0} KiB at the end ({growth:+.1}%), \
             max {} KiB",
            first,
            last,
            judged.iter().max().unwrap_or(&0)
        );
        ok &= growth <= args.max_rss_growth_pct as f64;
    } else if args.server_pid.is_some() {
        println!("soak: too few RSS samples to judge memory");
    }
    println!("soak: {}", if ok { "PASS" } else { "FAIL" });
    if ok {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    }
}
