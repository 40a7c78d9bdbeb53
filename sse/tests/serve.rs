//! `serve`'s timeouts and connection cap against slowloris-style clients over loopback TCP:
//! half-sent headers, silent connections, a client that never reads its response, a handler that
//! never answers, and more connections than the cap.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::routing::{get, post};
use axum::Router;
use bytes::Bytes;
use replay_ring_sse::axum::{serve, serve_stats, ServeConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

/// Set when dropped: tells the test the server let go of a response (or a pending handler).
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        // Release: pairs with the test's Acquire load; only the flag itself is published.
        self.0.store(true, Ordering::Release);
    }
}

struct Flags {
    body_dropped: Arc<AtomicBool>,
    ticks_dropped: Arc<AtomicBool>,
    handler_dropped: Arc<AtomicBool>,
}

async fn start(config: ServeConfig) -> (SocketAddr, Flags) {
    let flags = Flags {
        body_dropped: Arc::new(AtomicBool::new(false)),
        ticks_dropped: Arc::new(AtomicBool::new(false)),
        handler_dropped: Arc::new(AtomicBool::new(false)),
    };
    let (body_flag, handler_flag) = (flags.body_dropped.clone(), flags.handler_dropped.clone());
    let ticks_flag = flags.ticks_dropped.clone();
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        // Reads the whole request body: its length.
        .route(
            "/upload",
            post(|body: Bytes| async move { body.len().to_string() }),
        )
        // An endless body: only a client that reads keeps it moving.
        .route(
            "/endless",
            get(move || {
                let guard = DropFlag(body_flag.clone());
                let chunk = Bytes::from(vec![b'x'; 64 * 1024]);
                let body = futures_util::stream::repeat_with(move || {
                    let _keep = &guard;
                    Ok::<_, std::convert::Infallible>(chunk.clone())
                });
                async move { Body::from_stream(body) }
            }),
        )
        // A small chunk every 20 ms: a response that keeps moving without filling the socket.
        .route(
            "/ticks",
            get(move || {
                let guard = DropFlag(ticks_flag.clone());
                let body = futures_util::stream::unfold(guard, |guard| async move {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    Some((
                        Ok::<_, std::convert::Infallible>(Bytes::from("tick\n")),
                        guard,
                    ))
                });
                async move { Body::from_stream(body) }
            }),
        )
        // 1 KiB every 10 ms: fills a small receive buffer at once, a send buffer only in seconds.
        .route(
            "/drip",
            get(|| async {
                let chunk = Bytes::from(vec![b'd'; 1024]);
                let body = futures_util::stream::unfold(chunk, |chunk| async move {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    Some((Ok::<_, std::convert::Infallible>(chunk.clone()), chunk))
                });
                Body::from_stream(body)
            }),
        )
        // A handler that never answers.
        .route(
            "/never",
            get(move || {
                let guard = DropFlag(handler_flag.clone());
                async move {
                    let _keep = guard;
                    std::future::pending::<()>().await;
                }
            }),
        );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve(listener, app, config));
    (addr, flags)
}

/// A server under test: its address, its shutdown signal, and its task, which completes when the
/// server has returned.
type Served = (
    SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<std::io::Result<()>>,
);

/// Serves `app` with `serve_with_shutdown` and the given grace.
async fn start_with_shutdown(app: Router, grace: Duration) -> Served {
    let config = ServeConfig {
        shutdown_grace: grace,
        ..ServeConfig::default()
    };
    start_with_config(app, config).await
}

