//! `--redis`: the stream in Redis Streams, shared by replicas. Every replica serves it; unless
//! `--serve-only` it also produces into it, or stands by while another replica holds the producer
//! lease and takes over once that lease is given back or lapses. A replica told to stop gives its
//! lease back, so that a standby takes over at once.
//!
//! A replica follows the stream from incarnation to incarnation. When the stream is lost from
//! Redis (deleted, expired, lost in a restart without persistence, or its log rolled back behind
//! ids this replica saw: `Error::LogRolledBack`), it creates the stream again, with a new epoch,
//! or opens the incarnation another replica created first, and serves that one from then on.
//! Clients holding ids of the old incarnation get `404 stream_lost` and start over; nobody is
//! handed an id again with another event.

use std::future::Future;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::extract::Request;
use axum::Router;
use replay_ring_redis::{Error, RedisBackend, RedisConfig, RedisProducer, RedisStream};
use replay_ring_sse::axum::SseStream;
use replay_ring_sse::{PublishError, StreamId};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tower::ServiceExt;

use crate::{app, app_router, produce, stopped, DemoArgs};

/// How long a standby waits before it tries again after Redis failed it, and how often a replica
/// checks that the incarnation it serves still exists.
const RETRY: Duration = Duration::from_secs(1);

/// Connects to Redis at `url`, opens (or creates) the stream and starts following it on a task of
/// its own, until `stop` says `true` (the task then gives the producer lease back and ends).
/// Returns the router that serves the stream's current incarnation, the task, and the window
/// capacity of the stream as it was opened (an existing stream keeps its own, whatever
/// `--capacity` says). Fails only if the first incarnation cannot be set up (Redis unreachable
/// at start-up, say).
pub(crate) async fn start(
    args: &DemoArgs,
    url: &str,
    stop: watch::Receiver<bool>,
) -> Result<(Router, JoinHandle<()>, u64), Error> {
    let mut config = RedisConfig::default();
    if let Some(ms) = args.lease_ms {
        config.lease = Duration::from_millis(ms);
    }
    let backend = RedisBackend::connect(url, config).await?;
    let first = Incarnation::open(&backend, args, true).await?;
    let capacity = first.stream.window_capacity();
    let current = Arc::new(RwLock::new(first.router()));
    let following = tokio::spawn(follow(backend, first, current.clone(), args.clone(), stop));
    let router = Router::new().fallback_service(tower::service_fn(move |request: Request| {
        // A request is served whole by the incarnation current when it arrived.
        let router = current.read().unwrap_or_else(|e| e.into_inner()).clone();
        router.oneshot(request)
    }));
    Ok((router, following, capacity))
}

/// One incarnation of the stream: its Redis handle, the SSE endpoint over it and, if this replica
/// took the producer lease when it opened the stream, the producer.
struct Incarnation {
    stream: RedisStream,
    sse: SseStream<RedisStream>,
    producer: Option<RedisProducer>,
}

impl Incarnation {
    /// Opens the stream, creating it (a new epoch) if Redis does not have it and `create`, and
    /// takes the producer lease unless `--serve-only` or another replica holds it.
    async fn open(
        backend: &RedisBackend,
        args: &DemoArgs,
        create: bool,
    ) -> Result<Incarnation, Error> {
        let name = args
            .stream
            .unwrap_or(StreamId::new("events").expect("a valid name"));
        let stream = match create {
            true => {
                let capacity = args.example.capacity.next_power_of_two() as u64;
                backend.create(&name, capacity).await?
            }
            false => backend.open(&name).await?,
        };
        let stream = stream.with_max_readers(args.example.max_readers);
        Incarnation::from_stream(stream, args, create).await
    }

    /// The incarnation after `lost` ended `previous`, after deleting a rolled-back log: created
    /// again (a new epoch, `previous`'s capacity) by a producing replica, or opened once a
    /// producing replica has created it if `--serve-only`.
    async fn next(
        backend: &RedisBackend,
        previous: &RedisStream,
        lost: &Error,
        args: &DemoArgs,
    ) -> Result<Incarnation, Error> {
        match args.serve_only {
            true => {
                previous.delete_if_rolled_back(lost).await?;
                Incarnation::open(backend, args, false).await
            }
            false => {
                Incarnation::from_stream(previous.next_incarnation(lost).await?, args, false).await
            }
        }
    }

