//! Soak load client for the SSE example server: many live clients that cut their connection at
//! random times and resume with `Last-Event-ID`, plus a few clients that stop reading, for a fixed
//! time.
//!
//! - Every live client checks each event id against its own cursor (the next id must be exactly
//!   cursor + 1, the first frame of a resumed connection must prime at the cursor). The run fails
//!   on any lost or duplicated event, any refused resume, a live client cut by the slow-consumer
//!   policy, or a live client that stopped making progress.
//! - Every stalled client stops reading for `--stall-secs` at a time, then reads what its socket
//!   holds and resumes. The run fails unless each was cut (the server ended the connection after
//!   the stall, and the server's `replay_ring_slow_consumers_cut_total` covers every such end), if
//!   a full-length stall was not cut, or if a resume was answered with anything but 200 from the
//!   cursor or an explicit 416.
//! - With `--server-pid` it samples the server's resident memory and fails if it keeps growing
//!   after warm-up.
//!
//! ```text
//! soak --addr 127.0.0.1:8080 --clients 1000 --stalled 5 --seconds 600 --server-pid 1234
//! ```
//!
//! `scripts/soak` starts the server, raises the file-descriptor limit and runs this.

mod live;
mod server;
mod stalled;
mod stream;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;

use live::{live_client, LiveTotals};
use server::Memory;
use stalled::{stalled_client, StalledTotals};

/// Soak test: live clients with random cuts and stalled clients against one SSE stream.
#[derive(Debug, Parser)]
pub struct Args {
    /// The server's address.
    #[arg(long)]
    addr: SocketAddr,
    /// Path of the event stream.
    #[arg(long, default_value = "/events")]
    path: String,
    /// Path of the server's Prometheus metrics.
    #[arg(long, default_value = "/metrics")]
    metrics_path: String,
    /// Live clients (each one cuts and resumes at random times).
    #[arg(long, default_value_t = 1000)]
    clients: usize,
    /// Clients that stop reading for `--stall-secs` at a time.
    #[arg(long, default_value_t = 5)]
    stalled: usize,
    /// How long a stalled client reads nothing before it looks whether the server cut it. Must
    /// cover filling its socket (a few MB at the stream's byte rate) plus the server's write
    /// timeout.
    #[arg(long, default_value_t = 180)]
    stall_secs: u64,
    /// Length of the run.
    #[arg(long, default_value_t = 600)]
    seconds: u64,
    /// Mean time a live client stays connected before it cuts (exponentially distributed).
    #[arg(long, default_value_t = 20_000)]
    mean_connection_ms: u64,
    /// A live client that receives nothing (not even a keep-alive) for this long has stalled.
    #[arg(long, default_value_t = 40)]
    idle_limit_secs: u64,
    /// Server process to sample `VmRSS` from (its heap in use is read from its metrics).
    #[arg(long)]
    server_pid: Option<u32>,
    /// Seconds between progress lines and memory samples.
    #[arg(long, default_value_t = 10)]
    sample_secs: u64,
    /// Samples skipped as warm-up before memory growth is judged.
    #[arg(long, default_value_t = 12)]
    warmup_samples: usize,
    /// Largest tolerated growth of the server's memory (RSS, and the heap in use where the server
    /// reports it) after warm-up, in percent: the lowest and the highest sample of the second half
    /// of the judged samples against those of the first half.
    #[arg(long, default_value_t = 10)]
    max_rss_growth_pct: u64,
}

fn mean(xs: impl Iterator<Item = u64>) -> f64 {
    let (sum, n) = xs.fold((0u64, 0u64), |(s, n), x| (s + x, n + 1));
    sum as f64 / n.max(1) as f64
}

fn mib(kib: f64) -> f64 {
    kib / 1024.0
}

/// How one memory series changed from the first half of the samples after warm-up to the second.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Halves {
    /// Lowest sample of the first and of the second half.
    low: (f64, f64),
    /// Highest sample of the first and of the second half.
    high: (f64, f64),
}

