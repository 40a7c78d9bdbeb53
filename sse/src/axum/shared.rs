//! What every connection of one stream shares: the backend, the identity, the retention state,
//! the counters and the notifications between the writers and the publisher.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use tokio::sync::Notify;

use super::config::SseConfig;
use crate::backend::{Backend, Window};
use crate::{Retention, StreamIdentity};

/// What the endpoint counted so far (a snapshot; see also [`ReplayRing::metrics`](replay_ring::ReplayRing::metrics) and
/// [`Retention::stats`]).
///
/// ```
/// assert_eq!(replay_ring_sse::axum::EndpointStats::default().streams_opened, 0);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EndpointStats {
    /// Event-stream responses opened (200).
    pub streams_opened: u64,
    /// Requests refused with 400 (invalid or duplicate `Last-Event-ID`).
    pub refused_400: u64,
    /// Requests refused with 404 (stream lost: another stream or epoch).
    pub refused_404: u64,
    /// Requests refused with 409 (cursor ahead of the head).
    pub refused_409: u64,
    /// Requests refused with 416 (cursor below the floor).
    pub refused_416: u64,
    /// Requests refused with 503 (no reader slot, or the backend could not be reached).
    pub refused_503: u64,
    /// Event frames written.
    pub frames_written: u64,
    /// Keep-alive comments written.
    pub keep_alives: u64,
    /// Responses ended with a `slow_consumer` error frame.
    pub slow_consumer_frames: u64,
    /// Responses ended with a `backend_unavailable` error frame (the backend failed mid-stream).
    pub backend_unavailable_frames: u64,
    /// Streams closed by the producer's backpressure bound.
    pub backpressure_timeouts: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) streams_opened: AtomicU64,
    pub(crate) refused_400: AtomicU64,
    pub(crate) refused_404: AtomicU64,
    pub(crate) refused_409: AtomicU64,
    pub(crate) refused_416: AtomicU64,
    pub(crate) refused_503: AtomicU64,
    pub(crate) frames_written: AtomicU64,
    pub(crate) keep_alives: AtomicU64,
    pub(crate) slow_consumer_frames: AtomicU64,
    pub(crate) backend_unavailable_frames: AtomicU64,
    pub(crate) backpressure_timeouts: AtomicU64,
}

pub(crate) fn add(counter: &AtomicU64, n: u64) {
    // Relaxed: statistics only; nothing is published through these counters.
    counter.fetch_add(n, Ordering::Relaxed);
}

impl Counters {
    pub(crate) fn snapshot(&self) -> EndpointStats {
        // Relaxed: statistics only; a snapshot may be a moment old.
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        EndpointStats {
            streams_opened: load(&self.streams_opened),
            refused_400: load(&self.refused_400),
            refused_404: load(&self.refused_404),
            refused_409: load(&self.refused_409),
            refused_416: load(&self.refused_416),
            refused_503: load(&self.refused_503),
            frames_written: load(&self.frames_written),
            keep_alives: load(&self.keep_alives),
            slow_consumer_frames: load(&self.slow_consumer_frames),
            backend_unavailable_frames: load(&self.backend_unavailable_frames),
            backpressure_timeouts: load(&self.backpressure_timeouts),
        }
    }

    pub(crate) fn refused(&self, status: u16) {
        add(
            match status {
                400 => &self.refused_400,
                404 => &self.refused_404,
                409 => &self.refused_409,
                416 => &self.refused_416,
                _ => &self.refused_503,
            },
            1,
        );
    }
}

