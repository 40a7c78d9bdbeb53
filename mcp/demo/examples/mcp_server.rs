//! An MCP server (streamable HTTP, sessions on, protocol 2025-11-25) whose SSE streams are stored in
//! replay-ring: resumable with `Last-Event-ID`, explicit errors for unreplayable cursors.
//!
//! ```text
//! cargo run -p replay-ring-mcp-demo --example mcp_server -- --port 3000
//! cargo run -p replay-ring-mcp-demo --example mcp_server -- --port 3001 --redis redis://127.0.0.1:6379/
//! cargo run -p replay-ring-mcp-demo --example mcp_server -- --help
//! ```
//!
//! Served with `replay_ring_sse::axum::serve`: header-read, body-read, write and idle timeouts on every
//! connection and a connection cap answered with 503.
//!
//! Endpoints: `POST/GET/DELETE /mcp` (MCP), `GET /metrics` (Prometheus text from
//! `metrics-exporter-prometheus`). Tools:
//! `long_task(n, delay_ms)` sends `notifications/progress` 1..n with the request's progress token
//! and returns `{"n": n}`; `test_reconnection` closes its own connection after the priming event
//! (SEP-1699) and returns its result on the resumed stream; plus everything the MCP conformance
//! suite's server scenarios call (see `docs/mcp.md`).
//!
//! With `--redis URL` every stream's events are also kept in Redis (before any connection sends
//! them): several instances on one Redis serve each other's resumes (`GET` with
//! `Last-Event-ID`); the `POST`s of an MCP session must still reach the instance that created it
//! (see "Behind a load balancer" in `docs/mcp.md`).

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::process::ExitCode;
use std::time::Duration;

use clap::{CommandFactory, Parser};
use replay_ring_mcp::{RedisEventLog, RingEventStore, StoreConfig};
use replay_ring_mcp_demo::{app, store_app_with_limits, Limits, MetricsEndpoint, Storage};
use replay_ring_redis::RedisConfig;
use replay_ring_sse::axum::{serve, ServeConfig};
use replay_ring_sse::{RetentionConfig, SlowConsumerPolicy};

