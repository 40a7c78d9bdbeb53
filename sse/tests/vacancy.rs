//! A stream nobody follows: brief visits must not hold back what came before them, or a ring sized
//! by `rate × resumption_window` fills up and its producer's backpressure bound ends the stream.
//! Time is passed in, so nothing here sleeps.

use std::time::{Duration, Instant};

use replay_ring::ReplayRing;
use replay_ring_sse::{Retention, RetentionConfig};

const WINDOW: Duration = Duration::from_secs(30);
const S: Duration = Duration::from_secs(1);

fn config() -> RetentionConfig {
    RetentionConfig {
        resumption_window: WINDOW,
        ..RetentionConfig::default()
    }
}

#[test]
fn a_visit_at_the_head_holds_only_what_came_after_it() {
    let (mut producer, ring) = ReplayRing::<u64>::new(16, 4).unwrap();
    let mut retention = Retention::new(config(), 4);
    let t0 = Instant::now();
    let mut next = 1;
    let mut push = |n: u64| {
        for _ in 0..n {
            producer.try_push(next).unwrap();
            next += 1;
        }
    };
    push(10);
    // Nobody has come for a window: everything goes.
    assert_eq!(retention.release_expired(&ring, t0 + WINDOW + S), Some(11));
    push(4); // 11..=14
             // A client subscribes at the head, reads nothing, and leaves.
    let visit = retention.connect(ring.head()).unwrap();
    retention.disconnect(visit, t0 + 40 * S);
    push(2); // 15, 16
             // It may come back for 15 and 16 within its window, never for what came before its visit.
    assert_eq!(retention.release_expired(&ring, t0 + 41 * S), Some(15));
    assert_eq!(ring.floor(), 15);
    assert_eq!(retention.release_expired(&ring, t0 + 69 * S), None);
    assert_eq!(retention.next_expiry(), Some(t0 + 40 * S + WINDOW));
    assert_eq!(
        retention.release_expired(&ring, t0 + 40 * S + WINDOW),
        Some(17)
    );
}

#[test]
fn what_a_visit_was_written_keeps_the_window_of_when_it_was_written() {
    let (mut producer, ring) = ReplayRing::<u64>::new(16, 4).unwrap();
    let mut retention = Retention::new(config(), 4);
    let t0 = Instant::now();
    for v in 1..=10 {
        producer.try_push(v).unwrap();
    }
    assert_eq!(retention.release_expired(&ring, t0 + WINDOW + S), Some(11));
    for v in 11..=14 {
        producer.try_push(v).unwrap();
    }
    // This visit resumes from 12: 13 and 14 are written to it, and it may not have received them.
    let visit = retention.connect(12).unwrap();
    retention.on_written(&visit, 14, t0 + 40 * S);
    retention.disconnect(visit, t0 + 41 * S);
    // 13 and 14 stay for a window from their writing (and what precedes them with them), not
    // for a window from the departure.
    retention.release_expired(&ring, t0 + 69 * S);
    assert!(ring.floor() <= 13, "floor {}", ring.floor());
    assert_eq!(
        retention.release_expired(&ring, t0 + 40 * S + WINDOW),
        Some(15)
    );
}

/// What a client missed while away is held by its claim, and once it is written to the client
/// on its return, for a window from that writing: a client back at the end of its window that
/// catches up keeps what it missed for up to two windows from their publication. The sizing rule
/// in `docs/protocol.md` and the example server's sizing warning count with this.
#[test]
fn a_client_back_at_the_end_of_its_window_holds_what_it_missed_for_another_window() {
    let (mut producer, ring) = ReplayRing::<u64>::new(16, 4).unwrap();
    let mut retention = Retention::new(config(), 4);
    let t0 = Instant::now();
    let client = retention.connect(0).unwrap();
    for v in 1..=2 {
        producer.try_push(v).unwrap();
    }
    retention.on_written(&client, 2, t0);
    retention.disconnect(client, t0 + S);
    // Published while nobody is connected.
    for v in 3..=6 {
        producer.try_push(v).unwrap();
    }
    // Back a second before its claim ends, from its cursor 2: written 3..=6, and gone again.
    let back = retention.connect(2).unwrap();
    retention.on_written(&back, 6, t0 + 30 * S);
    retention.disconnect(back, t0 + 30 * S);
    // 1 and 2 keep the window of their writing; 3..=6, published at about 1 s, are kept until
    // a window after the return.
    retention.release_expired(&ring, t0 + 59 * S);
    assert_eq!(ring.floor(), 3);
    assert_eq!(
        retention.release_expired(&ring, t0 + 30 * S + WINDOW),
        Some(7)
    );
}

