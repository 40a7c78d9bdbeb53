//! Model-based property test: random sequences of push / release / resume / read / close are run
//! against the ring and against a small sequential reference model of an event log (where a refused
//! push burns no id). Every result and error must match.

use proptest::prelude::*;
use replay_ring::{
    BuildError, CloseReason, Producer, PushError, ReadError, ReleaseError, ReplayRing, ResumeError,
};

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

/// One reader of the model.
/// A refused resume, comparable between the model and the ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refused {
    Cursor(ResumeError),
    TableFull { limit: usize },
}

impl From<ResumeError> for Refused {
    fn from(error: ResumeError) -> Self {
        match error {
            ResumeError::TooManyReaders(full) => Refused::TableFull { limit: full.limit },
            other => Refused::Cursor(other),
        }
    }
}

#[derive(Debug)]
struct ModelReader {
    cursor: u64,
    /// A replaying resume pins its first id until the first read.
    pinned: bool,
    done: bool,
}

/// The event log as specified, sequential and obviously correct.
#[derive(Debug)]
struct Model {
    capacity: u64,
    max_readers: usize,
    first_id: u64,
    values: Vec<u32>,
    floor: u64,
    closed: bool,
    readers: Vec<ModelReader>,
    full: u64,
    resumes: [u64; 4],
}

impl Model {
    fn head(&self) -> u64 {
        self.first_id - 1 + self.values.len() as u64
    }

    fn value(&self, id: u64) -> u32 {
        self.values[(id - self.first_id) as usize]
    }

    fn push(&mut self, value: u32) -> Result<u64, PushError<u32>> {
        let id = self.head() + 1;
        if id == u64::MAX {
            return Err(PushError::IdsExhausted(value));
        }
        // The slot of `id` held `id - capacity`: reusable once released and not pinned.
        let pins = self.readers.iter().filter(|r| r.pinned).map(|r| r.cursor);
        let limit = pins.fold(self.floor, u64::min);
        if id >= limit.saturating_add(self.capacity) {
            self.full += 1;
            return Err(PushError::Full(value));
        }
        self.values.push(value);
        Ok(id)
    }

    fn release(&mut self, id: u64) -> Result<u64, ReleaseError> {
        let head = self.head();
        if id > head {
            return Err(ReleaseError::AheadOfHead {
                requested: id,
                head,
            });
        }
        self.floor = self.floor.max(id + 1);
        Ok(self.floor)
    }

    /// The cursor is judged first; only a valid cursor can then find the reader table full.
    fn resume(&mut self, last: Option<u64>) -> Result<(), Refused> {
        let head = self.head();
        let (cursor, pinned, counter) = match last {
            None => (head + 1, false, None),
            Some(x) if x > head => {
                self.resumes[3] += 1;
                return Err(Refused::Cursor(ResumeError::AheadOfHead {
                    requested: x,
                    head,
                }));
            }
            Some(x) if x == head => (head + 1, false, Some(1)),
            Some(x) if x + 1 < self.floor => {
                self.resumes[2] += 1;
                return Err(Refused::Cursor(ResumeError::BelowFloor {
                    requested: x,
                    floor: self.floor,
                    head,
                }));
            }
            Some(x) => (x + 1, true, Some(0)),
        };
        if self.readers.len() == self.max_readers {
            return Err(Refused::TableFull {
                limit: self.max_readers,
            });
        }
        if let Some(counter) = counter {
            self.resumes[counter] += 1;
        }
        self.readers.push(ModelReader {
            cursor,
            pinned,
            done: false,
        });
        Ok(())
    }

    /// `Ok(None)`: nothing available; `Ok(Some(events))`: what the read yields.
    #[allow(clippy::type_complexity)]
    fn read(
        &mut self,
        r: usize,
        mark: Option<usize>,
    ) -> Result<Option<Vec<(u64, u32)>>, ReadError> {
        let head = self.head();
        let (floor, closed) = (self.floor, self.closed);
        let reader = &mut self.readers[r];
        let terminal = |cursor: u64| {
            if closed && cursor > head {
                ReadError::Closed(CloseReason::Completed)
            } else {
                ReadError::Gap {
                    next: cursor,
                    floor,
                    head,
                }
            }
        };
        if reader.done {
            return Err(terminal(reader.cursor));
        }
        if reader.cursor > head {
            if closed {
                reader.done = true;
                return Err(terminal(reader.cursor));
            }
            return Ok(None);
        }
        if !reader.pinned && reader.cursor < floor {
            reader.done = true;
            return Err(terminal(reader.cursor));
        }
        reader.pinned = false;
        let first = reader.cursor;
        let read = mark.map_or(head - first + 1, |n| (n as u64).min(head - first + 1));
        reader.cursor = first + read;
        Ok(Some(
            (first..=head).map(|id| (id, self.value(id))).collect(),
        ))
    }
}

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

fn run(
    capacity: usize,
    max_readers: usize,
    first_id: u64,
    ops: Vec<Op>,
) -> Result<(), TestCaseError> {
    let built: Result<(Producer<u32>, ReplayRing<u32>), BuildError> = ReplayRing::builder()
        .capacity(capacity)
        .max_readers(max_readers)
        .first_id(first_id)
        .build();
    let (producer, ring) = built.expect("valid configuration");
    let mut producer = Some(producer);
    let mut model = Model {
        capacity: ring.capacity() as u64,
        max_readers,
        first_id,
        values: Vec::new(),
        floor: first_id,
        closed: false,
        readers: Vec::new(),
        full: 0,
        resumes: [0; 4],
    };
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
        run(capacity, max_readers, first_id, ops)?;
    }
}
