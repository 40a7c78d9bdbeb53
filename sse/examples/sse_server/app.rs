//! The example server's pieces: settings, the stream, the producer task and the router. `main.rs`
//! parses flags and serves; `tests/server.rs` and the test-and-benchmark server
//! (`sse/demo`, which adds Redis and load-test flags) include this file.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusRecorder};
use replay_ring::{CloseReason, ReplayRing};
use replay_ring_sse::axum::{backend_events, ServeConfig, SseConfig, SseProducer, SseStream};
use replay_ring_sse::backend::Backend;
use replay_ring_sse::{ConfigError, Epoch, LastEventIdError, PublishError};
use replay_ring_sse::{RetentionConfig, SlowConsumerPolicy};
use replay_ring_sse::{StreamId, StreamIdentity};

const PAGE: &str = include_str!("page.html");

/// `--rate`: 0, or a rate whose period (`1 / rate`) is a non-zero `Duration` the producer's
/// ticker can take, so a bad value is refused at startup instead of ending the stream later.
fn parse_rate(s: &str) -> Result<f64, String> {
    let rate: f64 = s.parse().map_err(|e| format!("{e}"))?;
    let period_ok = || Duration::try_from_secs_f64(1.0 / rate).is_ok_and(|p| !p.is_zero());
    if rate == 0.0 || (rate > 0.0 && period_ok()) {
        Ok(rate)
    } else {
        Err("not 0 or a rate between one event per 584 billion years and 10^9 per second".into())
    }
}

/// `--keep-alive-ms`: 0 (off) or an interval the stream accepts (`MIN_KEEP_ALIVE`), checked by
/// the stream's own rule so that the refusal names the flag.
fn parse_keep_alive_ms(s: &str) -> Result<u64, String> {
    let ms: u64 = s.parse().map_err(|e| format!("{e}"))?;
    ConfigError::check_keep_alive(Duration::from_millis(ms))
        .map(|()| ms)
        .map_err(|e| e.to_string())
}

/// `--epoch`: spelled as in the event ids the server will send, so clients quote back this value.
fn parse_epoch(s: &str) -> Result<Epoch, &'static str> {
    s.parse().map_err(|e| match e {
        LastEventIdError::Overflow { .. } => "more than 64 bits (16 hexadecimal digits at most)",
        _ => "not lowercase hexadecimal without leading zeros (an id's epoch, e.g. 2a)",
    })
}

/// A resumable server-sent event stream of `{"n":<id>}` events on 127.0.0.1.
#[derive(Debug, Clone, clap::Parser)]
pub struct Args {
    /// 127.0.0.1 port; 0 picks a free one
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Events the window holds, rounded up to a power of two
    #[arg(long, default_value_t = 1024)]
    pub capacity: usize,
    /// Events per second; 0 = as fast as the window allows: while clients are connected the window
    /// fills at once and each further event waits for the oldest to age out of the resumption
    /// window, which with the defaults (a 30 s window, a 10 s backpressure timeout) ends the
    /// stream with `backpressure_timeout` instead: give --rate 0 a --backpressure-timeout-ms
    /// longer than --resumption-window-ms (the server warns at start). With nobody connected (one
    /// window after the last client left) nothing is held, and events are published flat out, a
    /// full core's worth
    #[arg(long, default_value_t = 20.0, value_parser = parse_rate, allow_negative_numbers = true)]
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
    /// Reconnection delay sent in `retry:` (1 ms to a day: 0 would make clients reconnect in a
    /// tight loop)
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
    pub retry_ms: u64,
    /// Simultaneous event-stream connections; one more is answered 503 `too_many_readers`. Leave
    /// room for the clients of a replica that stops: they reconnect to the others at once
    #[arg(long, default_value_t = 256)]
    pub max_readers: usize,
    /// Idle time after which a keep-alive is written (0 = none, else at least 10)
    #[arg(long, default_value_t = 15_000, value_parser = parse_keep_alive_ms)]
    pub keep_alive_ms: u64,
    /// Write keep-alives as `event: keep-alive` rather than comments, so that the page can tell
    /// a connection that died silently from a quiet stream (it reconnects after three intervals
    /// without a word)
    #[arg(long)]
    pub keep_alive_event: bool,
    /// Stream epoch, lowercase hex [default: random per process]. Give each start its own: a
    /// restarted stream counts from id 1 again, and under a reused epoch a client's resume could
    /// run on into the new events as if they followed its own
    #[arg(long, value_parser = parse_epoch)]
    pub epoch: Option<Epoch>,
    /// Start producing at startup, not at the first /events request
    #[arg(long)]
    pub eager: bool,
    /// Treat a resume as its client's acknowledgement and release up to its cursor at once (only
    /// right when every stream has a single client)
    #[arg(long)]
    pub acknowledge_on_resume: bool,
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
            keep_alive_event: self.keep_alive_event,
            retry: Some(ms(self.retry_ms)),
            acknowledge_on_resume: self.acknowledge_on_resume,
        }
    }
}

