//! The event-stream responder: one GET in, one response out (a 200 stream or an explicit refusal).

use std::borrow::Cow;
use std::convert::Infallible;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use ::axum::body::Body;
use ::axum::extract::{RawQuery, State};
use ::axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use ::axum::response::Response;
use bytes::{Bytes, BytesMut};
use futures_util::FutureExt;
use replay_ring::{classify_resume, ReplayRing};

use super::background_release::{poke, BackgroundRelease};
use super::config::SseConfig;
use super::shared::{add, EndpointStats, Shared};
use super::writer::Writer;
use crate::backend::{Backend, OpenError, Tail, Window};
use crate::{
    encode_priming, last_event_id, EventId, HttpResponse, LastEventIdError, Refused,
    ResumeDecision, Retention, StreamIdentity, StreamState, LAST_EVENT_ID_HEADER,
};

/// A resumable event stream that axum handlers answer from: the window, the stream's identity,
/// the retention state and the counters. Cheap to clone (one `Arc`).
///
/// [`respond`](Self::respond) turns a GET's headers into the response; the
/// [`SseProducer`](super::SseProducer) from [`new`](Self::new) publishes into it. See the
/// [module docs](super) for a complete app.
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
    /// Reads the cursor from the `Last-Event-ID` header only. A handler that serves `EventSource`
    /// polyfills, which send the cursor of a reconnect as `?lastEventId=` when they cannot set
    /// headers, calls [`respond_to_request`](Self::respond_to_request) instead: with `respond`,
    /// such a reconnect gets the stream from the head.
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
        self.respond_as(headers, Request::Get)
    }

    /// Answers one request for the stream as the [`events`] handler does, for an app that writes
    /// its own handler (to check a token first, or to pick the stream by path): the cursor from
    /// `Last-Event-ID` or, from a client that cannot set headers, from the
    /// [`LAST_EVENT_ID_QUERY`] parameter of `uri`'s query; a `HEAD` gets the status and headers
    /// of the `GET` and changes nothing (axum routes a `HEAD` to a `get` handler). A `HEAD` is
    /// answered from the window and opens no reader (unless the window cannot be read), so it
    /// gets what the `GET` would get with a free reader entry.
    ///
    /// ```
    /// use axum::extract::State;
    /// use axum::http::{HeaderMap, Method, StatusCode, Uri};
    /// use axum::response::{IntoResponse, Response};
    /// use replay_ring_sse::axum::SseStream;
    ///
    /// async fn my_events(
    ///     State(stream): State<SseStream>,
    ///     method: Method,
    ///     uri: Uri,
    ///     headers: HeaderMap,
    /// ) -> Response {
    ///     if !headers.contains_key("authorization") {
    ///         return StatusCode::UNAUTHORIZED.into_response();
    ///     }
    ///     stream.respond_to_request(&method, &uri, &headers)
    /// }
    /// ```
    pub fn respond_to_request(&self, method: &Method, uri: &Uri, headers: &HeaderMap) -> Response {
        let headers = with_query_cursor(Cow::Borrowed(headers), uri.query());
        self.respond_as(&headers, Request::of(method))
    }

    /// [`respond`](Self::respond) to a `GET` or a `HEAD`.
    fn respond_as(&self, headers: &HeaderMap, request: Request) -> Response {
        // Every backend future of the ring is ready on its first poll, so this completes in one.
        // Should that ever change, the client gets an explicit 503 and retries.
        self.respond_to(headers, request)
            .now_or_never()
            .unwrap_or_else(|| self.refuse(&unavailable(None)))
    }
}

