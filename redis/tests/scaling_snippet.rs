//! `docs/scaling.md`'s code for a replica ("Using it"), compiled here as written: the doc shows
//! it as a fragment of an `async fn`, which this file supplies.

/// The fragment, verbatim between the markers (indented by four spaces).
#[allow(dead_code)] // compiled, not run: it connects to the doc's fixed Redis address
#[rustfmt::skip] // as the doc lays it out
async fn documented_replica() -> Result<axum::Router, Box<dyn std::error::Error>> {
    // docs/scaling.md: begin
    use axum::{routing::get, Router};
    use replay_ring_redis::{CloseReason, RedisBackend, RedisConfig, RedisStream, StreamId};
    use replay_ring_sse::axum::{backend_events, SseConfig, SseStream};
    use replay_ring_sse::PublishError;

    // In an `async fn` returning `Result<_, Box<dyn std::error::Error>>`:
    let backend = RedisBackend::connect("redis://127.0.0.1:6379/", RedisConfig::default()).await?;
    let (name, config) = (StreamId::new("events")?, SseConfig::default());
    let stream = backend.create(&name, 4096).await?.with_max_readers(64);
    let producer = stream.acquire_producer().await?;          // on the producing replica
    // (`Error::LeaseHeld` while another holds the lease, its own crashed predecessor included, for
    // up to `RedisConfig::lease`: `acquire_producer_when_free` waits for it instead.)
    tokio::spawn(producer.lease_keeper().run());              // keeps the lease while the producer lives
    let (sse, mut publisher) = SseStream::with_backend(producer, stream.identity(), config);
    tokio::spawn(async move {
        // Nothing releases a window no replica's client reads (below): start with the first one.
        // A client of any replica counts: each endpoint records its first subscriber in Redis.
        publisher.first_subscriber().await;
        for n in 1u64..=1000 {
            match publisher.send(format!(r#"{{"n":{n}}}"#)).await {
                Ok(_) => {}
                // Redis could not be reached (the event may have been stored: the next send resends
                // it first), or refused this one event as too large. The stream stays open; stopping
                // here would leave it open with no producer, its clients waiting on keep-alives.
                Err(PublishError::Unavailable(_) | PublishError::TooLarge { .. }) => {
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                Err(_) => return, // ended, or taken over by another replica
            }
        }
        // Dropping the publisher does not close a Redis stream (a close is a round trip): close it.
        let _ = publisher.close(CloseReason::Completed).await;
    });
    // On every other replica: SseStream::without_producer(stream.clone(), stream.identity(), config)
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
