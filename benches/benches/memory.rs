//! Scenario 6: memory. A counting global allocator (this binary only) measures
//! - the heap bytes of 10,000 rings of capacity 256, each holding 256 `Bytes` events, per retained
//!   event, beyond the payload (all events share one 256-byte buffer, so the payload is counted
//!   once and subtracted);
//! - the fixed bytes per empty ring;
//! - allocator calls per push in steady state (push + release/drain, as in scenario 1), and for
//!   replay-ring also per push + `try_read` of a live reader. replay-ring must make none.
//!
//! bus spawns one helper thread per bus, so it is measured with 1,000 instances (its cost is per
//! instance, so the per-event figure is the same). Results go to `<results>/memory.jsonl`.
//!
//! Streams (the MCP pattern, one ring per request stream): the heap of 10,000 concurrent idle
//! streams at the default capacity (1,024), then after each stream got a request's typical
//! handful of events (8), for replay-ring (reader tables of 4, the MCP store's default, and 16,
//! the ring's; the whole window allocated up front, and grown from 16 slots, the MCP store's
//! `initial_slots` default) against a lazily growing `Mutex<VecDeque>` log and a tokio broadcast channel of the
//! same capacity. Payloads: `Bytes` (a 32-byte handle) and a 128-byte message. Results go to
//! `<results>/memory-streams.jsonl`.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

use bytes::Bytes;
use replay_ring::ReplayRing;

use common::{js, record, reset_results, sized, NaiveLog, BYTES_LEN};

/// Counts allocator calls and live bytes, then defers to the system allocator.
struct Counting;

static CALLS: AtomicU64 = AtomicU64::new(0);
static LIVE: AtomicI64 = AtomicI64::new(0);

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so `System`'s
// guarantees hold; the counters are plain relaxed atomics (statistics, no ordering needed).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        CALLS.fetch_add(1, Relaxed);
        LIVE.fetch_add(layout.size() as i64, Relaxed);
        // SAFETY: forwarded contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        CALLS.fetch_add(1, Relaxed);
        LIVE.fetch_add(layout.size() as i64, Relaxed);
        // SAFETY: forwarded contract.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as i64, Relaxed);
        // SAFETY: forwarded contract.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        CALLS.fetch_add(1, Relaxed);
        LIVE.fetch_add(new_size as i64 - layout.size() as i64, Relaxed);
        // SAFETY: forwarded contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const CAP: usize = 256;

/// Live heap bytes held by whatever `build` returns (kept alive until measured).
fn heap_of<R>(build: impl FnOnce() -> R) -> (i64, R) {
    let before = LIVE.load(Relaxed);
    let r = build();
    (LIVE.load(Relaxed) - before, r)
}

/// Allocator calls made by `f`.
fn calls_in(f: impl FnOnce()) -> u64 {
    let before = CALLS.load(Relaxed);
    f();
    CALLS.load(Relaxed) - before
}

/// One peer: how to build an empty instance, fill it with `CAP` clones of a payload, and run
/// steady-state pushes.
struct Peer {
    name: &'static str,
    instances: usize,
    /// Builds `instances` filled (or empty, with `fill = false`) instances and reports their heap.
    footprint: fn(usize, &Bytes, bool) -> i64,
    /// Allocator calls for `n` steady-state pushes.
    steady: fn(u64, &Bytes) -> u64,
}

fn footprint_with<R>(n: usize, make: impl Fn() -> R) -> i64 {
    let (bytes, all) = heap_of(|| (0..n).map(|_| make()).collect::<Vec<_>>());
    let vec_overhead = (all.capacity() * size_of::<R>()) as i64;
    drop(all);
    bytes - vec_overhead
}

