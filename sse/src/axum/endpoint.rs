//! The event-stream responder: one GET in, one response out (a 200 stream or an explicit refusal).

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use ::axum::body::Body;
use ::axum::extract::State;
use ::axum::http::{HeaderMap, HeaderValue, StatusCode};
use ::axum::response::Response;
use bytes::{Bytes, BytesMut};
use futures_util::FutureExt;
use replay_ring::{BuildError, Producer, ReplayRing};
use tokio::sync::Notify;
use tokio::time::{sleep_until, Instant, Sleep};

use super::frames::{encode_cut, encode_terminal};
use super::producer::SseProducer;
use super::side_wake::{First, SideWake, Supervised};
use crate::backend::{Backend, BackendProducer, OpenError, Tail, TailError, Window};
use crate::frame::{encode_stream_event, stream_event_len_hint};
use crate::{
    encode_keep_alive, encode_priming, last_event_id, ConnectionId, EventId, EventIdBuf,
    HttpResponse, Refused, ResumeDecision, Retention, RetentionConfig, SlowConsumerPolicy,
    StreamIdentity, StreamState, LAST_EVENT_ID_HEADER,
};

/// Default [`SseConfig::keep_alive`]: 15 s, as in the MCP SDKs.
///
/// ```
/// use replay_ring_sse::axum::{SseConfig, DEFAULT_KEEP_ALIVE};
/// assert_eq!(SseConfig::default().keep_alive, DEFAULT_KEEP_ALIVE);
/// ```
pub const DEFAULT_KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Default [`SseConfig::retry`]: 1 s.
///
/// ```
/// use replay_ring_sse::axum::{SseConfig, DEFAULT_RETRY};
/// assert_eq!(SseConfig::default().retry, Some(DEFAULT_RETRY));
/// ```
pub const DEFAULT_RETRY: Duration = Duration::from_secs(1);

/// Encoded bytes one response chunk stops growing at (it always holds at least one event). A
/// client that comes back after a long absence is sent its catch-up in chunks of about this size, so
/// what a connection holds encoded at a time stays bounded however large the window is; the events
/// not yet encoded wait as reference-counted handles.
pub const MAX_CHUNK_BYTES: usize = 64 * 1024;

/// Settings of one resumable stream.
///
/// ```
/// use replay_ring_sse::axum::SseConfig;
/// let c = SseConfig { capacity: 4096, ..SseConfig::default() };
/// assert_eq!(c.max_connections, 64);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SseConfig {
    /// Events the window holds (rounded up to a power of two). Size it for
    /// `event rate × resumption window`, or the producer waits for events to age out. Used by
    /// [`SseStream::new`]; a backend passed to [`SseStream::with_backend`] has its own capacity.
    pub capacity: usize,
    /// Simultaneous event-stream responses (ring readers); one more is refused with 503. Used by
    /// [`SseStream::new`]; with [`SseStream::with_backend`] the backend's
    /// [`max_readers`](Backend::max_readers) is the limit.
    pub max_connections: usize,
    /// When events leave the window, and how long the producer may wait for space.
    pub retention: RetentionConfig,
    /// When one connection may no longer hold the stream back.
    pub slow_consumer: SlowConsumerPolicy,
    /// Idle time after which a `: keep-alive` comment is written.
    pub keep_alive: Duration,
    /// Reconnection delay announced in the priming event (`None`: leave the client's default).
    pub retry: Option<Duration>,
    /// Whether a resume with `Last-Event-ID = x` releases `..= x` at once (capped at the slowest
    /// live connection). Off by default: on a stream that several clients follow, one client's
    /// cursor says nothing about another, disconnected client that may still resume from an older
    /// id within the resumption window, so only the window (and the slowest live connection)
    /// releases. Turn it on only when each stream has exactly one client (one stream per request
    /// or per user), where a resume really is that client's acknowledgement.
    pub acknowledge_on_resume: bool,
}

impl Default for SseConfig {
    fn default() -> Self {
        SseConfig {
            capacity: 1024,
            max_connections: 64,
            retention: RetentionConfig::default(),
            slow_consumer: SlowConsumerPolicy::default(),
            keep_alive: DEFAULT_KEEP_ALIVE,
            retry: Some(DEFAULT_RETRY),
            acknowledge_on_resume: false,
        }
    }
}

