//! `Duration::MAX` is the usual way to say "never": every timing setting of a stream accepts it,
//! in virtual time, without an `Instant` overflow, and means what it says.

use std::time::Duration;

use ::axum::http::{HeaderMap, StatusCode};
use futures_util::StreamExt;
use replay_ring_sse::axum::{SseConfig, SseStream};
use replay_ring_sse::{Epoch, RetentionConfig, SlowConsumerPolicy, StreamId, StreamIdentity};

/// A resumption window, backpressure bound, write timeout and lag grace of `Duration::MAX`: the
/// stream serves and replays, events never age out, and a full window makes the producer wait
/// (for as long as it takes) instead of ending the stream.
#[tokio::test(start_paused = true)]
async fn every_stream_timing_setting_takes_duration_max() {
    let me = StreamIdentity::new(StreamId::new("never").unwrap(), Epoch::new(9));
    let config = SseConfig {
        capacity: 4,
        retention: RetentionConfig {
            resumption_window: Duration::MAX,
            backpressure_timeout: Duration::MAX,
        },
        slow_consumer: SlowConsumerPolicy {
            write_timeout: Some(Duration::MAX),
            max_lag_percent: Some(50),
            lag_grace: Duration::MAX,
        },
        keep_alive: Duration::MAX,
        ..SseConfig::default()
    };
    let (stream, mut producer) = SseStream::new(me, config).unwrap();
    for n in 1..=4 {
        assert_eq!(producer.send(format!("e{n}")).await.unwrap(), n);
    }
    // A day later every event is still retained, and a resume from 1 replays 2..=4.
    tokio::time::sleep(Duration::from_secs(86_400)).await;
    let mut headers = HeaderMap::new();
    headers.insert("last-event-id", "never.9.1".parse().unwrap());
    let response = stream.respond(&headers);
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body().into_data_stream();
    let mut text = String::new();
    while !text.contains("data: e4\n") {
        let chunk = tokio::time::timeout(Duration::from_secs(1), body.next())
            .await
            .expect("the replay comes at once")
            .unwrap()
            .unwrap();
        text.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    assert!(
        !text.contains("data: e1\n") && text.contains("data: e2\n"),
        "{text}"
    );
    drop(body);

    // The window is full and nothing releases it: the fifth send waits, a virtual year on.
    let waiting = tokio::time::timeout(Duration::from_secs(365 * 86_400), producer.send("e5"));
    assert!(waiting.await.is_err(), "the producer waits");
    assert_eq!(stream.ring().head(), 4);
    assert!(!stream.ring().is_closed(), "the stream goes on");
}