/// An MCP server on replay-ring (127.0.0.1 only). The first stdout line is
/// `listening on http://127.0.0.1:PORT`.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Port on 127.0.0.1 (0 picks an ephemeral port).
    #[arg(long, default_value_t = 3000)]
    port: u16,
    /// Events retained per stream (rounded up to a power of two). At least 2: a request's
    /// priming event and its response must fit, or every request waits a resumption window.
    #[arg(long, default_value_t = replay_ring_mcp::DEFAULT_CAPACITY,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(2..))]
    capacity: usize,
    /// Slots each stream allocates up front; the ring grows up to `--capacity` as events arrive.
    #[arg(long, default_value_t = replay_ring_mcp::DEFAULT_INITIAL_SLOTS)]
    initial_slots: usize,
    /// Simultaneous connections per stream.
    #[arg(long, default_value_t = replay_ring_mcp::DEFAULT_MAX_READERS)]
    max_readers: usize,
    /// How long an event stays replayable after it was sent, in milliseconds.
    #[arg(long, default_value_t = 30_000)]
    resumption_window_ms: u64,
    /// How long a full window may wait for room before its stream is closed, in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    backpressure_timeout_ms: u64,
    /// How long an ended stream stays resumable, in milliseconds.
    #[arg(long, default_value_t = 60_000)]
    completed_ttl_ms: u64,
    /// The `retry:` hint, in milliseconds (also rmcp's `sse_retry`): 1 to 3,600,000 (an hour).
    #[arg(long, default_value_t = 3_000,
          value_parser = clap::builder::RangedU64ValueParser::<u64>::new().range(1..=3_600_000))]
    retry_ms: u64,
    /// Cut a connection whose socket takes nothing for this long, in milliseconds (slow-consumer
    /// policy; 0 turns the rule off).
    #[arg(long, default_value_t = 5_000)]
    write_timeout_ms: u64,
    /// End each connection after this many events (SEP-1699 polling; at least 1).
    #[arg(long)]
    frames_per_connection: Option<NonZeroUsize>,
    /// Connections served at once (at least 1); more get an explicit 503 (default: half the
    /// file-descriptor limit).
    #[arg(long)]
    max_connections: Option<NonZeroUsize>,
    /// MCP sessions open at once; a request that would open one more gets an explicit 503
    /// (sessions close after `--session-idle-ms` without activity).
    #[arg(long, default_value_t = NonZeroUsize::new(replay_ring_mcp::DEFAULT_MAX_SESSIONS).unwrap())]
    max_sessions: NonZeroUsize,
    /// Request streams per MCP session (open, or ended within `--completed-ttl-ms`); a request
    /// that would open one more gets an explicit 503.
    #[arg(long, default_value_t = NonZeroUsize::new(replay_ring_mcp::DEFAULT_MAX_STREAMS_PER_SESSION).unwrap())]
    max_streams_per_session: NonZeroUsize,
    /// Request streams across all sessions, counted alike: with `--capacity`, the bound on the
    /// events the server retains. A request that would open one more gets an explicit 503.
    #[arg(long, default_value_t = NonZeroUsize::new(replay_ring_mcp::DEFAULT_MAX_STREAMS).unwrap())]
    max_streams: NonZeroUsize,
    /// Close a session whose worker handled nothing (no request, no message from a running call)
    /// for this long, in milliseconds: 1,000 to 86,400,000 (a day). Shorter frees abandoned
    /// sessions, which count against `--max-sessions`, sooner; a call silent for longer ends with
    /// an error.
    #[arg(long, default_value_t = 300_000,
          value_parser = clap::builder::RangedU64ValueParser::<u64>::new().range(1_000..=86_400_000))]
    session_idle_ms: u64,
    /// Serve the same tools on rmcp's built-in cache instead, for comparison.
    #[arg(long, conflicts_with = "redis")]
    builtin_cache: bool,
    /// Keep every stream's events in Redis too (`redis://host:port/db`), so that other instances
    /// on the same Redis can serve this one's resumes.
    #[arg(long, value_name = "URL")]
    redis: Option<String>,
    /// With `--redis`: how long a stream's events stay in Redis after its last write, in seconds:
    /// 0 (never expire) or at least the producer's lease (10 s), which renewals also refresh.
    #[arg(long, default_value_t = 3_600)]
    redis_stream_ttl_s: u64,
}

impl Args {
    fn limits(&self) -> Limits {
        Limits {
            max_sessions: self.max_sessions.get(),
            max_streams_per_session: self.max_streams_per_session.get(),
            max_streams: self.max_streams.get(),
            session_idle: Duration::from_millis(self.session_idle_ms),
        }
    }

    /// The Redis settings, `--redis-stream-ttl-s` checked by the Redis crate's own rules before
    /// anything is started, so that a refusal names the flag.
    fn redis_config(&self) -> Result<RedisConfig, clap::Error> {
        let config = RedisConfig {
            stream_ttl: Duration::from_secs(self.redis_stream_ttl_s),
            ..RedisConfig::default()
        };
        match config.check() {
            Ok(()) => Ok(config),
            Err(e) => Err(Args::command().error(
                clap::error::ErrorKind::ValueValidation,
                format!(
                    "--redis-stream-ttl-s {}: {e} (the producer's lease is {} s)",
                    self.redis_stream_ttl_s,
                    config.lease.as_secs()
                ),
            )),
        }
    }

    /// A warning when `--resumption-window-ms` is 0: an event is then kept only until every
    /// connected client has been sent it, so a client whose connection drops before it received
    /// everything it was sent cannot resume.
    fn window_warning(&self) -> Option<String> {
        (self.resumption_window_ms == 0 && !self.builtin_cache).then(|| {
            "warning: --resumption-window-ms 0: events are kept only until every connected \
             client has been sent them, so a client that reconnects after missing some gets 416 \
             replay_gap rather than the events"
                .to_owned()
        })
    }