#[test]
fn visits_every_second_leave_a_window_of_events_not_a_full_ring() {
    // 2 events per second against a 30 s window: 60 events held, in a ring of 128.
    let (mut producer, ring) = ReplayRing::<u64>::new(128, 4).unwrap();
    let mut retention = Retention::new(config(), 4);
    let t0 = Instant::now();
    let mut next = 1;
    for second in 1..=300u32 {
        let now = t0 + second * S;
        for _ in 0..2 {
            retention.release_expired(&ring, now);
            producer
                .try_push(next)
                .unwrap_or_else(|_| panic!("full at {second} s: floor {}", ring.floor()));
            next += 1;
        }
        // A visit that starts at the head and leaves at once (a page reload).
        let visit = retention.connect(ring.head()).unwrap();
        retention.disconnect(visit, now);
    }
    // What a visit within the last window may still come back for, and not much more: about
    // 60 events (the visits of the last 29 to 30 seconds), plus the claims' granule.
    let held = ring.head() + 1 - ring.floor();
    assert!((56..=70).contains(&held), "{held} events held");
}

/// 1..=100 published with nobody connected, and a window later.
fn a_backlog_nobody_was_written() -> (
    replay_ring::Producer<u64>,
    ReplayRing<u64>,
    Retention,
    Instant,
) {
    let (mut producer, ring) = ReplayRing::<u64>::new(1024, 4).unwrap();
    let retention = Retention::new(config(), 4);
    let t0 = Instant::now();
    for v in 1..=100 {
        producer.try_push(v).unwrap();
    }
    (producer, ring, retention, t0 + WINDOW + S)
}

#[test]
fn a_page_load_written_new_events_does_not_hold_the_backlog_before_it() {
    let (mut producer, ring, mut retention, t1) = a_backlog_nobody_was_written();
    let visit = retention.connect(ring.head()).unwrap();
    for v in 101..=105 {
        producer.try_push(v).unwrap();
    }
    retention.on_written(&visit, 105, t1);
    retention.disconnect(visit, t1 + S / 2);
    // 1..=100 were written to nobody and no claim covers them; 101..=105 keep their window.
    assert_eq!(retention.release_expired(&ring, t1 + S), Some(101));
    assert_eq!(retention.release_expired(&ring, t1 + WINDOW - S), None);
    assert_eq!(retention.release_expired(&ring, t1 + WINDOW), Some(106));
}

#[test]
fn a_page_load_written_only_its_cursor_does_not_hold_the_backlog_before_it() {
    // A quiet stream: the visit is written its priming event, reported as its cursor.
    let (_producer, ring, mut retention, t1) = a_backlog_nobody_was_written();
    let visit = retention.connect(ring.head()).unwrap();
    retention.on_written(&visit, 100, t1);
    retention.disconnect(visit, t1 + S / 2);
    assert_eq!(retention.release_expired(&ring, t1 + S), Some(101));
    // Its claim (whatever comes after 100) ends a window after it left.
    assert_eq!(retention.next_expiry(), Some(t1 + S / 2 + WINDOW));
}

/// A client that subscribes at the head of a full window and stays does not hold the backlog
/// before it either: it goes once no claim covers it, so the producer can publish again instead
/// of timing out because someone is reading.
#[test]
fn a_live_subscriber_at_the_head_does_not_hold_the_backlog_before_it() {
    let (mut producer, ring) = ReplayRing::<u64>::new(8, 2).unwrap();
    let t0 = Instant::now();
    let mut retention = Retention::new(config(), 2);
    for v in 1..=8 {
        producer.try_push(v).unwrap();
    }
    assert!(producer.try_push(9).is_err(), "the window is full");
    let reader = retention.connect(ring.head()).unwrap();
    retention.on_written(&reader, 8, t0 + S);
    // The creation claim covers everything for one window; the producer may be woken then.
    assert_eq!(retention.release_expired(&ring, t0 + 2 * S), None);
    let claim_end = retention.next_expiry().expect("the creation claim's end");
    assert!(claim_end >= t0 + WINDOW && claim_end < t0 + WINDOW + S);
    // Then the backlog written to nobody goes, with the reader still connected.
    assert_eq!(retention.release_expired(&ring, claim_end), Some(9));
    producer.try_push(9).unwrap();
    // What it is written from now on keeps the window of its writing.
    retention.on_written(&reader, 9, t0 + WINDOW + S);
    assert_eq!(retention.release_expired(&ring, t0 + 2 * WINDOW), None);
    assert_eq!(
        retention.release_expired(&ring, t0 + 2 * WINDOW + S),
        Some(10)
    );
}

/// Events written to a client that resumed into the backlog keep their window from that
/// writing, also when another client subscribed at the head and was written its cursor first:
/// the order in which two connections report their writes does not shorten anyone's window.
#[test]
fn a_resume_into_the_backlog_keeps_its_window_whoever_wrote_first() {
    let (_producer, ring, mut retention, t1) = a_backlog_nobody_was_written();
    let at_head = retention.connect(100).unwrap();
    retention.on_written(&at_head, 100, t1);
    let resumed = retention.connect(40).unwrap();
    retention.on_written(&resumed, 100, t1 + S);
    retention.disconnect(at_head, t1 + 2 * S);
    retention.disconnect(resumed, t1 + 2 * S);
    // 1..=40 were written to nobody; 41..=100 were written to the resumed client at t1 + 1 s.
    assert_eq!(retention.release_expired(&ring, t1 + 3 * S), Some(41));
    assert_eq!(retention.release_expired(&ring, t1 + WINDOW), None);
    assert_eq!(retention.release_expired(&ring, t1 + S + WINDOW), Some(101));
}
