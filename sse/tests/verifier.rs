//! Client continuity (seed 000): the verifier's +1 rule, and the stall classifier on every case the
//! seed lists, table-driven.

use replay_ring_sse::client::ResumptionFailure as F;
use replay_ring_sse::client::{
    classify, BodyState, ContinuityError, ContinuityVerifier, Observation, Reconnect, StallClass,
};
use replay_ring_sse::EventId;

/// A healthy reconnect from cursor 41: 200, floor advertised, first event 42, keep-alives arriving.
fn healthy() -> Reconnect {
    Reconnect {
        cursor: 41,
        status: 200,
        replay_floor: Some(30),
        replay_head: Some(130),
        session_durable: true,
        first_event: Some(42),
        body: BodyState::OpenAlive,
    }
}

#[test]
fn classifier_covers_every_seed_case() {
    let h = healthy();
    let cases: Vec<(&str, Observation, StallClass)> = vec![
        // --- Delayed: continuity proven ---
        ("reconnect whose first event is cursor+1", Observation::Reconnected(h), StallClass::Delayed),
        (
            "no event yet, but the advertised floor proves the cursor is retained and keep-alives arrive",
            Observation::Reconnected(Reconnect { first_event: None, ..h }),
            StallClass::Delayed,
        ),
        (
            "floor exactly cursor+1 is still replayable",
            Observation::Reconnected(Reconnect { replay_floor: Some(42), ..h }),
            StallClass::Delayed,
        ),
        (
            "no-op resume at the head: floor ok, head == cursor, keep-alives",
            Observation::Reconnected(Reconnect { replay_head: Some(41), first_event: None, ..h }),
            StallClass::Delayed,
        ),
        (
            "open stream, keep-alives arriving: silence is backpressure",
            Observation::Connected { cursor: 41, body: BodyState::OpenAlive, replay_floor: Some(1) },
            StallClass::Delayed,
        ),
        (
            "open stream, keep-alives arriving, no floor header",
            Observation::Connected { cursor: 41, body: BodyState::OpenAlive, replay_floor: None },
            StallClass::Delayed,
        ),
        // --- Session lost: explicit ---
        (
            "404 after a server restart with an in-memory session store",
            Observation::Reconnected(Reconnect { status: 404, first_event: None, ..h }),
            StallClass::SessionLost { status: 404 },
        ),
        (
            "410 Gone",
            Observation::Reconnected(Reconnect { status: 410, first_event: None, ..h }),
            StallClass::SessionLost { status: 410 },
        ),
        // --- Resumption failed ---
        (
            "the recorded incident: 200 that starts at the head (41 -> 130)",
            Observation::Reconnected(Reconnect {
                replay_floor: None,
                replay_head: None,
                first_event: Some(130),
                ..h
            }),
            StallClass::ResumptionFailed(F::Skipped { expected: 42, got: 130 }),
        ),
        (
            "200 with an empty stream (implicit fresh session under the same id)",
            Observation::Reconnected(Reconnect {
                replay_floor: None,
                replay_head: None,
                first_event: None,
                body: BodyState::EndedEmpty,
                ..h
            }),
            StallClass::ResumptionFailed(F::EmptyStream),
        ),
        (
            "200, open, idle, no event and no floor: nothing proves continuity",
            Observation::Reconnected(Reconnect {
                replay_floor: None,
                replay_head: None,
                first_event: None,
                ..h
            }),
            StallClass::ResumptionFailed(F::Unproven),
        ),
        (
            "advertised floor above the cursor (64-event ring evicted 42..)",
            Observation::Reconnected(Reconnect { replay_floor: Some(66), first_event: Some(66), ..h }),
            StallClass::ResumptionFailed(F::FloorAboveCursor { cursor: 41, floor: 66 }),
        ),
        (
            "floor above the cursor even with no events",
            Observation::Reconnected(Reconnect { replay_floor: Some(50), first_event: None, ..h }),
            StallClass::ResumptionFailed(F::FloorAboveCursor { cursor: 41, floor: 50 }),
        ),
        (
            "non-durable session: implicit re-creation cannot honour Last-Event-ID",
            Observation::Reconnected(Reconnect { session_durable: false, ..h }),
            StallClass::ResumptionFailed(F::NotDurable),
        ),
        (
            "explicit gap status from this crate's servers (416)",
            Observation::Reconnected(Reconnect { status: 416, first_event: None, ..h }),
            StallClass::ResumptionFailed(F::Status(416)),
        ),
        (
            "cursor ahead of head (409)",
            Observation::Reconnected(Reconnect { status: 409, first_event: None, ..h }),
            StallClass::ResumptionFailed(F::Status(409)),
        ),
        (
            "400 from an SDK that rejects unknown ids",
            Observation::Reconnected(Reconnect { status: 400, first_event: None, ..h }),
            StallClass::ResumptionFailed(F::Status(400)),
        ),
        (
            "500",
            Observation::Reconnected(Reconnect { status: 500, first_event: None, ..h }),
            StallClass::ResumptionFailed(F::Status(500)),
        ),
        (
            "503 busy",
            Observation::Reconnected(Reconnect { status: 503, first_event: None, ..h }),
            StallClass::ResumptionFailed(F::Status(503)),
        ),
        (
            "204 is not a stream",
            Observation::Reconnected(Reconnect { status: 204, first_event: None, ..h }),
            StallClass::ResumptionFailed(F::Status(204)),
        ),
        (
            "405 (TypeScript SDK would go silent)",
            Observation::Reconnected(Reconnect { status: 405, first_event: None, ..h }),
            StallClass::ResumptionFailed(F::Status(405)),
        ),
        (
            "off-by-one server replays the cursor event itself",
            Observation::Reconnected(Reconnect { first_event: Some(41), ..h }),
            StallClass::ResumptionFailed(F::Repeated { expected: 42, got: 41 }),
        ),
        (
            "advertised head behind the cursor: state from another stream",
            Observation::Reconnected(Reconnect { replay_head: Some(10), first_event: None, ..h }),
            StallClass::ResumptionFailed(F::HeadBehindCursor { cursor: 41, head: 10 }),
        ),
        (
            "open stream whose advertised floor is already above the cursor",
            Observation::Connected { cursor: 41, body: BodyState::OpenAlive, replay_floor: Some(60) },
            StallClass::ResumptionFailed(F::FloorAboveCursor { cursor: 41, floor: 60 }),
        ),
        // --- Completed: the stream ended explicitly ---
        (
            "events from cursor+1, then `event: end`",
            Observation::Reconnected(Reconnect { body: BodyState::Completed, ..h }),
            StallClass::Completed,
        ),
        (
            "resume at the head of a completed stream: priming event, then `event: end`",
            Observation::Reconnected(Reconnect {
                replay_head: Some(41),
                first_event: None,
                body: BodyState::Completed,
                ..h
            }),
            StallClass::Completed,
        ),
        (
            "`event: end` with no event and no head header: nothing proves there was nothing to send",
            Observation::Reconnected(Reconnect {
                replay_floor: None,
                replay_head: None,
                first_event: None,
                body: BodyState::Completed,
                ..h
            }),
            StallClass::ResumptionFailed(F::EmptyStream),
        ),
        (
            "`event: end` with no event although the head is past the cursor: events withheld",
            Observation::Reconnected(Reconnect { first_event: None, body: BodyState::Completed, ..h }),
            StallClass::ResumptionFailed(F::EmptyStream),
        ),
        (
            "`event: end` after a skip is still a skip",
            Observation::Reconnected(Reconnect {
                first_event: Some(130),
                body: BodyState::Completed,
                ..h
            }),
            StallClass::ResumptionFailed(F::Skipped { expected: 42, got: 130 }),
        ),
        (
            "`event: end` below the floor is still a gap",
            Observation::Reconnected(Reconnect {
                replay_floor: Some(50),
                first_event: None,
                body: BodyState::Completed,
                ..h
            }),
            StallClass::ResumptionFailed(F::FloorAboveCursor { cursor: 41, floor: 50 }),
        ),
        (
            "the original connection ended with `event: end`",
            Observation::Connected { cursor: 41, body: BodyState::Completed, replay_floor: None },
            StallClass::Completed,
        ),
        // --- Dead connection: reconnect and classify again ---
        (
            "keep-alives stopped on the open connection",
            Observation::Connected { cursor: 41, body: BodyState::OpenSilent, replay_floor: Some(1) },
            StallClass::Reconnect,
        ),
        (
            "the original connection ended",
            Observation::Connected { cursor: 41, body: BodyState::EndedEmpty, replay_floor: None },
            StallClass::Reconnect,
        ),
        (
            "proven reconnect that then went silent",
            Observation::Reconnected(Reconnect { body: BodyState::OpenSilent, ..h }),
            StallClass::Reconnect,
        ),
        (
            "proven reconnect whose response then ended without a terminal frame",
            Observation::Reconnected(Reconnect { body: BodyState::EndedEmpty, ..h }),
            StallClass::Reconnect,
        ),
    ];
    for (name, observation, expected) in cases {
        assert_eq!(classify(&observation), expected, "case: {name}");
    }
}

