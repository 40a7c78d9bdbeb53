//! The server the end-to-end tests, the soak and the HTTP benchmarks run: replay-ring-sse's example
//! server (`sse/examples/sse_server`, included as is) plus what those runs need on top:
//!
//! - `--redis URL [--serve-only]`: the stream in Redis Streams, shared by replicas (one produces,
//!   the others serve, and take over producing when it stops; a replica stopped with SIGTERM or
//!   Ctrl-C hands its producer lease over; `docs/scaling.md`);
//! - `--start-after C`: publish once C streams are open (servers compared on the same stream);
//! - `--timestamps`, `--payload-bytes N`: payloads that carry their publish time or load sockets;
//! - the `sse_server_heap_bytes` gauge in `/metrics` (tells a leak from allocator fragmentation).
//!
//! ```text
//! cargo run -p replay-ring-sse-demo --bin sse_server -- --help
//! ```

#[allow(dead_code)]
#[path = "../../examples/sse_server/app.rs"]
mod app;
mod replica;

use std::future::{pending, Future};
use std::pin::pin;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::Router;
use bytes::Bytes;
use clap::Parser;
use replay_ring::ReplayRing;
use replay_ring_sse::axum::{serve_with_shutdown, ServeConfig, SseProducer, SseStream};
use replay_ring_sse::backend::Backend;
use replay_ring_sse::StreamId;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// A resumable server-sent event stream of `{"n":<id>}` events on 127.0.0.1, held in this
/// process or, with `--redis`, in Redis Streams shared by every replica.
#[derive(Debug, Clone, Parser)]
#[command(name = "sse_server")]
struct DemoArgs {
    #[command(flatten)]
    example: app::Args,
    /// Keep the stream in Redis (`redis://host:port/db`; of a Redis Cluster, any node), so that
    /// any replica can serve it
    #[arg(long, value_name = "URL", conflicts_with = "epoch")]
    redis: Option<String>,
    /// Serve the stream without producing into it (another replica produces). Without it, a
    /// replica that finds the producer lease held serves as a standby and takes over producing
    /// once the lease is free (at once, `--eager` or not), and a producer whose lease another
    /// replica took becomes a standby again
    #[arg(
        long,
        requires = "redis",
        conflicts_with_all = ["eager", "start_after", "rate", "events", "timestamps", "payload_bytes"]
    )]
    serve_only: bool,
    /// How long the producer lease lasts without a renewal: how soon a standby replica takes over
    /// from a producer that crashed (one stopped with SIGTERM or Ctrl-C gives its lease back, and
    /// a standby takes it within a tenth of this) [default: 10000]
    #[arg(long, requires = "redis", value_parser = clap::value_parser!(u64).range(MIN_LEASE_MS..))]
    lease_ms: Option<u64>,
    /// Stream name in event ids and Redis keys [default: events]
    #[arg(long, requires = "redis", value_parser = |s: &str| StreamId::new(s).map_err(|e| e.to_string()))]
    stream: Option<StreamId>,
    /// Start producing once this many event streams are open, not at the first (for benchmarks
    /// that compare servers on the same stream)
    #[arg(long, conflicts_with = "eager")]
    start_after: Option<usize>,
    /// Add the publish time to each payload, `{"n":<id>,"t":<Unix ns>}` (for latency measurements)
    #[arg(long)]
    timestamps: bool,
    /// Pad each payload to at least this many bytes with a `"pad"` field (to load the sockets)
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(..=MAX_PAYLOAD_BYTES))]
    payload_bytes: u32,
}

/// The shortest `--lease-ms`, the backend's [`MIN_LEASE`](replay_ring_redis::MIN_LEASE): the
/// producer renews every third of a lease, and a shorter lease lapses between two renewals on a
/// busy machine, so replicas would take it from each other on almost every event.
const MIN_LEASE_MS: u64 = replay_ring_redis::MIN_LEASE.as_millis() as u64;

/// The largest `--payload-bytes`: 16 MiB per event is far past any load test, and refused at
/// startup rather than failing the producer's allocation later.
const MAX_PAYLOAD_BYTES: i64 = 16 << 20;

