//! Server side: the resume decision (snapshot and against a real ring), its HTTP mapping, and the
//! retention policy with injected time.

use std::time::{Duration, Instant};

use replay_ring::{CloseReason, ReadError, ReplayRing, ResumeError};
use replay_ring_sse::{
    decide, resume, BackpressureClock, Epoch, HttpResponse, LastEventIdError, ResumeDecision,
    Retention, RetentionConfig, SlowConsumerPolicy, StreamId, StreamIdentity, StreamState,
    CHECKPOINTS,
};

fn me() -> StreamIdentity {
    StreamIdentity::new(StreamId::new("events").unwrap(), Epoch::new(0xa))
}

/// Stream `me()` retaining `floor..=head`.
fn window(floor: u64, head: u64) -> StreamState {
    StreamState {
        identity: me(),
        floor,
        head,
    }
}

#[test]
fn decision_table() {
    let state = window(65, 130);
    let empty = window(1, 0);
    let drained = window(131, 130);
    type Case<'a> = (Option<&'a StreamState>, Option<&'a [u8]>, ResumeDecision);
    let cases: Vec<Case<'_>> = vec![
        (Some(&state), None, ResumeDecision::Live { head: 130 }),
        (
            Some(&state),
            Some(b"events.a.64"),
            ResumeDecision::Replay {
                from: 65,
                through: 130,
            },
        ),
        (
            Some(&state),
            Some(b"events.a.129"),
            ResumeDecision::Replay {
                from: 130,
                through: 130,
            },
        ),
        (
            Some(&state),
            Some(b"events.a.130"),
            ResumeDecision::NoOp { head: 130 },
        ),
        (
            Some(&state),
            Some(b"events.a.63"),
            ResumeDecision::Gap {
                requested: 63,
                floor: 65,
                head: 130,
            },
        ),
        (
            Some(&state),
            Some(b"events.a.0"),
            ResumeDecision::Gap {
                requested: 0,
                floor: 65,
                head: 130,
            },
        ),
        (
            Some(&state),
            Some(b"events.a.131"),
            ResumeDecision::Mismatch {
                requested: 131,
                head: 130,
            },
        ),
        (
            Some(&state),
            Some(b"events.a.18446744073709551615"),
            ResumeDecision::Mismatch {
                requested: u64::MAX,
                head: 130,
            },
        ),
        (Some(&empty), None, ResumeDecision::Live { head: 0 }),
        (
            Some(&empty),
            Some(b"events.a.0"),
            ResumeDecision::NoOp { head: 0 },
        ),
        (
            Some(&empty),
            Some(b"events.a.1"),
            ResumeDecision::Mismatch {
                requested: 1,
                head: 0,
            },
        ),
        (
            Some(&drained),
            Some(b"events.a.130"),
            ResumeDecision::NoOp { head: 130 },
        ),
        (
            Some(&drained),
            Some(b"events.a.129"),
            ResumeDecision::Gap {
                requested: 129,
                floor: 131,
                head: 130,
            },
        ),
        (
            Some(&state),
            Some(b""),
            ResumeDecision::InvalidCursor(LastEventIdError::Empty),
        ),
        (None, Some(b"events.a.100"), ResumeDecision::SessionLost),
        (None, None, ResumeDecision::SessionLost),
    ];
    for (stream, header, expected) in cases {
        assert_eq!(
            decide(stream, header),
            expected,
            "{:?}",
            header.map(String::from_utf8_lossy)
        );
    }
    assert!(matches!(
        decide(Some(&state), Some(b"events.b.100")),
        ResumeDecision::StreamLost(LastEventIdError::UnknownEpoch { .. })
    ));
    assert!(matches!(
        decide(Some(&state), Some(b"other.a.100")),
        ResumeDecision::StreamLost(LastEventIdError::UnknownStream { .. })
    ));
}

/// Pull the value of a numeric JSON member out of a flat object (the bodies are flat).
fn json_number(body: &str, key: &str) -> Option<u64> {
    let start = body.find(&format!("\"{key}\":"))? + key.len() + 3;
    body[start..].split([',', '}']).next()?.parse().ok()
}

fn json_string<'a>(body: &'a str, key: &str) -> Option<&'a str> {
    let start = body.find(&format!("\"{key}\":\""))? + key.len() + 4;
    body[start..].split('"').next()
}

