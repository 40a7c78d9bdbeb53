//! The example server's pieces: settings, the stream on either backend, the producer task and the
//! router. `main.rs` parses flags and serves; the integration test (`tests/server.rs`) includes
//! this file to run the same router in-process.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use clap::Parser;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusRecorder};
use replay_ring::{CloseReason, ReplayRing};
use replay_ring_redis::{RedisBackend, RedisConfig, RedisStream};
use replay_ring_sse::axum::{backend_events, SseConfig, SseProducer, SseStream};
use replay_ring_sse::backend::Backend;
use replay_ring_sse::{Epoch, PublishError, RetentionConfig, SlowConsumerPolicy};
use replay_ring_sse::{StreamId, StreamIdentity};

/// The browser page, served at `/`.
pub const PAGE: &str = include_str!("page.html");

/// A resumable server-sent event stream of `{"n":<id>}` events on 127.0.0.1, held in this
/// process or, with `--redis`, in Redis Streams shared by every replica.
#[derive(Debug, Clone, Parser)]
#[command(name = "sse_server")]
pub struct Args {
    /// 127.0.0.1 port; 0 picks a free one
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Keep the stream in Redis (`redis://host:port/db`), so that any replica can serve it
    #[arg(long, value_name = "URL", conflicts_with = "epoch")]
    pub redis: Option<String>,
    /// Serve the stream without producing into it (another replica produces; needs --redis)
    #[arg(long, requires = "redis")]
    pub serve_only: bool,
    /// Events the window holds, rounded up to a power of two (Redis: if it creates the stream)
    #[arg(long, default_value_t = 1024)]
    pub capacity: usize,
    /// Events per second; 0 = as fast as the window allows
    #[arg(long, default_value_t = 20.0, value_parser = |s: &str| s.parse().ok().filter(|r: &f64| *r >= 0.0 && r.is_finite()).ok_or("not a finite number >= 0"))]
    pub rate: f64,
    /// End the stream with `event: end` after the event with this id [default: never]
    #[arg(long)]
    pub events: Option<u64>,
    /// Keep written events replayable this long
    #[arg(long, default_value_t = 30_000)]
    pub resumption_window_ms: u64,
    /// Close the stream with `event: stream-error` after the producer waited this long for space
    #[arg(long, default_value_t = 10_000)]
    pub backpressure_timeout_ms: u64,
    /// Cut a connection whose socket accepts nothing for this long (0 = never)
    #[arg(long, default_value_t = 5_000)]
    pub write_timeout_ms: u64,
    /// Cut a connection lagging more than this percentage of a full window while another keeps up (0 = never)
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u8).range(0..=100))]
    pub max_lag_percent: u8,
    /// Idle time before a `: keep-alive` comment
    #[arg(long, default_value_t = 15_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub keep_alive_ms: u64,
    /// Reconnection delay sent in `retry:`
    #[arg(long, default_value_t = 1000)]
    pub retry_ms: u64,
    /// Simultaneous event-stream connections
    #[arg(long, default_value_t = 16)]
    pub max_readers: usize,
    /// Stream name in event ids (and in the Redis keys)
    #[arg(long, default_value = "events", value_parser = |s: &str| StreamId::new(s).map_err(|e| e.to_string()))]
    pub stream: StreamId,
    /// Stream epoch, lowercase hex [default: random per process; with Redis, per stream]
    #[arg(long, value_parser = |s: &str| u64::from_str_radix(s, 16).map(Epoch::new))]
    pub epoch: Option<Epoch>,
    /// Start producing at startup, not at the first /events request to this process
    #[arg(long)]
    pub eager: bool,
    /// Start producing once this many event streams are open, not at the first (for benchmarks
    /// that compare servers on the same stream)
    #[arg(long, conflicts_with = "eager")]
    pub start_after: Option<usize>,
    /// Treat a resume as its client's acknowledgement and release up to its cursor at once (only
    /// right when every stream has a single client)
    #[arg(long)]
    pub acknowledge_on_resume: bool,
    /// Add the publish time to each payload, `{"n":<id>,"t":<Unix ns>}` (for latency measurements)
    #[arg(long)]
    pub timestamps: bool,
    /// Pad each payload to at least this many bytes with a `"pad"` field (to load the sockets)
    #[arg(long, default_value_t = 0)]
    pub payload_bytes: usize,
}

impl Args {
    /// The stream's settings from the flags.
    pub fn sse_config(&self) -> SseConfig {
        let ms = Duration::from_millis;
        SseConfig {
            capacity: self.capacity,
            max_connections: self.max_readers,
            retention: RetentionConfig {
                resumption_window: ms(self.resumption_window_ms),
                backpressure_timeout: ms(self.backpressure_timeout_ms),
            },
            slow_consumer: SlowConsumerPolicy {
                write_timeout: (self.write_timeout_ms > 0).then(|| ms(self.write_timeout_ms)),
                max_lag_percent: (self.max_lag_percent > 0).then_some(self.max_lag_percent),
                ..SlowConsumerPolicy::default()
            },
            keep_alive: ms(self.keep_alive_ms),
            retry: Some(ms(self.retry_ms)),
            acknowledge_on_resume: self.acknowledge_on_resume,
        }
    }
}

/// What the handlers share: the stream and this server's metrics recorder.
#[derive(Clone)]
pub struct App<B = ReplayRing<Bytes>> {
    /// The resumable stream behind `/events`.
    pub stream: SseStream<B>,
    recorder: Arc<PrometheusRecorder>,
}

