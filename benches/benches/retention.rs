//! Scenario 9, server side: what one written batch costs the SSE endpoint's retention policy as
//! the number of live connections grows. `C` connections (10, 1,000, 10,000) take turns reporting a written batch,
//! as the SSE endpoint's writers do; each full round publishes one event, and the short
//! resumption window keeps releasing behind the slowest connection. Two measurements per `C`:
//!
//! - `on_written`: the report alone;
//! - `batch`: everything a writer asks of the policy per chunk: the report, the release of what
//!   expired (with the slow-consumer check), the cut check, the next pending write, and the
//!   publisher's next wake-up.
//!
//! Both should be flat in `C` (O(log C)); the time is a synthetic clock advanced 1 µs per batch.

mod common;

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use replay_ring::{Producer, ReplayRing};
use replay_ring_sse::{ConnectionId, Retention, RetentionConfig};

const CONNECTIONS: [usize; 3] = [10, 1_000, 10_000];

/// A stream with `c` live connections taking turns.
struct Stream {
    producer: Producer<u64>,
    ring: ReplayRing<u64>,
    retention: Retention,
    connections: Vec<ConnectionId>,
    next: usize,
    now: Instant,
}

impl Stream {
    fn new(c: usize) -> Self {
        let (producer, ring) = ReplayRing::<u64>::new(4096, 1).unwrap();
        let config = RetentionConfig {
            resumption_window: Duration::from_millis(1),
            ..RetentionConfig::default()
        };
        let mut retention = Retention::new(config, c);
        let connections = (0..c).map(|_| retention.connect(0).unwrap()).collect();
        let mut stream = Stream {
            producer,
            ring,
            retention,
            connections,
            next: 0,
            now: Instant::now(),
        };
        // Warm up: every connection has written something and releases are under way.
        for _ in 0..4 * c {
            stream.batch(false);
        }
        stream
    }

    /// The next connection reports a written batch through the head; with `full`, also the rest
    /// of a writer's per-chunk calls.
    fn batch(&mut self, full: bool) {
        self.now += Duration::from_micros(1);
        let k = self.next;
        self.next = (k + 1) % self.connections.len();
        if k == 0 {
            // Room is made by the releases below; a full window only skips this event.
            let _ = self.producer.try_push(0);
        }
        let conn = &self.connections[k];
        self.retention.on_written(conn, self.ring.head(), self.now);
        if full {
            black_box(self.retention.release_expired(&self.ring, self.now));
            black_box(self.retention.cut_verdict(conn));
            self.retention.on_write_pending(conn, self.now);
            black_box(self.retention.next_expiry());
        } else if k == 0 {
            // Keep the window moving so the push above finds room.
            self.retention.release_expired(&self.ring, self.now);
        }
    }
}

fn retention(c: &mut Criterion) {
    let mut g = c.benchmark_group("s9_retention/per_batch");
    g.throughput(Throughput::Elements(1));
    for n in CONNECTIONS {
        let mut stream = Stream::new(n);
        g.bench_function(BenchmarkId::new("on_written", n), |b| {
            b.iter(|| stream.batch(false))
        });
        let mut stream = Stream::new(n);
        g.bench_function(BenchmarkId::new("batch", n), |b| {
            b.iter(|| stream.batch(true))
        });
    }
    g.finish();
}

criterion_group! {
    name = group;
    config = common::criterion(300, 1500, 20);
    targets = retention
}
criterion_main!(group);