impl Halves {
    /// Splits `samples` into two halves and takes each half's lowest and highest sample.
    fn of(samples: &[u64]) -> Halves {
        let (first, second) = samples.split_at(samples.len() / 2);
        let min = |xs: &[u64]| xs.iter().copied().min().unwrap_or(0) as f64;
        let max = |xs: &[u64]| xs.iter().copied().max().unwrap_or(0) as f64;
        Halves {
            low: (min(first), min(second)),
            high: (max(first), max(second)),
        }
    }

    /// The larger growth, in percent, of the low points and of the peaks. Memory that keeps
    /// growing raises both; memory that has reached its level under a load with periodic peaks (a
    /// stalled client's catch-up every few minutes) raises neither, wherever the peaks fall.
    fn growth(&self) -> f64 {
        let pct = |(a, b): (f64, f64)| (b - a) / a.max(1.0) * 100.0;
        pct(self.low).max(pct(self.high))
    }

    fn describe(&self) -> String {
        let pct = |(a, b): (f64, f64)| (b - a) / a.max(1.0) * 100.0;
        format!(
            "low {:.1} -> {:.1} MiB ({:+.1}%), peak {:.1} -> {:.1} MiB ({:+.1}%)",
            mib(self.low.0),
            mib(self.low.1),
            pct(self.low),
            mib(self.high.0),
            mib(self.high.1),
            pct(self.high),
        )
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Arc::new(Args::parse());
    if args.stalled > 0 && args.stall_secs >= args.seconds {
        eprintln!(
            "soak: --stall-secs ({}) must be shorter than the run ({} s)",
            args.stall_secs, args.seconds
        );
        return ExitCode::FAILURE;
    }
    let start = Instant::now();
    let deadline = start + Duration::from_secs(args.seconds);
    let live = Arc::new(LiveTotals::default());
    let stalled = Arc::new(StalledTotals::default());

    let stalled_tasks: Vec<_> = (0..args.stalled)
        .map(|i| tokio::spawn(stalled_client(args.clone(), i, deadline, stalled.clone())))
        .collect();
    let clients: Vec<_> = (0..args.clients)
        .map(|i| tokio::spawn(live_client(args.clone(), i, deadline, live.clone())))
        .collect();

    let mut memory: Vec<Memory> = Vec::new();
    let mut ticker = tokio::time::interval(Duration::from_secs(args.sample_secs));
    ticker.tick().await;
    // The last sample is taken a full period before the end, while every client is still on.
    while Instant::now() + Duration::from_secs(args.sample_secs) < deadline {
        ticker.tick().await;
        let mut sample = args.server_pid.and_then(server::memory);
        if let Some(m) = &mut sample {
            m.heap = server::scrape(args.addr, &args.metrics_path)
                .await
                .ok()
                .and_then(|text| server::counter(&text, "sse_server_heap_bytes"))
                .map(|bytes| bytes / 1024);
        }
        memory.extend(sample);
        let (l, s) = (&live, &stalled);
        println!(
            "t={:>4}s events={} connections={} cuts={} server_closes={} lost={} duplicated={} \
             refused={} io_errors={} stalled_cut={} rss_kib={} heap_kib={}",
            start.elapsed().as_secs(),
            l.tally.events.load(Relaxed),
            l.connections.load(Relaxed),
            l.cuts.load(Relaxed),
            l.server_closes.load(Relaxed),
            l.tally.lost.load(Relaxed),
            l.tally.duplicated.load(Relaxed),
            l.refused.load(Relaxed),
            l.io_errors.load(Relaxed),
            s.ended_by_server.load(Relaxed),
            sample.map_or("-".into(), |m| m.rss.to_string()),
            sample
                .and_then(|m| m.heap)
                .map_or("-".into(), |k| k.to_string()),
        );
    }

    let mut reports = Vec::new();
    for c in clients {
        reports.push(c.await.expect("client task"));
    }
    for s in stalled_tasks {
        s.await.expect("stalled task");
    }
    let metrics = server::scrape(args.addr, &args.metrics_path).await;
    let server_cuts = match &metrics {
        Ok(text) => server::counter(text, "replay_ring_slow_consumers_cut_total"),
        Err(e) => {
            println!("soak: could not read the server's metrics: {e}");
            None
        }
    };

    let mut ok = true;
    let mut fail = |what: String| {
        println!("soak: FAIL: {what}");
        ok = false;
    };

    // Live clients.
    let heads: Vec<u64> = reports.iter().filter_map(|r| r.cursor).collect();
    let newest = heads.iter().copied().max().unwrap_or(0);
    let oldest = heads.iter().copied().min().unwrap_or(0);
    let idle_clients = reports.iter().filter(|r| r.events == 0).count();
    let l = &live;
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Relaxed);
    println!(
        "soak: {} live clients, {} stalled, {} s",
        args.clients, args.stalled, args.seconds
    );
    println!(
        "soak: live: events delivered {}, connections {}, cuts {}, server closes {}, terminal \
         frames {}, slow-consumer frames {}",
        load(&l.tally.events),
        load(&l.connections),
        load(&l.cuts),
        load(&l.server_closes),
        load(&l.terminal_frames),
        load(&l.tally.slow_consumer_frames),
    );
    println!(
        "soak: live: lost {}, duplicated {}, priming mismatches {}, malformed {}, refused resumes \
         {} ({} events explicitly gone), io errors {} (idle stalls {})",
        load(&l.tally.lost),
        load(&l.tally.duplicated),
        load(&l.tally.priming_mismatches),
        load(&l.tally.malformed),
        load(&l.refused),
        load(&l.refused_events),
        load(&l.io_errors),
        load(&l.idle_stalls),
    );
    println!(
        "soak: live: final cursors {oldest}..={newest}, clients without events {idle_clients}"
    );
    for (what, n) in [
        ("events lost", load(&l.tally.lost)),
        ("events duplicated", load(&l.tally.duplicated)),
        ("priming mismatches", load(&l.tally.priming_mismatches)),
        ("malformed frames", load(&l.tally.malformed)),
        ("refused resumes", load(&l.refused)),
        ("idle live connections", load(&l.idle_stalls)),
        ("live clients without events", idle_clients as u64),
        (
            "live connections cut as slow consumers",
            load(&l.tally.slow_consumer_frames),
        ),
    ] {
        if n > 0 {
            fail(format!("{n} {what} (live clients)"));
        }
    }

