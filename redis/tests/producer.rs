//! The single producer: fencing by lease, and idempotent resends of appends whose outcome is
//! unknown because the connection dropped.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::cut_proxy::{backend_through, CutProxy, Mode};
use common::RedisServer;
use replay_ring::CloseReason;
use replay_ring_redis::{Error, ReadItem, RedisConfig, RedisStream};
use replay_ring_sse::StreamId;

fn sid(name: &str) -> StreamId {
    StreamId::new(name).unwrap()
}

/// Waits until the stream's producer lease has lapsed (nobody renewed it).
async fn lease_expired(server: &RedisServer, stream: &RedisStream) {
    let mut raw = server.raw();
    common::eventually(Duration::from_secs(10), "the lease to expire", || {
        let exists: bool = redis::cmd("EXISTS")
            .arg(stream.key_names()[3])
            .query(&mut raw)
            .unwrap();
        std::future::ready(!exists)
    })
    .await;
}

/// Resends the pending append until the connection is back (the manager reconnects after a drop).
async fn resolve(p: &mut replay_ring_redis::RedisProducer) -> Result<Option<u64>, Error> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match p.resolve_pending().await {
            Err(Error::Unknown { .. }) if std::time::Instant::now() < deadline => {
                tokio::task::yield_now().await
            }
            other => return other,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_producer_is_refused_and_a_stale_one_is_fenced() {
    let server = RedisServer::start();
    let config = RedisConfig {
        lease: Duration::from_millis(300),
        ..RedisConfig::default()
    };
    let backend = server.backend_with(config).await;
    let stream = backend.create(&sid("fence"), 64).await.unwrap();
    let mut first = stream.acquire_producer().await.unwrap();
    assert_eq!(first.append(b"a1").await.unwrap(), 1);

    // While the first holds the lease, a second (another replica) is refused.
    let other_replica = server.backend().await.open(&sid("fence")).await.unwrap();
    match other_replica.acquire_producer().await {
        Err(Error::LeaseHeld {
            holder,
            expires_in_ms,
        }) => {
            assert_eq!(holder, first.fencing_token());
            assert!(expires_in_ms > 0 && expires_in_ms <= 300, "{expires_in_ms}");
        }
        other => panic!("expected LeaseHeld, got {other:?}"),
    }

    // The first stalls (a GC pause, a partition) past its lease; the second takes over.
    lease_expired(&server, &stream).await;
    let mut second = other_replica.acquire_producer().await.unwrap();
    assert!(
        second.fencing_token() > first.fencing_token(),
        "tokens only grow"
    );
    assert_eq!(
        second.next_id(),
        2,
        "the new producer continues at the head"
    );
    assert_eq!(second.append(b"b2").await.unwrap(), 2);

    // The stale producer wakes up: every write is refused, nothing interleaves.
    match first.append(b"a2").await {
        Err(Error::Fenced { holder: Some(h) }) => assert_eq!(h, second.fencing_token()),
        other => panic!("expected Fenced, got {other:?}"),
    }
    assert!(matches!(first.renew().await, Err(Error::Fenced { .. })));
    assert!(matches!(
        first.close(CloseReason::Completed).await,
        Err(Error::Fenced { .. })
    ));
    assert_eq!(second.append(b"b3").await.unwrap(), 3);
    assert_eq!(
        server.log_entries(&stream),
        vec![
            (1, b"a1".to_vec()),
            (2, b"b2".to_vec()),
            (3, b"b3".to_vec())
        ]
    );
    assert!(backend.stats().refused_fenced >= 3);

    // A graceful hand-over: release the lease, the next producer gets it at once.
    second.renew().await.unwrap();
    second.release_lease().await.unwrap();
    let mut third = stream.acquire_producer().await.unwrap();
    assert_eq!(third.append(b"c4").await.unwrap(), 4);
}

/// Publishing through the SSE layer: a producer whose lease another replica took is told it was
/// superseded, on this publish and every later one, and the stream is not closed: the new
/// producer goes on from the head.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_superseded_publisher_stops_without_closing_the_stream() {
    use replay_ring_sse::axum::{SseConfig, SseStream};
    use replay_ring_sse::PublishError;
    let server = RedisServer::start();
    let config = RedisConfig {
        lease: Duration::from_millis(300),
        ..RedisConfig::default()
    };
    let backend = server.backend_with(config).await;
    let stream = backend.create(&sid("superseded"), 64).await.unwrap();
    let first = stream.acquire_producer().await.unwrap();
    let (_sse, mut publisher) =
        SseStream::with_backend(first, stream.identity(), SseConfig::default());
    assert_eq!(publisher.send("a1").await.unwrap(), 1);

    // Paused past its lease (no keeper renews it); another replica takes over.
    lease_expired(&server, &stream).await;
    let mut second = server
        .backend()
        .await
        .open(&sid("superseded"))
        .await
        .unwrap()
        .acquire_producer()
        .await
        .unwrap();

    for _ in 0..2 {
        match publisher.send("a2").await {
            Err(PublishError::Superseded) => {}
            other => panic!("expected Superseded, got {other:?}"),
        }
    }
    assert_eq!(stream.state().await.unwrap().closed, None, "not closed");
    assert_eq!(second.append(b"b2").await.unwrap(), 2);
    assert_eq!(
        server.log_entries(&stream),
        vec![(1, b"a1".to_vec()), (2, b"b2".to_vec())]
    );
}

