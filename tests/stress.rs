//! One producer, three readers, a releaser, a million events: random releases and random resumes.
//! Every reader sees each id exactly once and in order within a resume, or a typed error; every
//! value is dropped exactly once.

// Ordinary builds only: a `--cfg replay_ring_loom` build swaps in loom atomics and drops the
// blocking API; its checks are the models in `loom-tests/`.
#![cfg(not(replay_ring_loom))]

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use replay_ring::{CloseReason, ReadError, Reader, ReplayRing, ResumeError, WakeupFences};

#[cfg(all(target_os = "linux", not(miri)))]
#[path = "support/membarrier_query.rs"]
mod membarrier_query;

const EVENTS: u64 = if cfg!(miri) { 300 } else { 1_000_000 };
const READERS: usize = 3;
const LONG: Duration = Duration::from_secs(60);

/// Payload that knows its id and counts its drops.
struct Payload {
    id: u64,
    drops: Arc<AtomicU64>,
}

impl Drop for Payload {
    fn drop(&mut self) {
        self.drops.fetch_add(1, SeqCst);
    }
}

/// A small deterministic PRNG (xorshift), one per thread, so failures replay.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[derive(Default, Debug)]
struct ReaderReport {
    events: u64,
    resumes: u64,
    gaps: u64,
    below_floor: u64,
}

/// Reads until the stream closes. `acked` is what this reader has read through, which the releaser
/// treats as an acknowledgement.
fn read_all(
    ring: ReplayRing<Payload>,
    mut reader: Reader<Payload>,
    acked: &AtomicU64,
    seed: u64,
) -> ReaderReport {
    let mut rng = Rng(seed);
    let mut report = ReaderReport::default();
    loop {
        let mut expected = reader.cursor();
        // The batch borrows the reader: finish with it before acting on an error.
        let outcome = match reader.read_timeout(LONG) {
            Ok(Some(batch)) => {
                assert_eq!(
                    batch.first_id(),
                    expected,
                    "a read must continue at the cursor"
                );
                for (id, payload) in batch.iter() {
                    assert_eq!(
                        (id, payload.id),
                        (expected, expected),
                        "skip, repeat or torn read"
                    );
                    expected += 1;
                }
                report.events += batch.len() as u64;
                acked.store(batch.last_id(), SeqCst);
                Ok(())
            }
            Ok(None) => panic!("no event for {LONG:?}: lost wake-up?"),
            Err(e) => Err(e),
        };
        match outcome {
            Ok(()) => {}
            Err(ReadError::Closed(reason)) => {
                assert_eq!(reason, CloseReason::Completed);
                assert_eq!(
                    reader.cursor(),
                    EVENTS + 1,
                    "closed before reading everything"
                );
                acked.store(u64::MAX, SeqCst);
                return report;
            }
            Err(ReadError::Gap { next, floor, head }) => {
                assert!(
                    next < floor && floor <= head + 1,
                    "gap {next} {floor} {head}"
                );
                report.gaps += 1;
                // Accept the loss explicitly: resume from the floor.
                drop(reader);
                reader = resume_checked(&ring, floor - 1, &mut report);
            }
            Err(other) => panic!("unexpected read error: {other}"),
        }
        // Now and then disconnect and resume from a random recent id (possibly already released).
        if rng.below(64) == 0 {
            let cursor = reader.cursor() - 1;
            let x = cursor.saturating_sub(rng.below(32));
            drop(reader);
            reader = resume_checked(&ring, x, &mut report);
        }
    }
}

/// Resumes after `x`; on `BelowFloor` falls back to the floor it reports, checking the typed error.
fn resume_checked(
    ring: &ReplayRing<Payload>,
    x: u64,
    report: &mut ReaderReport,
) -> Reader<Payload> {
    report.resumes += 1;
    match ring.resume(Some(x)) {
        Ok(reader) => {
            assert_eq!(reader.cursor(), x + 1, "a resume after x starts at x + 1");
            reader
        }
        Err(ResumeError::BelowFloor {
            requested,
            floor,
            head,
        }) => {
            assert!(requested == x && x + 1 < floor && floor <= head + 1);
            report.below_floor += 1;
            // Accept the loss explicitly and resume from the floor. The releaser runs
            // concurrently, so the floor may move again: each refusal must report a newer one.
            let mut floor = floor;
            loop {
                match ring.resume(Some(floor - 1)) {
                    Ok(reader) => {
                        assert_eq!(reader.cursor(), floor);
                        return reader;
                    }
                    Err(ResumeError::BelowFloor { floor: newer, .. }) => {
                        assert!(newer > floor, "the floor only grows");
                        floor = newer;
                    }
                    Err(e) => panic!("unexpected resume error {e}"),
                }
            }
        }
        Err(e) => panic!("unexpected resume error {e}"),
    }
}

