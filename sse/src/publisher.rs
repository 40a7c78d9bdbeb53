//! One producer loop for every integration: append if there is room; else release what retention
//! allows; else wait for room or the next expiry; past the backpressure bound, end the stream with
//! an explicit [`CloseReason::BackpressureTimeout`] — never drop an event.

use std::fmt;
use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use replay_ring::{CloseReason, ReplayRing};
use tokio::sync::Notify;

use crate::backend::{AppendError, Backend, BackendProducer, ReleaseError, Unavailable};
use crate::backpressure_clock::BackpressureClock;
use crate::retention::{Retention, RetentionConfig};

/// How long a backpressured publisher waits before looking again when the retention policy has
/// events whose window already passed but that it may not release yet (a live connection has not
/// written them). Releases and finished reads wake it sooner.
pub const EXPIRED_BUT_HELD_RECHECK: Duration = Duration::from_millis(50);

/// What a [`Publisher`] asks of a retention policy while the window is full.
pub trait RetentionPolicy<B: Backend>: Send + 'static {
    /// Releases every event the policy allows at `now`. Returns whether the floor moved.
    ///
    /// # Errors
    /// The backend's refusal or failure.
    ///
    /// # Cancel safety
    /// A cancelled call may or may not have released; the floor stays consistent.
    fn release_due(
        &mut self,
        backend: &B,
        now: Instant,
    ) -> impl Future<Output = Result<bool, ReleaseError>> + Send;

    /// When [`release_due`](Self::release_due) may next release something, if ever.
    fn next_due(&self) -> Option<Instant>;

    /// Completes when the policy's state changed in a way that may move [`next_due`](Self::next_due)
    /// earlier (for example a connection reported a write). A waiting publisher then asks again
    /// instead of sleeping until the time it computed before. The default never completes.
    ///
    /// # Cancel safety
    /// Must be cancel safe: the publisher drops it whenever another wake-up wins.
    fn changed(&self) -> impl Future<Output = ()> + Send {
        std::future::pending()
    }
}

/// A [`Retention`] shared between a stream's publisher and its connections (each connection
/// registers, reports what it wrote, and acknowledges resumes through [`lock`](Self::lock)). Its
/// connection table is sized by the backend's `max_readers`, so the two cannot disagree.
///
/// Every [`lock`](Self::lock) by a connection wakes a waiting [`Publisher`] when the guard drops, so
/// a write reported while the publisher waits (a new checkpoint) moves its next wake-up at once.
///
/// ```
/// use replay_ring::ReplayRing;
/// use replay_ring_sse::SharedRetention;
///
/// let (_producer, ring) = ReplayRing::<u8>::new(8, 3).unwrap();
/// let retention = SharedRetention::for_ring(Default::default(), &ring);
/// let a = retention.lock().connect(0).unwrap();
/// let _b = retention.lock().connect(0).unwrap();
/// let _c = retention.lock().connect(0).unwrap();
/// assert!(retention.lock().connect(0).is_none()); // one entry per reader slot
/// retention.lock().disconnect(a, std::time::Instant::now());
/// ```
#[derive(Debug, Clone)]
pub struct SharedRetention(Arc<SharedInner>);

#[derive(Debug)]
struct SharedInner {
    retention: Mutex<Retention>,
    /// Signalled when a connection's guard drops; holds one permit, so a change made between the
    /// publisher's last look and its wait is not lost.
    changed: Notify,
}

/// A locked [`Retention`] (see [`SharedRetention::lock`]); dropping it tells a waiting publisher
/// to look again.
#[derive(Debug)]
pub struct RetentionGuard<'a> {
    guard: MutexGuard<'a, Retention>,
    changed: &'a Notify,
}

impl Deref for RetentionGuard<'_> {
    type Target = Retention;

    fn deref(&self) -> &Retention {
        &self.guard
    }
}

impl DerefMut for RetentionGuard<'_> {
    fn deref_mut(&mut self) -> &mut Retention {
        &mut self.guard
    }
}

