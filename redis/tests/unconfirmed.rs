//! What a publisher on Redis tells its caller when a publish fails, and what the caller does next:
//! `PublishError::Unavailable` means nothing of the event was sent (publish it again);
//! `PublishError::Unconfirmed { id }` means it was sent and its outcome is unknown, and the
//! producer stores it under `id`, once, before the next event (go on with the next). A caller
//! that follows this, as docs/scaling.md's loop does, neither duplicates an event nor loses one.

mod common;

use std::time::{Duration, Instant};

use common::cut_proxy::{CutProxy, Mode};
use common::RedisServer;
use replay_ring_redis::{RedisBackend, RedisConfig, RedisStream};
use replay_ring_sse::axum::{SseConfig, SseProducer, SseStream};
use replay_ring_sse::{PublishError, StreamId};

/// A fresh stream on `backend` and a publisher holding its lease.
async fn publisher_on(
    backend: &RedisBackend,
    name: &str,
) -> (RedisStream, SseProducer<RedisStream>) {
    let stream = backend
        .create(&StreamId::new(name).unwrap(), 64)
        .await
        .unwrap();
    let producer = stream.acquire_producer().await.unwrap();
    let (_sse, publisher) =
        SseStream::with_backend(producer, stream.identity(), SseConfig::default());
    (stream, publisher)
}

/// Publishes `e{n}` for n in 1..=last the way docs/scaling.md does: the next event after an
/// `Ok(id)` or an `Unconfirmed { id }`, the same one again after `Unavailable` (for up to 10 s).
/// `before(n)` runs before each attempt. Returns the ids reported `Unconfirmed`.
async fn publish_through(
    publisher: &mut SseProducer<RedisStream>,
    last: u64,
    mut before: impl FnMut(u64),
) -> Vec<u64> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut unconfirmed = Vec::new();
    let mut n = 1;
    while n <= last {
        before(n);
        match publisher.send(format!("e{n}")).await {
            Ok(id) => {
                assert_eq!(id, n, "each event under the id it was built for");
                n = id + 1;
            }
            Err(PublishError::Unconfirmed { id, .. }) => {
                assert_eq!(id, n);
                unconfirmed.push(id);
                n = id + 1;
            }
            // The connection is being made again.
            Err(PublishError::Unavailable(e)) => {
                assert!(Instant::now() < deadline, "Redis unreachable for 10 s: {e}");
                tokio::task::yield_now().await;
            }
            Err(e) => panic!("e{n}: {e:?}"),
        }
    }
    unconfirmed
}

fn expected(last: u64) -> Vec<(u64, Vec<u8>)> {
    (1..=last)
        .map(|i| (i, format!("e{i}").into_bytes()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_whose_answer_is_lost_is_unconfirmed_and_stored_once() {
    let server = RedisServer::start();
    let proxy = CutProxy::start(server.port).await;
    let config = RedisConfig {
        response_timeout: Duration::from_millis(500),
        ..RedisConfig::default()
    };
    let backend = RedisBackend::connect(&proxy.url(), config).await.unwrap();
    let (stream, mut publisher) = publisher_on(&backend, "lost-answer").await;

    // The third append reaches Redis and runs, and every answer is lost while it is attempted
    // (the producer sends it again itself once before it gives up on it).
    let mut armed = true;
    let unconfirmed = publish_through(&mut publisher, 6, |n| {
        let lose = n == 3 && std::mem::take(&mut armed);
        proxy.set(if lose { Mode::LoseReply } else { Mode::Pass });
    })
    .await;

    assert_eq!(unconfirmed, [3]);
    assert_eq!(
        server.log_entries(&stream),
        expected(6),
        "e3 once, nothing lost"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_refused_for_memory_is_kept_and_stored_once_memory_is_back() {
    let server = RedisServer::start_with(&["--maxmemory-policy", "noeviction"]);
    let backend = server.backend().await;
    let (stream, mut publisher) = publisher_on(&backend, "out-of-memory").await;
    let set_maxmemory = |bytes: &str| {
        let _: () = redis::cmd("CONFIG")
            .arg(&["SET", "maxmemory", bytes])
            .query(&mut server.raw())
            .unwrap();
    };

    assert_eq!(publisher.send("e1").await.unwrap(), 1);
    set_maxmemory("1");
    // Refused, nothing stored; but its payload was built, so the producer keeps it.
    let refused = publisher.send("e2").await.unwrap_err();
    assert!(
        matches!(refused, PublishError::Unconfirmed { id: 2, .. }),
        "{refused:?}"
    );
    let text = refused.to_string();
    assert!(
        text.contains("event 2 was sent but not confirmed"),
        "{text}"
    );
    let cause = std::error::Error::source(&refused).expect("Redis's refusal as the cause");
    assert!(cause.to_string().contains("out of memory"), "{cause}");
    // Still refused: the kept event goes first and is refused again, so nothing of e3 is sent.
    assert!(matches!(
        publisher.send("e3").await,
        Err(PublishError::Unavailable(_))
    ));
    set_maxmemory("0");
    assert_eq!(publisher.send("e3").await.unwrap(), 3);

    assert_eq!(server.log_entries(&stream), expected(3));
}
