//! The per-connection watchdog of [`serve`](super::serve): closes a connection whose writes wait
//! too long or that moves no byte for too long, and drains it at shutdown.
//!
//! A connection's task is woken for every event its stream publishes, so the watchdog must cost
//! nothing on those wake-ups. Two things keep it off that path:
//! - the socket side ([`Tracked`]) only bumps a counter per read or write, and reads the clock only
//!   when a write starts waiting; the watchdog compares the counter between its checks instead;
//! - the connection's task polls the watchdog only when one of the watchdog's own wake-ups fired
//!   (its timer, the write-blocked notification, the shutdown signal; see [`Supervised`]), not on
//!   every wake-up of the connection.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{watch, Notify};
use tokio::time::{sleep_until, Instant};

use super::serve_config::ServeConfig;
use super::serve_stats::Closed;
#[cfg(doc)]
use super::side_wake::Supervised;
use crate::deadline::after_tokio;

/// What the watchdog asks of the connection.
pub(crate) enum Action {
    /// The server is shutting down: finish the response in progress, then close.
    Drain,
    /// Close now, for this reason (counted in [`serve_stats`](super::serve_stats)).
    Close(Closed),
}

/// What moved on a connection's socket. Written by the socket side (the connection's own task),
/// read by the watchdog.
#[derive(Debug)]
pub(crate) struct Activity {
    base: Instant,
    /// Reads and writes that moved at least one byte, counted without a clock read.
    moves: AtomicU64,
    /// Milliseconds since `base` at which a write started waiting; `NOT_BLOCKED` while none waits.
    blocked_since_ms: AtomicU64,
    /// Wakes the watchdog when a write starts waiting (its deadline moves closer).
    blocked: Notify,
}

const NOT_BLOCKED: u64 = u64::MAX;

// Relaxed throughout: these are counters and timestamps the watchdog compares with the clock; they
// publish no other data, and a stale read only delays a check to the next one, which re-reads.
impl Activity {
    pub(crate) fn new() -> Self {
        Activity {
            base: Instant::now(),
            moves: AtomicU64::new(0),
            blocked_since_ms: AtomicU64::new(NOT_BLOCKED),
            blocked: Notify::new(),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_millis()).unwrap_or(NOT_BLOCKED - 1)
    }

    fn at(&self, ms: u64) -> Instant {
        self.base + Duration::from_millis(ms)
    }

    fn moved(&self) {
        // Only the connection's task touches its socket, so a load and a store count exactly
        // (and cost less than a read-modify-write).
        let moves = self.moves.load(Ordering::Relaxed);
        self.moves.store(moves.wrapping_add(1), Ordering::Relaxed);
    }

    fn wrote(&self) {
        self.moved();
        // A load first: the store is needed only after a write waited.
        if self.blocked_since_ms.load(Ordering::Relaxed) != NOT_BLOCKED {
            self.blocked_since_ms.store(NOT_BLOCKED, Ordering::Relaxed);
        }
    }

    fn write_blocked(&self) {
        if self.blocked_since_ms.load(Ordering::Relaxed) == NOT_BLOCKED {
            self.blocked_since_ms
                .store(self.now_ms(), Ordering::Relaxed);
            // Stores a permit if the watchdog is not waiting yet: it recomputes its deadline.
            self.blocked.notify_one();
        }
    }

    /// When the waiting write, if any, times out.
    fn write_deadline(&self, config: &ServeConfig) -> Option<Instant> {
        match self.blocked_since_ms.load(Ordering::Relaxed) {
            NOT_BLOCKED => None,
            since => Some(after_tokio(self.at(since), config.write_timeout)),
        }
    }
}

/// Checks for idleness this many times per idle timeout: a connection is closed between the idle
/// timeout and a quarter more after its last byte moved.
const IDLE_CHECKS_PER_TIMEOUT: u32 = 4;

