//! `sse-load`: starts an SSE server (the replay-ring demo server or the tokio-broadcast
//! baseline), opens C connections to it and prints one JSON line of measurements (appended to
//! `--out` too). See `replay_ring_benches::load` for what is measured and checked.
//!
//! ```text
//! sse-load --server replay-ring --server-bin target/release/sse_server \
//!          --connections 1000 --rate 100 --events 500 --out target/bench-results/http.jsonl
//! ```
//!
//! Exits 1 when a connection missed, duplicated or reordered an event and `--require-complete` is
//! given (the correctness test's mode).

use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use replay_ring_benches::load::{self, LoadSpec};
use replay_ring_benches::server::{Server, ServerKind, ServerSpec};

#[derive(Debug, Parser)]
#[command(about = "SSE load client: C connections, every frame counted and checked")]
struct Args {
    /// Server implementation.
    #[arg(long, value_enum)]
    server: ServerKind,
    /// The server's executable.
    #[arg(long)]
    server_bin: PathBuf,
    /// Connections (C).
    #[arg(long)]
    connections: usize,
    /// Events per second the server publishes; 0 = unthrottled.
    #[arg(long)]
    rate: f64,
    /// Events the server publishes before ending the streams.
    #[arg(long)]
    events: u64,
    /// Window / channel capacity in events.
    #[arg(long, default_value_t = 4096)]
    capacity: usize,
    /// Free-form label for the run (e.g. `paced`, `saturated`), copied into the JSON line.
    #[arg(long, default_value = "")]
    mode: String,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 300)]
    timeout_s: u64,
    /// Append the JSON line to this file.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Exit 1 unless every connection got every event of its stream, gap-free.
    #[arg(long)]
    require_complete: bool,
    /// The server publishes only once all connections are open (both servers then send the same
    /// stream to every connection); otherwise from the first.
    #[arg(long)]
    start_after_connected: bool,
    /// One more argument for the server (repeat for several; e.g. `--server-arg=--redis
    /// --server-arg=redis://127.0.0.1:6379/` runs the demo server on Redis Streams).
    #[arg(long = "server-arg", value_name = "ARG", allow_hyphen_values = true)]
    server_args: Vec<String>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let spec = ServerSpec {
        kind: args.server,
        bin: args.server_bin.clone(),
        rate: args.rate,
        events: args.events,
        capacity: args.capacity,
        connections: args.connections,
        start_after: args.start_after_connected.then_some(args.connections),
        extra_args: args.server_args.clone(),
    };
    let mut line = serde_json::json!({
        "server": args.server.name(),
        "connections": args.connections,
        "rate": args.rate,
        "events": args.events,
        "capacity": args.capacity,
        "mode": args.mode,
        "start_after_connected": args.start_after_connected,
        "server_args": args.server_args,
    });
    let outcome = match Server::spawn(&spec) {
        Err(e) => Err(e.to_string()),
        Ok(server) => {
            let load = LoadSpec {
                addr: server.addr,
                server_pid: Some(server.pid()),
                connections: args.connections,
                events: args.events,
                timeout: Duration::from_secs(args.timeout_s),
                from_first: args.start_after_connected,
                reconnect_at: None,
            };
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .expect("tokio runtime");
            rt.block_on(load::run(&load)).map_err(|e| e.to_string())
        }
    };
    let complete = match outcome {
        Ok(report) => {
            let ok = report.complete == report.connections;
            let fields = serde_json::to_value(&report).expect("serializable report");
            line.as_object_mut()
                .expect("object")
                .extend(fields.as_object().expect("object").clone());
            ok
        }
        Err(e) => {
            line["skipped"] = e.into();
            false
        }
    };
    let text = line.to_string();
    println!("{text}");
    if let Some(path) = &args.out {
        let appended = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut f| writeln!(f, "{text}"));
        if let Err(e) = appended {
            eprintln!("error: {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    }
    if args.require_complete && !complete {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
