//! The store and its streams, without HTTP: ids, replay + live tail, session binding, explicit
//! refusals, backpressure (bounded, then an explicit error, never a drop), priming.

use std::time::Duration;

use futures::StreamExt;
use replay_ring_mcp::{RingEventStore, StoreConfig, STREAM_BROKEN_CODE};
use replay_ring_sse::{Epoch, ResumeDecision, RetentionConfig};
use rmcp::model::ServerJsonRpcMessage;
use rmcp::transport::streamable_http_server::session::{EventStore, ServerSseMessage};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(5);

fn progress(p: u64) -> ServerSseMessage {
    let msg: ServerJsonRpcMessage = serde_json::from_value(json!({
        "jsonrpc": "2.0", "method": "notifications/progress",
        "params": {"progressToken": "t", "progress": p}
    }))
    .expect("progress notification");
    ServerSseMessage::from_message(msg)
}

fn response(id: u64) -> ServerSseMessage {
    let msg: ServerJsonRpcMessage =
        serde_json::from_value(json!({"jsonrpc": "2.0", "id": id, "result": {}}))
            .expect("response");
    ServerSseMessage::from_message(msg)
}

fn progress_of(m: &ServerSseMessage) -> Option<u64> {
    let v = serde_json::to_value(m.message.as_deref()?).ok()?;
    v["params"]["progress"].as_f64().map(|p| p as u64)
}

fn store(capacity: usize, backpressure: Duration) -> RingEventStore {
    RingEventStore::with_epoch(
        StoreConfig {
            capacity,
            retention: RetentionConfig {
                resumption_window: Duration::from_secs(30),
                backpressure_timeout: backpressure,
            },
            ..StoreConfig::default()
        },
        Epoch::new(0xabc),
    )
}

async fn next(
    s: &mut (impl futures::Stream<Item = ServerSseMessage> + Unpin),
) -> Option<ServerSseMessage> {
    tokio::time::timeout(LIMIT, s.next())
        .await
        .expect("stream stalled")
}

#[tokio::test]
async fn ids_are_per_stream_wire_ids_and_gap_free() {
    let s = store(64, LIMIT);
    let a1 = s
        .store_event("req-a", &ServerSseMessage::retry(Duration::from_secs(1)))
        .await
        .unwrap();
    let a2 = s.store_event("req-a", &progress(1)).await.unwrap();
    let b1 = s.store_event("req-b", &progress(1)).await.unwrap();
    let a3 = s.store_event("req-a", &progress(2)).await.unwrap();
    assert_eq!(
        (a1.as_str(), a2.as_str(), a3.as_str()),
        ("s1.abc.1", "s1.abc.2", "s1.abc.3")
    );
    assert_eq!(b1, "s2.abc.1");
    let m = s.metrics();
    assert_eq!(
        (m.events_stored, m.priming_stored, m.streams_open),
        (4, 1, 2)
    );
}

#[tokio::test]
async fn replay_is_strictly_after_the_cursor_on_its_stream_then_live_until_the_response() {
    let s = store(64, LIMIT);
    s.store_event("req-a", &ServerSseMessage::retry(Duration::from_secs(1)))
        .await
        .unwrap();
    for p in 1..=3 {
        s.store_event("req-a", &progress(p)).await.unwrap();
        s.store_event("req-b", &progress(100 + p)).await.unwrap();
    }
    // The client saw the priming event and progress 1 (id 2).
    let mut replay = s.replay_events_after("s1.abc.2").await.unwrap();
    let first = next(&mut replay).await.unwrap();
    assert_eq!(first.event_id.as_deref(), Some("s1.abc.3"));
    assert_eq!(progress_of(&first), Some(2));
    assert_eq!(progress_of(&next(&mut replay).await.unwrap()), Some(3));
    // Live: events stored after the resume arrive on the same connection.
    let store2 = s.clone();
    let producer = tokio::spawn(async move {
        store2.store_event("req-a", &progress(4)).await.unwrap();
        store2.store_event("req-a", &response(7)).await.unwrap();
    });
    let live = next(&mut replay).await.unwrap();
    assert_eq!(
        (live.event_id.as_deref(), progress_of(&live)),
        (Some("s1.abc.5"), Some(4))
    );
    let last = next(&mut replay).await.unwrap();
    assert_eq!(last.event_id.as_deref(), Some("s1.abc.6"));
    assert!(matches!(
        last.message.as_deref(),
        Some(ServerJsonRpcMessage::Response(_))
    ));
    // The stream completed with the response: the connection ends cleanly.
    assert!(next(&mut replay).await.is_none());
    producer.await.unwrap();
    // After the response the stream is closed for writes.
    assert!(s.store_event("req-a", &progress(9)).await.is_err());
}

