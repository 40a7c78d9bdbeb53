//! The retention contract against the public API, over random sequences of connects (at the
//! head or into the backlog), writes, pending writes, cuts, disconnects and releases: nothing is
//! released that a live connection has not written, that a departed client may still ask for
//! within one window of its departure, or that was written to a connection less than a window
//! ago (the documented backlog exception is modelled). The clock only moves forward here:
//! callers that read it before taking the lock can be a few milliseconds early.
use std::time::{Duration, Instant};

use proptest::prelude::Rng as _;
use proptest::test_runner::{RngAlgorithm, TestRng};
use replay_ring::ReplayRing;
use replay_ring_sse::{ConnectionId, Retention, RetentionConfig, SlowConsumerPolicy};

const W: Duration = Duration::from_millis(640); // granule 10 ms

/// The random choices of one case, reproducible from its number.
struct Choices(TestRng);

impl Choices {
    fn new(case: u64) -> Self {
        let mut start = [0u8; 16];
        start[..8].copy_from_slice(&case.to_le_bytes());
        Choices(TestRng::from_seed(RngAlgorithm::XorShift, &start))
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0.next_u64() % n.max(1)
    }
}

struct Conn {
    id: Option<ConnectionId>,
    w: u64,
    /// `recorded` (max live-min checkpointed) when it connected: its backlog keeps its old window.
    backlog: u64,
}

/// (lo, until, what): ids > lo must not be released before `until`; `hi` bounds it.
struct Protect {
    lo: u64,
    hi: u64,
    until: Instant,
    what: String,
}