impl<B> App<B> {
    fn new(stream: SseStream<B>) -> Self {
        // One recorder per server (not the process-wide one), so servers in one test process do
        // not mix.
        let recorder = Arc::new(PrometheusBuilder::new().build_recorder());
        App { stream, recorder }
    }
}

/// Builds the stream in this process's memory and its producer. Run [`run_producer`] and serve
/// [`router`].
pub fn build(args: &Args) -> Result<(App, SseProducer), replay_ring::BuildError> {
    let identity = StreamIdentity::new(args.stream, args.epoch.unwrap_or_else(Epoch::generate));
    let (stream, producer) = SseStream::new(identity, args.sse_config())?;
    Ok((App::new(stream), producer))
}

/// Builds the stream in Redis at `url`: creates it (or opens it when another replica did) and,
/// unless `serve_only`, takes the producer lease, kept alive while the producer idles.
pub async fn build_redis(
    args: &Args,
    url: &str,
) -> Result<(App<RedisStream>, Option<SseProducer<RedisStream>>), replay_ring_redis::Error> {
    let backend = RedisBackend::connect(url, RedisConfig::default()).await?;
    let capacity = args.capacity.next_power_of_two() as u64;
    let stream = backend.create(&args.stream, capacity).await?;
    let stream = stream.with_max_readers(args.max_readers);
    let (identity, config) = (stream.identity(), args.sse_config());
    if args.serve_only {
        return Ok((
            App::new(SseStream::without_producer(stream, identity, config)),
            None,
        ));
    }
    let producer = stream.acquire_producer().await?;
    tokio::spawn(producer.lease_keeper().run());
    let (stream, producer) = SseStream::with_backend(producer, identity, config);
    Ok((App::new(stream), Some(producer)))
}

/// Produces `{"n":id}` events (`{"n":id,"t":unix_ns}` with `timestamps`; a `"pad"` field fills
/// them up to `payload_bytes`) at the configured rate, from the first `/events` request on (or at
/// once with `eager`); closes with `Completed` after id `events`. The producer waits while the
/// window is full and closes the stream explicitly past the backpressure bound; it never drops an
/// event. While the backend is unreachable it retries (an append whose outcome was unknown is
/// resent first, under its own id).
pub async fn run_producer<B>(mut producer: SseProducer<B>, config: Args)
where
    B: Backend<Payload = Bytes, Producer: Sync>,
{
    if !config.eager {
        producer.first_subscriber().await;
    }
    if let Some(streams) = config.start_after {
        // Opened streams are not signalled one by one; a millisecond's look is precise enough
        // for a start line.
        let mut look = tokio::time::interval(Duration::from_millis(1));
        while producer.stream().with_retention(|r| r.live_connections()) < streams {
            look.tick().await;
        }
    }
    let mut ticker = (config.rate > 0.0).then(|| {
        let mut t = tokio::time::interval(Duration::from_secs_f64(1.0 / config.rate));
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        t
    });
    let mut last = 0;
    while last < config.events.unwrap_or(u64::MAX) {
        match &mut ticker {
            Some(t) => {
                t.tick().await;
            }
            // Unthrottled: still yield so connections get scheduled on a busy runtime.
            None => tokio::task::yield_now().await,
        }
        let made = |id| {
            let mut json = match config.timestamps {
                true => format!("{{\"n\":{id},\"t\":{}", unix_ns()),
                false => format!("{{\"n\":{id}"),
            };
            // `,"pad":""` and the closing brace take 10 bytes.
            let pad = config.payload_bytes.saturating_sub(json.len() + 10);
            if pad > 0 {
                json.reserve_exact(pad + 10);
                json.push_str(",\"pad\":\"");
                json.extend(std::iter::repeat_n('.', pad));
                json.push('"');
            }
            json.push('}');
            Bytes::from(json)
        };
        match producer.send_with(made).await {
            Ok(id) => last = id,
            Err(PublishError::Unavailable(e)) => {
                eprintln!("producer: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(100)).await; // back off while it is down
            }
            Err(_) => return, // closed; readers got an explicit terminal frame
        }
    }
    let _ = producer.close(CloseReason::Completed).await;
}

/// Nanoseconds since the Unix epoch (the publish time in timestamped payloads).
fn unix_ns() -> u128 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    since.map_or(0, |d| d.as_nanos())
}

/// `GET /` (the page), `GET /events` (the stream), `GET /metrics` (Prometheus text).
pub fn router<B: Backend<Payload = Bytes>>(app: App<B>) -> Router {
    Router::new()
        .route(
            "/",
            get(|| async { ([(header::CACHE_CONTROL, "no-store")], Html(PAGE)) }),
        )
        .route(
            "/events",
            get(backend_events::<B>).with_state(app.stream.clone()),
        )
        .route("/metrics", get(metrics::<B>))
        .with_state(app)
}

async fn metrics<B: Backend<Payload = Bytes>>(State(app): State<App<B>>) -> Response {
    let Ok((counters, closed)) = app.stream.backend_counters().await else {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    };
    let record = || {
        app.stream.record_metrics_from(&counters, closed);
        record_heap();
    };
    metrics::with_local_recorder(&*app.recorder, record);
    let text = app.recorder.handle().render();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
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
