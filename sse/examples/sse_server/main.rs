//! Example: a resumable SSE stream served with axum through `replay_ring_sse::axum`:
//! `GET /events` (resumes via `Last-Event-ID`; `docs/protocol.md`), `GET /` (a page that checks
//! continuity with `EventSource`) and `GET /metrics`, on 127.0.0.1.
//!
//! `cargo run -p replay-ring-sse --features axum,metrics --example sse_server -- --rate 20`

// Shared with the demo server and `tests/server.rs`; each uses its own part of it.
#[allow(dead_code)]
mod app;

use std::process::ExitCode;

use clap::Parser;
use replay_ring_sse::axum::{serve_with_shutdown, ServeConfig};

#[tokio::main]
async fn main() -> ExitCode {
    match run(app::Args::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: app::Args) -> Result<(), Box<dyn std::error::Error>> {
    let (app, producer) = app::build(&args)?;
    let warnings = [
        args.sizing_warning(),
        args.window_warning(),
        args.keep_alive_warning(),
        args.slow_consumer_warning(),
    ];
    for warning in warnings.into_iter().flatten() {
        eprintln!("{warning}");
    }
    let listener = app::bind(args.port).await?;
    // Stdout is line-buffered: the line is out before the first request can arrive.
    println!("listening on http://{}", listener.local_addr()?);
    let payload = |id| bytes::Bytes::from(format!("{{\"n\":{id}}}"));
    tokio::spawn(async move {
        let pending = std::future::pending();
        app::report(&app::run_producer_until(producer, &args, payload, pending).await);
    });
    let signal = async {
        app::shutdown_signal().await;
        eprintln!("shutting down");
    };
    // Header-read, write and idle timeouts and a connection cap, on top of the stream's own
    // slow-consumer policy; at SIGTERM or Ctrl-C, open connections get `shutdown_grace`.
    serve_with_shutdown(listener, app::router(app), ServeConfig::default(), signal).await?;
    Ok(())
}
