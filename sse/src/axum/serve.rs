//! Serving a router with timeouts on everything a client can hold open, and a connection cap
//! answered with an explicit 503.
//!
//! `axum::serve` keeps a connection for as long as the client likes: a client that sends half a
//! request, or nothing, or never reads its response, holds a file descriptor forever, and enough of
//! them make the process run out and new requests hang. [`serve`] closes such connections;
//! [`ServeConfig`] lists the timeouts and the cap.
//!
//! Connections are HTTP/1.1 (server-sent events need nothing else; HTTP/2 comes with TLS, in front).

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use ::axum::body::Body;
use ::axum::http::{header, HeaderValue, Request, Response, StatusCode};
use ::axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::time::sleep;

use super::serve_config::ServeConfig;
use super::serve_stats::{count, Closed};
use super::side_wake::{First, SideWake, Supervised};
use super::watchdog::{Action, Activity, Tracked, Watchdog};
use crate::deadline::capped;

/// Connections over the cap that are still answered with a 503 at the same time; beyond that an
/// excess connection is closed at once.
const OVERFLOW_ANSWERS: usize = 64;
/// How long an over-the-cap connection may take to send its request head and read the 503.
const OVERFLOW_TIMEOUT: Duration = Duration::from_secs(2);
/// Pause after an accept error that is not about one connection (e.g. out of file descriptors), so
/// the loop does not spin while it lasts.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);

/// Serves `router` on `listener` until the listener fails, with the timeouts and the connection
/// cap of `config` (see [`ServeConfig`]). A drop-in for `axum::serve(listener, router)` (for
/// routes that switch no protocol, see below), which keeps a connection for as long as the client
/// likes: one that sends half a request, or nothing, or never reads its response holds a file
/// descriptor forever, and enough of them make new requests hang. Connections are HTTP/1.1
/// (server-sent events need nothing else).
///
/// A client that shuts down its sending side (a TCP half-close) is taken to have left, as by
/// hyper's HTTP/1 server and most proxies: its connection is closed, with or without the response
/// it was waiting for. That is what lets an event-stream connection give up its reader entry, and
/// start its client's resumption window, the moment the client goes; browsers and SSE clients
/// never half-close.
///
/// Protocols are not switched: a handler's `101 Switching Protocols` (a WebSocket route) or `2xx`
/// answer to `CONNECT`, or the `426 Upgrade Required` of an extractor such as axum's
/// `WebSocketUpgrade`, goes out as `501 Not Implemented` with
/// `{"error":"upgrade_not_supported",…}`, because an upgraded connection would leave the cap, the
/// timeouts and the shutdown behind. A handler waiting for the upgrade (`hyper::upgrade::on`) gets
/// an error at once. Serve such routes from a server of their own. An `Upgrade` header on a request
/// whose handler does not accept it (an event stream, say) is ignored, as HTTP/1.1 allows, and an
/// HTTP/2 connection preface is closed without an answer.
///
/// # Errors
///
/// [`io::ErrorKind::InvalidInput`] at once, before accepting anything, if a timeout of `config`
/// other than `shutdown_grace` is zero (every connection would be closed unanswered) or
/// `max_connections` is 0 (every request would be refused). Otherwise none in practice: accept
/// errors about one connection are skipped, and others (such as running out of file descriptors)
/// pause accepting briefly instead of ending the server. The `Result` leaves room for failures
/// of the listener itself.
///
/// # Cancel safety
///
/// Dropping the future stops accepting; connections already accepted keep being served by their
/// own tasks until they end or time out.
///
/// ```no_run
/// use axum::{routing::get, Router};
/// use replay_ring_sse::axum::{serve, ServeConfig};
///
/// # async fn run() -> std::io::Result<()> {
/// let app = Router::new().route("/", get(|| async { "hello" }));
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
/// serve(listener, app, ServeConfig::default()).await
/// # }
/// ```
pub async fn serve(listener: TcpListener, router: Router, config: ServeConfig) -> io::Result<()> {
    serve_with_shutdown(listener, router, config, std::future::pending()).await
}

