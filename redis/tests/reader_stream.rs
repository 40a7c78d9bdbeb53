//! `RedisReader::into_stream` against a real redis-server: every id once and in order, then the
//! close reason, then the end; a lost stream ends it with the error.

mod common;

use std::time::Duration;

use common::RedisServer;
use futures_util::StreamExt;
use replay_ring::CloseReason;
use replay_ring_redis::{Error, ReadItem};
use replay_ring_sse::StreamId;

const LIMIT: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_yields_replay_then_live_events_then_the_close_and_ends() {
    let server = RedisServer::start();
    let backend = server.backend().await;
    let stream = backend
        .create(&StreamId::new("as-stream").unwrap(), 64)
        .await
        .unwrap();
    let mut producer = stream.acquire_producer().await.unwrap();
    for i in 1..=5 {
        producer.append(format!("e{i}").as_bytes()).await.unwrap();
    }
    // Resumed after id 2: replays 3..=5, then follows what is appended next.
    let reader = stream.resume(Some(2)).await.unwrap();
    let consumer = tokio::spawn(async move {
        let mut items = std::pin::pin!(reader.into_stream());
        let mut seen = Vec::new();
        let mut closed = None;
        while let Some(item) = tokio::time::timeout(LIMIT, items.next()).await.unwrap() {
            assert!(closed.is_none(), "an item after the close");
            match item.unwrap() {
                ReadItem::Events(batch) => seen.extend(batch),
                ReadItem::Closed(reason) => closed = Some(reason),
            }
        }
        (seen, closed)
    });
    for i in 6..=40 {
        producer.append(format!("e{i}").as_bytes()).await.unwrap();
    }
    producer.close(CloseReason::Completed).await.unwrap();
    let (seen, closed) = tokio::time::timeout(LIMIT, consumer)
        .await
        .unwrap()
        .unwrap();
    let expected: Vec<(u64, bytes::Bytes)> = (3..=40)
        .map(|i| (i, bytes::Bytes::from(format!("e{i}"))))
        .collect();
    assert_eq!(seen, expected);
    assert_eq!(closed, Some(CloseReason::Completed));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_stream_ends_the_stream_with_its_error() {
    let server = RedisServer::start();
    let backend = server.backend().await;
    let stream = backend
        .create(&StreamId::new("lost").unwrap(), 64)
        .await
        .unwrap();
    let mut producer = stream.acquire_producer().await.unwrap();
    producer.append(b"e1").await.unwrap();
    let mut items = Box::pin(stream.resume(Some(0)).await.unwrap().into_stream());
    let first = tokio::time::timeout(LIMIT, items.next()).await.unwrap();
    assert!(
        matches!(first, Some(Ok(ReadItem::Events(ref e))) if e.len() == 1),
        "{first:?}"
    );
    // Everything disappears while the reader waits for more (a FLUSHDB, a careless DEL).
    let _: () = redis::cmd("FLUSHDB").query(&mut server.raw()).unwrap();
    let lost = tokio::time::timeout(LIMIT, items.next()).await.unwrap();
    assert!(
        matches!(lost, Some(Err(Error::NotFound { .. }))),
        "{lost:?}"
    );
    assert!(tokio::time::timeout(LIMIT, items.next())
        .await
        .unwrap()
        .is_none());
}
