//! [`Retention`] against [`NaiveRetention`], the O(connections) form it replaced: random
//! sequences of connects, writes, pending writes, disconnects, cuts, releases, acknowledgements
//! and policy changes must give identical answers from both at every step.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use replay_ring::{Producer, ReplayRing};

use super::naive::NaiveRetention;
use super::{ConnectionId, Retention, RetentionConfig};
use crate::slow_consumer::SlowConsumerPolicy;

#[derive(Debug, Clone)]
enum Op {
    /// Register a connection `behind` events behind the head.
    Connect {
        behind: u64,
    },
    /// Disconnect the `k`-th held connection.
    Disconnect {
        k: usize,
    },
    /// The `k`-th held connection wrote through `head - behind`.
    Written {
        k: usize,
        behind: u64,
    },
    /// The `k`-th held connection handed a chunk to its transport.
    Pending {
        k: usize,
    },
    /// Publish `n` events (as many as fit).
    Push {
        n: usize,
    },
    CutSlowConsumers,
    ReleaseExpired,
    /// A resume acknowledging `head - behind` (or one past the head with `behind == 0` and `ahead`).
    Acknowledge {
        behind: u64,
        ahead: bool,
    },
    /// Install a different slow-consumer policy.
    Policy(SlowConsumerPolicy),
}

/// The test clock's unit.
const TICK: Duration = Duration::from_millis(10);

fn policy() -> impl Strategy<Value = SlowConsumerPolicy> {
    // Whole ticks, as the clock moves: deadlines often fall exactly on a look.
    let ms = |max: u64| (0..max).prop_map(|t| TICK * t as u32);
    prop_oneof![
        Just(SlowConsumerPolicy::default()),
        Just(SlowConsumerPolicy::disabled()),
        (
            proptest::option::of(ms(40)),
            proptest::option::of(0u8..=100),
            ms(30)
        )
            .prop_map(|(write_timeout, max_lag_percent, lag_grace)| {
                SlowConsumerPolicy {
                    write_timeout,
                    max_lag_percent,
                    lag_grace,
                }
            }),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u64..6).prop_map(|behind| Op::Connect { behind }),
        2 => (0usize..8).prop_map(|k| Op::Disconnect { k }),
        6 => (0usize..8, 0u64..8).prop_map(|(k, behind)| Op::Written { k, behind }),
        4 => (0usize..8).prop_map(|k| Op::Pending { k }),
        4 => (1usize..6).prop_map(|n| Op::Push { n }),
        2 => Just(Op::CutSlowConsumers),
        3 => Just(Op::ReleaseExpired),
        1 => (0u64..6, any::<bool>()).prop_map(|(behind, ahead)| Op::Acknowledge { behind, ahead }),
        1 => policy().prop_map(Op::Policy),
    ]
}

