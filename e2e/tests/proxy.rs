//! The chaos proxy against tiny in-test upstreams: pass-through, frame counting, cuts, throttling,
//! holding and logging.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::mock_sse::{self, MockOptions};
use common::{get, raw_request, raw_upstream, read_response, sse_ids};
use replay_ring_e2e::http::{encode_chunk, Buffered, LAST_CHUNK};
use replay_ring_e2e::{ChaosProxy, Outcome, ProxyConfig};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const WAIT: Duration = Duration::from_secs(10);

fn cfg(upstream: SocketAddr) -> ProxyConfig {
    ProxyConfig::new(upstream)
}

/// A chunked `200 text/event-stream` reply whose body is `pieces`, one chunk each.
fn event_stream_reply(pieces: &[&[u8]]) -> Vec<Vec<u8>> {
    let head =
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
    let mut parts = vec![head.to_vec()];
    parts.extend(pieces.iter().map(|p| encode_chunk(p)));
    parts.push(LAST_CHUNK.to_vec());
    parts
}

#[tokio::test]
async fn post_bodies_pass_through_unchanged_and_are_logged() {
    let (up, got) = raw_upstream(|_, body| {
        let reply = format!("echo {}", body.len());
        vec![format!(
            "HTTP/1.1 201 Created\r\ncontent-length: {}\r\n\r\n{reply}",
            reply.len()
        )
        .into_bytes()]
    })
    .await;
    let proxy = ChaosProxy::start(cfg(up)).await.unwrap();

    // Binary body with CR/LF and NULs, by Content-Length.
    let body: Vec<u8> = (0..=255u8).cycle().take(100_000).collect();
    let mut req = format!(
        "POST /mcp HTTP/1.1\r\nHost: x\r\nMcp-Session-Id: abc\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(&body);
    let resp = raw_request(proxy.addr(), &req).await.unwrap();
    assert_eq!(resp.status, 201);
    assert_eq!(resp.body, b"echo 100000");

    // Chunked request body: forwarded as the same raw chunked bytes.
    let mut chunked =
        b"POST /mcp2 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    let raw_body = [
        encode_chunk(b"{\"jsonrpc\":"),
        encode_chunk(b"\"2.0\"}"),
        LAST_CHUNK.to_vec(),
    ]
    .concat();
    chunked.extend_from_slice(&raw_body);
    let resp = raw_request(proxy.addr(), &chunked).await.unwrap();
    assert_eq!(resp.status, 201);

    let got = got.lock().unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].1, body, "content-length body unchanged");
    assert_eq!(got[0].0.header("mcp-session-id"), Some("abc"));
    assert_eq!(got[1].1, raw_body, "chunked body bytes unchanged");

    let log = proxy.requests();
    assert_eq!(log.len(), 2);
    assert_eq!(
        (log[0].method.as_str(), log[0].path.as_str()),
        ("POST", "/mcp")
    );
    assert_eq!(log[0].status, Some(201));
    assert_eq!(log[0].status_line.as_deref(), Some("HTTP/1.1 201 Created"));
    assert_eq!(log[0].request_body, body);
    assert_eq!(log[0].outcome, Outcome::Complete);
    assert!(!log[0].event_stream);
    assert_eq!(log[1].path, "/mcp2");
}

#[tokio::test]
async fn counts_frames_split_across_chunks_and_ignores_keepalives() {
    // Frames deliberately split mid-line and several per chunk, with CRLF, comment frames and a
    // keep-alive event.
    let body: &[u8] = b": ka\n\nid: 1\ndata: a\n\nid: 2\r\ndata: b\r\n\r\n: ka\n\n\
        event: keep-alive\ndata:\n\nid: 3\ndata: c\ndata: d\n\n";
    let (up, _) = raw_upstream(move |_, _| {
        event_stream_reply(&[&body[..3], &body[3..20], &body[20..21], &body[21..]])
    })
    .await;
    let proxy = ChaosProxy::start(cfg(up)).await.unwrap();
    let resp = raw_request(proxy.addr(), &get("/events", Some("0")))
        .await
        .unwrap();
    assert!(resp.complete);
    assert_eq!(resp.body, body, "payload unchanged through de-/re-chunking");
    let log = proxy.requests();
    assert_eq!(log[0].frames, 3);
    assert_eq!(log[0].keep_alive_frames, 3);
    assert_eq!(log[0].frame_ids, ["1", "2", "3"]);
    assert_eq!(log[0].last_event_id.as_deref(), Some("0"));
    assert!(log[0].event_stream);
    assert_eq!(log[0].outcome, Outcome::Complete);
}