#[test]
fn http_mapping_of_every_decision() {
    let state = window(65, 130);
    let cases: Vec<(ResumeDecision, u16, &str)> = vec![
        (ResumeDecision::Live { head: 130 }, 200, "ok"),
        (
            ResumeDecision::Replay {
                from: 65,
                through: 130,
            },
            200,
            "ok",
        ),
        (ResumeDecision::NoOp { head: 130 }, 200, "ok"),
        (
            ResumeDecision::Gap {
                requested: 41,
                floor: 65,
                head: 130,
            },
            416,
            "replay_gap",
        ),
        (
            ResumeDecision::Mismatch {
                requested: 131,
                head: 130,
            },
            409,
            "cursor_ahead_of_head",
        ),
        (
            ResumeDecision::InvalidCursor(LastEventIdError::Empty),
            400,
            "invalid_last_event_id",
        ),
        (
            ResumeDecision::StreamLost(LastEventIdError::UnknownStream {
                stream: StreamId::new("x").unwrap(),
            }),
            404,
            "stream_lost",
        ),
        (ResumeDecision::SessionLost, 404, "session_lost"),
        (ResumeDecision::Busy { limit: 16 }, 503, "too_many_readers"),
    ];
    for (decision, status, code) in cases {
        let session_gone = decision == ResumeDecision::SessionLost;
        let r = HttpResponse::for_decision(&decision, (!session_gone).then_some(&state));
        assert_eq!(r.status, status, "{decision:?}");
        assert_eq!(decision.code(), code);
        if status == 200 {
            // Never an empty 200: the body here is empty only because the stream follows, and the
            // stream always starts with a priming event.
            assert_eq!(r.header("content-type"), Some("text/event-stream"));
            // Neither cached nor buffered or compressed on its way: frames must arrive as sent.
            assert_eq!(r.header("cache-control"), Some("no-store, no-transform"));
            assert_eq!(r.header("x-accel-buffering"), Some("no"));
            assert!(r.body.is_empty());
        } else {
            assert_eq!(r.header("content-type"), Some("application/json"));
            assert_eq!(r.header("cache-control"), Some("no-store"));
            let body = std::str::from_utf8(&r.body).unwrap();
            assert!(body.starts_with('{') && body.ends_with('}'), "{body}");
            assert_eq!(json_string(body, "error"), Some(code), "{body}");
            assert!(
                json_string(body, "message").is_some_and(|m| !m.is_empty()),
                "{body}"
            );
            // A refusal for an existing stream names its window in the body as in the headers.
            if !session_gone {
                assert!(
                    body.contains(r#""floor":"#) && body.contains(r#""head":"#),
                    "{decision:?}: {body}"
                );
            }
        }
        if session_gone {
            assert_eq!(r.header("replay-floor"), None);
        } else {
            // The floor (and head) is advertised on every response for an existing stream.
            assert_eq!(r.header("replay-floor"), Some("65"), "{decision:?}");
            assert_eq!(r.header("replay-head"), Some("130"));
            assert_eq!(r.header("replay-stream"), Some("events.a"));
        }
    }
    let gap = HttpResponse::for_decision(
        &ResumeDecision::Gap {
            requested: 41,
            floor: 65,
            head: 130,
        },
        Some(&state),
    );
    let body = std::str::from_utf8(&gap.body).unwrap();
    for (key, value) in [
        ("requested", 41),
        ("floor", 65),
        ("head", 130),
        ("lost_from", 42),
        ("lost_through", 64),
    ] {
        assert_eq!(json_number(body, key), Some(value), "{key} in {body}");
    }
    let mismatch = HttpResponse::for_decision(
        &ResumeDecision::Mismatch {
            requested: 131,
            head: 130,
        },
        Some(&state),
    );
    let body = std::str::from_utf8(&mismatch.body).unwrap();
    assert_eq!(
        (json_number(body, "floor"), json_number(body, "head")),
        (Some(65), Some(130))
    );
    let busy = HttpResponse::for_decision(&ResumeDecision::Busy { limit: 2 }, Some(&state));
    assert_eq!(busy.header("retry-after"), Some("1"));
}

/// The decision and the snapshot are read one after the other, and a live stream moves in between:
/// a refusal's headers then state the window its body (and the decision) were made on.
#[test]
fn a_refusal_states_one_window_in_its_headers_and_body() {
    // Taken after the decisions below: the stream has moved on to 70..=140.
    let later = window(70, 140);
    let cases = [
        (
            ResumeDecision::Gap {
                requested: 41,
                floor: 65,
                head: 130,
            },
            (65, 130),
        ),
        (
            ResumeDecision::Mismatch {
                requested: 135,
                head: 130,
            },
            (70, 130),
        ),
        // Releases went past the decision's head: the floor is clamped to `head + 1`.
        (
            ResumeDecision::Mismatch {
                requested: 60,
                head: 50,
            },
            (51, 50),
        ),
    ];
    for (decision, (floor, head)) in cases {
        let r = HttpResponse::for_decision(&decision, Some(&later));
        let body = std::str::from_utf8(&r.body).unwrap();
        let headers = (r.header("replay-floor"), r.header("replay-head"));
        let (floor_s, head_s) = (floor.to_string(), head.to_string());
        assert_eq!(headers, (Some(&*floor_s), Some(&*head_s)), "{decision:?}");
        assert_eq!(
            (json_number(body, "floor"), json_number(body, "head")),
            (Some(floor), Some(head)),
            "{decision:?}: {body}"
        );
    }
}

#[test]
fn resume_against_a_ring() {
    let me = me();
    let (mut producer, ring) = ReplayRing::<u64>::new(8, 2).unwrap();
    for n in 1..=6 {
        producer.try_push(n * 100).unwrap();
    }
    // Exactly x+1..=head.
    let mut ok = resume(&ring, &me, Some(b"events.a.2")).unwrap();
    assert_eq!(
        ok.decision,
        ResumeDecision::Replay {
            from: 3,
            through: 6
        }
    );
    assert_eq!(ok.acknowledged, Some(2));
    let ids: Vec<u64> = ok
        .reader
        .try_read()
        .unwrap()
        .unwrap()
        .iter()
        .map(|(id, _)| id)
        .collect();
    assert_eq!(ids, [3, 4, 5, 6]);

    // The reader table is full: explicit Busy, not a hang.
    let _second = resume(&ring, &me, None).unwrap();
    let busy = resume(&ring, &me, Some(b"events.a.2")).unwrap_err();
    assert_eq!(busy.decision, ResumeDecision::Busy { limit: 2 });
    assert_eq!(HttpResponse::refused(&busy).status, 503);
    drop(ok);
    drop(_second);

    // Core errors map one to one.
    ring.release_through(3).unwrap();
    let gap = resume(&ring, &me, Some(b"events.a.1")).unwrap_err();
    assert_eq!(
        gap.decision,
        ResumeDecision::from(ResumeError::BelowFloor {
            requested: 1,
            floor: 4,
            head: 6
        })
    );
    assert_eq!(gap.state.unwrap().floor, 4);
    let edge = resume(&ring, &me, Some(b"events.a.3")).unwrap();
    assert_eq!(
        edge.decision,
        ResumeDecision::Replay {
            from: 4,
            through: 6
        }
    );
    drop(edge);
    let ahead = resume(&ring, &me, Some(b"events.a.7")).unwrap_err();
    assert_eq!(
        ahead.decision,
        ResumeDecision::Mismatch {
            requested: 7,
            head: 6
        }
    );
    let noop = resume(&ring, &me, Some(b"events.a.6")).unwrap();
    assert_eq!(noop.decision, ResumeDecision::NoOp { head: 6 });
    drop(noop);
    let live = resume(&ring, &me, None).unwrap();
    assert_eq!(
        (live.decision, live.acknowledged),
        (ResumeDecision::Live { head: 6 }, None)
    );
    drop(live);

    // A restart: same name, new epoch, fresh ring from 1. The old cursor 5 is numerically valid
    // in the new ring, and must still be refused.
    let restarted = StreamIdentity::new(me.stream, Epoch::new(0xb));
    let (mut p2, ring2) = ReplayRing::<u64>::new(8, 2).unwrap();
    for n in 1..=6 {
        p2.try_push(n).unwrap();
    }
    let lost = resume(&ring2, &restarted, Some(b"events.a.5")).unwrap_err();
    assert!(matches!(
        lost.decision,
        ResumeDecision::StreamLost(LastEventIdError::UnknownEpoch { .. })
    ));
    assert_eq!(HttpResponse::refused(&lost).status, 404);

    // After close, a resume still replays what is retained and then reports the close.
    producer.close(CloseReason::Completed);
    let mut tail = resume(&ring, &me, Some(b"events.a.5")).unwrap();
    assert_eq!(tail.reader.try_read().unwrap().unwrap().first_id(), 6);
    assert_eq!(
        tail.reader.try_read().unwrap_err(),
        ReadError::Closed(CloseReason::Completed)
    );
}

fn config(window_ms: u64) -> RetentionConfig {
    RetentionConfig {
        resumption_window: Duration::from_millis(window_ms),
        backpressure_timeout: Duration::from_secs(1),
    }
}

#[test]
fn retention_releases_written_events_after_the_window_only() {
    let (mut producer, ring) = ReplayRing::<u32>::new(16, 4).unwrap();
    let mut retention = Retention::new(config(1000), 4);
    let t0 = Instant::now();
    let ms = |n| t0 + Duration::from_millis(n);
    let conn = retention.connect(0).unwrap();
    for n in 1..=10 {
        producer.try_push(n).unwrap();
    }
    retention.on_written(&conn, 4, ms(0));
    retention.on_written(&conn, 10, ms(500));
    // Unwritten events (none here) and events younger than the window stay.
    assert_eq!(retention.release_expired(&ring, ms(999)), None);
    assert_eq!(retention.release_expired(&ring, ms(1000)), Some(5));
    assert_eq!(retention.release_expired(&ring, ms(1499)), None);
    assert_eq!(retention.release_expired(&ring, ms(1500)), Some(11));
    assert_eq!(ring.floor(), 11);
    assert_eq!(retention.stats().window_releases, 2);
    assert_eq!(retention.next_expiry(), None);
}

#[test]
fn retention_never_releases_what_a_live_connection_has_not_written() {
    let (mut producer, ring) = ReplayRing::<u32>::new(16, 4).unwrap();
    let mut retention = Retention::new(config(100), 4);
    let t0 = Instant::now();
    let ms = |n| t0 + Duration::from_millis(n);
    let fast = retention.connect(0).unwrap();
    let slow = retention.connect(0).unwrap();
    for n in 1..=8 {
        producer.try_push(n).unwrap();
    }
    retention.on_written(&fast, 8, ms(0));
    retention.on_written(&slow, 3, ms(0));
    assert_eq!(retention.release_expired(&ring, ms(10_000)), Some(4));
    // A resume acknowledging 8 from a third connection is capped by the slow reader too.
    let third = retention.connect(8).unwrap();
    assert_eq!(retention.acknowledge(&ring, 8), Ok(4));
    retention.disconnect(third, ms(10_000));
    // The slow one leaves: what the fast one wrote gets a full window from the departure.
    retention.disconnect(slow, ms(20_000));
    assert_eq!(retention.release_expired(&ring, ms(20_099)), None);
    assert_eq!(retention.release_expired(&ring, ms(20_100)), Some(9));
    // The last one leaves: nothing it had not written is released before its window is over,
    // then everything is (no client that left can come back for it any more).
    retention.disconnect(fast, ms(20_100));
    producer.try_push(9).unwrap();
    assert_eq!(retention.next_expiry(), Some(ms(20_200)));
    assert_eq!(retention.release_expired(&ring, ms(20_199)), None);
    assert_eq!(ring.floor(), 9);
    assert_eq!(retention.release_expired(&ring, ms(20_200)), Some(10));
    // Still nobody: what is published from now on may go at once.
    producer.try_push(10).unwrap();
    assert_eq!(retention.release_expired(&ring, ms(20_201)), Some(11));
    // A connection again: its unwritten events are protected as before.
    let back = retention.connect(10).unwrap();
    producer.try_push(11).unwrap();
    assert_eq!(retention.release_expired(&ring, ms(1_000_000)), None);
    retention.on_written(&back, 11, ms(1_000_000));
    assert_eq!(retention.release_expired(&ring, ms(1_000_100)), Some(12));
}

/// Callers read the clock before they take the lock, so a cut can carry an older `now` than a
/// departure recorded just before it. The vacancy then starts at the later departure: the client
/// that left last keeps its whole window.
#[test]
fn a_cut_with_an_older_clock_does_not_shorten_a_departed_clients_window() {
    let policy = SlowConsumerPolicy {
        max_lag_percent: None,
        write_timeout: Some(Duration::from_secs(5)),
        ..SlowConsumerPolicy::default()
    };
    let (mut producer, ring) = ReplayRing::<u32>::new(16, 4).unwrap();
    let mut retention = Retention::new(config(30_000), 4).with_slow_consumer_policy(policy);
    let t0 = Instant::now();
    let ms = |n| t0 + Duration::from_millis(n);
    let (a, b) = (retention.connect(0).unwrap(), retention.connect(0).unwrap());
    for n in 1..=3 {
        producer.try_push(n).unwrap();
    }
    retention.on_written(&a, 1, t0);
    retention.on_written(&b, 1, t0);
    retention.on_write_pending(&b, t0);
    // A leaves at 20.5 s; then a caller that read its clock at 20.0 s cuts B (stalled since t0).
    retention.disconnect(a, ms(20_500));
    assert_eq!(retention.cut_slow_consumers(&ring, ms(20_000)), 1);
    assert_eq!(retention.live_connections(), 0);
    // Id 1, written to both at t0, goes one window later; A may come back for 2..=3 until 50.5 s.
    assert_eq!(retention.release_expired(&ring, ms(30_000)), Some(2));
    assert_eq!(retention.release_expired(&ring, ms(50_200)), None);
    assert!(ring.resume(Some(1)).is_ok());
    assert_eq!(retention.release_expired(&ring, ms(50_500)), Some(4));
}

/// A client that resumes into a backlog and leaves again gets a full window for what arrived
/// while it was connected, and only the rest of their window for the older events: leaving and
/// resuming never extends how long an event is kept (else one client could hold the window open
/// until the producer's backpressure timeout ended the stream).
#[test]
fn a_client_that_leaves_during_a_backlog_keeps_the_backlogs_window_not_a_new_one() {
    let (mut producer, ring) = ReplayRing::<u32>::new(16, 4).unwrap();
    let mut retention = Retention::new(config(30_000), 4);
    let t0 = Instant::now();
    let s = |n| t0 + Duration::from_secs(n);
    let follower = retention.connect(0).unwrap();
    for n in 1..=10 {
        producer.try_push(n).unwrap();
    }
    retention.on_written(&follower, 10, t0);
    // At 20 s a client resumes after id 2 and reads through 5 while 11..=12 arrive; it leaves at 21 s.
    let resumed = retention.connect(2).unwrap();
    for n in 11..=12 {
        producer.try_push(n).unwrap();
    }
    retention.on_written(&follower, 12, s(20));
    retention.on_written(&resumed, 5, s(21));
    assert_eq!(retention.release_expired(&ring, s(21)), None);
    retention.disconnect(resumed, s(21));
    // Ids up to 10 were written to every live connection at t0: they go at 30 s, departure or not.
    assert_eq!(retention.release_expired(&ring, s(30)), Some(11));
    // 11..=12 arrived while the client was connected: kept for a window from its departure.
    assert_eq!(retention.release_expired(&ring, s(50)), None);
    assert!(ring.resume(Some(10)).is_ok());
    assert_eq!(retention.release_expired(&ring, s(51)), Some(13));
}

#[test]
fn a_stream_nobody_has_followed_releases_one_window_after_it_was_opened() {
    let (mut producer, ring) = ReplayRing::<u32>::new(4, 1).unwrap();
    let t0 = Instant::now();
    let mut retention = Retention::new(config(100), 1);
    let ms = |n| t0 + Duration::from_millis(n);
    for n in 1..=4 {
        producer.try_push(n).unwrap();
    }
    // Created after t0: its window ends after ms(100), and not much later.
    let due = retention.next_expiry().unwrap();
    assert!(
        due >= ms(100) && due < ms(100) + Duration::from_secs(5),
        "{due:?}"
    );
    assert_eq!(retention.release_expired(&ring, ms(50)), None);
    assert_eq!(retention.release_expired(&ring, due), Some(5));
    assert_eq!(producer.try_push(5), Ok(5));
}

#[test]
fn acknowledgement_releases_through_the_cursor() {
    let (mut producer, ring) = ReplayRing::<u32>::new(8, 2).unwrap();
    for n in 1..=8 {
        producer.try_push(n).unwrap();
    }
    assert!(producer.try_push(9).unwrap_err().is_full());
    let mut retention = Retention::new(RetentionConfig::default(), 2);
    let conn = retention.connect(5).unwrap();
    assert_eq!(retention.acknowledge(&ring, 5), Ok(6));
    assert_eq!(
        retention.acknowledge(&ring, 2),
        Ok(6),
        "older acks are no-ops"
    );
    assert_eq!(retention.stats().ack_releases, 1);
    assert_eq!(producer.try_push(9), Ok(9));
    retention.disconnect(conn, Instant::now());
}

#[test]
fn checkpoints_only_delay_releases_and_by_at_most_two_granules() {
    let (mut producer, ring) = ReplayRing::<u32>::new(2048, 1).unwrap();
    let window_ms = 640;
    let granule = window_ms / CHECKPOINTS as u64;
    let mut retention = Retention::new(config(window_ms), 1);
    let t0 = Instant::now();
    let conn = retention.connect(0).unwrap();
    // One write per ms for 1500 ms (far more writes than checkpoints), a release check every 3 ms,
    // as a server's writer does per batch.
    for t in 1..=3000u64 {
        let now = t0 + Duration::from_millis(t);
        if t <= 1500 {
            producer.try_push(t as u32).unwrap();
            retention.on_written(&conn, t, now);
        }
        if t % 3 == 0 {
            retention.release_expired(&ring, now);
        }
        let released = ring.floor() - 1; // id n was written at t0 + n ms
        if released > 0 {
            assert!(
                released + window_ms <= t,
                "id {released} released early at {t} ms"
            );
        }
        let due = t.saturating_sub(window_ms).min(1500);
        assert!(
            released + 2 * granule + 3 >= due,
            "at {t} ms only {released} released, {due} due"
        );
    }
    assert_eq!(ring.floor(), 1501);
}

#[test]
fn backpressure_clock_bounds_waiting() {
    let mut clock = BackpressureClock::new(Duration::from_millis(300));
    let t0 = Instant::now();
    assert_eq!(clock.on_full(t0), Ok(t0 + Duration::from_millis(300)));
    assert_eq!(
        clock.on_full(t0 + Duration::from_millis(200)),
        Ok(t0 + Duration::from_millis(300))
    );
    clock.on_pushed();
    // A new episode starts the bound again.
    let t1 = t0 + Duration::from_millis(250);
    assert_eq!(clock.on_full(t1), Ok(t1 + Duration::from_millis(300)));
    assert_eq!(
        clock.on_full(t1 + Duration::from_millis(301)),
        Err(CloseReason::BackpressureTimeout {
            waited: Duration::from_millis(301)
        })
    );
}

/// The ring's decision for cursor `x`, in `ResumeDecision` terms (`None` = no cursor).
fn ring_decision(ring: &ReplayRing<u64>, x: Option<u64>) -> ResumeDecision {
    match ring.resume(x) {
        Ok(reader) => match x {
            None => ResumeDecision::Live {
                head: reader.cursor() - 1,
            },
            Some(x) if reader.cursor() == ring.head() + 1 && x == ring.head() => {
                ResumeDecision::NoOp { head: x }
            }
            Some(x) => {
                assert_eq!(
                    reader.cursor(),
                    x + 1,
                    "a replay starts right after the cursor"
                );
                ResumeDecision::Replay {
                    from: x + 1,
                    through: ring.head(),
                }
            }
        },
        Err(e) => ResumeDecision::from(e),
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

    /// `decide` on a snapshot and `ReplayRing::resume` give the same answer for every window and
    /// every cursor, including the edges (`floor - 1`, `head`, `head + 1`, `u64::MAX`, no cursor).
    #[test]
    fn decide_and_the_ring_agree_on_every_input(
        capacity in 1usize..=16,
        pushed in 0u64..=40,
        release_frac in 0.0f64..=1.0,
        release_all in proptest::bool::ANY,
        cursors in proptest::collection::vec(0u64..=48, 1..12),
    ) {
        let (mut producer, ring) = ReplayRing::<u64>::new(capacity, 2).unwrap();
        for n in 0..pushed {
            while producer.try_push(n).is_err() {
                // Keep the window at capacity: release the oldest event to make room.
                ring.release_through(ring.floor()).unwrap();
            }
        }
        let head = ring.head();
        if head > 0 {
            let through = if release_all { head } else { (head as f64 * release_frac) as u64 };
            if through >= ring.floor() {
                ring.release_through(through).unwrap();
            }
        }
        let state = StreamState::of(me(), &ring);
        let mut all: Vec<Option<u64>> = cursors.into_iter().map(Some).collect();
        all.extend([
            None,
            Some(state.floor.saturating_sub(1)),
            Some(state.floor.saturating_sub(2)),
            Some(state.head),
            Some(state.head + 1),
            Some(u64::MAX),
        ]);
        for x in all {
            let header = x.map(|x| me().event_id(x).to_string());
            let snapshot = decide(Some(&state), header.as_deref().map(str::as_bytes));
            proptest::prop_assert_eq!(
                snapshot,
                ring_decision(&ring, x),
                "window {}..={}, cursor {:?}", state.floor, state.head, x
            );
        }
    }
}

#[test]
fn every_refusal_body_is_one_json_object_naming_the_window() {
    let state = window(65, 130);
    let refusals = [
        decide(Some(&state), Some(b"events.a.41")),
        decide(Some(&state), Some(b"events.a.131")),
        decide(Some(&state), Some(b"events.a.x")),
        decide(Some(&state), Some(b"events.b.100")),
        decide(Some(&state), Some(b"other.a.100")),
        ResumeDecision::Busy { limit: 8 },
    ];
    for decision in refusals {
        let body = HttpResponse::for_decision(&decision, Some(&state)).body;
        let value: serde_json::Value = serde_json::from_slice(&body)
            .unwrap_or_else(|e| panic!("{decision:?}: body is not JSON ({e})"));
        let object = value.as_object().expect("a JSON object");
        assert_eq!(object["error"], decision.code());
        assert_eq!(object["message"], decision.to_string());
        assert_eq!(object["stream"], "events");
        assert_eq!(object["epoch"], "a");
        if !matches!(decision, ResumeDecision::Busy { .. }) {
            assert_eq!(object["head"], 130, "{decision:?}");
        }
    }
    let lost = HttpResponse::for_decision(&ResumeDecision::SessionLost, None).body;
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&lost).unwrap(),
        serde_json::json!({"error": "session_lost", "message": "session not found; re-initialize"})
    );
}

