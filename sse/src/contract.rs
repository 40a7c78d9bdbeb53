//! The contract suite: what every [`Backend`] must do, as async checks generic over the backend.
//!
//! A backend crate runs it against a real instance of its store, through a factory that opens a
//! fresh, empty stream with the given capacity:
//!
//! ```
//! use bytes::Bytes;
//! use replay_ring::ReplayRing;
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! replay_ring_sse::contract::run_all(|capacity| async move {
//!     ReplayRing::<Bytes>::new(capacity, 8).unwrap()
//! })
//! .await;
//! # });
//! ```
//!
//! Each check is also public, so a test file can give every one its own `#[tokio::test]`. The checks
//! panic (like `assert!`) on the first violation, naming what was expected. They need a
//! multi-threaded-capable runtime only for [`concurrent_producer_readers_releaser`], which spawns
//! tasks (a current-thread runtime works too). Every wait has a deadline ([`DEADLINE`]): a backend
//! that loses a wake-up fails instead of hanging.
//!
//! What the factory must give: a stream nobody else writes, nothing released yet, room for at least
//! [`MIN_READERS`] open tails, and [`Backend::capacity`] equal to the requested capacity (the suite
//! only asks for powers of two). Ids may start anywhere: the suite reads the first id from the
//! fresh window (`head + 1`).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use replay_ring::{CloseReason, ResumeError};
use tokio::sync::mpsc;

use crate::backend::{
    AppendError, Backend, BackendProducer, OpenError, ReleaseError, Tail, TailError, Window,
};

/// How long any single wait in the suite may take before the check fails.
pub const DEADLINE: Duration = Duration::from_secs(20);

/// How many tails the suite opens at once, at most.
pub const MIN_READERS: usize = 8;

/// The payload the suite appends for `id`: it encodes the id, so every read can be checked.
///
/// ```
/// assert_eq!(replay_ring_sse::contract::payload(7), "event 7");
/// ```
pub fn payload(id: u64) -> Bytes {
    Bytes::from(format!("event {id}"))
}

/// Runs every check, each on a fresh stream from `open`.
///
/// # Panics
/// On the first contract violation, with a message naming it.
///
/// # Cancel safety
/// Dropping the future abandons the checks; streams already opened are dropped.
pub async fn run_all<B, F, Fut>(open: F)
where
    B: Backend<Payload = Bytes>,
    F: Fn(usize) -> Fut,
    Fut: Future<Output = (B::Producer, B)>,
{
    resume_table(&open).await;
    resume_on_fresh_and_emptied_windows(&open).await;
    refused_appends_burn_no_id(&open).await;
    release_and_floor(&open).await;
    ready_waits_for_a_release(&open).await;
    close_drains_then_reports_the_reason(&open).await;
    too_many_readers(&open).await;
    concurrent_producer_readers_releaser(&open).await;
}

/// Awaits `fut`, failing the check after [`DEADLINE`].
async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(DEADLINE, fut).await {
        Ok(value) => value,
        Err(_) => panic!("{what}: no progress within {DEADLINE:?}"),
    }
}

async fn append<P>(producer: &mut P) -> u64
where
    P: BackendProducer,
    P::Backend: Backend<Payload = Bytes>,
{
    match producer.try_append_with(payload).await {
        Ok(id) => id,
        Err(e) => panic!("append refused while the window had room: {e}"),
    }
}

async fn window<B: Backend>(backend: &B) -> Window {
    backend.window().await.expect("window")
}

async fn open_fresh<B, F, Fut>(open: &F, capacity: usize) -> (B::Producer, B, u64)
where
    B: Backend<Payload = Bytes>,
    F: Fn(usize) -> Fut,
    Fut: Future<Output = (B::Producer, B)>,
{
    let (producer, backend) = open(capacity).await;
    assert_eq!(backend.capacity(), capacity, "capacity of a fresh stream");
    assert!(
        backend.max_readers() >= MIN_READERS,
        "the contract suite needs room for {MIN_READERS} tails"
    );
    let w = window(&backend).await;
    assert_eq!(w.floor, w.head + 1, "a fresh stream retains nothing");
    (producer, backend, w.head + 1)
}

async fn resume_ok<B: Backend>(backend: &B, cursor: Option<u64>) -> B::Tail {
    match within("resume", backend.resume(cursor)).await {
        Ok(tail) => tail,
        Err(e) => panic!("resume({cursor:?}) refused: {e}"),
    }
}

async fn resume_refused<B: Backend>(backend: &B, cursor: Option<u64>) -> ResumeError {
    match within("resume", backend.resume(cursor)).await {
        Ok(tail) => panic!(
            "resume({cursor:?}) accepted (tail at {}), expected a refusal",
            tail.cursor()
        ),
        Err(OpenError::Refused(e)) => e,
        Err(e) => panic!("resume({cursor:?}): expected a typed refusal, got {e}"),
    }
}

/// Reads batches until id `through` was yielded; checks order, contiguity and payloads. Returns
/// the ids.
async fn read_through<T: Tail<Payload = Bytes>>(tail: &mut T, through: u64) -> Vec<u64> {
    let mut ids = Vec::new();
    let mut batch = Vec::new();
    while ids.last().is_none_or(|&last| last < through) {
        let expected_next = tail.cursor();
        let n = match within("next_batch", tail.next_batch(&mut batch)).await {
            Ok(n) => n,
            Err(e) => panic!("tail at {expected_next} failed before id {through}: {e}"),
        };
        assert!(
            n >= 1 && n == batch.len(),
            "next_batch returned {n} for {} events",
            batch.len()
        );
        for (offset, (id, data)) in batch.iter().enumerate() {
            assert_eq!(
                *id,
                expected_next + offset as u64,
                "ids are contiguous from the cursor"
            );
            assert_eq!(data, &payload(*id), "payload of id {id}");
        }
        ids.extend(batch.iter().map(|(id, _)| *id));
        assert_eq!(
            tail.cursor(),
            ids.last().unwrap() + 1,
            "cursor after a batch"
        );
    }
    ids
}

/// Asserts the tail yields exactly `expected` and then the `sentinel` (appended after `expected`
/// was complete): nothing skipped, nothing extra.
async fn assert_yields<T: Tail<Payload = Bytes>>(
    tail: &mut T,
    expected: impl IntoIterator<Item = u64>,
    sentinel: u64,
    row: &str,
) {
    let ids = read_through(tail, sentinel).await;
    let mut want: Vec<u64> = expected.into_iter().collect();
    want.push(sentinel);
    assert_eq!(ids, want, "{row}: the tail must yield exactly these ids");
}

/// Every row of the resume table on one window `floor ..= head` (with `floor > first`):
/// `x < floor - 1` → `BelowFloor`; `x = floor - 1` → `floor ..= head`; `floor <= x < head` →
/// `x + 1 ..= head`; `x = head` → nothing replayed; `x > head` → `AheadOfHead`; no cursor → live.
///
/// # Panics
/// On a violation.
///
/// # Cancel safety
/// Dropping the future abandons the check.
pub async fn resume_table<B, F, Fut>(open: &F)
where
    B: Backend<Payload = Bytes>,
    F: Fn(usize) -> Fut,
    Fut: Future<Output = (B::Producer, B)>,
{
    let (mut producer, backend, first) = open_fresh(open, 16).await;
    for _ in 0..10 {
        append(&mut producer).await;
    }
    let floor = backend.release_through(first + 3).await.expect("release");
    let head = first + 9;
    assert_eq!(window(&backend).await, Window { floor, head });
    assert_eq!(floor, first + 4);

    for x in [first - 1, floor - 3, floor - 2] {
        assert_eq!(
            resume_refused(&backend, Some(x)).await,
            ResumeError::BelowFloor {
                requested: x,
                floor,
                head
            },
            "x = {x} < floor - 1"
        );
    }
    for x in [head + 1, head + 1000, u64::MAX] {
        assert_eq!(
            resume_refused(&backend, Some(x)).await,
            ResumeError::AheadOfHead { requested: x, head },
            "x = {x} > head"
        );
    }

    let mut at_floor_minus_1 = resume_ok(&backend, Some(floor - 1)).await;
    let mut at_floor = resume_ok(&backend, Some(floor)).await;
    let mut before_head = resume_ok(&backend, Some(head - 1)).await;
    let mut at_head = resume_ok(&backend, Some(head)).await;
    let mut live = resume_ok(&backend, None).await;
    assert_eq!(at_floor_minus_1.cursor(), floor);
    assert_eq!(
        at_head.cursor(),
        head + 1,
        "a no-op resume continues after the head"
    );
    assert_eq!(live.cursor(), head + 1, "a live tail starts after the head");

    let sentinel = append(&mut producer).await;
    assert_eq!(sentinel, head + 1);
    assert_yields(
        &mut at_floor_minus_1,
        floor..=head,
        sentinel,
        "x = floor - 1",
    )
    .await;
    assert_yields(&mut at_floor, floor + 1..=head, sentinel, "x = floor").await;
    assert_yields(&mut before_head, head..=head, sentinel, "x = head - 1").await;
    assert_yields(&mut at_head, [], sentinel, "x = head").await;
    assert_yields(&mut live, [], sentinel, "no cursor").await;
}

/// The resume table at the edges: a fresh stream (`x = first - 1` is the head: a no-op; `x = first`
/// is ahead), and a window emptied by releasing through the head (`x = head` is a no-op, `x < head`
/// is below the floor).
///
/// # Panics
/// On a violation.
///
/// # Cancel safety
/// Dropping the future abandons the check.
pub async fn resume_on_fresh_and_emptied_windows<B, F, Fut>(open: &F)
where
    B: Backend<Payload = Bytes>,
    F: Fn(usize) -> Fut,
    Fut: Future<Output = (B::Producer, B)>,
{
    let (mut producer, backend, first) = open_fresh(open, 4).await;
    assert_eq!(
        resume_refused(&backend, Some(first)).await,
        ResumeError::AheadOfHead {
            requested: first,
            head: first - 1
        }
    );
    let mut noop = resume_ok(&backend, Some(first - 1)).await;
    let id = append(&mut producer).await;
    assert_eq!(id, first, "the first append gets the first id");
    assert_yields(&mut noop, [], first, "fresh stream, x = head").await;

    let head = append(&mut producer).await;
    let floor = backend
        .release_through(head)
        .await
        .expect("release through the head");
    assert_eq!(
        floor,
        head + 1,
        "releasing through the head empties the window"
    );
    assert_eq!(
        window(&backend).await,
        Window {
            floor: head + 1,
            head
        }
    );
    assert_eq!(
        resume_refused(&backend, Some(head - 1)).await,
        ResumeError::BelowFloor {
            requested: head - 1,
            floor: head + 1,
            head
        }
    );
    let mut at_head = resume_ok(&backend, Some(head)).await;
    let sentinel = append(&mut producer).await;
    assert_yields(&mut at_head, [], sentinel, "empty window, x = head").await;
}

/// A full window refuses appends with `Full`, hands the closure back uncalled, consumes no id, and
/// accepts the next append (with the next id) once a release made room.
///
/// # Panics
/// On a violation.
///
/// # Cancel safety
/// Dropping the future abandons the check.
pub async fn refused_appends_burn_no_id<B, F, Fut>(open: &F)
where
    B: Backend<Payload = Bytes>,
    F: Fn(usize) -> Fut,
    Fut: Future<Output = (B::Producer, B)>,
{
    let capacity = 4;
    let (mut producer, backend, first) = open_fresh(open, capacity).await;
    for k in 0..capacity as u64 {
        assert_eq!(
            append(&mut producer).await,
            first + k,
            "ids are assigned 1, 2, 3, …"
        );
    }
    let last = first + capacity as u64 - 1;
    for _ in 0..3 {
        let called = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = called.clone();
        let refused = producer
            .try_append_with(move |id| {
                // Relaxed: read by this task once the append is done; see the load.
                flag.store(true, std::sync::atomic::Ordering::Relaxed);
                payload(id)
            })
            .await;
        match refused {
            Err(AppendError::Full(make)) => {
                assert!(
                    // Relaxed: a call of the closure would be part of the append this task
                    // awaited above, which is finished before this load.
                    !called.load(std::sync::atomic::Ordering::Relaxed),
                    "a refused append must not build the payload"
                );
                assert_eq!(make(99), payload(99), "the closure comes back");
            }
            other => panic!(
                "append to a full window: expected Full, got {:?}",
                other.err()
            ),
        }
        assert_eq!(
            window(&backend).await,
            Window {
                floor: first,
                head: last
            }
        );
    }
    let counters = backend.counters().await.expect("counters");
    assert_eq!(
        (counters.events_enqueued, counters.events_released),
        (capacity as u64, 0)
    );
    assert_eq!(
        (counters.floor, counters.head, counters.capacity),
        (first, last, capacity)
    );

    let mut tail = resume_ok(&backend, Some(first)).await;
    assert_eq!(
        backend.release_through(first).await.expect("release"),
        first + 1
    );
    assert_eq!(
        append(&mut producer).await,
        last + 1,
        "no id was burnt by the refusals"
    );
    // Contiguous `first + 1 ..= last + 1`: nothing skipped where the refusals were.
    assert_eq!(
        read_through(&mut tail, last + 1).await,
        (first + 1..=last + 1).collect::<Vec<_>>(),
        "ids across the refusals"
    );
}

/// `release_through` returns the new floor; the floor only grows; releasing below it is a no-op;
/// releasing past the head is `AheadOfHead` and moves nothing.
///
/// # Panics
/// On a violation.
///
/// # Cancel safety
/// Dropping the future abandons the check.
pub async fn release_and_floor<B, F, Fut>(open: &F)
where
    B: Backend<Payload = Bytes>,
    F: Fn(usize) -> Fut,
    Fut: Future<Output = (B::Producer, B)>,
{
    let (mut producer, backend, first) = open_fresh(open, 8).await;
    let empty_head = first - 1;
    assert_eq!(
        backend
            .release_through(empty_head)
            .await
            .expect("no-op release"),
        first
    );
    match backend.release_through(first).await {
        Err(ReleaseError::AheadOfHead { requested, head }) => {
            assert_eq!((requested, head), (first, empty_head))
        }
        other => panic!("release past the head of a fresh stream: {other:?}"),
    }
    for _ in 0..6 {
        append(&mut producer).await;
    }
    let head = first + 5;
    assert_eq!(
        backend.release_through(first + 2).await.expect("release"),
        first + 3
    );
    assert_eq!(
        backend
            .release_through(first)
            .await
            .expect("release below the floor"),
        first + 3,
        "the floor never moves back"
    );
    match backend.release_through(head + 1).await {
        Err(ReleaseError::AheadOfHead { requested, head: h }) => {
            assert_eq!((requested, h), (head + 1, head))
        }
        other => panic!("release past the head: {other:?}"),
    }
    match backend.release_through(u64::MAX).await {
        Err(ReleaseError::AheadOfHead { requested, head: h }) => {
            assert_eq!((requested, h), (u64::MAX, head))
        }
        other => panic!("release through u64::MAX: {other:?}"),
    }
    assert_eq!(
        window(&backend).await,
        Window {
            floor: first + 3,
            head
        },
        "a refused release moves nothing"
    );
    assert_eq!(
        backend.release_through(head).await.expect("release all"),
        head + 1
    );
    let counters = backend.counters().await.expect("counters");
    assert_eq!((counters.events_enqueued, counters.events_released), (6, 6));
}

/// `ready` returns at once when there is room, and a producer waiting on a full window is woken by
/// a release from another task.
///
/// # Panics
/// On a violation (including a lost wake-up, after [`DEADLINE`]).
///
/// # Cancel safety
/// Dropping the future abandons the check.
pub async fn ready_waits_for_a_release<B, F, Fut>(open: &F)
where
    B: Backend<Payload = Bytes>,
    F: Fn(usize) -> Fut,
    Fut: Future<Output = (B::Producer, B)>,
{
    let (mut producer, backend, first) = open_fresh(open, 2).await;
    within("ready with room", producer.ready())
        .await
        .expect("ready");
    append(&mut producer).await;
    append(&mut producer).await;
    let (waiting_tx, mut waiting_rx) = mpsc::unbounded_channel();
    let waiter = tokio::spawn(async move {
        assert!(producer
            .try_append_with(payload)
            .await
            .unwrap_err()
            .is_full());
        waiting_tx.send(()).expect("signal");
        loop {
            within("ready after a release", producer.ready())
                .await
                .expect("ready");
            match producer.try_append_with(payload).await {
                Ok(id) => return id,
                Err(AppendError::Full(_)) => continue, // a spurious wake-up is allowed
                Err(e) => panic!("append after ready: {e}"),
            }
        }
    });
    within("waiter started", waiting_rx.recv()).await;
    backend.release_through(first).await.expect("release");
    let id = within("waiter finished", waiter)
        .await
        .expect("waiter task");
    assert_eq!(id, first + 2);
}

/// After `close(reason)`, tails opened before and after the close yield everything retained, then
/// `Closed(reason)`; `close_reason` reports it. Checked for an application error and for
/// `BackpressureTimeout` (a backend must keep the reason's data). [`Backend::ended_after`] never
/// claims the end for a cursor with events still to read (or released), nor before the close, and
/// names the reason if it answers at all.
///
/// # Panics
/// On a violation.
///
/// # Cancel safety
/// Dropping the future abandons the check.
pub async fn close_drains_then_reports_the_reason<B, F, Fut>(open: &F)
where
    B: Backend<Payload = Bytes>,
    F: Fn(usize) -> Fut,
    Fut: Future<Output = (B::Producer, B)>,
{
    for reason in [
        CloseReason::error("tool failed"),
        CloseReason::BackpressureTimeout {
            waited: Duration::from_millis(1500),
        },
        CloseReason::Completed,
    ] {
        let (mut producer, backend, first) = open_fresh(open, 8).await;
        let mut from_start = resume_ok(&backend, Some(first - 1)).await;
        let mut live = resume_ok(&backend, None).await;
        for _ in 0..3 {
            append(&mut producer).await;
        }
        let head = first + 2;
        assert_eq!(backend.close_reason().await.expect("close_reason"), None);
        for cursor in [first, head, head + 1] {
            assert_eq!(
                backend.ended_after(cursor),
                None,
                "ended_after({cursor}) before the close"
            );
        }
        within("close", producer.close(reason.clone()))
            .await
            .expect("close");
        assert_eq!(
            backend.close_reason().await.expect("close_reason"),
            Some(reason.clone())
        );
        for cursor in [first, head] {
            assert_eq!(
                backend.ended_after(cursor),
                None,
                "ended_after({cursor}) with event {head} still to read"
            );
        }
        if let Some(seen) = backend.ended_after(head + 1) {
            assert_eq!(seen, reason, "ended_after names another reason");
        }

        let mut after_close = resume_ok(&backend, Some(first)).await;
        let mut at_head = resume_ok(&backend, Some(head)).await;
        for (tail, from) in [
            (&mut from_start, first),
            (&mut live, first),
            (&mut after_close, first + 1),
        ] {
            assert_eq!(
                read_through(tail, head).await,
                (from..=head).collect::<Vec<_>>()
            );
            assert_closed(tail, &reason).await;
        }
        assert_closed(&mut at_head, &reason).await;

        // Released: a tail at `first` would now get a gap, not the close.
        within("release", backend.release_through(head))
            .await
            .expect("release");
        assert_eq!(
            backend.ended_after(first),
            None,
            "ended_after({first}) below the floor"
        );
    }
}

async fn assert_closed<T: Tail>(tail: &mut T, reason: &CloseReason) {
    let mut batch = Vec::new();
    match within("close seen", tail.next_batch(&mut batch)).await {
        Err(TailError::Closed(seen)) => assert_eq!(&seen, reason),
        Ok(n) => panic!("expected Closed({reason}), got {n} more events"),
        Err(e) => panic!("expected Closed({reason}), got {e}"),
    }
}

/// Opening more than [`Backend::max_readers`] tails is refused with `TooManyReaders` (while a cursor
/// ahead of the head is still `AheadOfHead`), and closing a tail frees its place. Skipped for
/// backends with more than 1,024 reader places.
///
/// # Panics
/// On a violation.
///
/// # Cancel safety
/// Dropping the future abandons the check.
pub async fn too_many_readers<B, F, Fut>(open: &F)
where
    B: Backend<Payload = Bytes>,
    F: Fn(usize) -> Fut,
    Fut: Future<Output = (B::Producer, B)>,
{
    let (_producer, backend, _first) = open_fresh(open, 4).await;
    let limit = backend.max_readers();
    if limit > 1024 {
        return;
    }
    let mut tails = Vec::with_capacity(limit);
    for _ in 0..limit {
        tails.push(resume_ok(&backend, None).await);
    }
    match within("resume", backend.resume(None)).await {
        Err(OpenError::TooManyReaders { limit: reported }) => assert_eq!(reported, limit),
        Err(e) => panic!("resume with every reader place taken: expected TooManyReaders, got {e}"),
        Ok(_) => panic!("resume with every reader place taken was accepted"),
    }
    // The cursor is judged before the reader limit: a bad cursor is still its typed refusal.
    let head = window(&backend).await.head;
    assert_eq!(
        resume_refused(&backend, Some(head + 1)).await,
        ResumeError::AheadOfHead {
            requested: head + 1,
            head
        }
    );
    tails.pop();
    resume_ok(&backend, None).await;
}

/// A producer appending `EVENTS` events through a small window, three readers checking every id and
/// payload, a releaser releasing what all three have read, and a resumer opening tails at
/// arbitrary points of the moving window: every resume yields its exact suffix or an explicit
/// `BelowFloor`, never anything else; every reader ends with `Closed(Completed)`.
///
/// # Panics
/// On a violation.
///
/// # Cancel safety
/// Dropping the future abandons the check (spawned tasks end when their deadlines pass).
pub async fn concurrent_producer_readers_releaser<B, F, Fut>(open: &F)
where
    B: Backend<Payload = Bytes>,
    F: Fn(usize) -> Fut,
    Fut: Future<Output = (B::Producer, B)>,
{
    const EVENTS: u64 = 2_000;
    const READERS: usize = 3;
    let (mut producer, backend, first) = open_fresh(open, 8).await;
    let last = first + EVENTS - 1;

    let (progress_tx, mut progress_rx) = mpsc::unbounded_channel::<(usize, u64)>();
    let mut readers = Vec::new();
    for r in 0..READERS {
        let mut tail = resume_ok(&backend, Some(first - 1)).await;
        let progress = progress_tx.clone();
        readers.push(tokio::spawn(async move {
            let mut batch = Vec::new();
            let mut next = first;
            loop {
                match within("reader", tail.next_batch(&mut batch)).await {
                    Ok(_) => {
                        for (id, data) in &batch {
                            assert_eq!(*id, next, "reader {r}: ids in order, none skipped");
                            assert_eq!(data, &payload(*id), "reader {r}: payload of {id}");
                            next += 1;
                        }
                        // The releaser may be gone once everything was released.
                        let _ = progress.send((r, next - 1));
                    }
                    Err(TailError::Closed(reason)) => {
                        assert_eq!(reason, CloseReason::Completed);
                        return next - 1;
                    }
                    Err(e) => panic!("reader {r} at {next}: {e}"),
                }
            }
        }));
    }
    drop(progress_tx);

    let releaser_backend = backend.clone();
    let releaser = tokio::spawn(async move {
        let mut seen = [first - 1; READERS];
        let mut released = first - 1;
        while let Some((r, through)) = progress_rx.recv().await {
            seen[r] = through;
            let all = *seen.iter().min().unwrap();
            if all > released {
                let floor = releaser_backend
                    .release_through(all)
                    .await
                    .expect("release");
                assert!(floor > all, "floor {floor} after releasing through {all}");
                released = all;
            }
        }
        released
    });

    let resumer_backend = backend.clone();
    let resumer = tokio::spawn(async move {
        let mut batch = Vec::new();
        let (mut ok, mut below) = (0u32, 0u32);
        for k in 0..200u64 {
            let w = window(&resumer_backend).await;
            if w.head >= last {
                break;
            }
            // Anywhere from two below `floor - 1` to the head.
            let lo = w.floor.saturating_sub(3).max(first - 1);
            let x = lo + (k * 7919) % (w.head - lo + 1);
            match within("resume", resumer_backend.resume(Some(x))).await {
                Ok(mut tail) => {
                    ok += 1;
                    if x < w.head {
                        match within("resumed read", tail.next_batch(&mut batch)).await {
                            Ok(_) => {
                                assert_eq!(
                                    batch[0].0,
                                    x + 1,
                                    "resume from {x} starts at {}",
                                    x + 1
                                );
                                for (id, data) in &batch {
                                    assert_eq!(data, &payload(*id));
                                }
                            }
                            Err(TailError::Gap { next, .. }) => {
                                assert_eq!(next, x + 1, "a gap names the id the tail needed")
                            }
                            Err(e) => panic!("resumed tail from {x}: {e}"),
                        }
                    }
                }
                Err(OpenError::Refused(ResumeError::BelowFloor {
                    requested,
                    floor,
                    head,
                })) => {
                    below += 1;
                    assert_eq!(requested, x);
                    assert!(
                        x + 1 < floor && floor <= head + 1,
                        "BelowFloor {x}: {floor}..={head}"
                    );
                }
                Err(e) => panic!("resume from {x} inside the observed window: {e}"),
            }
            tokio::task::yield_now().await;
        }
        (ok, below)
    });

    for k in 0..EVENTS {
        loop {
            match producer.try_append_with(payload).await {
                Ok(id) => {
                    assert_eq!(id, first + k, "eager gap-free ids under concurrency");
                    break;
                }
                Err(AppendError::Full(_)) => within("producer waiting for room", producer.ready())
                    .await
                    .expect("ready"),
                Err(e) => panic!("append {k}: {e}"),
            }
        }
    }
    within("close", producer.close(CloseReason::Completed))
        .await
        .expect("close");

    for reader in readers {
        assert_eq!(
            within("reader end", reader).await.expect("reader task"),
            last
        );
    }
    let released = within("releaser end", releaser)
        .await
        .expect("releaser task");
    assert_eq!(released, last, "everything read was released");
    let (ok, _below) = within("resumer end", resumer).await.expect("resumer task");
    assert!(ok > 0, "the resumer opened at least one tail");
    let counters = backend.counters().await.expect("counters");
    assert_eq!(counters.events_enqueued, EVENTS);
}
