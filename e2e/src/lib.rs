//! End-to-end harness for replay-ring: a loopback chaos proxy ([`proxy`]), a headless-Chromium
//! driver ([`browser`]), a launcher for the example SSE server ([`server`]) and a private
//! `redis-server` for it to run on ([`redis`]).

pub mod browser;
pub mod http;
pub mod proxy;
pub mod redis;
pub mod server;
pub mod sse;

pub use proxy::{ChaosProxy, Counters, Outcome, ProxyConfig, ProxyHandle, RequestLog};
