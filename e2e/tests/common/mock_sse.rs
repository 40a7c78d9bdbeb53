//! A throwaway axum SSE server: real hyper chunked framing, numeric ids, `Last-Event-ID` resume,
//! and a minimal page with the same `window.__replay` contract as the example server.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, Sse};
use axum::response::Html;
use axum::routing::{get, post};
use axum::Router;
use futures_util::stream::{self, Stream};

/// Mock behaviour.
#[derive(Clone, Copy, Debug)]
pub struct MockOptions {
    /// Events on `/events` (ids 1..=events, then `event: end`).
    pub events: u64,
    /// Delay between events.
    pub interval: Duration,
}

const PAGE: &str = r#"<!doctype html><meta charset="utf-8"><title>mock replay</title>
<p>received <span id="received">0</span> reconnects <span id="reconnects">0</span>
last <span id="last-id"></span> gaps <span id="gaps">0</span> duplicates <span id="duplicates">0</span>
error <span id="error"></span> status <span id="status">connecting</span></p>
<script>
const r = window.__replay = {ids: [], reconnects: 0, gaps: 0, duplicates: 0, error: null, done: false};
let opened = 0, last = 0;
const $ = (id, v) => { document.getElementById(id).textContent = v; };
const show = (status) => {
  $('received', r.ids.length); $('reconnects', r.reconnects); $('last-id', last);
  $('gaps', r.gaps); $('duplicates', r.duplicates); $('error', r.error || ''); if (status) $('status', status);
};
const es = new EventSource('/events');
es.onopen = () => { if (opened++ > 0) r.reconnects++; show('open'); };
es.onmessage = (e) => {
  const id = Number(e.lastEventId);
  if (id <= last) r.duplicates++; else if (id !== last + 1) r.gaps++;
  r.ids.push(id); last = Math.max(last, id); show();
};
es.addEventListener('end', () => { r.done = true; es.close(); show('done'); });
es.onerror = () => show(es.readyState === 2 ? 'closed' : 'reconnecting');
</script>"#;

fn events(
    from: u64,
    opts: MockOptions,
) -> impl Stream<Item = Result<Event, Infallible>> + Send + 'static {
    stream::unfold(Some(from), move |next| async move {
        let id = next?;
        if id > opts.events {
            // Non-empty data: the browser does not dispatch an event whose data is empty.
            return Some((Ok(Event::default().event("end").data("{}")), None));
        }
        if !opts.interval.is_zero() {
            tokio::time::sleep(opts.interval).await;
        }
        let mut ev = Event::default()
            .id(id.to_string())
            .data(format!("{{\"n\":{id}}}"));
        if id == from {
            // Reconnect quickly after a cut (the browser default is seconds).
            ev = ev.retry(Duration::from_millis(20));
        }
        Some((Ok(ev), Some(id + 1)))
    })
}

async fn sse(
    State(opts): State<MockOptions>,
    headers: HeaderMap,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let last: u64 = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    Sse::new(events(last + 1, opts))
}

/// SSE in answer to a POST (as MCP streamable HTTP does): echoes the body length, then 5 events.
async fn rpc(body: axum::body::Bytes) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let first = Event::default().id("0").data(format!("len={}", body.len()));
    let rest = (1..=5u64).map(|i| Event::default().id(i.to_string()).data("x"));
    Sse::new(stream::iter(std::iter::once(first).chain(rest).map(Ok)))
}

/// An endless stream, one event every 5 ms, with keep-alive comments in between.
async fn forever() -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let s = stream::unfold(1u64, |id| async move {
        tokio::time::sleep(Duration::from_millis(5)).await;
        Some((Ok(Event::default().id(id.to_string()).data("tick")), id + 1))
    });
    Sse::new(s).keep_alive(axum::response::sse::KeepAlive::new().interval(Duration::from_millis(2)))
}

/// Starts the mock on 127.0.0.1:0.
pub async fn start(opts: MockOptions) -> SocketAddr {
    let app = Router::new()
        .route("/", get(|| async { Html(PAGE) }))
        .route("/events", get(sse))
        .route("/forever", get(forever))
        .route("/rpc", post(rpc))
        .with_state(opts);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}