/// [`serve`], until `signal` completes; then shuts down gracefully:
///
/// 1. the listener is closed, so new connections are refused;
/// 2. every open connection finishes the response it is writing and closes instead of waiting for
///    another request (idle keep-alive connections close at once; a new connection that has sent
///    part of its first request head may still complete it and be answered, within the grace and
///    the header-read timeout); connections over the cap that are waiting for their 503 are
///    closed at once;
/// 3. connections still open [`shutdown_grace`](ServeConfig::shutdown_grace) later are closed.
///    Event streams do not end by themselves, so this is where they end unless the application
///    closed their producer first (its streams then end with their close frame). Their clients
///    reconnect with `Last-Event-ID` (to another replica, or to this server once it is back) and
///    miss nothing the store still holds. Each connection counts the grace from when its task
///    sees the signal; one busy writing a very large event sees it once that event is written.
///
/// Returns once every connection has closed. With a long grace, an open event stream holds the
/// return that long: close the stream's producer at the signal, or keep the grace short.
///
/// # Errors
///
/// As for [`serve`].
///
/// # Cancel safety
///
/// As for [`serve`]: dropping the future before the signal stops accepting and leaves accepted
/// connections to their tasks; dropping it during the shutdown stops waiting for them (they still
/// close by the grace deadline).
///
/// The example's `tokio::signal` needs tokio's `signal` feature, besides those the crate's README
/// lists.
///
/// ```no_run
/// use axum::{routing::get, Router};
/// use replay_ring_sse::axum::{serve_with_shutdown, ServeConfig};
///
/// # async fn run() -> std::io::Result<()> {
/// let app = Router::new().route("/", get(|| async { "hello" }));
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
/// let ctrl_c = async {
///     let _ = tokio::signal::ctrl_c().await;
/// };
/// serve_with_shutdown(listener, app, ServeConfig::default(), ctrl_c).await
/// # }
/// ```
pub async fn serve_with_shutdown(
    listener: TcpListener,
    router: Router,
    config: ServeConfig,
    signal: impl Future<Output = ()> + Send,
) -> io::Result<()> {
    config.check()?;
    let router = router
        .layer(::axum::middleware::map_request_with_state(
            config.body_read_timeout,
            super::body_deadline::with_body_deadline,
        ))
        .layer(::axum::middleware::from_fn(
            super::no_upgrades::refuse_upgrades,
        ));
    // `acquire_many` counts in u32; a larger cap is no cap in practice.
    let cap = u32::try_from(config.max_connections).unwrap_or(u32::MAX);
    let permits = Arc::new(Semaphore::new(cap as usize));
    let overflow = Arc::new(Semaphore::new(OVERFLOW_ANSWERS));
    let (stop, stopping) = watch::channel(false);
    tokio::pin!(signal);
    loop {
        let accepted = tokio::select! {
            biased;
            () = &mut signal => break,
            accepted = listener.accept() => accepted,
        };
        let tcp = match accepted {
            Ok((tcp, _peer)) => tcp,
            Err(e) if is_per_connection(&e) => continue,
            Err(_) => {
                sleep(ACCEPT_ERROR_PAUSE).await;
                continue;
            }
        };
        // Events are small and written as they happen: do not hold them back for coalescing.
        let _ = tcp.set_nodelay(true);
        give_up_on_unacknowledged_data(&tcp, config.write_timeout.saturating_mul(2));
        match permits.clone().try_acquire_owned() {
            Ok(permit) => {
                let stopping = stopping.clone();
                tokio::spawn(serve_connection(
                    tcp,
                    router.clone(),
                    config,
                    permit,
                    stopping,
                ));
            }
            Err(_) => {
                count(Closed::Refused);
                if let Ok(permit) = overflow.clone().try_acquire_owned() {
                    tokio::spawn(refuse_connection(
                        tcp,
                        config.max_connections,
                        permit,
                        stopping.clone(),
                    ));
                }
            }
        }
    }
    drop(listener);
    // Every connection task holds a receiver; the send reaches all of them, also those that have
    // not polled theirs yet (the value is marked changed for every receiver).
    let _ = stop.send(true);
    // Each connection holds a permit until its task ends: all of them back means all closed.
    // Refusals in progress stop at the signal, so they are back at once.
    let _all_closed = permits.acquire_many(cap).await;
    let _all_refused = overflow.acquire_many(OVERFLOW_ANSWERS as u32).await;
    Ok(())
}

fn is_per_connection(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionRefused
            | io::ErrorKind::Interrupted
    )
}

