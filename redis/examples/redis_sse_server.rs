//! A resumable SSE endpoint whose stream lives in Redis, so any number of replicas can serve it
//! and a client may reconnect to any of them (or to one that restarted).
//!
//! ```text
//! # replica A: creates the stream and produces 1000 events, one every 10 ms
//! cargo run -p replay-ring-redis --example redis_sse_server -- \
//!     --redis redis://127.0.0.1:6379/ --port 8081 --produce 1000 --interval-ms 10
//! # replica B: serves the same stream
//! cargo run -p replay-ring-redis --example redis_sse_server -- --redis redis://127.0.0.1:6379/ --port 8082
//! curl -N http://127.0.0.1:8082/events -H 'Last-Event-ID: events.<epoch>.41'
//! ```
//!
//! `GET /events` follows `docs/protocol.md`: a priming event carrying the cursor, exactly the
//! events after `Last-Event-ID`, keep-alives, and an explicit terminal frame. A resume is an
//! acknowledgement: the events through the cursor are released. Refusals are 400/404/409/416 with
//! JSON bodies; a Redis outage is a 503 before the stream starts, or a `stream-error` frame
//! (`backend_unavailable`) that ends it, after which the client resumes from its last id.
//! The listening address is printed on stdout as `listening on <addr>`.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use bytes::{Bytes, BytesMut};
use clap::Parser;
use replay_ring::CloseReason;
use replay_ring_redis::{decision_for, Error, ReadItem, RedisBackend, RedisConfig, RedisReader};
use replay_ring_sse::{
    decide, encode_event, encode_keep_alive, encode_priming, Frame, HttpResponse, ResumeDecision,
    StreamId, StreamIdentity, LAST_EVENT_ID_HEADER,
};

#[derive(Parser, Debug)]
#[command(about = "Resumable SSE endpoint backed by Redis Streams")]
struct Args {
    /// Redis URL.
    #[arg(long, default_value = "redis://127.0.0.1:6379/")]
    redis: String,
    /// TCP port on 127.0.0.1 (0 = any free port).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Stream name.
    #[arg(long, default_value = "events")]
    stream: String,
    /// Window capacity (unreleased events).
    #[arg(long, default_value_t = 4096)]
    capacity: u64,
    /// Produce this many events (this replica creates the stream and holds the producer lease);
    /// 0 = serve only.
    #[arg(long, default_value_t = 0)]
    produce: u64,
    /// Delay between produced events.
    #[arg(long, default_value_t = 10)]
    interval_ms: u64,
    /// Keep-alive comment after this much idleness.
    #[arg(long, default_value_t = 15_000)]
    keep_alive_ms: u64,
    /// `retry:` sent to clients.
    #[arg(long, default_value_t = 500)]
    retry_ms: u64,
}

struct App {
    backend: RedisBackend,
    stream: StreamId,
    keep_alive: Duration,
    retry: Duration,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let stream = StreamId::new(&args.stream)?;
    let backend = RedisBackend::connect(&args.redis, RedisConfig::default()).await?;
    if args.produce > 0 {
        let created = backend.create(&stream, args.capacity).await?;
        tokio::spawn(produce(
            created,
            args.produce,
            Duration::from_millis(args.interval_ms),
        ));
    }
    let app = Arc::new(App {
        backend,
        stream,
        keep_alive: Duration::from_millis(args.keep_alive_ms),
        retry: Duration::from_millis(args.retry_ms),
    });
    let router = Router::new().route("/events", get(events)).with_state(app);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", args.port)).await?;
    println!("listening on {}", listener.local_addr()?);
    axum::serve(listener, router).await?;
    Ok(())
}

