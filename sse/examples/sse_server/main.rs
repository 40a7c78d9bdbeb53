//! Example: a resumable SSE stream served with axum through `replay_ring_sse::axum`, held in a
//! `ReplayRing` in this process or, with `--redis URL`, in Redis Streams shared by replicas (one
//! produces, `--serve-only` ones serve; `docs/scaling.md`).
//!
//! ```text
//! cargo run -p replay-ring-sse --features axum,metrics --example sse_server -- --rate 20 --events 500
//! ```
//!
//! Serves `GET /events` (resumes via `Last-Event-ID`, explicit 4xx on an unreplayable cursor; see
//! `docs/protocol.md`), `GET /` (a page that checks continuity with `EventSource`) and
//! `GET /metrics` (Prometheus text), on 127.0.0.1; the first line on stdout is
//! `listening on http://127.0.0.1:PORT`.

mod app;

use bytes::Bytes;
use clap::Parser;
use replay_ring_sse::axum::{serve, ServeConfig, SseProducer};
use replay_ring_sse::backend::Backend;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

#[tokio::main]
async fn main() -> Result<()> {
    let args = app::Args::parse();
    if args.rate * args.resumption_window_ms as f64 / 1000.0 > args.capacity as f64 {
        eprintln!("note: capacity < rate × resumption window: the producer will wait for events to age out");
    }
    match args.redis.clone() {
        None => {
            let (app, producer) = app::build(&args)?;
            run(app, Some(producer), args).await
        }
        Some(url) => {
            // Display, not Debug: e.g. "producer lease held by token 1 …" (use --serve-only).
            let (app, producer) = app::build_redis(&args, &url)
                .await
                .map_err(|e| e.to_string())?;
            run(app, producer, args).await
        }
    }
}

/// Serves `app` (and runs its producer, if this process has it) on either backend.
async fn run<B>(app: app::App<B>, producer: Option<SseProducer<B>>, args: app::Args) -> Result<()>
where
    B: Backend<Payload = Bytes, Producer: Sync>,
{
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", args.port)).await?;
    // Stdout is line-buffered: the line is out before the first request can arrive.
    println!("listening on http://{}", listener.local_addr()?);
    let me = app.stream.identity();
    let capacity = app.stream.backend().capacity();
    eprintln!("stream {}.{}, capacity {capacity}", me.stream, me.epoch);
    if let Some(producer) = producer {
        tokio::spawn(app::run_producer(producer, args));
    }
    // Header-read, write and idle timeouts and a connection cap, on top of the stream's own
    // slow-consumer policy.
    serve(listener, app::router(app), ServeConfig::default()).await?;
    Ok(())
}