fn peers() -> Vec<Peer> {
    vec![
        Peer {
            name: "replay-ring (max_readers 1)",
            instances: 10_000,
            footprint: |n, b, fill| {
                footprint_with(n, || {
                    let (mut p, ring) = ReplayRing::<Bytes>::new(CAP, 1).unwrap();
                    for _ in 0..CAP * usize::from(fill) {
                        p.try_push(b.clone()).unwrap();
                    }
                    (p, ring)
                })
            },
            steady: |n, b| {
                let (mut p, ring) = ReplayRing::<Bytes>::new(CAP, 1).unwrap();
                let mut reader = ring.reader().unwrap();
                calls_in(|| {
                    for i in 1..=n {
                        p.try_push(b.clone()).unwrap();
                        if i % 64 == 0 {
                            let batch = reader.try_read().unwrap().unwrap();
                            black_box(batch.as_slices());
                            drop(batch);
                            ring.release_through(i).unwrap();
                        }
                    }
                })
            },
        },
        Peer {
            name: "replay-ring (max_readers 16)",
            instances: 10_000,
            footprint: |n, b, fill| {
                footprint_with(n, || {
                    let (mut p, ring) = ReplayRing::<Bytes>::new(CAP, 16).unwrap();
                    for _ in 0..CAP * usize::from(fill) {
                        p.try_push(b.clone()).unwrap();
                    }
                    (p, ring)
                })
            },
            steady: |n, b| {
                let (mut p, ring) = ReplayRing::<Bytes>::new(CAP, 16).unwrap();
                calls_in(|| {
                    for i in 1..=n {
                        p.try_push(b.clone()).unwrap();
                        if i % 128 == 0 {
                            ring.release_through(i).unwrap();
                        }
                    }
                })
            },
        },
        Peer {
            name: "naive-log",
            instances: 10_000,
            footprint: |n, b, fill| {
                footprint_with(n, || {
                    let log = NaiveLog::<Bytes>::new(CAP);
                    for _ in 0..CAP * usize::from(fill) {
                        assert!(log.push(b.clone()).is_ok());
                    }
                    log
                })
            },
            steady: |n, b| {
                let log = NaiveLog::<Bytes>::new(CAP);
                calls_in(|| {
                    for i in 1..=n {
                        assert!(log.push(b.clone()).is_ok());
                        if i % 128 == 0 {
                            log.release_through(i);
                        }
                    }
                })
            },
        },
        Peer {
            name: "tokio-broadcast",
            instances: 10_000,
            footprint: |n, b, fill| {
                footprint_with(n, || {
                    let (tx, rx) = tokio::sync::broadcast::channel::<Bytes>(CAP);
                    for _ in 0..CAP * usize::from(fill) {
                        tx.send(b.clone()).unwrap();
                    }
                    (tx, rx)
                })
            },
            steady: |n, b| {
                let (tx, _rx) = tokio::sync::broadcast::channel::<Bytes>(CAP);
                calls_in(|| {
                    for _ in 0..n {
                        tx.send(b.clone()).unwrap();
                    }
                })
            },
        },
        Peer {
            name: "async-broadcast",
            instances: 10_000,
            footprint: |n, b, fill| {
                footprint_with(n, || {
                    let (tx, rx) = async_broadcast::broadcast::<Bytes>(CAP);
                    for _ in 0..CAP * usize::from(fill) {
                        tx.try_broadcast(b.clone()).unwrap();
                    }
                    (tx, rx)
                })
            },
            steady: |n, b| {
                let (mut tx, _rx) = async_broadcast::broadcast::<Bytes>(CAP);
                tx.set_overflow(true);
                calls_in(|| {
                    for _ in 0..n {
                        tx.try_broadcast(b.clone()).unwrap();
                    }
                })
            },
        },
        Peer {
            name: "bus",
            instances: 1_000,
            footprint: |n, b, fill| {
                footprint_with(n, || {
                    let mut bus = bus::Bus::<Bytes>::new(CAP);
                    let rx = bus.add_rx();
                    for _ in 0..CAP * usize::from(fill) {
                        bus.try_broadcast(b.clone()).unwrap();
                    }
                    (bus, rx)
                })
            },
            steady: |n, b| {
                let mut bus = bus::Bus::<Bytes>::new(CAP);
                calls_in(|| {
                    for _ in 0..n {
                        bus.try_broadcast(b.clone()).unwrap();
                    }
                })
            },
        },
        Peer {
            name: "disruptor",
            instances: 10_000,
            footprint: |n, b, fill| {
                use disruptor::{build_single_producer, BusySpin, Producer};
                footprint_with(n, || {
                    let builder = build_single_producer(CAP, Bytes::new, BusySpin);
                    let (poller, builder) = builder.new_event_poller();
                    let mut p = builder.build();
                    for _ in 0..CAP * usize::from(fill) {
                        p.try_publish(|e| *e = b.clone()).unwrap();
                    }
                    (p, poller)
                })
            },
            steady: |n, b| {
                use disruptor::{build_single_producer, BusySpin, Producer};
                let builder = build_single_producer(CAP, Bytes::new, BusySpin);
                let (mut poller, builder) = builder.new_event_poller();
                let mut p = builder.build();
                calls_in(|| {
                    for i in 1..=n {
                        p.try_publish(|e| *e = b.clone()).unwrap();
                        if i % 128 == 0 {
                            if let Ok(mut events) = poller.poll() {
                                for e in &mut events {
                                    black_box(e);
                                }
                            }
                        }
                    }
                })
            },
        },
        Peer {
            name: "crossbeam-channel",
            instances: 10_000,
            footprint: |n, b, fill| {
                footprint_with(n, || {
                    let (tx, rx) = crossbeam::channel::bounded::<Bytes>(CAP);
                    for _ in 0..CAP * usize::from(fill) {
                        tx.try_send(b.clone()).unwrap();
                    }
                    (tx, rx)
                })
            },
            steady: |n, b| {
                let (tx, rx) = crossbeam::channel::bounded::<Bytes>(CAP);
                calls_in(|| {
                    for i in 1..=n {
                        tx.try_send(b.clone()).unwrap();
                        if i % 128 == 0 {
                            while rx.try_recv().is_ok() {}
                        }
                    }
                })
            },
        },
        Peer {
            name: "crossbeam-arrayqueue",
            instances: 10_000,
            footprint: |n, b, fill| {
                footprint_with(n, || {
                    let q = crossbeam::queue::ArrayQueue::<Bytes>::new(CAP);
                    for _ in 0..CAP * usize::from(fill) {
                        q.push(b.clone()).unwrap();
                    }
                    q
                })
            },
            steady: |n, b| {
                let q = crossbeam::queue::ArrayQueue::<Bytes>::new(CAP);
                calls_in(|| {
                    for i in 1..=n {
                        q.push(b.clone()).unwrap();
                        if i % 128 == 0 {
                            while q.pop().is_some() {}
                        }
                    }
                })
            },
        },
        Peer {
            name: "rtrb",
            instances: 10_000,
            footprint: |n, b, fill| {
                footprint_with(n, || {
                    let (mut tx, rx) = rtrb::RingBuffer::<Bytes>::new(CAP);
                    for _ in 0..CAP * usize::from(fill) {
                        tx.push(b.clone()).unwrap();
                    }
                    (tx, rx)
                })
            },
            steady: |n, b| {
                let (mut tx, mut rx) = rtrb::RingBuffer::<Bytes>::new(CAP);
                calls_in(|| {
                    for i in 1..=n {
                        tx.push(b.clone()).unwrap();
                        if i % 128 == 0 {
                            let k = rx.slots();
                            rx.read_chunk(k).unwrap().commit_all();
                        }
                    }
                })
            },
        },
    ]
}

