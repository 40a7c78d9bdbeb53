//! Scenario 1: the producer's cost per event with no live reader.
//!
//! Every implementation gets `CAPACITY` slots and is kept from filling up the way its semantics
//! require, inside the timed loop, every `CAPACITY/2` pushes:
//! - replay-ring and the naive log: `release_through(head)` (they retain until released);
//!   replay-ring is measured with the default `WakeupFences::Symmetric` (a full fence per push so
//!   that parked readers are woken), with `WakeupFences::Asymmetric` (`replay-ring-asym`), and with
//!   the default fences publishing runs of [`RUN`] events per `try_push_many` (`replay-ring-many`:
//!   one `head` store and one fence per run; the time is per event);
//! - rtrb, crossbeam channel / ArrayQueue, disruptor (event poller): the same thread drains what is
//!   queued (dropping the values, as replay-ring drops a value when its slot is reused);
//! - tokio broadcast and async-broadcast (overflow mode): one receiver that never reads, so each
//!   send past capacity overwrites the oldest value (their "ring" use);
//! - bus: no reader at all (bus accepts broadcasts with zero readers).

mod common;

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};
use replay_ring::{ReplayRing, WakeupFences};

use common::{NaiveLog, Payload, CAPACITY};

const HALF: u64 = (CAPACITY / 2) as u64;

/// Events per `try_push_many` in `replay-ring-many` (as in the coalesced wake-up benchmark).
const RUN: u64 = 16;

/// Times `iters` pushes through `push(i)`, calling `drain(i)` every `HALF` pushes.
#[inline(always)]
fn timed(iters: u64, mut push: impl FnMut(u64), mut drain: impl FnMut(u64)) -> Duration {
    let t0 = Instant::now();
    for i in 1..=iters {
        push(i);
        if i % HALF == 0 {
            drain(i);
        }
    }
    t0.elapsed()
}

/// Bench `id`: criterion's `iters` go to `run`, which builds a fresh peer and returns `timed`.
fn peer(g: &mut BenchmarkGroup<'_, WallTime>, id: &str, mut run: impl FnMut(u64) -> Duration) {
    g.bench_function(id, |b| b.iter_custom(&mut run));
}

fn bench<T: Payload>(g: &mut BenchmarkGroup<'_, WallTime>) {
    let src = T::source();
    // The default (symmetric) wake-up fences, then asymmetric.
    for (id, fences) in [
        ("replay-ring", WakeupFences::Symmetric),
        ("replay-ring-asym", WakeupFences::Asymmetric),
    ] {
        peer(g, id, |iters| {
            let (mut p, ring) = ReplayRing::<T>::builder()
                .capacity(CAPACITY)
                .max_readers(1)
                .wakeup_fences(fences)
                .build()
                .unwrap();
            let push = |i| assert!(p.try_push(T::make(&src, i)).is_ok());
            timed(iters, push, |i| {
                ring.release_through(i).unwrap();
            })
        });
    }
    peer(g, "replay-ring-many", |iters| {
        let (mut p, ring) = ReplayRing::<T>::builder()
            .capacity(CAPACITY)
            .max_readers(1)
            .build()
            .unwrap();
        let t0 = Instant::now();
        let mut next = 1;
        while next <= iters {
            let last = (next + RUN - 1).min(iters);
            let mut run = (next..=last).map(|i| T::make(&src, i));
            assert_eq!(p.try_push_many(&mut run) as u64, last - next + 1);
            // Released every HALF events, as the single-push peers are.
            if last / HALF > (next - 1) / HALF {
                ring.release_through(last / HALF * HALF).unwrap();
            }
            next = last + 1;
        }
        t0.elapsed()
    });
    peer(g, "rtrb", |iters| {
        let (mut p, mut c) = rtrb::RingBuffer::<T>::new(CAPACITY);
        timed(
            iters,
            |i| assert!(p.push(T::make(&src, i)).is_ok()),
            |_| {
                let n = c.slots();
                c.read_chunk(n).unwrap().commit_all();
            },
        )
    });
    peer(g, "crossbeam-arrayqueue", |iters| {
        let q = crossbeam::queue::ArrayQueue::<T>::new(CAPACITY);
        timed(
            iters,
            |i| assert!(q.push(T::make(&src, i)).is_ok()),
            |_| while q.pop().is_some() {},
        )
    });
    peer(g, "crossbeam-channel", |iters| {
        let (tx, rx) = crossbeam::channel::bounded::<T>(CAPACITY);
        timed(
            iters,
            |i| assert!(tx.try_send(T::make(&src, i)).is_ok()),
            |_| while rx.try_recv().is_ok() {},
        )
    });
    peer(g, "disruptor", |iters| {
        use disruptor::{build_single_producer, BusySpin, Producer};
        let builder = build_single_producer(CAPACITY, T::default, BusySpin);
        let (mut poller, builder) = builder.new_event_poller();
        let mut p = builder.build();
        timed(
            iters,
            |i| assert!(p.try_publish(|e| *e = T::make(&src, i)).is_ok()),
            |_| {
                if let Ok(mut events) = poller.poll() {
                    for e in &mut events {
                        black_box(e);
                    }
                }
            },
        )
    });
    peer(g, "tokio-broadcast", |iters| {
        let (tx, _rx) = tokio::sync::broadcast::channel::<T>(CAPACITY);
        timed(
            iters,
            |i| assert!(tx.send(T::make(&src, i)).is_ok()),
            |_| {},
        )
    });
    peer(g, "async-broadcast", |iters| {
        let (mut tx, _rx) = async_broadcast::broadcast::<T>(CAPACITY);
        tx.set_overflow(true);
        timed(
            iters,
            |i| assert!(tx.try_broadcast(T::make(&src, i)).is_ok()),
            |_| {},
        )
    });
    peer(g, "bus", |iters| {
        let mut bus = bus::Bus::<T>::new(CAPACITY);
        timed(
            iters,
            |i| assert!(bus.try_broadcast(T::make(&src, i)).is_ok()),
            |_| {},
        )
    });
    peer(g, "naive-log", |iters| {
        let log = NaiveLog::<T>::new(CAPACITY);
        timed(
            iters,
            |i| assert!(log.push(T::make(&src, i)).is_ok()),
            |i| log.release_through(i),
        )
    });
}

/// Group `s1_push/<payload>`, one pushed element per iteration.
fn payload<T: Payload>(c: &mut Criterion) {
    common::group::<T>(c, "s1_push", |g| {
        g.throughput(Throughput::Elements(1));
        bench::<T>(g);
    });
}

fn benches(c: &mut Criterion) {
    payload::<u64>(c);
    payload::<Bytes>(c);
}

criterion_group! {
    name = group;
    config = common::criterion(300, 1000, 30);
    targets = benches
}
criterion_main!(group);
