//! The axum endpoint over a second backend, over real HTTP: a backend type defined here that
//! reaches its window only through the backend traits (it wraps a ring and calls nothing but
//! `Backend`, `BackendProducer` and `Tail` methods on it), so the endpoint provably depends on
//! the contract and not on the ring. The backend can be switched "down" to answer every call with
//! `Unavailable`, as a network store does when it cannot be reached, and can release events right
//! after a resume opened its tail, as another connection's release may land.

mod common;

use std::mem::ManuallyDrop;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use common::{get as http_get, Stream};
use replay_ring::{CloseReason, Producer, Reader, ReplayRing};
use replay_ring_sse::axum::{
    backend_events, serve, ServeConfig, SseConfig, SseProducer, SseStream,
};
use replay_ring_sse::backend::{
    AppendError, Backend, BackendProducer, Counters, OpenError, ReleaseError, Tail, TailError,
    Unavailable, Window,
};
use replay_ring_sse::{Epoch, PublishError, RetentionConfig, StreamId, StreamIdentity};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// A backend that is not the ring as far as the endpoint can tell.
#[derive(Clone, Debug)]
struct ViaTraits {
    ring: ReplayRing<Bytes>,
    down: Arc<watch::Sender<bool>>,
    /// When non-zero, each resume releases through this id right after opening its tail.
    release_after_resume: Arc<AtomicU64>,
}

struct ViaProducer {
    inner: Producer<Bytes>,
    down: Arc<watch::Sender<bool>>,
    release_after_resume: Arc<AtomicU64>,
    /// Each close lands, but its reply is lost: the caller gets `Unavailable`.
    close_reply_lost: bool,
    /// The next append lands, but its reply is lost: the caller gets `Unavailable` with the
    /// closure consumed (the outcome unknown), as from a network store.
    append_reply_lost: Arc<AtomicBool>,
}

impl ViaProducer {
    /// The ring's producer behind the traits, with its switch (up) and no release after resumes.
    fn new(inner: Producer<Bytes>) -> (ViaProducer, Arc<watch::Sender<bool>>) {
        let down = Arc::new(watch::Sender::new(false));
        let producer = ViaProducer {
            inner,
            down: down.clone(),
            release_after_resume: Arc::default(),
            close_reply_lost: false,
            append_reply_lost: Arc::default(),
        };
        (producer, down)
    }
}

/// The stream identity every test here uses.
fn identity() -> StreamIdentity {
    StreamIdentity::new(StreamId::new("events").unwrap(), Epoch::new(0xabc))
}

struct ViaTail {
    inner: Reader<Bytes>,
    down: Arc<watch::Sender<bool>>,
}

/// The defaults, with a backpressure bound of `timeout` and a resumption window long enough that
/// no event expires during a test.
fn bounded_by(timeout: Duration) -> SseConfig {
    SseConfig {
        retention: RetentionConfig {
            resumption_window: Duration::from_secs(60),
            backpressure_timeout: timeout,
        },
        ..SseConfig::default()
    }
}

fn unreachable_store() -> Unavailable {
    Unavailable::new("store unreachable (test switch)")
}

impl ViaTraits {
    fn is_down(&self) -> bool {
        *self.down.borrow()
    }
}

impl Backend for ViaTraits {
    type Payload = Bytes;
    type Producer = ViaProducer;
    type Tail = ViaTail;

    fn capacity(&self) -> usize {
        Backend::capacity(&self.ring)
    }

    fn max_readers(&self) -> usize {
        Backend::max_readers(&self.ring)
    }

    async fn window(&self) -> Result<Window, Unavailable> {
        if self.is_down() {
            return Err(unreachable_store());
        }
        Backend::window(&self.ring).await
    }

    async fn release_through(&self, id: u64) -> Result<u64, ReleaseError> {
        if self.is_down() {
            return Err(ReleaseError::Unavailable(unreachable_store()));
        }
        Backend::release_through(&self.ring, id).await
    }

