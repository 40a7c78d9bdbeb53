//! `reader-registration`: registers `--readers` readers on one ring, one after another, and
//! reports what registration costs at that scale: the total and mean time, the slowest single
//! registration (and which one it was: the registrations that open a reader-table segment are the
//! candidates), and the resident memory the readers added, per reader. A measurement for
//! `docs/benchmarks.md` rather than a criterion benchmark: the quantity of interest is one
//! worst-case call among a million, which a criterion sample would average away.

use std::time::{Duration, Instant};

use clap::Parser;
use replay_ring::ReplayRing;
use replay_ring_benches::proc_stats::rss_bytes;

#[derive(Debug, Parser)]
#[command(about = "Time every reader registration on one ring and report the slowest")]
struct Args {
    /// Readers to register (at most `replay_ring::MAX_READERS`).
    #[arg(long, default_value_t = 1 << 20)]
    readers: usize,
    /// Registrations slower than this are listed.
    #[arg(long, default_value_t = 1000)]
    list_over_us: u64,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let (_producer, ring) = ReplayRing::<u64>::builder()
        .capacity(1024)
        .max_readers(args.readers)
        .build()?;
    // Room for every handle up front, so the vector's growth is neither timed nor counted twice.
    let mut readers = Vec::with_capacity(args.readers);
    let rss_before = rss_bytes(std::process::id())?;
    let mut slowest = (Duration::ZERO, 0);
    let mut slow = Vec::new();
    let start = Instant::now();
    for i in 0..args.readers {
        let t = Instant::now();
        readers.push(ring.reader()?);
        let took = t.elapsed();
        if took > slowest.0 {
            slowest = (took, i);
        }
        if took.as_micros() > u128::from(args.list_over_us) {
            slow.push((i, took.as_micros()));
        }
    }
    let total = start.elapsed();
    let rss_after = rss_bytes(std::process::id())?;
    let per_reader = (rss_after - rss_before) as f64 / args.readers as f64;
    println!(
        "readers={} total_ms={:.1} mean_ns={:.0} slowest_us={} slowest_at={} rss_per_reader_bytes={:.0} (handle {} bytes)",
        args.readers,
        total.as_secs_f64() * 1e3,
        total.as_nanos() as f64 / args.readers as f64,
        slowest.0.as_micros(),
        slowest.1,
        per_reader,
        std::mem::size_of::<replay_ring::Reader<u64>>(),
    );
    println!("over {} us (index, us): {slow:?}", args.list_over_us);
    Ok(())
}