/// How a stream is lost behind its producer's back.
#[derive(Debug, Clone, Copy)]
enum Loss {
    /// Its keys deleted (as by another replica, or an operator).
    Deleted,
    /// Its log rolled back behind ids it gave out (as by a restore from an older snapshot).
    RolledBack,
}

fn lose(server: &RedisServer, stream: &RedisStream, loss: Loss) {
    let mut raw = server.raw();
    let [meta, log, ctl, lease] = stream.key_names();
    match loss {
        Loss::Deleted => {
            let _: () = redis::cmd("DEL")
                .arg(&[meta, log, ctl, lease])
                .query(&mut raw)
                .unwrap();
        }
        Loss::RolledBack => {
            let ids: Vec<String> = (3..=4).map(|id| format!("0-{id}")).collect();
            let _: () = redis::cmd("XDEL")
                .arg(log)
                .arg(&ids)
                .query(&mut raw)
                .unwrap();
            let _: () = redis::cmd("HSET")
                .arg(meta)
                .arg("head")
                .arg("2")
                .query(&mut raw)
                .unwrap();
        }
    }
}

/// A stream lost in Redis ends its producer: through the SSE layer's producer interface each
/// append is `Closed` (nothing stored), not `Unavailable`, which a publisher would retry forever;
/// a `Publisher` returns `PublishError::Closed` and publishes no more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_lost_in_redis_ends_its_producer_instead_of_looking_unreachable() {
    use replay_ring_sse::axum::{SseConfig, SseStream};
    use replay_ring_sse::backend::{AppendError, BackendProducer};
    use replay_ring_sse::PublishError;
    let server = RedisServer::start();
    let backend = server.backend().await;
    for loss in [Loss::Deleted, Loss::RolledBack] {
        let name = format!("lost-{loss:?}").to_lowercase();
        let stream = backend.create(&sid(&name), 64).await.unwrap();
        let mut producer = stream.acquire_producer().await.unwrap();
        for id in 1..=4 {
            assert_eq!(producer.append(b"e").await.unwrap(), id);
        }
        lose(&server, &stream, loss);
        // Nothing to wait for (a publisher waiting for room goes on to the append, which says
        // the stream ended), not "unavailable".
        let ready = tokio::time::timeout(
            Duration::from_secs(5),
            BackendProducer::ready(&mut producer),
        );
        assert!(matches!(ready.await, Ok(Ok(()))), "{loss:?}: ready");
        for attempt in 0..2 {
            match BackendProducer::try_append_with(&mut producer, |_| Bytes::from_static(b"x"))
                .await
            {
                Err(AppendError::Closed(_)) => {}
                other => panic!(
                    "{loss:?}, append {attempt}: expected Closed, got {:?}",
                    other.map_err(|e| format!("{e:?}: {e}"))
                ),
            }
        }

        let stream = backend
            .create(&sid(&format!("{name}-published")), 64)
            .await
            .unwrap();
        let producer = stream.acquire_producer().await.unwrap();
        let (_sse, mut publisher) =
            SseStream::with_backend(producer, stream.identity(), SseConfig::default());
        for _ in 1..=4 {
            publisher.send("e").await.unwrap();
        }
        lose(&server, &stream, loss);
        for attempt in 0..2 {
            match publisher.send("x").await {
                Err(PublishError::Closed(None)) => {}
                other => {
                    panic!("{loss:?}, publish {attempt}: expected Closed(None), got {other:?}")
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_lease_with_no_successor_is_still_fenced() {
    let server = RedisServer::start();
    let config = RedisConfig {
        lease: Duration::from_millis(100),
        ..RedisConfig::default()
    };
    let backend = server.backend_with(config).await;
    let stream = backend.create(&sid("expired"), 8).await.unwrap();
    let mut p = stream.acquire_producer().await.unwrap();
    p.append(b"1").await.unwrap();
    lease_expired(&server, &stream).await;
    assert!(matches!(
        p.append(b"2").await,
        Err(Error::Fenced { holder: None })
    ));
    assert_eq!(stream.state().await.unwrap().head, 1, "nothing appended");
}

/// A stream deleted and created again counts its fencing tokens from the start, so the producer
/// of the old incarnation holds the same token as the new one's. Every write of an old handle is
/// refused by epoch: it appends, renews, closes, releases and gives up the lease of nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_of_an_earlier_incarnation_cannot_touch_the_new_one() {
    let server = RedisServer::start();
    let backend = server.backend().await;
    let old_stream = backend.create(&sid("reborn"), 64).await.unwrap();
    let mut old = old_stream.acquire_producer().await.unwrap();
    old.append(b"old-1").await.unwrap();
    old.append(b"old-2").await.unwrap();

    old_stream.delete().await.unwrap();
    let stream = backend.create(&sid("reborn"), 64).await.unwrap();
    let new_epoch = stream.identity().epoch;
    assert_ne!(old_stream.identity().epoch, new_epoch);
    let mut new = stream.acquire_producer().await.unwrap();
    assert_eq!(
        new.fencing_token(),
        old.fencing_token(),
        "the new incarnation's counter starts again: the token alone cannot tell them apart"
    );
    new.append(b"new-1").await.unwrap();
    new.append(b"new-2").await.unwrap();

    let lost = |r: Result<_, Error>| match r {
        Err(Error::EpochChanged { current, .. }) => current == Some(new_epoch),
        _ => false,
    };
    assert!(lost(old.append(b"stale").await.map(drop)), "append");
    assert!(lost(old.renew().await), "renew");
    assert!(
        lost(old_stream.release_through(2).await.map(drop)),
        "release"
    );
    assert!(lost(old.close(CloseReason::error("stale")).await), "close");
    assert_eq!(new.append(b"new-3").await.unwrap(), 3);
    let state = stream.state().await.unwrap();
    assert_eq!((state.floor, state.head, state.closed), (1, 3, None));
    assert_eq!(
        server.log_entries(&stream),
        vec![
            (1, b"new-1".to_vec()),
            (2, b"new-2".to_vec()),
            (3, b"new-3".to_vec())
        ]
    );

    // Giving up the lease from an earlier incarnation leaves the current holder's lease alone.
    stream.delete().await.unwrap();
    let newest_stream = backend.create(&sid("reborn"), 64).await.unwrap();
    let mut newest = newest_stream.acquire_producer().await.unwrap();
    assert_eq!(newest.fencing_token(), new.fencing_token());
    new.release_lease().await.unwrap();
    assert_eq!(
        newest.append(b"newest-1").await.unwrap(),
        1,
        "the lease is still the newest producer's"
    );
}

/// Appends 1..=30 through a proxy that loses a request or a reply every few appends; each lost one
/// is an `Unknown` outcome, resolved by the next append. The log ends up with 1..=30 exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_replies_are_resent_without_duplicates_or_gaps() {
    let server = RedisServer::start();
    let (proxy, backend) = backend_through(&server).await;
    let stream = backend.create(&sid("retry"), 64).await.unwrap();
    let mut p = stream.acquire_producer().await.unwrap();

    let mut unknown = 0;
    let mut ran_count = 0;
    let mut next = 1u64;
    while next <= 30 {
        let data = format!("e{next}");
        let mode = match next % 5 {
            1 => Mode::LoseReply,
            3 => Mode::LoseRequest,
            _ => Mode::Pass,
        };
        proxy.set(mode);
        let r = p.append(data.as_bytes()).await;
        proxy.set(Mode::Pass);
        match (mode, r) {
            (Mode::Pass, Ok(id)) => {
                assert_eq!(id, next);
                next += 1;
            }
            (_, Err(Error::Unknown { id, .. })) => {
                assert_eq!(id, next);
                assert!(p.has_pending());
                unknown += 1;
                // Did the command run before the connection dropped? Ask Redis directly. A lost
                // reply usually did (unless what was lost was the NOSCRIPT answer to the first
                // EVALSHA); a lost request normally did not, but on a stalled machine the client
                // may give up before its request even reached the proxy and send it after the
                // proxy passes again. Either way the resend below must recognise exactly what ran.
                let ran = server.log_entries(&stream).iter().any(|(i, _)| *i == next);
                ran_count += u64::from(ran);
                let dups = backend.stats().duplicates_resolved;
                assert_eq!(
                    resolve(&mut p).await.unwrap(),
                    Some(next),
                    "resent with the same id"
                );
                assert_eq!(
                    backend.stats().duplicates_resolved - dups,
                    u64::from(ran),
                    "recognised iff it ran"
                );
                next += 1;
            }
            (mode, other) => panic!("{mode:?}: unexpected {other:?}"),
        }
    }
    assert_eq!(unknown, 12, "6 lost replies + 6 lost requests");
    let expected: Vec<(u64, Vec<u8>)> = (1..=30)
        .map(|i| (i, format!("e{i}").into_bytes()))
        .collect();
    assert_eq!(server.log_entries(&stream), expected);
    let stats = backend.stats();
    assert!(
        ran_count >= 5,
        "lost replies of commands that ran: {ran_count}"
    );
    assert_eq!(
        stats.duplicates_resolved, ran_count,
        "each one recognised, not rewritten"
    );
    assert_eq!(stats.unknown_outcomes, 12);
}

/// Retries `call` while it fails with `Unavailable` (the connection manager reconnecting after a
/// drop), for up to 10 s.
async fn until_reconnected<T, F, Fut>(mut call: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, Error>>,
{
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match call().await {
            Err(Error::Unavailable(_)) if std::time::Instant::now() < deadline => {
                tokio::task::yield_now().await
            }
            other => return other,
        }
    }
}

/// An acquisition whose reply was lost after Redis granted the lease (a stall past the response
/// timeout, a dropped connection) is recognised when the same handle asks again: it gets that
/// lease, the same token, instead of finding it held by nobody until it expires. Any other handle
/// still finds it held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquisition_whose_reply_was_lost_gets_its_lease_on_the_next_call() {
    let server = RedisServer::start();
    let (proxy, backend) = backend_through(&server).await;
    // Cache the script first, so that the reply lost below is the script's, not a NOSCRIPT.
    let warm = backend.create(&sid("warm"), 8).await.unwrap();
    warm.acquire_producer()
        .await
        .unwrap()
        .release_lease()
        .await
        .unwrap();
    let stream = backend.create(&sid("lost-grant"), 64).await.unwrap();
    proxy.set(Mode::LoseReply);
    let lost = stream.acquire_producer().await;
    proxy.set(Mode::Pass);
    assert!(matches!(lost, Err(Error::Unavailable(_))), "{lost:?}");
    assert_eq!(
        stream.state().await.unwrap().fence,
        1,
        "token 1 was granted"
    );
    let other = backend.open(&sid("lost-grant")).await.unwrap();
    let refused = until_reconnected(|| other.acquire_producer()).await;
    assert!(
        matches!(refused, Err(Error::LeaseHeld { holder: 1, .. })),
        "{refused:?}"
    );
    let mut producer = until_reconnected(|| stream.acquire_producer())
        .await
        .unwrap();
    assert_eq!(producer.fencing_token(), 1);
    assert_eq!(producer.append(b"e1").await.unwrap(), 1);
    assert_eq!(stream.state().await.unwrap().fence, 1, "no token besides 1");
    // Its outcome known, the claim is spent: asking again is a second acquisition, refused.
    let again = stream.acquire_producer().await;
    assert!(
        matches!(again, Err(Error::LeaseHeld { holder: 1, .. })),
        "{again:?}"
    );
}

/// The stream's fencing counter, straight from Redis.
fn fence(server: &RedisServer, stream: &RedisStream) -> u64 {
    redis::cmd("HGET")
        .arg(stream.key_names()[0])
        .arg("fence")
        .query(&mut server.raw())
        .unwrap()
}

/// Polls `future` once: its command goes out on the connection.
async fn poll_once<F: std::future::Future>(future: &mut std::pin::Pin<Box<F>>) -> bool {
    std::future::poll_fn(|cx| std::task::Poll::Ready(future.as_mut().poll(cx).is_pending())).await
}

/// Two acquisitions on clones of one handle, both cancelled after the first was granted the lease:
/// the handle's next acquisition still gets that lease, whichever was dropped last (acquisitions of
/// one handle take turns, so only the granted one's claim can be left).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_acquisitions_on_clones_leave_the_granted_claim() {
    let server = RedisServer::start();
    let backend = server.backend().await;
    let stream = backend.create(&sid("two-cancelled"), 8).await.unwrap();
    // Warms the connection and the script cache (token 1, given back).
    let warm = stream.acquire_producer().await.unwrap();
    warm.release_lease().await.unwrap();
    let clone = stream.clone();
    let mut granted = Box::pin(stream.acquire_producer());
    let mut other = Box::pin(clone.acquire_producer());
    assert!(poll_once(&mut granted).await);
    assert!(poll_once(&mut other).await);
    common::eventually(Duration::from_secs(10), "the grant", || {
        std::future::ready(fence(&server, &stream) == 2)
    })
    .await;
    drop(granted);
    drop(other);
    let next = stream.acquire_producer().await.unwrap();
    assert_eq!(next.fencing_token(), 2);
}

