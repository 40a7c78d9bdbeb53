//! A ring driven by arbitrary operation sequences (push, release, resume, read with partial
//! marks, dropping readers, close) against the sequential reference model: every result, every
//! error, every cursor, the floor and head after each step, and the final metrics must equal the
//! model's. Small capacities (1 to 5) and first ids near `u64::MAX` keep wrap-around, full rings,
//! pins and id exhaustion within reach of short inputs.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use replay_ring::{CloseReason, ReadError, Reader, ReplayRing};
use replay_ring_fuzz::ring_model::{Model, Refused};

#[derive(Debug, Arbitrary)]
enum Op {
    Push(u32),
    /// Release through `head - back`.
    Release(i8),
    /// Resume after `head - back`, or live.
    Resume(Option<i8>),
    /// Read from reader `r % readers`, marking at most `n` events read (`None`: all).
    Read(u8, Option<u8>),
    DropReader(u8),
    Close,
}

#[derive(Debug, Arbitrary)]
struct Input {
    capacity: u8,
    max_readers: u8,
    first_id: u8,
    ops: Vec<Op>,
}

type Events = Vec<(u64, u32)>;

fn ring_read(reader: &mut Reader<u32>, mark: Option<usize>) -> Result<Option<Events>, ReadError> {
    Ok(reader.try_read()?.map(|mut batch| {
        let (a, b) = batch.as_slices();
        assert_eq!(a.len() + b.len(), batch.len(), "slices cover the batch");
        assert_eq!(batch.last_id() + 1 - batch.first_id(), batch.len() as u64);
        let events = batch.iter().map(|(id, v)| (id, *v)).collect();
        if let Some(n) = mark {
            batch.mark_read(n);
        }
        events
    }))
}

fuzz_target!(|input: Input| {
    let capacity = usize::from(input.capacity % 5) + 1;
    let max_readers = usize::from(input.max_readers % 3) + 1;
    let first_id = match input.first_id % 3 {
        0 => 1,
        1 => 1_000,
        _ => u64::MAX - 6,
    };
    let (producer, ring) = ReplayRing::<u32>::builder()
        .capacity(capacity)
        .max_readers(max_readers)
        .first_id(first_id)
        .build()
        .expect("valid configuration");
    let mut producer = Some(producer);
    let mut model = Model::new(ring.capacity() as u64, max_readers, first_id);
    let mut readers: Vec<Reader<u32>> = Vec::new();

    for op in input.ops.into_iter().take(256) {
        let head = model.head();
        let back = |b: i8| head.saturating_add_signed(-i64::from(b));
        match op {
            Op::Push(v) => {
                if let Some(p) = producer.as_mut() {
                    assert_eq!(p.try_push(v), model.push(v));
                    assert_eq!(p.next_id(), model.head() + 1);
                }
            }
            Op::Release(b) => assert_eq!(ring.release_through(back(b)), model.release(back(b))),
            Op::Resume(b) => {
                let last = b.map(back);
                let real = ring.resume(last);
                assert_eq!(
                    real.as_ref().err().copied().map(Refused::from),
                    model.resume(last).err()
                );
                if let Ok(reader) = real {
                    assert_eq!(reader.cursor(), model.readers.last().unwrap().cursor);
                    readers.push(reader);
                }
            }
            Op::Read(r, mark) if !readers.is_empty() => {
                let r = usize::from(r) % readers.len();
                let mark = mark.map(|n| usize::from(n % 8));
                assert_eq!(ring_read(&mut readers[r], mark), model.read(r, mark));
                assert_eq!(readers[r].cursor(), model.readers[r].cursor);
            }
            Op::DropReader(r) if !readers.is_empty() => {
                let r = usize::from(r) % readers.len();
                readers.remove(r);
                model.readers.remove(r);
            }
            Op::Close => {
                if let Some(p) = producer.take() {
                    p.close(CloseReason::Completed);
                    model.closed = true;
                    assert!(ring.is_closed());
                }
            }
            Op::Read(..) | Op::DropReader(_) => {}
        }
        assert_eq!((ring.floor(), ring.head()), (model.floor, model.head()));
        assert!(ring.floor() <= ring.head() + 1);
    }

    let m = ring.metrics();
    assert_eq!(m.events_enqueued, model.values.len() as u64);
    assert_eq!(m.events_released, model.floor - first_id);
    assert_eq!(m.producer_full, model.full);
    assert_eq!(
        [
            m.resumes_ok,
            m.resumes_noop,
            m.resumes_below_floor,
            m.resumes_ahead_of_head
        ],
        model.resumes
    );
    assert_eq!(m.readers_active, readers.len());
    assert_eq!((m.floor, m.head), (model.floor, model.head()));
});