#[tokio::test]
async fn a_cut_after_k_frames_counts_events_not_keep_alive_events() {
    let body: &[u8] = b"id: 1\ndata: a\n\nevent: keep-alive\ndata:\n\n: ka\n\n\
        event: keep-alive\ndata:\n\nid: 2\ndata: b\n\nid: 3\ndata: c\n\n";
    let (up, _) = raw_upstream(move |_, _| event_stream_reply(&[body])).await;
    let proxy = ChaosProxy::start(ProxyConfig {
        cut_after_frames: Some(2),
        ..cfg(up)
    })
    .await
    .unwrap();
    let resp = raw_request(proxy.addr(), &get("/events", None))
        .await
        .unwrap();
    assert!(!resp.complete, "the stream was cut");
    let through_2 = body.len() - b"id: 3\ndata: c\n\n".len();
    assert_eq!(resp.body, &body[..through_2], "cut after id 2, not before");
    let log = proxy.requests();
    assert_eq!(log[0].outcome, Outcome::CutAfterFrames(2));
    assert_eq!((log[0].frames, log[0].keep_alive_frames), (2, 3));
}

#[tokio::test]
async fn cuts_every_k_frames_and_client_resumes_with_last_event_id() {
    let mock = mock_sse::start(MockOptions {
        events: 20,
        interval: Duration::ZERO,
    })
    .await;
    let proxy = ChaosProxy::start(ProxyConfig {
        cut_after_frames: Some(3),
        ..cfg(mock)
    })
    .await
    .unwrap();

    let mut seen: Vec<u64> = Vec::new();
    let mut last: Option<String> = None;
    for _ in 0..20 {
        let resp = raw_request(proxy.addr(), &get("/events", last.as_deref()))
            .await
            .unwrap();
        let ids = sse_ids(&resp.body);
        seen.extend(ids.iter().map(|i| i.parse::<u64>().unwrap()));
        if resp.complete {
            break;
        }
        last = ids.last().cloned().or(last);
    }
    assert_eq!(seen, (1..=20).collect::<Vec<_>>());

    let log = proxy.requests();
    // 20 events in 3s: 6 cut streams, one with 19, 20 and `end` (3 frames: also cut), then `end`.
    let cuts = log.iter().filter(|l| l.outcome.is_cut()).count();
    assert_eq!(cuts, 7);
    for l in log.iter().filter(|l| l.outcome.is_cut()) {
        assert_eq!(l.outcome, Outcome::CutAfterFrames(3));
        assert_eq!(l.frames, 3, "cut exactly after 3 event frames");
    }
    assert_eq!(log.last().unwrap().outcome, Outcome::Complete);
    assert_eq!(log[0].last_event_id, None);
    for w in log.windows(2) {
        assert_eq!(
            w[1].last_event_id.as_ref(),
            w[0].frame_ids.last(),
            "each reconnect names the last id the proxy forwarded"
        );
    }
    assert_eq!(proxy.counters().cuts_after_frames, cuts);
}

#[tokio::test]
async fn cut_threshold_changes_at_runtime_on_an_open_stream() {
    let mock = mock_sse::start(MockOptions {
        events: 1000,
        interval: Duration::from_millis(2),
    })
    .await;
    let proxy = ChaosProxy::start(cfg(mock)).await.unwrap();
    let addr = proxy.addr();
    let client =
        tokio::spawn(async move { raw_request(addr, &get("/events", None)).await.unwrap() });
    proxy
        .wait_for(WAIT, |l| l.first().is_some_and(|r| r.frames >= 2))
        .await
        .unwrap();
    proxy.set_cut_after_frames(Some(10));
    let resp = client.await.unwrap();
    assert!(
        !resp.complete,
        "client sees a truncated body, not a finished one"
    );
    assert_eq!(sse_ids(&resp.body).len(), 10);
    assert_eq!(proxy.requests()[0].outcome, Outcome::CutAfterFrames(10));
}

