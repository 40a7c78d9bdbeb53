//! A drop-in axum endpoint for a resumable event stream (feature `axum`).
//!
//! - [`SseStream`] answers `GET` requests ([`SseStream::respond`], or the [`events`] handler):
//!   strict `Last-Event-ID` parsing, the priming event with `retry:`, replay of exactly the events
//!   after the cursor, keep-alive comments, explicit 400/404/409/416/503 refusals with JSON bodies
//!   and `Replay-*` headers, and a per-connection writer that drains at socket speed.
//! - [`SseProducer`] publishes into it through the crate's [`Publisher`](crate::Publisher), waiting
//!   while the window is full and closing the stream explicitly past the backpressure bound; never
//!   dropping an event.
//! - A connection that stops reading is cut by the [`SlowConsumerPolicy`](crate::SlowConsumerPolicy)
//!   (it ends with a `slow_consumer` error frame where the socket still takes one) and then holds
//!   events only as a disconnected client does, so one stalled client cannot end the stream for
//!   everyone.
//! - [`serve`] runs a router with header-read, body-read, write and idle timeouts and a connection cap
//!   answered with 503; [`serve_with_shutdown`] also shuts down gracefully on a signal.
//! - With feature `metrics`, `SseStream::record_metrics` publishes the counters through the
//!   `metrics` facade, for any exporter.
//!
//! # Backends
//!
//! The endpoint works on any [`Backend`](crate::backend::Backend) whose payload is
//! [`Bytes`](bytes::Bytes), through the backend traits only: the in-process
//! [`ReplayRing`](replay_ring::ReplayRing) is the default (`SseStream` is
//! `SseStream<ReplayRing<Bytes>>`, built by [`SseStream::new`]); a network store such as the Redis
//! Streams backend of `replay-ring-redis` plugs in through [`SseStream::with_backend`] and the
//! [`backend_events`] handler. A backend that cannot be reached is answered with 503
//! `backend_unavailable` before a stream starts and ends a started stream with an explicit
//! `stream-error` frame (`backend_unavailable`); the client resumes with its `Last-Event-ID`.
//!
//! ```
//! use axum::{routing::get, Router};
//! use bytes::Bytes;
//! use replay_ring_sse::axum::{backend_events, SseConfig, SseProducer, SseStream};
//! use replay_ring_sse::backend::{Backend, BackendProducer};
//! use replay_ring_sse::{Epoch, StreamId, StreamIdentity};
//!
//! /// The same app over any backend, given its producer; returns the publisher with the router.
//! /// Keep the publisher (send with it). Dropping it closes a ring's stream (`producer_dropped`);
//! /// a network backend's stream stays open until closed with `SseProducer::close` (Redis: its
//! /// lease then lapses, and another replica can take over producing).
//! fn app<B: Backend<Payload = Bytes>>(producer: B::Producer) -> (Router, SseProducer<B>) {
//!     let me = StreamIdentity::new(StreamId::new("events").unwrap(), Epoch::generate());
//!     let (stream, publisher) = SseStream::with_backend(producer, me, SseConfig::default());
//!     let router = Router::new().route("/events", get(backend_events::<B>)).with_state(stream);
//!     (router, publisher)
//! }
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let (producer, _ring) = replay_ring::ReplayRing::<Bytes>::new(1024, 64).unwrap();
//! let (_router, mut publisher) = app::<replay_ring::ReplayRing<Bytes>>(producer);
//! assert_eq!(publisher.send("first").await.unwrap(), 1);
//! # });
//! ```
//!
//! A resumable endpoint in an existing axum app (`run` serves it on a bound listener; the same
//! code is driven over real HTTP by the crate's tests):
#![doc = concat!("```\n", include_str!("snippet.rs"), "```")]
//!
//! # When a stream ends
//!
//! An end is final for the stream's identity: its clients get the terminal frame with the reason
//! (`end`, or `stream-error` with `backpressure_timeout`, `producer_dropped`, …), and every later
//! request for it gets that end again, so that no client takes a new stream for the old one. To go
//! on serving under the same route, start the next stream (a new epoch) and answer from whichever
//! is current. A client still holding a cursor of the old epoch gets 404 `unknown_epoch` and starts
//! over without `Last-Event-ID`, as after a server restart.
//!
//! ```
//! use std::sync::{Arc, RwLock};
//!
//! use axum::extract::State;
//! use axum::http::{HeaderMap, Method, StatusCode, Uri};
//! use axum::response::Response;
//! use axum::{routing::get, Router};
//! use replay_ring_sse::axum::{SseConfig, SseProducer, SseStream};
//! use replay_ring_sse::{Epoch, StreamId, StreamIdentity};
//!
//! /// The stream that `/events` answers from now.
//! type Current = Arc<RwLock<SseStream>>;
//!
//! async fn events(State(current): State<Current>, method: Method, uri: Uri, headers: HeaderMap)
//!     -> Response
//! {
//!     let stream = current.read().unwrap().clone();
//!     stream.respond_to_request(&method, &uri, &headers)
//! }
//!
//! /// A new incarnation of the stream, in place of the one that ended.
//! fn start_over(current: &Current) -> SseProducer {
//!     let me = StreamIdentity::new(StreamId::new("events").unwrap(), Epoch::generate());
//!     let (stream, producer) = SseStream::new(me, SseConfig::default()).unwrap();
//!     *current.write().unwrap() = stream;
//!     producer
//! }
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let me = StreamIdentity::new(StreamId::new("events").unwrap(), Epoch::generate());
//! let (first, producer) = SseStream::new(me, SseConfig::default()).unwrap();
//! let current: Current = Arc::new(RwLock::new(first));
//! let _app: Router = Router::new().route("/events", get(events)).with_state(current.clone());
//!
//! drop(producer); // the first stream ends (`producer_dropped`)
//! let mut producer = start_over(&current);
//! producer.send("first of the next stream").await.unwrap();
//!
//! let status_of = |cursor: Option<String>| {
//!     let mut headers = HeaderMap::new();
//!     if let Some(cursor) = cursor {
//!         headers.insert("last-event-id", cursor.parse().unwrap());
//!     }
//!     let stream = current.read().unwrap().clone();
//!     stream.respond_to_request(&Method::GET, &Uri::from_static("/events"), &headers).status()
//! };
//! assert_eq!(status_of(None), StatusCode::OK);
//! assert_eq!(status_of(Some(me.event_id(0).to_string())), StatusCode::NOT_FOUND); // old epoch
//! # });
//! ```

mod background_release;
mod body_deadline;
mod config;
mod endpoint;
mod frames;
#[cfg(feature = "metrics")]
mod metrics;
mod no_upgrades;
mod producer;
mod serve;
mod serve_config;
mod serve_stats;
mod shared;
mod side_wake;
mod watchdog;
mod writer;

pub use body_deadline::BodyTimedOut;
pub use config::{SseConfig, DEFAULT_KEEP_ALIVE, DEFAULT_MAX_CONNECTIONS, DEFAULT_RETRY};
pub use endpoint::{backend_events, events, SseStream, LAST_EVENT_ID_QUERY};
pub use producer::SseProducer;
pub use serve::{serve, serve_with_shutdown};
pub use serve_config::ServeConfig;
#[cfg(feature = "metrics")]
pub use serve_stats::record_serve_metrics;
pub use serve_stats::{serve_stats, ServeStats};
pub use shared::EndpointStats;
pub use writer::MAX_CHUNK_BYTES;