/// [`start_with_shutdown`] with every setting given.
async fn start_with_config(app: Router, config: ServeConfig) -> Served {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (signal_tx, signal_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(replay_ring_sse::axum::serve_with_shutdown(
        listener,
        app,
        config,
        async {
            let _ = signal_rx.await;
        },
    ));
    (addr, signal_tx, server)
}

/// Waits for the server to close `socket` (end of stream or reset), discarding what it sent.
/// Returns how long that took.
async fn closed_within(socket: &mut TcpStream, limit: Duration) -> Duration {
    let start = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at((start + limit).into(), socket.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return start.elapsed(),
            Ok(Ok(_)) => continue,
            Err(_) => panic!("connection still open after {limit:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_and_silent_connections_are_closed_and_requests_still_succeed() {
    let header_timeout = Duration::from_millis(300);
    let (addr, _) = start(ServeConfig {
        header_read_timeout: header_timeout,
        ..ServeConfig::default()
    })
    .await;
    let timeouts_before = serve_stats().header_read_timeouts;
    let mut silent = Vec::new();
    let mut half_sent = Vec::new();
    for _ in 0..20 {
        silent.push(TcpStream::connect(addr).await.unwrap());
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            .await
            .unwrap();
        half_sent.push(s);
    }
    // A trickling client: one header byte every 50 ms never completes the head in time.
    let mut trickle = TcpStream::connect(addr).await.unwrap();
    let trickling = async {
        for b in b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaa" {
            if trickle.write_all(&[*b]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    // Meanwhile a normal request is answered.
    let (ok, ()) = tokio::join!(common::get(addr, "/", &[]), trickling);
    assert_eq!((ok.status, ok.text().as_str()), (200, "ok"));

    let limit = header_timeout + Duration::from_secs(5);
    for s in silent.iter_mut().chain(half_sent.iter_mut()) {
        closed_within(s, limit).await;
    }
    closed_within(&mut trickle, limit).await;
    // Each closed one was counted (before its socket closed), the 20 silent, the 20 half-sent
    // and the trickling one; other tests of this binary may add their own.
    let counted = serve_stats().header_read_timeouts - timeouts_before;
    assert!(counted >= 41, "{counted}");
    let again = common::get(addr, "/", &[]).await;
    assert_eq!(again.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_cap_get_an_explicit_503() {
    let (addr, _) = start(ServeConfig {
        max_connections: 4,
        ..ServeConfig::default()
    })
    .await;
    let refused_before = serve_stats().connections_refused;
    let mut held: Vec<TcpStream> = Vec::new();
    for _ in 0..4 {
        held.push(TcpStream::connect(addr).await.unwrap());
    }
    // Requests until the four are registered (accept runs concurrently with this test).
    let mut refused = common::get(addr, "/", &[]).await;
    let deadline = Instant::now() + common::LIMIT;
    while refused.status != 503 {
        assert!(
            Instant::now() < deadline,
            "never refused: {}",
            refused.status
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
        refused = common::get(addr, "/", &[]).await;
    }
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert_eq!(refused.header("content-type"), Some("application/json"));
    let body: serde_json::Value = serde_json::from_str(&refused.text()).unwrap();
    assert_eq!(body["error"], "too_many_connections", "{body}");
    assert_eq!(body["limit"], 4, "{body}");
    assert!(body["message"].is_string(), "{body}");
    // Counted (process-wide, so other tests of this binary may add to it too).
    assert!(serve_stats().connections_refused > refused_before);
    // Once they leave, requests are served again.
    drop(held);
    let deadline = Instant::now() + common::LIMIT;
    loop {
        let reply = common::get(addr, "/", &[]).await;
        if reply.status == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still refused after the cap freed"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_is_closed_after_the_write_timeout() {
    let (addr, flags) = start(ServeConfig {
        write_timeout: Duration::from_millis(300),
        ..ServeConfig::default()
    })
    .await;
    let timeouts_before = serve_stats().write_timeouts;
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut client = socket.connect(addr).await.unwrap();
    // Before the request: the server's writes can only block after it has read it (taking the
    // time after `write_all` returned raced with a server that blocked first).
    let start = Instant::now();
    client
        .write_all(b"GET /endless HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    common::wait_for("the endless response dropped", || {
        // Acquire: pairs with DropFlag's Release store.
        flags.body_dropped.load(Ordering::Acquire)
    })
    .await;
    // The server keeps its connection clocks in whole milliseconds (rounded down): 1 ms slack.
    assert!(start.elapsed() + Duration::from_millis(1) >= Duration::from_millis(300));
    // Counted before the connection (and the body with it) was dropped.
    assert!(serve_stats().write_timeouts > timeouts_before);
    assert_eq!(common::get(addr, "/", &[]).await.status, 200);
}

/// A client that stops reading on a stream too slow to fill the server's send buffer within a
/// write timeout: every write is still accepted, so the write timeout never fires, but the
/// client's receive window closes. The kernel gives up on it after the socket's
/// `TCP_USER_TIMEOUT` (twice the write timeout; Linux counts a closed window since 5.11), and
/// `serve` counts that close.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_whose_window_stays_closed_is_closed_by_the_kernel_and_counted() {
    // Linux applies TCP_USER_TIMEOUT to a closed receive window since 5.11; an older kernel
    // probes it for as long as the peer answers, which is what this test would then see.
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut version = release
        .split(['.', '-'])
        .map(|n| n.parse::<u32>().unwrap_or(0));
    let (major, minor) = (version.next().unwrap_or(0), version.next().unwrap_or(0));
    if (major, minor) < (5, 11) {
        eprintln!(
            "skipped: Linux {} does not time out a closed window",
            release.trim()
        );
        return;
    }
    let (addr, _flags) = start(ServeConfig {
        write_timeout: Duration::from_millis(500),
        ..ServeConfig::default()
    })
    .await;
    let before = serve_stats().unacknowledged_timeouts;
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut client = socket.connect(addr).await.unwrap();
    client
        .write_all(b"GET /drip HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    // The client reads nothing from here on, and keeps its socket open.
    common::wait_for("the kernel's close of the stalled connection", || {
        serve_stats().unacknowledged_timeouts > before
    })
    .await;
    drop(client);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_moves_no_byte_is_closed_after_the_idle_timeout() {
    let (addr, flags) = start(ServeConfig {
        idle_timeout: Duration::from_millis(300),
        ..ServeConfig::default()
    })
    .await;
    let idle_before = serve_stats().idle_timeouts;
    let mut client = TcpStream::connect(addr).await.unwrap();
    client
        .write_all(b"GET /never HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let waited = closed_within(&mut client, Duration::from_secs(10)).await;
    assert!(
        waited >= Duration::from_millis(250),
        "closed after {waited:?}"
    );
    // Acquire: pairs with DropFlag's Release store.
    assert!(
        flags.handler_dropped.load(Ordering::Acquire),
        "the pending handler was dropped"
    );
    // Counted before the connection (and the handler with it) was dropped.
    assert!(serve_stats().idle_timeouts > idle_before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_that_keeps_moving_outlives_the_idle_timeout() {
    let idle = Duration::from_millis(200);
    let (addr, flags) = start(ServeConfig {
        idle_timeout: idle,
        ..ServeConfig::default()
    })
    .await;
    let mut client = TcpStream::connect(addr).await.unwrap();
    client
        .write_all(b"GET /ticks HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    // Five idle timeouts of small writes: they are the only bytes that move, and each must count
    // as activity (none waits on the socket, so only the idle timeout could close the connection).
    let start = Instant::now();
    let mut buf = [0u8; 4096];
    while start.elapsed() < idle * 5 {
        let n = tokio::time::timeout(Duration::from_secs(5), client.read(&mut buf))
            .await
            .expect("the stream keeps sending")
            .unwrap();
        assert_ne!(n, 0, "closed after {:?} while bytes moved", start.elapsed());
    }
    // Acquire: pairs with DropFlag's Release store.
    assert!(
        !flags.ticks_dropped.load(Ordering::Acquire),
        "the moving response was dropped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_always_ready_to_write_is_still_closed_at_the_shutdown_grace() {
    // A body that is always ready, read as fast as loopback goes: hyper's write loop then ends
    // each poll by using up tokio's cooperative budget, and the watchdog must still get its turn.
    let app = Router::new().route(
        "/endless",
        get(|| async {
            let chunk = Bytes::from(vec![b'x'; 1024]);
            Body::from_stream(futures_util::stream::repeat_with(move || {
                Ok::<_, std::convert::Infallible>(chunk.clone())
            }))
        }),
    );
    let grace = Duration::from_millis(300);
    let (addr, signal_tx, server) = start_with_shutdown(app, grace).await;
    let mut client = TcpStream::connect(addr).await.unwrap();
    client
        .write_all(b"GET /endless HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    // The reader says when it has counted `FLOWING` bytes, so the signal comes while the
    // response is flowing; it returns when it saw the close.
    const FLOWING: usize = 4 << 20;
    let (flowing_tx, flowing_rx) = tokio::sync::oneshot::channel();
    let reader = tokio::spawn(async move {
        let mut flowing_tx = Some(flowing_tx);
        let mut buf = vec![0u8; 1 << 20];
        let mut total = 0usize;
        loop {
            match client.read(&mut buf).await {
                Ok(0) | Err(_) => return Instant::now(),
                Ok(n) => total += n,
            }
            if total >= FLOWING {
                if let Some(tx) = flowing_tx.take() {
                    let _ = tx.send(());
                }
            }
        }
    });
    tokio::time::timeout(Duration::from_secs(10), flowing_rx)
        .await
        .expect("the response flows")
        .expect("the response flowed, not closed, before the signal");
    let signalled = Instant::now();
    signal_tx.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("the busy connection closed after the grace, and the server returned")
        .unwrap()
        .unwrap();
    let closed_at = tokio::time::timeout(Duration::from_secs(10), reader)
        .await
        .expect("the client saw the close")
        .unwrap();
    // Closed at the grace, not at the signal: the watchdog counts the grace from when it sees
    // the signal, after `signalled`.
    let open_for = closed_at - signalled;
    assert!(open_for >= grace, "closed {open_for:?} after the signal");
}

/// Reads from `socket` until the server closes it; returns everything it sent.
async fn read_to_close(socket: &mut TcpStream, limit: Duration) -> Vec<u8> {
    let mut all = Vec::new();
    tokio::time::timeout(limit, socket.read_to_end(&mut all))
        .await
        .expect("closed in time")
        .expect("read");
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_body_trickled_past_the_body_read_timeout_is_cut() {
    let timeout = Duration::from_millis(300);
    let (addr, _flags) = start(ServeConfig {
        body_read_timeout: timeout,
        ..ServeConfig::default()
    })
    .await;
    // A body sent whole is read.
    let mut whole = TcpStream::connect(addr).await.unwrap();
    whole
        .write_all(b"POST /upload HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello")
        .await
        .unwrap();
    let reply = read_to_close(&mut whole, Duration::from_secs(5)).await;
    let reply = String::from_utf8_lossy(&reply);
    assert!(
        reply.starts_with("HTTP/1.1 200") && reply.ends_with("\r\n\r\n5"),
        "{reply}"
    );
    let timeouts_before = serve_stats().body_read_timeouts;
    // A body of 100 bytes sent one byte every 50 ms: 5 s in all, moving bytes the whole time.
    let slow = TcpStream::connect(addr).await.unwrap();
    let (mut read, mut write) = slow.into_split();
    write
        .write_all(b"POST /upload HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    let trickle = tokio::spawn(async move {
        for _ in 0..100 {
            if write.write_all(b"x").await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let mut reply = Vec::new();
    tokio::time::timeout(Duration::from_secs(4), read.read_to_end(&mut reply))
        .await
        .expect("the trickled body is still being read")
        .ok();
    let waited = started.elapsed();
    trickle.abort();
    let reply = String::from_utf8_lossy(&reply);
    assert!(reply.starts_with("HTTP/1.1 4"), "{reply}");
    assert!(waited >= timeout, "answered after {waited:?}");
    // Counted when the deadline cut the body, before the handler answered.
    assert!(serve_stats().body_read_timeouts > timeouts_before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_refuses_new_connections_finishes_responses_and_closes_streams_after_the_grace() {
    let grace = Duration::from_secs(4);
    let (entered_tx, mut entered) = tokio::sync::mpsc::channel::<()>(1);
    let release = Arc::new(tokio::sync::Notify::new());
    let released = release.clone();
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        // Answers once the test lets it: a response in progress when the signal comes.
        .route(
            "/slow",
            get(move || {
                let (entered_tx, released) = (entered_tx.clone(), released.clone());
                async move {
                    entered_tx.send(()).await.unwrap();
                    released.notified().await;
                    "done"
                }
            }),
        )
        // An endless body, like an event stream.
        .route(
            "/endless",
            get(|| async {
                let body = futures_util::stream::unfold(0u64, |n| async move {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    Some((
                        Ok::<_, std::convert::Infallible>(Bytes::from("tick\n")),
                        n + 1,
                    ))
                });
                Body::from_stream(body)
            }),
        );
    let (addr, signal_tx, server) = start_with_shutdown(app, grace).await;

    // An idle keep-alive connection (one request answered), a stream being read, a request in
    // progress.
    let mut idle = TcpStream::connect(addr).await.unwrap();
    idle.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 1024];
    let n = idle.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "{:?}", &buf[..n]);
    let mut endless = TcpStream::connect(addr).await.unwrap();
    endless
        .write_all(b"GET /endless HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let n = endless.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "{:?}", &buf[..n]);
    let mut slow = TcpStream::connect(addr).await.unwrap();
    slow.write_all(b"GET /slow HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    entered.recv().await.unwrap();

    let signalled = Instant::now();
    signal_tx.send(()).unwrap();

    // The idle connection closes without waiting for the grace period.
    let idle_closed = closed_within(&mut idle, grace).await;
    assert!(idle_closed < grace, "idle closed after {idle_closed:?}");
    // New connections are refused once the listener is gone.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match TcpStream::connect(addr).await {
            Err(_) => break,
            Ok(mut s) => {
                // Accepted by the kernel before the listener closed: the server never serves it.
                let _ = s
                    .write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                    .await;
                let mut out = Vec::new();
                let _ = tokio::time::timeout(Duration::from_secs(2), s.read_to_end(&mut out)).await;
                assert!(out.is_empty(), "served after shutdown: {out:?}");
            }
        }
        assert!(Instant::now() < deadline, "still accepting after shutdown");
    }
    // The response in progress completes, then its connection closes.
    release.notify_one();
    let answer = read_to_close(&mut slow, grace + Duration::from_secs(5)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("done"), "{answer}");
    // The stream kept flowing, and is closed at the grace deadline.
    let streamed = read_to_close(&mut endless, grace + Duration::from_secs(5)).await;
    assert!(
        signalled.elapsed() >= grace,
        "the stream was closed before the grace period"
    );
    assert!(String::from_utf8_lossy(&streamed).contains("tick"));
    // Every connection is closed: the server future returns.
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("serve_with_shutdown returned")
        .unwrap()
        .unwrap();
}

/// Every timeout of `serve` takes `Duration::MAX`, the usual "never": requests with and without a
/// body are answered (hyper's header timer and the body deadline used to overflow `Instant`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_of_duration_max_mean_never() {
    let (addr, _flags) = start(ServeConfig {
        header_read_timeout: Duration::MAX,
        body_read_timeout: Duration::MAX,
        write_timeout: Duration::MAX,
        idle_timeout: Duration::MAX,
        shutdown_grace: Duration::MAX,
        ..ServeConfig::default()
    })
    .await;
    let requests: [(&[u8], &str); 2] = [
        (
            b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
            "\r\n\r\nok",
        ),
        (
            b"POST /upload HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
            "\r\n\r\n5",
        ),
    ];
    for (request, ending) in requests {
        let mut socket = TcpStream::connect(addr).await.unwrap();
        socket.write_all(request).await.unwrap();
        let reply = read_to_close(&mut socket, Duration::from_secs(5)).await;
        let reply = String::from_utf8_lossy(&reply);
        assert!(
            reply.starts_with("HTTP/1.1 200") && reply.ends_with(ending),
            "{reply}"
        );
    }
}

/// Settings under which no request could be served are refused before anything is accepted: a
/// zero timeout would close every connection unanswered, a cap of 0 refuse every request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_that_serve_nothing_are_refused_up_front() {
    let base = ServeConfig::default;
    let impossible = [
        ServeConfig {
            header_read_timeout: Duration::ZERO,
            ..base()
        },
        ServeConfig {
            body_read_timeout: Duration::ZERO,
            ..base()
        },
        ServeConfig {
            write_timeout: Duration::ZERO,
            ..base()
        },
        ServeConfig {
            idle_timeout: Duration::ZERO,
            ..base()
        },
        ServeConfig {
            max_connections: 0,
            ..base()
        },
    ];
    for config in impossible {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let served = tokio::time::timeout(
            Duration::from_secs(5),
            serve(listener, Router::new(), config),
        )
        .await
        .expect("refused at once");
        let error = served.unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput, "{config:?}");
    }
    // A shutdown grace of zero is meaningful (close every connection at the signal).
    let (addr, _flags) = start(ServeConfig {
        shutdown_grace: Duration::ZERO,
        ..base()
    })
    .await;
    let mut socket = TcpStream::connect(addr).await.unwrap();
    socket
        .write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let reply = read_to_close(&mut socket, Duration::from_secs(5)).await;
    assert!(reply.starts_with(b"HTTP/1.1 200"));
}

/// A handler that switches protocols (as a WebSocket route does) would hand its socket out of the
/// cap, the timeouts and the shutdown: the switch is answered with a 501 instead, the handler's
/// upgrade fails, and the connection goes on serving requests under every limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_protocol_switch_is_refused_with_501() {
    let (upgrade_tx, mut upgrades) = tokio::sync::mpsc::unbounded_channel();
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .route(
            "/up",
            get(move |mut request: axum::extract::Request| {
                let upgrade_tx = upgrade_tx.clone();
                async move {
                    let on_upgrade = hyper::upgrade::on(&mut request);
                    tokio::spawn(async move {
                        let _ = upgrade_tx.send(on_upgrade.await.is_ok());
                    });
                    axum::http::Response::builder()
                        .status(axum::http::StatusCode::SWITCHING_PROTOCOLS)
                        .header("connection", "upgrade")
                        .header("upgrade", "echo")
                        .body(Body::empty())
                        .unwrap()
                }
            }),
        )
        // How an extractor such as axum's `WebSocketUpgrade` refuses an upgrade it cannot take.
        .route(
            "/ws",
            get(|| async { (axum::http::StatusCode::UPGRADE_REQUIRED, "no upgrade") }),
        )
        // A tunnel: `CONNECT` answered 200.
        .fallback(|| async { "tunnel open" });
    let config = ServeConfig {
        max_connections: 1,
        ..ServeConfig::default()
    };
    let (addr, _signal, _server) = start_with_config(app, config).await;

    let mut socket = TcpStream::connect(addr).await.unwrap();
    let requests: [&[u8]; 3] = [
        b"GET /up HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: echo\r\n\r\n",
        b"GET /ws HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n",
        b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
    ];
    for (i, request) in requests.into_iter().enumerate() {
        socket.write_all(request).await.unwrap();
        let reply = read_one_reply(&mut socket).await;
        assert!(reply.starts_with("HTTP/1.1 501"), "{reply}");
        assert!(reply.contains("upgrade_not_supported"), "{reply}");
        if i == 0 {
            // The handler learns at once that its switch did not happen, while the connection
            // goes on (not when it ends).
            let learnt = tokio::time::timeout(common::LIMIT, upgrades.recv()).await;
            assert_eq!(learnt, Ok(Some(false)));
        }
    }
    // The same connection, still the only one allowed, still serves plain requests.
    socket
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let reply = read_one_reply(&mut socket).await;
    assert!(
        reply.starts_with("HTTP/1.1 200") && reply.ends_with("ok"),
        "{reply}"
    );
}

/// Reads one response with a `content-length` body from `socket` (left open), as text.
async fn read_one_reply(socket: &mut TcpStream) -> String {
    let mut reply = Vec::new();
    let mut buf = [0u8; 1024];
    let deadline = Instant::now() + common::LIMIT;
    loop {
        let text = String::from_utf8_lossy(&reply).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse::<usize>().unwrap())
                })
                .expect("a content-length");
            if body.len() >= length {
                return text;
            }
        }
        let n = tokio::time::timeout_at(deadline.into(), socket.read(&mut buf))
            .await
            .expect("a whole reply in time")
            .unwrap();
        assert!(n > 0, "closed mid-reply: {text}");
        reply.extend_from_slice(&buf[..n]);
    }
}

/// A connection over the cap, still silent (its 503 waits for a request head), is closed at the
/// shutdown signal, before `serve_with_shutdown` returns, not left to its own 2 s timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_waiting_for_their_503_close_before_shutdown_returns() {
    let app = Router::new().route("/", get(|| async { "ok" }));
    let config = ServeConfig {
        max_connections: 1,
        shutdown_grace: Duration::ZERO,
        ..ServeConfig::default()
    };
    let (addr, signal_tx, server) = start_with_config(app, config).await;
    let mut holder = TcpStream::connect(addr).await.unwrap();
    holder
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    assert!(read_one_reply(&mut holder)
        .await
        .starts_with("HTTP/1.1 200"));
    let mut silent = TcpStream::connect(addr).await.unwrap();
    // Accepted after `silent`, and refused: the accept loop has handed `silent` its refusal.
    let probe = common::get(addr, "/", &[]).await;
    assert_eq!(probe.status, 503);
    let signalled = Instant::now();
    signal_tx.send(()).unwrap();
    server.await.unwrap().unwrap();
    // Its refusal would have waited 2 s from its accept for a request head.
    let closed = closed_within(&mut silent, Duration::from_secs(1)).await;
    eprintln!(
        "serve returned {:?} after the signal, the silent connection was closed {closed:?} later",
        signalled.elapsed() - closed
    );
}