impl<B: Backend<Payload = Bytes>> SseStream<B> {
    /// A stream served from `backend` whose producer runs elsewhere: another replica on a shared
    /// network backend (Redis Streams), which holds the producer. Resumes, live tails, releases by
    /// the resumption window and the slow-consumer policy work as with
    /// [`with_backend`](Self::with_backend), judged by this process's connections.
    ///
    /// # Panics
    ///
    /// If `config` fails one of [`SseConfig::check`]'s checks other than `capacity` and
    /// `max_connections` (which the backend decides): a keep-alive shorter than 10 ms, a `retry`
    /// past what browsers' timers hold, a slow-consumer policy that cannot work. These are the
    /// program's settings, not a client's input; check settings that come from outside first.
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
        if let Err(e) = config.check_stream_settings() {
            panic!("invalid SseConfig: {e}");
        }
        let retention = Retention::new(config.retention, backend.max_readers())
            .with_slow_consumer_policy(config.slow_consumer)
            .with_vacancy_release(backend.readers_are_local());
        SseStream {
            shared: Arc::new(Shared::new(backend, identity, retention, config)),
        }
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
    /// assert_eq!(stream.config().max_connections, 10_000);
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
    /// The cursor comes from the `Last-Event-ID` header only, and a `HEAD` is answered as a `GET`;
    /// [`respond_to_request_async`](Self::respond_to_request_async) also reads the
    /// [`LAST_EVENT_ID_QUERY`] parameter that `EventSource` polyfills send, and answers a `HEAD`
    /// without changing anything.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a tail opened by a cancelled call is dropped, which frees its slot in the
    /// backend and in the retention policy's connection table; an acknowledgement release may or
    /// may not have happened (a resume acknowledges those ids either way).
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
        self.respond_to(headers, Request::Get).await
    }

    /// [`respond_to_request`](SseStream::respond_to_request) for a stream over any backend: the
    /// cursor from `Last-Event-ID` or the [`LAST_EVENT_ID_QUERY`] parameter, and a `HEAD` that
    /// changes nothing, as [`backend_events`] answers.
    ///
    /// # Cancel safety
    ///
    /// As [`respond_async`](Self::respond_async).
    pub async fn respond_to_request_async(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
    ) -> Response {
        let headers = with_query_cursor(Cow::Borrowed(headers), uri.query());
        self.respond_to(&headers, Request::of(method)).await
    }

    /// [`respond_async`](Self::respond_async) to a `GET` or a `HEAD`.
    async fn respond_to(&self, headers: &HeaderMap, request: Request) -> Response {
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
        if request == Request::Head {
            if let Some(response) = self.answer_head(cursor).await {
                return response;
            }
        }
        let tail = match shared.backend.resume(cursor).await {
            Ok(tail) => tail,
            Err(OpenError::Refused(err)) => {
                return self.refuse_with_state(ResumeDecision::from(err)).await
            }
            Err(OpenError::TooManyReaders { limit }) => {
                return self.refuse_with_state(ResumeDecision::Busy { limit }).await
            }
            Err(OpenError::Gone) => {
                // Deleted, expired or lost in the backend (Redis restarted without persistence):
                // the stream is gone, as one this server never had (404 `stream_lost`).
                let stream = shared.identity.stream;
                let lost = LastEventIdError::UnknownStream { stream };
                return self.refuse(&Refused {
                    decision: ResumeDecision::StreamLost(lost),
                    state: None,
                });
            }
            // `Unavailable`, and whatever later versions add: retry later, never a stream.
            Err(_) => return self.refuse(&unavailable(None)),
        };
        let start = tail.cursor() - 1;
        if request == Request::Head {
            // Only where `answer_head` could not read the window. The status and headers a `GET`
            // would get, and nothing else: no connection of the retention policy (its departure
            // would claim everything after the cursor for another window, so a client sending
            // nothing but `HEAD`s with an old cursor could hold a stream nobody follows until it
            // filled and ended), no acknowledgement, no subscriber. Taking no entry of the
            // connection table, it is not refused when a cut connection still holds the last
            // one, as a `GET` is.
            drop(tail);
            return match shared.backend.window().await {
                Ok(w) => self.head_stream(w, start),
                Err(_) => self.refuse(&unavailable(None)),
            };
        }
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
        // From here the writer owns the tail and the connection entry, and frees both when it is
        // dropped: when the client goes away while the calls below wait for the backend (this
        // future is dropped), as well as when the response ends.
        let mut first = BytesMut::with_capacity(128);
        encode_priming(
            &mut first,
            shared.identity.event_id(start),
            shared.config.retry,
        );
        let mut writer = Writer::new(shared.clone(), tail, conn, first.freeze());
        if let Some(acked) = cursor.filter(|_| shared.config.acknowledge_on_resume) {
            // A resume acknowledges everything up to its cursor (capped at the slowest other live
            // connection). A failed release is retried by later releases, which reach as far.
            // A backend that holds the write back does not hold the response back: the writer
            // drives the release beside it (`background_release`).
            let through = shared.retention().ack_target(acked);
            let ack = shared.clone();
            let mut release = Some(BackgroundRelease::new(through, async move {
                let before = ack.backend.window().await.map(|w| w.floor);
                if let (Ok(before), Ok(floor)) =
                    (before, ack.backend.release_through(through).await)
                {
                    if floor > before {
                        ack.retention().note_ack_release();
                    }
                }
            }));
            poke(&mut release).await;
            if let Some(release) = release {
                writer.drive_release(release);
            }
        }
        // Snapshot after the acknowledgement, so the advertised floor is the one now in force
        // (where the backend finished it at once; one that holds it back may advertise the floor
        // from before it); but never above `start + 1`. The tail was opened at `start`, so the replay begins
        // there, and a release that landed since (another connection's, or the window's) must not
        // make this 200 look like a failed resume (`Replay-Floor > cursor + 1`) to a client.
        let state = match shared.backend.window().await {
            Ok(w) => StreamState {
                identity: shared.identity,
                floor: w.floor.min(start + 1),
                head: w.head,
            },
            Err(_) => {
                // Free the connection entry before answering: this response holds nothing.
                drop(writer);
                return self.refuse(&unavailable(None));
            }
        };
        add(&shared.counters.streams_opened, 1);
        // Stores a permit if the producer is not waiting yet: first_subscriber() then returns at once.
        shared.subscribed.notify_one();
        announce_subscriber(shared);
        let plan = HttpResponse::stream(&state);
        let body = futures_util::stream::unfold(writer, |mut w| async move {
            let chunk = w.next_chunk().await?;
            Some((Ok::<Bytes, Infallible>(chunk), w))
        });
        to_axum(&plan, Body::from_stream(body))
    }

    /// A `HEAD`'s answer from one read of the window: the status and headers the `GET` would
    /// get with a free reader entry, without opening a tail. A tail would take one of the
    /// backend's reader entries until it is dropped, and a `GET` arriving meanwhile could be
    /// refused (503 `too_many_readers`) for a table that `HEAD`s, not connections, filled.
    /// `None` when the window could not be read: the caller then opens a tail as for a `GET`,
    /// which tells a lost stream (404) from an unreachable backend (503).
    ///
    /// The window decides what it can see: a backend whose `resume` finds more than its
    /// window shows (Redis, reading a log that lost entries behind its meta key's back) answers
    /// the `GET` 404 where this answers 200. A `HEAD` delivers nothing, so that is no gap.
    async fn answer_head(&self, cursor: Option<u64>) -> Option<Response> {
        let shared = &self.shared;
        let w = shared.backend.window().await.ok()?;
        let state = StreamState {
            identity: shared.identity,
            floor: w.floor,
            head: w.head,
        };
        let start = match cursor {
            None => w.head,
            Some(x) => match classify_resume(w.floor, w.head, x) {
                Ok(_) => x,
                Err(refused) => {
                    return Some(self.refuse(&Refused {
                        decision: ResumeDecision::from(refused),
                        state: Some(state),
                    }))
                }
            },
        };
        Some(self.head_stream(w, start))
    }

    /// A `HEAD`'s 200: the status and headers of the `GET` whose stream starts after `start`,
    /// in window `w`, and no body.
    fn head_stream(&self, w: Window, start: u64) -> Response {
        // As the `GET` advertises it: a replay starts at `start + 1`, which the floor is never
        // above.
        let state = StreamState {
            identity: self.shared.identity,
            floor: w.floor.min(start + 1),
            head: w.head,
        };
        // A body of unknown length, as the `GET`'s: an empty body of known size would add
        // `Content-Length: 0`, which a `HEAD` must not claim for a stream.
        let none = futures_util::stream::empty::<Result<Bytes, Infallible>>();
        to_axum(&HttpResponse::stream(&state), Body::from_stream(none))
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

/// Tells the other processes serving a shared stream that it has a subscriber here, once (see
/// [`Backend::announce_subscriber`]): a producer elsewhere that waits for its first subscriber
/// starts. On a task of its own, so that no response waits for it. If it fails, it is tried again
/// while a connection of this endpoint is live: one client may be all there is (a producer that
/// waits for it would otherwise wait for good, and the client on keep-alives). Once none is, the
/// next stream to open tries again.
fn announce_subscriber<B: Backend<Payload = Bytes>>(shared: &Arc<Shared<B>>) {
    // Relaxed: a flag that only keeps the announcement from being repeated; the retention lock
    // orders its clearing against a stream's connect (below).
    if shared.backend.readers_are_local() || shared.announced.swap(true, Relaxed) {
        return;
    }
    // Weak: a retry must not keep an endpoint nobody serves any more alive.
    let weak = Arc::downgrade(shared);
    tokio::spawn(async move {
        let mut backoff = ANNOUNCE_RETRY_FIRST;
        loop {
            let Some(shared) = weak.upgrade() else { return };
            if shared.backend.announce_subscriber().await.is_ok() {
                return;
            }
            {
                // Under the retention lock, where streams connect (before they swap the flag):
                // a stream that connects after this check finds the flag clear and announces
                // itself; one that connected before keeps this task retrying.
                let retention = shared.retention();
                if retention.live_connections() == 0 {
                    // Relaxed: as above.
                    shared.announced.store(false, Relaxed);
                    return;
                }
            }
            drop(shared);
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(ANNOUNCE_RETRY_MAX);
        }
    });
}

/// The first wait before a failed announcement is tried again; it doubles up to
/// [`ANNOUNCE_RETRY_MAX`], which bounds how long a first subscriber waits for the producer once
/// the backend is back.
const ANNOUNCE_RETRY_FIRST: Duration = Duration::from_millis(100);
const ANNOUNCE_RETRY_MAX: Duration = Duration::from_secs(2);

/// The query parameter that `EventSource` polyfills send the cursor in on a reconnect when they
/// cannot set headers: `/events?lastEventId=<id>`. [`events`] and [`backend_events`] read it
/// when the request has no `Last-Event-ID` header (a header, where there is one, is the client's
/// current position); without a parameter of exactly this name, also one whose name differs only in ASCII case
/// (`lasteventid`), or that follows a `;` rather than a `&`: a cursor they did not recognise
/// would be ignored, and the client would get the stream from the head.
pub const LAST_EVENT_ID_QUERY: &str = "lastEventId";

/// `headers` with the cursor of every non-empty [`LAST_EVENT_ID_QUERY`] parameter added as a
/// `Last-Event-ID` value, when the request has no `Last-Event-ID` header. A cursor the endpoint
/// would otherwise not see would be a silent gap: the client asked to resume and got the stream
/// from the head. Two parameters make a repeated header, refused with 400 like any other, even
/// when they are equal: a parameter sent twice is as ambiguous as a header sent twice.
///
/// A request that has the header is answered from the header alone. A native `EventSource`
/// opened on `/events?lastEventId=<id>` (the way a page resumes on load, since it cannot set
/// headers) keeps that URL on its automatic reconnects and sends its newer cursor in the header:
/// the header is the client's current position, and the query only where it started.
///
/// The parameters are those named exactly [`LAST_EVENT_ID_QUERY`] between `&`s. Only when there
/// is none are they looked for leniently: the name in any ASCII case, and `;` separating
/// parameters too (an old form-encoding convention some clients still use; otherwise
/// `?a=1;lastEventId=…` hides the cursor inside `a`'s value, and no event id contains a `;`).
/// So a query the exact rule reads is read as it always was.
///
/// Borrowed headers are copied only when a cursor is added to them.
fn with_query_cursor<'h>(headers: Cow<'h, HeaderMap>, query: Option<&str>) -> Cow<'h, HeaderMap> {
    let Some(query) = query else {
        return headers;
    };
    if headers.contains_key(LAST_EVENT_ID_HEADER) {
        return headers;
    }
    let exact = |key: &str| key == LAST_EVENT_ID_QUERY;
    let has_exact =
        form_urlencoded::parse(query.as_bytes()).any(|(k, v)| exact(&k) && !v.is_empty());
    if has_exact {
        return add_query_cursors(headers, query, exact);
    }
    let lenient = query.replace(';', "&");
    add_query_cursors(headers, &lenient, |key| {
        key.eq_ignore_ascii_case(LAST_EVENT_ID_QUERY)
    })
}