#[tokio::test]
async fn resume_at_head_is_a_no_op_that_continues_live() {
    let s = store(64, LIMIT);
    let id = s.store_event("req-a", &progress(1)).await.unwrap();
    let mut replay = s.replay_events_after(&id).await.unwrap();
    s.store_event("req-a", &progress(2)).await.unwrap();
    assert_eq!(progress_of(&next(&mut replay).await.unwrap()), Some(2));
}

#[tokio::test]
async fn refusals_are_typed_below_floor_ahead_malformed_lost() {
    let s = store(64, LIMIT);
    for p in 1..=6 {
        s.store_event("req-a", &progress(p)).await.unwrap();
    }
    // A resume with 4 acknowledges 1..=4: a later resume from 1 is below the floor.
    drop(s.resume_stream(None, b"s1.abc.4").unwrap());
    let gap = s.resume_stream(None, b"s1.abc.1").unwrap_err();
    assert_eq!(
        gap.decision,
        ResumeDecision::Gap {
            requested: 1,
            floor: 5,
            head: 6
        }
    );
    let ahead = s.resume_stream(None, b"s1.abc.9").unwrap_err();
    assert_eq!(
        ahead.decision,
        ResumeDecision::Mismatch {
            requested: 9,
            head: 6
        }
    );
    assert!(matches!(
        s.resume_stream(None, b"7/0").unwrap_err().decision,
        ResumeDecision::InvalidCursor(_)
    ));
    assert!(matches!(
        s.resume_stream(None, b"s1.abd.2").unwrap_err().decision,
        ResumeDecision::StreamLost(_)
    ));
    assert!(matches!(
        s.resume_stream(None, b"s9.abc.2").unwrap_err().decision,
        ResumeDecision::StreamLost(_)
    ));
    // rmcp's EventStore entry point refuses too (an error, not an empty stream).
    assert!(s.replay_events_after("s1.abc.1").await.is_err());
    let m = s.metrics();
    assert_eq!(
        (
            m.resumes_below_floor,
            m.resumes_ahead_of_head,
            m.resumes_malformed
        ),
        (2, 1, 1)
    );
    assert_eq!(m.resumes_stream_lost, 2);
}

#[tokio::test]
async fn a_resume_is_bound_to_the_session_of_its_stream() {
    let s = store(64, LIMIT);
    // The GET stream names its session; request streams are bound by the session manager.
    let id = s.store_event("sess-1:common", &progress(1)).await.unwrap();
    s.store_event("sess-1:common", &progress(2)).await.unwrap();
    assert!(s.check_resume(Some("sess-1"), id.as_bytes()).is_ok());
    let foreign = s.check_resume(Some("sess-2"), id.as_bytes()).unwrap_err();
    assert!(foreign.foreign_session, "{foreign:?}");
    assert!(s.resume_stream(Some("sess-2"), id.as_bytes()).is_err());
    assert_eq!(s.metrics().resumes_foreign_session, 2);
    // Dropping the session forgets its streams; a live reader ends with an explicit error.
    let mut live = s.resume_stream(Some("sess-1"), id.as_bytes()).unwrap();
    assert_eq!(progress_of(&next(&mut live).await.unwrap()), Some(2));
    s.drop_session("sess-1");
    let last = next(&mut live).await.unwrap();
    let v = serde_json::to_value(last.message.as_deref().unwrap()).unwrap();
    assert_eq!(v["error"]["code"], STREAM_BROKEN_CODE, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("session closed"),
        "{v}"
    );
    assert!(next(&mut live).await.is_none());
    assert!(matches!(
        s.check_resume(Some("sess-1"), id.as_bytes())
            .unwrap_err()
            .decision,
        ResumeDecision::StreamLost(_)
    ));
}

