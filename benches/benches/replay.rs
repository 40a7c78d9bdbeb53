//! Scenario 4: a reader resumes from `X` with W retained events (it replays all W), for
//! W = 64 … 65,536. Two measurements per W: the resume call alone, and resume + touching every
//! replayed event. Both include dropping what the call returned (replay-ring: the `Reader`, which
//! frees its slot; naive log: the `Vec` of cloned events), since a server does that per request.
//!
//! Only replay-ring and the naive `Mutex<VecDeque>` log can replay; the other peers are "n/a".
//! The retained window wraps around the end of the ring (it is `W/2+1 ..= 3W/2` in a ring of W
//! slots), so replay-ring's batch comes as two slices, as it usually would.

mod common;

use bytes::Bytes;
use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, BenchmarkId, Criterion};
use replay_ring::{Producer, ReplayRing};

use common::{consume, NaiveLog, Payload};

const WINDOWS: [u64; 5] = [64, 1_024, 4_096, 16_384, 65_536];

/// Pushes ids `1..=w` through `push`, releases through `w/2`, then pushes `w+1 ..= 3w/2`.
fn fill<T: Payload>(w: u64, mut push: impl FnMut(T), release: impl FnOnce(u64)) {
    let src = T::source();
    for i in 1..=w {
        push(T::make(&src, i));
    }
    release(w / 2);
    for i in w + 1..=w + w / 2 {
        push(T::make(&src, i));
    }
}

/// A ring of `w` slots holding ids `w/2+1 ..= 3w/2`; returns the resume point `w/2`.
fn filled_ring<T: Payload>(w: u64) -> (Producer<T>, ReplayRing<T>, u64) {
    let (mut p, ring) = ReplayRing::<T>::builder()
        .capacity(w as usize)
        .max_readers(1)
        .build()
        .unwrap();
    fill(
        w,
        |v| {
            p.try_push(v).unwrap();
        },
        |id| {
            ring.release_through(id).unwrap();
        },
    );
    assert_eq!(ring.head() - ring.floor() + 1, w);
    (p, ring, w / 2)
}

/// The naive log with the same ids.
fn filled_log<T: Payload>(w: u64) -> (NaiveLog<T>, u64) {
    let log = NaiveLog::new(w as usize);
    fill(
        w,
        |v| assert!(log.push(v).is_ok(), "full"),
        |id| log.release_through(id),
    );
    (log, w / 2)
}

fn resume_only<T: Payload>(g: &mut BenchmarkGroup<'_, WallTime>) {
    for w in WINDOWS {
        let (_p, ring, x) = filled_ring::<T>(w);
        g.bench_with_input(BenchmarkId::new("replay-ring", w), &x, |b, &x| {
            b.iter(|| ring.resume(Some(x)).unwrap())
        });
        drop(ring);
        let (log, x) = filled_log::<T>(w);
        g.bench_with_input(BenchmarkId::new("naive-log", w), &x, |b, &x| {
            b.iter(|| log.replay_from(x))
        });
    }
}

fn resume_touch<T: Payload>(g: &mut BenchmarkGroup<'_, WallTime>) {
    for w in WINDOWS {
        let (_p, ring, x) = filled_ring::<T>(w);
        g.bench_with_input(BenchmarkId::new("replay-ring", w), &x, |b, &x| {
            b.iter(|| {
                let mut reader = ring.resume(Some(x)).unwrap();
                let batch = reader.try_read().unwrap().unwrap();
                let (a, b) = batch.as_slices();
                assert_eq!((a.len() + b.len()) as u64, w);
                consume(
                    a.iter()
                        .chain(b)
                        .map(Payload::touch)
                        .fold(0, u64::wrapping_add),
                );
            })
        });
        drop(ring);
        let (log, x) = filled_log::<T>(w);
        g.bench_with_input(BenchmarkId::new("naive-log", w), &x, |b, &x| {
            b.iter(|| {
                let events = log.replay_from(x);
                assert_eq!(events.len() as u64, w);
                consume(
                    events
                        .iter()
                        .map(|(_, v)| v.touch())
                        .fold(0, u64::wrapping_add),
                );
            })
        });
    }
}

fn benches(c: &mut Criterion) {
    common::group::<u64>(c, "s4_resume", resume_only::<u64>);
    common::group::<Bytes>(c, "s4_resume", resume_only::<Bytes>);
    common::group::<u64>(c, "s4_resume_touch", resume_touch::<u64>);
    common::group::<Bytes>(c, "s4_resume_touch", resume_touch::<Bytes>);
}

criterion_group! {
    name = group;
    config = common::criterion(200, 700, 20);
    targets = benches
}
criterion_main!(group);