    // Stalled clients.
    if args.stalled > 0 {
        let s = &stalled;
        let ended = load(&s.ended_by_server);
        println!(
            "soak: stalled: connections {}, ended by the server after a stall {} (with a \
             slow-consumer frame {}), full stalls not cut {}; server slow_consumers_cut {}",
            load(&s.connections),
            ended,
            load(&s.tally.slow_consumer_frames),
            load(&s.not_cut),
            server_cuts.map_or("?".into(), |n| n.to_string()),
        );
        println!(
            "soak: stalled: resumes served {} (events checked {}), refused with 416 {} ({} events \
             explicitly gone), other statuses {}, io errors {}; lost {}, duplicated {}, priming \
             mismatches {}",
            load(&s.resumes_served),
            load(&s.tally.events),
            load(&s.resumes_refused),
            load(&s.refused_events),
            load(&s.other_status),
            load(&s.io_errors),
            load(&s.tally.lost),
            load(&s.tally.duplicated),
            load(&s.tally.priming_mismatches),
        );
        for (what, n) in [
            ("events lost", load(&s.tally.lost)),
            ("events duplicated", load(&s.tally.duplicated)),
            ("priming mismatches", load(&s.tally.priming_mismatches)),
            ("malformed frames", load(&s.tally.malformed)),
            ("full-length stalls not cut", load(&s.not_cut)),
            ("responses neither 200 nor 416", load(&s.other_status)),
        ] {
            if n > 0 {
                fail(format!("{n} {what} (stalled clients)"));
            }
        }
        if ended < args.stalled as u64 {
            fail(format!(
                "only {ended} stalled connections were ended by the server ({} stalled clients)",
                args.stalled
            ));
        }
        match server_cuts {
            Some(cuts) if cuts >= ended => {}
            Some(cuts) => fail(format!(
                "the server counted {cuts} slow-consumer cuts for {ended} stalled connections it \
                 ended"
            )),
            None => fail("the server's slow_consumers_cut counter could not be read".into()),
        }
    }