/// One side of the comparison: a policy over its own ring, fed identical events.
struct Side<R> {
    retention: Option<R>,
    producer: Producer<u64>,
    ring: ReplayRing<u64>,
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn incremental_matches_naive(
        table in 1usize..7,
        capacity in 2usize..12,
        window_ticks in 1u32..40,
        initial in policy(),
        // Each step: the op, how far time moves, and whether this call's clock lags the last
        // one's (callers read the clock before they take the lock, so `now` can go back a bit).
        steps in proptest::collection::vec((op(), 0u32..12, 0u32..4), 1..160),
    ) {
        let config = RetentionConfig {
            resumption_window: TICK * window_ticks,
            backpressure_timeout: Duration::from_secs(1),
        };
        let t0 = Instant::now();
        let (producer, ring) = ReplayRing::<u64>::new(capacity, 1).unwrap();
        let mut fast = Side {
            retention: Some(
                Retention::new(config, table)
                    .with_slow_consumer_policy(initial)
                    .opened_at(t0),
            ),
            producer,
            ring,
        };
        let (producer, ring) = ReplayRing::<u64>::new(capacity, 1).unwrap();
        let mut naive = Side {
            retention: Some(
                NaiveRetention::new(config, table)
                    .with_slow_consumer_policy(initial)
                    .opened_at(t0),
            ),
            producer,
            ring,
        };
        // Connections held by the test, the same index in both tables.
        let mut held: Vec<(ConnectionId, ConnectionId)> = Vec::new();
        let mut clock = Duration::ZERO;
        for (op, advance, lag) in steps {
            clock += TICK * advance;
            let now = t0 + clock.saturating_sub(TICK * lag);
            let head = fast.ring.head();
            prop_assert_eq!(head, naive.ring.head());
            let (f, n) = (fast.retention.as_mut().unwrap(), naive.retention.as_mut().unwrap());
            match op {
                Op::Connect { behind } => {
                    let start = head.saturating_sub(behind);
                    match (f.connect(start), n.connect(start)) {
                        (Some(a), Some(b)) => {
                            prop_assert_eq!(a.index, b.index);
                            held.push((a, b));
                        }
                        (a, b) => prop_assert_eq!(a, b),
                    }
                }
                Op::Disconnect { k } => {
                    if !held.is_empty() {
                        let (a, b) = held.swap_remove(k % held.len());
                        f.disconnect(a, now);
                        n.disconnect(b, now);
                    }
                }
                Op::Written { k, behind } => {
                    if let Some((a, b)) = held.get(k % held.len().max(1)) {
                        let through = head.saturating_sub(behind);
                        f.on_written(a, through, now);
                        n.on_written(b, through, now);
                    }
                }
                Op::Pending { k } => {
                    if let Some((a, b)) = held.get(k % held.len().max(1)) {
                        f.on_write_pending(a, now);
                        n.on_write_pending(b, now);
                    }
                }
                Op::Push { n: count } => {
                    for _ in 0..count {
                        let a = fast.producer.try_push(head).is_ok();
                        let b = naive.producer.try_push(head).is_ok();
                        prop_assert_eq!(a, b);
                    }
                }
                Op::CutSlowConsumers => {
                    prop_assert_eq!(
                        f.cut_slow_consumers(&fast.ring, now),
                        n.cut_slow_consumers(&naive.ring, now)
                    );
                }
                Op::ReleaseExpired => {
                    prop_assert_eq!(
                        f.release_expired(&fast.ring, now),
                        n.release_expired(&naive.ring, now)
                    );
                }
                Op::Acknowledge { behind, ahead } => {
                    let acked = if ahead { head + 1 } else { head.saturating_sub(behind) };
                    prop_assert_eq!(
                        f.acknowledge(&fast.ring, acked),
                        n.acknowledge(&naive.ring, acked)
                    );
                }
                Op::Policy(policy) => {
                    let f = fast.retention.take().unwrap();
                    fast.retention = Some(f.with_slow_consumer_policy(policy));
                    let n = naive.retention.take().unwrap();
                    naive.retention = Some(n.with_slow_consumer_policy(policy));
                }
            }
            let (f, n) = (fast.retention.as_ref().unwrap(), naive.retention.as_ref().unwrap());
            prop_assert_eq!(fast.ring.floor(), naive.ring.floor());
            prop_assert_eq!(f.live_connections(), n.live_connections());
            prop_assert_eq!(f.stats(), n.stats());
            prop_assert_eq!(f.next_expiry(), n.next_expiry());
            prop_assert_eq!(f.ack_target(head), n.ack_target(head));
            for (a, b) in &held {
                prop_assert_eq!(f.cut_verdict(a), n.cut_verdict(b));
            }
        }
    }
}

/// `with_creation_claim_until_full`: the creation's claim ends when the window fills before any
/// connection; once a client has connected, a full window never ends what its departure claims;
/// and without the setting the creation's claim holds a full window too.
#[test]
fn the_creation_claim_until_full_yields_only_before_the_first_connection() {
    let t0 = Instant::now();
    let config = RetentionConfig {
        resumption_window: Duration::from_secs(60),
        backpressure_timeout: Duration::from_secs(1),
    };
    let filled = |n| {
        let (mut p, ring) = ReplayRing::<u64>::new(4, 1).unwrap();
        for id in 1..=n {
            p.try_push(id).unwrap();
        }
        (p, ring)
    };
    let until_full = || {
        Retention::new(config, 1)
            .with_creation_claim_until_full()
            .opened_at(t0)
    };

    let (mut p, ring) = filled(3);
    let mut never_connected = until_full();
    assert_eq!(never_connected.release_expired(&ring, t0), None, "not full");
    p.try_push(4).unwrap();
    assert_eq!(never_connected.release_expired(&ring, t0), Some(5));

    let (_p, ring) = filled(4);
    let mut visited = until_full();
    let c = visited.connect(0).unwrap();
    visited.disconnect(c, t0);
    let a_second_later = t0 + Duration::from_secs(1);
    assert_eq!(visited.release_expired(&ring, a_second_later), None);

    let (_p, ring) = filled(4);
    let mut default = Retention::new(config, 1).opened_at(t0);
    assert_eq!(default.release_expired(&ring, t0), None);
}