impl Drop for RetentionGuard<'_> {
    fn drop(&mut self) {
        self.changed.notify_one();
    }
}

impl SharedRetention {
    /// A policy for `ring`, with one connection entry per reader slot.
    ///
    /// ```
    /// let (_p, ring) = replay_ring::ReplayRing::<u8>::new(4, 2).unwrap();
    /// let r = replay_ring_sse::SharedRetention::for_ring(Default::default(), &ring);
    /// assert_eq!(r.lock().live_connections(), 0);
    /// ```
    pub fn for_ring<T>(config: RetentionConfig, ring: &ReplayRing<T>) -> Self {
        SharedRetention(Arc::new(SharedInner {
            retention: Mutex::new(Retention::new(config, ring.max_readers())),
            changed: Notify::new(),
        }))
    }

    /// Locks the policy. Hold the guard only for the call (never across an `.await`); dropping it
    /// wakes a waiting publisher to look at the policy again. A panic
    /// while it was held leaves the policy usable: its state is updated field by field, and a
    /// stale entry only delays a release, never advances one.
    pub fn lock(&self) -> RetentionGuard<'_> {
        RetentionGuard {
            guard: self.lock_quietly(),
            changed: &self.0.changed,
        }
    }

    /// The publisher's own access: its changes need not wake itself.
    fn lock_quietly(&self) -> MutexGuard<'_, Retention> {
        self.0
            .retention
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl<T: Clone + Send + Sync + 'static> RetentionPolicy<ReplayRing<T>> for SharedRetention {
    fn release_due(
        &mut self,
        ring: &ReplayRing<T>,
        now: Instant,
    ) -> impl Future<Output = Result<bool, ReleaseError>> + Send {
        let released = self.lock_quietly().release_expired(ring, now).is_some();
        std::future::ready(Ok(released))
    }

    fn next_due(&self) -> Option<Instant> {
        self.lock_quietly().next_expiry()
    }

    fn changed(&self) -> impl Future<Output = ()> + Send {
        self.0.changed.notified()
    }
}

/// Why a publish did not append.
///
/// ```
/// use std::time::Duration;
/// use replay_ring_sse::PublishError;
/// let e = PublishError::BackpressureTimeout { waited: Duration::from_secs(10) };
/// assert!(e.to_string().contains("nothing dropped"));
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum PublishError {
    /// This publish waited past the backpressure bound; the stream is now closed with
    /// [`CloseReason::BackpressureTimeout`] and nothing was dropped.
    BackpressureTimeout {
        /// How long the producer had been waiting for room.
        waited: Duration,
    },
    /// Ids are exhausted; the stream is now closed with an error.
    IdsExhausted,
    /// The stream has ended: closed (by this publisher, or in the backend), or lost in the
    /// backend (deleted, expired, rolled back). The reason it was closed with; `None` when none
    /// could be read, as for a stream that is lost.
    Closed(Option<CloseReason>),
    /// This publisher gave the stream up without closing it: another producer took it over (a
    /// network backend's lease moved on), its lease lapsed while the backend was out of reach
    /// (then the stream has no producer until one takes the lease again: on Redis,
    /// `acquire_producer_when_free`), or a close this publisher made (its own
    /// [`close`](Publisher::close), or one a publish had to make after the backpressure bound or
    /// with ids exhausted) was not confirmed and the backend did not show it landed. The backend
    /// consumed the producer: this publisher can never publish again, and the stream goes on
    /// with the next producer (on Redis, a standby that takes the lease), unless that
    /// unconfirmed close was held up on its way and lands later, which the next producer's
    /// acquisition finds (see [`Publisher::close`]). Nothing of this publish was stored.
    Superseded,
    /// The backend could not be reached before anything of this event was sent, or refused it
    /// for a reason that may pass (a network store out of memory): it was not stored, consumed
    /// no id, and is not kept. The stream stays open; publish the event again.
    Unavailable(Unavailable),
    /// The event was sent with `id`, and the backend's answer did not come back (the connection
    /// dropped, or the answer took longer than the response timeout): it may be stored already.
    /// The stream stays open, and the event is not to be published again: the backend's producer
    /// keeps it and stores it under `id`, once, before the next event this publisher publishes
    /// (or before its close), so the next successful publish returns an id after `id`. (The
    /// Redis backend's producer does so; a backend that cannot keep an event must document what
    /// it does instead.) Only if this publisher is superseded before that (its lease lapses while
    /// the backend stays out of reach) may the event be lost, and then with no gap: the next
    /// producer continues from what the stream holds.
    Unconfirmed {
        /// The id the event was sent with.
        id: u64,
        /// What failed.
        error: Unavailable,
    },
    /// The event is longer than the backend stores as one event (a network backend's payload
    /// limit, such as the Redis backend's `max_payload_bytes`). It was not stored and consumed no
    /// id; the stream stays open and a smaller event can follow.
    TooLarge {
        /// The event's payload length in bytes.
        bytes: u64,
        /// The longest payload the backend takes.
        limit: u64,
    },
}