/// A 128-byte message, standing in for a decoded JSON-RPC message held by value.
type Message = [u64; 16];

/// Events each stream gets in the "after a request" measurement.
const REQUEST_EVENTS: u64 = 8;

/// Heap bytes per stream of `streams` streams built by `make`, idle and after `REQUEST_EVENTS`
/// pushes each through `push`.
fn per_stream<S>(streams: usize, make: impl Fn() -> S, push: impl Fn(&mut S, u64)) -> (f64, f64) {
    let (idle, mut all) = heap_of(|| (0..streams).map(|_| make()).collect::<Vec<_>>());
    let vec_overhead = (all.capacity() * size_of::<S>()) as i64;
    let (grown, ()) = heap_of(|| {
        for s in &mut all {
            for i in 1..=REQUEST_EVENTS {
                push(s, i);
            }
        }
    });
    drop(all);
    let idle = (idle - vec_overhead) as f64 / streams as f64;
    (idle, idle + grown as f64 / streams as f64)
}

fn stream_rows<T: Clone + std::fmt::Debug + Send + Sync + 'static>(
    payload: &str,
    streams: usize,
    value: T,
) {
    const CAPACITY: usize = 1024;
    // `initial_slots`: `None` allocates the whole window up front (the ring's default), `Some(n)`
    // grows it from `n` slots as events arrive (the MCP store's default is 16).
    let ring = |readers: usize, initial_slots: Option<usize>| {
        let value = value.clone();
        per_stream(
            streams,
            move || {
                let builder = ReplayRing::<T>::builder()
                    .capacity(CAPACITY)
                    .max_readers(readers);
                match initial_slots {
                    Some(n) => builder.initial_slots(n),
                    None => builder,
                }
                .build()
                .unwrap()
            },
            move |(p, _), _| {
                p.try_push(value.clone()).unwrap();
            },
        )
    };
    let rows = [
        ("replay-ring (max_readers 4)", ring(4, None)),
        ("replay-ring (max_readers 16)", ring(16, None)),
        (
            "replay-ring (max_readers 4, initial_slots 16)",
            ring(4, Some(16)),
        ),
        (
            "replay-ring (max_readers 16, initial_slots 16)",
            ring(16, Some(16)),
        ),
        ("naive-log (VecDeque::new)", {
            let value = value.clone();
            per_stream(
                streams,
                || NaiveLog::<T>::lazy(CAPACITY),
                move |log, _| {
                    log.push(value.clone()).unwrap();
                },
            )
        }),
        ("tokio-broadcast", {
            let value = value.clone();
            per_stream(
                streams,
                || tokio::sync::broadcast::channel::<T>(CAPACITY),
                move |(tx, _), _| {
                    tx.send(value.clone()).unwrap();
                },
            )
        }),
    ];
    for (name, (idle, after)) in rows {
        record(
            "memory-streams.jsonl",
            &[
                ("peer", js(name)),
                ("payload", js(payload)),
                ("payload_size", size_of::<T>().to_string()),
                ("capacity", CAPACITY.to_string()),
                ("streams", streams.to_string()),
                ("idle_bytes_per_stream", format!("{idle:.0}")),
                ("bytes_per_stream_after_request", format!("{after:.0}")),
                ("request_events", REQUEST_EVENTS.to_string()),
                ("idle_bytes_total", format!("{:.0}", idle * streams as f64)),
            ],
        );
    }
}

