//! A Redis that is there but does not serve: frozen, busy with another client's script, or not
//! Redis at all. Each is a typed, bounded error, retryable where waiting can help.

mod common;

use std::time::{Duration, Instant};

use common::RedisServer;
use replay_ring_redis::{Error, RedisBackend, RedisConfig};
use replay_ring_sse::StreamId;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A frozen Redis accepts connections (the kernel does) and answers nothing: `connect` gives up
/// within `connect_timeout` in all, not once per connection attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connecting_to_a_frozen_redis_gives_up_within_the_connect_timeout() {
    let server = RedisServer::start();
    server.freeze();
    let config = RedisConfig {
        connect_timeout: Duration::from_millis(800),
        ..RedisConfig::default()
    };
    let started = Instant::now();
    let result = RedisBackend::connect(&server.url(), config).await;
    let took = started.elapsed();
    server.thaw();
    match result {
        Err(e @ Error::Unavailable(_)) => {
            assert!(e.is_transient());
            assert!(e.to_string().contains("connect_timeout"), "{e}");
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    // Each attempt alone may take the whole timeout, and redis-rs retries twice: about 3 s.
    assert!(
        took < Duration::from_millis(800 + 1000),
        "connect took {took:?} against a connect_timeout of 800 ms"
    );
    // Thawed, the same configuration connects.
    let config = RedisConfig {
        connect_timeout: Duration::from_millis(800),
        ..RedisConfig::default()
    };
    RedisBackend::connect(&server.url(), config).await.unwrap();
}

/// While another client's script runs past Redis's busy threshold, Redis answers every other
/// command `BUSY`: unavailable for now, not a server error to give up on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_busy_with_a_long_script_is_unavailable_for_now() {
    let server = RedisServer::start_with(&["--busy-reply-threshold", "50"]);
    let backend = server.backend().await;
    let stream = backend
        .create(&StreamId::new("busy").unwrap(), 16)
        .await
        .unwrap();
    let mut producer = stream.acquire_producer().await.unwrap();
    producer.append(b"before").await.unwrap();

    // A script that loops until `SCRIPT KILL` (it writes nothing, so it can be killed).
    let mut looping = server.raw();
    let script = std::thread::spawn(move || {
        redis::cmd("EVAL")
            .arg("while true do end")
            .arg(0)
            .query::<()>(&mut looping)
    });
    // Busy once a command from elsewhere is answered so.
    let mut admin = server.raw();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match redis::cmd("PING").query::<String>(&mut admin) {
            Err(e) if e.code() == Some("BUSY") => break,
            _ => assert!(
                Instant::now() < deadline,
                "the script never made Redis busy"
            ),
        }
        std::thread::yield_now();
    }

    match stream.state().await {
        Err(e @ Error::Unavailable(_)) => assert!(e.is_transient(), "{e:?}"),
        other => panic!("expected Unavailable while busy, got {other:?}"),
    }

    let _: () = redis::cmd("SCRIPT").arg("KILL").query(&mut admin).unwrap();
    assert!(script.join().unwrap().is_err(), "the killed script fails");
    // Nothing was written while busy; the stream goes on from where it was.
    assert_eq!(stream.state().await.unwrap().head, 1);
    assert_eq!(producer.append(b"after").await.unwrap(), 2);
}

/// A URL with the port of some other service: the first answer is not the Redis protocol, and
/// the error says so instead of reporting unexpected bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_that_does_not_speak_redis_is_named_as_such() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let _ = socket
                    .write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                    .await;
                // Kept open until the client goes: a reset could reach the client before the
                // answer did, and read as a connection failure.
                let mut sink = [0u8; 1024];
                while matches!(socket.read(&mut sink).await, Ok(n) if n > 0) {}
            });
        }
    });
    let url = format!("redis://127.0.0.1:{port}/");
    match RedisBackend::connect(&url, RedisConfig::default()).await {
        Err(e @ Error::Server(_)) => {
            assert!(!e.is_transient());
            assert!(e.to_string().contains("Redis protocol"), "{e}");
        }
        other => panic!("expected a server error, got {other:?}"),
    }
}