#[tokio::main]
async fn main() -> ExitCode {
    match run(DemoArgs::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: DemoArgs) -> Result<()> {
    match args.redis.clone() {
        None => run_alone(args).await,
        Some(url) => run_replica(args, &url).await,
    }
}

/// One process holds the whole stream. At SIGTERM or Ctrl-C it stops accepting and gives open
/// connections `ServeConfig::shutdown_grace` (there is no one to hand the stream over to, and a
/// new process starts a new epoch: clients start over with `404 stream_lost`).
async fn run_alone(args: DemoArgs) -> Result<()> {
    let (app, producer) = app::build(&args.example)?;
    describe(&app.stream);
    let listener = app::bind(args.example.port).await?;
    announce(&args, &listener)?;
    let producing = args.clone();
    tokio::spawn(async move { app::report(&produce(producer, producing, pending()).await) });
    let signal = async {
        app::shutdown_signal().await;
        eprintln!("shutting down");
    };
    serve_with_shutdown(listener, app_router(app), ServeConfig::default(), signal).await?;
    Ok(())
}

/// A replica on Redis. It shuts down gracefully at SIGTERM or Ctrl-C (a second signal ends it at
/// once): it gives the producer lease back (a standby takes over within a tenth of a lease, not
/// after it) while its connections get `ServeConfig::shutdown_grace` to move to other replicas.
/// It gives the lease back when it fails after start-up too (a port in use).
async fn run_replica(args: DemoArgs, url: &str) -> Result<()> {
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let stop = Arc::new(stop);
    // The limits of a stream held in this process (a window of at least one event, at least one
    // connection), refused before anything is created in Redis.
    ReplayRing::<Bytes>::builder()
        .capacity(args.example.capacity)
        .max_readers(args.example.max_readers)
        .check()?;
    // Listening from the start: a replica stopped while it starts up may hold the lease already.
    tokio::spawn(stop_on_signals(stop.clone()));
    // Bound first: a port in use fails before the stream is created or the lease taken.
    let listener = app::bind(args.example.port).await?;
    // The producer (or standby) runs on a task of its own, started with the replica. Announced
    // after it: a replica that says it listens has taken the lease, or found it held.
    let (router, replica, capacity) = replica::start(&args, url, stopping.clone()).await?;
    // Warnings about the window are about the stream's, which an existing stream keeps.
    let mut opened = args.clone();
    opened.example.capacity = usize::try_from(capacity).unwrap_or(usize::MAX);
    // From here every way out gives the lease back.
    let served = match announce(&opened, &listener) {
        Ok(()) => serve_with_shutdown(listener, router, ServeConfig::default(), stopped(stopping))
            .await
            .map_err(Into::into),
        Err(e) => Err(e),
    };
    let _ = stop.send(true);
    // The lease is one script call away; if Redis does not answer, it lapses by itself.
    if tokio::time::timeout(HAND_BACK, replica).await.is_err() {
        eprintln!("the producer did not stop in {HAND_BACK:?}; its lease lapses by itself");
    }
    served
}

/// Says where `listener` listens, once the server is ready to answer (the line the tests and
/// benchmarks wait for), after the sizing warning (only where this process may produce).
fn announce(args: &DemoArgs, listener: &tokio::net::TcpListener) -> Result<()> {
    if let Some(warning) = args.example.sizing_warning().filter(|_| !args.serve_only) {
        eprintln!("{warning}");
    }
    let warnings = [
        args.example.window_warning(),
        args.example.keep_alive_warning(),
        args.example.slow_consumer_warning(),
    ];
    for warning in warnings.into_iter().flatten() {
        eprintln!("{warning}");
    }
    // Stdout is line-buffered: the line is out before the first request can arrive.
    println!("listening on http://{}", listener.local_addr()?);
    Ok(())
}

/// Says `stop` at the first SIGTERM or Ctrl-C, and exits the process at the second (an operator
/// who does not want to wait for the shutdown grace).
async fn stop_on_signals(stop: Arc<tokio::sync::watch::Sender<bool>>) {
    app::shutdown_signal().await;
    eprintln!("shutting down (a second signal exits at once)");
    let _ = stop.send(true);
    app::shutdown_signal().await;
    eprintln!("second signal: exiting now");
    std::process::exit(130);
}

/// How long a replica that shuts down waits for its producer to give the lease back.
const HAND_BACK: Duration = Duration::from_secs(5);

/// Completes once `stop` says so.
async fn stopped(mut stop: tokio::sync::watch::Receiver<bool>) {
    // The sender is dropped only after sending `true`, which `wait_for` sees either way.
    let _ = stop.wait_for(|stop| *stop).await;
}

/// The stream's name, epoch and window on stderr.
fn describe(stream: &SseStream) {
    let me = stream.identity();
    let capacity = stream.backend().capacity();
    eprintln!("stream {}.{}, capacity {capacity}", me.stream, me.epoch);
}

/// The example's router for `app`, plus the heap gauge in `/metrics`.
fn app_router<B: Backend<Payload = Bytes>>(app: app::App<B>) -> Router {
    // The example's `/metrics` plus the heap gauge, recorded as the request comes in.
    let recorder = app.recorder.clone();
    let heap_gauge = move |request: Request| {
        if request.uri().path() == "/metrics" {
            metrics::with_local_recorder(&*recorder, record_heap);
        }
        std::future::ready(request)
    };
    app::router(app).layer(axum::middleware::map_request(heap_gauge))
}

/// The example's producer, started at the `start_after`-th stream if set, with this server's
/// payloads, until `shutdown` completes ([`app::run_producer_until`]).
async fn produce<B>(
    producer: SseProducer<B>,
    args: DemoArgs,
    shutdown: impl Future<Output = ()>,
) -> app::Stopped<B>
where
    B: Backend<Payload = Bytes, Producer: Sync>,
{
    let mut shutdown = pin!(shutdown);
    if let Some(streams) = args.start_after {
        // Opened streams are not signalled one by one; a millisecond's look is precise enough
        // for a start line.
        let mut look = tokio::time::interval(Duration::from_millis(1));
        while producer.stream().with_retention(|r| r.live_connections()) < streams {
            tokio::select! {
                _ = look.tick() => {}
                () = &mut shutdown => return app::Stopped::ShutDown(producer),
            }
        }
    }
    let payload = |id| payload(&args, id);
    app::run_producer_until(producer, &args.example, payload, shutdown).await
}

/// `{"n":id}`, `{"n":id,"t":unix_ns}` with `timestamps`; a `"pad"` field fills it up to
/// `payload_bytes`.
fn payload(args: &DemoArgs, id: u64) -> Bytes {
    let mut json = match args.timestamps {
        true => format!("{{\"n\":{id},\"t\":{}", unix_ns()),
        false => format!("{{\"n\":{id}"),
    };
    // `,"pad":""` and the closing brace take 10 bytes.
    let pad = (args.payload_bytes as usize).saturating_sub(json.len() + 10);
    if pad > 0 {
        json.reserve_exact(pad + 10);
        json.push_str(",\"pad\":\"");
        json.extend(std::iter::repeat_n('.', pad));
        json.push('"');
    }
    json.push('}');
    Bytes::from(json)
}

/// Nanoseconds since the Unix epoch (the publish time in timestamped payloads).
fn unix_ns() -> u128 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    since.map_or(0, |d| d.as_nanos())
}

