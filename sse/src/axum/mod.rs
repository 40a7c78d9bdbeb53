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
//! - [`serve`] runs a router with header-read, write and idle timeouts and a connection cap
//!   answered with 503.
//! - With feature `metrics`, [`SseStream::record_metrics`] publishes the counters through the
//!   `metrics` facade, for any exporter.
//!
//! A resumable endpoint in an existing axum app (`run` serves it on a bound listener; the same
//! code is driven over real HTTP by the crate's tests):
#![doc = concat!("```\n", include_str!("snippet.rs"), "```")]

mod endpoint;
mod frames;
#[cfg(feature = "metrics")]
mod metrics;
mod producer;
mod serve;

pub use endpoint::{
    events, EndpointStats, SseConfig, SseStream, DEFAULT_KEEP_ALIVE, DEFAULT_RETRY,
};
pub use producer::SseProducer;
pub use serve::{serve, ServeConfig};