/// A claim left by a cancelled acquisition matches only the token granted under it: once that
/// lease lapsed and a grant that records no claim (a replica still on an earlier release, during a
/// rolling deploy) took token 2, the stale claim is refused, not handed token 2 as well.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_claim_is_not_handed_a_later_grant() {
    let server = RedisServer::start();
    let config = RedisConfig {
        lease: Duration::from_millis(300),
        ..RedisConfig::default()
    };
    let backend = server.backend_with(config).await;
    let stream = backend.create(&sid("rolling"), 8).await.unwrap();
    // Caches the script with a grant on another stream, so that the one below runs at once.
    let warm = backend.create(&sid("warm"), 8).await.unwrap();
    warm.acquire_producer().await.unwrap();
    let mut lost = Box::pin(stream.acquire_producer());
    assert!(poll_once(&mut lost).await);
    common::eventually(Duration::from_secs(10), "the grant", || {
        std::future::ready(fence(&server, &stream) == 1)
    })
    .await;
    drop(lost);
    lease_expired(&server, &stream).await;
    // What an earlier release's ACQUIRE does: a fresh token and the lease, no claim.
    let keys = stream.key_names();
    let mut raw = server.raw();
    let token: u64 = redis::cmd("HINCRBY")
        .arg(keys[0])
        .arg("fence")
        .arg(1)
        .query(&mut raw)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg(keys[3])
        .arg(token)
        .arg("PX")
        .arg(60_000)
        .query(&mut raw)
        .unwrap();
    assert_eq!(token, 2);
    let ours = stream.acquire_producer().await;
    assert!(
        matches!(ours, Err(Error::LeaseHeld { holder: 2, .. })),
        "{:?}",
        ours.map(|p| p.fencing_token())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_whose_reply_was_lost_is_resent_as_a_whole_once() {
    let server = RedisServer::start();
    let proxy = CutProxy::start(server.port).await;
    let backend = replay_ring_redis::RedisBackend::connect(&proxy.url(), RedisConfig::default())
        .await
        .unwrap();
    let stream = backend.create(&sid("batch-retry"), 64).await.unwrap();
    let mut p = stream.acquire_producer().await.unwrap();
    assert_eq!(p.append(b"e1").await.unwrap(), 1); // loads the script
    proxy.set(Mode::LoseReply);
    assert!(matches!(
        p.append_batch(&[b"e2", b"e3", b"e4"]).await,
        Err(Error::Unknown { id: 2, .. })
    ));
    proxy.set(Mode::Pass);
    assert_eq!(
        server.log_entries(&stream).len(),
        4,
        "the batch ran; only its reply was lost"
    );
    assert_eq!(resolve(&mut p).await.unwrap(), Some(4));
    assert_eq!(p.append(b"e5").await.unwrap(), 5);
    let expected: Vec<(u64, Vec<u8>)> =
        (1..=5).map(|i| (i, format!("e{i}").into_bytes())).collect();
    assert_eq!(server.log_entries(&stream), expected);
    assert_eq!(backend.stats().duplicates_resolved, 1);
}

/// The lease lapses between an append Redis ran and the resend of it (its reply was lost): the
/// resend is answered "fenced", yet the event is stored. The append is `Unknown`, not `Fenced`
/// ("nothing of it was stored"), so nobody publishes it again under another id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_lost_under_a_lost_reply_leaves_the_append_unknown() {
    let server = RedisServer::start();
    let (proxy, backend) = backend_through(&server).await;
    let stream = backend.create(&sid("lapsed"), 64).await.unwrap();
    let mut p = stream.acquire_producer().await.unwrap();
    assert_eq!(p.append(b"e1").await.unwrap(), 1);
    let (url, lease) = (server.url(), stream.key_names()[3].to_owned());
    proxy.on_lost_reply(move || {
        let mut raw = redis::Client::open(url).unwrap().get_connection().unwrap();
        let _: () = redis::cmd("DEL").arg(lease).query(&mut raw).unwrap();
    });
    proxy.set(Mode::LoseOneReply);
    let lost = p.append(b"e2").await;
    assert!(
        matches!(lost, Err(Error::Unknown { id: 2, .. })),
        "{lost:?}"
    );
    // Resent without a cut-off, it is refused for what it is; the event is in the log once.
    assert!(matches!(
        p.resolve_pending().await,
        Err(Error::Fenced { .. })
    ));
    let expected: Vec<(u64, Vec<u8>)> =
        (1..=2).map(|i| (i, format!("e{i}").into_bytes())).collect();
    assert_eq!(server.log_entries(&stream), expected);
}