#[tokio::test]
async fn cuts_on_schedule() {
    let mock = mock_sse::start(MockOptions {
        events: 1,
        interval: Duration::ZERO,
    })
    .await;
    let proxy = ChaosProxy::start(ProxyConfig {
        cut_after: Some(Duration::from_millis(150)),
        ..cfg(mock)
    })
    .await
    .unwrap();
    let start = Instant::now();
    let resp = raw_request(proxy.addr(), &get("/forever", None))
        .await
        .unwrap();
    assert!(start.elapsed() >= Duration::from_millis(150));
    assert!(!resp.complete);
    let log = proxy.requests();
    assert_eq!(log[0].outcome, Outcome::CutOnSchedule);
    assert!(log[0].frames > 0, "events flowed before the cut");
    assert!(
        log[0].keep_alive_frames > 0,
        "keep-alives are counted apart"
    );
    assert_eq!(sse_ids(&resp.body).len(), log[0].frames);
}

#[tokio::test]
async fn sse_answer_to_post_is_cuttable() {
    let mock = mock_sse::start(MockOptions {
        events: 1,
        interval: Duration::ZERO,
    })
    .await;
    let proxy = ChaosProxy::start(ProxyConfig {
        cut_after_frames: Some(2),
        ..cfg(mock)
    })
    .await
    .unwrap();
    let body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#;
    let mut req = format!(
        "POST /rpc HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(body);
    let resp = raw_request(proxy.addr(), &req).await.unwrap();
    assert!(!resp.complete);
    assert_eq!(sse_ids(&resp.body), ["0", "1"]);
    assert!(String::from_utf8_lossy(&resp.body).contains(&format!("len={}", body.len())));
    let log = proxy.requests();
    assert_eq!(log[0].outcome, Outcome::CutAfterFrames(2));
    assert_eq!(log[0].request_body, body);
}

#[tokio::test]
async fn throttle_limits_rate_and_pause_backs_up_into_the_upstream() {
    // Larger than what loopback socket buffers absorb (the sender autotunes SO_SNDBUF to ~4 MiB).
    const TOTAL: usize = 16 << 20;
    let written = Arc::new(AtomicU64::new(0));
    let w2 = written.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut r = Buffered::new(&mut s);
        r.read_head().await.unwrap();
        drop(r);
        s.write_all(format!("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {TOTAL}\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let block = vec![b'x'; 16 * 1024];
        for _ in 0..TOTAL / block.len() {
            s.write_all(&block).await.unwrap();
            // Relaxed: progress counter read by the test only; no data is published with it.
            w2.fetch_add(block.len() as u64, Ordering::Relaxed);
        }
    });
    let proxy = ChaosProxy::start(ProxyConfig {
        throttle_bytes_per_sec: Some(0),
        upstream_recv_buffer: Some(4096),
        ..cfg(up)
    })
    .await
    .unwrap();
    let mut client = Buffered::new(TcpStream::connect(proxy.addr()).await.unwrap());
    client.inner.write_all(&get("/big", None)).await.unwrap();
    proxy
        .wait_for(WAIT, |l| l.first().is_some_and(|r| r.status == Some(200)))
        .await
        .unwrap();
    // Paused: the upstream can only fill socket buffers, never finish. This is an observation
    // window for a negative check (a broken pause would let all 16 MiB through), not a sync point.
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Relaxed: see the writer.
    let stalled = written.load(Ordering::Relaxed);
    assert!(
        stalled < TOTAL as u64 / 2,
        "upstream wrote {stalled} bytes while paused"
    );
    assert_eq!(proxy.requests()[0].body_bytes, 0);

    // 400 KB/s for the first ~200 KB: must take at least ~0.4 s.
    proxy.set_throttle(Some(400_000));
    let start = Instant::now();
    proxy
        .wait_for(WAIT, |l| l[0].body_bytes >= 200_000)
        .await
        .unwrap();
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(400),
        "throttled 200 KB in {took:?}"
    );

    proxy.set_throttle(None);
    let resp = tokio::time::timeout(WAIT, read_response(&mut client))
        .await
        .unwrap()
        .unwrap();
    assert!(resp.complete);
    assert_eq!(resp.body.len(), TOTAL);
}

