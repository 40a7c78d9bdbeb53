//! `docs/scaling.md`'s code for a replica ("Using it"), compiled here as written and run against a
//! real Redis: the doc shows it as a fragment of an `async fn`, which this file supplies.

mod common;

use std::time::Duration;

use common::sse_client::{get_events, ResumingClient};
use common::RedisServer;
use replay_ring_redis::{RedisConfig, StreamId};

/// The fragment, verbatim between the markers (indented by four spaces).
#[rustfmt::skip] // as the doc lays it out
async fn documented_replica(redis_url: &str) -> Result<axum::Router, Box<dyn std::error::Error>> {
    // docs/scaling.md: begin
    use std::time::Duration;

    use axum::{routing::get, Router};
    use replay_ring_redis::{CloseReason, Error, RedisBackend, RedisConfig, RedisStream, StreamId};
    use replay_ring_sse::axum::{backend_events, SseConfig, SseStream};
    use replay_ring_sse::PublishError;

    // In an `async fn` given `redis_url: &str` and returning `Result<_, Box<dyn std::error::Error>>`:
    let backend = RedisBackend::connect(redis_url, RedisConfig::default()).await?;
    let (name, config) = (StreamId::new("events")?, SseConfig::default());
    let stream = backend.create(&name, 4096).await?.with_max_readers(64);
    // Every replica serves the stream; a replica that may produce also runs the task below.
    let sse = SseStream::without_producer(stream.clone(), stream.identity(), config);
    let producing = sse.clone();
    tokio::spawn(async move {
        loop {
            // Waits while the lease is held (by another replica, or for up to `RedisConfig::lease`
            // by this one's crashed predecessor), then takes it and continues from the head.
            let producer = match stream.acquire_producer_when_free().await {
                Ok(producer) => producer,
                Err(Error::Unavailable(_) | Error::OutOfMemory(_)) => {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
                Err(_) => return, // the stream was closed, or lost in Redis
            };
            let mut n = producer.next_id();
            tokio::spawn(producer.lease_keeper().run()); // renews the lease while the producer lives
            let mut publisher = producing.attach_producer(producer);
            // Nothing releases a window no replica's client reads: start with the first one. A client
            // of any replica counts (each endpoint records its first subscriber in Redis).
            publisher.first_subscriber().await;
            while n <= 1000 {
                match publisher.send(format!(r#"{{"n":{n}}}"#)).await {
                    Ok(id) => n = id + 1,
                    // Sent, and Redis's answer was lost: the producer stores the event (once) before
                    // the next one, so go on with the next.
                    Err(PublishError::Unconfirmed { id, .. }) => n = id + 1,
                    // Redis could not be reached and nothing was sent: publish the event again.
                    Err(PublishError::Unavailable(_)) => {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    // The lease moved to another replica, or lapsed while Redis was out of reach for
                    // longer than a lease: take it again when it is free. (Stopping here would leave
                    // the stream open with no producer, its clients waiting on keep-alives.)
                    Err(PublishError::Superseded) => break,
                    Err(_) => return, // the stream ended (no `{"n":…}` is `TooLarge`)
                }
            }
            if n > 1000 {
                // Dropping the publisher does not close a Redis stream (a close is a round trip).
                let _ = publisher.close(CloseReason::Completed).await;
                return;
            }
        }
    });
    let app = Router::new().route("/events", get(backend_events::<RedisStream>)).with_state(sse);
    // Serve `app` with `replay_ring_sse::axum::serve` (timeouts and a connection cap).
    // docs/scaling.md: end
    Ok(app)
}

#[test]
fn scaling_md_shows_the_compiled_fragment() {
    let source = include_str!("scaling_snippet.rs");
    let begin = source.find("    // docs/scaling.md: begin\n").unwrap();
    let body = &source[begin..];
    let body =
        &body[body.find('\n').unwrap() + 1..body.find("    // docs/scaling.md: end").unwrap()];
    let fragment: String = body
        .lines()
        .map(|line| format!("{}\n", line.strip_prefix("    ").unwrap_or(line)))
        .collect();
    let doc = include_str!("../../docs/scaling.md");
    assert!(
        doc.contains(&format!("```rust,ignore\n{fragment}```")),
        "docs/scaling.md must show this file's fragment verbatim"
    );
}

/// The fragment run through what a producing replica meets: a predecessor that crashed holding
/// the lease (it lapses after that predecessor's lease, 1 s here), and then its own lease lapsing
/// while it waits for a first subscriber, as it does while Redis is out of reach for longer than
/// a lease. It waits out the first and takes the lease again after the second, so a client that
/// subscribes gets every event, 1 to 1,000, and the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fragment_waits_out_a_held_lease_and_takes_a_lapsed_one_again() {
    let server = RedisServer::start();
    let crashed = server
        .backend_with(RedisConfig {
            lease: Duration::from_secs(1),
            ..RedisConfig::default()
        })
        .await;
    let name = StreamId::new("events").unwrap();
    let stream = crashed.create(&name, 4096).await.unwrap();
    drop(stream.acquire_producer().await.unwrap()); // no close, no lease keeper: token 1 lapses
    let lease = stream.key_names()[3].to_owned();
    let mut raw = server.raw();

    let app = documented_replica(&server.url()).await.unwrap();
    common::eventually(Duration::from_secs(10), "the fragment's lease", || {
        let holder: Option<String> = redis::cmd("GET").arg(&lease).query(&mut raw).unwrap();
        std::future::ready(holder.as_deref() == Some("2"))
    })
    .await;
    // Its lease lapses: the fragment's next append is refused (`Superseded`).
    let _: () = redis::cmd("DEL").arg(&lease).query(&mut raw).unwrap();

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let mut client = ResumingClient::new();
    let attempt = get_events(addr, None, Duration::from_secs(30), |f| client.on_frame(f))
        .await
        .unwrap();
    assert_eq!(attempt.status, 200);
    assert!(client.ended, "the stream ended with `event: end`");
    client.assert_complete(1000, "every event from the first subscription on");
    let fence: String = redis::cmd("HGET")
        .arg(stream.key_names()[0])
        .arg("fence")
        .query(&mut raw)
        .unwrap();
    assert_eq!(fence, "3", "the fragment took the lease twice");
}
