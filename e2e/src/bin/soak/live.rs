//! A live client: connects, reads every event, cuts its connection after a random time and
//! resumes from its cursor, until the run ends.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::stream::{open, Cursor, Seen, Tally};
use crate::Args;

/// What the live clients did, besides what they received ([`Tally`]).
#[derive(Debug, Default)]
pub struct LiveTotals {
    /// Events received, lost, duplicated; slow-consumer frames.
    pub tally: Tally,
    /// Responses opened with 200.
    pub connections: AtomicU64,
    /// Connections the client cut.
    pub cuts: AtomicU64,
    /// Connections the server ended (end of body or a terminal frame).
    pub server_closes: AtomicU64,
    /// Resumes refused (416 with an explicit gap, or any other non-200 status).
    pub refused: AtomicU64,
    /// Events skipped by accepting explicit gaps (416 → resume from the floor).
    pub refused_events: AtomicU64,
    /// Connections that failed (connect, head, read).
    pub io_errors: AtomicU64,
    /// Connections that received nothing, not even a keep-alive, for the idle limit.
    pub idle_stalls: AtomicU64,
    /// Named frames received (`end`, `stream-error`).
    pub terminal_frames: AtomicU64,
}

/// How one live client ended.
#[derive(Debug)]
pub struct ClientReport {
    /// Its last event.
    pub cursor: Option<u64>,
    /// Events it received.
    pub events: u64,
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

/// Why a connection ended.
enum End {
    Cut,
    ServerClosed,
    StreamEnded,
}

/// One live client: connect, read, cut at a random time, resume from its cursor, until `deadline`.
pub async fn live_client(
    args: Arc<Args>,
    index: usize,
    deadline: Instant,
    totals: Arc<LiveTotals>,
) -> ClientReport {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (index as u64 + 1).wrapping_mul(0xff51afd7ed558ccd));
    let mut cursor = Cursor::default();
    let mut events = 0u64;
    let mean = Duration::from_millis(args.mean_connection_ms);
    // Spread the initial connections over the first seconds.
    tokio::time::sleep(Duration::from_millis(rng.next() % 5_000)).await;
    while Instant::now() < deadline {
        let cut_at = (Instant::now() + rng.exp(mean)).min(deadline);
        match connection(&args, &mut cursor, cut_at, &mut events, &totals).await {
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
    ClientReport {
        cursor: cursor.last,
        events,
    }
}

async fn connection(
    args: &Args,
    cursor: &mut Cursor,
    cut_at: Instant,
    events: &mut u64,
    totals: &LiveTotals,
) -> io::Result<End> {
    let idle = Duration::from_secs(args.idle_limit_secs);
    let last = cursor.last_event_id();
    let mut response = open(args.addr, &args.path, last.as_deref(), None, idle).await?;
    if response.status == 416 {
        // An explicit gap: the events after the cursor are gone. Count them as refused (never
        // as silently lost) and accept the loss the way a client should: resume from the floor.
        totals.refused.fetch_add(1, Relaxed);
        let floor = response
            .head
            .header("replay-floor")
            .and_then(|f| f.parse().ok());
        if let (Some(floor), Some(_)) = (floor, cursor.last) {
            totals
                .refused_events
                .fetch_add(cursor.accept_gap(floor), Relaxed);
            return Ok(End::ServerClosed);
        }
    }
    if response.status != 200 {
        totals.refused.fetch_add(1, Relaxed);
        return Err(io::Error::other(format!(
            "status {} for {last:?}",
            response.status
        )));
    }
    totals.connections.fetch_add(1, Relaxed);
    loop {
        let now = Instant::now();
        if now >= cut_at {
            return Ok(End::Cut);
        }
        let wait = (cut_at - now).min(idle);
        match tokio::time::timeout(wait, response.body.read()).await {
            Err(_) if Instant::now() >= cut_at => return Ok(End::Cut),
            Err(_) => {
                totals.idle_stalls.fetch_add(1, Relaxed);
                return Err(io::Error::new(io::ErrorKind::TimedOut, "idle"));
            }
            Ok(read) => {
                if !read? {
                    return Ok(End::ServerClosed);
                }
            }
        }
        for (frame, first) in response.body.frames() {
            let seen = cursor
                .check(&frame, first, &totals.tally)
                .inspect_err(|_| {
                    totals.tally.malformed.fetch_add(1, Relaxed);
                })?;
            match seen {
                Seen::Event => *events += 1,
                Seen::Terminal => {
                    totals.terminal_frames.fetch_add(1, Relaxed);
                    // `end` closes the stream; anything else named is a terminal error frame.
                    if frame.event.as_deref() == Some("end") {
                        return Ok(End::StreamEnded);
                    }
                    return Ok(End::ServerClosed);
                }
                Seen::Priming | Seen::Duplicate | Seen::Other => {}
            }
        }
    }
}