/// Appends `{"n":<id>}` for ids up to `count`, then closes with `Completed`. Waits for room when
/// the window is full, resends appends whose reply was lost, and retries while Redis is down.
async fn produce(stream: replay_ring_redis::RedisStream, count: u64, interval: Duration) {
    let mut producer = loop {
        match stream.acquire_producer().await {
            Ok(p) => break p,
            Err(Error::LeaseHeld { expires_in_ms, .. }) => {
                tokio::time::sleep(Duration::from_millis(expires_in_ms.clamp(10, 1000) as u64))
                    .await
            }
            Err(e) => {
                eprintln!("producer: {e}");
                return;
            }
        }
    };
    while producer.next_id() <= count || producer.has_pending() {
        let result = if producer.has_pending() {
            producer.resolve_pending().await.map(|_| ())
        } else {
            let id = producer.next_id();
            let payload = format!("{{\"n\":{id}}}");
            producer
                .append_wait(payload.as_bytes(), Duration::from_secs(30))
                .await
                .map(|_| ())
        };
        match result {
            Ok(()) => tokio::time::sleep(interval).await,
            Err(e @ (Error::Unknown { .. } | Error::Unavailable(_) | Error::OutOfMemory(_))) => {
                eprintln!("producer: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => {
                eprintln!("producer: {e}; closing the stream");
                let _ = producer.close(CloseReason::error(e.to_string())).await;
                return;
            }
        }
    }
    if let Err(e) = producer.close(CloseReason::Completed).await {
        eprintln!("producer: close: {e}");
    }
}

async fn events(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    let last_event_id = headers.get(LAST_EVENT_ID_HEADER).map(HeaderValue::as_bytes);
    let stream = match app.backend.open(&app.stream).await {
        Ok(s) => s,
        Err(e) => return refusal(&e, None, last_event_id),
    };
    let state = match stream.state().await {
        Ok(s) => s,
        Err(e) => return refusal(&e, None, last_event_id),
    };
    let identity = state.identity;
    let sse_state = state.as_sse();
    let decision = decide(Some(&sse_state), last_event_id);
    let cursor = match decision {
        ResumeDecision::Live { head } | ResumeDecision::NoOp { head } => head,
        ResumeDecision::Replay { from, .. } => from - 1,
        _ => return to_axum(HttpResponse::for_decision(&decision, Some(&sse_state))),
    };
    // The decision was made on a snapshot; the resume re-checks it atomically with the first page.
    let reader = match stream.resume(Some(cursor)).await {
        Ok(r) => r,
        Err(e) => return refusal(&e, Some(identity), last_event_id),
    };
    if last_event_id.is_some() {
        // Acknowledgement: the client has everything through its cursor.
        if let Err(e) = stream.release_through(cursor).await {
            eprintln!("release through {cursor}: {e}");
        }
    }
    let mut response = to_axum(HttpResponse::stream(&sse_state));
    let body = Body::from_stream(futures_util::stream::unfold(
        Conn::Priming {
            reader,
            identity,
            keep_alive: app.keep_alive,
            retry: app.retry,
        },
        Conn::step,
    ));
    *response.body_mut() = body;
    response
}

/// One SSE connection's body, as a state machine driven by the response stream.
enum Conn {
    Priming {
        reader: RedisReader,
        identity: StreamIdentity,
        keep_alive: Duration,
        retry: Duration,
    },
    Live {
        reader: RedisReader,
        identity: StreamIdentity,
        keep_alive: Duration,
    },
    Done,
}

impl Conn {
    async fn step(self) -> Option<(Result<Bytes, Infallible>, Conn)> {
        let mut buf = BytesMut::new();
        match self {
            Conn::Done => None,
            Conn::Priming {
                reader,
                identity,
                keep_alive,
                retry,
            } => {
                encode_priming(&mut buf, identity.event_id(reader.last_id()), Some(retry));
                let next = Conn::Live {
                    reader,
                    identity,
                    keep_alive,
                };
                Some((Ok(buf.freeze()), next))
            }
            Conn::Live {
                mut reader,
                identity,
                keep_alive,
            } => {
                // `next` is cancel safe: a keep-alive timeout loses nothing.
                match tokio::time::timeout(keep_alive, reader.next()).await {
                    Err(_) => encode_keep_alive(&mut buf),
                    Ok(Ok(ReadItem::Events(events))) => {
                        for (id, data) in events {
                            // Cannot fail: the id is a validated EventId and there is no event name.
                            let _ = encode_event(&mut buf, identity.event_id(id), None, &data);
                        }
                    }
                    Ok(Ok(ReadItem::Closed(reason))) => {
                        terminal(&mut buf, &reason);
                        return Some((Ok(buf.freeze()), Conn::Done));
                    }
                    Ok(Err(e)) => {
                        stream_error(&mut buf, &e);
                        return Some((Ok(buf.freeze()), Conn::Done));
                    }
                }
                let next = Conn::Live {
                    reader,
                    identity,
                    keep_alive,
                };
                Some((Ok(buf.freeze()), next))
            }
        }
    }
}

/// `event: end` after a normal close, `event: stream-error` otherwise (no id: the client's cursor
/// stays on the last event).
fn terminal(buf: &mut BytesMut, reason: &CloseReason) {
    let (event, body) = match reason {
        CloseReason::Completed => ("end", serde_json::json!({ "reason": "completed" })),
        CloseReason::BackpressureTimeout { waited } => (
            "stream-error",
            serde_json::json!({
                "error": "backpressure_timeout",
                "waited_ms": waited.as_millis() as u64,
                "message": reason.to_string(),
            }),
        ),
        CloseReason::ProducerDropped => (
            "stream-error",
            serde_json::json!({ "error": "producer_dropped", "message": reason.to_string() }),
        ),
        _ => (
            "stream-error",
            serde_json::json!({ "error": "stream_failed", "message": reason.to_string() }),
        ),
    };
    let data = body.to_string();
    let _ = Frame::new()
        .event(event)
        .data(data.as_bytes())
        .encode_into(buf);
}

/// The frame that ends a connection whose reader failed: the client resumes (outage) or learns
/// the stream is gone; never a silent gap.
fn stream_error(buf: &mut BytesMut, e: &Error) {
    let code = match e {
        Error::Gap { .. } => "replay_gap",
        e if e.is_stream_lost() => "stream_lost",
        _ => "backend_unavailable",
    };
    let data = serde_json::json!({ "error": code, "message": e.to_string() }).to_string();
    let _ = Frame::new()
        .event("stream-error")
        .data(data.as_bytes())
        .encode_into(buf);
}

/// A refused request: the protocol's 4xx for contract outcomes, 503 + Retry-After for an outage.
fn refusal(e: &Error, identity: Option<StreamIdentity>, last_event_id: Option<&[u8]>) -> Response {
    let got = last_event_id
        .and_then(|v| replay_ring_sse::EventId::parse_bytes(v).ok())
        .map(|id| id.epoch)
        .or(identity.map(|i| i.epoch))
        .unwrap_or(replay_ring_sse::Epoch::new(0));
    if let Some(decision) = decision_for(e, got) {
        return to_axum(HttpResponse::for_decision(&decision, None));
    }
    let body = serde_json::json!({ "error": "backend_unavailable", "message": e.to_string() });
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [("retry-after", "1"), ("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn to_axum(r: HttpResponse) -> Response {
    let mut response = Response::new(Body::from(r.body));
    *response.status_mut() =
        StatusCode::from_u16(r.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    for (name, value) in r.headers {
        if let Ok(v) = HeaderValue::from_str(&value) {
            response.headers_mut().insert(name, v);
        }
    }
    response
}