    /// Serves `stream`: takes the producer lease unless `--serve-only` or another replica holds
    /// it, and builds the SSE endpoint. `asked_capacity`: `stream` was created or opened with
    /// `--capacity`, so say if it existed with another.
    async fn from_stream(
        stream: RedisStream,
        args: &DemoArgs,
        asked_capacity: bool,
    ) -> Result<Incarnation, Error> {
        let identity = stream.identity();
        eprintln!(
            "stream {}.{}, capacity {}",
            identity.stream,
            identity.epoch,
            stream.window_capacity()
        );
        let asked = args.example.capacity.next_power_of_two() as u64;
        if asked_capacity && stream.window_capacity() != asked {
            eprintln!(
                "note: the stream existed with capacity {}; --capacity {} applies only to a stream \
                 this replica creates from nothing (its later incarnations keep their capacity)",
                stream.window_capacity(),
                args.example.capacity
            );
        }
        let producer = match args.serve_only {
            true => None,
            false => match stream.acquire_producer().await {
                Ok(producer) => Some(producer),
                Err(Error::LeaseHeld { holder, .. }) => {
                    eprintln!(
                        "producer lease held by token {holder}: serving as a standby until it is free"
                    );
                    None
                }
                // Nothing more to produce: serve what it holds.
                Err(Error::Closed(reason)) => {
                    eprintln!(
                        "note: the stream is closed ({reason}); it is served as it is until it \
                         expires or is deleted (another --stream starts a new one)"
                    );
                    None
                }
                Err(e) => return Err(e),
            },
        };
        let sse = SseStream::without_producer(stream.clone(), identity, args.example.sse_config());
        Ok(Incarnation {
            stream,
            sse,
            producer,
        })
    }

    fn router(&self) -> Router {
        app_router(app::App::new(self.sse.clone()))
    }
}

/// Serves `incarnation` until the stream is lost, then the next one, and so on, until `stop`.
async fn follow(
    backend: RedisBackend,
    mut incarnation: Incarnation,
    current: Arc<RwLock<Router>>,
    args: DemoArgs,
    stop: watch::Receiver<bool>,
) {
    loop {
        let Some(lost) = serve(&mut incarnation, &args, &stop).await else {
            return; // stopped
        };
        eprintln!("the stream is lost ({lost}); opening or creating it again");
        // A producing replica creates the next incarnation (after deleting a rolled-back log,
        // which is behind ids clients may hold); a serve-only one opens what a producing replica
        // creates. Stopped meanwhile, it opens nothing more (an open cut short at the stop
        // leaves at most an unanswered lease grant, which lapses).
        let previous = &incarnation.stream;
        let open = || Incarnation::next(&backend, previous, &lost, &args);
        let Some(next) = until_stopped(&stop, retry("open the stream", open)).await else {
            return;
        };
        incarnation = next;
        *current.write().unwrap_or_else(|e| e.into_inner()) = incarnation.router();
    }
}