/// What the endpoint counted so far (a snapshot; see also [`ReplayRing::metrics`] and
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
    streams_opened: AtomicU64,
    refused_400: AtomicU64,
    refused_404: AtomicU64,
    refused_409: AtomicU64,
    refused_416: AtomicU64,
    refused_503: AtomicU64,
    frames_written: AtomicU64,
    keep_alives: AtomicU64,
    slow_consumer_frames: AtomicU64,
    backend_unavailable_frames: AtomicU64,
    pub(crate) backpressure_timeouts: AtomicU64,
}

pub(crate) fn add(counter: &AtomicU64, n: u64) {
    // Relaxed: statistics only; nothing is published through these counters.
    counter.fetch_add(n, Ordering::Relaxed);
}

impl Counters {
    fn snapshot(&self) -> EndpointStats {
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

    fn refused(&self, status: u16) {
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
    fn take_publisher_waiting(&self, _held: &MutexGuard<'_, Retention>) -> bool {
        // Relaxed: the retention lock orders every access (see the field). A load first: most
        // chunks find the flag clear and leave its cache line shared.
        let waiting = self.publisher_waiting.load(Ordering::Relaxed);
        if waiting {
            self.publisher_waiting.store(false, Ordering::Relaxed);
        }
        waiting
    }

    /// The slow-consumer window (floor, head, capacity) for the retention state.
    async fn policy_window(&self) -> Option<crate::slow_consumer::Window> {
        let Window { floor, head } = self.backend.window().await.ok()?;
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
    async fn release_planned(
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

/// A resumable event stream that axum handlers answer from: the window, the stream's identity,
/// the retention state and the counters. Cheap to clone (one `Arc`).
///
/// [`respond`](Self::respond) turns a GET's headers into the response; the [`SseProducer`] from
/// [`new`](Self::new) publishes into it. See the [module docs](super) for a complete app.
///
/// # Backends
///
/// `B` is any [`Backend`] whose payload is [`Bytes`]: the in-process [`ReplayRing`] (the default,
/// built by [`new`](Self::new)), or a network store such as the Redis Streams backend of
/// `replay-ring-redis` (built by [`with_backend`](Self::with_backend) from its producer). The
/// endpoint uses only the backend traits: resume through [`Backend::resume`], events through
/// [`Tail::next_batch`], releases through [`Backend::release_through`]. A backend that cannot be
/// reached is answered with 503 `backend_unavailable` before a stream starts, and ends a started
/// stream with an explicit `stream-error` frame (`backend_unavailable`), never with a silent gap.
/// For any backend other than the ring, answer with [`respond_async`](Self::respond_async) or the
/// [`backend_events`] handler.
///
/// ```
/// use replay_ring_sse::axum::{SseConfig, SseStream};
/// use replay_ring_sse::{Epoch, StreamId, StreamIdentity};
///
/// let me = StreamIdentity::new(StreamId::new("events").unwrap(), Epoch::new(7));
/// let (stream, _producer) = SseStream::new(me, SseConfig::default()).unwrap();
/// assert_eq!(stream.identity(), me);
/// assert_eq!(stream.ring().capacity(), 1024);
/// ```
#[derive(Debug)]
pub struct SseStream<B = ReplayRing<Bytes>> {
    pub(crate) shared: Arc<Shared<B>>,
}

impl<B> Clone for SseStream<B> {
    fn clone(&self) -> Self {
        SseStream {
            shared: self.shared.clone(),
        }
    }
}

impl SseStream {
    /// A stream with a fresh window (ids from 1) and its producer.
    ///
    /// # Errors
    ///
    /// [`BuildError`] when `capacity` or `max_connections` is out of the ring's range.
    ///
    /// ```
    /// use replay_ring_sse::axum::{SseConfig, SseStream};
    /// use replay_ring_sse::{Epoch, StreamId, StreamIdentity};
    /// let me = StreamIdentity::new(StreamId::new("s").unwrap(), Epoch::new(1));
    /// assert!(SseStream::new(me, SseConfig { capacity: 0, ..SseConfig::default() }).is_err());
    /// ```
    pub fn new(
        identity: StreamIdentity,
        config: SseConfig,
    ) -> Result<(SseStream, SseProducer), BuildError> {
        let (producer, _ring): (Producer<Bytes>, _) = ReplayRing::builder()
            .capacity(config.capacity)
            .max_readers(config.max_connections)
            .build()?;
        Ok(SseStream::with_backend(producer, identity, config))
    }

    /// The stream's window (floor, head, metrics).
    ///
    /// ```
    /// # use replay_ring_sse::axum::{SseConfig, SseStream};
    /// # use replay_ring_sse::{Epoch, StreamId, StreamIdentity};
    /// # let me = StreamIdentity::new(StreamId::new("s").unwrap(), Epoch::new(1));
    /// let (stream, _producer) = SseStream::new(me, SseConfig::default()).unwrap();
    /// assert_eq!(stream.ring().head(), 0);
    /// ```
    pub fn ring(&self) -> &ReplayRing<Bytes> {
        &self.shared.backend
    }

    /// Answers one GET for the stream from its request headers; see
    /// [`respond_async`](SseStream::respond_async) for the responses. The ring answers every
    /// backend call at once, so this does not wait.
    ///
    /// ```
    /// use axum::http::{HeaderMap, StatusCode};
    /// use replay_ring_sse::axum::{SseConfig, SseStream};
    /// use replay_ring_sse::{Epoch, StreamId, StreamIdentity};
    ///
    /// let me = StreamIdentity::new(StreamId::new("events").unwrap(), Epoch::new(0xa));
    /// let (stream, _producer) = SseStream::new(me, SseConfig::default()).unwrap();
    /// let mut headers = HeaderMap::new();
    /// headers.insert("last-event-id", "events.a.5".parse().unwrap());
    /// let response = stream.respond(&headers);
    /// assert_eq!(response.status(), StatusCode::CONFLICT); // the stream has no event 5 yet
    /// assert_eq!(response.headers()["replay-head"], "0");
    /// ```
    pub fn respond(&self, headers: &HeaderMap) -> Response {
        // Every backend future of the ring is ready on its first poll, so this completes in one.
        // Should that ever change, the client gets an explicit 503 and retries.
        self.respond_async(headers)
            .now_or_never()
            .unwrap_or_else(|| self.refuse(&unavailable(None)))
    }
}

impl<B: Backend<Payload = Bytes>> SseStream<B> {
    /// A stream over `producer`'s backend (any [`Backend`] with [`Bytes`] payloads) and the
    /// producer that publishes into it. The retention table is sized by the backend's
    /// [`max_readers`](Backend::max_readers); [`SseConfig::capacity`] and
    /// [`SseConfig::max_connections`] are the backend's business.
    ///
    /// ```
    /// use bytes::Bytes;
    /// use replay_ring::ReplayRing;
    /// use replay_ring_sse::axum::{SseConfig, SseStream};
    /// use replay_ring_sse::backend::Backend;
    /// use replay_ring_sse::{Epoch, StreamId, StreamIdentity};
    ///
    /// let (producer, ring) = ReplayRing::<Bytes>::new(256, 8).unwrap();
    /// let me = StreamIdentity::new(StreamId::new("events").unwrap(), Epoch::new(1));
    /// let (stream, _producer) = SseStream::with_backend(producer, me, SseConfig::default());
    /// assert_eq!(Backend::capacity(stream.backend()), 256);
    /// # drop(ring);
    /// ```
    pub fn with_backend<P>(
        producer: P,
        identity: StreamIdentity,
        config: SseConfig,
    ) -> (SseStream<B>, SseProducer<B>)
    where
        P: BackendProducer<Backend = B>,
        B: Backend<Producer = P>,
    {
        let stream = SseStream::without_producer(producer.backend(), identity, config);
        let producer = stream.attach_producer(producer);
        (stream, producer)
    }

    /// A stream served from `backend` whose producer runs elsewhere: another replica on a shared
    /// network backend (Redis Streams), which holds the producer. Resumes, live tails, releases by
    /// the resumption window and the slow-consumer policy work as with
    /// [`with_backend`](Self::with_backend), judged by this process's connections.
    ///
    /// ```
    /// use bytes::Bytes;
    /// use replay_ring::ReplayRing;
    /// use replay_ring_sse::axum::{SseConfig, SseStream};
    /// use replay_ring_sse::{Epoch, StreamId, StreamIdentity};
    ///
    /// let (_producer, ring) = ReplayRing::<Bytes>::new(64, 4).unwrap();
    /// let me = StreamIdentity::new(StreamId::new("events").unwrap(), Epoch::new(1));
    /// let stream = SseStream::without_producer(ring, me, SseConfig::default());
    /// assert_eq!(stream.identity(), me);
    /// ```
    pub fn without_producer(backend: B, identity: StreamIdentity, config: SseConfig) -> Self {
        let retention = Retention::new(config.retention, backend.max_readers())
            .with_slow_consumer_policy(config.slow_consumer);
        SseStream {
            shared: Arc::new(Shared {
                backend,
                identity,
                retention: Mutex::new(retention),
                config,
                counters: Counters::default(),
                subscribed: Notify::new(),
                progress: Notify::new(),
                publisher_waiting: AtomicBool::new(false),
            }),
        }
    }

    /// The producer for a stream built [`without_producer`](Self::without_producer) that starts
    /// producing later: a standby replica that took the producer lease once the active one gave it
    /// up or crashed (for Redis, `RedisStream::acquire_producer_when_free`). `producer` must
    /// publish into this stream's backend, as for [`with_backend`](Self::with_backend); a backend
    /// admits one producer at a time (the ring's `Producer` is unique, Redis fences a second
    /// lease holder), so a stream never has two that publish.
    ///
    /// ```
    /// use bytes::Bytes;
    /// use replay_ring::ReplayRing;
    /// use replay_ring_sse::axum::{SseConfig, SseStream};
    /// use replay_ring_sse::{Epoch, StreamId, StreamIdentity};
    ///
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let (producer, ring) = ReplayRing::<Bytes>::new(64, 4).unwrap();
    /// let me = StreamIdentity::new(StreamId::new("events").unwrap(), Epoch::new(1));
    /// let stream = SseStream::without_producer(ring, me, SseConfig::default());
    /// // ... serving resumes meanwhile; then this process becomes the producer:
    /// let mut publisher = stream.attach_producer(producer);
    /// assert_eq!(publisher.send("first").await.unwrap(), 1);
    /// # });
    /// ```
    pub fn attach_producer(&self, producer: B::Producer) -> SseProducer<B>
    where
        B: Backend<Payload = Bytes>,
    {
        SseProducer::new(producer, self.clone())
    }

    /// The backend holding the stream's window.
    ///
    /// ```
    /// # use replay_ring_sse::axum::{SseConfig, SseStream};
    /// # use replay_ring_sse::{Epoch, StreamId, StreamIdentity};
    /// # let me = StreamIdentity::new(StreamId::new("s").unwrap(), Epoch::new(1));
    /// let (stream, _producer) = SseStream::new(me, SseConfig::default()).unwrap();
    /// assert_eq!(stream.backend().head(), 0);
    /// ```
    pub fn backend(&self) -> &B {
        &self.shared.backend
    }

    /// The stream's name and epoch.
    ///
    /// ```
    /// # use replay_ring_sse::axum::{SseConfig, SseStream};
    /// # use replay_ring_sse::{Epoch, StreamId, StreamIdentity};
    /// let me = StreamIdentity::new(StreamId::new("s").unwrap(), Epoch::new(1));
    /// let (stream, _producer) = SseStream::new(me, SseConfig::default()).unwrap();
    /// assert_eq!(stream.identity().stream.as_str(), "s");
    /// ```
    pub fn identity(&self) -> StreamIdentity {
        self.shared.identity
    }

    /// The settings.
    ///
    /// ```
    /// # use replay_ring_sse::axum::{SseConfig, SseStream};
    /// # use replay_ring_sse::{Epoch, StreamId, StreamIdentity};
    /// # let me = StreamIdentity::new(StreamId::new("s").unwrap(), Epoch::new(1));
    /// let (stream, _producer) = SseStream::new(me, SseConfig::default()).unwrap();
    /// assert_eq!(stream.config().max_connections, 64);
    /// ```
    pub fn config(&self) -> &SseConfig {
        &self.shared.config
    }

    /// Runs `f` with the retention state locked (for its [`stats`](Retention::stats)).
    ///
    /// ```
    /// # use replay_ring_sse::axum::{SseConfig, SseStream};
    /// # use replay_ring_sse::{Epoch, StreamId, StreamIdentity};
    /// # let me = StreamIdentity::new(StreamId::new("s").unwrap(), Epoch::new(1));
    /// let (stream, _producer) = SseStream::new(me, SseConfig::default()).unwrap();
    /// assert_eq!(stream.with_retention(|r| r.live_connections()), 0);
    /// ```
    pub fn with_retention<R>(&self, f: impl FnOnce(&mut Retention) -> R) -> R {
        f(&mut self.shared.retention())
    }

    /// The endpoint's counters.
    ///
    /// ```
    /// # use replay_ring_sse::axum::{SseConfig, SseStream};
    /// # use replay_ring_sse::{Epoch, StreamId, StreamIdentity};
    /// # let me = StreamIdentity::new(StreamId::new("s").unwrap(), Epoch::new(1));
    /// let (stream, _producer) = SseStream::new(me, SseConfig::default()).unwrap();
    /// let _ = stream.respond(&Default::default());
    /// assert_eq!(stream.stats().streams_opened, 1);
    /// ```
    pub fn stats(&self) -> EndpointStats {
        self.shared.counters.snapshot()
    }

    /// Answers one GET for the stream from its request headers:
    ///
    /// - `Last-Event-ID` absent: 200, live from the head; present and replayable: 200 with exactly
    ///   the events after it, then live (with [`SseConfig::acknowledge_on_resume`], everything up
    ///   to it is acknowledged);
    /// - otherwise an explicit refusal with a JSON body: 400 (invalid, or the header repeated),
    ///   404 (another stream or epoch), 409 (ahead of the head), 416 (released), 503 (no slot, or
    ///   the backend could not be reached);
    /// - every response carries `Replay-Floor`, `Replay-Head` and `Replay-Stream` when the backend
    ///   answered.
    ///
    /// A 200 starts with the priming event (`id:` = the client's cursor, `retry:`), writes whole
    /// batches as fast as the socket takes them, a keep-alive comment after
    /// [`SseConfig::keep_alive`] of silence, and ends with an explicit terminal frame (or a
    /// `slow_consumer` or `backend_unavailable` error frame when the connection is cut).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a tail opened by a cancelled call is dropped, which frees its slot; an
    /// acknowledgement release may or may not have happened (a resume acknowledges those ids
    /// either way).
    ///
    /// ```
    /// use axum::http::{HeaderMap, StatusCode};
    /// use replay_ring_sse::axum::{SseConfig, SseStream};
    /// use replay_ring_sse::{Epoch, StreamId, StreamIdentity};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let me = StreamIdentity::new(StreamId::new("events").unwrap(), Epoch::new(0xa));
    /// let (stream, _producer) = SseStream::new(me, SseConfig::default()).unwrap();
    /// let mut headers = HeaderMap::new();
    /// headers.insert("last-event-id", "events.a.5".parse().unwrap());
    /// let response = stream.respond_async(&headers).await;
    /// assert_eq!(response.status(), StatusCode::CONFLICT); // the stream has no event 5 yet
    /// # });
    /// ```
    pub async fn respond_async(&self, headers: &HeaderMap) -> Response {
        let shared = &self.shared;
        let values = headers.get_all(LAST_EVENT_ID_HEADER).iter();
        let cursor = match last_event_id(values.map(HeaderValue::as_bytes)) {
            Ok(None) => None,
            Ok(Some(value)) => match EventId::parse_bytes(value)
                .map_err(ResumeDecision::InvalidCursor)
                .and_then(|id| {
                    shared
                        .identity
                        .check(&id)
                        .map_err(ResumeDecision::StreamLost)
                }) {
                Ok(x) => Some(x),
                Err(decision) => return self.refuse_with_state(decision).await,
            },
            Err(err) => {
                return self
                    .refuse_with_state(ResumeDecision::InvalidCursor(err))
                    .await
            }
        };
        let tail = match shared.backend.resume(cursor).await {
            Ok(tail) => tail,
            Err(OpenError::Refused(err)) => {
                return self.refuse_with_state(ResumeDecision::from(err)).await
            }
            Err(OpenError::TooManyReaders { limit }) => {
                return self.refuse_with_state(ResumeDecision::Busy { limit }).await
            }
            Err(OpenError::Gone) => {
                return self.refuse(&Refused {
                    decision: ResumeDecision::SessionLost,
                    state: None,
                })
            }
            // `Unavailable`, and whatever later versions add: retry later, never a stream.
            Err(_) => return self.refuse(&unavailable(None)),
        };
        let start = tail.cursor() - 1;
        let conn = shared.retention().connect(start);
        let Some(conn) = conn else {
            // The table has max_readers entries, like the backend's reader table, so this only
            // happens while a cut connection still holds its entry: refuse explicitly.
            return self
                .refuse_with_state(ResumeDecision::Busy {
                    limit: shared.backend.max_readers(),
                })
                .await;
        };
        if let Some(acked) = cursor.filter(|_| shared.config.acknowledge_on_resume) {
            // A resume acknowledges everything up to its cursor (capped at the slowest other live
            // connection). A failed release is retried by later releases, which reach as far.
            let through = shared.retention().ack_target(acked);
            let before = shared.backend.window().await.map(|w| w.floor);
            if let (Ok(before), Ok(floor)) = (before, shared.backend.release_through(through).await)
            {
                if floor > before {
                    shared.retention().note_ack_release();
                }
            }
        }
        // Snapshot after the acknowledgement, so the advertised floor is the one now in force.
        let state = match shared.backend.window().await {
            Ok(w) => StreamState {
                identity: shared.identity,
                floor: w.floor,
                head: w.head,
            },
            Err(_) => {
                // Drop the connection entry before answering: this response holds nothing.
                shared
                    .retention()
                    .disconnect(conn, Instant::now().into_std());
                return self.refuse(&unavailable(None));
            }
        };
        add(&shared.counters.streams_opened, 1);
        // Stores a permit if the producer is not waiting yet: first_subscriber() then returns at once.
        shared.subscribed.notify_one();
        let plan = HttpResponse::stream(&state);
        let mut first = BytesMut::with_capacity(128);
        encode_priming(
            &mut first,
            shared.identity.event_id(start),
            shared.config.retry,
        );
        let writer = Writer {
            shared: shared.clone(),
            tail,
            batch: Vec::new(),
            encoded: 0,
            conn: Some(conn),
            buf: BytesMut::new(),
            handed: None,
            first: Some(first.freeze()),
            finished: false,
            keep_alive: None,
            timer_wake: SideWake::new(),
            last_handed: Instant::now(),
            id_prefix: shared.identity.id_prefix(),
        };
        let body = futures_util::stream::unfold(writer, |mut w| async move {
            let chunk = w.next_chunk().await?;
            Some((Ok::<Bytes, Infallible>(chunk), w))
        });
        to_axum(&plan, Body::from_stream(body))
    }

    /// A refusal carrying the stream's window, or 503 when the backend cannot say what it is.
    async fn refuse_with_state(&self, decision: ResumeDecision) -> Response {
        match self.shared.backend.window().await {
            Ok(w) => self.refuse(&Refused {
                decision,
                state: Some(StreamState {
                    identity: self.shared.identity,
                    floor: w.floor,
                    head: w.head,
                }),
            }),
            Err(_) => self.refuse(&unavailable(None)),
        }
    }

    fn refuse(&self, refused: &Refused) -> Response {
        let plan = HttpResponse::refused(refused);
        self.shared.counters.refused(plan.status);
        to_axum(&plan, Body::from(plan.body.clone()))
    }
}

/// An axum handler for a router whose state is (or contains, via `FromRef`) an [`SseStream`]:
/// `.route("/events", get(events))`. Same as [`SseStream::respond`].
///
/// # Cancel safety
///
/// The response is built without awaiting, so dropping the future loses nothing.
///
/// ```
/// use axum::{routing::get, Router};
/// use replay_ring_sse::axum::{events, SseConfig, SseStream};
/// use replay_ring_sse::{Epoch, StreamId, StreamIdentity};
///
/// let me = StreamIdentity::new(StreamId::new("events").unwrap(), Epoch::generate());
/// let (stream, _producer) = SseStream::new(me, SseConfig::default()).unwrap();
/// let app: Router = Router::new().route("/events", get(events)).with_state(stream);
/// ```
pub async fn events(State(stream): State<SseStream>, headers: HeaderMap) -> Response {
    stream.respond(&headers)
}

/// The 503 for a backend that could not be reached.
fn unavailable(state: Option<StreamState>) -> Refused {
    Refused {
        decision: ResumeDecision::Unavailable,
        state,
    }
}

/// The same handler as [`events`] for a stream over any backend: name the backend type,
/// `.route("/events", get(backend_events::<MyBackend>))`. Same as
/// [`SseStream::respond_async`].
///
/// # Cancel safety
///
/// As [`SseStream::respond_async`].
///
/// ```
/// use axum::{routing::get, Router};
/// use bytes::Bytes;
/// use replay_ring::ReplayRing;
/// use replay_ring_sse::axum::{backend_events, SseConfig, SseStream};
/// use replay_ring_sse::{Epoch, StreamId, StreamIdentity};
///
/// let (producer, _ring) = ReplayRing::<Bytes>::new(64, 4).unwrap();
/// let me = StreamIdentity::new(StreamId::new("events").unwrap(), Epoch::generate());
/// let (stream, _producer) = SseStream::with_backend(producer, me, SseConfig::default());
/// let app: Router = Router::new()
///     .route("/events", get(backend_events::<ReplayRing<Bytes>>))
///     .with_state(stream);
/// ```
pub async fn backend_events<B: Backend<Payload = Bytes>>(
    State(stream): State<SseStream<B>>,
    headers: HeaderMap,
) -> Response {
    stream.respond_async(&headers).await
}

fn to_axum(plan: &HttpResponse, body: Body) -> Response {
    let mut response = Response::new(body);
    *response.status_mut() =
        StatusCode::from_u16(plan.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    for (name, value) in &plan.headers {
        // Values are visible ASCII by construction (numbers and validated names).
        if let Ok(value) = HeaderValue::from_str(value) {
            response.headers_mut().append(*name, value);
        }
    }
    response
}

/// One event-stream response body: reads whole batches from the backend as the HTTP stack asks
/// for chunks, so it drains at socket speed and holds no pin while the socket is slow.
struct Writer<B: Backend> {
    shared: Arc<Shared<B>>,
    tail: B::Tail,
    /// Reused batch: once it has grown to the largest batch, reading does not allocate.
    batch: Vec<(u64, Bytes)>,
    /// How many events of `batch` are already encoded: a batch larger than one chunk
    /// ([`MAX_CHUNK_BYTES`]) is sent over several.
    encoded: usize,
    conn: Option<ConnectionId>,
    /// The chunk being encoded, allocated per chunk (see [`take_chunk`](Self::take_chunk)).
    buf: BytesMut,
    /// The chunk handed to the HTTP stack and not yet taken: `Some(last id in it)` (0 for a chunk
    /// without events). The stack asking for the next chunk means it took this one.
    handed: Option<u64>,
    first: Option<Bytes>,
    finished: bool,
    /// The keep-alive timer, armed for `last_handed + keep_alive` at most once per interval: a
    /// timer set and cancelled per chunk would cost two timer-wheel updates per event and
    /// connection. Created at the first wait (a timer needs the runtime the body is polled on).
    keep_alive: Option<Pin<Box<Sleep>>>,
    /// The keep-alive timer's own waker: the timer is polled when it fired, not on every wake-up.
    timer_wake: SideWake,
    /// When the last chunk was handed to the HTTP stack.
    last_handed: Instant,
    /// The stream's ids up to the sequence number, rendered once.
    id_prefix: EventIdBuf,
}

impl<B: Backend<Payload = Bytes>> Writer<B> {
    async fn next_chunk(&mut self) -> Option<Bytes> {
        if self.finished {
            return None;
        }
        // Borrowed, not cloned: every connection's writer runs this per chunk, and cloning the
        // `Arc` would bounce its count between the worker threads twice per chunk.
        let shared = &*self.shared;
        let conn = self.conn.as_ref()?;
        let now = Instant::now().into_std();
        let window = shared.policy_window().await;
        // One look at the retention state per chunk (every connection of the stream takes this
        // lock): record the chunk written, apply the slow-consumer policy and plan what expired
        // (as `release_due`), and read this connection's verdict after that.
        let (target, cut, publisher_waits) = {
            let mut retention = shared.retention();
            if let Some(through) = self.handed.take() {
                retention.on_written(conn, through, now);
            }
            // No window: the backend cannot answer now; the checkpoints stay for the next look.
            let target = window.and_then(|window| retention.release_target(window, now));
            let publisher_waits = shared.take_publisher_waiting(&retention);
            (target, retention.cut_verdict(conn), publisher_waits)
        };
        if publisher_waits {
            // Before any await: this writer took the request, so a writer dropped during the
            // release below must not swallow it. A permit is stored if the publisher is not
            // waiting yet, so the wake-up is never lost (at worst it costs the publisher one
            // extra look at the retention state).
            shared.progress.notify_one();
        }
        // A release wakes a producer waiting for room.
        if let Some(window) = window {
            shared.release_planned(window, target).await;
        }
        if let Some(verdict) = cut {
            // Cut by the slow-consumer policy: say so where the socket still takes a frame, and
            // end. The client resumes with its Last-Event-ID like after any disconnect.
            self.finished = true;
            add(&shared.counters.slow_consumer_frames, 1);
            encode_cut(&mut self.buf, &verdict);
            return Some(self.take_chunk());
        }
        let chunk = match self.first.take() {
            Some(first) => {
                self.handed = Some(0);
                first
            }
            None => self.read_chunk().await,
        };
        self.last_handed = Instant::now();
        if let (false, Some(conn)) = (self.finished, &self.conn) {
            self.shared
                .retention()
                .on_write_pending(conn, self.last_handed.into_std());
        }
        Some(chunk)
    }

    /// Encodes the rest of the current batch, or waits for events (or the keep-alive interval)
    /// and encodes them.
    async fn read_chunk(&mut self) -> Bytes {
        if self.encoded < self.batch.len() {
            self.encode_batch();
            return self.take_chunk();
        }
        let due = self.last_handed + self.shared.config.keep_alive;
        let timer = self.keep_alive.get_or_insert_with(|| {
            self.timer_wake.arm();
            Box::pin(sleep_until(due))
        });
        loop {
            // The timer is polled only when it fired, not on every event's wake-up. Cancel safe
            // (the `Tail` contract): losing to the keep-alive timer takes no event.
            let first = {
                let read = std::pin::pin!(self.tail.next_batch(&mut self.batch));
                Supervised::new(&mut self.timer_wake, read, timer.as_mut()).await
            };
            match first {
                First::Main(Ok(_)) => {
                    self.encoded = 0;
                    self.encode_batch();
                }
                First::Main(Err(err)) => {
                    self.finished = true;
                    if matches!(err, TailError::Unavailable(_)) {
                        add(&self.shared.counters.backend_unavailable_frames, 1);
                    }
                    encode_terminal(&mut self.buf, &err);
                }
                First::Side(()) => {
                    if Instant::now() < due {
                        // Set for an earlier chunk's deadline: move it to this one's and wait on.
                        timer.as_mut().reset(due);
                        self.timer_wake.arm();
                        continue;
                    }
                    add(&self.shared.counters.keep_alives, 1);
                    encode_keep_alive(&mut self.buf);
                    self.handed = Some(0);
                    // The timer has fired and fires no more: the next wait polls it first, which
                    // moves it to that wait's deadline (the branch above).
                    self.timer_wake.arm();
                }
            }
            break;
        }
        self.take_chunk()
    }

    /// The encoded chunk, handed over whole: each chunk is its own allocation. One buffer per
    /// connection that chunks are split off would write every event to bytes of that connection's
    /// buffer not touched since its previous events, which with thousands of connections are out
    /// of the cache (and, the first time, a page fault). A fresh allocation of the size the chunk
    /// needs is memory the worker's allocator just got back from an earlier chunk, hot in its
    /// cache; and a connection between chunks holds no buffer at all.
    fn take_chunk(&mut self) -> Bytes {
        std::mem::take(&mut self.buf).freeze()
    }

    /// Encodes events of `batch` from `encoded` on until the chunk reaches [`MAX_CHUNK_BYTES`].
    fn encode_batch(&mut self) {
        // One allocation for the chunk, of the size its events take (exactly, for one-line
        // payloads: a `Bytes` made from a full allocation needs no second one for its count).
        let mut size = 0;
        for (id, payload) in &self.batch[self.encoded..] {
            size += stream_event_len_hint(self.id_prefix.len_with_seq(*id), payload.len());
            if size >= MAX_CHUNK_BYTES {
                break;
            }
        }
        self.buf.reserve(size);
        let mut last = 0;
        let mut n = 0;
        for (id, payload) in &self.batch[self.encoded..] {
            encode_stream_event(&mut self.buf, self.id_prefix, *id, payload);
            last = *id;
            n += 1;
            if self.buf.len() >= MAX_CHUNK_BYTES {
                break;
            }
        }
        self.encoded += n;
        if self.encoded == self.batch.len() {
            // Drops the payload handles now; `clear` keeps the capacity for the next read.
            self.batch.clear();
            self.encoded = 0;
        }
        add(&self.shared.counters.frames_written, n as u64);
        self.handed = Some(last);
    }
}

impl<B: Backend> Drop for Writer<B> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.shared
                .retention()
                .disconnect(conn, Instant::now().into_std());
        }
    }
}
