//! The sequential reference model of the ring, shared by the property test `tests/model.rs` and
//! the fuzz target `fuzz/fuzz_targets/ring_ops.rs`: a plain event log with a floor, reader cursors and
//! the pin a replaying resume holds until its first read. Every ring operation has a model twin
//! that returns the result the ring must return.

use replay_ring::{CloseReason, PushError, ReadError, ReleaseError, ResumeError};

/// A refused resume, comparable with the ring's `ResumeError` (whose `TooManyReaders` payload
/// only the ring can build).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Every reader slot is taken.
    TableFull {
        /// The configured limit.
        limit: usize,
    },
    /// Any other refusal, as the ring reports it.
    Cursor(ResumeError),
}

impl From<ResumeError> for Refused {
    fn from(e: ResumeError) -> Self {
        match e {
            ResumeError::TooManyReaders(full) => Refused::TableFull { limit: full.limit },
            other => Refused::Cursor(other),
        }
    }
}

/// One reader of the model.
#[derive(Debug)]
pub struct ModelReader {
    /// The next id this reader reads.
    pub cursor: u64,
    /// A replaying resume pins its first id until the first read.
    pub pinned: bool,
    /// The reader has reported a terminal error.
    pub done: bool,
}

/// The event log, sequential and obviously correct.
#[derive(Debug)]
pub struct Model {
    /// Ring capacity.
    pub capacity: u64,
    /// Slots allocated up front (`Builder::initial_slots`, rounded and clamped as the builder
    /// does): a read lends at most two slot segments (see `read`). `capacity` for an eager ring.
    pub initial_slots: u64,
    /// Reader slots.
    pub max_readers: usize,
    /// The id of the first event.
    pub first_id: u64,
    /// Every value pushed, in id order.
    pub values: Vec<u32>,
    /// Lowest id a resume may still ask for.
    pub floor: u64,
    /// The producer closed the stream.
    pub closed: bool,
    /// Live readers, in the order they were opened.
    pub readers: Vec<ModelReader>,
    /// Refused pushes (`producer_full`).
    pub full: u64,
    /// Resumes: ok, no-op, below the floor, ahead of the head.
    pub resumes: [u64; 4],
}

impl Model {
    /// An empty log whose first event gets `first_id`.
    pub fn new(capacity: u64, max_readers: usize, first_id: u64) -> Self {
        Model {
            capacity,
            initial_slots: capacity,
            max_readers,
            first_id,
            values: Vec::new(),
            floor: first_id,
            closed: false,
            readers: Vec::new(),
            full: 0,
            resumes: [0; 4],
        }
    }

    /// A ring built with `initial_slots(n)`: the slot segments are `[0, S0)`, `[S0, 2 S0)`,
    /// `[2 S0, 4 S0)`, … `[capacity / 2, capacity)` with `S0 = n` rounded up to a power of two and
    /// clamped to `1..=capacity`.
    pub fn with_initial_slots(mut self, n: u64) -> Self {
        self.initial_slots = n.clamp(1, self.capacity).next_power_of_two();
        self
    }

    /// The last id a read starting at `first` may lend: the rest of the slot segment of `first`
    /// and the whole segment after it (segment 0 after the last one). Written from the segment
    /// list, not from the ring's arithmetic.
    pub fn batch_end(&self, first: u64) -> u64 {
        let mut bounds = vec![0];
        let mut end = self.initial_slots;
        while end <= self.capacity {
            bounds.push(end);
            end *= 2;
        }
        let index = first % self.capacity;
        let seg = bounds.iter().rposition(|&b| b <= index).unwrap();
        let seg_end = bounds[seg + 1];
        let next_len = if seg_end == self.capacity {
            bounds[1]
        } else {
            bounds[seg + 2] - bounds[seg + 1]
        };
        first.saturating_add(seg_end - index + next_len - 1)
    }

    /// The last id pushed (`first_id - 1` before the first push).
    pub fn head(&self) -> u64 {
        self.first_id - 1 + self.values.len() as u64
    }

    /// The value pushed as `id`.
    pub fn value(&self, id: u64) -> u32 {
        self.values[(id - self.first_id) as usize]
    }

    /// `try_push`: the id, `Full`, or `IdsExhausted`.
    pub fn push(&mut self, value: u32) -> Result<u64, PushError<u32>> {
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

    /// `release_through(id)`: the new floor, or `AheadOfHead`.
    pub fn release(&mut self, id: u64) -> Result<u64, ReleaseError> {
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

    /// `resume(last)`: opens a model reader, or the typed refusal. The cursor is judged first;
    /// only a valid cursor can then find the reader table full.
    pub fn resume(&mut self, last: Option<u64>) -> Result<(), Refused> {
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
    pub fn read(
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
        let last = head.min(self.batch_end(first));
        let reader = &mut self.readers[r];
        let read = mark.map_or(last - first + 1, |n| (n as u64).min(last - first + 1));
        reader.cursor = first + read;
        Ok(Some(
            (first..=last).map(|id| (id, self.value(id))).collect(),
        ))
    }
}