/// `sse_server_heap_bytes`: bytes the allocator has handed out and not got back (glibc's
/// `mallinfo2`: in-use arena chunks plus mmapped blocks). Unlike the resident set size, it does not
/// include memory the allocator keeps after a free, so it tells a leak from fragmentation.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn record_heap() {
    // SAFETY: mallinfo2 takes no arguments and returns its statistics by value.
    let info = unsafe { libc::mallinfo2() };
    metrics::gauge!("sse_server_heap_bytes").set((info.uordblks + info.hblkhd) as f64);
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn record_heap() {}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::DemoArgs;

    #[test]
    fn the_flags_are_consistent() {
        DemoArgs::command().debug_assert();
    }

    #[test]
    fn rates_payload_sizes_and_delays_that_cannot_work_are_refused_at_startup() {
        use clap::Parser;
        for bad in [
            ["--rate", "1e-300"],
            ["--rate", "1.8e19"],
            ["--rate", "-1"],
            ["--rate", "NaN"],
            ["--rate", "inf"],
            ["--payload-bytes", "18446744073709551615"],
            ["--payload-bytes", "16777217"],
            ["--retry-ms", "0"],
            ["--retry-ms", "86400001"],
            ["--lease-ms", "99"],
        ] {
            let parsed = DemoArgs::try_parse_from(["sse_server", bad[0], bad[1]]);
            assert!(parsed.is_err(), "{bad:?} accepted");
        }
        // A negative rate is refused by the rate's own check, which says what a rate may be, not
        // taken for an unknown flag.
        let negative = DemoArgs::try_parse_from(["sse_server", "--rate", "-1"]).unwrap_err();
        assert_eq!(
            negative.kind(),
            clap::error::ErrorKind::ValueValidation,
            "{negative}"
        );
        assert!(
            negative.to_string().contains("not 0 or a rate"),
            "{negative}"
        );
        // An epoch is refused for what is wrong with it: its spelling, or its size.
        for (epoch, says) in [
            ("2A", "lowercase"),
            ("02a", "leading zeros"),
            ("10000000000000000", "64 bits"),
        ] {
            let refused = DemoArgs::try_parse_from(["sse_server", "--epoch", epoch]).unwrap_err();
            assert!(refused.to_string().contains(says), "{epoch}: {refused}");
        }
        for good in [
            ["--epoch", "ffffffffffffffff"],
            ["--rate", "0"],
            ["--rate", "0.001"],
            ["--rate", "1e9"],
            ["--payload-bytes", "16777216"],
            ["--retry-ms", "1"],
        ] {
            let parsed = DemoArgs::try_parse_from(["sse_server", good[0], good[1]]);
            assert!(parsed.is_ok(), "{good:?} refused: {parsed:?}");
        }
    }

    /// A serve-only replica produces nothing: producer flags given with it are refused, not
    /// silently ignored.
    #[test]
    fn producer_flags_are_refused_with_serve_only() {
        use clap::Parser;
        let base = [
            "sse_server",
            "--redis",
            "redis://127.0.0.1:1/",
            "--serve-only",
        ];
        for flag in [
            &["--eager"][..],
            &["--rate", "5"],
            &["--events", "10"],
            &["--start-after", "2"],
            &["--timestamps"],
            &["--payload-bytes", "64"],
        ] {
            let parsed = DemoArgs::try_parse_from(base.iter().chain(flag));
            assert!(parsed.is_err(), "{flag:?} accepted with --serve-only");
        }
        assert!(DemoArgs::try_parse_from(base).is_ok());
    }

    #[test]
    fn a_window_the_rate_outruns_is_announced_and_one_that_ends_the_stream_is_a_warning() {
        use clap::Parser;
        let sizing = |flags: &[&str]| {
            let args = DemoArgs::parse_from(["sse_server"].iter().chain(flags));
            args.example.sizing_warning().unwrap_or_default()
        };
        // Defaults: 20/s × 30 s = 600 events in a window of 1,024, which fills in 51.2 s; a
        // client back at the end of its window makes the producer wait up to 9.74 s, within 10 s.
        assert_eq!(sizing(&[]), "");
        // Unthrottled: full at once, the first event ages out after 30 s, past the 10 s bound.
        assert!(sizing(&["--rate", "0"]).starts_with("warning: "));
        // 100/s fills 1,024 in 10.2 s; the wait for the first to age out is 19.8 s > 10 s.
        assert!(sizing(&["--rate", "100"]).starts_with("warning: "));
        // 49.9/s: the wait is 9.48 s, but a release can come 0.94 s late, past 10 s.
        assert!(sizing(&["--rate", "49.9"]).starts_with("warning: "));
        // ... within a 55 s bound, which also covers a client back at the end of its window
        // (50.7 s): the producer is only slowed to 1,024 per 30 s.
        let slowed = sizing(&["--rate", "100", "--backpressure-timeout-ms", "55000"]);
        assert!(
            slowed.starts_with("note: ") && slowed.contains("34 events/s"),
            "{slowed}"
        );
        // ... but a 25 s bound is not enough for that returning client.
        let returning = sizing(&["--rate", "100", "--backpressure-timeout-ms", "25000"]);
        assert!(
            returning.starts_with("warning: ") && returning.contains("comes back"),
            "{returning}"
        );
        // 25/s holds 750 events a window, well within 1,024, but a client back at the end of
        // its window makes the producer wait up to 20 s for room.
        let late = sizing(&["--rate", "25"]);
        assert!(
            late.starts_with("warning: ") && late.contains("more than 1273 events"),
            "{late}"
        );
        // A window of 64 at 20/s and 3 s, with a 2 s bound: 60 events a window fit, but the
        // returning client's wait is 2.9 s.
        let edge = [
            "--rate",
            "20",
            "--capacity",
            "64",
            "--resumption-window-ms",
            "3000",
            "--backpressure-timeout-ms",
            "2000",
        ];
        assert!(sizing(&edge).contains("comes back"), "{}", sizing(&edge));
        // Exactly filling the window in the resumption window: no wait.
        assert_eq!(
            sizing(&["--rate", "1024", "--resumption-window-ms", "1000"]),
            ""
        );
        // A stream that ends before it could fill its window waits for nothing.
        assert_eq!(sizing(&["--rate", "200", "--events", "50"]), "");
        assert_eq!(sizing(&["--rate", "0", "--events", "1024"]), "");
        assert!(sizing(&["--rate", "0", "--events", "1025"]).starts_with("warning: "));
    }

    #[test]
    fn keep_alives_that_do_not_keep_a_quiet_stream_open_are_a_warning() {
        use clap::Parser;
        let warning = |flags: &[&str]| {
            let args = DemoArgs::parse_from(["sse_server"].iter().chain(flags));
            args.example.keep_alive_warning()
        };
        assert_eq!(warning(&[]), None, "the default 15 s");
        assert_eq!(warning(&["--keep-alive-ms", "59999"]), None);
        for none_or_too_long in ["0", "60000", "18446744073709551615"] {
            let text = warning(&["--keep-alive-ms", none_or_too_long])
                .unwrap_or_else(|| panic!("{none_or_too_long}: no warning"));
            assert!(text.contains("idle"), "{text}");
        }
    }

    #[test]
    fn a_policy_that_cuts_no_stalled_client_in_time_is_a_warning() {
        use clap::Parser;
        let warning = |flags: &[&str]| {
            let args = DemoArgs::parse_from(["sse_server"].iter().chain(flags));
            args.example.slow_consumer_warning()
        };
        assert_eq!(
            warning(&[]),
            None,
            "the defaults: 5 s against 10 s, and the lag rule"
        );
        assert_eq!(
            warning(&["--max-lag-percent", "0"]),
            None,
            "the write timeout still cuts"
        );
        assert_eq!(
            warning(&["--write-timeout-ms", "0"]),
            None,
            "the lag rule still cuts"
        );
        for flags in [
            &["--max-lag-percent", "0", "--write-timeout-ms", "0"][..],
            &["--max-lag-percent", "0", "--write-timeout-ms", "10000"],
            &[
                "--max-lag-percent",
                "0",
                "--backpressure-timeout-ms",
                "3000",
            ],
        ] {
            let text = warning(flags).unwrap_or_else(|| panic!("{flags:?}: no warning"));
            assert!(text.contains("end the stream for everyone"), "{text}");
        }
    }

    #[test]
    fn a_window_of_zero_is_a_warning() {
        use clap::Parser;
        let warning = |flags: &[&str]| {
            let args = DemoArgs::parse_from(["sse_server"].iter().chain(flags));
            args.example.window_warning()
        };
        assert_eq!(warning(&[]), None, "the default 30 s");
        assert_eq!(warning(&["--resumption-window-ms", "1"]), None);
        let text = warning(&["--resumption-window-ms", "0"]).expect("no warning for 0");
        assert!(text.contains("416"), "{text}");
    }

    #[test]
    fn payloads_are_padded_to_at_least_payload_bytes() {
        use clap::Parser;
        let args = DemoArgs::parse_from(["sse_server", "--payload-bytes", "64", "--timestamps"]);
        let json = super::payload(&args, 7);
        assert_eq!(json.len(), 64);
        let text = std::str::from_utf8(&json).unwrap();
        assert!(
            text.starts_with("{\"n\":7,\"t\":") && text.ends_with("\"}"),
            "{text}"
        );
    }
}
