use axum::{routing::get, Router};
use replay_ring_sse::axum::{events, serve, ServeConfig, SseConfig, SseStream};
use replay_ring_sse::{Epoch, PublishError, StreamId, StreamIdentity};

/// An existing app (`/`) plus a resumable event stream at `/events`.
async fn run(listener: tokio::net::TcpListener) -> Result<(), Box<dyn std::error::Error>> {
    let identity = StreamIdentity::new(StreamId::new("events")?, Epoch::generate());
    let (stream, mut producer) = SseStream::new(identity, SseConfig::default())?;
    tokio::spawn(async move {
        for n in 1u64.. {
            let tick = format!(r#"{{"tick":{n}}}"#);
            match producer.send(tick).await {
                Ok(_) => {}
                // A network backend could not be reached (this tick is skipped; one that was
                // sent and whose answer was lost is `Unconfirmed`, and stored before the next),
                // or refused this one event as too large: the stream stays open.
                Err(
                    PublishError::Unavailable(_)
                    | PublishError::Unconfirmed { .. }
                    | PublishError::TooLarge { .. },
                ) => {}
                // The stream ended: closed at the backpressure bound, or taken over.
                Err(_) => break,
            }
            // 10 events/s: a 30 s resumption window needs room for 300, within the default 1,024.
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    });
    let app = Router::new()
        .route("/", get(|| async { "hello" }))
        .route("/events", get(events).with_state(stream));
    serve(listener, app, ServeConfig::default()).await?;
    Ok(())
}