/// Calls `attempt` until it succeeds, every [`RETRY`].
async fn retry<T, F, Fut>(what: &str, mut attempt: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Error>>,
{
    loop {
        match attempt().await {
            Ok(done) => return done,
            Err(e) => {
                eprintln!("cannot {what} yet: {e}");
                tokio::time::sleep(RETRY).await;
            }
        }
    }
}

/// Serves one incarnation (producing or standing by unless `--serve-only`); returns the error
/// that says the stream is lost, or `None` once `stop` said so (and the lease, if this replica
/// held it, was given back). A stream that completed is served on, as it is.
async fn serve(
    incarnation: &mut Incarnation,
    args: &DemoArgs,
    stop: &watch::Receiver<bool>,
) -> Option<Error> {
    let first = incarnation.producer.take();
    let (stream, sse) = (&incarnation.stream, &incarnation.sse);
    let producing = async {
        if !args.serve_only {
            produce_or_stand_by(stream, sse, first, args, stop).await?;
        }
        stopped(stop.clone()).await;
        Ok(())
    };
    tokio::select! {
        // Redis unreachable meanwhile: the SSE endpoint answers 503 until it is back.
        lost = stream.until_lost(RETRY) => Some(lost),
        done = producing => done.err(),
    }
}

/// Produces with `first` if this replica got the lease, and whenever another replica takes the
/// lease over (this one was paused or cut off past its lease), serves as a standby again: waits
/// for the lease, then produces from the head on. A standby that takes over produces at once,
/// whatever `--eager` says: the stream it continues was already live. Redis errors do not end
/// the standby; it tries again. Returns `Ok` once the stream has ended or `stop` said so (the
/// lease given back), and the error when the stream is lost.
async fn produce_or_stand_by(
    stream: &RedisStream,
    sse: &SseStream<RedisStream>,
    first: Option<RedisProducer>,
    args: &DemoArgs,
    stop: &watch::Receiver<bool>,
) -> Result<(), Error> {
    let mut next = first.map(|producer| (producer, args.example.eager));
    loop {
        let (producer, eager) = match next.take() {
            Some(taken) => taken,
            None => match until_stopped(stop, stream.acquire_producer_when_free()).await {
                None => {
                    give_back_an_unanswered_grant(stream).await;
                    return Ok(());
                }
                Some(Ok(producer)) => {
                    eprintln!(
                        "took the producer lease (token {}): producing from id {}",
                        producer.fencing_token(),
                        producer.next_id()
                    );
                    (producer, true)
                }
                Some(Err(e)) if e.is_stream_lost() => return Err(e),
                Some(Err(Error::Closed(_))) => return Ok(()),
                Some(Err(e)) => {
                    eprintln!("standby: could not ask for the producer lease (trying again): {e}");
                    if until_stopped(stop, tokio::time::sleep(RETRY))
                        .await
                        .is_none()
                    {
                        // The failed try may have been granted all the same (its reply lost).
                        give_back_an_unanswered_grant(stream).await;
                        return Ok(());
                    }
                    continue;
                }
            },
        };
        // Aborted when this future is dropped too (the stream was lost while producing).
        let keeper = AbortOnDrop(tokio::spawn(producer.lease_keeper().run()));
        let mut args = args.clone();
        args.example.eager = eager;
        let outcome = produce(sse.attach_producer(producer), args, stopped(stop.clone())).await;
        drop(keeper);
        match outcome {
            app::Stopped::Ended(PublishError::Superseded) => {
                eprintln!("producer: gave the stream up without closing it (the lease moved on, or a close failed); standing by");
            }
            app::Stopped::ShutDown(producer) => {
                if let Some(producer) = producer.into_backend_producer() {
                    hand_back(producer).await;
                }
                return Ok(());
            }
            // The stream ended.
            ended @ (app::Stopped::Ended(_) | app::Stopped::Completed) => {
                app::report(&ended);
                return Ok(());
            }
        }
    }
}

/// A standby that stops: Redis may have granted the lease to an acquisition of this handle whose
/// reply never came (cancelled by the stop, or failed as unavailable). The handle's next
/// acquisition gets that grant (its claim is sent again), to be given back at once; if the lease
/// was free it takes and gives back a fresh one, which costs a fencing token and nothing else.
async fn give_back_an_unanswered_grant(stream: &RedisStream) {
    if let Ok(granted) = stream.acquire_producer().await {
        hand_back(granted).await;
    }
}

/// Gives the producer lease back, so that a standby takes over now rather than once it lapses.
async fn hand_back(producer: RedisProducer) {
    let token = producer.fencing_token();
    match producer.release_lease().await {
        Ok(()) => eprintln!("gave the producer lease (token {token}) back"),
        Err(e) => eprintln!("cannot give the producer lease back ({e}); it lapses by itself"),
    }
}

/// `work`'s output, or `None` if `stop` said so first (`work` is then dropped).
async fn until_stopped<T>(
    stop: &watch::Receiver<bool>,
    work: impl Future<Output = T>,
) -> Option<T> {
    tokio::select! {
        done = work => Some(done),
        () = stopped(stop.clone()) => None,
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
