//! The end-to-end HTTP scenario of the benchmark suite (criterion benches live in `benches/`):
//!
//! - [`server`]: starts an SSE server process (the `replay-ring-sse` example server, or the
//!   `sse-baseline` bin: axum + `tokio::sync::broadcast`) with the same event rate and payload;
//! - [`load`]: opens C SSE connections to it and measures delivered events/s, publish-to-client
//!   latency, the server's RSS per connection and CPU per delivered event, checking that every
//!   connection's ids are gap-free;
//! - [`proc_stats`]: the `/proc` readings behind the last two;
//! - [`payload`]: the event payload both servers publish, `{"n":<id>,"t":<publish time, Unix ns>}`.
//!
//! `scripts/bench-http` runs it through the `sse-load` bin; `tests/http_load.rs` runs C = 100 as a
//! correctness test.

pub mod load;
pub mod payload;
pub mod proc_stats;
pub mod server;