    // Memory.
    if memory.len() >= args.warmup_samples + 6 {
        let judged = &memory[args.warmup_samples..];
        let rss: Vec<u64> = judged.iter().map(|m| m.rss).collect();
        let rss_halves = Halves::of(&rss);
        let rss_growth = rss_halves.growth();
        println!(
            "soak: server RSS after warm-up, first half -> second half: {}; mean of the first and \
             last three samples {:.1} -> {:.1} MiB; anonymous {:.1} -> {:.1} MiB",
            rss_halves.describe(),
            mib(mean(rss[..3].iter().copied())),
            mib(mean(rss[rss.len() - 3..].iter().copied())),
            mib(mean(judged[..3].iter().map(|m| m.anon))),
            mib(mean(judged[judged.len() - 3..].iter().map(|m| m.anon))),
        );
        let heap: Option<Vec<u64>> = judged.iter().map(|m| m.heap).collect();
        let heap_growth = heap.as_deref().map(|heap| {
            let halves = Halves::of(heap);
            println!(
                "soak: server heap in use after warm-up, first half -> second half: {}; mean of \
                 the first and last three samples {:.1} -> {:.1} MiB",
                halves.describe(),
                mib(mean(heap[..3].iter().copied())),
                mib(mean(heap[heap.len() - 3..].iter().copied())),
            );
            halves.growth()
        });
        let minute = (60 / args.sample_secs.max(1)).max(1) as usize;
        let curve = |f: &dyn Fn(&Memory) -> Option<u64>| {
            let points: Vec<String> = memory
                .iter()
                .skip(minute - 1)
                .step_by(minute)
                .map(|m| f(m).map_or("-".into(), |k| format!("{:.1}", mib(k as f64))))
                .collect();
            points.join(" ")
        };
        println!(
            "soak: server RSS at the end of each minute (MiB): {}",
            curve(&|m| Some(m.rss))
        );
        println!(
            "soak: server heap at the end of each minute (MiB): {}",
            curve(&|m| m.heap)
        );
        let limit = args.max_rss_growth_pct as f64;
        if rss_growth > limit {
            fail(format!(
                "server RSS grew {rss_growth:.1}% from the first half of the run after warm-up \
                 to the second (low points or peaks; limit {limit}%)"
            ));
        }
        match heap_growth {
            Some(growth) if growth > limit => fail(format!(
                "server heap grew {growth:.1}% from the first half of the run after warm-up to \
                 the second (low points or peaks; limit {limit}%)"
            )),
            Some(_) => {}
            None => println!("soak: the server did not report its heap; judged on RSS alone"),
        }
    } else if args.server_pid.is_some() {
        println!("soak: too few memory samples to judge memory");
    }

    println!("soak: {}", if ok { "PASS" } else { "FAIL" });
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::Halves;

    #[test]
    fn periodic_peaks_are_a_plateau_and_a_rising_floor_is_growth() {
        // Peaks every fourth sample, in different places in the two halves.
        let plateau = [60, 75, 60, 61, 60, 60, 60, 76, 61, 60, 75, 60];
        assert!(Halves::of(&plateau).growth() < 5.0);
        // The same shape on a floor that rises 2 % per sample.
        let leak: Vec<u64> = plateau
            .iter()
            .enumerate()
            .map(|(i, &x)| x * (100 + 2 * i as u64) / 100)
            .collect();
        assert!(Halves::of(&leak).growth() > 10.0);
    }
}
