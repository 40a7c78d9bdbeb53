//! `classify_resume` is the resume decision as a pure function; `ReplayRing::resume` must make the
//! same decision on every window and every cursor, including windows near the end of the id space.

// Ordinary builds only: a `--cfg replay_ring_loom` build swaps in loom atomics and drops the
// blocking API; its checks are the models in `loom-tests/`.
#![cfg(not(replay_ring_loom))]

use proptest::prelude::*;
use replay_ring::{classify_resume, ReplayRing, ResumeError, Resumption};

/// A window: where ids start, how big it is, how many events were pushed and released.
#[derive(Debug, Clone)]
struct Window {
    first_id: u64,
    capacity: usize,
    pushes: usize,
    /// Released through `floor - 1 + released` after the pushes (clamped to the head).
    released: usize,
    /// Pushed again after the release (as many as fit).
    refill: usize,
}

fn window() -> impl Strategy<Value = Window> {
    let first_id = prop_oneof![Just(1u64), 1u64..1_000, (u64::MAX - 64)..=(u64::MAX - 1),];
    (first_id, 1usize..=16, 0usize..=16, 0usize..=16, 0usize..=16).prop_map(
        |(first_id, capacity, pushes, released, refill)| Window {
            first_id,
            capacity,
            pushes,
            released,
            refill,
        },
    )
}

/// Cursors around the interesting boundaries of a window, plus anything at all.
fn cursor(floor: u64, head: u64, pick: u8, any: u64) -> u64 {
    match pick % 8 {
        0 => floor.saturating_sub(2),
        1 => floor.saturating_sub(1),
        2 => floor,
        3 => head.saturating_sub(1),
        4 => head,
        5 => head.saturating_add(1),
        6 => floor.saturating_add(any % (head.saturating_sub(floor).saturating_add(2))),
        _ => any,
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if cfg!(miri) { 8 } else { 2_000 },
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn resume_makes_the_decision_classify_resume_describes(
        w in window(),
        pick in any::<u8>(),
        any_cursor in any::<u64>(),
    ) {
        let (mut producer, ring) = ReplayRing::<u64>::builder()
            .capacity(w.capacity)
            .max_readers(2)
            .first_id(w.first_id)
            .build()
            .unwrap();
        for _ in 0..w.pushes {
            let _ = producer.try_push_with(|id| id);
        }
        let head = ring.head();
        if head >= w.first_id {
            let through = (ring.floor() - 1).saturating_add(w.released as u64).min(head);
            if through >= ring.floor() {
                ring.release_through(through).unwrap();
            }
        }
        for _ in 0..w.refill {
            let _ = producer.try_push_with(|id| id);
        }
        let (floor, head) = (ring.floor(), ring.head());
        let last = cursor(floor, head, pick, any_cursor);

        let expected = classify_resume(floor, head, last);
        let actual = ring.resume(Some(last));
        match (expected, actual) {
            (Ok(Resumption::Replay { first, last: through }), Ok(mut reader)) => {
                prop_assert_eq!(reader.cursor(), first);
                let batch = reader.try_read().unwrap().expect("a replay has events");
                prop_assert_eq!((batch.first_id(), batch.last_id()), (first, through));
                let (a, b) = batch.as_slices();
                let values: Vec<u64> = a.iter().chain(b).copied().collect();
                prop_assert_eq!(values.len() as u64, through - first + 1);
                prop_assert_eq!(values.first().copied(), Some(first));
                prop_assert_eq!(values.last().copied(), Some(through));
            }
            (Ok(Resumption::AtHead), Ok(mut reader)) => {
                prop_assert_eq!(reader.cursor(), head + 1);
                prop_assert!(reader.try_read().unwrap().is_none());
            }
            (Err(expected), Err(actual)) => prop_assert_eq!(expected, actual),
            (expected, actual) => {
                prop_assert!(false, "classify_resume said {expected:?}, resume said {actual:?}");
            }
        }
    }

    #[test]
    fn classify_resume_is_total_and_replays_exactly_the_suffix(
        floor in any::<u64>(),
        head in any::<u64>(),
        last in any::<u64>(),
    ) {
        match classify_resume(floor, head, last) {
            Ok(Resumption::Replay { first, last: through }) => {
                prop_assert_eq!((first, through), (last + 1, head));
                prop_assert!(floor <= first && first <= through);
            }
            Ok(Resumption::AtHead) => prop_assert_eq!(last, head),
            Err(ResumeError::BelowFloor { requested, floor: f, head: h }) => {
                prop_assert_eq!((requested, f, h), (last, floor, head));
                prop_assert!(last < head && last + 1 < floor);
            }
            Err(ResumeError::AheadOfHead { requested, head: h }) => {
                prop_assert_eq!((requested, h), (last, head));
                prop_assert!(last > head);
            }
            Err(other) => prop_assert!(false, "not a cursor refusal: {other:?}"),
        }
    }
}