#[test]
fn one_producer_three_readers_a_million_events() {
    stress(WakeupFences::Symmetric);
}

#[test]
fn one_producer_three_readers_a_million_events_asymmetric_fences() {
    stress(WakeupFences::Asymmetric);
}

/// Checks that the ring runs the fences it was asked for. `Asymmetric` falls back to `Symmetric`
/// only where the kernel offers no expedited membarrier (or under Miri, which makes no system
/// calls): there the run says so, so that a pass is not read as a check of the mode it did not
/// run. Anywhere else the fallback is a failure: the asymmetric run would test nothing new.
fn check_fences_in_force(ring: &ReplayRing<Payload>, asked: WakeupFences) {
    let running = ring.wakeup_fences();
    if running == asked {
        return;
    }
    #[cfg(all(target_os = "linux", not(miri)))]
    assert!(
        !membarrier_query::expedited_membarrier_supported(),
        "asked for {asked:?} fences, running {running:?}, though this kernel offers expedited \
         membarriers"
    );
    // Written to the stream directly: libtest hides what a passing test prints with `eprintln!`.
    let _ = writeln!(
        std::io::stderr(),
        "stress: asked for {asked:?} fences, running {running:?} (no expedited membarrier here)"
    );
}

fn stress(fences: WakeupFences) {
    let drops = Arc::new(AtomicU64::new(0));
    let (mut producer, ring) = ReplayRing::<Payload>::builder()
        .capacity(256)
        .max_readers(READERS)
        .wakeup_fences(fences)
        .build()
        .unwrap();
    check_fences_in_force(&ring, fences);
    let acks: Arc<Vec<AtomicU64>> = Arc::new((0..READERS).map(|_| AtomicU64::new(0)).collect());
    let done = Arc::new(AtomicBool::new(false));

    let readers: Vec<_> = (0..READERS)
        .map(|r| {
            let (ring, acks) = (ring.clone(), acks.clone());
            // Registered before the producer starts, so each reader starts at id 1.
            let reader = ring.resume(Some(0)).unwrap();
            let seed = 0x9E37_79B9_7F4A_7C15 ^ r as u64;
            std::thread::spawn(move || read_all(ring, reader, &acks[r], seed))
        })
        .collect();

    // The retention policy: release what every reader acknowledged, and now and then (rarely)
    // release ahead of a slow reader, which must then see an explicit gap.
    let releaser = {
        let (ring, acks, done) = (ring.clone(), acks.clone(), done.clone());
        std::thread::spawn(move || {
            let mut rng = Rng(7);
            let mut forced = 0u64;
            while !done.load(SeqCst) {
                let acked = acks.iter().map(|a| a.load(SeqCst)).min().unwrap();
                let target = if rng.below(4096) == 0 {
                    forced += 1;
                    ring.head()
                } else {
                    acked.min(ring.head())
                };
                let floor = ring.release_through(target).unwrap();
                assert!(floor <= ring.head() + 1);
                std::thread::yield_now();
            }
            forced
        })
    };

    for n in 1..=EVENTS {
        let id = producer
            .push_timeout(
                Payload {
                    id: n,
                    drops: drops.clone(),
                },
                LONG,
            )
            .unwrap_or_else(|e| panic!("producer stuck at {n}: {e}"));
        assert_eq!(id, n, "ids are gap-free");
    }
    producer.close(CloseReason::Completed);

    let reports: Vec<ReaderReport> = readers.into_iter().map(|r| r.join().unwrap()).collect();
    done.store(true, SeqCst);
    let forced = releaser.join().unwrap();
    let metrics = ring.metrics();
    eprintln!("{reports:?}, forced releases {forced}, {metrics:?}");
    for report in &reports {
        assert!(
            report.events >= EVENTS / 2,
            "a reader barely progressed: {report:?}"
        );
    }
    assert_eq!(metrics.events_enqueued, EVENTS);
    drop(ring);
    assert_eq!(
        drops.load(SeqCst),
        EVENTS,
        "every value dropped exactly once"
    );
}

