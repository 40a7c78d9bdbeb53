//! A [replay-ring](replay_ring) event store for MCP servers built on rmcp's streamable HTTP
//! transport: every SSE event of an MCP session's streams is committed to a per-stream ring before
//! its id leaves the server (the `initialize` response, sent before the session exists, is rmcp's),
//! a resume replays exactly the events after the client's `Last-Event-ID` and then continues live,
//! and a cursor that cannot be honoured gets an explicit HTTP error — never an empty `200`.
//!
//! Three pieces, used together:
//!
//! - [`RingEventStore`]: rmcp's `EventStore` trait, one ring per stream, ids in the SSE layer's
//!   `<stream>.<epoch>.<seq>` format, events published through the SSE layer's
//!   [`Publisher`](replay_ring_sse::Publisher) (bounded backpressure instead of dropping events),
//!   its retention and slow-consumer policies ([`replay_ring_sse::Retention`]).
//! - [`ReplayRingSessionManager`]: rmcp's `LocalSessionManager` with every SSE connection served
//!   from the rings, resumes bound to their session.
//! - [`ResumeGuardLayer`]: a tower layer that answers unreplayable cursors explicitly before rmcp
//!   turns them into an empty `200`: 404 for a lost MCP session or stream, 416 below the retained
//!   floor, 409 ahead of the head, 410 at the last id of a stream that has ended, 400 for a
//!   malformed cursor, 503 when every reader slot is taken (the table is on the layer). Every
//!   error it passes on from rmcp comes as JSON too, where rmcp answers in plain text.
//!
//! ```no_run
//! use std::sync::Arc;
//! use replay_ring_mcp::{ReplayRingSessionManager, ResumeGuardLayer, RingEventStore, StoreConfig};
//! use rmcp::transport::streamable_http_server::{
//!     session::local::LocalSessionManager, StreamableHttpServerConfig, StreamableHttpService,
//! };
//! # #[derive(Clone)] struct MyServer;
//! # impl rmcp::ServerHandler for MyServer {}
//!
//! # async fn run() -> std::io::Result<()> {
//! let store = RingEventStore::new(StoreConfig::default());
//! let manager = Arc::new(ReplayRingSessionManager::new(store, LocalSessionManager::default()));
//! let service = StreamableHttpService::new(
//!     || Ok(MyServer),
//!     manager.clone(),
//!     StreamableHttpServerConfig::default(), // keeps sse_retry on: every stream starts primed
//! );
//! let guarded = tower::ServiceBuilder::new().layer(ResumeGuardLayer::new(manager)).service(service);
//! let app: axum::Router = axum::Router::new().nest_service("/mcp", guarded);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! // Header-read, body-read, write and idle timeouts and a connection cap (axum's own has none).
//! replay_ring_sse::axum::serve(listener, app, replay_ring_sse::axum::ServeConfig::default()).await
//! # }
//! ```
//!
//! With the feature `redis`, `RingEventStore::with_redis` also keeps every event in Redis
//! Streams (before any connection sends it), and [`ResumeGuardLayer`] serves a resume whose MCP
//! session or stream this process does not hold from Redis, after checking the session recorded
//! there: resumes can go to any replica, the session's other requests to the one that owns it.
//!
//! Resumability exists in MCP protocol revisions 2025-03-26 through 2025-11-25 and was removed in
//! 2026-07-28; see `docs/mcp.md`.
#![deny(missing_docs)]

mod config;
#[cfg(feature = "metrics")]
mod facade;
mod gate;
mod layer;
mod manager;
mod metrics;
#[cfg(feature = "redis")]
mod progress_report;
#[cfg(feature = "redis")]
mod redis_log;
mod refusal;
mod registry;
#[cfg(feature = "redis")]
mod remote;
#[cfg(feature = "redis")]
mod remote_progress;
#[cfg(feature = "redis")]
mod remote_readers;
mod store;
mod stream;
mod stream_entry;

/// The ring and SSE crates whose types this one's API uses, re-exported so that they come in
/// the versions this crate uses.
pub use replay_ring;
pub use replay_ring_sse;

pub use config::{
    StoreConfig, DEFAULT_CAPACITY, DEFAULT_COMPLETED_TTL, DEFAULT_INITIAL_SLOTS,
    DEFAULT_MAX_READERS, DEFAULT_RETRY,
};
pub use layer::{refusal_response, refusal_status, Body, ResumeGuard, ResumeGuardLayer};
pub use manager::{
    ManagerError, ManagerStream, ReplayRingSessionManager, DEFAULT_MAX_SESSIONS,
    DEFAULT_MAX_STREAMS, DEFAULT_MAX_STREAMS_PER_SESSION,
};
pub use metrics::StoreMetrics;
#[cfg(feature = "redis")]
pub use redis_log::RedisEventLog;
pub use refusal::{RefusalReason, ResumeRefusal};
pub use store::RingEventStore;
pub use stream::{RingStream, STREAM_BROKEN_CODE};
