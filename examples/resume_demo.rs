//! A resumable stream end to end, in one process:
//!
//! 1. a long-running tool streams progress events into a 64-event window;
//! 2. a client reads slowly, so the window fills and the tool is backpressured (nothing is dropped);
//! 3. the client disconnects at event 41 and the server's retention policy keeps going;
//! 4. it reconnects with `Last-Event-ID: 41` and gets exactly 42.. in order;
//! 5. a second client, away too long, reconnects from a released id and gets an explicit gap;
//! 6. the counters: every refusal is counted, and every event was enqueued exactly once.
//!
//! Run: `cargo run --example resume_demo`

// A `--cfg replay_ring_loom` build has no blocking API: there the example is an empty program.
#![cfg_attr(replay_ring_loom, allow(unused))]

use std::time::Duration;

use replay_ring::{CloseReason, ReadError, ReplayRing, ResumeError};

const EVENTS: u64 = 130;

#[cfg(replay_ring_loom)]
fn main() {}

#[cfg(not(replay_ring_loom))]
fn main() {
    let (mut tool, ring) = ReplayRing::<String>::builder()
        .capacity(64)
        .max_readers(4)
        .build()
        .expect("valid configuration");

    // The client connects before the tool starts, then reads slowly.
    let mut client = ring.reader().expect("a free reader slot");
    let producer = std::thread::spawn(move || {
        for step in 1..=EVENTS {
            // The id is known before the event is built, so it can go into the payload or frame.
            tool.push_timeout(format!("progress {step}/{EVENTS}"), Duration::from_secs(30))
                .expect("the window frees up as the client acknowledges");
        }
        let waits = tool.ring().metrics().producer_waits;
        tool.close(CloseReason::Completed);
        waits
    });

    // Read up to event 41 (slowly: the tool fills the window and waits), acknowledging as we go.
    let mut last_seen = 0;
    while last_seen < 41 {
        let batch = client
            .read_timeout(Duration::from_secs(30))
            .expect("no gap while we acknowledge")
            .expect("the tool keeps producing");
        let mut batch = batch;
        let take = (41 - last_seen).min(batch.len() as u64);
        batch.mark_read(take as usize);
        last_seen += take;
        drop(batch);
        std::thread::sleep(Duration::from_millis(2)); // the slow client (a demo, not synchronisation)
        ring.release_through(last_seen.saturating_sub(20)).unwrap();
    }
    println!("client read 1..=41, then its connection dropped");
    drop(client);

    // While the client is away, the server keeps only what a resume may still need. Events after 41
    // stay retained, so the tool stalls once 64 are waiting: backpressure, not loss.
    ring.release_through(41).unwrap();
    while ring.head() < 41 + 64 {
        std::thread::yield_now();
    }
    println!(
        "while away: retained {}..={} (window full: the tool is backpressured)",
        ring.floor(),
        ring.head()
    );

    // Reconnect with Last-Event-ID: 41.
    let mut resumed = ring.resume(Some(41)).expect("41 is within the window");
    let mut expected = 42;
    loop {
        let outcome = match resumed.read_timeout(Duration::from_secs(30)) {
            Ok(Some(batch)) => {
                for (id, event) in batch.iter() {
                    assert_eq!(id, expected, "continuity: cursor + 1, then + 1 each");
                    if id == 42 || id == EVENTS {
                        println!("  resumed: id {id}: {event}");
                    }
                    expected += 1;
                }
                let last = batch.last_id();
                drop(batch);
                ring.release_through(last).unwrap();
                Ok(())
            }
            Ok(None) => panic!("stalled"),
            Err(e) => Err(e),
        };
        match outcome {
            Ok(()) => {}
            Err(ReadError::Closed(reason)) => {
                println!(
                    "resumed client got 42..={} exactly once, then: {reason}",
                    expected - 1
                );
                break;
            }
            Err(gap) => panic!("{gap}"),
        }
    }
    let producer_waits = producer.join().expect("tool thread");

    // A client that was away too long: its cursor was released.
    match ring.resume(Some(10)) {
        Err(e @ ResumeError::BelowFloor { .. }) => println!("stale client: explicit error: {e}"),
        other => panic!("expected a gap, got {other:?}"),
    }
    // And one from another stream altogether.
    if let Err(e) = ring.resume(Some(10_000)) {
        println!("foreign cursor: explicit error: {e}");
    }

    let m = ring.metrics();
    println!("producer waits (backpressure): {producer_waits}");
    println!(
        "events_enqueued={} events_released={} resumes_ok={} resumes_below_floor={} \
         resumes_ahead_of_head={}",
        m.events_enqueued,
        m.events_released,
        m.resumes_ok,
        m.resumes_below_floor,
        m.resumes_ahead_of_head
    );
    assert_eq!(m.events_enqueued, EVENTS);
    assert_eq!((m.resumes_below_floor, m.resumes_ahead_of_head), (1, 1));
}
