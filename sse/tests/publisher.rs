//! The publisher's backpressure loop: append, release what retention allows, wait, and past the
//! bound close explicitly. Virtual time (`start_paused`) drives the waits; one test uses the real
//! clock for the bound.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use replay_ring::{CloseReason, ReadError, ReplayRing};
use replay_ring_sse::{PublishError, Publisher, RetentionConfig};
use tokio::time::Instant;

fn payload(id: u64) -> Bytes {
    Bytes::from(format!("{{\"n\":{id}}}"))
}

fn config(window_secs: u64, bound_secs: u64) -> RetentionConfig {
    RetentionConfig {
        resumption_window: Duration::from_secs(window_secs),
        backpressure_timeout: Duration::from_secs(bound_secs),
    }
}

/// Polls `condition` (yielding to the runtime) until it holds; fails after a real-time deadline.
async fn until(what: &str, condition: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !condition() {
        assert!(std::time::Instant::now() < deadline, "{what}: not reached");
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn publishes_with_eager_ids_while_there_is_room() {
    let (producer, ring) = ReplayRing::<Bytes>::new(4, 2).unwrap();
    let mut publisher = Publisher::new(producer, config(30, 10));
    for expected in 1..=4 {
        assert_eq!(publisher.publish_with(payload).await.unwrap(), expected);
    }
    let mut reader = ring.resume(Some(0)).unwrap();
    let batch = reader.try_read().unwrap().unwrap();
    let got: Vec<_> = batch.iter().map(|(id, data)| (id, data.clone())).collect();
    assert_eq!(got, (1..=4).map(|id| (id, payload(id))).collect::<Vec<_>>());
}

#[tokio::test(start_paused = true)]
async fn a_full_window_publishes_once_the_resumption_window_releases() {
    let (producer, ring) = ReplayRing::<Bytes>::new(2, 2).unwrap();
    let mut publisher = Publisher::new(producer, config(4, 10));
    let conn = publisher.retention().lock().connect(0).unwrap();
    publisher.publish_with(payload).await.unwrap();
    publisher.publish_with(payload).await.unwrap();
    let t0 = Instant::now();
    publisher
        .retention()
        .lock()
        .on_written(&conn, 2, t0.into_std());

    assert_eq!(publisher.publish_with(payload).await.unwrap(), 3);
    let waited = t0.elapsed();
    // Released when the window passed, not before; at most one checkpoint granule late.
    assert!(waited >= Duration::from_secs(4), "waited {waited:?}");
    assert!(
        waited < Duration::from_secs(4) + Duration::from_secs(4) / 64 + Duration::from_millis(1)
    );
    assert_eq!((ring.floor(), ring.head()), (3, 3));
}

/// A stream nobody follows is not held for a client that does not exist: once it has been open a
/// whole resumption window, a full window is released at once and publishing goes on, instead of
/// the stream ending at the backpressure bound.
#[tokio::test(start_paused = true)]
async fn a_stream_nobody_follows_keeps_publishing_once_a_window_has_passed() {
    let (producer, ring) = ReplayRing::<Bytes>::new(2, 2).unwrap();
    let mut publisher = Publisher::new(producer, config(4, 10));
    let opened = Instant::now();
    publisher.publish_with(payload).await.unwrap();
    publisher.publish_with(payload).await.unwrap();
    // Full, nobody connected, the window not over: the publish waits for the window's end.
    assert_eq!(publisher.publish_with(payload).await.unwrap(), 3);
    let waited = opened.elapsed();
    assert!(
        waited >= Duration::from_secs(4) && waited <= Duration::from_secs(5),
        "waited {waited:?} for a window of 4 s"
    );
    // From now on every full window is released at once.
    let t = Instant::now();
    for expected in 4..=40 {
        assert_eq!(publisher.publish_with(payload).await.unwrap(), expected);
    }
    assert_eq!(t.elapsed(), Duration::ZERO);
    assert!(!publisher.is_closed());
    assert_eq!((ring.floor(), ring.head()), (39, 40));
}

/// When the last connection leaves, what it had not written waits one window from its
/// departure (it may come back for it), then goes.
#[tokio::test(start_paused = true)]
async fn after_the_last_connection_leaves_its_window_runs_then_publishing_goes_on() {
    let (producer, ring) = ReplayRing::<Bytes>::new(2, 2).unwrap();
    let mut publisher = Publisher::new(producer, config(3, 10));
    let conn = publisher.retention().lock().connect(0).unwrap();
    publisher.publish_with(payload).await.unwrap();
    tokio::time::sleep(Duration::from_secs(60)).await;
    let left = Instant::now();
    publisher
        .retention()
        .lock()
        .disconnect(conn, left.into_std());
    publisher.publish_with(payload).await.unwrap();
    // Ids 1 and 2 were never written to it: they stay for its window, then go.
    assert_eq!(publisher.publish_with(payload).await.unwrap(), 3);
    assert_eq!(left.elapsed(), Duration::from_secs(3));
    assert_eq!(ring.floor(), 3);
    assert!(!publisher.is_closed());
}

#[tokio::test(start_paused = true)]
async fn a_release_wakes_a_waiting_publish() {
    let (producer, ring) = ReplayRing::<Bytes>::new(1, 2).unwrap();
    let mut publisher = Publisher::new(producer, config(30, 10));
    publisher.publish_with(payload).await.unwrap();
    let t0 = Instant::now();
    let task = tokio::spawn(async move {
        let id = publisher.publish_with(payload).await;
        (id, publisher)
    });
    until("the publisher is waiting", || {
        ring.metrics().producer_waits == 1
    })
    .await;
    ring.release_through(1).unwrap();
    let (id, _publisher) = task.await.unwrap();
    assert_eq!(id.unwrap(), 2);
    assert_eq!(
        t0.elapsed(),
        Duration::ZERO,
        "woken by the release, not by a timer"
    );
}

#[tokio::test(start_paused = true)]
async fn past_the_bound_the_stream_closes_with_backpressure_timeout() {
    let (producer, ring) = ReplayRing::<Bytes>::new(1, 2).unwrap();
    let mut reader = ring.resume(Some(0)).unwrap();
    let mut publisher = Publisher::new(producer, config(30, 3));
    publisher.publish_with(payload).await.unwrap();
    let t0 = Instant::now();
    let built = Arc::new(AtomicBool::new(false));
    let flag = built.clone();
    let err = publisher
        .publish_with(move |id| {
            // Relaxed: the flag is read on this same thread after the publish returns.
            flag.store(true, Ordering::Relaxed);
            payload(id)
        })
        .await
        .unwrap_err();
    assert_eq!(t0.elapsed(), Duration::from_secs(3));
    let PublishError::BackpressureTimeout { waited } = err else {
        panic!("expected BackpressureTimeout, got {err:?}");
    };
    assert_eq!(waited, Duration::from_secs(3));
    assert!(
        // Relaxed: any store ran in the publish above, on this thread.
        !built.load(Ordering::Relaxed),
        "the refused payload was never built"
    );
    assert!(publisher.is_closed());
    assert_eq!(ring.head(), 1, "no id consumed by the refused publish");

    // Readers get everything retained, then the explicit reason.
    assert_eq!(reader.try_recv().unwrap().unwrap().data, payload(1));
    let reason = CloseReason::BackpressureTimeout { waited };
    assert_eq!(reader.try_recv(), Err(ReadError::Closed(reason.clone())));
    match publisher.publish_with(payload).await {
        Err(PublishError::Closed(Some(r))) => assert_eq!(r, reason),
        other => panic!("publish after the close: {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_publish_consumes_no_id_and_keeps_its_backpressure_episode() {
    let (producer, ring) = ReplayRing::<Bytes>::new(1, 2).unwrap();
    let mut publisher = Publisher::new(producer, config(30, 3));
    publisher.publish_with(payload).await.unwrap();
    let t0 = Instant::now();

    let built = Arc::new(AtomicBool::new(false));
    let flag = built.clone();
    let cancelled = tokio::time::timeout(
        Duration::from_secs(2),
        publisher.publish_with(move |id| {
            // Relaxed: the flag is read on this same thread after the publish is dropped.
            flag.store(true, Ordering::Relaxed);
            payload(id)
        }),
    )
    .await;
    assert!(cancelled.is_err(), "still waiting after 2 s");
    assert!(
        // Relaxed: any store ran in the publish above, on this thread.
        !built.load(Ordering::Relaxed),
        "a cancelled publish builds nothing"
    );
    assert_eq!(ring.head(), 1);
    assert!(!publisher.is_closed());
    assert_eq!(publisher.stats().backpressure_episodes, 1);

    // Retrying continues the same episode: the bound is 3 s from the first refusal, not 3 more.
    let err = publisher.publish_with(payload).await.unwrap_err();
    assert!(
        matches!(err, PublishError::BackpressureTimeout { .. }),
        "{err:?}"
    );
    assert_eq!(t0.elapsed(), Duration::from_secs(3));
    let stats = publisher.stats();
    assert_eq!(
        (
            stats.published,
            stats.backpressure_episodes,
            stats.backpressure_timeouts
        ),
        (1, 1, 1)
    );
}

#[tokio::test(start_paused = true)]
async fn after_a_cancelled_publish_the_next_one_gets_the_next_id() {
    let (producer, ring) = ReplayRing::<Bytes>::new(1, 2).unwrap();
    let mut publisher = Publisher::new(producer, config(30, 10));
    publisher.publish_with(payload).await.unwrap();
    let cancelled =
        tokio::time::timeout(Duration::from_secs(1), publisher.publish_with(payload)).await;
    assert!(cancelled.is_err());
    ring.release_through(1).unwrap();
    assert_eq!(publisher.publish_with(payload).await.unwrap(), 2);
    let mut reader = ring.resume(Some(1)).unwrap();
    assert_eq!(reader.try_recv().unwrap().unwrap().data, payload(2));
}

#[tokio::test]
async fn the_backpressure_bound_holds_in_real_time() {
    let bound = Duration::from_millis(300);
    let (producer, ring) = ReplayRing::<Bytes>::new(1, 1).unwrap();
    let config = RetentionConfig {
        backpressure_timeout: bound,
        ..RetentionConfig::default()
    };
    let mut publisher = Publisher::new(producer, config);
    publisher.publish_with(payload).await.unwrap();
    let start = std::time::Instant::now();
    let err = publisher.publish_with(payload).await.unwrap_err();
    let elapsed = start.elapsed();
    assert!(matches!(err, PublishError::BackpressureTimeout { waited } if waited >= bound));
    assert!(elapsed >= bound, "gave up early: {elapsed:?}");
    assert!(
        elapsed < bound + Duration::from_secs(5),
        "gave up late: {elapsed:?}"
    );
    assert!(matches!(
        ring.close_reason(),
        Some(CloseReason::BackpressureTimeout { .. })
    ));
}

/// A policy of the application's own: release everything each time the window is full.
#[derive(Debug, Default)]
struct ReleaseAll {
    calls: u64,
}

impl replay_ring_sse::RetentionPolicy<ReplayRing<Bytes>> for ReleaseAll {
    async fn release_due(
        &mut self,
        ring: &ReplayRing<Bytes>,
        _now: std::time::Instant,
    ) -> Result<bool, replay_ring_sse::backend::ReleaseError> {
        self.calls += 1;
        let before = ring.floor();
        Ok(ring.release_through(ring.head())? > before)
    }

    fn next_due(&self) -> Option<std::time::Instant> {
        None
    }
}

#[tokio::test(start_paused = true)]
async fn any_retention_policy_drives_the_loop() {
    let (producer, ring) = ReplayRing::<Bytes>::new(2, 1).unwrap();
    let mut publisher =
        Publisher::with_policy(producer, ReleaseAll::default(), Duration::from_secs(1));
    let t0 = Instant::now();
    for expected in 1..=10 {
        assert_eq!(publisher.publish_with(payload).await.unwrap(), expected);
    }
    assert_eq!(
        t0.elapsed(),
        Duration::ZERO,
        "never waited: the policy made room"
    );
    // Full at 3, 5, 7, 9: the policy was asked each time and released both events.
    assert_eq!(publisher.retention().calls, 4);
    assert_eq!((ring.floor(), ring.head()), (9, 10));
    assert_eq!(publisher.stats().backpressure_episodes, 0);
}

/// A write reported while the publisher already waits creates the checkpoint that will release
/// room; the publisher must notice it then, not at the backpressure bound it computed before.
#[tokio::test(start_paused = true)]
async fn a_write_reported_while_waiting_moves_the_wake_up() {
    let (producer, ring) = ReplayRing::<Bytes>::new(2, 2).unwrap();
    let mut publisher = Publisher::new(producer, config(4, 10));
    let retention = publisher.retention().clone();
    let conn = retention.lock().connect(0).unwrap();
    publisher.publish_with(payload).await.unwrap();
    publisher.publish_with(payload).await.unwrap();
    let t0 = Instant::now();
    let task = tokio::spawn(async move {
        let id = publisher.publish_with(payload).await;
        (id, publisher)
    });
    until("the publisher is waiting", || {
        ring.metrics().producer_waits == 1
    })
    .await;
    // Nothing was written yet, so nothing can expire: the publisher's only deadline is the bound.
    tokio::time::advance(Duration::from_secs(1)).await;
    retention
        .lock()
        .on_written(&conn, 2, Instant::now().into_std());
    let (id, _publisher) = task.await.unwrap();
    assert_eq!(id.unwrap(), 3, "released when the written events expired");
    assert_eq!(
        t0.elapsed(),
        Duration::from_secs(5),
        "written at 1 s + a 4 s window"
    );
}

/// A producer that publishes as fast as it can into a window that always has room still lets the
/// other tasks of its runtime run: every publish spends tokio's cooperative budget, and the task
/// yields once that is used up, so a server's connections and timers on the same worker are
/// not held up until the loop stops.
#[tokio::test(flavor = "current_thread")]
async fn an_unthrottled_publisher_lets_other_tasks_run() {
    const N: u64 = 10_000;
    let (producer, _ring) = ReplayRing::<Bytes>::new(16_384, 1).unwrap();
    let mut publisher = Publisher::new(producer, RetentionConfig::default());
    let published = Arc::new(AtomicU64::new(0));
    let other = {
        let published = published.clone();
        // Relaxed (this load and the increments): a count read for its own value, and the
        // current-thread runtime runs both tasks on this one thread.
        tokio::spawn(async move { published.load(Ordering::Relaxed) })
    };
    for _ in 0..N {
        publisher
            .publish_with(|_| Bytes::from_static(b"x"))
            .await
            .unwrap();
        // Relaxed: see the other task's load.
        published.fetch_add(1, Ordering::Relaxed);
    }
    let ran_after = other.await.unwrap();
    assert!(
        ran_after < N,
        "the other task ran only once all {N} publishes were done"
    );
}