impl Args {
    /// A warning when the window cannot hold what retention may keep, for longer than the
    /// backpressure timeout: the stream then ends with `backpressure_timeout` (`docs/protocol.md`,
    /// "Sizing"). Two cases:
    /// - the window holds less than `rate × resumption window` events: with every client keeping
    ///   up, the producer waits for events to age out each time it fills;
    /// - it holds less than twice that: a client that comes back near the end of its window is
    ///   sent what was published while nobody was connected, which then stays replayable for a
    ///   window from that writing, so the producer can wait up to a window for room (longer if
    ///   the client keeps leaving before it has caught up, which no setting covers).
    ///
    /// A note when only the first case holds and its waits stay within the bound. `None` when the
    /// window is large enough, or when `--events` ends the stream before it could fill.
    pub fn sizing_warning(&self) -> Option<String> {
        let slots = self.capacity.checked_next_power_of_two()?;
        if self.events.is_some_and(|last| last <= slots as u64) {
            return None;
        }
        let capacity = slots as f64;
        let window = self.resumption_window_ms as f64 / 1000.0;
        // Rate 0 publishes as fast as the window allows: it fills at once.
        let fill = if self.rate > 0.0 {
            capacity / self.rate
        } else {
            0.0
        };
        // Retention releases in granules of a 64th of the window, up to two granules late.
        let late = window / 32.0;
        let bound = self.backpressure_timeout_ms as f64 / 1000.0;
        // Until the first event ages out, with every client keeping up.
        let wait = window - fill + late;
        if fill < window && wait > bound {
            return Some(format!(
                "warning: the window ({capacity} events) fills in {fill:.1} s, and its first event \
                 is released up to {wait:.1} s later, past the {bound:.1} s backpressure timeout: \
                 the stream can end with backpressure_timeout once the window is full; lower \
                 --rate or --resumption-window-ms, or raise --capacity or --backpressure-timeout-ms"
            ));
        }
        // Until the first event a returning client was sent ages out: it was published as the
        // client left, held for it for a window, and written to it at the end of that window.
        let reconnect_wait = 2.0 * window - fill + late;
        if reconnect_wait > bound {
            let needed = if self.rate > 0.0 {
                format!(
                    " (more than {:.0} events)",
                    self.rate * (2.0 * window + late - bound)
                )
            } else {
                String::new()
            };
            return Some(format!(
                "warning: the window ({capacity} events) fills in {fill:.1} s; a client that \
                 comes back near the end of its {window:.1} s resumption window is sent what it \
                 missed, which then stays replayable for another window, so the producer can wait \
                 up to {reconnect_wait:.1} s for room, past the {bound:.1} s backpressure timeout, \
                 and the stream can end with backpressure_timeout; raise --capacity{needed} or \
                 --backpressure-timeout-ms, or lower --rate or --resumption-window-ms"
            ));
        }
        (fill < window).then(|| {
            format!(
                "note: capacity < rate × resumption window: the producer will wait for events to \
                 age out (about {:.0} events/s)",
                capacity / window
            )
        })
    }

    /// A warning when `--resumption-window-ms` is 0: retention then keeps nothing for a client
    /// that has gone, so the server streams but nothing it sends can be resumed.
    pub fn window_warning(&self) -> Option<String> {
        (self.resumption_window_ms == 0).then(|| {
            "warning: --resumption-window-ms 0: events may be released as soon as every live \
             connection has written them (they are, once the window needs their room), so a \
             client that reconnects after missing some can get 416 replay_gap rather than the \
             events"
                .to_owned()
        })
    }

    /// A warning when no slow-consumer rule can cut a client that stops reading before the
    /// producer's backpressure timeout: the write timeout off or not below it, and the lag rule
    /// off. One such client then holds the window full until the stream ends, for everyone.
    pub fn slow_consumer_warning(&self) -> Option<String> {
        let write_cut =
            self.write_timeout_ms > 0 && self.write_timeout_ms < self.backpressure_timeout_ms;
        (!write_cut && self.max_lag_percent == 0).then(|| {
            format!(
                "warning: --write-timeout-ms {} with --max-lag-percent 0: no rule cuts a client \
                 that stops reading before the {} ms backpressure timeout, so one such client can \
                 end the stream for everyone; keep --write-timeout-ms below \
                 --backpressure-timeout-ms, or turn the lag rule on",
                self.write_timeout_ms, self.backpressure_timeout_ms
            )
        })
    }

