//! The example server's pieces: settings, the producer task and the router. `main.rs` parses flags
//! and serves; the integration test (`tests/server.rs`) includes this file to run the same router
//! in-process.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::header;
use axum::response::{Html, IntoResponse};
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use clap::Parser;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusRecorder};
use replay_ring::CloseReason;
use replay_ring_sse::axum::{events, SseConfig, SseProducer, SseStream};
use replay_ring_sse::{Epoch, RetentionConfig, SlowConsumerPolicy, StreamId, StreamIdentity};

/// The browser page, served at `/`.
pub const PAGE: &str = include_str!("page.html");

/// A resumable server-sent event stream of `{"n":<id>}` events on 127.0.0.1.
#[derive(Debug, Clone, Parser)]
#[command(name = "sse_server")]
pub struct Args {
    /// 127.0.0.1 port; 0 picks a free one
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Events the window holds, rounded up to a power of two
    #[arg(long, default_value_t = 1024)]
    pub capacity: usize,
    /// Events per second; 0 = as fast as the window allows
    #[arg(long, default_value_t = 20.0, value_parser = |s: &str| s.parse().ok().filter(|r: &f64| *r >= 0.0 && r.is_finite()).ok_or("not a finite number >= 0"))]
    pub rate: f64,
    /// Produce this many events, then end the stream with `event: end` [default: forever]
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
    /// Stream name in event ids
    #[arg(long, default_value = "events", value_parser = |s: &str| StreamId::new(s).map_err(|e| e.to_string()))]
    pub stream: StreamId,
    /// Stream epoch, lowercase hex [default: random per process]
    #[arg(long, value_parser = |s: &str| u64::from_str_radix(s, 16).map(Epoch::new))]
    pub epoch: Option<Epoch>,
    /// Start producing at startup, not at the first /events request
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
pub struct App {
    /// The resumable stream behind `/events`.
    pub stream: SseStream,
    recorder: Arc<PrometheusRecorder>,
}

/// Builds the stream and its producer. Run [`run_producer`] and serve [`router`].
pub fn build(args: &Args) -> Result<(App, SseProducer), replay_ring::BuildError> {
    let epoch = args.epoch.unwrap_or_else(Epoch::generate);
    let identity = StreamIdentity::new(args.stream, epoch);
    let (stream, producer) = SseStream::new(identity, args.sse_config())?;
    // One recorder per server (not the process-wide one), so servers in one test process do not mix.
    let recorder = Arc::new(PrometheusBuilder::new().build_recorder());
    Ok((App { stream, recorder }, producer))
}

/// Produces `{"n":id}` events (`{"n":id,"t":unix_ns}` with `timestamps`; a `"pad"` field fills
/// them up to `payload_bytes`) at the configured rate, from the first `/events` request on (or at
/// once with `eager`); closes with `Completed` after `events`. The producer waits while the window
/// is full and closes the stream explicitly past the backpressure bound; it never drops an event.
pub async fn run_producer(mut producer: SseProducer, config: Args) {
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
    for _ in 0..config.events.unwrap_or(u64::MAX) {
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
        if producer.send_with(made).await.is_err() {
            return; // closed past the backpressure bound; readers got an explicit error
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
pub fn router(app: App) -> Router {
    Router::new()
        .route(
            "/",
            get(|| async { ([(header::CACHE_CONTROL, "no-store")], Html(PAGE)) }),
        )
        .route("/events", get(events).with_state(app.stream.clone()))
        .route("/metrics", get(metrics))
        .with_state(app)
}

async fn metrics(State(app): State<App>) -> impl IntoResponse {
    metrics::with_local_recorder(&*app.recorder, || {
        app.stream.record_metrics();
        record_heap();
    });
    let text = app.recorder.handle().render();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text)
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
