//! An MCP server (streamable HTTP, sessions on, protocol 2025-11-25) whose SSE streams are stored in
//! replay-ring: resumable with `Last-Event-ID`, explicit errors for unreplayable cursors.
//!
//! ```text
//! cargo run -p replay-ring-mcp --example mcp_server -- --port 3000
//! ```
//!
//! Endpoints: `POST/GET/DELETE /mcp` (MCP), `GET /metrics` (Prometheus text). Tools:
//! `long_task(n, delay_ms)` sends `notifications/progress` 1..n with the request's progress token
//! and returns `{"n": n}`; `test_reconnection` closes its own connection after the priming event
//! (SEP-1699) and returns its result on the resumed stream; plus everything the MCP conformance
//! suite's server scenarios call (all 32 pass; see `docs/mcp.md`).
//!
//! `--builtin-cache` serves the same tools with rmcp's own in-memory cache instead (for the
//! side-by-side comparison in `docs/mcp.md`).

use std::net::SocketAddr;
use std::time::Duration;

use replay_ring_mcp::demo::{app, Storage};
use replay_ring_mcp::StoreConfig;
use replay_ring_sse::RetentionConfig;

#[derive(Debug, Clone)]
struct Args {
    port: u16,
    capacity: usize,
    max_readers: usize,
    resumption_window: Duration,
    backpressure_timeout: Duration,
    completed_ttl: Duration,
    retry: Duration,
    frames_per_connection: Option<usize>,
    builtin_cache: bool,
}

const USAGE: &str = "usage: mcp_server [--port N (3000; 0 = ephemeral)] [--capacity N (1024)] \
[--max-readers N (4)] [--resumption-window-ms N (30000)] [--backpressure-timeout-ms N (10000)] \
[--completed-ttl-ms N (60000)] [--retry-ms N (3000)] [--frames-per-connection N] [--builtin-cache]";

fn parse_args() -> Result<Args, String> {
    let d = StoreConfig::default();
    let mut a = Args {
        port: 3000,
        capacity: d.capacity,
        max_readers: d.max_readers,
        resumption_window: d.retention.resumption_window,
        backpressure_timeout: d.retention.backpressure_timeout,
        completed_ttl: d.completed_ttl,
        retry: d.retry,
        frames_per_connection: None,
        builtin_cache: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--builtin-cache" {
            a.builtin_cache = true;
            continue;
        }
        if flag == "-h" || flag == "--help" {
            return Err(USAGE.into());
        }
        let value = it
            .next()
            .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
        let num = |v: &str| v.parse::<u64>().map_err(|e| format!("{flag} {v}: {e}"));
        let ms = |v: &str| num(v).map(Duration::from_millis);
        match flag.as_str() {
            "--port" => a.port = value.parse().map_err(|e| format!("--port {value}: {e}"))?,
            "--capacity" => a.capacity = num(&value)? as usize,
            "--max-readers" => a.max_readers = num(&value)? as usize,
            "--resumption-window-ms" => a.resumption_window = ms(&value)?,
            "--backpressure-timeout-ms" => a.backpressure_timeout = ms(&value)?,
            "--completed-ttl-ms" => a.completed_ttl = ms(&value)?,
            "--retry-ms" => a.retry = ms(&value)?,
            "--frames-per-connection" => a.frames_per_connection = Some(num(&value)? as usize),
            _ => return Err(format!("unknown flag {flag}\n{USAGE}")),
        }
    }
    Ok(a)
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("install SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let args = match parse_args() {
        Ok(a) => a,
        Err(msg) => {
            eprintln!("{msg}");
            std::process::exit(2);
        }
    };
    let storage = if args.builtin_cache {
        Storage::BuiltinCache { retry: args.retry }
    } else {
        Storage::ReplayRing(StoreConfig {
            capacity: args.capacity,
            max_readers: args.max_readers,
            retention: RetentionConfig {
                resumption_window: args.resumption_window,
                backpressure_timeout: args.backpressure_timeout,
            },
            completed_ttl: args.completed_ttl,
            retry: args.retry,
            frames_per_connection: args.frames_per_connection,
        })
    };
    let (router, store) = app(storage);
    if let Some(store) = store.clone() {
        // Window releases and completed-stream expiry also happen lazily; this keeps idle
        // streams from holding memory until their next event or resume.
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                store.maintain();
            }
        });
    }
    let listener =
        tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], args.port))).await?;
    let addr = listener.local_addr()?;
    // First line on stdout: test harnesses read the port from it.
    println!("listening on http://{addr}");
    eprintln!(
        "mcp endpoint http://{addr}/mcp ({}), metrics http://{addr}/metrics",
        if args.builtin_cache {
            "rmcp built-in cache"
        } else {
            "replay-ring store"
        }
    );
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown_signal())
        .await?;
    if let Some(store) = store {
        eprintln!("final counters:\n{}", store.metrics().to_prometheus());
    }
    Ok(())
}