impl fmt::Display for PublishError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PublishError::BackpressureTimeout { waited } => write!(
                f,
                "{}",
                CloseReason::BackpressureTimeout { waited: *waited }
            ),
            PublishError::IdsExhausted => f.write_str("event ids exhausted; stream closed"),
            PublishError::Closed(Some(reason)) => write!(f, "stream closed: {reason}"),
            PublishError::Closed(None) => {
                f.write_str("stream ended (closed, or lost in the backend)")
            }
            PublishError::Superseded => f.write_str(
                "this producer gave the stream up without closing it (another producer took it \
                 over, or its close failed); it publishes no more",
            ),
            PublishError::Unavailable(e) => write!(f, "{e}"),
            PublishError::Unconfirmed { id, error } => write!(
                f,
                "{error}; event {id} was sent but not confirmed: the producer stores it, once, \
                 before its next event"
            ),
            PublishError::TooLarge { bytes, limit } => write!(
                f,
                "event of {bytes} bytes exceeds the backend's limit of {limit} bytes; not \
                 stored, the stream stays open"
            ),
        }
    }
}

impl std::error::Error for PublishError {
    /// For [`Unavailable`](PublishError::Unavailable) and
    /// [`Unconfirmed`](PublishError::Unconfirmed), what made the backend fail (its message is
    /// this error's own): the chain then reads "backend unavailable: append", then the cause.
    ///
    /// ```
    /// use std::error::Error;
    /// use replay_ring_sse::{backend::Unavailable, PublishError};
    /// let e = PublishError::Unavailable(Unavailable::with_source("append", std::io::Error::other("reset")));
    /// assert_eq!(e.source().unwrap().to_string(), "reset");
    /// ```
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PublishError::Unavailable(e) | PublishError::Unconfirmed { error: e, .. } => e.source(),
            _ => None,
        }
    }
}

/// What a [`Publisher`] has done, for metrics.
///
/// ```
/// let s = replay_ring_sse::PublisherStats::default();
/// assert_eq!((s.published, s.backpressure_episodes, s.backpressure_timeouts), (0, 0, 0));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PublisherStats {
    /// Publishes that returned an id (a cancelled publish whose event a network backend stored
    /// later is not counted).
    pub published: u64,
    /// Times the publisher found the window full and started waiting (one per episode, however
    /// many wake-ups it took).
    pub backpressure_episodes: u64,
    /// Times the bound was reached and the stream closed with `BackpressureTimeout` (0 or 1).
    pub backpressure_timeouts: u64,
}

