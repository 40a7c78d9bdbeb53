//! Server-Sent Events on top of a [`ReplayRing`](replay_ring::ReplayRing): the wire format, the resume
//! decision and its HTTP mapping, a retention policy, and a client-side continuity verifier. The core
//! is framework-free; feature `axum` adds a drop-in endpoint (module `axum`: the
//! event-stream responder, a producer, and `serve` with connection timeouts). The protocol is
//! specified in `docs/protocol.md`.
//!
//! - [`EventId`]: `<stream>.<epoch>.<seq>` ids, and strict parsing of an untrusted
//!   `Last-Event-ID` ([`LastEventIdError`]).
//! - [`Frame`], [`encode_event`], [`encode_priming`], [`encode_keep_alive`]: event-stream frames
//!   into `bytes`, refusing CR/LF/NUL in ids, event names and comments.
//! - [`last_event_id`] → [`resume`] / [`decide`] → [`ResumeDecision`] → [`HttpResponse`] /
//!   [`status_for`]: replay, or an explicit 4xx naming floor and head; never a 200 that skips ids.
//! - [`Publisher`]: the producer's loop — append, release what retention allows, wait, and past the
//!   backpressure bound close the stream explicitly.
//! - [`Retention`], [`BackpressureClock`]: release on acknowledgement and after the resumption
//!   window; close with an explicit error instead of dropping.
//! - [`backend`]: the contract every store of a stream's window keeps ([`backend::Backend`],
//!   [`backend::BackendProducer`], [`backend::Tail`]), implemented here for the in-process ring.
//! - [`client`]: the [`ContinuityVerifier`](client::ContinuityVerifier) and
//!   [`classify`](client::classify): what a client must check after reconnecting.
//! - [`ConfigError`]: settings a stream cannot honour (a keep-alive below [`MIN_KEEP_ALIVE`], a
//!   `retry` above [`MAX_RETRY`], a slow-consumer policy that cannot work), refused when the
//!   stream is built.
//! - `contract` (feature `contract-tests`): the async suite every backend must pass.
//!
//! ```
//! use bytes::BytesMut;
//! use replay_ring_sse::{encode_event, encode_priming, resume, Epoch, HttpResponse, StreamId, StreamIdentity};
//! use replay_ring::ReplayRing;
//!
//! let me = StreamIdentity::new(StreamId::new("events").unwrap(), Epoch::new(0x5));
//! let (mut producer, ring) = ReplayRing::<&'static str>::new(8, 2).unwrap();
//! for payload in ["a", "b", "c"] {
//!     producer.try_push(payload).unwrap();
//! }
//!
//! // A browser reconnects with Last-Event-ID: events.5.1
//! let mut ok = resume(&ring, &me, Some(b"events.5.1")).unwrap();
//! assert_eq!(HttpResponse::stream(&ok.state).status, 200);
//! let mut out = BytesMut::new();
//! encode_priming(&mut out, me.event_id(ok.reader.cursor() - 1), None);
//! for (id, payload) in ok.reader.try_read().unwrap().unwrap().iter() {
//!     encode_event(&mut out, me.event_id(id), None, payload.as_bytes()).unwrap();
//! }
//! assert_eq!(&out[..], &b"id: events.5.1\ndata:\n\nid: events.5.2\ndata: b\n\nid: events.5.3\ndata: c\n\n"[..]);
//!
//! // A client from before a restart (epoch 4) is told the stream is gone.
//! let lost = resume(&ring, &me, Some(b"events.4.2")).unwrap_err();
//! assert_eq!(HttpResponse::refused(&lost).status, 404);
//! ```

mod backpressure_clock;
mod config_error;
mod deadline;
mod event_id;
mod frame;
mod http;
mod publisher;
mod resume;
mod retention;
mod slow_consumer;

/// The README's example is compiled and run as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

pub mod backend;
pub mod client;
#[cfg(feature = "contract-tests")]
pub mod contract;

#[cfg(feature = "axum")]
pub mod axum;

/// The ring this crate serves streams from, re-exported so that its types (such as
/// [`CloseReason`]) come in the version this crate uses.
pub use replay_ring;
pub use replay_ring::CloseReason;

pub use backpressure_clock::BackpressureClock;
pub use config_error::{ConfigError, MAX_RETRY, MIN_KEEP_ALIVE};
pub use event_id::{
    Epoch, EventId, EventIdBuf, IdField, LastEventIdError, Malformed, StreamId, StreamIdError,
    StreamIdentity, MAX_EVENT_ID_LEN, MAX_STREAM_LEN,
};
pub use frame::{
    encode_event, encode_keep_alive, encode_priming, Frame, FrameError, FrameField, KEEP_ALIVE,
    KEEP_ALIVE_EVENT, KEEP_ALIVE_EVENT_NAME,
};
pub use http::{
    last_event_id, status_for, HttpResponse, EVENT_STREAM_CONTENT_TYPE, LAST_EVENT_ID_HEADER,
    REPLAY_FLOOR_HEADER, REPLAY_HEAD_HEADER, REPLAY_STREAM_HEADER,
};
pub use publisher::{
    PublishError, Publisher, PublisherStats, RetentionGuard, RetentionPolicy, SharedRetention,
    EXPIRED_BUT_HELD_RECHECK,
};
pub use resume::{decide, resume, Refused, ResumeDecision, Resumed, StreamState};
pub use retention::{
    ConnectionId, Retention, RetentionConfig, RetentionStats, CHECKPOINTS,
    DEFAULT_BACKPRESSURE_TIMEOUT, DEFAULT_RESUMPTION_WINDOW,
};
pub use slow_consumer::{
    ConsumerProgress, SlowConsumerPolicy, Verdict, Window, DEFAULT_LAG_GRACE,
    DEFAULT_MAX_LAG_PERCENT, DEFAULT_WRITE_TIMEOUT,
};