    /// A warning when keep-alives do not keep a quiet stream open: none (`--keep-alive-ms 0`), or
    /// an interval at or above the idle timeout of `serve` (`ServeConfig::default()`, which both
    /// servers use), which then closes a stream that published nothing for that long. Its client
    /// reconnects with `Last-Event-ID` and loses nothing, but a proxy or a page sees a dropped
    /// connection.
    pub fn keep_alive_warning(&self) -> Option<String> {
        let idle = ServeConfig::default().idle_timeout;
        let keep_alive = Duration::from_millis(self.keep_alive_ms);
        (keep_alive.is_zero() || keep_alive >= idle).then(|| {
            format!(
                "warning: --keep-alive-ms {}: a stream that publishes nothing for the {} s idle \
                 timeout is closed (clients reconnect with Last-Event-ID); keep it below {}",
                self.keep_alive_ms,
                idle.as_secs(),
                idle.as_millis()
            )
        })
    }
}

/// What the handlers share: the stream and this server's metrics recorder (one per server, not
/// the process-wide one, so servers in one test process do not mix).
#[derive(Clone)]
pub struct App<B = ReplayRing<Bytes>> {
    /// The resumable stream behind `/events`.
    pub stream: SseStream<B>,
    /// Renders `/metrics`.
    pub recorder: Arc<PrometheusRecorder>,
}

impl<B> App<B> {
    pub fn new(stream: SseStream<B>) -> Self {
        let recorder = Arc::new(PrometheusBuilder::new().build_recorder());
        App { stream, recorder }
    }
}

/// Builds the stream `events` and its producer. Run [`run_producer`], serve [`router`].
pub fn build(args: &Args) -> Result<(App, SseProducer), ConfigError> {
    let name = StreamId::new("events").expect("a valid stream name");
    let identity = StreamIdentity::new(name, args.epoch.unwrap_or_else(Epoch::generate));
    let (stream, producer) = SseStream::new(identity, args.sse_config())?;
    Ok((App::new(stream), producer))
}

/// Produces `payload(id)` at `rate` from the first `/events` request (or at once: `eager`) through
/// id `events`, then closes. A full window makes `send_with` wait (past the backpressure bound it
/// closes the stream explicitly): no event is ever dropped. While the backend is down it retries.
/// Returns why it stopped early: the stream ended, or another producer took it over
/// ([`PublishError::Superseded`]); `None` once it closed the stream itself.
pub async fn run_producer<B>(
    producer: SseProducer<B>,
    args: &Args,
    payload: impl Fn(u64) -> Bytes + Sync,
) -> Option<PublishError>
where
    B: Backend<Payload = Bytes, Producer: Sync>,
{
    // With a shutdown that never comes, it returns only once the stream ended.
    match run_producer_until(producer, args, payload, std::future::pending()).await {
        Stopped::Ended(e) => Some(e),
        Stopped::Completed | Stopped::ShutDown(_) => None,
    }
}

/// Why [`run_producer_until`] returned.
pub enum Stopped<B: Backend> {
    /// It closed the stream after id `events`.
    Completed,
    /// The stream ended, or this producer gave it up without closing it
    /// ([`PublishError::Superseded`]: another producer took it over, or a close failed).
    Ended(PublishError),
    /// The shutdown future completed first: the producer, with the stream still open. It stopped
    /// between two events, in a wait for room (which used no id), or in a network backend's
    /// append whose outcome it did not see (the event may be stored; a producer that takes over
    /// continues after whatever the head is).
    ShutDown(SseProducer<B>),
}

/// Binds `port` on 127.0.0.1; a port in use is reported with its number.
pub async fn bind(port: u16) -> Result<tokio::net::TcpListener, String> {
    tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .map_err(|e| format!("--port {port}: {e}"))
}

/// `e` and the errors that caused it, `: `-separated (what a log line needs to say why).
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// Says on stderr why the producer stopped, if the stream ended (an operator otherwise sees a
/// server that serves only the stream's end).
pub fn report<B: Backend>(stopped: &Stopped<B>) {
    match stopped {
        Stopped::Completed => eprintln!("producer: closed the stream after its last event"),
        Stopped::Ended(e) => eprintln!("producer: stopped: {}", with_causes(e)),
        Stopped::ShutDown(_) => {}
    }
}