/// A stream's producer together with its retention policy and backpressure bound.
///
/// ```
/// use bytes::Bytes;
/// use replay_ring::ReplayRing;
/// use replay_ring_sse::{Publisher, RetentionConfig};
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let (producer, ring) = ReplayRing::<Bytes>::new(64, 4).unwrap();
/// let mut publisher = Publisher::new(producer, RetentionConfig::default());
/// let id = publisher.publish_with(|id| Bytes::from(format!("{{\"n\":{id}}}"))).await.unwrap();
/// assert_eq!(id, 1);
/// assert_eq!(ring.head(), 1);
/// # });
/// ```
pub struct Publisher<P: BackendProducer, R = SharedRetention> {
    producer: Option<P>,
    backend: P::Backend,
    retention: R,
    clock: BackpressureClock,
    close_reason: Option<CloseReason>,
    /// This publisher gave the stream up without closing it: another producer took it over, or
    /// this publisher's close did not reach the backend (which consumed its producer). Every
    /// later publish says [`PublishError::Superseded`]: the stream goes on with the next producer.
    superseded: bool,
    /// The reason of a close of this publisher's own that failed or was cancelled, so may have
    /// landed after all: later calls ask the backend before they say [`PublishError::Superseded`].
    close_unconfirmed: Option<CloseReason>,
    stats: PublisherStats,
}

impl<P: BackendProducer, R: fmt::Debug> fmt::Debug for Publisher<P, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Publisher")
            .field("open", &self.producer.is_some())
            .field("retention", &self.retention)
            .field("clock", &self.clock)
            .finish()
    }
}

impl<T: Clone + Send + Sync + 'static> Publisher<replay_ring::Producer<T>, SharedRetention> {
    /// A publisher for a ring's producer, with a [`SharedRetention`] sized by the ring.
    ///
    /// ```
    /// let (producer, _ring) = replay_ring::ReplayRing::<u8>::new(4, 2).unwrap();
    /// let publisher = replay_ring_sse::Publisher::new(producer, Default::default());
    /// assert_eq!(publisher.retention().lock().live_connections(), 0);
    /// ```
    pub fn new(producer: replay_ring::Producer<T>, config: RetentionConfig) -> Self {
        let retention = SharedRetention::for_ring(config, &producer.ring());
        Publisher::with_policy(producer, retention, config.backpressure_timeout)
    }
}

