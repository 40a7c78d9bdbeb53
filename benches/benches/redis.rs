//! The Redis backend (replay-ring-redis) against raw Redis Streams commands on the same
//! redis-server, in the same run:
//!
//! - `redis_append/single`: one `RedisProducer::append` (a script: lease, window and idempotency
//!   checks, `XADD` with an explicit id) vs one raw `XADD key * d <payload>`; one round trip each.
//! - `redis_append/batch64`: `append_batch` of 64 events (one script) vs 64 raw `XADD`s in one
//!   pipeline. Throughput in events.
//! - `redis_resume/W`: resume after `floor - 1` and read all W retained events (the atomic
//!   decision + first page, then pages of `read_batch`) vs one raw `XRANGE key - +` of the same W
//!   entries, for W = 64 … 65,536.
//! - `redis_tail_latency`: append-to-reader latency for a reader blocked in `XREAD` on another
//!   connection, vs raw `XADD` + `XREAD BLOCK`. Criterion reports the mean; p50/p99 over the
//!   samples are printed as `redis_tail_latency/<peer>: p50 … p99 …`.
//!
//! The server runs from a temp dir with persistence off (`--appendonly no --save ""`), so the
//! numbers are the commands' cost, not the disk's. Skipped with a message when no `redis-server`
//! is on the PATH (`scripts/redis-setup` installs it). Payloads are 100 bytes.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use redis::aio::MultiplexedConnection;
use replay_ring_redis::{ReadItem, RedisBackend, RedisConfig, RedisStream};
use replay_ring_sse::StreamId;
use tokio::runtime::Runtime;

const PAYLOAD: [u8; 100] = [b'x'; 100];
const WINDOWS: [u64; 5] = [64, 1_024, 4_096, 16_384, 65_536];

/// A private redis-server on a free loopback port; killed on drop.
struct Server {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Server {
    fn start() -> Option<Server> {
        let exe = std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|p| p.join("redis-server"))
                .find(|p| p.is_file())
        })?;
        let dir = tempfile::tempdir().ok()?;
        let port = TcpListener::bind("127.0.0.1:0")
            .ok()?
            .local_addr()
            .ok()?
            .port();
        let child = Command::new(exe)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--appendonly", "no", "--save", "", "--daemonize", "no"])
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .spawn()
            .ok()?;
        let server = Server {
            child,
            port,
            _dir: dir,
        };
        let client = redis::Client::open(server.url()).ok()?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(mut c) = client.get_connection_with_timeout(Duration::from_millis(200)) {
                if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                    return Some(server);
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Setup {
    rt: Runtime,
    server: Server,
    backend: RedisBackend,
    raw: MultiplexedConnection,
}

fn setup() -> Option<Setup> {
    let Some(server) = Server::start() else {
        eprintln!("redis bench skipped: no redis-server on PATH (run scripts/redis-setup)");
        return None;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (backend, raw) = rt.block_on(async {
        let config = RedisConfig {
            read_batch: 1024,
            response_timeout: Duration::from_secs(60),
            // The producers sit idle while the raw peers are measured.
            lease: Duration::from_secs(3600),
            ..RedisConfig::default()
        };
        let backend = RedisBackend::connect(&server.url(), config).await.unwrap();
        // Large XRANGE replies take longer than redis-rs's default 500 ms in a debug build.
        let config =
            redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(60)));
        let raw = redis::Client::open(server.url())
            .unwrap()
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .unwrap();
        (backend, raw)
    });
    Some(Setup {
        rt,
        server,
        backend,
        raw,
    })
}

async fn stream(backend: &RedisBackend, name: &str, capacity: u64) -> RedisStream {
    backend
        .create(&StreamId::new(name).unwrap(), capacity)
        .await
        .unwrap()
}

async fn raw_xadd(raw: &mut MultiplexedConnection, key: &str) {
    let _: String = redis::cmd("XADD")
        .arg(key)
        .arg("*")
        .arg("d")
        .arg(&PAYLOAD[..])
        .query_async(raw)
        .await
        .unwrap();
}

async fn raw_del(raw: &mut MultiplexedConnection, key: &str) {
    let _: () = redis::cmd("DEL").arg(key).query_async(raw).await.unwrap();
}