/// The timeouts of one connection, and the server's shutdown signal.
pub(crate) struct Watchdog {
    activity: Arc<Activity>,
    config: ServeConfig,
    stopping: watch::Receiver<bool>,
    /// Cleared when the server future is gone without a shutdown: nothing more to watch for.
    watching: bool,
    /// Set once the server shuts down: the connection closes by then at the latest.
    drain_until: Option<Instant>,
    /// `activity.moves` at the last check.
    seen_moves: u64,
    /// The last check that found bytes moved since the one before (or the connection's start).
    active_at: Instant,
}

impl Watchdog {
    pub(crate) fn new(
        activity: Arc<Activity>,
        config: ServeConfig,
        stopping: watch::Receiver<bool>,
    ) -> Self {
        Watchdog {
            // Relaxed: a counter compared between checks; see the note on `impl Activity`.
            seen_moves: activity.moves.load(Ordering::Relaxed),
            active_at: Instant::now(),
            activity,
            config,
            stopping,
            watching: true,
            drain_until: None,
        }
    }

    /// Completes with the next thing the connection must do. Cancel safe.
    pub(crate) async fn next_action(&mut self) -> Action {
        loop {
            let now = Instant::now();
            // Relaxed: only compared with the count of the last check; it publishes no other
            // data (see the note on `impl Activity`).
            let moves = self.activity.moves.load(Ordering::Relaxed);
            if moves != self.seen_moves {
                self.seen_moves = moves;
                self.active_at = now;
            }
            if let Some(reason) = self.expired(now) {
                return Action::Close(reason);
            }
            let next_check = self.next_check(now);
            tokio::select! {
                // A write started waiting: recompute the deadline.
                () = self.activity.blocked.notified() => {}
                changed = self.stopping.changed(), if self.watching && self.drain_until.is_none() => {
                    if changed.is_err() {
                        self.watching = false;
                    } else if *self.stopping.borrow_and_update() {
                        self.drain_until = Some(after_tokio(Instant::now(), self.config.shutdown_grace));
                        return Action::Drain;
                    }
                }
                () = sleep_until(next_check) => {}
            }
        }
    }

    /// Which limit ran out at `now`, if one did.
    fn expired(&self, now: Instant) -> Option<Closed> {
        if self.drain_until.is_some_and(|drain| now >= drain) {
            return Some(Closed::AtShutdown);
        }
        if self
            .activity
            .write_deadline(&self.config)
            .is_some_and(|deadline| now >= deadline)
        {
            return Some(Closed::WriteTimeout);
        }
        (now >= after_tokio(self.active_at, self.config.idle_timeout))
            .then_some(Closed::IdleTimeout)
    }

    /// When to look again: the earliest deadline, and at least every quarter of the idle timeout
    /// (idleness is seen from the move counter, so only a check notices bytes that moved).
    fn next_check(&self, now: Instant) -> Instant {
        let quarter = self.config.idle_timeout / IDLE_CHECKS_PER_TIMEOUT;
        let mut next =
            after_tokio(self.active_at, self.config.idle_timeout).min(after_tokio(now, quarter));
        if let Some(deadline) = self.activity.write_deadline(&self.config) {
            next = next.min(deadline);
        }
        if let Some(drain) = self.drain_until {
            next = next.min(drain);
        }
        next
    }
}

/// The socket, reporting what moved to the connection's [`Activity`].
pub(crate) struct Tracked {
    inner: TcpStream,
    activity: Arc<Activity>,
}

impl Tracked {
    pub(crate) fn new(inner: TcpStream, activity: Arc<Activity>) -> Self {
        Tracked { inner, activity }
    }

    fn after_write(&self, result: &Poll<io::Result<usize>>) {
        match result {
            Poll::Ready(Ok(n)) if *n > 0 => self.activity.wrote(),
            Poll::Pending => self.activity.write_blocked(),
            _ => {}
        }
    }
}

impl AsyncRead for Tracked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let result = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(result, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.moved();
        }
        result
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.after_write(&result);
        result
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.after_write(&result);
        result
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