/// Completes at SIGTERM or SIGINT (Ctrl-C). A signal this process cannot listen for is never
/// reported, rather than taken for a shutdown.
///
/// # Cancel safety
///
/// Cancel safe: it only waits; a signal that arrives after it was dropped is not reported.
pub async fn shutdown_signal() {
    let interrupt = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            eprintln!("cannot listen for Ctrl-C: {e}");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => drop(term.recv().await),
            Err(e) => {
                eprintln!("cannot listen for SIGTERM: {e}");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
}

/// [`run_producer`] until `shutdown` completes; then hands the producer back without closing the
/// stream (a replica gives its producer lease to a standby with it).
///
/// # Cancel safety
///
/// Dropping the future drops the producer with it: on Redis its lease is then not given back and
/// lapses by itself. Complete `shutdown` instead to get the producer back.
pub async fn run_producer_until<B>(
    mut producer: SseProducer<B>,
    args: &Args,
    payload: impl Fn(u64) -> Bytes + Sync,
    shutdown: impl std::future::Future<Output = ()>,
) -> Stopped<B>
where
    B: Backend<Payload = Bytes, Producer: Sync>,
{
    let ended = tokio::select! {
        // A shutdown that has come is not raced against one more event.
        biased;
        () = shutdown => return Stopped::ShutDown(producer),
        ended = publish(&mut producer, args, &payload) => ended,
    };
    match ended {
        Some(e) => Stopped::Ended(e),
        // A close that did not reach the backend leaves the stream open and without a producer:
        // the caller hands it on as it would a stream taken over (a standby's producer finds the
        // last id published and closes it).
        None => match producer.close(CloseReason::Completed).await {
            Ok(()) => Stopped::Completed,
            Err(_) => Stopped::Ended(PublishError::Superseded),
        },
    }
}

/// [`run_producer`]'s publishing, up to (not including) the close after id `events`.
async fn publish<B>(
    producer: &mut SseProducer<B>,
    args: &Args,
    payload: &(impl Fn(u64) -> Bytes + Sync),
) -> Option<PublishError>
where
    B: Backend<Payload = Bytes, Producer: Sync>,
{
    // A producer that took over an existing stream continues after its head: `--events` is the
    // last id, not a count per process. (Read before the wait below: only this producer appends,
    // and a wait that ends because the stream is gone leaves the loss to the first send.) If the
    // head cannot be read, the first send's id takes its place: the send loop below retries while
    // the backend is down, and reports a stream lost meanwhile, which a loop here could not tell
    // from an outage. (Its one cost: a stream left unclosed at or past `--events` gets one event
    // more before the close.)
    let mut last = match producer.stream().backend().window().await {
        Ok(window) => window.head,
        Err(e) => {
            eprintln!(
                "producer: {}; the first send will find the head",
                with_causes(&e)
            );
            0
        }
    };
    if !args.eager {
        producer.first_subscriber().await;
    }
    let mut ticker = (args.rate > 0.0).then(|| {
        let mut t = tokio::time::interval(Duration::from_secs_f64(1.0 / args.rate));
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        t
    });
    while last < args.events.unwrap_or(u64::MAX) {
        match &mut ticker {
            Some(t) => drop(t.tick().await),
            // Unthrottled: still yield so connections get scheduled on a busy runtime.
            None => tokio::task::yield_now().await,
        }
        match producer.send_with(payload).await {
            Ok(id) => last = id,
            // Sent, its answer lost: the producer stores it before the next event.
            Err(PublishError::Unconfirmed { id, error }) => {
                eprintln!("producer: {}; event {id} is resent", with_causes(&error));
                last = id;
            }
            Err(PublishError::Unavailable(e)) => {
                eprintln!("producer: {}; retrying", with_causes(&e));
                tokio::time::sleep(Duration::from_millis(100)).await; // back off while it is down
            }
            // Closed (readers got an explicit terminal frame), lost in the backend (readers got
            // `stream_lost`), or superseded. (`TooLarge` cannot happen: these events are far
            // below any store's limit.)
            Err(e) => return Some(e),
        }
    }
    None
}

/// The page, told the keep-alive interval when keep-alives are events it can hear (its watchdog
/// is off otherwise: comments never reach page script).
fn page_for(config: &SseConfig) -> Bytes {
    let interval = u64::try_from(config.keep_alive.as_millis()).unwrap_or(u64::MAX);
    let watchdog = if config.keep_alive_event && interval > 0 {
        format!(r#"<meta name="keep-alive-ms" content="{interval}">"#)
    } else {
        String::new()
    };
    Bytes::from(PAGE.replace("<!-- keep-alive -->", &watchdog))
}

/// `GET /` (the page), `GET /events` (the stream), `GET /metrics` (Prometheus text).
pub fn router<B: Backend<Payload = Bytes>>(app: App<B>) -> Router {
    let page = page_for(app.stream.config());
    let page = move || {
        let page = page.clone();
        async move { ([(header::CACHE_CONTROL, "no-store")], Html(page)) }
    };
    Router::new()
        .route("/", get(page))
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
        replay_ring_sse::axum::record_serve_metrics();
    };
    metrics::with_local_recorder(&*app.recorder, record);
    let text = app.recorder.handle().render();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}