/// Readers registering by the thousand (so the reader table opens new segments and each claim
/// writes its entry), resuming at random points, reading with blocking waits and leaving, while
/// the producer pushes into a small window (so its pin scans run often), a releaser moves the
/// floor and another thread walks the metrics. ThreadSanitizer and Miri run it too (entries are
/// written by the registrations that claim them, and read by the producer's scans and the walk).
#[test]
fn readers_register_into_new_table_segments_while_the_producer_scans() {
    const REGISTRANTS: u64 = 2;
    const REGISTRATIONS: u64 = if cfg!(miri) { 80 } else { 3_000 };
    const KEEP: usize = if cfg!(miri) { 40 } else { 1_000 };
    let (mut producer, ring) = ReplayRing::<u64>::builder()
        .capacity(64)
        .max_readers(4_096)
        .build()
        .unwrap();
    let done = Arc::new(AtomicBool::new(false));

    let registrants: Vec<_> = (0..REGISTRANTS)
        .map(|t| {
            let ring = ring.clone();
            std::thread::spawn(move || {
                let mut rng = Rng(0x51_7CC1_B727_220A ^ t);
                let mut kept = Vec::new();
                let mut resumed = 0u64;
                for _ in 0..REGISTRATIONS {
                    let from = ring.head().saturating_sub(rng.below(48));
                    let Ok(mut reader) = ring.resume(Some(from)) else {
                        continue; // released meanwhile: below the floor (counted apart)
                    };
                    resumed += 1;
                    let next = reader.cursor();
                    match reader.read_timeout(Duration::from_millis(1)) {
                        Ok(Some(batch)) => {
                            let ids: Vec<u64> = batch
                                .iter()
                                .map(|(id, v)| {
                                    assert_eq!(id, *v, "payload of id {id}");
                                    id
                                })
                                .collect();
                            let expected: Vec<u64> = (next..next + ids.len() as u64).collect();
                            assert_eq!(ids, expected, "a batch continues the cursor exactly");
                        }
                        Ok(None) => {}
                        Err(e) => assert!(
                            matches!(e, ReadError::Gap { .. } | ReadError::Closed(_)),
                            "{e}"
                        ),
                    }
                    kept.push(reader);
                    if kept.len() >= KEEP {
                        // Leave in a scattered order, so later claims reuse freed entries too.
                        let mut i = 0;
                        kept.retain(|_| {
                            i += 1;
                            i % 2 == 0
                        });
                    }
                }
                resumed
            })
        })
        .collect();

    let walker = {
        let (ring, done) = (ring.clone(), done.clone());
        std::thread::spawn(move || {
            let mut walks = 0u64;
            while !done.load(SeqCst) {
                let m = ring.metrics();
                assert!(m.readers_active <= 4_096);
                walks += 1;
                std::thread::yield_now();
            }
            walks
        })
    };
    let releaser = {
        let (ring, done) = (ring.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(SeqCst) {
                ring.release_through(ring.head().saturating_sub(16))
                    .unwrap();
                std::thread::yield_now();
            }
        })
    };

    let mut id = 0;
    while !registrants.iter().all(|r| r.is_finished()) {
        id += 1;
        let pushed = producer.push_timeout(id, LONG).unwrap();
        assert_eq!(pushed, id, "ids are gap-free");
    }
    producer.close(CloseReason::Completed);
    let resumed: u64 = registrants.into_iter().map(|r| r.join().unwrap()).sum();
    done.store(true, SeqCst);
    releaser.join().unwrap();
    let walks = walker.join().unwrap();
    let m = ring.metrics();
    eprintln!("{resumed} resumes, {id} events, {walks} metrics walks, {m:?}");
    assert_eq!(m.readers_active, 0, "every reader left");
    assert_eq!(
        m.resumes_ok + m.resumes_noop,
        resumed,
        "the metrics walk counts every accepted resume, across every table segment"
    );
}