fn run(case: u64, backlog_resumes: bool, log: bool) -> Result<(), String> {
    let mut rng = Choices::new(case);
    let (mut p, ring) = ReplayRing::<u64>::new(1 << 14, 64).unwrap();
    let t0 = Instant::now();
    let policy = SlowConsumerPolicy {
        write_timeout: Some(Duration::from_millis(50)),
        max_lag_percent: None,
        ..SlowConsumerPolicy::default()
    };
    let mut r = Retention::new(
        RetentionConfig {
            resumption_window: W,
            backpressure_timeout: Duration::from_secs(1),
        },
        64,
    )
    .with_slow_consumer_policy(policy);
    let mut clock = t0; // the latest `now` handed out
    let mut conns: Vec<Conn> = Vec::new();
    let mut protects: Vec<Protect> = vec![Protect {
        lo: 0,
        hi: u64::MAX,
        until: t0 + W,
        what: "creation".into(),
    }];
    let mut recorded = 0u64; // model of the checkpoints' high-water mark (documented rule)
    let mut trace = String::new();
    macro_rules! t { ($($a:tt)*) => { if log { trace.push_str(&format!($($a)*)); trace.push('\n'); } } }
    let live_min = |conns: &Vec<Conn>| {
        conns
            .iter()
            .filter(|c| c.id.is_some() && c.w != u64::MAX)
            .map(|c| c.w)
            .min()
    };
    for step in 0..400 {
        // The clock moves forward by 0..40 ms.
        clock += Duration::from_millis(rng.below(40));
        let now = clock;
        let ms = |i: Instant| i.saturating_duration_since(t0).as_millis();
        match rng.below(10) {
            0 | 1 => {
                let n = rng.below(20);
                for _ in 0..n {
                    if ring.head() + 1 - ring.floor() < ring.capacity() as u64 {
                        p.try_push(0).unwrap();
                    }
                }
                t!("{step}: push {n} -> head {}", ring.head());
            }
            2 => {
                let head = ring.head();
                let floor = ring.floor();
                let cursor = if backlog_resumes && rng.below(2) == 0 {
                    floor.saturating_sub(1) + rng.below(head + 2 - floor)
                } else {
                    head
                };
                let cursor = cursor.min(head);
                if let Some(id) = r.connect(cursor) {
                    t!(
                        "{step}: connect #{} at {cursor} (recorded {recorded})",
                        conns.len()
                    );
                    conns.push(Conn {
                        id: Some(id),
                        w: cursor,
                        backlog: recorded,
                    });
                }
            }
            3 | 4 => {
                let live: Vec<usize> = (0..conns.len())
                    .filter(|&i| conns[i].id.is_some() && conns[i].w != u64::MAX)
                    .collect();
                if let Some(&i) = live.get(rng.below(live.len() as u64 + 1) as usize) {
                    let c = &mut conns[i];
                    let to = c.w + rng.below(ring.head() - c.w + 1);
                    // written to it now: (max(w, backlog), to] for one window
                    let lo = c.w.max(c.backlog);
                    if to > lo {
                        protects.push(Protect {
                            lo,
                            hi: to,
                            until: now + W,
                            what: format!("written to #{i} at {}", ms(now)),
                        });
                    }
                    c.w = to;
                    r.on_written(c.id.as_ref().unwrap(), to, now);
                    t!("{step}: on_written #{i} {to} at {}", ms(now));
                    if let Some(m) = live_min(&conns) {
                        recorded = recorded.max(m);
                    }
                }
            }
            5 => {
                let live: Vec<usize> = (0..conns.len())
                    .filter(|&i| conns[i].id.is_some() && conns[i].w != u64::MAX)
                    .collect();
                if let Some(&i) = live.get(rng.below(live.len() as u64 + 1) as usize) {
                    r.on_write_pending(conns[i].id.as_ref().unwrap(), now);
                    t!("{step}: pending #{i} at {}", ms(now));
                }
            }
            6 => {
                let open: Vec<usize> = (0..conns.len())
                    .filter(|&i| conns[i].id.is_some())
                    .collect();
                if let Some(&i) = open.get(rng.below(open.len() as u64 + 1) as usize) {
                    let id = conns[i].id.take().unwrap();
                    let was_cut = r.cut_verdict(&id).is_some();
                    r.disconnect(id, now);
                    if !was_cut {
                        let c = &conns[i];
                        protects.push(Protect {
                            lo: c.w.max(c.backlog),
                            hi: u64::MAX,
                            until: now + W,
                            what: format!("claim of #{i} left at {}", ms(now)),
                        });
                    }
                    t!(
                        "{step}: disconnect #{i} (w {}, cut {was_cut}) at {}",
                        conns[i].w,
                        ms(now)
                    );
                    if let Some(m) = live_min(&conns) {
                        recorded = recorded.max(m);
                    }
                }
            }
            _ => {
                let before = ring.floor();
                let got = if rng.below(3) == 0 {
                    r.cut_slow_consumers(&ring, now);
                    None
                } else {
                    r.release_expired(&ring, now)
                };
                // connections cut by this look leave now
                let mut any_cut = false;
                for (i, c) in conns.iter_mut().enumerate() {
                    if let Some(id) = &c.id {
                        if r.cut_verdict(id).is_some() && c.w != u64::MAX {
                            protects.push(Protect {
                                lo: c.w.max(c.backlog),
                                hi: u64::MAX,
                                until: now + W,
                                what: format!("cut #{i} at {}", ms(now)),
                            });
                            t!("{step}: cut #{i} (w {}) at {}", c.w, ms(now));
                            c.w = u64::MAX; // no longer live; disconnected later
                            any_cut = true;
                        }
                    }
                }
                if any_cut {
                    if let Some(m) = live_min(&conns) {
                        recorded = recorded.max(m);
                    }
                }
                t!(
                    "{step}: release at {} -> {:?} (floor {before} -> {})",
                    ms(now),
                    got,
                    ring.floor()
                );
                // live cap
                let released = ring.floor() - 1;
                for (i, c) in conns.iter().enumerate() {
                    if c.id.is_some() && c.w != u64::MAX && released > c.w {
                        return Err(format!("case {case}: released {released} past live #{i} written through {}\n{trace}", c.w));
                    }
                }
                for pr in &protects {
                    if clock < pr.until && released > pr.lo && pr.lo < pr.hi {
                        return Err(format!(
                            "case {case}: released through {released} at {} ms, but ids ({}, {}] are protected until {} ms ({})\n{trace}",
                            ms(now), pr.lo, pr.hi.min(ring.head()), ms(pr.until), pr.what
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

fn sweep(backlog: bool) {
    let n: u64 = std::env::var("CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if cfg!(miri) { 2 } else { 1000 });
    let mut fails = Vec::new();
    for case in 1..=n {
        if let Err(e) = run(case, backlog, false) {
            fails.push((case, e));
        }
    }
    if let Some(&(case, _)) = fails.first() {
        let e = run(case, backlog, true).unwrap_err();
        let head: String = e.lines().take(1).collect();
        for (_, e) in &fails {
            eprintln!("FAIL: {}", e.lines().next().unwrap());
        }
        panic!(
            "{} of {n} cases fail; first: {head}\n--- trace ---\n{}",
            fails.len(),
            e.lines().skip(1).collect::<Vec<_>>().join("\n")
        );
    }
}

#[test]
fn nothing_protected_is_released_with_connections_at_the_head() {
    sweep(false)
}

#[test]
fn nothing_protected_is_released_with_resumes_into_the_backlog() {
    sweep(true)
}

/// A `ConnectionId` handed to a table that did not issue it is refused with a panic, and the
/// table's own connection at the same index is untouched: it still holds back what it has not
/// written.
#[test]
fn an_id_from_another_table_is_refused_and_moves_nothing() {
    let (mut producer, ring) = ReplayRing::<u64>::new(8, 2).unwrap();
    let config = RetentionConfig {
        resumption_window: W,
        ..RetentionConfig::default()
    };
    let mut other = Retention::new(config, 1);
    let mut table = Retention::new(config, 1);
    let foreign = other.connect(0).unwrap();
    let own = table.connect(0).unwrap();
    for n in 1..=5 {
        producer.try_push(n).unwrap();
    }
    let t0 = Instant::now();
    let refused = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        table.on_written(&foreign, 5, t0);
    }));
    let message = refused.expect_err("a foreign id must be refused");
    let message = message
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| message.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    assert!(message.contains("another Retention"), "{message}");
    // Nothing was written to `own`: nothing is releasable, however long the window has passed.
    assert_eq!(table.release_expired(&ring, t0 + 10 * W), None);
    table.on_written(&own, 5, t0);
    assert_eq!(
        table.release_expired(&ring, t0 + 10 * W),
        Some(6),
        "the new floor"
    );
    table.disconnect(own, t0);
    other.disconnect(foreign, t0);
}
