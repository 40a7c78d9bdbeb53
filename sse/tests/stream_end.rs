//! How an event-stream body ends: the last events and the terminal frame share one chunk when the
//! stream had already closed by the time they were read, and the body ends right after it;
//! otherwise the terminal frame comes in a chunk of its own once the close arrives.

use std::time::Duration;

use ::axum::http::HeaderMap;
use futures_util::StreamExt;
use replay_ring::CloseReason;
use replay_ring_sse::axum::{SseConfig, SseStream};
use replay_ring_sse::{Epoch, StreamId, StreamIdentity};

/// The body's next item, failing instead of hanging.
async fn next<S, E>(body: &mut S) -> Option<bytes::Bytes>
where
    S: futures_util::Stream<Item = Result<bytes::Bytes, E>> + Unpin,
    E: std::fmt::Debug,
{
    tokio::time::timeout(Duration::from_secs(10), body.next())
        .await
        .expect("the body answers within 10 s")
        .map(|chunk| chunk.unwrap())
}

fn text(chunk: &bytes::Bytes) -> &str {
    std::str::from_utf8(chunk).unwrap()
}

fn stream() -> (SseStream, replay_ring_sse::axum::SseProducer) {
    let me = StreamIdentity::new(StreamId::new("end").unwrap(), Epoch::new(3));
    SseStream::new(me, SseConfig::default()).unwrap()
}

/// A response body on `stream`, past its priming chunk.
async fn body_after_priming(
    stream: &SseStream,
) -> impl futures_util::Stream<Item = Result<bytes::Bytes, ::axum::Error>> + Unpin {
    let mut body = stream
        .respond(&HeaderMap::new())
        .into_body()
        .into_data_stream();
    let priming = next(&mut body).await.expect("the priming chunk");
    assert!(text(&priming).starts_with("id: "));
    body
}

/// Publishes `e1`, `e2`, `e3`, then closes the stream as completed.
async fn send_three_and_complete(mut producer: replay_ring_sse::axum::SseProducer) {
    for n in 1..=3 {
        producer.send(format!("e{n}")).await.unwrap();
    }
    producer.close(CloseReason::Completed).await.unwrap();
}

#[tokio::test]
async fn events_read_after_the_close_end_the_body_in_their_own_chunk() {
    let (stream, producer) = stream();
    let mut body = body_after_priming(&stream).await;
    send_three_and_complete(producer).await;

    let last = next(&mut body).await.expect("the events");
    let last = text(&last);
    let end = last
        .find("event: end\n")
        .expect("the end frame in the events' chunk");
    for n in 1..=3 {
        let at = last.find(&format!("data: e{n}\n")).expect("every event");
        assert!(at < end, "event {n} after the end frame: {last:?}");
    }
    assert!(last.ends_with("\n\n"), "{last:?}");
    assert!(
        next(&mut body).await.is_none(),
        "the body ends after the end frame"
    );
    assert_eq!(stream.stats().frames_written, 3);
}

#[tokio::test]
async fn a_close_after_the_last_read_ends_the_body_in_a_chunk_of_its_own() {
    let (stream, mut producer) = stream();
    let mut body = body_after_priming(&stream).await;
    producer.send("only").await.unwrap();
    let event = next(&mut body).await.expect("the event");
    assert!(text(&event).contains("data: only\n"));
    assert!(!text(&event).contains("event: end"), "{:?}", text(&event));

    producer.close(CloseReason::Completed).await.unwrap();
    let end = next(&mut body).await.expect("the end frame");
    assert!(text(&end).starts_with("event: end\n"), "{:?}", text(&end));
    assert!(
        next(&mut body).await.is_none(),
        "the body ends after the end frame"
    );
}