/// The MCP pattern: many short-lived streams, one per request.
fn streams() {
    reset_results("memory-streams.jsonl");
    let streams = if common::quick() { 100 } else { 10_000 };
    stream_rows("bytes", streams, Bytes::from(vec![7u8; BYTES_LEN]));
    stream_rows("message128", streams, Message::default());
}

fn main() {
    streams();
    reset_results("memory.jsonl");
    // One shared payload buffer; the first clone turns it into a shared `Bytes` (one allocation),
    // done here so that no later clone allocates.
    let payload = Bytes::from(vec![7u8; BYTES_LEN]);
    let keep = payload.clone();
    let pushes = sized(1_000_000, 10_000);
    for peer in peers() {
        let instances = if common::quick() { 100 } else { peer.instances };
        let empty = (peer.footprint)(instances, &payload, false);
        let filled = (peer.footprint)(instances, &payload, true);
        let events = (instances * CAP) as f64;
        let calls = (peer.steady)(pushes, &payload);
        record(
            "memory.jsonl",
            &[
                ("peer", js(peer.name)),
                ("instances", instances.to_string()),
                ("capacity", CAP.to_string()),
                (
                    "empty_bytes_per_ring",
                    format!("{:.0}", empty as f64 / instances as f64),
                ),
                (
                    "filled_bytes_per_ring",
                    format!("{:.0}", filled as f64 / instances as f64),
                ),
                ("bytes_per_event", format!("{:.2}", filled as f64 / events)),
                ("pushes", pushes.to_string()),
                (
                    "allocs_per_push",
                    format!("{:.6}", calls as f64 / pushes as f64),
                ),
            ],
        );
    }
    drop(keep);
}
