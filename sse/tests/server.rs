//! The example server's router, in-process, driven by a raw HTTP/1.1 client over loopback TCP:
//! resumes replay exactly `x+1..`, unreplayable cursors get explicit 4xx JSON, a closed stream
//! always ends with an explicit terminal event, and the backpressure bound closes explicitly.

#[allow(dead_code)]
#[path = "../examples/sse_server/app.rs"]
mod app;

use std::time::Duration;

use clap::Parser;
use replay_ring_sse::axum::{serve, ServeConfig};
use replay_ring_sse::Epoch;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio::time::timeout;

const LIMIT: Duration = Duration::from_secs(20);
const EPOCH: u64 = 0xabc;

struct Server {
    port: u16,
    app: app::App,
    producer: JoinHandle<Option<replay_ring_sse::PublishError>>,
}

async fn start(config: app::Args) -> Server {
    let (app, producer) = app::build(&config).unwrap();
    let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let router = app::router(app.clone());
    tokio::spawn(async move { serve(listener, router, ServeConfig::default()).await });
    // The example's payload (`main.rs`).
    let payload = |id| bytes::Bytes::from(format!("{{\"n\":{id}}}"));
    let producer = tokio::spawn(async move { app::run_producer(producer, &config, payload).await });
    Server {
        port,
        app,
        producer,
    }
}

fn config() -> app::Args {
    app::Args {
        capacity: 64,
        rate: 0.0,
        events: Some(20),
        epoch: Some(Epoch::new(EPOCH)),
        eager: true,
        resumption_window_ms: 60_000,
        backpressure_timeout_ms: 60_000,
        acknowledge_on_resume: true,
        ..app::Args::parse_from(["sse_server"])
    }
}

#[derive(Debug)]
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn text(&self) -> &str {
        std::str::from_utf8(&self.body).unwrap()
    }
}

