//! What a publisher on Redis tells its caller when a publish fails, and what the caller does next:
//! `PublishError::Unavailable` means nothing of the event was sent (publish it again);
//! `PublishError::Unconfirmed { id }` means it was sent and its outcome is unknown, and the
//! producer stores it under `id`, once, before the next event (go on with the next). A caller
//! that follows this, as docs/scaling.md's loop does, neither duplicates an event nor loses one.

mod common;

use std::time::{Duration, Instant};

use common::cut_proxy::{backend_through, Mode};
use common::RedisServer;
use replay_ring_redis::{CloseReason, RedisBackend, RedisStream};
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
    let (proxy, backend) = backend_through(&server).await;
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

/// Sets Redis's `maxmemory` (`"1"`: every write refused; `"0"`: no limit).
fn set_maxmemory(server: &RedisServer, bytes: &str) {
    let _: () = redis::cmd("CONFIG")
        .arg(&["SET", "maxmemory", bytes])
        .query(&mut server.raw())
        .unwrap();
}

/// A stream on a Redis that refuses writes for want of memory once `e1` is stored, and its
/// publisher, whose `e2` was just refused.
async fn refused_for_memory(
    name: &str,
) -> (
    RedisServer,
    RedisStream,
    SseProducer<RedisStream>,
    PublishError,
) {
    let server = RedisServer::start_with(&["--maxmemory-policy", "noeviction"]);
    let backend = server.backend().await;
    let (stream, mut publisher) = publisher_on(&backend, name).await;
    assert_eq!(publisher.send("e1").await.unwrap(), 1);
    set_maxmemory(&server, "1");
    let refused = publisher.send("e2").await.unwrap_err();
    (server, stream, publisher, refused)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_refused_for_memory_is_unavailable_and_published_again() {
    let (server, stream, mut publisher, refused) = refused_for_memory("out-of-memory").await;
    // Refused: nothing stored, nothing kept, no id used.
    assert!(
        matches!(refused, PublishError::Unavailable(_)),
        "{refused:?}"
    );
    let cause = std::error::Error::source(&refused).expect("Redis's refusal as the cause");
    assert!(cause.to_string().contains("out of memory"), "{cause}");
    set_maxmemory(&server, "0");
    assert_eq!(publisher.send("e2").await.unwrap(), 2);
    assert_eq!(publisher.send("e3").await.unwrap(), 3);

    assert_eq!(server.log_entries(&stream), expected(3));
}

/// A refusal holds nothing back: the stream still closes while Redis refuses appends (the close
/// may use memory Redis has not got: it is how a stream ends when appends cannot succeed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_closes_after_a_publish_refused_for_memory() {
    let (_server, stream, publisher, refused) = refused_for_memory("closes").await;
    assert!(
        matches!(refused, PublishError::Unavailable(_)),
        "{refused:?}"
    );
    publisher.close(CloseReason::Completed).await.unwrap();
    let state = stream.state().await.unwrap();
    assert_eq!(
        (state.head, state.closed),
        (1, Some(CloseReason::Completed))
    );
}

/// A hand-over right after an `Unconfirmed` publish: the producer given back sends the kept event
/// before it releases the lease, so the successor continues after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_over_after_an_unconfirmed_publish_keeps_the_event() {
    let server = RedisServer::start();
    let (proxy, backend) = backend_through(&server).await;
    let (stream, mut publisher) = publisher_on(&backend, "hand-over").await;

    assert_eq!(publisher.send("e1").await.unwrap(), 1);
    // The append never reaches Redis (the connection drops under it, twice): only the producer
    // has it.
    proxy.set(Mode::LoseRequest);
    let lost = publisher.send("e2").await.unwrap_err();
    proxy.set(Mode::Pass);
    assert!(
        matches!(lost, PublishError::Unconfirmed { id: 2, .. }),
        "{lost:?}"
    );
    let producer = publisher.into_backend_producer().expect("still producing");
    assert!(producer.has_pending());
    producer.release_lease().await.unwrap();
    let successor = stream.acquire_producer().await.unwrap();
    assert_eq!(successor.next_id(), 3, "the successor continues after e2");
    assert_eq!(server.log_entries(&stream), expected(2));
}