#[tokio::test]
async fn held_requests_are_logged_but_not_forwarded_until_released() {
    let (up, got) = raw_upstream(|_, _| vec![b"HTTP/1.1 204 No Content\r\n\r\n".to_vec()]).await;
    let proxy = ChaosProxy::start(ProxyConfig {
        hold: true,
        ..cfg(up)
    })
    .await
    .unwrap();
    let addr = proxy.addr();
    let client = tokio::spawn(async move {
        raw_request(addr, &get("/events", Some("41")))
            .await
            .unwrap()
    });
    let log = proxy.wait_for(WAIT, |l| l.len() == 1).await.unwrap();
    assert_eq!(log[0].outcome, Outcome::Pending);
    assert_eq!(log[0].last_event_id.as_deref(), Some("41"));
    assert!(
        got.lock().unwrap().is_empty(),
        "held request reached upstream"
    );
    proxy.set_hold(false);
    let resp = client.await.unwrap();
    assert_eq!(resp.status, 204);
    assert_eq!(got.lock().unwrap().len(), 1);
    assert_eq!(proxy.requests()[0].outcome, Outcome::Complete);
}

#[tokio::test]
async fn drain_mode_reads_the_rest_after_a_cut() {
    let mock = mock_sse::start(MockOptions {
        events: 10,
        interval: Duration::ZERO,
    })
    .await;
    let proxy = ChaosProxy::start(ProxyConfig {
        cut_after_frames: Some(3),
        drain_upstream_after_cut: true,
        ..cfg(mock)
    })
    .await
    .unwrap();
    let resp = raw_request(proxy.addr(), &get("/events", None))
        .await
        .unwrap();
    assert_eq!(sse_ids(&resp.body), ["1", "2", "3"]);
    // 7 more events plus the `end` event were read and discarded.
    let log = proxy
        .wait_for(WAIT, |l| l[0].outcome != Outcome::Streaming)
        .await
        .unwrap();
    assert_eq!(log[0].outcome, Outcome::CutAfterFrames(3));
    assert_eq!(log[0].dropped_frames, 8);
}

#[tokio::test]
async fn upstream_down_gives_502_and_non_loopback_is_refused() {
    let unused = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let proxy = ChaosProxy::start(cfg(unused)).await.unwrap();
    let resp = raw_request(proxy.addr(), &get("/", None)).await.unwrap();
    assert_eq!(resp.status, 502);
    assert!(matches!(
        proxy.requests()[0].outcome,
        Outcome::UpstreamError(_)
    ));

    let far: SocketAddr = "10.1.2.3:80".parse().unwrap();
    assert!(ChaosProxy::start(cfg(far)).await.is_err());
}

#[tokio::test]
async fn keep_alive_connection_carries_several_requests() {
    let (up, got) = raw_upstream(|h, _| {
        let body = h.first_line.clone();
        vec![format!(
            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()]
    })
    .await;
    let proxy = ChaosProxy::start(cfg(up)).await.unwrap();
    let mut c = Buffered::new(TcpStream::connect(proxy.addr()).await.unwrap());
    for i in 0..3 {
        c.inner
            .write_all(&get(&format!("/r{i}"), None))
            .await
            .unwrap();
        let resp = read_response(&mut c).await.unwrap();
        assert_eq!(resp.body, format!("GET /r{i} HTTP/1.1").as_bytes());
    }
    assert_eq!(got.lock().unwrap().len(), 3);
    let c = proxy.counters();
    assert_eq!((c.connections, c.requests), (1, 3));
}

#[tokio::test]
async fn pages_load_while_event_streams_are_paused() {
    let mock = mock_sse::start(MockOptions {
        events: 5,
        interval: Duration::ZERO,
    })
    .await;
    let proxy = ChaosProxy::start(ProxyConfig {
        throttle_bytes_per_sec: Some(0),
        ..cfg(mock)
    })
    .await
    .unwrap();
    let addr = proxy.addr();
    let stream =
        tokio::spawn(async move { raw_request(addr, &get("/events", None)).await.unwrap() });
    proxy
        .wait_for(WAIT, |l| {
            l.iter().any(|r| r.event_stream && r.status == Some(200))
        })
        .await
        .unwrap();
    // The page is not an event stream: it is never throttled.
    let page = tokio::time::timeout(WAIT, raw_request(addr, &get("/", None)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(page.status, 200);
    assert!(String::from_utf8_lossy(&page.body).contains("__replay"));
    let events = proxy
        .requests()
        .into_iter()
        .find(|r| r.event_stream)
        .unwrap();
    assert_eq!(events.body_bytes, 0, "paused stream forwarded nothing");
    proxy.set_throttle(None);
    let resp = stream.await.unwrap();
    assert!(resp.complete);
    assert_eq!(sse_ids(&resp.body), ["1", "2", "3", "4", "5"]);
}
