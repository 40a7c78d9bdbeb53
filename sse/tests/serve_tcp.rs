//! `serve` sets `TCP_USER_TIMEOUT` to twice the write timeout on every connection it accepts, so a
//! client whose network vanished (it acknowledges nothing, while the send buffer still takes
//! writes) is closed within a keep-alive interval plus that, not after the kernel's 15 minutes of
//! retransmissions. Loopback cannot lose packets without privileges, so the test reads the
//! option back from the server's own socket, found among this process's descriptors. It is the
//! only test in this binary, so no other test opens or closes descriptors meanwhile.

#![cfg(target_os = "linux")]

use std::net::SocketAddr;
use std::os::fd::{BorrowedFd, RawFd};
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use replay_ring_sse::axum::{serve, ServeConfig};
use socket2::SockRef;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The `TCP_USER_TIMEOUT` of this process's socket whose local address is `local` and whose peer
/// is `peer`, if there is one.
fn user_timeout_of(local: SocketAddr, peer: SocketAddr) -> Option<Duration> {
    for entry in std::fs::read_dir("/proc/self/fd").unwrap() {
        let Ok(fd) = entry
            .unwrap()
            .file_name()
            .to_string_lossy()
            .parse::<RawFd>()
        else {
            continue;
        };
        // SAFETY: `fd` was open when listed, and nothing in this binary closes a descriptor while
        // the test runs (the server and the client keep theirs open until it ends); the borrow
        // lasts for three read-only socket calls, which fail harmlessly on a descriptor that is
        // not a socket (the directory's own, the runtime's).
        let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
        let socket = SockRef::from(&borrowed);
        let addrs = (socket.local_addr(), socket.peer_addr());
        let (Ok(mine), Ok(theirs)) = addrs else {
            continue;
        };
        if mine.as_socket() == Some(local) && theirs.as_socket() == Some(peer) {
            return socket.tcp_user_timeout().unwrap();
        }
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepted_connections_give_up_on_data_unacknowledged_for_twice_the_write_timeout() {
    let write_timeout = Duration::from_millis(7_250);
    let config = ServeConfig {
        write_timeout,
        ..ServeConfig::default()
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new().route("/", get(|| async { "ok" }));
    tokio::spawn(serve(listener, app, config));

    let mut client = TcpStream::connect(addr).await.unwrap();
    // An answered request: the server has accepted the connection and set it up.
    // Kept alive, so the server holds its socket open until the test ends.
    client
        .write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    let mut reply = Vec::new();
    while !reply.ends_with(b"\r\n\r\nok") {
        let mut chunk = [0; 512];
        let n = client.read(&mut chunk).await.unwrap();
        assert!(n > 0, "closed before the answer: {reply:?}");
        reply.extend_from_slice(&chunk[..n]);
    }
    assert!(reply.starts_with(b"HTTP/1.1 200"), "{reply:?}");
    let ours = client.local_addr().unwrap();
    assert_eq!(
        SockRef::from(&client).tcp_user_timeout().unwrap(),
        None,
        "the client's own socket has the kernel default"
    );
    assert_eq!(user_timeout_of(addr, ours), Some(write_timeout * 2));
}
