//! The slow-consumer policy inside `Retention`, with injected time: a cut connection stops holding
//! events and from then on is treated exactly like a disconnected one.

use std::time::{Duration, Instant};

use replay_ring::ReplayRing;
use replay_ring_sse::{Retention, RetentionConfig, SlowConsumerPolicy, Verdict};

fn retention(window_ms: u64, policy: SlowConsumerPolicy) -> Retention {
    let config = RetentionConfig {
        resumption_window: Duration::from_millis(window_ms),
        backpressure_timeout: Duration::from_secs(10),
    };
    Retention::new(config, 4).with_slow_consumer_policy(policy)
}

#[test]
fn a_stalled_connection_is_cut_and_then_holds_events_like_a_disconnected_one() {
    let (mut producer, ring) = ReplayRing::<u32>::new(16, 4).unwrap();
    let policy = SlowConsumerPolicy {
        write_timeout: Some(Duration::from_millis(500)),
        max_lag_percent: None,
        ..SlowConsumerPolicy::default()
    };
    let mut r = retention(1000, policy);
    let t0 = Instant::now();
    let ms = |n| t0 + Duration::from_millis(n);
    let fast = r.connect(0).unwrap();
    let stalled = r.connect(0).unwrap();
    for n in 1..=10 {
        producer.try_push(n).unwrap();
    }
    r.on_written(&fast, 10, ms(0));
    r.on_written(&stalled, 3, ms(0));
    r.on_write_pending(&stalled, ms(0)); // ids 4.. handed to a socket that takes nothing
    assert_eq!(
        r.next_expiry(),
        Some(ms(500)),
        "the stall deadline comes first"
    );

    // Before the deadline the stalled connection caps every release at what it wrote.
    assert_eq!(r.release_expired(&ring, ms(499)), None);
    assert_eq!(r.cut_verdict(&stalled), None);
    // At the deadline it is cut; what the others wrote gets one window from the cut, like a
    // disconnect at 500 ms: 1..=3 were written to everyone at 0 ms (released at 1000 ms), 4..=10
    // at the cut (released at 1500 ms).
    assert_eq!(r.release_expired(&ring, ms(500)), None);
    assert_eq!(
        r.cut_verdict(&stalled),
        Some(Verdict::Stalled {
            waited: Duration::from_millis(500)
        })
    );
    assert_eq!(r.live_connections(), 1);
    assert_eq!(r.stats().slow_consumers_cut, 1);
    assert_eq!(r.release_expired(&ring, ms(1000)), Some(4));
    assert_eq!(r.release_expired(&ring, ms(1499)), None);
    assert_eq!(r.release_expired(&ring, ms(1500)), Some(11));

    // Its later reports change nothing; leaving frees the entry.
    r.on_written(&stalled, 10, ms(1600));
    r.disconnect(stalled, ms(1600));
    assert!(r.connect(10).is_some());
}

#[test]
fn without_the_policy_a_stalled_connection_holds_the_window_forever() {
    let (mut producer, ring) = ReplayRing::<u32>::new(16, 4).unwrap();
    let mut r = retention(1000, SlowConsumerPolicy::disabled());
    let t0 = Instant::now();
    let fast = r.connect(0).unwrap();
    let stalled = r.connect(0).unwrap();
    for n in 1..=10 {
        producer.try_push(n).unwrap();
    }
    r.on_written(&fast, 10, t0);
    r.on_written(&stalled, 3, t0);
    r.on_write_pending(&stalled, t0);
    assert_eq!(r.next_expiry(), Some(t0 + Duration::from_secs(1)));
    assert_eq!(
        r.release_expired(&ring, t0 + Duration::from_secs(3600)),
        Some(4)
    );
    assert_eq!(r.cut_verdict(&stalled), None);
    assert_eq!(
        ring.floor(),
        4,
        "ids 4..=10 held for the stalled connection"
    );
}

#[test]
fn the_lag_rule_cuts_only_a_blocked_laggard_of_a_full_window_while_another_keeps_up() {
    let (mut producer, ring) = ReplayRing::<u32>::new(8, 4).unwrap();
    let policy = SlowConsumerPolicy {
        write_timeout: None,
        max_lag_percent: Some(50),
        lag_grace: Duration::from_millis(100),
    };
    let mut r = retention(60_000, policy);
    let t0 = Instant::now();
    let ms = |n| t0 + Duration::from_millis(n);
    let fast = r.connect(0).unwrap();
    let idle = r.connect(0).unwrap(); // behind, but not blocked on its socket
    let blocked = r.connect(0).unwrap();
    for n in 1..=6 {
        producer.try_push(n).unwrap();
    }
    r.on_written(&fast, 6, ms(0));
    r.on_write_pending(&blocked, ms(0));
    // The window is not full: nobody is cut, however long it waits.
    assert_eq!(r.cut_slow_consumers(&ring, ms(10_000)), 0);
    producer.try_push(7).unwrap();
    producer.try_push(8).unwrap();
    r.on_written(&fast, 8, ms(10_000));
    // Full window, `blocked` 8 behind (limit 4) and pending for the grace, `fast` at the head.
    assert_eq!(r.cut_slow_consumers(&ring, ms(10_000)), 1);
    assert_eq!(
        r.cut_verdict(&blocked),
        Some(Verdict::Lagging { lag: 8, limit: 4 })
    );
    assert_eq!(
        r.cut_verdict(&idle),
        None,
        "not blocked: only waiting to be scheduled"
    );
    assert_eq!(r.cut_verdict(&fast), None);
}

#[test]
fn a_lone_blocked_connection_is_never_cut_for_lag() {
    let (mut producer, ring) = ReplayRing::<u32>::new(4, 2).unwrap();
    let policy = SlowConsumerPolicy {
        write_timeout: None,
        ..SlowConsumerPolicy::default()
    };
    let mut r = retention(1000, policy);
    let t0 = Instant::now();
    let only = r.connect(0).unwrap();
    for n in 1..=4 {
        producer.try_push(n).unwrap();
    }
    r.on_write_pending(&only, t0);
    assert_eq!(r.cut_slow_consumers(&ring, t0 + Duration::from_secs(60)), 0);
    assert_eq!(r.cut_verdict(&only), None);
}