/// The chunk that carries the last events and the end frame is a write like any other: while the
/// socket has not taken it, the connection has a pending write, so the slow-consumer policy's write
/// timeout cuts a client that stopped reading, and the connection stops capping releases.
#[tokio::test]
async fn a_last_chunk_the_socket_never_takes_is_a_pending_write() {
    let (stream, producer) = stream();
    let mut body = body_after_priming(&stream).await;
    send_three_and_complete(producer).await;
    let last = next(&mut body).await.expect("the events");
    assert!(text(&last).contains("data: e3\n") && text(&last).contains("event: end\n"));
    // The client stops reading: the body is never polled again (the socket does not take the
    // chunk), and the connection stays open. Past the default 5 s write timeout:
    let later = std::time::Instant::now() + Duration::from_secs(6);
    let cut = stream.with_retention(|r| r.cut_slow_consumers(stream.ring(), later));
    assert_eq!(cut, 1, "a connection stalled on its last chunk is cut");
    assert_eq!(stream.with_retention(|r| r.live_connections()), 0);
}

/// Payloads with many line breaks encode larger than their length says (each line is a `data:`
/// field), so a batch the writer sized as fitting one chunk may fill it before its last event:
/// the end frame must wait for the events that did not fit.
#[tokio::test]
async fn multi_line_events_that_overflow_the_chunk_all_come_before_the_end() {
    let (stream, mut producer) = stream();
    let mut body = body_after_priming(&stream).await;
    // 3 payloads of 20,000 bytes (under MAX_CHUNK_BYTES together), each 10,000 lines: about
    // 80 KB encoded each.
    let lines = "a\n".repeat(10_000);
    for n in 1..=3 {
        producer.send(format!("{lines}e{n}")).await.unwrap();
    }
    producer.close(CloseReason::Completed).await.unwrap();
    let mut all = String::new();
    while let Some(chunk) = next(&mut body).await {
        all.push_str(text(&chunk));
    }
    let end = all.find("event: end\n").expect("the end frame");
    for n in 1..=3 {
        let at = all.find(&format!("data: e{n}\n")).expect("every event");
        assert!(at < end, "event {n} after the end frame");
    }
    assert_eq!(stream.stats().frames_written, 3);
}

/// A client that resumes at the head of a completed stream gets 200, the priming event and
/// `event: end`; the classifier calls what it saw completed, not a failed resumption.
#[tokio::test]
async fn a_resume_at_the_head_of_a_completed_stream_classifies_as_completed() {
    use replay_ring_sse::client::{classify, BodyState, Observation, Reconnect, StallClass};

    let (stream, producer) = stream();
    send_three_and_complete(producer).await;

    let mut headers = HeaderMap::new();
    headers.insert("last-event-id", "end.3.3".parse().unwrap());
    let response = stream.respond(&headers);
    let status = response.status().as_u16();
    let header = |name: &str| -> Option<u64> {
        let value = response.headers().get(name)?;
        value.to_str().ok()?.parse().ok()
    };
    let (replay_floor, replay_head) = (header("replay-floor"), header("replay-head"));
    assert_eq!(status, 200);
    assert_eq!(replay_head, Some(3));

    let mut body = response.into_body().into_data_stream();
    let mut wire = String::new();
    while let Some(chunk) = next(&mut body).await {
        wire.push_str(text(&chunk));
    }
    let mut first_event = None;
    let mut ended = false;
    for frame in wire.split("\n\n").filter(|frame| !frame.is_empty()) {
        let field = |name: &str| {
            frame
                .lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(": "))
        };
        if field("event") == Some("end") {
            ended = true;
        } else if let Some(id) = field("id") {
            let seq: u64 = id.rsplit('.').next().unwrap().parse().unwrap();
            // The priming event repeats the cursor; a dispatched event has data.
            if field("data").is_some_and(|data| !data.is_empty()) {
                first_event.get_or_insert(seq);
            }
        }
    }
    assert!(ended, "the body ends with `event: end`: {wire:?}");
    assert_eq!(first_event, None, "{wire:?}");

    let seen = Reconnect {
        cursor: 3,
        status,
        replay_floor,
        replay_head,
        session_durable: true,
        first_event,
        body: BodyState::Completed,
    };
    assert_eq!(
        classify(&Observation::Reconnected(seen)),
        StallClass::Completed
    );
}
