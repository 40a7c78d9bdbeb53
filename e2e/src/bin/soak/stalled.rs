//! A stalled client: opens the stream, reads the response head and then nothing for a while, so
//! the server's writes back up and its slow-consumer policy has to cut the connection. After each
//! stall it reads what its socket holds (checking every id) to find out whether the server ended
//! the connection, then resumes from its last event: the resume must be served from exactly there
//! (200, priming at the cursor) or refused explicitly (416), never answered with a 200 that skips
//! ids. It repeats until the run ends, then resumes once more.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::stream::{open, Body, Cursor, Tally};
use crate::Args;

/// How long the read after a stall may take to reach the end of a connection the server ended.
/// The socket holds a few MB at most; loopback delivers that in well under a second.
const DRAIN_LIMIT: Duration = Duration::from_secs(10);

/// How long the final resume is followed, to check that it continues at the cursor.
const FINAL_FOLLOW: Duration = Duration::from_secs(3);

/// What the stalled clients did.
#[derive(Debug, Default)]
pub struct StalledTotals {
    /// Events read after the stalls, lost, duplicated; slow-consumer frames.
    pub tally: Tally,
    /// Responses opened with 200.
    pub connections: AtomicU64,
    /// Stalls whose connection the server had ended when the client read again.
    pub ended_by_server: AtomicU64,
    /// Stalls of the full length whose connection was still open (the policy did not cut it).
    pub not_cut: AtomicU64,
    /// Resumes (a request with `Last-Event-ID`) answered with 200; their priming and events are
    /// checked.
    pub resumes_served: AtomicU64,
    /// Resumes refused with 416 (an explicit gap).
    pub resumes_refused: AtomicU64,
    /// Events explicitly gone by those refusals.
    pub refused_events: AtomicU64,
    /// Any other status (a failure: a stalled client must be served or refused with 416).
    pub other_status: AtomicU64,
    /// Connections that failed to open.
    pub io_errors: AtomicU64,
}

/// How a connection looked when the client read it after a stall.
enum AfterStall {
    /// The server had ended it: the body or the socket reached its end (or was reset).
    Ended,
    /// Still open: data kept coming for [`DRAIN_LIMIT`].
    Open,
}

/// One stalled client, until `deadline`.
pub async fn stalled_client(
    args: Arc<Args>,
    index: usize,
    deadline: Instant,
    totals: Arc<StalledTotals>,
) {
    let stall = Duration::from_secs(args.stall_secs);
    let idle = Duration::from_secs(args.idle_limit_secs);
    let mut cursor = Cursor::default();
    loop {
        let last = cursor.last_event_id();
        let response = open(
            args.addr,
            &args.path,
            last.as_deref(),
            // The default receive buffer. A small fixed one (a few KiB, below the loopback MSS of
            // 64 KiB) makes the read after a long stall crawl: the sender, backed off probing a
            // zero window, sends a few KiB per probe, and the end of the connection is not
            // reached in time. The server's send buffer holds most of the backlog anyway.
            None,
            idle,
        )
        .await;
        let mut response = match response {
            Ok(r) => r,
            Err(e) => {
                totals.io_errors.fetch_add(1, Relaxed);
                eprintln!("stalled client: {e}");
                if Instant::now() >= deadline {
                    return;
                }
                // A retry delay, not synchronisation: a failed connection backs off.
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        match response.status {
            200 => {
                totals.connections.fetch_add(1, Relaxed);
                if last.is_some() {
                    totals.resumes_served.fetch_add(1, Relaxed);
                }
            }
            416 => {
                totals.resumes_refused.fetch_add(1, Relaxed);
                let floor = response
                    .head
                    .header("replay-floor")
                    .and_then(|f| f.parse().ok());
                match floor {
                    Some(floor) => {
                        let gone = cursor.accept_gap(floor);
                        totals.refused_events.fetch_add(gone, Relaxed);
                    }
                    None => {
                        totals.other_status.fetch_add(1, Relaxed);
                        return;
                    }
                }
                if Instant::now() >= deadline {
                    return;
                }
                // Resume from the floor, like a client that accepts the gap.
                continue;
            }
            status => {
                totals.other_status.fetch_add(1, Relaxed);
                eprintln!("stalled client: status {status} for {last:?}");
                return;
            }
        }
        if Instant::now() >= deadline {
            // The final resume: follow it briefly to check it continues at the cursor.
            let _ = follow(&mut response.body, &mut cursor, &totals.tally, FINAL_FOLLOW).await;
            return;
        }
        let stall_start = Instant::now();
        let stall_end = (stall_start + stall).min(deadline);
        let full = stall_end - stall_start >= stall;
        let before = (response.body.bytes(), cursor.last);
        tokio::time::sleep_until(stall_end.into()).await;
        let drain_start = Instant::now();
        let after = follow(&mut response.body, &mut cursor, &totals.tally, DRAIN_LIMIT).await;
        eprintln!(
            "stalled client {index}: stalled {:.0} s from id {:?}, then read {} bytes to id {:?} \
             in {:.1} s: {}",
            (stall_end - stall_start).as_secs_f64(),
            before.1,
            response.body.bytes() - before.0,
            cursor.last,
            drain_start.elapsed().as_secs_f64(),
            match after {
                AfterStall::Ended => "ended by the server",
                AfterStall::Open => "still open",
            }
        );
        match after {
            AfterStall::Ended => {
                totals.ended_by_server.fetch_add(1, Relaxed);
            }
            AfterStall::Open if full => {
                totals.not_cut.fetch_add(1, Relaxed);
            }
            // A stall cut short by the end of the run proves nothing either way.
            AfterStall::Open => {}
        }
    }
}

/// Reads `body` for up to `limit`, checking every frame against `cursor`.
async fn follow(
    body: &mut Body,
    cursor: &mut Cursor,
    tally: &Tally,
    limit: Duration,
) -> AfterStall {
    let until = Instant::now() + limit;
    loop {
        let read = tokio::time::timeout_at(until.into(), body.read()).await;
        let more = match read {
            Err(_) => return AfterStall::Open,
            Ok(Ok(more)) => more,
            // A reset: the server closed while data was still queued for this socket.
            Ok(Err(e)) if is_reset(&e) => false,
            Ok(Err(e)) => {
                eprintln!("stalled client: {e}");
                false
            }
        };
        for (frame, first) in body.frames() {
            // A terminal frame (the slow-consumer cut, or the end) is followed by the end of the
            // body: keep reading to it.
            if let Err(e) = cursor.check(&frame, first, tally) {
                tally.malformed.fetch_add(1, Relaxed);
                eprintln!("stalled client: {e}");
            }
        }
        if !more {
            return AfterStall::Ended;
        }
    }
}

fn is_reset(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
    )
}
