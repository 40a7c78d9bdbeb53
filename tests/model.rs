//! Model-based property test: random sequences of push / release / resume / read / close are run
//! against the ring and against a small sequential reference model of an event log (where a refused
//! push burns no id). Every result and error must match.

// Ordinary builds only: a `--cfg replay_ring_loom` build swaps in loom atomics and drops the
// blocking API; its checks are the models in `loom-tests/`.
#![cfg(not(replay_ring_loom))]

use proptest::prelude::*;
use replay_ring::{BuildError, CloseReason, Producer, ReadError, ReplayRing};

#[derive(Debug, Clone)]
enum Op {
    Push(u32),
    /// Release through `head - back` (may go past the head when `back` is negative).
    Release(i64),
    /// Resume after `head - back`, or live (`None`).
    Resume(Option<i64>),
    /// Read from reader `r % readers`, marking at most `n` events read (`None` = all).
    Read(usize, Option<usize>),
    DropReader(usize),
    Close,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => any::<u32>().prop_map(Op::Push),
        2 => (-2i64..6).prop_map(Op::Release),
        3 => proptest::option::weighted(0.8, -2i64..8).prop_map(Op::Resume),
        4 => (0usize..4, proptest::option::of(0usize..4)).prop_map(|(r, n)| Op::Read(r, n)),
        1 => (0usize..4).prop_map(Op::DropReader),
        1 => Just(Op::Close),
    ]
}

// The sequential reference model, shared with the fuzz target `fuzz_targets/ring_ops.rs`.
#[path = "support/ring_model.rs"]
mod ring_model;
use ring_model::{Model, Refused};

fn ring_read(
    reader: &mut replay_ring::Reader<u32>,
    mark: Option<usize>,
) -> Result<Option<Vec<(u64, u32)>>, ReadError> {
    Ok(reader.try_read()?.map(|mut batch| {
        let events = batch.iter().map(|(id, v)| (id, *v)).collect();
        if let Some(n) = mark {
            batch.mark_read(n);
        }
        events
    }))
}

/// Runs `ops` against a ring and the model. `initial_slots`: `None` builds an eager ring (the
/// default), `Some(n)` one that grows from `n` slots.
fn run(
    capacity: usize,
    initial_slots: Option<usize>,
    max_readers: usize,
    first_id: u64,
    ops: Vec<Op>,
) -> Result<(), TestCaseError> {
    let mut builder = ReplayRing::builder()
        .capacity(capacity)
        .max_readers(max_readers)
        .first_id(first_id);
    if let Some(n) = initial_slots {
        builder = builder.initial_slots(n);
    }
    let built: Result<(Producer<u32>, ReplayRing<u32>), BuildError> = builder.build();
    let (producer, ring) = built.expect("valid configuration");
    let mut producer = Some(producer);
    let mut model = Model::new(ring.capacity() as u64, max_readers, first_id);
    if let Some(n) = initial_slots {
        model = model.with_initial_slots(n as u64);
    }
    let mut readers = Vec::new();

    for op in ops {
        let head = model.head();
        let back = |b: i64| head.saturating_add_signed(-b);
        match op {
            Op::Push(v) => {
                if let Some(p) = producer.as_mut() {
                    prop_assert_eq!(p.try_push(v), model.push(v));
                }
            }
            Op::Release(b) => {
                prop_assert_eq!(ring.release_through(back(b)), model.release(back(b)))
            }
            Op::Resume(b) => {
                let last = b.map(back);
                let real = ring.resume(last);
                prop_assert_eq!(
                    real.as_ref().err().copied().map(Refused::from),
                    model.resume(last).err()
                );
                if let Ok(reader) = real {
                    prop_assert_eq!(reader.cursor(), model.readers.last().unwrap().cursor);
                    readers.push(reader);
                }
            }
            Op::Read(r, mark) if !readers.is_empty() => {
                let r = r % readers.len();
                prop_assert_eq!(ring_read(&mut readers[r], mark), model.read(r, mark));
                prop_assert_eq!(readers[r].cursor(), model.readers[r].cursor);
            }
            Op::DropReader(r) if !readers.is_empty() => {
                let r = r % readers.len();
                readers.remove(r);
                model.readers.remove(r);
            }
            Op::Close => {
                if let Some(p) = producer.take() {
                    p.close(CloseReason::Completed);
                    model.closed = true;
                }
            }
            Op::Read(..) | Op::DropReader(_) => {}
        }
        prop_assert_eq!((ring.floor(), ring.head()), (model.floor, model.head()));
        prop_assert!(ring.floor() <= ring.head() + 1);
    }

    let m = ring.metrics();
    prop_assert_eq!(m.events_enqueued, model.values.len() as u64);
    prop_assert_eq!(m.events_released, model.floor - first_id);
    prop_assert_eq!(m.producer_full, model.full);
    prop_assert_eq!(
        [
            m.resumes_ok,
            m.resumes_noop,
            m.resumes_below_floor,
            m.resumes_ahead_of_head
        ],
        model.resumes
    );
    prop_assert_eq!(m.readers_active, readers.len());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if cfg!(miri) { 4 } else { 2_000 },
        // Miri runs with isolation off only for the clock; no regression file writes there.
        failure_persistence: if cfg!(miri) { None } else { ProptestConfig::default().failure_persistence },
        ..ProptestConfig::default()
    })]

    #[test]
    fn ring_matches_reference_model(
        capacity in 1usize..=5,
        max_readers in 1usize..=3,
        first_id in prop_oneof![Just(1u64), Just(1_000u64), Just(u64::MAX - 6)],
        ops in proptest::collection::vec(op(), 1..80),
    ) {
        run(capacity, None, max_readers, first_id, ops)?;
    }

    /// The same, for rings that grow their slot array: up to five segments, ids that start at
    /// index 0, mid-array (`first_id` 1,000 and near `u64::MAX`) and windows that wrap around
    /// across segments. Reads may end at a segment boundary; the model says where.
    #[test]
    fn lazy_ring_matches_reference_model(
        capacity in prop_oneof![Just(2usize), Just(4), Just(8), Just(16)],
        initial_slots in 0usize..=8,
        max_readers in 1usize..=3,
        first_id in prop_oneof![Just(1u64), Just(6), Just(1_003u64), Just(u64::MAX - 13)],
        ops in proptest::collection::vec(op(), 1..120),
    ) {
        run(capacity, Some(initial_slots), max_readers, first_id, ops)?;
    }
}
