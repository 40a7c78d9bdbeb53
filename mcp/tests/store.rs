//! The store and its streams, without HTTP: ids, replay + live tail, session binding, explicit
//! refusals, backpressure (bounded, then an explicit error, never a drop), priming.
//!
//! Every test runs twice: on the in-process store, and on a store whose event log is on Redis (a
//! private `redis-server` per test, from `redis/tests/common`), which must behave the same.

use std::time::Duration;

use futures::StreamExt;
use replay_ring::CloseReason;
use replay_ring_mcp::{RedisEventLog, RefusalReason, RingEventStore, StoreConfig};
use replay_ring_sse::{Epoch, ResumeDecision, RetentionConfig, SlowConsumerPolicy};
use rmcp::model::ServerJsonRpcMessage;
use rmcp::transport::streamable_http_server::session::{EventStore, ServerSseMessage};

mod messages;
#[path = "../../redis/tests/common/mod.rs"]
mod redis_support;

use messages::{progress, progress_of, response};
use redis_support::RedisServer;

use RefusalReason::Decision;

const LIMIT: Duration = Duration::from_secs(5);

/// Which event log a test's store runs on.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Ring,
    Redis,
}

/// A store, and the redis-server its event log is on (stopped when the fixture drops).
struct Fixture {
    store: RingEventStore,
    redis: Option<RedisServer>,
}

impl Fixture {
    async fn new(kind: Kind, config: StoreConfig, epoch: Epoch) -> Fixture {
        match kind {
            Kind::Ring => Fixture {
                store: RingEventStore::with_epoch(config, epoch),
                redis: None,
            },
            Kind::Redis => {
                let server = RedisServer::start();
                let log = RedisEventLog::connect(&server.url(), Default::default())
                    .await
                    .expect("connect to redis");
                Fixture {
                    store: RingEventStore::with_redis_epoch(config, log, epoch),
                    redis: Some(server),
                }
            }
        }
    }
}

async fn store(kind: Kind, capacity: usize, backpressure: Duration) -> Fixture {
    let config = StoreConfig {
        capacity,
        retention: RetentionConfig {
            resumption_window: Duration::from_secs(30),
            backpressure_timeout: backpressure,
        },
        ..StoreConfig::default()
    };
    Fixture::new(kind, config, Epoch::new(0xabc)).await
}

