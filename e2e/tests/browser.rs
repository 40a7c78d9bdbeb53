//! Headless Chromium end to end: the browser's own `EventSource` follows the example server's page
//! through the chaos proxy. Needs `scripts/e2e-setup` (chromium + playwright-core), hence ignored in
//! a plain `cargo test`; `cargo test -p replay-ring-e2e -- --include-ignored` runs them.
//! Screenshots, page/server logs land in `e2e/artifacts/`.

mod common;
#[path = "../../redis/tests/common/mod.rs"]
mod redis_support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::mock_sse::{self, MockOptions};
use redis_support::RedisServer;
use replay_ring_e2e::browser::{artifacts_dir, seq_of_str, Browser, PageState};
use replay_ring_e2e::server::{DemoServer, Metrics, ServerOptions};
use replay_ring_e2e::{ChaosProxy, Outcome, ProxyConfig, ProxyHandle, RequestLog};

const IGNORE: &str = "needs chromium; run by scripts/test-all";
/// Upper bound for any one wait; the tests finish far sooner unless something is broken.
const LONG: Duration = Duration::from_secs(120);

/// One browser test at a time: they share two cores with chromium and the server.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn launch(name: &str) -> Browser {
    let log = artifacts_dir().join(format!("{name}-browser.log"));
    Browser::launch(&log)
        .await
        .unwrap_or_else(|e| panic!("launch chromium ({e}); did scripts/e2e-setup run?"))
}

async fn spawn_server(name: &str, opts: ServerOptions) -> DemoServer {
    let log = artifacts_dir().join(format!("{name}-server.log"));
    DemoServer::spawn(&opts, &log)
        .await
        .unwrap_or_else(|e| panic!("start the demo sse_server: {e}"))
}

/// The example's defaults, except that the page reconnects 50 ms after a cut.
fn fast_retry() -> ServerOptions {
    ServerOptions {
        extra_args: fast_retry_and(&[]),
        ..ServerOptions::default()
    }
}

/// The server arguments of [`fast_retry`] followed by `more`.
fn fast_retry_and(more: &[&str]) -> Vec<String> {
    ["--retry-ms", "50"]
        .iter()
        .chain(more)
        .map(|a| a.to_string())
        .collect()
}

/// Starts the chaos proxy in front of `upstream` (`config` adjusts its defaults), launches chromium
/// and opens the page through the proxy.
async fn open_through_proxy(
    name: &str,
    upstream: SocketAddr,
    config: impl FnOnce(ProxyConfig) -> ProxyConfig,
) -> (ProxyHandle, Browser) {
    let proxy = ChaosProxy::start(config(ProxyConfig::new(upstream)))
        .await
        .unwrap();
    let mut b = launch(name).await;
    b.goto(&format!("{}/", proxy.url())).await.unwrap();
    (proxy, b)
}

/// The example server with `opts`, the chaos proxy in front of it, and chromium on its page.
async fn start_all(
    name: &str,
    opts: ServerOptions,
    proxy: impl FnOnce(ProxyConfig) -> ProxyConfig,
) -> (DemoServer, ProxyHandle, Browser) {
    let server = spawn_server(name, opts).await;
    let (proxy, b) = open_through_proxy(name, server.addr(), proxy).await;
    (server, proxy, b)
}

async fn metrics(server: &DemoServer) -> Metrics {
    server.metrics().await.expect("GET /metrics")
}

fn metric(m: &Metrics, name: &str) -> f64 {
    m.get(name)
        .unwrap_or_else(|| panic!("metric {name} missing from /metrics"))
}