    fn storage(&self) -> Storage {
        let retry = Duration::from_millis(self.retry_ms);
        if self.builtin_cache {
            return Storage::BuiltinCache { retry };
        }
        Storage::ReplayRing(StoreConfig {
            capacity: self.capacity,
            initial_slots: self.initial_slots,
            max_readers: self.max_readers,
            retention: RetentionConfig {
                resumption_window: Duration::from_millis(self.resumption_window_ms),
                backpressure_timeout: Duration::from_millis(self.backpressure_timeout_ms),
            },
            completed_ttl: Duration::from_millis(self.completed_ttl_ms),
            retry,
            frames_per_connection: self.frames_per_connection.map(NonZeroUsize::get),
            slow_consumer: SlowConsumerPolicy {
                write_timeout: (self.write_timeout_ms > 0)
                    .then(|| Duration::from_millis(self.write_timeout_ms)),
                ..SlowConsumerPolicy::default()
            },
        })
    }
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

#[tokio::main]
async fn main() -> ExitCode {
    match run(Args::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The server until a signal ends it; a bad flag exits here through clap (status 2), a failure
/// to start (Redis unreachable, the port taken) returns its error.
async fn run(args: Args) -> std::io::Result<()> {
    let redis_config = args.redis_config().unwrap_or_else(|e| e.exit());
    let storage = args.storage();
    if let Some(warning) = args.window_warning() {
        eprintln!("{warning}");
    }
    if let Storage::ReplayRing(config) = &storage {
        if let Err(e) = config.check() {
            Args::command()
                .error(
                    clap::error::ErrorKind::ValueValidation,
                    format!(
                        "--capacity {} / --max-readers {}: {e}",
                        args.capacity, args.max_readers
                    ),
                )
                .exit();
        }
    }
    let (router, store) = match (&args.redis, storage) {
        (Some(url), Storage::ReplayRing(config)) => {
            let log = RedisEventLog::connect(url, redis_config)
                .await
                .map_err(|e| std::io::Error::other(format!("--redis {url}: {e}")))?;
            let store = RingEventStore::with_redis(config, log);
            (
                store_app_with_limits(store.clone(), args.limits()),
                Some(store),
            )
        }
        (_, Storage::ReplayRing(config)) => {
            let store = RingEventStore::new(config);
            (
                store_app_with_limits(store.clone(), args.limits()),
                Some(store),
            )
        }
        (_, storage) => app(storage),
    };
    if let Some(store) = store.clone() {
        // Window releases and the expiry of ended streams also happen lazily; this keeps idle
        // streams from holding memory until their next event or resume.
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                store.maintain();
            }
        });
    }
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], args.port)))
        .await
        .map_err(|e| std::io::Error::new(e.kind(), format!("--port {}: {e}", args.port)))?;
    let addr = listener.local_addr()?;
    // First line on stdout: test harnesses read the port from it.
    println!("listening on http://{addr}");
    let storage = if args.builtin_cache {
        "rmcp built-in cache"
    } else if args.redis.is_some() {
        "replay-ring store, event log on Redis"
    } else {
        "replay-ring store"
    };
    eprintln!("mcp endpoint http://{addr}/mcp ({storage}), metrics http://{addr}/metrics");
    // Timeouts on every connection (request head, writes, idleness) and a connection cap (503).
    let mut serve_config = ServeConfig::default();
    if let Some(max) = args.max_connections {
        serve_config.max_connections = max.get();
    }
    tokio::select! {
        served = serve(listener, router, serve_config) => served?,
        () = shutdown_signal() => {}
    }
    if let Some(store) = store {
        eprintln!("final counters:\n{}", MetricsEndpoint::new(store).render());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use clap::Parser;

    use super::Args;

    fn parse(flags: &[&str]) -> Result<Args, clap::Error> {
        Args::try_parse_from(std::iter::once("mcp_server").chain(flags.iter().copied()))
    }

    /// Values that would start a server that cannot work as asked are refused with a message
    /// naming the flag, before anything listens.
    #[test]
    fn flags_that_cannot_work_are_refused_at_startup() {
        for flags in [
            // Not even a request's priming event and response fit: every request would wait a
            // whole resumption window.
            &["--capacity", "1"][..],
            &["--capacity", "0"],
            // No connection could ever be served.
            &["--max-connections", "0"],
            // Would end every connection before its first event.
            &["--frames-per-connection", "0"],
            // A reconnection hint of nothing (a reconnect loop), or of centuries.
            &["--retry-ms", "0"],
            &["--retry-ms", "18446744073709551615"],
            &["--max-sessions", "0"],
            &["--max-streams-per-session", "0"],
            &["--max-streams", "0"],
            // Every session closed before its first request, or never.
            &["--session-idle-ms", "999"],
            &["--session-idle-ms", "86400001"],
        ] {
            let error = parse(flags).expect_err(&format!("{flags:?} accepted"));
            assert_eq!(
                error.kind(),
                clap::error::ErrorKind::ValueValidation,
                "{flags:?}"
            );
            assert!(error.to_string().contains(flags[0]), "{flags:?}: {error}");
        }
    }

    #[test]
    fn the_smallest_and_largest_sensible_values_are_accepted() {
        let args = parse(&[
            "--capacity",
            "2",
            "--max-connections",
            "1",
            "--frames-per-connection",
            "1",
            "--retry-ms",
            "3600000",
            "--completed-ttl-ms",
            "0",
            "--max-streams",
            "1",
            "--max-streams-per-session",
            "1",
            "--session-idle-ms",
            "1000",
        ])
        .unwrap();
        assert_eq!(args.capacity, 2);
        assert_eq!(args.retry_ms, 3_600_000);
        assert_eq!(args.limits().max_streams, 1);
        assert_eq!(args.limits().max_streams_per_session, 1);
        assert_eq!(args.limits().session_idle, Duration::from_secs(1));
        assert!(parse(&["--session-idle-ms", "86400000"]).is_ok());
        for never_or_past_the_lease in ["0", "10"] {
            let args = parse(&["--redis-stream-ttl-s", never_or_past_the_lease]).unwrap();
            assert!(args.redis_config().is_ok(), "{never_or_past_the_lease}");
        }
    }

    /// A Redis setting the Redis crate would refuse at connect is refused before anything starts,
    /// with a message naming the flag.
    #[test]
    fn a_redis_stream_ttl_the_redis_crate_refuses_is_refused_at_startup() {
        for ttl in ["1", "9", "18446744073709551"] {
            let error = parse(&["--redis-stream-ttl-s", ttl])
                .unwrap()
                .redis_config()
                .expect_err(ttl);
            assert_eq!(error.kind(), clap::error::ErrorKind::ValueValidation);
            assert!(
                error.to_string().contains("--redis-stream-ttl-s"),
                "{error}"
            );
        }
        assert!(parse(&["--retry-ms", "1"]).is_ok());
        assert!(parse(&[]).is_ok(), "the defaults");
    }

    /// A server that cannot start says why, naming the flag: an unreachable Redis, a port that
    /// is taken.
    #[tokio::test]
    async fn a_failure_to_start_names_its_flag() {
        // A port nothing listens on: bound, then freed.
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("redis://{}/", free.local_addr().unwrap());
        drop(free);
        let error = super::run(parse(&["--port", "0", "--redis", &url]).unwrap())
            .await
            .expect_err("started without its Redis");
        assert!(
            error.to_string().starts_with(&format!("--redis {url}: ")),
            "{error}"
        );

        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = taken.local_addr().unwrap().port().to_string();
        let error = super::run(parse(&["--port", &port]).unwrap())
            .await
            .expect_err("started on a port that is taken");
        assert_eq!(error.kind(), std::io::ErrorKind::AddrInUse, "{error}");
        assert!(
            error.to_string().starts_with(&format!("--port {port}: ")),
            "{error}"
        );
    }

    /// A window of 0 starts (a server may want no replay at all), with a warning that says what
    /// it costs; the default window and the rmcp cache, which has no such window, warn of nothing.
    #[test]
    fn a_resumption_window_of_zero_is_warned_about() {
        let warning = parse(&["--resumption-window-ms", "0"])
            .unwrap()
            .window_warning()
            .expect("no warning for a window of 0");
        assert!(warning.contains("--resumption-window-ms 0"), "{warning}");
        assert!(warning.contains("replay_gap"), "{warning}");
        assert_eq!(parse(&[]).unwrap().window_warning(), None);
        let cache = parse(&["--resumption-window-ms", "0", "--builtin-cache"]).unwrap();
        assert_eq!(cache.window_warning(), None);
    }
}