#[test]
fn session_loss_wins_over_everything_else() {
    for status in [404, 410] {
        let r = Reconnect {
            status,
            session_durable: false,
            replay_floor: Some(999),
            first_event: Some(500),
            ..healthy()
        };
        assert_eq!(
            classify(&Observation::Reconnected(r)),
            StallClass::SessionLost { status }
        );
    }
}

#[test]
fn verifier_sequences() {
    // (cursor or fresh, reconnect points, events, expected results)
    struct Case {
        name: &'static str,
        start: Option<u64>,
        script: Vec<Step>,
    }
    enum Step {
        Event(u64, Result<(), ContinuityError>),
        Priming(u64, Result<(), ContinuityError>),
        Reconnect,
    }
    use Step::*;
    let cases = vec![
        Case {
            name: "fresh subscription, priming then +1 each",
            start: None,
            script: vec![
                Priming(0, Ok(())),
                Event(1, Ok(())),
                Event(2, Ok(())),
                Event(3, Ok(())),
            ],
        },
        Case {
            name: "fresh subscription joining late: the first event sets the cursor",
            start: None,
            script: vec![Event(57, Ok(())), Event(58, Ok(()))],
        },
        Case {
            name: "proper resume",
            start: Some(41),
            script: vec![Priming(41, Ok(())), Event(42, Ok(())), Event(43, Ok(()))],
        },
        Case {
            name: "resume that starts at the head",
            start: Some(41),
            script: vec![Event(
                130,
                Err(ContinuityError::Gap {
                    expected: 42,
                    got: 130,
                    after_reconnect: true,
                }),
            )],
        },
        Case {
            name: "priming that does not echo the cursor",
            start: Some(41),
            script: vec![Priming(
                130,
                Err(ContinuityError::PrimingMismatch {
                    cursor: 41,
                    got: 130,
                }),
            )],
        },
        Case {
            name: "mid-stream gap, then continues from the new position",
            start: Some(1),
            script: vec![
                Event(2, Ok(())),
                Event(
                    5,
                    Err(ContinuityError::Gap {
                        expected: 3,
                        got: 5,
                        after_reconnect: false,
                    }),
                ),
                Event(6, Ok(())),
            ],
        },
        Case {
            name: "duplicates after reconnect do not move the cursor; the first new one must be +1",
            start: None,
            script: vec![
                Event(1, Ok(())),
                Event(2, Ok(())),
                Reconnect,
                Event(
                    1,
                    Err(ContinuityError::Duplicate {
                        expected: 3,
                        got: 1,
                    }),
                ),
                Event(
                    2,
                    Err(ContinuityError::Duplicate {
                        expected: 3,
                        got: 2,
                    }),
                ),
                Event(
                    4,
                    Err(ContinuityError::Gap {
                        expected: 3,
                        got: 4,
                        after_reconnect: true,
                    }),
                ),
            ],
        },
        Case {
            name: "five reconnects, all continuous",
            start: None,
            script: (1..=10u64)
                .flat_map(|i| {
                    let mut steps = vec![Event(i, Ok(()))];
                    if i % 2 == 0 {
                        steps.push(Reconnect);
                        steps.push(Priming(i, Ok(())));
                    }
                    steps
                })
                .collect(),
        },
    ];
    for case in cases {
        let mut v = match case.start {
            Some(c) => ContinuityVerifier::with_cursor(c),
            None => ContinuityVerifier::new(),
        };
        for (i, step) in case.script.into_iter().enumerate() {
            match step {
                Event(id, expected) => {
                    assert_eq!(v.on_event(id), expected, "{}: step {i}", case.name)
                }
                Priming(id, expected) => {
                    assert_eq!(v.on_priming(id), expected, "{}: step {i}", case.name)
                }
                Reconnect => v.on_reconnect(),
            }
        }
    }
}