impl<P, R> Publisher<P, R>
where
    P: BackendProducer,
    R: RetentionPolicy<P::Backend>,
{
    /// A publisher with any retention policy (for example one for a network backend).
    ///
    /// ```
    /// use std::time::Duration;
    /// let (producer, ring) = replay_ring::ReplayRing::<u8>::new(4, 2).unwrap();
    /// let retention = replay_ring_sse::SharedRetention::for_ring(Default::default(), &ring);
    /// let publisher = replay_ring_sse::Publisher::with_policy(producer, retention, Duration::from_secs(1));
    /// assert!(!publisher.is_closed());
    /// ```
    pub fn with_policy(producer: P, retention: R, backpressure_timeout: Duration) -> Self {
        Publisher {
            backend: producer.backend(),
            producer: Some(producer),
            retention,
            clock: BackpressureClock::new(backpressure_timeout),
            close_reason: None,
            superseded: false,
            close_unconfirmed: None,
            stats: PublisherStats::default(),
        }
    }

    /// Counters of what this publisher did.
    ///
    /// ```
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let (producer, _ring) = replay_ring::ReplayRing::<u8>::new(4, 1).unwrap();
    /// let mut publisher = replay_ring_sse::Publisher::new(producer, Default::default());
    /// publisher.publish_with(|_| 7).await.unwrap();
    /// assert_eq!(publisher.stats().published, 1);
    /// # });
    /// ```
    pub fn stats(&self) -> PublisherStats {
        self.stats
    }

    /// The stream's shared handle.
    pub fn backend(&self) -> &P::Backend {
        &self.backend
    }

    /// The retention policy (connections register and report writes through it).
    pub fn retention(&self) -> &R {
        &self.retention
    }

    /// Whether this publisher publishes no more: it closed the stream, found it closed, or gave
    /// it up ([`PublishError::Superseded`]).
    pub fn is_closed(&self) -> bool {
        self.producer.is_none()
    }

    /// The backend's producer back, to stop publishing without closing the stream (a replica
    /// shutting down hands its Redis producer lease to a standby this way); `None` once a publish
    /// found the stream closed or taken over by another producer, or this publisher closed it or
    /// tried to (a close consumes the producer, whether or not the backend recorded it).
    ///
    /// ```
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let (producer, ring) = replay_ring::ReplayRing::<u8>::new(4, 1).unwrap();
    /// let mut publisher = replay_ring_sse::Publisher::new(producer, Default::default());
    /// publisher.publish_with(|_| 7).await.unwrap();
    /// let producer = publisher.into_producer().unwrap();
    /// assert_eq!(producer.next_id(), 2);
    /// assert!(!ring.is_closed());
    /// # });
    /// ```
    pub fn into_producer(mut self) -> Option<P> {
        self.producer.take()
    }

    /// Appends `make(id)`, waiting while the window is full: each time it finds no room it releases
    /// what the retention policy allows, then waits for a release (or a finished read) or the next
    /// expiry. After the backpressure bound of continuous waiting it closes the stream with
    /// [`CloseReason::BackpressureTimeout`] (readers see every retained event, then that reason).
    /// Each call spends a unit of the task's tokio cooperative budget and yields when it is used
    /// up, so a loop that publishes as fast as the window allows still lets its worker run the
    /// other tasks (a server's connections).
    ///
    /// ```
    /// use std::time::Duration;
    /// use bytes::Bytes;
    /// use replay_ring::{CloseReason, ReadError, ReplayRing};
    /// use replay_ring_sse::{PublishError, Publisher, RetentionConfig};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap().block_on(async {
    /// let config = RetentionConfig { backpressure_timeout: Duration::from_secs(2), ..Default::default() };
    /// let (producer, ring) = ReplayRing::<Bytes>::new(1, 1).unwrap();
    /// let mut publisher = Publisher::new(producer, config);
    /// publisher.publish_with(|_| Bytes::from("a")).await.unwrap();
    /// // Nobody releases id 1: after 2 s the stream ends explicitly.
    /// let err = publisher.publish_with(|_| Bytes::from("b")).await.unwrap_err();
    /// assert!(matches!(err, PublishError::BackpressureTimeout { .. }));
    /// let mut reader = ring.resume(Some(0)).unwrap();
    /// assert_eq!(reader.try_recv().unwrap().unwrap().data, "a");
    /// assert!(matches!(reader.try_recv(), Err(ReadError::Closed(CloseReason::BackpressureTimeout { .. }))));
    /// # });
    /// ```
    ///
    /// # Errors
    /// [`PublishError::BackpressureTimeout`] and [`PublishError::IdsExhausted`] (the stream is now
    /// closed), [`PublishError::Closed`] (it was already), [`PublishError::Superseded`] (another
    /// producer took the stream over, or the close this publish had to make did not reach the
    /// backend), [`PublishError::Unavailable`] (nothing stored: publish again),
    /// [`PublishError::Unconfirmed`] (sent, answer lost: the producer stores it before the next
    /// event), [`PublishError::TooLarge`] (this event only; the stream stays open).
    ///
    /// # Cancel safety
    /// With the in-process ring the append itself completes in the poll that starts it, so a
    /// cancelled publish either returned its id (the event is stored) or appended nothing and
    /// consumed no id: `make` is then dropped uncalled, and the caller, whose future did not
    /// complete, still owns the decision to publish again. The backpressure episode is kept
    /// across a cancelled publish, so retrying cannot extend the bound. With a network backend,
    /// a publish cancelled after `make` ran may have stored the event, or the backend may keep it
    /// and store it before the next publish or close (the Redis backend does; see
    /// [`BackendProducer::try_append_with`]): publishing the same payload again may store it
    /// twice. [`stats`](Self::stats) count only the publishes that returned an id.
    pub async fn publish_with<F>(&mut self, make: F) -> Result<u64, PublishError>
    where
        F: FnOnce(u64) -> <P::Backend as Backend>::Payload + Send,
    {
        // A window that always has room (nobody connected, everything releasable) completes
        // every publish in its first poll: a producer looping on it would never give its tokio
        // worker back, starving the connections and timers scheduled there. Spending the task's
        // cooperative budget yields once it is used up; before the append, so a publish
        // cancelled there has appended nothing.
        tokio::task::coop::consume_budget().await;
        // The id `make` was called with: an append whose outcome is unknown reports it
        // (`Unconfirmed`). An atomic only because the closure must be `Send` while it borrows it.
        let sent_as = AtomicU64::new(0);
        let mut make = |id| {
            // Relaxed: read back on this task after the append returns, nothing else.
            sent_as.store(id, Relaxed);
            make(id)
        };
        loop {
            let Some(producer) = self.producer.as_mut() else {
                return Err(self.ended().await);
            };
            match producer.try_append_with(make).await {
                Ok(id) => {
                    self.clock.on_pushed();
                    self.stats.published += 1;
                    return Ok(id);
                }
                Err(AppendError::Full(back)) => make = back,
                Err(AppendError::IdsExhausted(_)) => {
                    self.close_or_give_up(CloseReason::error("event ids exhausted"))
                        .await?;
                    return Err(PublishError::IdsExhausted);
                }
                Err(AppendError::Closed(_)) => {
                    self.producer = None;
                    return Err(PublishError::Closed(
                        self.backend.close_reason().await.ok().flatten(),
                    ));
                }
                Err(AppendError::Superseded(_)) => {
                    // Not closed: the stream belongs to the producer that took it over.
                    self.producer = None;
                    self.superseded = true;
                    return Err(PublishError::Superseded);
                }
                Err(AppendError::Unavailable {
                    make: Some(_),
                    error,
                }) => return Err(PublishError::Unavailable(error)),
                // The payload was built and may have been sent: the producer keeps it. There
                // was room for it, so the backpressure episode, if any, is over (as after `Ok`).
                Err(AppendError::Unavailable { make: None, error }) => {
                    self.clock.on_pushed();
                    return Err(PublishError::Unconfirmed {
                        // Relaxed: written by `make` on this task, before the append returned.
                        id: sent_as.load(Relaxed),
                        error,
                    });
                }
                Err(AppendError::Refused(error)) => return Err(PublishError::Unavailable(error)),
                Err(AppendError::TooLarge { bytes, limit }) => {
                    return Err(PublishError::TooLarge { bytes, limit })
                }
            }
            let now = tokio::time::Instant::now();
            match self
                .retention
                .release_due(&self.backend, now.into_std())
                .await
            {
                Ok(true) => continue,
                Ok(false) => {}
                Err(ReleaseError::Unavailable(e)) => return Err(PublishError::Unavailable(e)),
                Err(ReleaseError::Gone) => {
                    self.producer = None;
                    return Err(PublishError::Closed(None));
                }
                // The policy only releases ids it saw written, which exist; nothing to undo.
                Err(ReleaseError::AheadOfHead { .. }) => {}
            }
            if self.clock.waiting_since().is_none() {
                self.stats.backpressure_episodes += 1;
            }
            let deadline = match self.clock.on_full(now.into_std()) {
                Ok(deadline) => deadline,
                Err(reason) => {
                    self.stats.backpressure_timeouts += 1;
                    let waited = match reason {
                        CloseReason::BackpressureTimeout { waited } => waited,
                        _ => self.clock.waiting_since().map_or(Duration::ZERO, |since| {
                            now.into_std().saturating_duration_since(since)
                        }),
                    };
                    self.close_or_give_up(reason).await?;
                    return Err(PublishError::BackpressureTimeout { waited });
                }
            };
            let wake = match self.retention.next_due() {
                Some(due) if due > now.into_std() => due.min(deadline),
                // Due but held back by a live connection: look again shortly.
                Some(_) => (now.into_std() + EXPIRED_BUT_HELD_RECHECK).min(deadline),
                None => deadline,
            };
            let Some(producer) = self.producer.as_mut() else {
                return Err(self.ended().await);
            };
            tokio::select! {
                ready = producer.ready() => ready.map_err(PublishError::Unavailable)?,
                () = tokio::time::sleep_until(wake.into()) => {}
                () = self.retention.changed() => {}
            }
        }
    }

    /// Why this publisher can no longer publish, once it has no producer. After a close of its
    /// own whose outcome is unknown, the backend says whether the stream ended: a close that
    /// landed is an end, not a hand-over (cancel safe: it only reads). A stored reason other
    /// than that close's is another producer's close, after a hand-over: an end too, but this
    /// publisher stays superseded.
    async fn ended(&mut self) -> PublishError {
        if let Some(mine) = &self.close_unconfirmed {
            if let Ok(Some(stored)) = self.backend.close_reason().await {
                if stored == *mine {
                    self.superseded = false;
                }
                self.close_unconfirmed = None;
                self.close_reason = Some(stored);
            }
        }
        match &self.close_reason {
            Some(reason) => PublishError::Closed(Some(reason.clone())),
            None if self.superseded => PublishError::Superseded,
            None => PublishError::Closed(None),
        }
    }

    /// Ends the stream with `reason` (no-op if this publisher already closed it).
    ///
    /// # Errors
    /// [`PublishError::Superseded`] if this publisher had given the stream up: it cannot close
    /// what it no longer produces; [`PublishError::Closed`] if it had, and another producer has
    /// closed the stream since. [`PublishError::Unavailable`] if the backend did not confirm the
    /// close, which may or may not have landed. The producer is gone all the same (a network
    /// backend's close consumes it), so later calls read the backend's close reason (one round
    /// trip each, until a reason is found):
    /// - the close's own reason: it landed; publishes return [`PublishError::Closed`] and `close`
    ///   returns `Ok`;
    /// - no reason, or no answer: it is not known to have landed, and this publisher counts as
    ///   having given the stream up: publishes and `close` return [`PublishError::Superseded`],
    ///   and the stream goes on with the next producer (on Redis, once the lease lapses, a
    ///   standby's). A close held up on its way (in the network, or by a store that holds writes
    ///   back) may still land later: the next producer's acquisition then finds the stream
    ///   closed;
    /// - another reason: another producer closed the stream after a hand-over; both return
    ///   [`PublishError::Closed`] with it.
    ///
    /// # Cancel safety
    /// The producer is consumed when the close starts; a cancelled close may or may not have been
    /// recorded (the ring records it immediately). Later calls then behave as after a close that
    /// returned [`PublishError::Unavailable`].
    pub async fn close(&mut self, reason: CloseReason) -> Result<(), PublishError> {
        let Some(producer) = self.producer.take() else {
            let ended = self.ended().await;
            return if self.superseded { Err(ended) } else { Ok(()) };
        };
        // Given up until the backend confirms the close: a close that fails, or is cancelled
        // while in flight, must not make later calls claim an end no reader may ever see. Those
        // calls ask the backend whether it landed after all (`ended`).
        self.superseded = true;
        self.close_unconfirmed = Some(reason.clone());
        let closed = producer.close(reason.clone()).await;
        closed.map_err(PublishError::Unavailable)?;
        self.superseded = false;
        self.close_unconfirmed = None;
        self.close_reason = Some(reason);
        Ok(())
    }

    /// A close that a publish must make. If it is not confirmed, the backend says whether it
    /// landed: if not, this publisher gave the stream up, which is what the publish reports
    /// ([`PublishError::Superseded`]: publishing again would not retry); if another producer
    /// closed the stream after a hand-over, that close is what the publish reports.
    async fn close_or_give_up(&mut self, reason: CloseReason) -> Result<(), PublishError> {
        if self.close(reason).await.is_ok() {
            return Ok(());
        }
        let ended = self.ended().await;
        if self.superseded {
            Err(ended)
        } else {
            Ok(())
        }
    }
}
