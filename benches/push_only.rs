//! Scenario 1: the producer's cost per event with no live reader.
//!
//! Every implementation gets `CAPACITY` slots and is kept from filling up the way its semantics
//! require, inside the timed loop, every `CAPACITY/2` pushes:
//! - replay-ring and the naive log: `release_through(head)` (they retain until released);
//!   replay-ring is measured with the default `WakeupFences::Symmetric` (a full fence per push so
//!   that parked readers are woken) and with `WakeupFences::Asymmetric` (`replay-ring-asym`);
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

fn bench<T: Payload>(g: &mut BenchmarkGroup<'_, WallTime>) {
    let src = T::source();
    g.bench_function("replay-ring", |b| {
        b.iter_custom(|iters| {
            let (mut p, ring) = ReplayRing::<T>::builder()
                .capacity(CAPACITY)
                .max_readers(1)
                .build()
                .unwrap();
            timed(
                iters,
                |i| {
                    assert!(p.try_push(T::make(&src, i)).is_ok());
                },
                |i| {
                    ring.release_through(i).unwrap();
                },
            )
        })
    });
    g.bench_function("replay-ring-asym", |b| {
        b.iter_custom(|iters| {
            let (mut p, ring) = ReplayRing::<T>::builder()
                .capacity(CAPACITY)
                .max_readers(1)
                .wakeup_fences(WakeupFences::Asymmetric)
                .build()
                .unwrap();
            timed(
                iters,
                |i| {
                    assert!(p.try_push(T::make(&src, i)).is_ok());
                },
                |i| {
                    ring.release_through(i).unwrap();
                },
            )
        })
    });
    g.bench_function("rtrb", |b| {
        b.iter_custom(|iters| {
            let (mut p, mut c) = rtrb::RingBuffer::<T>::new(CAPACITY);
            timed(
                iters,
                |i| {
                    assert!(p.push(T::make(&src, i)).is_ok());
                },
                |_| {
                    let n = c.slots();
                    c.read_chunk(n).unwrap().commit_all();
                },
            )
        })
    });
    g.bench_function("crossbeam-arrayqueue", |b| {
        b.iter_custom(|iters| {
            let q = crossbeam::queue::ArrayQueue::<T>::new(CAPACITY);
            timed(
                iters,
                |i| {
                    assert!(q.push(T::make(&src, i)).is_ok());
                },
                |_| while q.pop().is_some() {},
            )
        })
    });
    g.bench_function("crossbeam-channel", |b| {
        b.iter_custom(|iters| {
            let (tx, rx) = crossbeam::channel::bounded::<T>(CAPACITY);
            timed(
                iters,
                |i| {
                    assert!(tx.try_send(T::make(&src, i)).is_ok());
                },
                |_| while rx.try_recv().is_ok() {},
            )
        })
    });
    g.bench_function("disruptor", |b| {
        b.iter_custom(|iters| {
            use disruptor::{build_single_producer, BusySpin, Producer};
            let builder = build_single_producer(CAPACITY, T::default, BusySpin);
            let (mut poller, builder) = builder.new_event_poller();
            let mut p = builder.build();
            timed(
                iters,
                |i| {
                    assert!(p.try_publish(|e| *e = T::make(&src, i)).is_ok());
                },
                |_| {
                    if let Ok(mut events) = poller.poll() {
                        for e in &mut events {
                            black_box(e);
                        }
                    }
                },
            )
        })
    });
    g.bench_function("tokio-broadcast", |b| {
        b.iter_custom(|iters| {
            let (tx, _rx) = tokio::sync::broadcast::channel::<T>(CAPACITY);
            timed(
                iters,
                |i| {
                    assert!(tx.send(T::make(&src, i)).is_ok());
                },
                |_| {},
            )
        })
    });
    g.bench_function("async-broadcast", |b| {
        b.iter_custom(|iters| {
            let (mut tx, _rx) = async_broadcast::broadcast::<T>(CAPACITY);
            tx.set_overflow(true);
            timed(
                iters,
                |i| {
                    assert!(tx.try_broadcast(T::make(&src, i)).is_ok());
                },
                |_| {},
            )
        })
    });
    g.bench_function("bus", |b| {
        b.iter_custom(|iters| {
            let mut bus = bus::Bus::<T>::new(CAPACITY);
            timed(
                iters,
                |i| {
                    assert!(bus.try_broadcast(T::make(&src, i)).is_ok());
                },
                |_| {},
            )
        })
    });
    g.bench_function("naive-log", |b| {
        b.iter_custom(|iters| {
            let log = NaiveLog::<T>::new(CAPACITY);
            timed(
                iters,
                |i| {
                    assert!(log.push(T::make(&src, i)).is_ok());
                },
                |i| log.release_through(i),
            )
        })
    });
}

fn benches(c: &mut Criterion) {
    let mut g = c.benchmark_group("s1_push/u64");
    g.throughput(Throughput::Elements(1));
    bench::<u64>(&mut g);
    g.finish();
    let mut g = c.benchmark_group("s1_push/bytes256");
    g.throughput(Throughput::Elements(1));
    bench::<Bytes>(&mut g);
    g.finish();
}

criterion_group! {
    name = group;
    config = common::criterion(300, 1000, 30);
    targets = benches
}
criterion_main!(group);