async fn serve_connection(
    tcp: TcpStream,
    router: Router,
    config: ServeConfig,
    _permit: OwnedSemaphorePermit,
    stopping: watch::Receiver<bool>,
) {
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(Tracked::new(tcp, activity.clone()));
    let service = TowerToHyperService::new(router);
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(capped(config.header_read_timeout))
        // No `with_upgrades()`: an upgraded socket would leave this task, and with it the cap,
        // the timeouts and the shutdown (`refuse_upgrades` answers a switch with a 501).
        .serve_connection(io, service);
    tokio::pin!(connection);
    let mut watchdog = Watchdog::new(activity, config, stopping);
    let mut wake = SideWake::new();
    loop {
        let next = std::pin::pin!(watchdog.next_action());
        wake.arm();
        match Supervised::new(&mut wake, connection.as_mut(), next).await {
            // Ends on completion, on a hyper error, and on hyper's header-read timeout.
            First::Main(ended) => {
                if let Err(e) = ended {
                    if e.is_timeout() {
                        count(Closed::HeaderReadTimeout);
                    } else if !e.is_user() && closed_by_user_timeout(&e) {
                        count(Closed::Unacknowledged);
                    }
                }
                return;
            }
            // Finish the response in progress, then close instead of reading another.
            First::Side(Action::Drain) => connection.as_mut().graceful_shutdown(),
            First::Side(Action::Close(reason)) => {
                count(reason);
                // Dropping the connection closes the socket; a response body being written is
                // dropped with it (an event stream then disconnects like any closed client).
                return;
            }
        }
    }
}

/// Whether the socket under `e` (an error of the connection's own I/O, not of the app's body:
/// the caller excludes hyper's user errors) was aborted by the kernel giving up on the peer: data
/// it did not acknowledge, or its closed receive window, for the socket's `TCP_USER_TIMEOUT`
/// ([`give_up_on_unacknowledged_data`]). The abort reports `ETIMEDOUT`, or the ICMP error that
/// arrived meanwhile (host or network unreachable). The write and idle timeouts close the
/// connection from the watchdog, and hyper's header-read timeout is its own error kind, so
/// neither is counted here.
fn closed_by_user_timeout(e: &hyper::Error) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<io::Error>() {
            return matches!(
                io.kind(),
                io::ErrorKind::TimedOut
                    | io::ErrorKind::HostUnreachable
                    | io::ErrorKind::NetworkUnreachable
            );
        }
        source = cause.source();
    }
    false
}

/// Answers an over-the-cap connection with a 503 and closes it; at the shutdown signal, closes it
/// at once (a refusal is not worth a grace).
async fn refuse_connection(
    tcp: TcpStream,
    limit: usize,
    _permit: OwnedSemaphorePermit,
    mut stopping: watch::Receiver<bool>,
) {
    let body = serde_json::json!({
        "error": "too_many_connections",
        "limit": limit,
        "message": "the server is at its connection limit; retry later",
    })
    .to_string();
    let service = hyper::service::service_fn(move |_request: Request<Incoming>| {
        let mut response = Response::new(Body::from(body.clone()));
        *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        std::future::ready(Ok::<_, Infallible>(response))
    });
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(OVERFLOW_TIMEOUT)
        .keep_alive(false)
        .serve_connection(TokioIo::new(tcp), service);
    tokio::select! {
        _ = tokio::time::timeout(OVERFLOW_TIMEOUT, connection) => {}
        // An error means the server's sender is gone: it stopped too.
        _ = stopping.wait_for(|stop| *stop) => {}
    }
}

/// Closes `tcp` once bytes it sent have gone unacknowledged for `timeout` (`TCP_USER_TIMEOUT`). A
/// client whose network vanished without a close (a phone that lost coverage) acknowledges
/// nothing, while its socket still accepts writes into the send buffer, so the write timeout does
/// not see it; the kernel would retransmit for about 15 minutes (`tcp_retries2`) while the
/// connection holds its reader entry and its place under the cap. [`serve`] passes twice the
/// write timeout, because the option also closes a client that is there but stopped reading:
/// once its receive window is closed, the kernel's zero-window probing counts against the
/// timeout (Linux 5.11 and later). On a stream fast enough to fill the send buffer within a
/// write timeout of that, the write timeout closes the connection first, with a
/// `slow_consumer` frame where one fits; on a slower stream the kernel closes it, twice the
/// write timeout after the window closed, without the frame. Either way the client resumes from
/// its last complete event. Best effort: a failure leaves the kernel's default.
fn give_up_on_unacknowledged_data(tcp: &tokio::net::TcpStream, timeout: Duration) {
    #[cfg(target_os = "linux")]
    {
        let _ = socket2::SockRef::from(tcp).set_tcp_user_timeout(Some(timeout));
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (tcp, timeout);
}