#[test]
fn verifier_rejects_a_restarted_stream_by_epoch() {
    let mut v = ContinuityVerifier::new();
    v.on_priming_id(&EventId::parse("events.a.0").unwrap())
        .unwrap();
    v.on_event_id(&EventId::parse("events.a.1").unwrap())
        .unwrap();
    // The server restarted; its fresh ring starts at 1 again under a new epoch. Numerically "2"
    // would look continuous; the epoch says it is not.
    let err = v
        .on_event_id(&EventId::parse("events.b.2").unwrap())
        .unwrap_err();
    assert!(matches!(err, ContinuityError::StreamChanged { .. }));
    assert_eq!(
        err.to_string(),
        "stream changed: reading events.a, got an event from events.b"
    );
    assert_eq!(v.cursor(), Some(1));
}

/// At the end of the id space there is no `cursor + 1`: an id at `u64::MAX` after a cursor of
/// `u64::MAX` repeats it, for the verifier and for the classifier alike.
#[test]
fn the_last_id_is_never_followed_by_itself() {
    let mut v = ContinuityVerifier::with_cursor(u64::MAX - 1);
    assert_eq!(v.on_event(u64::MAX), Ok(()));
    for _ in 0..2 {
        assert!(
            matches!(
                v.on_event(u64::MAX),
                Err(ContinuityError::Duplicate { got: u64::MAX, .. })
            ),
            "a repeat of the last id"
        );
    }
    let at_the_end = Reconnect {
        cursor: u64::MAX,
        replay_head: Some(u64::MAX),
        first_event: Some(u64::MAX),
        ..healthy()
    };
    assert!(matches!(
        classify(&Observation::Reconnected(at_the_end)),
        StallClass::ResumptionFailed(F::Repeated { got: u64::MAX, .. })
    ));
}