/// Polls `/metrics` (directly, not through the proxy) until `pred` holds.
async fn wait_metrics(server: &DemoServer, what: &str, pred: impl Fn(&Metrics) -> bool) -> Metrics {
    let deadline = Instant::now() + LONG;
    loop {
        let m = metrics(server).await;
        if pred(&m) {
            return m;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {m:?}"
        );
        // Polling interval under a deadline; the server offers no push channel for metrics.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Who else saw a browser test's exchange: what a timed-out wait reports besides the page state,
/// so that a stall says where it stopped (server, proxy or browser).
struct Witnesses<'a> {
    /// The test's artifact name (its browser log is `<name>-browser.log`).
    name: &'a str,
    proxy: &'a ProxyHandle,
    server: Option<&'a DemoServer>,
}

impl<'a> Witnesses<'a> {
    /// The usual set: the test's demo server and the proxy in front of it.
    fn of_server(name: &'a str, proxy: &'a ProxyHandle, server: &'a DemoServer) -> Self {
        Witnesses {
            name,
            proxy,
            server: Some(server),
        }
    }

    /// The proxy's log of every request, the server's counters and the end of the browser's log.
    async fn report(&self) -> String {
        let mut out = format!("proxy:\n{}", summary(&self.proxy.requests()));
        if let Some(server) = self.server {
            match tokio::time::timeout(Duration::from_secs(5), server.metrics()).await {
                Ok(Ok(m)) => {
                    let mut pairs: Vec<_> = m.0.iter().collect();
                    pairs.sort_by(|a, b| a.0.cmp(b.0));
                    out += &format!("server /metrics: {pairs:?}\n");
                }
                Ok(Err(e)) => out += &format!("server /metrics failed: {e}\n"),
                Err(_) => out += "server /metrics did not answer within 5 s\n",
            }
        }
        let path = artifacts_dir().join(format!("{}-browser.log", self.name));
        let browser_log = std::fs::read_to_string(&path).unwrap_or_default();
        let lines: Vec<_> = browser_log.lines().collect();
        out += &format!(
            "browser log (last 30 lines):\n{}\n",
            lines[lines.len().saturating_sub(30)..].join("\n")
        );
        out
    }
}

async fn wait_page(
    b: &mut Browser,
    seen_by: &Witnesses<'_>,
    what: &str,
    pred: impl FnMut(&PageState) -> bool,
) -> PageState {
    match b.wait_for_state(LONG, pred).await.expect("browser driver") {
        Ok(s) => s,
        Err(s) => panic!(
            "timed out waiting for {what}: ids={} (last {:?}) reconnects={} gaps={} dups={} error={:?} text={:?}\n{}",
            s.ids.len(),
            s.ids.last(),
            s.reconnects,
            s.gaps,
            s.duplicates,
            s.error,
            s.text,
            seen_by.report().await
        ),
    }
}

/// [`wait_page`], then a screenshot of the state it waited for.
async fn wait_and_shoot(
    b: &mut Browser,
    seen_by: &Witnesses<'_>,
    what: &str,
    pred: impl FnMut(&PageState) -> bool,
) -> PageState {
    let s = wait_page(b, seen_by, what, pred).await;
    shot(b, seen_by.name).await;
    s
}

/// The page got ids `1..=n` exactly once, in order, with no error, gap or duplicate.
fn assert_exactly_once(s: &PageState, n: u64, log: &[RequestLog]) {
    assert_eq!(s.error, None, "{}", summary(log));
    assert_eq!(s.ids, (1..=n).collect::<Vec<_>>(), "exactly once, in order");
    assert_eq!((s.gaps, s.duplicates), (0, 0));
}

fn event_requests(log: &[RequestLog]) -> Vec<&RequestLog> {
    log.iter()
        .filter(|l| l.path.starts_with("/events"))
        .collect()
}

fn summary(log: &[RequestLog]) -> String {
    log.iter()
        .map(|l| {
            format!(
                "#{} {} {} lei={:?} -> {:?} frames={} (last id {:?}) keep-alives={} bytes={} dropped={} {:?}\n",
                l.seq,
                l.method,
                l.path,
                l.last_event_id,
                l.status,
                l.frames,
                l.frame_ids.last(),
                l.keep_alive_frames,
                l.body_bytes,
                l.dropped_frames,
                l.outcome
            )
        })
        .collect()
}

/// Every reconnect carries the browser's own cursor: an id it was sent on the previous stream (or
/// the cursor that stream resumed from). Chromium may drop the bytes that arrived together with the
/// truncation (`ERR_INCOMPLETE_CHUNKED_ENCODING`), so the cursor can lag the proxy's last forwarded
/// frame; replay then covers the difference, which the exactly-once checks verify.
fn assert_reconnects_carry_a_delivered_id(ev: &[&RequestLog], log: &[RequestLog]) {
    for w in ev.windows(2) {
        let sent = w[1]
            .last_event_id
            .as_deref()
            .expect("reconnect carries Last-Event-ID");
        let known = w[0].frame_ids.iter().any(|id| id == sent)
            || w[0].last_event_id.as_deref() == Some(sent);
        assert!(
            known,
            "Last-Event-ID {sent} was never sent to the browser:\n{}",
            summary(log)
        );
    }
}

async fn shot(b: &mut Browser, name: &str) {
    let path = artifacts_dir().join(format!("{name}.png"));
    b.screenshot(&path).await.expect("screenshot");
    assert!(std::fs::metadata(&path)
        .map(|m| m.len() > 0)
        .unwrap_or(false));
}

/// The driver, the proxy and a page built like the example's, against the in-test mock server:
/// keeps the harness itself honest independently of the example.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs chromium; run by scripts/test-all"]
async fn harness_mock_page_survives_cuts() {
    let _ = IGNORE;
    let _serial = SERIAL.lock().await;
    let mock = mock_sse::start(MockOptions {
        events: 60,
        interval: Duration::from_millis(2),
    })
    .await;
    let (proxy, mut b) = open_through_proxy("mock", mock, |c| ProxyConfig {
        cut_after_frames: Some(7),
        ..c
    })
    .await;
    let s = wait_page(
        &mut b,
        &Witnesses {
            name: "mock",
            proxy: &proxy,
            server: None,
        },
        "mock stream done",
        |s| s.done,
    )
    .await;
    assert_eq!(s.ids, (1..=60).collect::<Vec<_>>());
    assert_eq!((s.gaps, s.duplicates), (0, 0));
    assert!(s.reconnects >= 5, "{} reconnects", s.reconnects);
    let log = proxy.requests();
    let ev = event_requests(&log);
    assert!(ev.len() >= 6, "{}", summary(&log));
    assert_reconnects_carry_a_delivered_id(&ev, &log);
    shot(&mut b, "mock").await;
    b.quit().await.unwrap();
}

/// (a) ids 1..N arrive exactly once and in order across many forced disconnects; every reconnect
/// carries the browser's own `Last-Event-ID`, naming the last event it was given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs chromium; run by scripts/test-all"]
async fn exactly_once_in_order_across_forced_disconnects() {
    const N: u64 = 300;
    const K: usize = 25;
    let _serial = SERIAL.lock().await;
    let name = "a-exactly-once";
    let (server, proxy, mut b) = start_all(
        name,
        ServerOptions {
            capacity: Some(1024),
            rate: Some(400),
            events: Some(N),
            ..fast_retry()
        },
        |c| ProxyConfig {
            cut_after_frames: Some(K),
            ..c
        },
    )
    .await;
    let seen_by = Witnesses::of_server(name, &proxy, &server);
    let s = wait_and_shoot(&mut b, &seen_by, "all events and `end`", |s| s.done).await;
    let log = proxy.requests();

    assert_exactly_once(&s, N, &log);
    assert_eq!(s.text_of("received"), N.to_string());
    assert_eq!(s.text_of("status"), "done");

    let ev = event_requests(&log);
    let cuts = ev.iter().filter(|l| l.outcome.is_cut()).count();
    assert!(
        cuts >= 5,
        "only {cuts} forced disconnects:\n{}",
        summary(&log)
    );
    assert!(
        s.reconnects >= 5,
        "page counted {} reconnects",
        s.reconnects
    );
    assert_eq!(
        ev[0].last_event_id, None,
        "first request is a fresh subscribe"
    );
    for w in ev.windows(2) {
        assert!(
            w[0].outcome.is_cut(),
            "only cut streams are followed by a reconnect:\n{}",
            summary(&log)
        );
        assert_eq!(w[1].status, Some(200));
    }
    assert_reconnects_carry_a_delivered_id(&ev, &log);
    // The wire ids are `<stream>.<epoch>.<seq>`; the final reconnect resumed within the stream.
    let last_sent = ev.last().unwrap().last_event_id.as_deref().unwrap();
    assert!(seq_of_str(last_sent).unwrap() <= N);
    b.quit().await.unwrap();
}

/// (a, on a schedule) The same guarantee when the proxy cuts each stream 150 ms after it opened,
/// wherever that falls (mid-frame included), rather than after whole frames.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs chromium; run by scripts/test-all"]
async fn exactly_once_across_scheduled_cuts() {
    const N: u64 = 300;
    let _serial = SERIAL.lock().await;
    let name = "a2-scheduled-cuts";
    let (server, proxy, mut b) = start_all(
        name,
        ServerOptions {
            rate: Some(200),
            events: Some(N),
            ..fast_retry()
        },
        |c| ProxyConfig {
            cut_after: Some(Duration::from_millis(150)),
            ..c
        },
    )
    .await;
    let seen_by = Witnesses::of_server(name, &proxy, &server);
    let s = wait_and_shoot(&mut b, &seen_by, "all events and `end`", |s| s.done).await;
    let log = proxy.requests();
    assert_exactly_once(&s, N, &log);
    let ev = event_requests(&log);
    let cuts = ev
        .iter()
        .filter(|l| l.outcome == Outcome::CutOnSchedule)
        .count();
    assert!(cuts >= 5, "only {cuts} scheduled cuts:\n{}", summary(&log));
    assert!(s.reconnects >= 5);
    assert_reconnects_carry_a_delivered_id(&ev, &log);
    b.quit().await.unwrap();
}

/// (b) A client held away while the server releases its window resumes below the floor: the server
/// refuses explicitly (416 `replay_gap`) and the page shows a gap and the error — no silent skip.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs chromium; run by scripts/test-all"]
async fn resume_below_floor_is_an_explicit_gap() {
    let _serial = SERIAL.lock().await;
    let name = "b-below-floor";
    // Drain mode: after the cut the proxy keeps reading, so the server's writes succeed and those
    // events age out of the window — the network, not the server, lost them.
    let (server, proxy, mut b) = start_all(
        name,
        ServerOptions {
            capacity: Some(64),
            rate: Some(200),
            events: Some(2000),
            resumption_window_ms: Some(50),
            ..fast_retry()
        },
        |c| ProxyConfig {
            drain_upstream_after_cut: true,
            ..c
        },
    )
    .await;
    let seen_by = Witnesses::of_server(name, &proxy, &server);
    wait_page(&mut b, &seen_by, "first events", |s| s.ids.len() >= 20).await;

    proxy.set_hold(true);
    proxy.set_cut_after_frames(Some(1));
    let log = wait_held(&proxy).await;
    let held = log.last().unwrap();
    let cursor = seq_of_str(
        held.last_event_id
            .as_deref()
            .expect("held reconnect has Last-Event-ID"),
    )
    .unwrap();
    let m = wait_metrics(&server, "floor above the held cursor", |m| {
        m.get("floor").is_some_and(|f| f > (cursor + 1) as f64)
    })
    .await;
    let floor = metric(&m, "floor") as u64;
    proxy.set_cut_after_frames(None);
    proxy.set_hold(false);

    let s = wait_and_shoot(&mut b, &seen_by, "explicit error", |s| {
        s.error.is_some() && s.text_of("status") == "failed"
    })
    .await;
    let log = proxy.requests();
    let err = &s.raw["error"];
    assert_eq!(
        err["error"],
        "replay_gap",
        "page error {err}\n{}",
        summary(&log)
    );
    assert_eq!(err["status"], 416);
    assert_eq!(err["requested"].as_u64(), Some(cursor));
    assert!(err["floor"].as_u64().unwrap() >= floor);
    assert!(s.gaps >= 1, "the page counts it as a gap");
    assert!(s.text_of("error").contains("replay_gap"));
    // Nothing after the cursor was shown: the page never skipped silently to a later id.
    assert_eq!(s.ids, (1..=cursor).collect::<Vec<_>>());

    // The wire: the browser resumed with its own cursor and got 416, never a 200 that skips ids.
    let resumed: Vec<_> = event_requests(&log)
        .into_iter()
        .filter(|l| l.last_event_id.as_deref() == held.last_event_id.as_deref())
        .collect();
    assert!(!resumed.is_empty());
    for l in &resumed {
        assert_eq!(l.status, Some(416), "{}", summary(&log));
    }
    // The body explains the refusal. Only where the proxy forwarded it whole: `EventSource` may hang
    // up on a 416 as soon as it has the head, before the body is forwarded; the page's own fetch
    // reads it to the end.
    let whole: Vec<_> = resumed
        .iter()
        .filter(|l| l.outcome == Outcome::Complete)
        .collect();
    assert!(!whole.is_empty(), "{}", summary(&log));
    for l in whole {
        assert!(
            String::from_utf8_lossy(&l.body_prefix).contains("replay_gap"),
            "{}",
            summary(&log)
        );
    }
    let m = metrics(&server).await;
    assert!(metric(&m, "resumes_below_floor") >= 1.0);
    assert!(metric(&m, "refused_416") >= 1.0);
    b.quit().await.unwrap();
}

/// Waits until the proxy holds an `/events` reconnect (logged, not forwarded).
async fn wait_held(proxy: &ProxyHandle) -> Vec<RequestLog> {
    proxy
        .wait_for(LONG, |l| {
            l.last().is_some_and(|r| {
                r.path.starts_with("/events")
                    && r.outcome == Outcome::Pending
                    && r.last_event_id.is_some()
            })
        })
        .await
        .unwrap_or_else(|l| panic!("no held reconnect:\n{}", summary(&l)))
}

/// A slow consumer: the proxy reads event streams not at all (throttle 0) until told, through a
/// 4 KiB upstream receive buffer, so the stall backs up into the server quickly.
fn paused_reads(c: ProxyConfig) -> ProxyConfig {
    ProxyConfig {
        throttle_bytes_per_sec: Some(0),
        upstream_recv_buffer: Some(4096),
        ..c
    }
}

/// (c1) Slow consumer: with the proxy's reads paused, the producer is backpressured (waits, window
/// full) and the server's memory stays bounded; once reads resume, nothing was lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs chromium; run by scripts/test-all"]
async fn slow_consumer_backpressures_without_loss() {
    // More than loopback socket buffers absorb (~3 MiB ≈ 50k frames), so the ring must fill.
    const N: u64 = 80_000;
    const CAPACITY: u64 = 16;
    let _serial = SERIAL.lock().await;
    let name = "c1-slow-consumer";
    let (server, proxy, mut b) = start_all(
        name,
        ServerOptions {
            capacity: Some(CAPACITY as usize),
            rate: Some(0),
            events: Some(N),
            resumption_window_ms: Some(0),
            backpressure_timeout_ms: Some(60_000),
            // The pause is a consumer that accepts nothing, and after it the server's resends can
            // wait seconds for a retransmission timer that backed off while the 4 KiB buffer
            // refused them (see c2). This test is about the producer waiting, so the server's
            // write timeout (5 s by default; `sse/tests/slow_consumer.rs` covers it) is set past
            // any such stall instead of cutting the stream in the middle of it.
            extra_args: fast_retry_and(&["--write-timeout-ms", "60000"]),
        },
        paused_reads,
    )
    .await;
    let seen_by = Witnesses::of_server(name, &proxy, &server);

    let m = wait_metrics(&server, "producer backpressured with a full window", |m| {
        m.get("producer_waits").is_some_and(|w| w >= 1.0)
            && m.get("head")
                .zip(m.get("floor"))
                .is_some_and(|(h, f)| h - f + 1.0 >= CAPACITY as f64)
    })
    .await;
    let head_while_stalled = metric(&m, "head") as u64;
    assert!(
        head_while_stalled < N,
        "the producer is held back, not finished"
    );
    let rss_stalled = server.rss_kib().expect("server RSS");

    // Let the consumer read slowly for a while, then at full speed.
    proxy.set_throttle(Some(1 << 20));
    wait_metrics(&server, "progress under the throttle", |m| {
        m.get("head")
            .is_some_and(|h| h as u64 >= head_while_stalled + 10_000)
    })
    .await;
    let m = metrics(&server).await;
    assert!(metric(&m, "head") - metric(&m, "floor") + 1.0 <= CAPACITY as f64);
    let rss_mid = server.rss_kib().expect("server RSS");
    proxy.set_throttle(None);

    let s = wait_and_shoot(&mut b, &seen_by, "all events and `end`", |s| s.done).await;
    let rss_end = server.rss_kib().expect("server RSS");
    let log = proxy.requests();
    assert_eq!(s.error, None, "{}", summary(&log));
    assert_eq!(s.ids.len() as u64, N);
    assert!(
        s.ids.iter().copied().eq(1..=N),
        "nothing lost, nothing repeated"
    );
    assert_eq!((s.gaps, s.duplicates, s.reconnects), (0, 0, 0));

    let m = metrics(&server).await;
    assert!(metric(&m, "producer_waits") >= 1.0);
    assert!(metric(&m, "producer_full") >= 1.0);
    assert_eq!(metric(&m, "backpressure_timeouts"), 0.0);
    assert_eq!(metric(&m, "events_enqueued") as u64, N);
    // Bounded memory: the window is 16 events whatever N is; RSS does not grow with the backlog.
    let growth = rss_end.saturating_sub(rss_stalled.min(rss_mid));
    assert!(
        rss_end < 64 * 1024 && growth < 16 * 1024,
        "server RSS stalled {rss_stalled} KiB, mid {rss_mid} KiB, end {rss_end} KiB"
    );
    eprintln!(
        "c1: head while stalled {head_while_stalled}, RSS KiB {rss_stalled}/{rss_mid}/{rss_end}"
    );
    b.quit().await.unwrap();
}

/// (c2) Past the configured bound the producer gives up: the stream ends with the explicit
/// `stream-error` (`backpressure_timeout`) after every event that was produced — none dropped.
///
/// The proxy pauses with the kernel's default receive buffer, not `paused_reads`' 4 KiB one: the
/// stall only has to outlast the 300 ms bound here. Linux 6.17 and 6.18 admit a segment only when
/// its whole allocation fits the receive buffer, so a tiny buffer can refuse the server's resends
/// again and again while their retransmission timer backs off toward two minutes — a TCP stall
/// this test is not about.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs chromium; run by scripts/test-all"]
async fn backpressure_past_the_bound_ends_with_explicit_error() {
    let _serial = SERIAL.lock().await;
    let name = "c2-backpressure-bound";
    let (server, proxy, mut b) = start_all(
        name,
        ServerOptions {
            capacity: Some(16),
            rate: Some(0),
            resumption_window_ms: Some(0),
            backpressure_timeout_ms: Some(300),
            ..fast_retry()
        },
        |c| ProxyConfig {
            throttle_bytes_per_sec: Some(0),
            ..c
        },
    )
    .await;
    let seen_by = Witnesses::of_server(name, &proxy, &server);
    let m = wait_metrics(&server, "backpressure timeout", |m| {
        m.get("backpressure_timeouts").is_some_and(|t| t >= 1.0)
    })
    .await;
    assert_eq!(metric(&m, "closed"), 1.0);
    let head = metric(&m, "head") as u64;
    proxy.set_throttle(None);

    let s = wait_and_shoot(&mut b, &seen_by, "explicit stream error", |s| {
        s.error.is_some()
    })
    .await;
    let log = proxy.requests();
    let err = &s.raw["error"];
    assert_eq!(
        err["error"],
        "backpressure_timeout",
        "page error {err}\n{}",
        summary(&log)
    );
    assert!(err["waited_ms"].as_u64().unwrap() >= 300);
    assert_eq!(s.text_of("status"), "failed");
    assert!(
        s.ids.iter().copied().eq(1..=head),
        "every produced event arrived before the error"
    );
    assert_eq!((s.gaps, s.duplicates, s.reconnects), (0, 0, 0));
    let ev = event_requests(&log);
    assert_eq!(
        ev.len(),
        1,
        "one connection, ended by the server:\n{}",
        summary(&log)
    );
    assert_eq!(ev[0].outcome, Outcome::Complete);
    b.quit().await.unwrap();
}

/// (c3) A connection cut as a slow consumer ends with `stream-error` `slow_consumer` once its socket
/// takes data again; the events after the last one delivered are held for it, so the page resumes
/// from that id and still gets every event exactly once, instead of stopping at the error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs chromium; run by scripts/test-all"]
async fn a_page_cut_as_a_slow_consumer_resumes_exactly_once() {
    const N: u64 = 100;
    const CAPACITY: usize = 64;
    // 64 events of 256 KiB: a full window is more than loopback's socket buffers absorb (~3 MiB
    // on the server's side plus the proxy's receive buffer), so the server's write stays pending.
    const PAYLOAD: &str = "262144";
    let _serial = SERIAL.lock().await;
    let name = "c3-slow-consumer-cut";
    let (server, proxy, mut b) = start_all(
        name,
        ServerOptions {
            capacity: Some(CAPACITY),
            rate: Some(0),
            events: Some(N),
            // Long enough that the cut connection's events are still held when it resumes, short
            // enough that the producer gets past the first full window within the test.
            resumption_window_ms: Some(3_000),
            backpressure_timeout_ms: Some(60_000),
            extra_args: fast_retry_and(&["--write-timeout-ms", "300", "--payload-bytes", PAYLOAD]),
        },
        |c| ProxyConfig {
            throttle_bytes_per_sec: Some(0),
            ..c
        },
    )
    .await;
    let seen_by = Witnesses::of_server(name, &proxy, &server);
    wait_metrics(&server, "the stalled page cut as a slow consumer", |m| {
        m.get("slow_consumers_cut").is_some_and(|c| c >= 1.0)
    })
    .await;
    proxy.set_throttle(None);

    let s = wait_and_shoot(&mut b, &seen_by, "all events and `end`", |s| s.done).await;
    let log = proxy.requests();
    assert_exactly_once(&s, N, &log);
    assert_eq!(s.text_of("status"), "done");
    // One cut at least (the stall); a resumed connection that chromium is slow to read on a
    // loaded machine may be cut again, and resumes the same way.
    let interruptions = s.raw["interruptions"].as_array().unwrap();
    assert!(!interruptions.is_empty());
    for i in interruptions {
        assert_eq!(i["error"], "slow_consumer", "{interruptions:?}");
    }
    assert_eq!(s.reconnects, interruptions.len() as u64);

    // The wire: the server ended each cut response itself (with the error frame), and each of the
    // browser's own reconnects carried the last id it had been sent.
    let ev = event_requests(&log);
    assert_eq!(ev.len(), interruptions.len() + 1, "{}", summary(&log));
    for w in ev.windows(2) {
        assert_eq!(w[0].outcome, Outcome::Complete, "{}", summary(&log));
        assert_eq!(w[1].status, Some(200));
        assert_eq!(
            w[1].last_event_id.as_deref(),
            w[0].frame_ids.last().map(String::as_str),
            "{}",
            summary(&log)
        );
    }
    b.quit().await.unwrap();
}

/// Opens `/events` directly on `addr` until the server serves it (it answers 503 while its one
/// reader slot is still taken by a connection it has not yet seen close); returns the open stream.
async fn take_the_only_reader(addr: SocketAddr) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let deadline = Instant::now() + LONG;
    loop {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(format!("GET /events HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut r = replay_ring_e2e::http::Buffered::new(s);
        let head = r.read_head().await.unwrap().expect("a response head");
        if head.first_line.contains(" 200 ") {
            return r.inner;
        }
        assert!(head.first_line.contains(" 503 "), "{}", head.first_line);
        assert!(Instant::now() < deadline, "the reader slot was never freed");
        // Polling under a deadline: the server has no signal for "a slot is free".
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// (d) A resume refused for now (503 `too_many_readers`, `Retry-After: 1`) is retried after the
/// Retry-After, with the cursor in the query string (a new `EventSource` cannot set
/// `Last-Event-ID`), and the page goes on exactly once as soon as a slot is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs chromium; run by scripts/test-all"]
async fn a_resume_refused_for_now_is_retried_and_continues_exactly_once() {
    const N: u64 = 400;
    let _serial = SERIAL.lock().await;
    let name = "d-retry-after-503";
    let (server, proxy, mut b) = start_all(
        name,
        ServerOptions {
            capacity: Some(1024),
            rate: Some(100),
            events: Some(N),
            extra_args: fast_retry_and(&["--max-readers", "1"]),
            ..ServerOptions::default()
        },
        |c| c,
    )
    .await;
    let seen_by = Witnesses::of_server(name, &proxy, &server);
    wait_page(&mut b, &seen_by, "first events", |s| s.ids.len() >= 20).await;

    // Cut the page and hold its reconnect while another client takes the only reader slot.
    proxy.set_hold(true);
    proxy.set_cut_after_frames(Some(1));
    let held = wait_held(&proxy).await;
    let cursor = held.last().unwrap().last_event_id.clone().unwrap();
    let other = take_the_only_reader(server.addr()).await;
    proxy.set_cut_after_frames(None);
    proxy.set_hold(false);

    let s = wait_page(&mut b, &seen_by, "a refusal the page waits out", |s| {
        s.raw["interruptions"]
            .as_array()
            .is_some_and(|i| !i.is_empty())
    })
    .await;
    assert!(!s.done, "the page did not give up: {:?}", s.error);
    let refusal = &s.raw["interruptions"][0];
    assert_eq!(refusal["error"], "too_many_readers", "{refusal}");
    assert_eq!(refusal["status"], 503);
    drop(other);

    let s = wait_and_shoot(&mut b, &seen_by, "all events and `end`", |s| s.done).await;
    let log = proxy.requests();
    assert_exactly_once(&s, N, &log);
    assert_eq!(s.text_of("status"), "done");
    let ev = event_requests(&log);
    assert!(
        ev.iter()
            .any(|l| l.status == Some(503) && l.last_event_id.as_deref() == Some(&cursor)),
        "the browser's own resume was refused:\n{}",
        summary(&log)
    );
    // The resume that succeeded named the cursor in the query string, and only there.
    let resumed = ev.last().unwrap();
    assert_eq!(resumed.status, Some(200), "{}", summary(&log));
    assert_eq!(resumed.last_event_id, None, "{}", summary(&log));
    // `encodeURIComponent` leaves an id's characters (`[A-Za-z0-9_.-]`) as they are.
    assert_eq!(
        resumed.path.split_once("?lastEventId="),
        Some(("/events", cursor.as_str())),
        "{}",
        summary(&log)
    );
    b.quit().await.unwrap();
}

/// The errors the page resumed after, by their `error` field.
fn interruptions(s: &PageState) -> Vec<String> {
    s.raw["interruptions"]
        .as_array()
        .map(|all| {
            all.iter()
                .map(|i| i["error"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// (e) The demo on Redis, and Redis frozen (`SIGSTOP`): the page's connection ends with
/// `stream-error` `backend_unavailable` and its resumes are refused with 503 while Redis stays out
/// of reach; once Redis is back the page resumes, and every event arrives exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs chromium and redis-server; run by scripts/test-all"]
async fn a_page_rides_out_a_redis_outage_exactly_once() {
    const N: u64 = 150;
    let _serial = SERIAL.lock().await;
    let name = "e-redis-outage";
    let redis = RedisServer::start();
    let (server, proxy, mut b) = start_all(
        name,
        ServerOptions {
            rate: Some(50),
            events: Some(N),
            // A lease that outlasts the outage: this test is not about a standby taking over.
            extra_args: fast_retry_and(&["--redis", &redis.url(), "--lease-ms", "120000"]),
            ..ServerOptions::default()
        },
        |c| c,
    )
    .await;
    let seen_by = Witnesses::of_server(name, &proxy, &server);
    wait_page(&mut b, &seen_by, "first events", |s| s.ids.len() >= 20).await;

    redis.freeze();
    let s = wait_page(&mut b, &seen_by, "the outage reported to the page", |s| {
        !interruptions(s).is_empty()
    })
    .await;
    assert!(!s.done, "the page gave up: {:?}", s.error);
    redis.thaw();

    let s = wait_and_shoot(&mut b, &seen_by, "all events and `end`", |s| s.done).await;
    let log = proxy.requests();
    assert_exactly_once(&s, N, &log);
    assert_eq!(s.text_of("status"), "done");
    let seen = interruptions(&s);
    assert!(
        seen.iter().all(|e| e == "backend_unavailable"),
        "{seen:?}\n{}",
        summary(&log)
    );
    // The connection that was live when Redis froze was ended by the server (with the frame), not
    // cut; resumes followed it.
    let ev = event_requests(&log);
    let (last, before) = ev.split_last().unwrap();
    assert!(
        before
            .iter()
            .any(|l| l.outcome == Outcome::Complete && l.status == Some(200)),
        "{}",
        summary(&log)
    );
    assert_eq!(last.status, Some(200), "{}", summary(&log));
    b.quit().await.unwrap();
}

/// (f) A connection that goes silently dead (the proxy stops forwarding but keeps both sockets
/// open, as a network that drops a path does): `EventSource` sees no error and would wait for
/// the operating system to give up on the socket. With keep-alives sent as events, the page hears
/// nothing for three intervals, closes the connection and resumes from its last id; every event
/// arrives exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs chromium; run by scripts/test-all"]
async fn a_page_notices_a_silently_dead_connection_and_resumes_exactly_once() {
    const N: u64 = 150;
    let _serial = SERIAL.lock().await;
    let name = "f-silent-connection";
    let (server, proxy, mut b) = start_all(
        name,
        ServerOptions {
            rate: Some(50),
            events: Some(N),
            extra_args: fast_retry_and(&["--keep-alive-ms", "300", "--keep-alive-event"]),
            ..ServerOptions::default()
        },
        |c| c,
    )
    .await;
    let seen_by = Witnesses::of_server(name, &proxy, &server);
    wait_page(&mut b, &seen_by, "first events", |s| s.ids.len() >= 20).await;

    // Nothing reaches the page any more, and no socket closes.
    proxy.set_throttle(Some(0));
    let s = wait_page(&mut b, &seen_by, "the page's watchdog firing", |s| {
        s.raw["silentReconnects"].as_u64().unwrap_or(0) >= 1
    })
    .await;
    assert!(!s.done, "the page gave up: {:?}", s.error);
    proxy.set_throttle(None);

    let s = wait_and_shoot(&mut b, &seen_by, "all events and `end`", |s| s.done).await;
    let log = proxy.requests();
    assert_exactly_once(&s, N, &log);
    assert_eq!(s.text_of("status"), "done");
    let interruptions = s.raw["interruptions"].as_array().unwrap();
    assert!(!interruptions.is_empty());
    for i in interruptions {
        assert_eq!(i["error"], "silent", "{interruptions:?}\n{}", summary(&log));
    }
    // Each of the page's own reconnects named its cursor in the query string, since a fresh
    // EventSource cannot send Last-Event-ID.
    let ev = event_requests(&log);
    assert!(ev.len() >= 2, "{}", summary(&log));
    for l in &ev[1..] {
        assert!(
            l.path.starts_with("/events?lastEventId="),
            "{}",
            summary(&log)
        );
    }
    b.quit().await.unwrap();
}
