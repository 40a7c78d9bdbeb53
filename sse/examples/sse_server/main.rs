//! Example: a resumable SSE stream over a `ReplayRing`, served with axum through
//! `replay_ring_sse::axum`.
//!
//! ```text
//! cargo run -p replay-ring-sse --features axum,metrics --example sse_server -- --rate 20 --events 500
//! ```
//!
//! Serves `GET /events` (the stream; resumes via `Last-Event-ID`, explicit 4xx on an unreplayable
//! cursor), `GET /` (a page that follows the stream with the browser's `EventSource` and checks
//! continuity) and `GET /metrics` (Prometheus text). Listens on 127.0.0.1 only; the first line on
//! stdout is `listening on http://127.0.0.1:PORT`. See `docs/protocol.md`.

mod app;

use clap::Parser;
use replay_ring_sse::axum::{serve, ServeConfig};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = app::Args::parse();
    if args.rate * args.resumption_window_ms as f64 / 1000.0 > args.capacity as f64 {
        eprintln!("note: capacity < rate × resumption window: the producer will wait for events to age out");
    }
    let (app, producer) = app::build(&args)?;
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", args.port)).await?;
    // Stdout is line-buffered: the line is out before the first request can arrive.
    println!("listening on http://{}", listener.local_addr()?);
    let me = app.stream.identity();
    eprintln!(
        "stream {}.{}, capacity {}",
        me.stream, me.epoch, args.capacity
    );
    tokio::spawn(app::run_producer(producer, args));
    // Header-read, write and idle timeouts and a connection cap, on top of the stream's own
    // slow-consumer policy.
    serve(listener, app::router(app), ServeConfig::default()).await?;
    Ok(())
}