/// Runs each test on both event logs.
macro_rules! on_both_logs {
    ($($name:ident),* $(,)?) => {
        mod ring {
            $( #[tokio::test] async fn $name() { super::$name(super::Kind::Ring).await } )*
        }
        mod redis {
            $( #[tokio::test] async fn $name() { super::$name(super::Kind::Redis).await } )*
        }
    };
}

async fn next(
    s: &mut (impl futures::Stream<Item = ServerSseMessage> + Unpin),
) -> Option<ServerSseMessage> {
    tokio::time::timeout(LIMIT, s.next())
        .await
        .expect("stream stalled")
}

async fn ids_are_per_stream_wire_ids_and_gap_free(kind: Kind) {
    let f = store(kind, 64, LIMIT).await;
    let s = &f.store;
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

async fn replay_is_strictly_after_the_cursor_on_its_stream_then_live_until_the_response(
    kind: Kind,
) {
    let f = store(kind, 64, LIMIT).await;
    let s = &f.store;
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

async fn resume_at_head_is_a_no_op_that_continues_live(kind: Kind) {
    let f = store(kind, 64, LIMIT).await;
    let s = &f.store;
    let id = s.store_event("req-a", &progress(1)).await.unwrap();
    let mut replay = s.replay_events_after(&id).await.unwrap();
    s.store_event("req-a", &progress(2)).await.unwrap();
    assert_eq!(progress_of(&next(&mut replay).await.unwrap()), Some(2));
}

async fn refusals_are_typed_below_floor_ahead_malformed_lost(kind: Kind) {
    let f = store(kind, 64, LIMIT).await;
    let s = &f.store;
    for p in 1..=6 {
        s.store_event("req-a", &progress(p)).await.unwrap();
    }
    // A resume with 4 acknowledges 1..=4: a later resume from 1 is below the floor.
    drop(s.resume_stream(None, b"s1.abc.4").unwrap());
    let gap = s.resume_stream(None, b"s1.abc.1").unwrap_err();
    assert_eq!(
        gap.reason,
        Decision(ResumeDecision::Gap {
            requested: 1,
            floor: 5,
            head: 6
        })
    );
    let ahead = s.resume_stream(None, b"s1.abc.9").unwrap_err();
    assert_eq!(
        ahead.reason,
        Decision(ResumeDecision::Mismatch {
            requested: 9,
            head: 6
        })
    );
    assert!(matches!(
        s.resume_stream(None, b"7/0").unwrap_err().reason,
        Decision(ResumeDecision::InvalidCursor(_))
    ));
    assert!(matches!(
        s.resume_stream(None, b"s1.abd.2").unwrap_err().reason,
        Decision(ResumeDecision::StreamLost(_))
    ));
    assert!(matches!(
        s.resume_stream(None, b"s9.abc.2").unwrap_err().reason,
        Decision(ResumeDecision::StreamLost(_))
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

async fn a_resume_is_bound_to_the_session_of_its_stream(kind: Kind) {
    let f = store(kind, 64, LIMIT).await;
    let s = &f.store;
    // The GET stream names its session; request streams are bound by the session manager.
    let id = s.store_event("sess-1:common", &progress(1)).await.unwrap();
    s.store_event("sess-1:common", &progress(2)).await.unwrap();
    assert!(s.check_resume(Some("sess-1"), id.as_bytes()).is_ok());
    let foreign = s.check_resume(Some("sess-2"), id.as_bytes()).unwrap_err();
    assert!(
        matches!(foreign.reason, RefusalReason::ForeignSession { .. }),
        "{foreign:?}"
    );
    assert_eq!((foreign.code(), foreign.state), ("stream_lost", None));
    assert!(s.resume_stream(Some("sess-2"), id.as_bytes()).is_err());
    // Nor is it anyone's without a session (rmcp's stateless replay calls the store with none).
    for refused in [
        s.check_resume(None, id.as_bytes()).map(drop),
        s.resume_stream(None, id.as_bytes()).map(drop),
    ] {
        let refused = refused.unwrap_err();
        assert!(
            matches!(refused.reason, RefusalReason::ForeignSession { .. }),
            "{refused:?}"
        );
        assert_eq!(refused.state, None);
    }
    assert_eq!(s.metrics().resumes_foreign_session, 4);
    let mut live = s.resume_stream(Some("sess-1"), id.as_bytes()).unwrap();
    assert_eq!(progress_of(&next(&mut live).await.unwrap()), Some(2));
    // Dropping the session forgets its streams. The GET stream answers no request, so its live
    // connection ends with a retry hint, not with a JSON-RPC error (one without an id is not a
    // message the clients accept); the reconnect is refused explicitly.
    s.drop_session("sess-1");
    let last = next(&mut live).await.unwrap();
    assert!(last.message.is_none(), "{last:?}");
    assert_eq!(last.retry, Some(StoreConfig::default().retry));
    assert!(next(&mut live).await.is_none());
    let unknown = s.check_resume(Some("sess-1"), id.as_bytes()).unwrap_err();
    assert!(
        matches!(unknown.reason, Decision(ResumeDecision::StreamLost(_))),
        "{unknown:?}"
    );
    // Another session's stream and a stream that does not exist read the same, word for word.
    assert_eq!(foreign.to_string(), unknown.to_string());
}

async fn a_resume_finding_every_reader_slot_taken_is_refused_as_busy(kind: Kind) {
    let f = store(kind, 64, LIMIT).await;
    let s = &f.store;
    let id = s.store_event("sess-1:common", &progress(1)).await.unwrap();
    s.store_event("sess-1:common", &progress(2)).await.unwrap();
    let limit = StoreConfig::default().max_readers;
    let mut held: Vec<_> = (0..limit)
        .map(|_| s.resume_stream(Some("sess-1"), id.as_bytes()).unwrap())
        .collect();
    // Refused by the check the guard runs before rmcp, not only by the resume itself.
    let busy = s.check_resume(Some("sess-1"), id.as_bytes()).unwrap_err();
    assert_eq!(
        busy.reason,
        Decision(ResumeDecision::Busy { limit }),
        "{busy:?}"
    );
    assert_eq!(busy.code(), "too_many_readers");
    assert_eq!(s.metrics().resumes_busy, 1);
    held.pop();
    assert!(s.check_resume(Some("sess-1"), id.as_bytes()).is_ok());
}

async fn full_window_backpressures_then_ends_the_stream_explicitly(kind: Kind) {
    let bound = Duration::from_millis(150);
    let f = store(kind, 4, bound).await;
    let s = &f.store;
    // No client ever reads this stream: the bound counts from its creation.
    let started = std::time::Instant::now();
    s.store_event("req-a", &ServerSseMessage::retry(Duration::from_secs(1)))
        .await
        .unwrap();
    for p in 1..=3 {
        s.store_event("req-a", &progress(p)).await.unwrap();
    }
    let err = s.store_event("req-a", &progress(4)).await.unwrap_err();
    assert!(
        started.elapsed() >= bound,
        "gave up before the bound: {:?}",
        started.elapsed()
    );
    assert!(err.to_string().contains("backpressure"), "{err}");
    let m = s.metrics();
    assert_eq!((m.backpressure_waits, m.backpressure_timeouts), (1, 1));
    // Nothing was dropped: a client that comes back gets all four events, then the end of the
    // stream (this stream answers no request, so a retry hint; see the HTTP tests for the
    // JSON-RPC error a request stream ends with).
    let mut replay = s.replay_events_after("s1.abc.0").await.unwrap();
    let mut ids = Vec::new();
    for _ in 0..4 {
        ids.push(next(&mut replay).await.unwrap().event_id.unwrap());
    }
    assert_eq!(ids, ["s1.abc.1", "s1.abc.2", "s1.abc.3", "s1.abc.4"]);
    let last = next(&mut replay).await.unwrap();
    assert!(
        last.message.is_none() && last.event_id.is_none(),
        "{last:?}"
    );
    assert!(last.retry.is_some());
    assert!(next(&mut replay).await.is_none());
    assert_eq!(s.metrics().streams_ended_with_error, 1);
    // A resume at the last id is told the stream ended, and why; never an empty stream.
    let ended = s.resume_stream(None, b"s1.abc.4").unwrap_err();
    assert!(
        matches!(
            ended.reason,
            RefusalReason::StreamEnded(CloseReason::BackpressureTimeout { .. })
        ),
        "{ended:?}"
    );
    assert_eq!(ended.code(), "stream_closed");
}

async fn a_resume_at_the_last_id_of_a_completed_stream_is_refused_as_complete(kind: Kind) {
    let f = store(kind, 64, LIMIT).await;
    let s = &f.store;
    s.store_event("req-a", &progress(1)).await.unwrap();
    let last = s.store_event("req-a", &response(7)).await.unwrap();
    // From the middle: replay through the response, then the end.
    let mut replay = s.resume_stream(None, b"s1.abc.1").unwrap();
    assert_eq!(
        next(&mut replay).await.unwrap().event_id.as_deref(),
        Some(last.as_str())
    );
    assert!(next(&mut replay).await.is_none());
    // At the response's id: nothing will ever follow, and the answer says so.
    for refusal in [
        s.check_resume(None, last.as_bytes()).unwrap_err(),
        s.resume_stream(None, last.as_bytes()).unwrap_err(),
    ] {
        assert_eq!(
            refusal.reason,
            RefusalReason::StreamEnded(CloseReason::Completed)
        );
        assert_eq!(refusal.code(), "stream_complete");
        assert_eq!(refusal.state.map(|st| (st.floor, st.head)), Some((2, 2)));
    }
    assert_eq!(s.metrics().resumes_stream_ended, 2);
    // Past the response's id: not this stream's cursor, whether the stream ended or not (409).
    for cursor in ["s1.abc.3", "s1.abc.18446744073709551615"] {
        for refusal in [
            s.check_resume(None, cursor.as_bytes()).unwrap_err(),
            s.resume_stream(None, cursor.as_bytes()).unwrap_err(),
        ] {
            assert!(
                matches!(
                    refusal.reason,
                    RefusalReason::Decision(ResumeDecision::Mismatch { head: 2, .. })
                ),
                "{cursor}: {refusal:?}"
            );
            assert_eq!(refusal.code(), "cursor_ahead_of_head");
        }
        assert!(s.replay_events_after(cursor).await.is_err(), "{cursor}");
    }
    assert_eq!(s.metrics().resumes_stream_ended, 2);
}

/// Polls `cond` every few milliseconds until it holds or `limit` passes.
async fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    cond()
}

async fn ended_streams_of_every_kind_are_forgotten_after_the_ttl(kind: Kind) {
    let f = Fixture::new(
        kind,
        StoreConfig {
            capacity: 2,
            retention: RetentionConfig {
                resumption_window: Duration::from_secs(30),
                backpressure_timeout: Duration::from_millis(20),
            },
            // Long enough that the setup below (a Redis round trip per event, a 20 ms
            // backpressure wait) cannot outlast it on a loaded machine: opening a stream sweeps
            // expired ones, so a shorter TTL could forget "done" before the first check.
            completed_ttl: Duration::from_secs(1),
            ..StoreConfig::default()
        },
        Epoch::new(0xabc),
    )
    .await;
    let s = &f.store;
    // One stream completes, one is closed by backpressure, one stays open.
    s.store_event("done", &response(1)).await.unwrap();
    for p in 1..=2 {
        s.store_event("stalled", &progress(p)).await.unwrap();
    }
    assert!(s.store_event("stalled", &progress(3)).await.is_err());
    s.store_event("open", &progress(1)).await.unwrap();
    assert_eq!((s.metrics().streams_open, s.metrics().retained), (3, 4));
    let forgotten = eventually(LIMIT, || {
        s.maintain();
        s.metrics().streams_open == 1
    })
    .await;
    let m = s.metrics();
    assert!(forgotten, "ended streams were kept: {m:?}");
    assert_eq!((m.streams_expired, m.retained), (2, 1));
    assert!(matches!(
        s.resume_stream(None, b"s2.abc.1").unwrap_err().reason,
        Decision(ResumeDecision::StreamLost(_))
    ));
}

async fn streams_that_filled_up_together_time_out_together(kind: Kind) {
    // rmcp's session worker stores one event at a time. Streams that filled up while it waited on
    // another stream have been backpressured all along: their bound runs concurrently, so K
    // stalled streams end after about one bound, not K bounds.
    const K: u64 = 8;
    let bound = Duration::from_millis(300);
    let f = store(kind, 4, bound).await;
    let s = &f.store;
    let started = std::time::Instant::now();
    for k in 0..K {
        for p in 1..=4 {
            s.store_event(&format!("req-{k}"), &progress(p))
                .await
                .unwrap();
        }
    }
    for k in 0..K {
        let err = s
            .store_event(&format!("req-{k}"), &progress(5))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("backpressure"), "{err}");
    }
    let elapsed = started.elapsed();
    assert!(elapsed >= bound, "{elapsed:?}");
    assert!(
        elapsed < bound * 3,
        "{K} stalled streams took {elapsed:?}: their timeouts ran one after the other"
    );
    assert_eq!(s.metrics().backpressure_timeouts, K);
}

async fn an_acknowledging_resume_frees_a_waiting_producer(kind: Kind) {
    let f = store(kind, 4, LIMIT).await;
    let s = &f.store;
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

async fn a_client_that_keeps_up_paces_a_fast_stream_rather_than_ending_it(kind: Kind) {
    // Sent events stay replayable for the window, so four slots hold 4 events per 300 ms: a
    // stream pushing faster fills up with its client reading everything, and waits longer than
    // the 100 ms bound for each release.
    let f = Fixture::new(
        kind,
        StoreConfig {
            capacity: 4,
            retention: RetentionConfig {
                resumption_window: Duration::from_millis(300),
                backpressure_timeout: Duration::from_millis(100),
            },
            ..StoreConfig::default()
        },
        Epoch::new(0xabc),
    )
    .await;
    let s = &f.store;
    s.store_event("req-a", &progress(1)).await.unwrap();
    let mut client = s.replay_events_after("s1.abc.0").await.unwrap();
    const EVENTS: u64 = 10;
    let reader = tokio::spawn(async move {
        let mut seen = Vec::new();
        while seen.len() < EVENTS as usize {
            seen.push(progress_of(&next(&mut client).await.unwrap()).unwrap());
        }
        (seen, client)
    });
    for p in 2..=EVENTS {
        s.store_event("req-a", &progress(p)).await.unwrap();
    }
    let (seen, client) = reader.await.unwrap();
    assert_eq!(seen, (1..=EVENTS).collect::<Vec<_>>());
    let m = s.metrics();
    assert!(m.backpressure_waits >= 2, "the window never filled: {m:?}");
    assert_eq!(m.backpressure_timeouts, 0);
    // The client leaves: a stream nobody reads ends at the plain bound, explicitly.
    drop(client);
    let mut p = EVENTS;
    let err = loop {
        p += 1;
        match s.store_event("req-a", &progress(p)).await {
            Ok(_) => assert!(p < EVENTS + 8, "still accepting events at {p}"),
            Err(e) => break e,
        }
    };
    assert!(err.to_string().contains("backpressure"), "{err}");
    assert_eq!(s.metrics().backpressure_timeouts, 1);
}

async fn frames_per_connection_ends_each_connection_with_a_retry_hint(kind: Kind) {
    let f = Fixture::new(
        kind,
        StoreConfig {
            frames_per_connection: Some(2),
            retry: Duration::from_millis(250),
            ..StoreConfig::default()
        },
        Epoch::new(1),
    )
    .await;
    let s = &f.store;
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

/// Once nobody has been connected for a whole resumption window, a session's GET stream releases
/// everything (no client that left may still ask), with a Redis log too; a request stream never
/// does, since rmcp can hand its ids to a client without a connection the store sees.
async fn only_the_get_stream_is_released_for_want_of_a_connection(kind: Kind) {
    const WINDOW: Duration = Duration::from_millis(200);
    let f = Fixture::new(
        kind,
        StoreConfig {
            retention: RetentionConfig {
                resumption_window: WINDOW,
                backpressure_timeout: LIMIT,
            },
            ..StoreConfig::default()
        },
        Epoch::new(0xabc),
    )
    .await;
    let s = &f.store;
    let mut request = Vec::new();
    for p in 1..=3 {
        request.push(s.store_event("req-a", &progress(p)).await.unwrap());
    }
    let get = s.store_event("sess:common", &progress(1)).await.unwrap();
    // The id before the GET stream's first event: `<stream>.<epoch>.0`.
    let (stream_and_epoch, _) = get.rsplit_once('.').unwrap();
    let before_first = format!("{stream_and_epoch}.0");
    let created = std::time::Instant::now();
    // The passage of time is what this test is about: nothing to wait for but the clock.
    tokio::time::sleep(WINDOW + Duration::from_millis(50)).await;
    assert!(created.elapsed() > WINDOW);
    s.maintain();
    assert!(
        s.check_resume(None, request[0].as_bytes()).is_ok(),
        "request stream kept"
    );
    let refused = s
        .check_resume(Some("sess"), before_first.as_bytes())
        .unwrap_err();
    assert_eq!(refused.code(), "replay_gap", "{get}: {refused:?}");
}

/// A push waiting for room when its session is deleted (the window is full and nothing will be
/// released for an hour) ends the stream at once, and the stream's live connection gets every
/// event, then its end, instead of idling until the backpressure bound.
async fn deleting_a_session_ends_a_push_waiting_for_room(kind: Kind) {
    let f = store(kind, 4, Duration::from_secs(3600)).await;
    let s = &f.store;
    let first = s.store_event("sess-1:common", &progress(1)).await.unwrap();
    // From before the first event: a resume acknowledges its cursor, which would make room. It
    // connects before the window is full (a GET stream whose window fills before anyone
    // connected is released, not waited on).
    let (stream_and_epoch, _) = first.rsplit_once('.').unwrap();
    let before_first = format!("{stream_and_epoch}.0");
    let mut live = s
        .resume_stream(Some("sess-1"), before_first.as_bytes())
        .unwrap();
    for p in 2..=4 {
        s.store_event("sess-1:common", &progress(p)).await.unwrap();
    }
    let fifth = progress(5);
    let push = s.store_event("sess-1:common", &fifth);
    tokio::pin!(push);
    while s.metrics().backpressure_waits == 0 {
        assert!(futures::poll!(&mut push).is_pending());
        tokio::task::yield_now().await;
    }
    assert!(futures::poll!(&mut push).is_pending(), "waits for room");
    s.drop_session("sess-1");
    let refused = tokio::time::timeout(LIMIT, push)
        .await
        .expect("ended at once, not at the bound")
        .unwrap_err();
    assert!(refused.to_string().contains("session closed"), "{refused}");
    for p in 1..=4 {
        assert_eq!(progress_of(&next(&mut live).await.unwrap()), Some(p));
    }
    // The GET stream answers no request: its end is a retry hint.
    let last = next(&mut live).await.unwrap();
    assert!(last.message.is_none(), "{last:?}");
    assert!(next(&mut live).await.is_none());
}

/// A push past its wait for room when its session is deleted (here: waiting for Redis to take
/// its event) cannot end the stream itself; the stream is closed once that push is done, so its
/// live connection gets every event, then its end, instead of idling forever.
#[tokio::test]
async fn deleting_a_session_during_a_push_closes_the_stream_once_the_push_is_done() {
    let f = store(Kind::Redis, 16, LIMIT).await;
    let s = &f.store;
    let first = s.store_event("sess-1:common", &progress(1)).await.unwrap();
    let (stream_and_epoch, _) = first.rsplit_once('.').unwrap();
    let before_first = format!("{stream_and_epoch}.0");
    let mut live = s
        .resume_stream(Some("sess-1"), before_first.as_bytes())
        .unwrap();
    assert_eq!(progress_of(&next(&mut live).await.unwrap()), Some(1));
    // Redis holds writes back: the next push is in the ring and waits for Redis to take it.
    let redis = f.redis.as_ref().unwrap();
    let _: () = ::redis::cmd("CLIENT")
        .arg(&["PAUSE", "1000", "WRITE"])
        .query(&mut redis.raw())
        .unwrap();
    let second = progress(2);
    let push = s.store_event("sess-1:common", &second);
    tokio::pin!(push);
    // The ring's head moves before Redis is asked.
    while s
        .check_resume(Some("sess-1"), first.as_bytes())
        .is_ok_and(|state| state.head < 2)
    {
        assert!(futures::poll!(&mut push).is_pending());
        tokio::task::yield_now().await;
    }
    s.drop_session("sess-1");
    tokio::time::timeout(LIMIT, push)
        .await
        .expect("Redis takes writes again")
        .unwrap();
    assert_eq!(progress_of(&next(&mut live).await.unwrap()), Some(2));
    let last = next(&mut live).await.unwrap();
    assert!(last.message.is_none(), "{last:?}");
    assert!(next(&mut live).await.is_none());
}

on_both_logs!(
    ids_are_per_stream_wire_ids_and_gap_free,
    replay_is_strictly_after_the_cursor_on_its_stream_then_live_until_the_response,
    resume_at_head_is_a_no_op_that_continues_live,
    refusals_are_typed_below_floor_ahead_malformed_lost,
    a_resume_is_bound_to_the_session_of_its_stream,
    full_window_backpressures_then_ends_the_stream_explicitly,
    a_resume_at_the_last_id_of_a_completed_stream_is_refused_as_complete,
    ended_streams_of_every_kind_are_forgotten_after_the_ttl,
    streams_that_filled_up_together_time_out_together,
    an_acknowledging_resume_frees_a_waiting_producer,
    frames_per_connection_ends_each_connection_with_a_retry_hint,
    only_the_get_stream_is_released_for_want_of_a_connection,
    a_resume_finding_every_reader_slot_taken_is_refused_as_busy,
    a_client_that_keeps_up_paces_a_fast_stream_rather_than_ending_it,
    deleting_a_session_ends_a_push_waiting_for_room,
);

/// Settings no stream can work with are refused when the store is made, not by a
/// 500 on every request.
#[test]
fn a_store_refuses_settings_no_stream_could_be_built_with() {
    for config in [
        StoreConfig {
            capacity: 0,
            ..StoreConfig::default()
        },
        StoreConfig {
            max_readers: 0,
            ..StoreConfig::default()
        },
        // A `retry:` hint browser timers cannot hold, and slow-consumer rules that cannot work.
        StoreConfig {
            retry: Duration::from_millis(1 << 31),
            ..StoreConfig::default()
        },
        StoreConfig {
            slow_consumer: SlowConsumerPolicy {
                max_lag_percent: Some(0),
                ..SlowConsumerPolicy::default()
            },
            ..StoreConfig::default()
        },
        StoreConfig {
            slow_consumer: SlowConsumerPolicy {
                write_timeout: Some(Duration::ZERO),
                ..SlowConsumerPolicy::default()
            },
            ..StoreConfig::default()
        },
    ] {
        assert!(config.check().is_err(), "{config:?}");
        let made = std::panic::catch_unwind(|| RingEventStore::new(config));
        assert!(made.is_err(), "RingEventStore::new accepted {config:?}");
    }
    let config = StoreConfig {
        capacity: 1,
        max_readers: 1,
        ..StoreConfig::default()
    };
    assert!(config.check().is_ok());
    assert_eq!(RingEventStore::new(config).config().capacity, 1);
}