/// A close whose reply was lost landed, and gave the lease up: its resend finds no holder. The
/// close reports success, not `Fenced`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_whose_reply_was_lost_is_confirmed() {
    let server = RedisServer::start();
    let (proxy, backend) = backend_through(&server).await;
    // Loads the close script, so that the reply lost below is the close's own.
    let warm = backend.create(&sid("warm"), 64).await.unwrap();
    let warm = warm.acquire_producer().await.unwrap();
    warm.close(CloseReason::Completed).await.unwrap();
    let stream = backend.create(&sid("closing"), 64).await.unwrap();
    let mut p = stream.acquire_producer().await.unwrap();
    assert_eq!(p.append(b"e1").await.unwrap(), 1);
    let reason = CloseReason::error("bye");
    proxy.set(Mode::LoseOneReply);
    p.close(reason.clone()).await.unwrap();
    assert_eq!(stream.state().await.unwrap().closed, Some(reason));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resend_with_another_payload_is_a_conflict() {
    let server = RedisServer::start();
    let proxy = CutProxy::start(server.port).await;
    let backend = replay_ring_redis::RedisBackend::connect(&proxy.url(), RedisConfig::default())
        .await
        .unwrap();
    let stream = backend.create(&sid("conflict"), 8).await.unwrap();
    let mut p = stream.acquire_producer().await.unwrap();
    assert_eq!(p.append(b"first").await.unwrap(), 1);
    proxy.set(Mode::LoseReply);
    assert!(matches!(
        p.append(b"original").await,
        Err(Error::Unknown { id: 2, .. })
    ));
    proxy.set(Mode::Pass);
    assert_eq!(
        server.log_entries(&stream).len(),
        2,
        "the append ran; only its reply was lost"
    );
    // Someone rewrites entry 2 behind our back: the resend must not pass it off as its own.
    let mut raw = server.raw();
    let log_key = stream.key_names()[1];
    let _: () = redis::cmd("DEL").arg(log_key).query(&mut raw).unwrap();
    for (id, data) in [("0-1", "first"), ("0-2", "other")] {
        let _: String = redis::cmd("XADD")
            .arg(log_key)
            .arg(id)
            .arg("d")
            .arg(data)
            .query(&mut raw)
            .unwrap();
    }
    assert!(matches!(
        resolve(&mut p).await,
        Err(Error::Conflict { id: 2 })
    ));
    assert!(p.has_pending(), "still unresolved");
    let mut reader = stream.resume(Some(1)).await.unwrap();
    assert_eq!(
        reader.recv().await.unwrap(),
        ReadItem::Events(vec![(2, Bytes::from_static(b"other"))])
    );
}