/// [`with_query_cursor`] for the parameters of `query` whose name `is_cursor` accepts.
fn add_query_cursors<'h>(
    mut headers: Cow<'h, HeaderMap>,
    query: &str,
    is_cursor: impl Fn(&str) -> bool,
) -> Cow<'h, HeaderMap> {
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        if !is_cursor(&key) || value.is_empty() {
            continue;
        }
        // A control character cannot be in a header value: it becomes a `?`, which no id
        // contains either, so the cursor is refused as malformed at that byte's offset.
        let bytes: Vec<u8> = value
            .bytes()
            .map(|b| if b.is_ascii_control() { b'?' } else { b })
            .collect();
        let value =
            HeaderValue::from_bytes(&bytes).unwrap_or(HeaderValue::from_static("malformed"));
        headers.to_mut().append(LAST_EVENT_ID_HEADER, value);
    }
    headers
}

/// An axum handler for a router whose state is (or contains, via `FromRef`) an [`SseStream`]:
/// `.route("/events", get(events))`. Same as [`SseStream::respond`], with the cursor also taken
/// from a [`LAST_EVENT_ID_QUERY`] query parameter (as `EventSource` polyfills send it). A `HEAD`
/// (which axum routes to a `get` handler) is answered with the same status and headers and
/// changes nothing: it never acknowledges its cursor ([`SseConfig::acknowledge_on_resume`]), nor
/// holds the window as a connection does ([`Retention`]), nor opens a reader (it is answered
/// from the window, as the `GET` would be with a free reader entry), nor counts as a subscriber.
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
pub async fn events(
    State(stream): State<SseStream>,
    method: Method,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let headers = with_query_cursor(Cow::Owned(headers), query.as_deref());
    stream.respond_as(&headers, Request::of(&method))
}

/// What the handlers answer: axum routes a `HEAD` to a `get` handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Request {
    Get,
    /// Answered with the status and headers of the `GET`, changing nothing.
    Head,
}

impl Request {
    fn of(method: &Method) -> Self {
        if method == Method::HEAD {
            Request::Head
        } else {
            Request::Get
        }
    }
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
/// [`SseStream::respond_async`], with the cursor also taken from a [`LAST_EVENT_ID_QUERY`] query
/// parameter, and a `HEAD` never acknowledging, as with [`events`].
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
    method: Method,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let headers = with_query_cursor(Cow::Owned(headers), query.as_deref());
    stream.respond_to(&headers, Request::of(&method)).await
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