/// GET `path`, read the whole response (the server ends every stream here), de-chunk the body.
async fn get(port: u16, path: &str, last_event_id: Option<&str>) -> Reply {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n");
    if let Some(id) = last_event_id {
        request.push_str(&format!("Last-Event-ID: {id}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    timeout(LIMIT, stream.read_to_end(&mut raw))
        .await
        .expect("response did not end")
        .unwrap();
    parse_reply(&raw)
}

fn parse_reply(raw: &[u8]) -> Reply {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("header end");
    let head = std::str::from_utf8(&raw[..split]).unwrap();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .map(|l| {
            let (n, v) = l.split_once(':').unwrap();
            (n.trim().to_owned(), v.trim().to_owned())
        })
        .collect();
    let mut body = raw[split + 4..].to_vec();
    let chunked = headers
        .iter()
        .any(|(n, v)| n.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    if chunked {
        body = dechunk(&body);
    }
    Reply {
        status,
        headers,
        body,
    }
}

fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let eol = body
            .windows(2)
            .position(|w| w == b"\r\n")
            .expect("chunk size line");
        let size =
            usize::from_str_radix(std::str::from_utf8(&body[..eol]).unwrap().trim(), 16).unwrap();
        body = &body[eol + 2..];
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&body[..size]);
        body = &body[size + 2..];
    }
}

/// One parsed frame: (id, event, data), comments skipped.
#[derive(Debug, PartialEq, Eq)]
struct Frame {
    id: Option<String>,
    event: Option<String>,
    data: Option<String>,
}

fn parse_frames(body: &str) -> Vec<Frame> {
    body.split("\n\n")
        .filter(|f| !f.is_empty())
        .filter_map(|f| {
            let mut frame = Frame {
                id: None,
                event: None,
                data: None,
            };
            let mut any = false;
            for line in f.split('\n') {
                let (name, value) = line.split_once(':').unwrap_or((line, ""));
                let value = value.strip_prefix(' ').unwrap_or(value);
                match name {
                    "" => continue,
                    "id" => frame.id = Some(value.to_owned()),
                    "event" => frame.event = Some(value.to_owned()),
                    "data" => {
                        let data = frame.data.get_or_insert_with(String::new);
                        if !data.is_empty() {
                            data.push('\n');
                        }
                        data.push_str(value);
                    }
                    "retry" => {}
                    other => panic!("unexpected field {other}"),
                }
                any = true;
            }
            any.then_some(frame)
        })
        .collect()
}

fn seq_of(id: &str) -> u64 {
    id.rsplit('.').next().unwrap().parse().unwrap()
}

async fn finished(server: &mut Server) {
    timeout(LIMIT, &mut server.producer)
        .await
        .expect("producer finished")
        .unwrap();
}

#[tokio::test]
async fn resume_replays_exactly_the_suffix_then_ends() {
    let mut server = start(config()).await;
    finished(&mut server).await;

    let reply = get(server.port, "/events", Some("events.abc.5")).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("content-type"), Some("text/event-stream"));
    assert_eq!(
        reply.header("replay-floor"),
        Some("6"),
        "the resume acknowledged 1..=5"
    );
    assert_eq!(reply.header("replay-head"), Some("20"));
    assert_eq!(reply.header("replay-stream"), Some("events.abc"));
    let frames = parse_frames(reply.text());
    // Priming: the cursor, with empty data.
    assert_eq!(
        frames[0],
        Frame {
            id: Some("events.abc.5".into()),
            event: None,
            data: Some(String::new())
        }
    );
    let ids: Vec<u64> = frames[1..frames.len() - 1]
        .iter()
        .map(|f| seq_of(f.id.as_deref().unwrap()))
        .collect();
    assert_eq!(ids, (6..=20).collect::<Vec<_>>());
    for f in &frames[1..frames.len() - 1] {
        let n = seq_of(f.id.as_deref().unwrap());
        assert_eq!(f.data.as_deref(), Some(format!("{{\"n\":{n}}}").as_str()));
    }
    let last = frames.last().unwrap();
    assert_eq!(last.event.as_deref(), Some("end"));
    assert_eq!(
        last.id, None,
        "the terminal event must not move the client's cursor"
    );
    assert_eq!(last.data.as_deref(), Some(r#"{"reason":"completed"}"#));

    // The acknowledgement released 1..=5: a cursor below that is an explicit gap (416 + JSON).
    let gap = get(server.port, "/events", Some("events.abc.2")).await;
    assert_eq!(gap.status, 416);
    assert_eq!(gap.header("content-type"), Some("application/json"));
    assert_eq!(gap.header("replay-floor"), Some("6"));
    assert!(
        gap.text().starts_with(r#"{"error":"replay_gap","#)
            && gap
                .text()
                .contains(r#""requested":2,"floor":6,"head":20,"lost_from":3,"lost_through":5"#),
        "{}",
        gap.text()
    );

    // A cursor at floor - 1 is still replayable.
    let edge = get(server.port, "/events", Some("events.abc.5")).await;
    assert_eq!(edge.status, 200);
    assert_eq!(
        seq_of(parse_frames(edge.text())[1].id.as_deref().unwrap()),
        6
    );

    let m = server.app.stream.ring().metrics();
    assert_eq!(m.resumes_below_floor, 1);
}

#[tokio::test]
async fn unreplayable_cursors_get_explicit_errors() {
    let mut server = start(config()).await;
    finished(&mut server).await;
    let port = server.port;

    let ahead = get(port, "/events", Some("events.abc.21")).await;
    assert_eq!(ahead.status, 409);
    assert!(
        ahead.text().contains(r#""error":"cursor_ahead_of_head""#),
        "{}",
        ahead.text()
    );
    assert!(
        ahead
            .text()
            .contains(r#""requested":21,"floor":1,"head":20"#),
        "{}",
        ahead.text()
    );
    assert_eq!(ahead.header("replay-head"), Some("20"));

    let restarted = get(port, "/events", Some("events.abd.7")).await;
    assert_eq!(restarted.status, 404);
    assert!(restarted
        .text()
        .contains(r#""error":"stream_lost","reason":"unknown_epoch""#));

    let other = get(port, "/events", Some("other.abc.7")).await;
    assert_eq!(other.status, 404);
    assert!(other.text().contains(r#""reason":"unknown_stream""#));

    for bad in [
        "garbage",
        "events.abc.007",
        "events.ABC.7",
        "events.abc.99999999999999999999",
    ] {
        let reply = get(port, "/events", Some(bad)).await;
        assert_eq!(reply.status, 400, "{bad}");
        assert!(
            reply.text().contains(r#""error":"invalid_last_event_id""#),
            "{bad}: {}",
            reply.text()
        );
    }
    // No refusal released anything.
    assert_eq!(server.app.stream.ring().floor(), 1);
}

#[tokio::test]
async fn a_closed_stream_is_never_an_empty_200() {
    let mut server = start(config()).await;
    finished(&mut server).await;
    // Fresh subscription after the end, and a resume at the head: both end explicitly.
    for last in [None, Some("events.abc.20")] {
        let reply = get(server.port, "/events", last).await;
        assert_eq!(reply.status, 200);
        let frames = parse_frames(reply.text());
        assert_eq!(frames.len(), 2, "priming + end: {frames:?}");
        assert_eq!(frames[0].id.as_deref(), Some("events.abc.20"));
        assert_eq!(frames[1].event.as_deref(), Some("end"));
    }
}

#[tokio::test]
async fn backpressure_bound_closes_with_an_explicit_error_and_drops_nothing() {
    let mut cfg = config();
    cfg.capacity = 4;
    cfg.events = None;
    cfg.backpressure_timeout_ms = 200;
    let mut server = start(cfg).await;
    // Nobody reads, nothing is released: the producer fills the window and gives up.
    finished(&mut server).await;
    let m = server.app.stream.ring().metrics();
    assert_eq!((m.head, m.floor), (4, 1));
    assert!(m.producer_waits >= 1);

    let reply = get(server.port, "/events", Some("events.abc.0")).await;
    assert_eq!(reply.status, 200);
    let frames = parse_frames(reply.text());
    let ids: Vec<u64> = frames[1..5]
        .iter()
        .map(|f| seq_of(f.id.as_deref().unwrap()))
        .collect();
    assert_eq!(ids, [1, 2, 3, 4], "everything produced is replayed");
    let last = frames.last().unwrap();
    assert_eq!(last.event.as_deref(), Some("stream-error"));
    assert!(last
        .data
        .as_deref()
        .unwrap()
        .contains(r#""error":"backpressure_timeout""#));
}

#[tokio::test]
async fn live_reader_drains_through_a_small_window_without_gaps() {
    let mut cfg = config();
    cfg.capacity = 8;
    cfg.events = Some(200);
    cfg.eager = false;
    // Events are released 50 ms after this connection wrote them; the producer waits meanwhile.
    cfg.resumption_window_ms = 50;
    cfg.backpressure_timeout_ms = 10_000;
    let mut server = start(cfg).await;
    let reply = get(server.port, "/events", None).await;
    finished(&mut server).await;
    assert_eq!(reply.status, 200);
    let frames = parse_frames(reply.text());
    assert_eq!(frames[0].id.as_deref(), Some("events.abc.0"));
    let ids: Vec<u64> = frames[1..frames.len() - 1]
        .iter()
        .map(|f| seq_of(f.id.as_deref().unwrap()))
        .collect();
    assert_eq!(ids, (1..=200).collect::<Vec<_>>());
    assert_eq!(frames.last().unwrap().event.as_deref(), Some("end"));
    let m = server.app.stream.ring().metrics();
    assert!(
        m.producer_waits > 0,
        "an 8-slot window must have backpressured the producer"
    );
    assert!(
        server
            .app
            .stream
            .with_retention(|r| r.stats())
            .window_releases
            > 0
    );
}

#[tokio::test]
async fn page_and_metrics_are_served() {
    let mut server = start(config()).await;
    finished(&mut server).await;
    let page = get(server.port, "/", None).await;
    assert_eq!(page.status, 200);
    for needle in [
        "new EventSource(",
        "\"/events\"",
        "window.__replay",
        "id=\"received\"",
        "id=\"gaps\"",
    ] {
        assert!(page.text().contains(needle), "{needle}");
    }
    // Keep-alives are comments by default, which the page cannot hear: no watchdog interval.
    assert!(!page
        .text()
        .contains("<meta name=\"keep-alive-ms\" content="));
    let metrics = get(server.port, "/metrics", None).await;
    assert_eq!(metrics.status, 200);
    assert!(
        metrics
            .text()
            .contains("\nreplay_ring_events_enqueued_total{stream=\"events\"} 20\n"),
        "{}",
        metrics.text()
    );
    assert!(metrics
        .text()
        .contains("\nreplay_ring_resumes_below_floor_total{stream=\"events\"} 0\n"));
    // `serve`'s connection counters are rendered with the stream's (their values are
    // process-wide, shared with the other tests of this binary).
    for series in [
        "replay_ring_http_connections_refused_total ",
        "replay_ring_http_write_timeouts_total ",
        "replay_ring_http_idle_timeouts_total ",
        "replay_ring_http_closed_at_shutdown_total ",
        "replay_ring_http_header_read_timeouts_total ",
        "replay_ring_http_body_read_timeouts_total ",
        "replay_ring_http_unacknowledged_timeouts_total ",
    ] {
        assert!(
            metrics.text().contains(&format!("\n{series}")),
            "{series}: {}",
            metrics.text()
        );
    }
}

/// Reads a stream response until a complete frame with id `>= until` arrived, then hangs up.
/// Returns the ids of the complete event frames seen (priming excluded).
async fn read_then_hang_up(port: u16, until: u64) -> Vec<u64> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let request = "GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = timeout(LIMIT, stream.read(&mut buf))
            .await
            .expect("stream stalled")
            .unwrap();
        assert!(n > 0, "stream ended early");
        raw.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&raw);
        let Some(start) = text.find("\r\n\r\n") else {
            continue;
        };
        // Chunk framing lines are not SSE lines; drop them (frames never contain "\r\n").
        let body: String = text[start + 4..]
            .split("\r\n")
            .filter(|l| !l.chars().all(|c| c.is_ascii_hexdigit()) || l.is_empty())
            .collect();
        let complete = &body[..body.rfind("\n\n").map_or(0, |i| i + 2)];
        let ids: Vec<u64> = parse_frames(complete)
            .iter()
            .filter(|f| f.data.as_deref() != Some(""))
            .filter_map(|f| f.id.as_deref().map(seq_of))
            .collect();
        if ids.last().is_some_and(|&id| id >= until) {
            return ids;
        }
    }
}

#[tokio::test]
async fn disconnect_then_resume_delivers_every_event_exactly_once() {
    use replay_ring_sse::client::ContinuityVerifier;
    let mut cfg = config();
    cfg.capacity = 128;
    cfg.events = Some(100);
    cfg.eager = false;
    cfg.rate = 2000.0;
    cfg.resumption_window_ms = 5_000;
    let mut server = start(cfg).await;

    let first = read_then_hang_up(server.port, 10).await;
    let mut verifier = ContinuityVerifier::with_cursor(0);
    for &id in &first {
        verifier.on_event(id).unwrap();
    }
    let cursor = verifier.cursor().unwrap();
    let reply = get(
        server.port,
        "/events",
        Some(&format!("events.abc.{cursor}")),
    )
    .await;
    finished(&mut server).await;
    assert_eq!(reply.status, 200);
    let frames = parse_frames(reply.text());
    verifier.on_reconnect();
    verifier
        .on_priming(seq_of(frames[0].id.as_deref().unwrap()))
        .unwrap();
    let mut all = first.clone();
    for f in &frames[1..frames.len() - 1] {
        let id = seq_of(f.id.as_deref().unwrap());
        verifier.on_event(id).unwrap();
        all.push(id);
    }
    assert_eq!(all, (1..=100).collect::<Vec<_>>());
    assert_eq!(frames.last().unwrap().event.as_deref(), Some("end"));
}

#[test]
fn the_command_line_refuses_what_the_server_could_not_use() {
    let parse = |args: &[&str]| app::Args::try_parse_from([&["sse_server"][..], args].concat());
    let epoch = parse(&["--epoch", "2a"]).unwrap().epoch;
    assert_eq!(epoch, Some(Epoch::new(0x2a)));
    // Only the spelling ids carry: a client would quote back `2a`, never `2A` or `02a`.
    for bad in ["2A", "02a", "+2a", "", "10000000000000000"] {
        let err = parse(&["--epoch", bad]).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::ValueValidation, "{bad}");
    }
    assert_eq!(parse(&["--rate", "0"]).unwrap().rate, 0.0);
    for bad in ["-1", "NaN", "inf", "1e10"] {
        let err = parse(&[&format!("--rate={bad}")]).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::ValueValidation, "{bad}");
    }
    // A keep-alive every few milliseconds would be a stream of its own: refused, by the
    // stream's own rule, naming the flag; 0 (off) and the minimum are taken.
    for bad in ["1", "9"] {
        let err = parse(&["--keep-alive-ms", bad]).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::ValueValidation, "{bad}");
        let text = err.to_string();
        assert!(
            text.contains("--keep-alive-ms") && text.contains("minimum"),
            "{text}"
        );
    }
    for good in ["0", "10"] {
        let args = parse(&["--keep-alive-ms", good]).unwrap();
        assert_eq!(args.sse_config().check(), Ok(()), "{good}");
    }
}

/// With `--keep-alive-event` the stream sends keep-alives as events and the page is told their
/// interval (its watchdog's clock); `tests/keep_alive.rs` checks the frames themselves.
#[tokio::test]
async fn with_keep_alive_events_the_page_gets_the_interval() {
    let server = start(app::Args {
        events: None,
        keep_alive_ms: 50,
        keep_alive_event: true,
        eager: false,
        ..config()
    })
    .await;
    let page = get(server.port, "/", None).await;
    assert!(
        page.text()
            .contains("<meta name=\"keep-alive-ms\" content=\"50\">"),
        "{}",
        &page.text()[..400]
    );
    assert_eq!(
        server.app.stream.config().keep_alive,
        std::time::Duration::from_millis(50)
    );
    assert!(server.app.stream.config().keep_alive_event);
}