/// Every event and then the close reason a reader from 0 gets.
async fn read_to_close(stream: &RedisStream) -> (Vec<(u64, Bytes)>, CloseReason) {
    let mut reader = stream.resume(Some(0)).await.unwrap();
    let mut events = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(10), reader.recv())
            .await
            .expect("the reader ends with the close")
            .unwrap()
        {
            ReadItem::Events(batch) => events.extend(batch),
            ReadItem::Closed(reason) => return (events, reason),
        }
    }
}

/// A close whose pending resend finds the window full goes ahead: the script answers `DUP` for
/// an event that was written, so a `FULL` answer means the event never was (it has no id), and
/// readers get every stored event, then exactly the reason given (to the nanosecond).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_goes_ahead_when_the_full_window_refuses_the_pending_event() {
    let server = RedisServer::start();
    let (proxy, backend) = backend_through(&server).await;
    let stream = backend.create(&sid("close-full"), 2).await.unwrap();
    let mut p = stream.acquire_producer().await.unwrap();
    p.append(b"e1").await.unwrap();
    p.append(b"e2").await.unwrap();
    proxy.set(Mode::LoseReply);
    let lost = p.append(b"e3").await;
    proxy.set(Mode::Pass);
    assert!(
        matches!(lost, Err(Error::Unknown { id: 3, .. })),
        "{lost:?}"
    );
    assert!(
        matches!(resolve(&mut p).await, Err(Error::Full { .. })),
        "the window is still full"
    );
    assert!(p.has_pending(), "an append keeps it for the next call");

    let reason = CloseReason::BackpressureTimeout {
        waited: Duration::from_nanos(1_500_001),
    };
    p.close(reason.clone()).await.unwrap();
    let (events, got) = read_to_close(&stream).await;
    assert_eq!(
        events,
        vec![
            (1, Bytes::from_static(b"e1")),
            (2, Bytes::from_static(b"e2"))
        ]
    );
    assert_eq!(got, reason);
    let state = stream.state().await.unwrap();
    assert_eq!((state.head, state.closed), (2, Some(reason)));
    assert_eq!(
        server.log_entries(&stream).len(),
        2,
        "event 3 was never written"
    );
}