#[tokio::test]
async fn full_window_backpressures_then_ends_the_stream_with_an_explicit_error() {
    let bound = Duration::from_millis(150);
    let s = store(4, bound);
    s.store_event("req-a", &ServerSseMessage::retry(Duration::from_secs(1)))
        .await
        .unwrap();
    for p in 1..=3 {
        s.store_event("req-a", &progress(p)).await.unwrap();
    }
    let started = std::time::Instant::now();
    let err = s.store_event("req-a", &progress(4)).await.unwrap_err();
    assert!(
        started.elapsed() >= bound,
        "gave up before the bound: {:?}",
        started.elapsed()
    );
    assert!(err.to_string().contains("backpressure"), "{err}");
    let m = s.metrics();
    assert_eq!((m.backpressure_waits, m.backpressure_timeouts), (1, 1));
    // Nothing was dropped: a client that comes back gets all four events, then the explicit error.
    let mut replay = s.replay_events_after("s1.abc.0").await.unwrap();
    let ids: Vec<_> = [
        next(&mut replay).await.unwrap(),
        next(&mut replay).await.unwrap(),
        next(&mut replay).await.unwrap(),
        next(&mut replay).await.unwrap(),
    ]
    .iter()
    .map(|m| m.event_id.clone().unwrap())
    .collect();
    assert_eq!(ids, ["s1.abc.1", "s1.abc.2", "s1.abc.3", "s1.abc.4"]);
    let last = next(&mut replay).await.unwrap();
    let v = serde_json::to_value(last.message.as_deref().unwrap()).unwrap();
    assert_eq!(v["error"]["code"], STREAM_BROKEN_CODE);
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("backpressure"),
        "{v}"
    );
    assert!(next(&mut replay).await.is_none());
    assert!(s.metrics().streams_ended_with_error >= 1);
}

#[tokio::test]
async fn an_acknowledging_resume_frees_a_waiting_producer() {
    let s = store(4, LIMIT);
    for p in 1..=4 {
        s.store_event("req-a", &progress(p)).await.unwrap();
    }
    let s2 = s.clone();
    let waiting = tokio::spawn(async move { s2.store_event("req-a", &progress(5)).await });
    // The resume acknowledges 1..=3, which frees space; the producer gets id 5.
    let mut replay = s.resume_stream(None, b"s1.abc.3").unwrap();
    let id = tokio::time::timeout(LIMIT, waiting)
        .await
        .expect("producer still blocked")
        .unwrap()
        .unwrap();
    assert_eq!(id, "s1.abc.5");
    assert_eq!(progress_of(&next(&mut replay).await.unwrap()), Some(4));
    assert_eq!(progress_of(&next(&mut replay).await.unwrap()), Some(5));
}

#[tokio::test]
async fn frames_per_connection_ends_each_connection_with_a_retry_hint() {
    let s = RingEventStore::with_epoch(
        StoreConfig {
            frames_per_connection: Some(2),
            retry: Duration::from_millis(250),
            ..StoreConfig::default()
        },
        Epoch::new(1),
    );
    for p in 1..=3 {
        s.store_event("req-a", &progress(p)).await.unwrap();
    }
    let mut replay = s.replay_events_after("s1.1.0").await.unwrap();
    assert_eq!(progress_of(&next(&mut replay).await.unwrap()), Some(1));
    assert_eq!(progress_of(&next(&mut replay).await.unwrap()), Some(2));
    let hint = next(&mut replay).await.unwrap();
    assert_eq!(
        (hint.event_id, hint.retry),
        (None, Some(Duration::from_millis(250)))
    );
    assert!(hint.message.is_none());
    assert!(next(&mut replay).await.is_none());
    assert_eq!(s.metrics().server_disconnects, 1);
}