#[test]
fn a_repeated_last_event_id_header_is_refused_with_400() {
    use replay_ring_sse::{last_event_id, status_for};

    let one: [&[u8]; 1] = [b"events.a.3"];
    assert_eq!(last_event_id(one), Ok(Some(&b"events.a.3"[..])));
    assert_eq!(last_event_id(Vec::<&[u8]>::new()), Ok(None));
    for values in [
        vec![&b"events.a.3"[..], &b"events.a.9"[..]],
        vec![&b"events.a.3"[..], &b"events.a.3"[..]],
        vec![&b""[..], &b"events.a.3"[..], &b"x"[..]],
    ] {
        let count = values.len();
        let err = last_event_id(values).unwrap_err();
        assert_eq!(err, LastEventIdError::Duplicate { count });
        assert!(err.to_string().contains(&format!("{count} ids")), "{err}");
        assert!(err.is_syntax());
        let decision = ResumeDecision::InvalidCursor(err);
        assert_eq!(status_for(&decision), 400);
        let body = HttpResponse::for_decision(&decision, None).body;
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(json["error"], "invalid_last_event_id");
        assert_eq!(json["reason"], "duplicate");
    }
    // A proxy may join repeated header lines into one with commas: still two (or three) cursors.
    for (value, count) in [
        (&b"events.a.3, events.a.9"[..], 2),
        (b"events.a.3,events.a.3", 2),
        (b"events.a.3, , x", 3),
    ] {
        assert_eq!(
            last_event_id([value]),
            Err(LastEventIdError::Duplicate { count }),
            "{}",
            String::from_utf8_lossy(value)
        );
    }
    let joined_and_repeated: [&[u8]; 2] = [b"events.a.3, events.a.4", b"events.a.5"];
    assert_eq!(
        last_event_id(joined_and_repeated),
        Err(LastEventIdError::Duplicate { count: 3 })
    );
}

#[test]
fn a_gap_message_names_the_released_events_and_what_is_retained() {
    let gap = |requested, floor, head| {
        ResumeDecision::Gap {
            requested,
            floor,
            head,
        }
        .to_string()
    };
    assert_eq!(
        gap(41, 65, 130),
        "cannot resume after id 41: events 42..=64 were released (retained 65..=130)"
    );
    // Everything was released: no range is retained, so none is named.
    assert_eq!(
        gap(19, 21, 20),
        "cannot resume after id 19: events 20..=20 were released (nothing is retained)"
    );
}