fn append(c: &mut Criterion, s: &mut Setup) {
    let mut group = c.benchmark_group("redis_append");
    let target = s.rt.block_on(stream(&s.backend, "bench-append", 1 << 40));
    let mut producer = s.rt.block_on(target.acquire_producer()).unwrap();
    let mut raw = s.raw.clone();

    group.throughput(Throughput::Elements(1));
    group.bench_function(BenchmarkId::new("single", "replay-ring-redis"), |b| {
        b.iter_custom(|iters| {
            s.rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    producer.append(&PAYLOAD).await.unwrap();
                }
                let took = start.elapsed();
                let head = producer.next_id() - 1;
                target.release_through(head).await.unwrap();
                took
            })
        })
    });
    group.bench_function(BenchmarkId::new("single", "raw XADD"), |b| {
        b.iter_custom(|iters| {
            s.rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    raw_xadd(&mut raw, "raw-append").await;
                }
                let took = start.elapsed();
                raw_del(&mut raw, "raw-append").await;
                took
            })
        })
    });

    const BATCH: usize = 64;
    let batch = vec![&PAYLOAD[..]; BATCH];
    group.throughput(Throughput::Elements(BATCH as u64));
    group.bench_function(BenchmarkId::new("batch64", "replay-ring-redis"), |b| {
        b.iter_custom(|iters| {
            s.rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    producer.append_batch(&batch).await.unwrap();
                }
                let took = start.elapsed();
                let head = producer.next_id() - 1;
                target.release_through(head).await.unwrap();
                took
            })
        })
    });
    group.bench_function(BenchmarkId::new("batch64", "raw pipelined XADD"), |b| {
        b.iter_custom(|iters| {
            s.rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    let mut pipe = redis::pipe();
                    for _ in 0..BATCH {
                        pipe.cmd("XADD")
                            .arg("raw-batch")
                            .arg("*")
                            .arg("d")
                            .arg(&PAYLOAD[..]);
                    }
                    let _: Vec<String> = pipe.query_async(&mut raw).await.unwrap();
                }
                let took = start.elapsed();
                raw_del(&mut raw, "raw-batch").await;
                took
            })
        })
    });
    group.finish();
}

fn resume(c: &mut Criterion, s: &mut Setup) {
    let mut group = c.benchmark_group("redis_resume");
    let mut raw = s.raw.clone();
    // `cargo test --benches` runs each benchmark once, unoptimised: the small windows suffice.
    let quick = !std::env::args().any(|a| a == "--bench");
    let windows = if quick { &WINDOWS[..2] } else { &WINDOWS[..] };
    for &w in windows {
        // W retained events, ids W/2+1 ..= 3W/2 (as in the in-process replay bench).
        let name = format!("bench-resume-{w}");
        let target = s.rt.block_on(stream(&s.backend, &name, w));
        let raw_key = format!("raw-resume-{w}");
        let from = s.rt.block_on(async {
            let mut p = target.acquire_producer().await.unwrap();
            fill(&mut p, w).await;
            target.release_through(w / 2).await.unwrap();
            fill(&mut p, w / 2).await;
            for _ in 0..w {
                raw_xadd(&mut raw, &raw_key).await;
            }
            let state = target.state().await.unwrap();
            assert_eq!(state.head + 1 - state.floor, w);
            state.floor - 1
        });
        group.throughput(Throughput::Elements(w));
        group.bench_with_input(BenchmarkId::new("replay-ring-redis", w), &w, |b, &w| {
            b.iter(|| {
                s.rt.block_on(async {
                    let mut reader = target.resume(Some(from)).await.unwrap();
                    let mut n = 0;
                    while n < w {
                        match reader.recv().await.unwrap() {
                            ReadItem::Events(events) => n += events.len() as u64,
                            ReadItem::Closed(_) => unreachable!("not closed"),
                        }
                    }
                    n
                })
            })
        });
        group.bench_with_input(BenchmarkId::new("raw XRANGE", w), &w, |b, &w| {
            b.iter(|| {
                s.rt.block_on(async {
                    let reply: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
                        .arg(&raw_key)
                        .arg("-")
                        .arg("+")
                        .query_async(&mut raw)
                        .await
                        .unwrap();
                    assert_eq!(reply.ids.len() as u64, w);
                    reply.ids.len()
                })
            })
        });
    }
    group.finish();
}