/// A producer whose lease moved while it was paused, and whose successor has since appended and
/// released past its next id, is told it was superseded by the SSE layer's producer interface
/// (with its closure handed back), and its wait returns at once; nothing is written for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_producer_behind_the_floor_is_superseded_through_the_trait() {
    use replay_ring_sse::backend::{AppendError, BackendProducer};
    let server = RedisServer::start();
    let config = RedisConfig {
        lease: Duration::from_millis(300),
        ..RedisConfig::default()
    };
    let backend = server.backend_with(config).await;
    let stream = backend.create(&sid("stale"), 2).await.unwrap();
    let mut stale = stream.acquire_producer().await.unwrap();
    stale.append(b"a1").await.unwrap();
    stale.append(b"a2").await.unwrap(); // full, as far as this producer knows
    lease_expired(&server, &stream).await;
    let mut next = stream.acquire_producer().await.unwrap();
    for id in 3..=10 {
        stream.release_through(id - 1).await.unwrap();
        assert_eq!(next.append(b"b").await.unwrap(), id);
    }
    stream.release_through(9).await.unwrap(); // floor 10, past the stale producer's id 3

    tokio::time::timeout(Duration::from_secs(5), BackendProducer::ready(&mut stale))
        .await
        .expect("no wait for room that cannot come")
        .unwrap();
    match BackendProducer::try_append_with(&mut stale, |id| Bytes::from(format!("s{id}"))).await {
        Err(AppendError::Superseded(Some(make))) => assert_eq!(make(7), "s7"),
        other => panic!(
            "expected Superseded with the closure, got {:?}",
            other.map_err(|e| e.to_string())
        ),
    }
    assert_eq!(stream.state().await.unwrap().head, 10, "nothing written");
}

