//! Keep-alive comments on an event-stream body, in virtual time: one goes out only after a whole
//! `keep_alive` interval without a chunk, however many events flowed before it.

use std::time::Duration;

use ::axum::body::BodyDataStream;
use ::axum::http::HeaderMap;
use futures_util::StreamExt;
use replay_ring_sse::axum::{SseConfig, SseProducer, SseStream};
use replay_ring_sse::{Epoch, StreamId, StreamIdentity, KEEP_ALIVE_EVENT};
use tokio::time::{sleep, Instant};

const KEEP_ALIVE: Duration = Duration::from_millis(100);

/// The body's next chunk, failing (in virtual time) instead of hanging if none comes: a keep-alive
/// timer that is never polled again would leave the body pending forever.
async fn next_chunk<S, E>(body: &mut S) -> bytes::Bytes
where
    S: futures_util::Stream<Item = Result<bytes::Bytes, E>> + Unpin,
    E: std::fmt::Debug,
{
    tokio::time::timeout(KEEP_ALIVE * 10, body.next())
        .await
        .expect("a chunk within ten keep-alive intervals")
        .expect("the body goes on")
        .unwrap()
}

/// A stream with `keep_alive`, and a new subscriber's body past its priming event.
async fn primed(keep_alive: Duration) -> (SseStream, SseProducer, BodyDataStream) {
    primed_with(SseConfig {
        keep_alive,
        ..SseConfig::default()
    })
    .await
}

/// A stream with `config`, and a new subscriber's body past its priming event.
async fn primed_with(config: SseConfig) -> (SseStream, SseProducer, BodyDataStream) {
    let me = StreamIdentity::new(StreamId::new("ka").unwrap(), Epoch::new(7));
    let (stream, producer) = SseStream::new(me, config).unwrap();
    let mut body = stream
        .respond(&HeaderMap::new())
        .into_body()
        .into_data_stream();
    let priming = next_chunk(&mut body).await;
    assert!(std::str::from_utf8(&priming).unwrap().starts_with("id: "));
    (stream, producer, body)
}

#[tokio::test(start_paused = true)]
async fn keep_alives_come_only_after_a_silent_interval() {
    let (stream, mut producer, mut body) = primed(KEEP_ALIVE).await;

    // Events 60 ms apart, for ten keep-alive intervals' worth of waits: each wait is shorter than
    // the interval, so no keep-alive goes out between them (the timer armed for an earlier chunk
    // must be moved, not fired).
    for n in 1..=17u32 {
        sleep(Duration::from_millis(60)).await;
        let id = producer.send(format!("e{n}")).await.unwrap();
        let chunk = next_chunk(&mut body).await;
        let text = std::str::from_utf8(&chunk).unwrap();
        assert!(
            text.contains(&format!("data: e{n}\n")),
            "event {id} expected, got {text:?}"
        );
        assert!(
            !text.contains(": keep-alive"),
            "keep-alive mid-flow: {text:?}"
        );
    }
    assert_eq!(stream.stats().keep_alives, 0);

    // Silence: a keep-alive exactly one interval after the last chunk, then one per interval.
    for k in 1..=3u64 {
        let before = Instant::now();
        let chunk = next_chunk(&mut body).await;
        assert_eq!(&chunk[..], b": keep-alive\n\n");
        assert_eq!(before.elapsed(), KEEP_ALIVE, "keep-alive {k}");
        assert_eq!(stream.stats().keep_alives, k);
    }

    // An event after the keep-alives arrives as itself.
    producer.send("late").await.unwrap();
    let chunk = next_chunk(&mut body).await;
    assert!(std::str::from_utf8(&chunk)
        .unwrap()
        .contains("data: late\n"));
}

/// `keep_alive` of zero or `Duration::MAX` sends no keep-alive comments (zero used to write them
/// in a busy loop, `MAX` to panic on the deadline): an idle stream stays silent for an hour of
/// virtual time, then delivers the next event as usual.
#[tokio::test(start_paused = true)]
async fn a_keep_alive_of_zero_or_max_sends_none() {
    for keep_alive in [Duration::ZERO, Duration::MAX] {
        let (stream, mut producer, mut body) = primed(keep_alive).await;
        let silent = tokio::time::timeout(Duration::from_secs(3600), body.next()).await;
        assert!(silent.is_err(), "{keep_alive:?}: {silent:?}");
        assert_eq!(stream.stats().keep_alives, 0, "{keep_alive:?}");
        producer.send("after").await.unwrap();
        let chunk = next_chunk(&mut body).await;
        assert!(std::str::from_utf8(&chunk)
            .unwrap()
            .contains("data: after\n"));
    }
}

/// With `keep_alive_event`, an idle stream's keep-alive is an event a page can listen for
/// (`event: keep-alive`, empty data, no id) on the same schedule, and events go on after it with
/// the next id.
#[tokio::test(start_paused = true)]
async fn keep_alives_can_be_events_a_page_sees() {
    let (stream, mut producer, mut body) = primed_with(SseConfig {
        keep_alive: KEEP_ALIVE,
        keep_alive_event: true,
        ..SseConfig::default()
    })
    .await;
    producer.send("first").await.unwrap();
    let chunk = next_chunk(&mut body).await;
    assert!(std::str::from_utf8(&chunk)
        .unwrap()
        .contains("data: first\n"));
    for k in 1..=2u64 {
        let before = Instant::now();
        let chunk = next_chunk(&mut body).await;
        assert_eq!(&chunk[..], KEEP_ALIVE_EVENT);
        assert_eq!(&chunk[..], b"event: keep-alive\ndata:\n\n");
        assert_eq!(before.elapsed(), KEEP_ALIVE, "keep-alive {k}");
        assert_eq!(stream.stats().keep_alives, k);
    }
    let id = producer.send("second").await.unwrap();
    assert_eq!(id, 2);
    let chunk = next_chunk(&mut body).await;
    let text = std::str::from_utf8(&chunk).unwrap();
    assert!(
        text.contains("ka.7.2\n") && text.contains("data: second\n"),
        "{text:?}"
    );
}