    async fn resume(&self, last_event_id: Option<u64>) -> Result<ViaTail, OpenError> {
        if self.is_down() {
            return Err(OpenError::Unavailable(unreachable_store()));
        }
        let inner = Backend::resume(&self.ring, last_event_id).await?;
        // Relaxed: a test knob set before the request; nothing else is published through it.
        let through = self.release_after_resume.load(Ordering::Relaxed);
        if through > 0 {
            Backend::release_through(&self.ring, through).await.unwrap();
        }
        Ok(ViaTail {
            inner,
            down: self.down.clone(),
        })
    }

    async fn close_reason(&self) -> Result<Option<CloseReason>, Unavailable> {
        Backend::close_reason(&self.ring).await
    }

    async fn counters(&self) -> Result<Counters, Unavailable> {
        Backend::counters(&self.ring).await
    }
}

impl BackendProducer for ViaProducer {
    type Backend = ViaTraits;

    fn backend(&self) -> ViaTraits {
        ViaTraits {
            ring: BackendProducer::backend(&self.inner),
            down: self.down.clone(),
            release_after_resume: self.release_after_resume.clone(),
        }
    }

    async fn try_append_with<F>(&mut self, make: F) -> Result<u64, AppendError<F>>
    where
        F: FnOnce(u64) -> Bytes + Send,
    {
        let appended = BackendProducer::try_append_with(&mut self.inner, make).await;
        // Relaxed: a one-shot switch the test sets before the publish that reads it.
        if appended.is_ok() && self.append_reply_lost.swap(false, Ordering::Relaxed) {
            return Err(AppendError::Unavailable {
                make: None,
                error: unreachable_store(),
            });
        }
        appended
    }

    async fn ready(&mut self) -> Result<(), Unavailable> {
        BackendProducer::ready(&mut self.inner).await
    }

    /// While the switch is down, a close is held back until it goes up again and then fails,
    /// as a request to an unreachable store whose reply never came (the close did not land).
    async fn close(self, reason: CloseReason) -> Result<(), Unavailable> {
        // Not dropped if the close is cancelled or fails: dropping a ring's producer closes the
        // ring, while a network store's stream stays open when its producer goes away.
        let inner = ManuallyDrop::new(self.inner);
        if *self.down.borrow() {
            let _ = self.down.subscribe().wait_for(|down| !*down).await;
            return Err(unreachable_store());
        }
        let lose_reply = self.close_reply_lost;
        BackendProducer::close(ManuallyDrop::into_inner(inner), reason).await?;
        if lose_reply {
            return Err(unreachable_store());
        }
        Ok(())
    }
}

impl Tail for ViaTail {
    type Payload = Bytes;

    fn cursor(&self) -> u64 {
        Tail::cursor(&self.inner)
    }

    async fn next_batch(&mut self, out: &mut Vec<(u64, Bytes)>) -> Result<usize, TailError> {
        let mut down = self.down.subscribe();
        tokio::select! {
            // Checked first: once the switch is down, no read reaches the store.
            biased;
            _ = down.wait_for(|down| *down) => Err(TailError::Unavailable(unreachable_store())),
            read = Tail::next_batch(&mut self.inner, out) => read,
        }
    }
}

async fn start() -> (
    SocketAddr,
    SseStream<ViaTraits>,
    SseProducer<ViaTraits>,
    Arc<watch::Sender<bool>>,
) {
    let (inner, _ring) = ReplayRing::<Bytes>::new(8, 4).unwrap();
    let (producer, down) = ViaProducer::new(inner);
    let me = identity();
    let config = SseConfig {
        acknowledge_on_resume: true,
        ..SseConfig::default()
    };
    let (stream, producer) = SseStream::with_backend(producer, me, config);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new().route(
        "/events",
        get(backend_events::<ViaTraits>).with_state(stream.clone()),
    );
    tokio::spawn(serve(listener, app, ServeConfig::default()));
    (addr, stream, producer, down)
}

