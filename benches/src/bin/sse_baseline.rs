//! `sse-baseline`: the comparison server of the HTTP scenario, written the way SSE fan-out is
//! usually written today: one `tokio::sync::broadcast` channel, each connection an axum
//! `Sse` response over its own receiver. The same flags, payload and start rule as the replay-ring
//! demo server (publishing starts at the first `GET /events`, or at the `--start-after`-th; after `--events` events every
//! stream ends with `event: end`). A receiver that falls more than `--capacity` events behind
//! loses the oldest ones (`RecvError::Lagged`): the server skips them, as such servers do, and
//! counts them (`GET /metrics`); the load client sees the gap.
//!
//! Prints `listening on http://127.0.0.1:PORT` as its first stdout line.

use std::convert::Infallible;
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use clap::Parser;
use futures_util::Stream;
use tokio::sync::{broadcast, Notify};

#[derive(Debug, Parser)]
#[command(about = "SSE fan-out with axum + tokio::sync::broadcast (benchmark baseline)")]
struct Args {
    /// 127.0.0.1 port; 0 = ephemeral.
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Events per second; 0 = unthrottled.
    #[arg(long, default_value_t = 20.0)]
    rate: f64,
    /// Publish this many events, then end every stream.
    #[arg(long)]
    events: Option<u64>,
    /// Broadcast channel capacity.
    #[arg(long, default_value_t = 1024)]
    capacity: usize,
    /// Idle time before a keep-alive comment, ms.
    #[arg(long, default_value_t = 15_000)]
    keep_alive_ms: u64,
    /// Start publishing once this many streams are open, not at the first.
    #[arg(long)]
    start_after: Option<usize>,
}

struct AppState {
    /// `None` once publishing ended: new subscribers then see a closed stream.
    tx: Mutex<Option<broadcast::Sender<(u64, Bytes)>>>,
    start: Notify,
    started: AtomicBool,
    lagged: AtomicU64,
    keep_alive: Duration,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    if !(args.rate >= 0.0 && args.rate.is_finite()) || args.capacity == 0 {
        eprintln!("error: --rate must be a finite number >= 0 and --capacity > 0");
        return std::process::ExitCode::from(2);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(serve(args))
}

async fn serve(args: Args) -> std::process::ExitCode {
    let (tx, _) = broadcast::channel(args.capacity);
    let state = Arc::new(AppState {
        tx: Mutex::new(Some(tx.clone())),
        start: Notify::new(),
        started: AtomicBool::new(false),
        lagged: AtomicU64::new(0),
        keep_alive: Duration::from_millis(args.keep_alive_ms),
    });
    let listener = match tokio::net::TcpListener::bind(("127.0.0.1", args.port)).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: bind: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let addr = listener.local_addr().expect("bound socket has an address");
    println!("listening on http://{addr}");
    let _ = std::io::stdout().flush();
    tokio::spawn(publish(
        tx,
        state.clone(),
        args.rate,
        args.events,
        args.start_after,
    ));
    let app = Router::new()
        .route("/events", get(events))
        .route("/metrics", get(metrics))
        .with_state(state);
    match axum::serve(listener, app).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: serve: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Publishes `{"n":id,"t":unix_ns}` events from the first subscription on (or from the
/// `start_after`-th), then closes the channel.
async fn publish(
    tx: broadcast::Sender<(u64, Bytes)>,
    state: Arc<AppState>,
    rate: f64,
    events: Option<u64>,
    start_after: Option<usize>,
) {
    state.start.notified().await;
    if let Some(streams) = start_after {
        // As the replay-ring demo server: look every millisecond.
        let mut look = tokio::time::interval(Duration::from_millis(1));
        while tx.receiver_count() < streams {
            look.tick().await;
        }
    }
    let mut ticker = (rate > 0.0).then(|| {
        let mut t = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        t
    });
    let mut id = 0u64;
    while events.is_none_or(|n| id < n) {
        match &mut ticker {
            Some(t) => {
                t.tick().await;
            }
            None => tokio::task::yield_now().await,
        }
        id += 1;
        let payload = Bytes::from(replay_ring_benches::payload::encode(id));
        // An error means no subscriber right now: the event is gone, as with any broadcast.
        let _ = tx.send((id, payload));
    }
    // Every sender gone: receivers drain what is queued, then see `Closed`.
    state.tx.lock().unwrap_or_else(|e| e.into_inner()).take();
    drop(tx);
}

async fn events(
    State(state): State<Arc<AppState>>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let rx = state
        .tx
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .map(|tx| tx.subscribe());
    // Relaxed: the Notify carries the wake-up; the flag only avoids redundant notifications.
    if !state.started.swap(true, Relaxed) {
        state.start.notify_one();
    }
    let keep_alive = state.keep_alive;
    let stream =
        futures_util::stream::unfold((rx, state, false), |(mut rx, state, ended)| async move {
            if ended {
                return None;
            }
            loop {
                let Some(receiver) = rx.as_mut() else {
                    return Some((Ok(end_event()), (rx, state, true)));
                };
                match receiver.recv().await {
                    Ok((id, payload)) => {
                        let data = std::str::from_utf8(&payload).unwrap_or_default();
                        let event = Event::default().id(id.to_string()).data(data);
                        return Some((Ok(event), (rx, state, false)));
                    }
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        // Relaxed: statistics.
                        state.lagged.fetch_add(n, Relaxed);
                    }
                    Err(broadcast::error::RecvError::Closed) => {
                        return Some((Ok(end_event()), (rx, state, true)));
                    }
                }
            }
        });
    Sse::new(stream).keep_alive(KeepAlive::new().interval(keep_alive))
}

fn end_event() -> Event {
    Event::default()
        .event("end")
        .data(r#"{"reason":"completed"}"#)
}

async fn metrics(State(state): State<Arc<AppState>>) -> String {
    // Relaxed: statistics.
    format!(
        "# TYPE baseline_events_lagged_total counter\nbaseline_events_lagged_total {}\n",
        state.lagged.load(Relaxed)
    )
}