/// Appends `n` payloads in batches of up to 512.
async fn fill(p: &mut replay_ring_redis::RedisProducer, n: u64) {
    let mut left = n;
    while left > 0 {
        let k = left.min(512);
        p.append_batch(&vec![&PAYLOAD[..]; k as usize])
            .await
            .unwrap();
        left -= k;
    }
}

/// Latency samples of `iters` append → seen hand-offs, one in flight at a time.
fn tail_latency(c: &mut Criterion, s: &mut Setup) {
    let mut group = c.benchmark_group("redis_tail_latency");
    let target = s.rt.block_on(stream(&s.backend, "bench-tail", 1 << 40));
    let mut producer = s.rt.block_on(target.acquire_producer()).unwrap();
    let url = s.server.url();

    // replay-ring-redis: a RedisReader blocked in XREAD on its own connection.
    let (seen_tx, mut seen_rx) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    let mut reader = s.rt.block_on(target.resume(None)).unwrap();
    s.rt.spawn(async move {
        while let Ok(ReadItem::Events(events)) = reader.recv().await {
            let now = Instant::now();
            for _ in events {
                if seen_tx.send(now).is_err() {
                    return;
                }
            }
        }
    });
    let mut samples = Vec::new();
    group.bench_function("replay-ring-redis", |b| {
        b.iter_custom(|iters| {
            s.rt.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let sent = Instant::now();
                    producer.append(&PAYLOAD).await.unwrap();
                    let seen = seen_rx.recv().await.unwrap();
                    let lat = seen.saturating_duration_since(sent);
                    samples.push(lat);
                    total += lat;
                }
                let head = producer.next_id() - 1;
                target.release_through(head).await.unwrap();
                total
            })
        })
    });
    report("replay-ring-redis", &mut samples);

    // Raw: XREAD BLOCK on a dedicated connection, XADD on the shared one.
    let (raw_tx, mut raw_rx) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    s.rt.spawn(async move {
        let client = redis::Client::open(url).unwrap();
        let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .unwrap();
        // From the start, not `$`: the first XADD may land before this XREAD is issued.
        let mut last = "0-0".to_owned();
        loop {
            let opts = redis::streams::StreamReadOptions::default().block(0);
            let reply: redis::streams::StreamReadReply = match redis::AsyncCommands::xread_options(
                &mut conn,
                &["raw-tail"],
                &[last.as_str()],
                &opts,
            )
            .await
            {
                Ok(r) => r,
                Err(_) => return,
            };
            let now = Instant::now();
            for key in reply.keys {
                for entry in key.ids {
                    last = entry.id;
                    if raw_tx.send(now).is_err() {
                        return;
                    }
                }
            }
        }
    });
    let mut raw = s.raw.clone();
    let mut samples = Vec::new();
    group.bench_function("raw XADD + XREAD BLOCK", |b| {
        b.iter_custom(|iters| {
            s.rt.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let sent = Instant::now();
                    raw_xadd(&mut raw, "raw-tail").await;
                    let seen = raw_rx.recv().await.unwrap();
                    let lat = seen.saturating_duration_since(sent);
                    samples.push(lat);
                    total += lat;
                }
                let _: () = redis::cmd("XTRIM")
                    .arg("raw-tail")
                    .arg("MAXLEN")
                    .arg(0)
                    .query_async(&mut raw)
                    .await
                    .unwrap();
                total
            })
        })
    });
    report("raw XADD + XREAD BLOCK", &mut samples);
    group.finish();
}

fn report(peer: &str, samples: &mut [Duration]) {
    if samples.is_empty() {
        return;
    }
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize];
    eprintln!(
        "redis_tail_latency/{peer}: p50 {:?} p99 {:?} ({} samples)",
        at(0.50),
        at(0.99),
        samples.len()
    );
}

fn benches(c: &mut Criterion) {
    let Some(mut s) = setup() else { return };
    append(c, &mut s);
    resume(c, &mut s);
    tail_latency(c, &mut s);
}

criterion_group!(redis_benches, benches);
criterion_main!(redis_benches);