/// The event frames' sequence numbers (a terminal frame is read with `read_until`: the HTTP/1.1
/// connection stays open after the response ends).
fn event_seqs(reply: &common::Reply) -> Vec<u64> {
    reply
        .frames()
        .iter()
        .filter_map(|f| f.event_seq())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_on_a_second_backend_is_exact_and_refusals_are_typed() {
    let (addr, stream, mut producer, _down) = start().await;
    for n in 1..=5 {
        assert_eq!(producer.send(format!("{{\"n\":{n}}}")).await.unwrap(), n);
    }

    // Resume after 3: exactly 4 and 5, and ids <= 3 are acknowledged (released).
    let mut resumed =
        Stream::open(addr, "/events", &[("Last-Event-ID", "events.abc.3")], None).await;
    let reply = resumed.read_until(|r| event_seqs(r).len() >= 2).await;
    assert_eq!(reply.status, 200);
    assert_eq!(
        reply.header("replay-floor"),
        Some("4"),
        "the resume acknowledged 1..=3"
    );
    assert_eq!(reply.header("replay-head"), Some("5"));
    let frames = reply.frames();
    assert_eq!(frames[0].seq(), Some(3), "priming repeats the cursor");
    assert_eq!(event_seqs(&reply), [4, 5]);
    assert_eq!(frames[1].data.as_deref(), Some(r#"{"n":4}"#));
    drop(resumed);

    // Below the floor: 416 with the lost range; ahead of the head: 409.
    let gap = http_get(addr, "/events", &[("Last-Event-ID", "events.abc.1")]).await;
    assert_eq!(gap.status, 416);
    assert!(
        gap.text().starts_with(r#"{"error":"replay_gap""#),
        "{}",
        gap.text()
    );
    assert!(gap.text().contains(r#""floor":4"#), "{}", gap.text());
    let ahead = http_get(addr, "/events", &[("Last-Event-ID", "events.abc.9")]).await;
    assert_eq!(ahead.status, 409);
    assert!(ahead.text().contains(r#""error":"cursor_ahead_of_head""#));

    // At the head: a no-op that continues live, then the explicit end.
    let mut live = Stream::open(addr, "/events", &[("Last-Event-ID", "events.abc.5")], None).await;
    let reply = live.read_until(|r| !r.frames().is_empty()).await;
    assert_eq!(reply.status, 200);
    producer.send("six").await.unwrap();
    producer.close(CloseReason::Completed).await.unwrap();
    let reply = live
        .read_until(|r| r.frames().iter().any(|f| f.event.is_some()))
        .await;
    assert_eq!(event_seqs(&reply), [6]);
    assert_eq!(reply.frames().last().unwrap().event.as_deref(), Some("end"));

    let stats = stream.stats();
    assert_eq!(
        (stats.streams_opened, stats.refused_416, stats.refused_409),
        (2, 1, 1)
    );
    assert_eq!(stats.frames_written, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_backend_is_a_503_before_the_stream_and_an_explicit_frame_after() {
    let (addr, stream, mut producer, down) = start().await;
    let mut open = Stream::open(addr, "/events", &[], None).await;
    // The priming event first: the live stream then starts before event 1.
    open.read_until(|r| !r.frames().is_empty()).await;
    producer.send("one").await.unwrap();
    let reply = open.read_until(|r| event_seqs(r) == [1]).await;
    assert_eq!(reply.status, 200);

    // The store goes away mid-stream: the response ends with an explicit error frame (no id, so
    // the client's cursor stays on 1), never silently.
    down.send_replace(true);
    let reply = open
        .read_until(|r| r.frames().iter().any(|f| f.event.is_some()))
        .await;
    assert_eq!(event_seqs(&reply), [1]);
    let last = reply.frames().last().unwrap().clone();
    assert_eq!(last.event.as_deref(), Some("stream-error"));
    assert!(last.id.is_none());
    assert!(
        last.data
            .as_deref()
            .unwrap()
            .contains(r#""error":"backend_unavailable""#),
        "{last:?}"
    );
    assert_eq!(stream.stats().backend_unavailable_frames, 1);

    // A new request while it is away: 503 with a JSON reason and Retry-After, no stream.
    let refused = http_get(addr, "/events", &[("Last-Event-ID", "events.abc.1")]).await;
    assert_eq!(refused.status, 503);
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert!(
        refused
            .text()
            .starts_with(r#"{"error":"backend_unavailable""#),
        "{}",
        refused.text()
    );

    // A `HEAD` too: it cannot read the window, and is then answered as the `GET` is.
    let head = common::head(addr, "/events", &[("Last-Event-ID", "events.abc.1")]).await;
    assert_eq!(head.status, 503);
    assert_eq!(head.header("retry-after"), Some("1"));

    // Back: the client resumes from its cursor and gets exactly what followed.
    down.send_replace(false);
    producer.send("two").await.unwrap();
    let mut again = Stream::open(addr, "/events", &[("Last-Event-ID", "events.abc.1")], None).await;
    let reply = again.read_until(|r| !event_seqs(r).is_empty()).await;
    assert_eq!(reply.status, 200);
    assert_eq!(event_seqs(&reply), [2]);
    assert_eq!(stream.stats().refused_503, 2);
}

/// A stream nobody follows here: over the ring, which serves every reader in this process, the
/// endpoint releases everything once nobody has been connected for a window and the producer goes
/// on; over a backend that other processes may read too (the default of `readers_are_local`),
/// it releases nothing for want of connections here, and the producer ends explicitly at the
/// bound.
#[tokio::test(start_paused = true)]
async fn only_a_backend_whose_readers_are_all_local_releases_a_vacant_window() {
    let config = SseConfig {
        capacity: 2,
        retention: RetentionConfig {
            resumption_window: Duration::from_secs(1),
            backpressure_timeout: Duration::from_secs(3),
        },
        ..SseConfig::default()
    };
    let me = identity();

    let (_ring_stream, mut on_ring) = SseStream::new(me, config).unwrap();
    for expected in 1..=6 {
        assert_eq!(on_ring.send("x").await.unwrap(), expected);
    }

    let (inner, _ring) = ReplayRing::<Bytes>::builder()
        .capacity(2)
        .max_readers(4)
        .build()
        .unwrap();
    let (producer, _down) = ViaProducer::new(inner);
    let (_shared_stream, mut shared) = SseStream::with_backend(producer, me, config);
    for expected in 1..=2 {
        assert_eq!(shared.send("x").await.unwrap(), expected);
    }
    match shared.send("x").await {
        Err(PublishError::BackpressureTimeout { waited }) => {
            assert_eq!(waited, Duration::from_secs(3))
        }
        other => panic!("expected the bound, got {other:?}"),
    }
}

/// A release that lands between a resume opening its tail and the response's window snapshot
/// (another connection's, or the resumption window's) does not show in the 200's headers as a
/// floor above the cursor, which a client checking `Replay-Floor <= cursor + 1` would take for a
/// failed resume: the headers state the window the resume was decided on, and the body replays
/// from `cursor + 1` (the tail was open before the release).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_racing_a_resume_does_not_raise_its_advertised_floor() {
    let (inner, _ring) = ReplayRing::<Bytes>::new(16, 4).unwrap();
    let release_after_resume = Arc::new(AtomicU64::new(0));
    let producer = ViaProducer {
        inner,
        down: Arc::new(watch::Sender::new(false)),
        release_after_resume: release_after_resume.clone(),
        close_reply_lost: false,
        append_reply_lost: Arc::default(),
    };
    let me = identity();
    let (stream, mut producer) = SseStream::with_backend(producer, me, SseConfig::default());
    for n in 1..=10 {
        assert_eq!(producer.send(format!("e{n}")).await.unwrap(), n);
    }
    // Relaxed: see `ViaTraits::release_after_resume`.
    release_after_resume.store(8, Ordering::Relaxed);
    let mut headers = axum::http::HeaderMap::new();
    headers.insert("last-event-id", "events.abc.3".parse().unwrap());
    let response = stream.respond_async(&headers).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["replay-floor"], "4");
    assert_eq!(response.headers()["replay-head"], "10");
    assert_eq!(Backend::window(stream.backend()).await.unwrap().floor, 9);
    let mut body = response.into_body().into_data_stream();
    let mut text = String::new();
    while !text.contains("data: e10\n") {
        let chunk = tokio::time::timeout(
            Duration::from_secs(5),
            futures_util::StreamExt::next(&mut body),
        )
        .await
        .expect("the replay comes at once")
        .unwrap()
        .unwrap();
        text.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    let first = text.find("data: e").unwrap();
    assert!(text[first..].starts_with("data: e4\n"), "{text}");
}

/// A publish cancelled while the close it had to make (past the backpressure bound) is in flight
/// leaves the publisher without a producer and without knowing whether the close landed. The
/// close did not land, so it must not claim the stream ended: later publishes say it gave the
/// stream up, so that the caller hands the stream on instead of treating it as over.
#[tokio::test]
async fn a_publish_cancelled_during_its_backpressure_close_claims_no_end() {
    let (inner, _ring) = ReplayRing::<Bytes>::new(4, 1).unwrap();
    let (producer, down) = ViaProducer::new(inner);
    let me = identity();
    let config = bounded_by(Duration::from_millis(200));
    let (_stream, mut producer) = SseStream::with_backend(producer, me, config);
    for n in 1..=4 {
        assert_eq!(producer.send(format!("e{n}")).await.unwrap(), n);
    }
    down.send_replace(true);
    let cancelled = tokio::time::timeout(Duration::from_secs(1), producer.send("e5")).await;
    assert!(cancelled.is_err(), "the close is held back: {cancelled:?}");
    down.send_replace(false);
    let after = producer.send("e5").await.unwrap_err();
    assert!(matches!(after, PublishError::Superseded), "{after:?}");
    // Nor can it close the stream any more.
    let close = producer.close(CloseReason::Completed).await;
    assert!(matches!(close, Err(PublishError::Superseded)), "{close:?}");
}

/// A close whose reply is lost did land: the publish that had to make it (past the backpressure
/// bound) says the stream ended, and so does every later publish, instead of claiming that the
/// stream, closed for good, goes on with another producer.
#[tokio::test]
async fn a_backpressure_close_whose_reply_is_lost_is_found_to_have_landed() {
    let (inner, ring) = ReplayRing::<Bytes>::new(4, 1).unwrap();
    let (mut producer, _down) = ViaProducer::new(inner);
    producer.close_reply_lost = true;
    let config = bounded_by(Duration::from_millis(200));
    let (_stream, mut producer) = SseStream::with_backend(producer, identity(), config);
    for n in 1..=4 {
        assert_eq!(producer.send(format!("e{n}")).await.unwrap(), n);
    }
    let ended = producer.send("e5").await.unwrap_err();
    assert!(
        matches!(ended, PublishError::BackpressureTimeout { .. }),
        "{ended:?}"
    );
    assert!(matches!(
        ring.close_reason(),
        Some(CloseReason::BackpressureTimeout { .. })
    ));
    let after = producer.send("e6").await.unwrap_err();
    assert!(
        matches!(
            after,
            PublishError::Closed(Some(CloseReason::BackpressureTimeout { .. }))
        ),
        "{after:?}"
    );
}

/// An append whose reply was lost (`Unconfirmed`) had room, so it ends the backpressure wait it
/// came after: the next publish that finds the window full waits the whole bound again, instead of
/// the remainder of the earlier wait.
#[tokio::test(start_paused = true)]
async fn an_unconfirmed_publish_ends_the_backpressure_wait_it_came_after() {
    let (producer, ring) = ReplayRing::<Bytes>::new(1, 1).unwrap();
    let (producer, _down) = ViaProducer::new(producer);
    let lose_reply = producer.append_reply_lost.clone();
    let config = bounded_by(Duration::from_secs(2));
    let (_stream, mut publisher) = SseStream::with_backend(producer, identity(), config);
    assert_eq!(publisher.send("e1").await.unwrap(), 1);

    // e2 waits for room; 1.9 s into the wait id 1 is released, and e2's reply is lost.
    // Relaxed: read by the publish below, on this task.
    lose_reply.store(true, Ordering::Relaxed);
    let release = |id: u64, after: Duration| {
        let ring = ring.clone();
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            ring.release_through(id).unwrap();
        })
    };
    let releasing = release(1, Duration::from_millis(1900));
    let lost = publisher.send("e2").await.unwrap_err();
    assert!(
        matches!(lost, PublishError::Unconfirmed { id: 2, .. }),
        "{lost:?}"
    );
    releasing.await.unwrap();

    // e3 waits again, and gets room after 1 s: within its own bound, past the first wait's.
    let releasing = release(2, Duration::from_secs(1));
    assert_eq!(publisher.send("e3").await.unwrap(), 3);
    releasing.await.unwrap();
}
