//! End-to-end harness for replay-ring: a loopback chaos proxy ([`proxy`]), a headless-Chromium
//! driver ([`browser`]) and a launcher for the example SSE server ([`server`]).

pub mod browser;
pub mod http;
pub mod proxy;
pub mod server;
pub mod sse;

pub use proxy::{ChaosProxy, Counters, Outcome, ProxyConfig, ProxyHandle, RequestLog};
