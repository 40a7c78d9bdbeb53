//! The SSE endpoint over a Redis stream with every default: no reader limit on the stream, so the
//! endpoint's retention table must grow with the connections instead of being sized by the limit.

mod common;

use std::time::Duration;

use common::RedisServer;
use futures_util::StreamExt;
use http::{HeaderMap, StatusCode};
use replay_ring_sse::axum::{SseConfig, SseStream};
use replay_ring_sse::StreamId;

const LIMIT: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_over_a_default_redis_stream_serves_more_connections_than_its_first_table() {
    let server = RedisServer::start();
    let backend = server.backend().await;
    let stream = backend
        .create(&StreamId::new("defaults").unwrap(), 64)
        .await
        .unwrap();
    assert_eq!(
        stream.max_readers(),
        usize::MAX,
        "no reader limit by default"
    );
    let identity = stream.identity();
    let producer = stream.acquire_producer().await.unwrap();
    let (sse, mut publisher) = SseStream::with_backend(producer, identity, SseConfig::default());
    // More connections than the retention table starts with (64).
    const CONNECTIONS: usize = 100;
    let mut bodies = Vec::new();
    for _ in 0..CONNECTIONS {
        let response = sse.respond_async(&HeaderMap::new()).await;
        assert_eq!(response.status(), StatusCode::OK);
        let mut body = response.into_body().into_data_stream();
        let priming = tokio::time::timeout(LIMIT, body.next()).await.unwrap();
        assert!(priming.is_some(), "a priming event");
        bodies.push(body);
    }
    assert_eq!(sse.with_retention(|r| r.live_connections()), CONNECTIONS);
    let id = publisher.send("to everyone").await.unwrap();
    for body in &mut bodies {
        let chunk = tokio::time::timeout(LIMIT, body.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        let text = std::str::from_utf8(&chunk).unwrap();
        assert!(text.contains(&format!(".{id}\n")), "{text:?}");
        assert!(text.contains("data: to everyone\n"), "{text:?}");
    }
    drop(bodies);
    assert_eq!(sse.with_retention(|r| r.live_connections()), 0);
}

/// A stream that is gone from Redis (deleted, expired, or lost in a restart without persistence)
/// is answered 404 `stream_lost`, with or without a cursor: the stream, not a session, is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_gone_from_redis_is_answered_stream_lost() {
    let server = RedisServer::start();
    let backend = server.backend().await;
    let stream = backend
        .create(&StreamId::new("vanishing").unwrap(), 64)
        .await
        .unwrap();
    let identity = stream.identity();
    let sse = SseStream::without_producer(stream.clone(), identity, SseConfig::default());
    stream.delete().await.unwrap();
    let cursor = identity.event_id(0).to_string();
    for headers in [HeaderMap::new(), {
        let mut h = HeaderMap::new();
        h.insert("last-event-id", cursor.parse().unwrap());
        h
    }] {
        let response = sse.respond_async(&headers).await;
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        let mut body = response.into_body().into_data_stream();
        let chunk = tokio::time::timeout(LIMIT, body.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        let text = std::str::from_utf8(&chunk).unwrap();
        assert!(text.contains(r#""error":"stream_lost""#), "{text}");
    }
}