/// `append_wait` with `Duration::MAX` waits without a deadline: it appends at once when there
/// is room, and otherwise until a release makes some.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn append_wait_without_a_deadline_waits_for_the_release() {
    let server = RedisServer::start();
    let backend = server.backend().await;
    let stream = backend.create(&sid("forever"), 1).await.unwrap();
    let mut p = stream.acquire_producer().await.unwrap();
    assert_eq!(p.append_wait(b"e1", Duration::MAX).await.unwrap(), 1);
    let waiting = tokio::spawn(async move { p.append_wait(b"e2", Duration::MAX).await });
    stream.release_through(1).await.unwrap();
    let id = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("woken by the release")
        .unwrap()
        .unwrap();
    assert_eq!(id, 2);
}

/// Acquiring the producer of a closed stream is refused with the stored reason, and the lease
/// and the fencing counter are left as they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquiring_a_closed_stream_leaves_the_lease_alone() {
    let server = RedisServer::start();
    let backend = server.backend().await;
    let stream = backend.create(&sid("closed"), 8).await.unwrap();
    let mut p = stream.acquire_producer().await.unwrap();
    p.append(b"e1").await.unwrap();
    p.close(CloseReason::Completed).await.unwrap();
    let fence = stream.state().await.unwrap().fence;
    for _ in 0..3 {
        assert!(matches!(
            stream.acquire_producer().await,
            Err(Error::Closed(CloseReason::Completed))
        ));
    }
    assert_eq!(
        stream.state().await.unwrap().fence,
        fence,
        "no token used up"
    );
    let lease: Option<String> = redis::cmd("GET")
        .arg(stream.key_names()[3])
        .query(&mut server.raw())
        .unwrap();
    assert_eq!(lease, None, "no lease taken");
}