#[derive(Debug)]
pub(crate) struct Shared<B> {
    pub(crate) backend: B,
    pub(crate) identity: StreamIdentity,
    pub(crate) retention: Mutex<Retention>,
    pub(crate) config: SseConfig,
    pub(crate) counters: Counters,
    /// Notified when the first stream opens (see [`SseProducer::first_subscriber`]).
    pub(crate) subscribed: Notify,
    /// The backend was told of a subscriber ([`Backend::announce_subscriber`]), or is being told;
    /// cleared again if that failed with no connection live, so that the next stream tries again
    /// (while one is live, the announcing task retries: `endpoint::announce_subscriber`).
    pub(crate) announced: AtomicBool,
    /// Notified when a writer reported progress while the publisher waits for it: the publisher
    /// then recomputes its wake-up.
    pub(crate) progress: Notify,
    /// Set by the publisher before it computes its wake-up from the retention state, taken by the
    /// first writer that reports progress after that (which then notifies `progress`). Read and
    /// written only while the retention lock is held, so a writer either updates the state before
    /// the publisher reads it or sees the flag: the publisher never sleeps past a change. Most
    /// chunks then skip `progress`, whose state word every connection would otherwise update.
    publisher_waiting: AtomicBool,
}

impl<B> Shared<B> {
    pub(crate) fn new(
        backend: B,
        identity: StreamIdentity,
        retention: Retention,
        config: SseConfig,
    ) -> Self {
        Shared {
            backend,
            identity,
            retention: Mutex::new(retention),
            config,
            counters: Counters::default(),
            subscribed: Notify::new(),
            announced: AtomicBool::new(false),
            progress: Notify::new(),
            publisher_waiting: AtomicBool::new(false),
        }
    }
}

impl<B: Backend> Shared<B> {
    pub(crate) fn retention(&self) -> MutexGuard<'_, Retention> {
        // A panic while holding the lock leaves plain data behind; keep serving.
        self.retention.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The publisher is about to wait: the next writer to report progress notifies `progress`.
    /// Takes the guard to prove the retention lock is held.
    pub(crate) fn set_publisher_waiting(&self, _held: &MutexGuard<'_, Retention>) {
        // Relaxed: the retention lock orders every access (see the field).
        self.publisher_waiting.store(true, Ordering::Relaxed);
    }

    /// Whether the publisher asked to be notified, clearing the request. Takes the guard to prove
    /// the retention lock is held.
    pub(crate) fn take_publisher_waiting(&self, _held: &MutexGuard<'_, Retention>) -> bool {
        // Relaxed: the retention lock orders every access (see the field). A load first: most
        // chunks find the flag clear and leave its cache line shared.
        let waiting = self.publisher_waiting.load(Ordering::Relaxed);
        if waiting {
            self.publisher_waiting.store(false, Ordering::Relaxed);
        }
        waiting
    }

    /// The slow-consumer window (floor, head, capacity) for the retention state.
    pub(crate) async fn policy_window(&self) -> Option<crate::slow_consumer::Window> {
        let Window { floor, head } = match self.backend.recent_window() {
            Some(window) => window,
            None => self.backend.window().await.ok()?,
        };
        Some(crate::slow_consumer::Window {
            floor,
            head,
            capacity: self.backend.capacity(),
        })
    }

    /// Releases what the resumption window allows at `now` (after cutting slow consumers).
    /// Returns whether the floor moved. The retention lock is not held across the backend call;
    /// for the ring every await here is ready at once.
    pub(crate) async fn release_due(&self, now: std::time::Instant) -> bool {
        let Some(window) = self.policy_window().await else {
            // The backend cannot answer now; the checkpoints stay and the next call retries.
            return false;
        };
        let target = self.retention().release_target(window, now);
        self.release_planned(window, target).await
    }

    /// Releases through `target` (planned by `Retention::release_target` against `window`), if
    /// any, and counts it if the floor moved. Returns whether it did.
    pub(crate) async fn release_planned(
        &self,
        window: crate::slow_consumer::Window,
        target: Option<u64>,
    ) -> bool {
        let Some(target) = target else {
            return false;
        };
        match self.backend.release_through(target).await {
            Ok(floor) if floor > window.floor => {
                self.retention().note_window_release();
                true
            }
            _ => false,
        }
    }
}
