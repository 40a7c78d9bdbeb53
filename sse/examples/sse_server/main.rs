//! Example: a resumable SSE stream over a `ReplayRing`, with axum + tokio.
//!
//! ```text
//! cargo run --example sse_server -- --port 8080 --capacity 1024 --rate 20 --events 500
//! ```
//!
//! Serves `GET /events` (the stream; resumes via `Last-Event-ID`, explicit 4xx on an unreplayable
//! cursor), `GET /` (a page that follows the stream with the browser's `EventSource` and checks
//! continuity) and `GET /metrics` (Prometheus text). Listens on 127.0.0.1 only; the first line on
//! stdout is `listening on http://127.0.0.1:PORT`. See `docs/protocol.md`.

mod app;

use std::io::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use app::Config;
use replay_ring_sse::{Epoch, StreamId};

const USAGE: &str = "\
usage: sse_server [flags]
  --port N                     127.0.0.1 port; 0 = ephemeral (default 0)
  --capacity N                 ring capacity, rounded up to a power of two (default 1024)
  --rate R                     events per second; 0 = unthrottled (default 20)
  --events N                   produce N events, then end the stream with `event: end` (default: forever)
  --resumption-window-ms N     keep written events replayable this long (default 30000)
  --backpressure-timeout-ms N  close the stream with `event: stream-error` after the producer
                               waited this long for space (default 10000)
  --keep-alive-ms N            idle time before a `: keep-alive` comment (default 15000)
  --retry-ms N                 reconnection delay sent in `retry:` (default 1000)
  --max-readers N              simultaneous connections (default 16)
  --stream NAME                stream name in event ids (default events)
  --epoch HEX                  stream epoch (default: random per process)
  --eager                      start producing at startup, not at the first /events request";

fn parse_args(args: impl Iterator<Item = String>) -> Result<(u16, Config), String> {
    let mut config = Config::default();
    let mut port = 0u16;
    let mut args = args.peekable();
    while let Some(flag) = args.next() {
        if flag == "--eager" {
            config.eager = true;
            continue;
        }
        if flag == "--help" || flag == "-h" {
            return Err(String::new());
        }
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {value}: {e}");
        let ms = |v: &str| {
            v.parse::<u64>()
                .map(Duration::from_millis)
                .map_err(|e| bad(&e))
        };
        match flag.as_str() {
            "--port" => port = value.parse().map_err(|e| bad(&e))?,
            "--capacity" => config.capacity = value.parse().map_err(|e| bad(&e))?,
            "--rate" => {
                config.rate = value.parse().map_err(|e| bad(&e))?;
                if !(config.rate >= 0.0 && config.rate.is_finite()) {
                    return Err(bad(&"must be a finite number >= 0"));
                }
            }
            "--events" => config.events = Some(value.parse().map_err(|e| bad(&e))?),
            "--resumption-window-ms" => config.retention.resumption_window = ms(&value)?,
            "--backpressure-timeout-ms" => config.retention.backpressure_timeout = ms(&value)?,
            "--keep-alive-ms" => {
                config.keep_alive = ms(&value)?;
                if config.keep_alive.is_zero() {
                    return Err(bad(&"must be > 0"));
                }
            }
            "--retry-ms" => config.retry = ms(&value)?,
            "--max-readers" => config.max_readers = value.parse().map_err(|e| bad(&e))?,
            "--stream" => config.stream = StreamId::new(&value).map_err(|e| bad(&e))?,
            "--epoch" => {
                config.epoch = Epoch::new(u64::from_str_radix(&value, 16).map_err(|e| bad(&e))?)
            }
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok((port, config))
}

fn main() -> ExitCode {
    let (port, config) = match parse_args(std::env::args().skip(1)) {
        Ok(parsed) => parsed,
        Err(message) => {
            if !message.is_empty() {
                eprintln!("error: {message}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let window_events = config.rate * config.retention.resumption_window.as_secs_f64();
    if config.rate > 0.0 && (config.capacity as f64) < window_events {
        eprintln!(
            "note: capacity {} < rate × resumption window ({window_events:.0} events): the producer will be \
             backpressured by events waiting out their window",
            config.capacity
        );
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let (state, producer) = match app::build(config) {
            Ok(built) => built,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        };
        let listener = match tokio::net::TcpListener::bind(("127.0.0.1", port)).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("error: bind 127.0.0.1:{port}: {e}");
                return ExitCode::FAILURE;
            }
        };
        let addr = listener.local_addr().expect("bound socket has an address");
        {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "listening on http://{addr}");
            let _ = out.flush();
        }
        eprintln!(
            "stream {}.{}: capacity {}, {} readers",
            state.identity.stream,
            state.identity.epoch,
            state.ring.capacity(),
            state.ring.max_readers()
        );
        tokio::spawn(app::run_producer(producer, state.clone()));
        match axum::serve(listener, app::router(state)).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: serve: {e}");
                ExitCode::FAILURE
            }
        }
    })
}
