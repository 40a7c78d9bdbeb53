//! Several SSE server processes (the demo `sse_server` with `--redis`) on one Redis: a client
//! whose reconnects land on another replica, or whose replica crashes, still gets every id exactly
//! once.

mod common;

use std::sync::Mutex;
use std::time::Duration;

use common::sse_client::{get_events, producer_args, Replica, ResumingClient as Client};
use common::RedisServer;
use replay_ring_e2e::{ChaosProxy, ProxyConfig};
use replay_ring_sse::EventId;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnects_alternate_between_two_replicas_through_the_chaos_proxy() {
    const N: u64 = 300;
    let server = RedisServer::start();
    let url = server.url();
    let a = Replica::start(&producer_args(&url, Some(N))).await;
    let b = Replica::start(&["--redis", &url, "--serve-only"]).await;
    let mut config_a = ProxyConfig::new(a.addr);
    config_a.cut_after_frames = Some(9);
    let mut config_b = ProxyConfig::new(b.addr);
    config_b.cut_after_frames = Some(13);
    let proxies = [
        ChaosProxy::start(config_a).await.unwrap(),
        ChaosProxy::start(config_b).await.unwrap(),
    ];

    let mut client = Client::new();
    let mut attempts = 0;
    while !client.ended {
        attempts += 1;
        assert!(
            attempts < 500,
            "no end after {attempts} attempts ({} ids)",
            client.ids.len()
        );
        // Every reconnect goes to the other replica.
        let proxy = &proxies[attempts % 2];
        if attempts > 1 {
            client.verifier.on_reconnect();
        }
        let last = client.last_event_id.clone();
        let attempt = get_events(
            proxy.addr(),
            last.as_deref(),
            Duration::from_secs(60),
            |f| client.on_frame(f),
        )
        .await
        .expect("attempt");
        assert_eq!(attempt.status, 200, "attempt {attempts} after {last:?}");
    }
    client.assert_complete(N, "every id exactly once, in order");
    // Both replicas served resumes (a Last-Event-ID minted by the other one).
    for (i, proxy) in proxies.iter().enumerate() {
        let resumes = proxy
            .requests()
            .iter()
            .filter(|r| r.last_event_id.is_some() && r.status == Some(200))
            .count();
        assert!(resumes >= 5, "replica {i} served {resumes} resumes");
    }
    assert!(
        proxies
            .iter()
            .map(|p| p.counters().cuts_after_frames)
            .sum::<usize>()
            >= 10
    );
    drop((a, b));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_survives_the_crash_of_its_replica() {
    const N: u64 = 400;
    let server = RedisServer::start();
    let url = server.url();
    let a = Replica::start(&producer_args(&url, Some(N))).await;
    let b = Mutex::new(Some(
        Replica::start(&["--redis", &url, "--serve-only"]).await,
    ));
    let b_addr = b.lock().unwrap().as_ref().unwrap().addr;

    let mut client = Client::new();
    // Connected to B; after 50 events B is killed (SIGKILL) mid-stream.
    let first = get_events(b_addr, None, Duration::from_secs(60), |f| {
        client.on_frame(f);
        if client.ids.len() == 50 && client.last_event_id.is_some() {
            if let Some(mut replica) = b.lock().unwrap().take() {
                replica.kill();
            }
        }
    })
    .await
    .expect("attempt on B");
    assert_eq!(first.status, 200);
    assert!(!first.complete, "B's response was cut by the crash");
    assert!(!client.ended);
    assert!(client.ids.len() >= 50);
    // The same client resumes on A with its last id.
    client.verifier.on_reconnect();
    let mut attempts = 0;
    while !client.ended {
        attempts += 1;
        assert!(attempts < 10, "no end after {attempts} attempts on A");
        let last = client.last_event_id.clone();
        let attempt = get_events(a.addr, last.as_deref(), Duration::from_secs(60), |f| {
            client.on_frame(f)
        })
        .await
        .expect("attempt on A");
        assert_eq!(attempt.status, 200);
    }
    client.assert_complete(N, "nothing lost, nothing twice");
}

/// Failover of the producer: replica B starts with the producing flags while A holds the lease,
/// so it serves as a standby. A client follows the stream on B; A is killed mid-stream; once A's
/// lease lapses B takes over and produces from the head on. The client, never reconnecting, sees
/// every id exactly once and the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_replica_takes_over_producing_when_the_producer_crashes() {
    const N: u64 = 400;
    let server = RedisServer::start();
    let url = server.url();
    let mut args = producer_args(&url, Some(N));
    args.extend(["--lease-ms".to_string(), "1000".to_string()]);
    let a = Mutex::new(Some(Replica::start(&args).await));
    let b = Replica::start(&args).await;

    let mut client = Client::new();
    let attempt = get_events(b.addr, None, Duration::from_secs(60), |f| {
        client.on_frame(f);
        if client.ids.len() == 50 {
            if let Some(mut producer) = a.lock().unwrap().take() {
                producer.kill();
            }
        }
    })
    .await
    .expect("the stream on B");
    assert_eq!(attempt.status, 200);
    assert!(a.lock().unwrap().is_none(), "A was killed mid-stream");
    assert!(client.ended, "B produced to the end and closed the stream");
    client.assert_complete(N, "every id exactly once, in order, across the take-over");
}

/// A rolling deploy: the producing replica A is shut down (SIGTERM) mid-stream. It gives its
/// lease back, so the standby B takes over within a tenth of the 30 s lease instead of after it;
/// the client on B, never reconnecting, sees every id exactly once and the end well before A's
/// lease would have lapsed, and A exits by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_takes_over_at_once_when_the_producer_shuts_down() {
    const N: u64 = 400;
    let lease = Duration::from_secs(30);
    let server = RedisServer::start();
    let url = server.url();
    let mut args = producer_args(&url, Some(N));
    args.extend(["--lease-ms".to_string(), lease.as_millis().to_string()]);
    let mut a = Replica::start(&args).await;
    let b = Replica::start(&args).await;

    let mut client = Client::new();
    let mut stopped = false;
    // 350 events at 200/s after the stop, plus at most a tenth of a lease for the take-over.
    let attempt = get_events(b.addr, None, lease / 2, |f| {
        client.on_frame(f);
        if client.ids.len() == 50 && !stopped {
            a.terminate();
            stopped = true;
        }
    })
    .await
    .expect("the stream on B, within half of A's lease");
    assert_eq!(attempt.status, 200);
    assert!(stopped, "A was stopped mid-stream");
    assert!(client.ended, "B produced to the end and closed the stream");
    client.assert_complete(N, "every id exactly once, in order, across the hand-over");
    let status = a.exited(Duration::from_secs(10)).await;
    assert!(
        status.is_some_and(|s| s.success()),
        "A exits by itself after a SIGTERM: {status:?}"
    );
}

/// A replica refuses settings no stream could be served with, and a port in use, before it
/// creates the stream or takes the lease: nothing is left in Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_cannot_serve_fails_before_touching_redis() {
    let server = RedisServer::start();
    let url = server.url();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let exe = replay_ring_e2e::server::server_binary().expect("build sse_server");
    for (flags, says) in [
        (&["--max-readers", "0"][..], "max_readers"),
        (&["--capacity", "0"], "capacity"),
        (&["--port", port.as_str(), "--eager"], "--port"),
    ] {
        let run = tokio::process::Command::new(&exe)
            .args(["--redis", &url])
            .args(flags)
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(Duration::from_secs(30), run)
            .await
            .unwrap_or_else(|_| panic!("{flags:?}: the replica started and kept running"))
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flags:?} started: {stderr}");
        assert!(stderr.contains(says), "{flags:?}: {stderr}");
    }
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query(&mut server.raw())
        .unwrap();
    assert!(keys.is_empty(), "left in Redis: {keys:?}");
}

/// A replica that joins an existing stream warns about that stream's window, which it keeps,
/// not about the one its own `--capacity` would have created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joining_replica_sizes_its_warning_by_the_streams_window() {
    let server = RedisServer::start();
    let url = server.url();
    let first = Replica::start(&["--redis", &url, "--capacity", "64", "--rate", "1"]).await;
    // 300/s would fill a window of 65,536 in 218 s (nothing to warn about), and fills the
    // stream's 64 at once.
    let joining = Replica::start(&["--redis", &url, "--capacity", "65536", "--rate", "300"]).await;
    assert!(
        joining
            .logged("warning: the window (64 events)", Duration::from_secs(10))
            .await,
        "no warning about the stream's window of 64"
    );
    drop(first);
}

/// A serve-only replica whose stream was deleted keeps trying to open it; stopped (SIGTERM)
/// meanwhile, it exits at once instead of waiting in that loop for its shutdown deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_waiting_for_a_lost_stream_stops_at_once() {
    let server = RedisServer::start();
    let url = server.url();
    // The demo's stream: name `events`.
    let stream = server
        .backend()
        .await
        .create(&replay_ring_sse::StreamId::new("events").unwrap(), 64)
        .await
        .unwrap();
    let mut replica = Replica::start(&["--redis", &url, "--serve-only"]).await;
    stream.delete().await.unwrap();
    assert!(
        replica
            .logged("cannot open the stream yet", Duration::from_secs(10))
            .await,
        "the replica noticed the stream was lost and tries to open it again"
    );
    replica.terminate();
    // Without connections or a lease to give back, nothing is left to wait for; the deadline
    // for a replica whose producer does not stop is 5 s.
    let status = replica.exited(Duration::from_secs(3)).await;
    assert!(
        status.is_some_and(|s| s.success()),
        "exits by itself, in well under 5 s: {status:?}"
    );
}

/// A replica keeps serving its open event streams for the shutdown grace (5 s) after a SIGTERM;
/// a second signal ends it at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_signal_ends_a_replica_at_once() {
    let server = RedisServer::start();
    let url = server.url();
    let mut a = Replica::start(&producer_args(&url, None)).await;
    let addr = a.addr;
    let (first, got_first) = tokio::sync::oneshot::channel();
    let mut first = Some(first);
    let client = tokio::spawn(get_events(addr, None, Duration::from_secs(60), move |f| {
        if f.id.is_some() {
            if let Some(first) = first.take() {
                let _ = first.send(());
            }
        }
    }));
    got_first.await.expect("an event on the open stream");
    a.terminate();
    assert!(
        a.logged("shutting down", Duration::from_secs(10)).await,
        "the first signal starts the graceful shutdown"
    );
    assert!(
        a.exited(Duration::from_millis(500)).await.is_none(),
        "the open stream is kept for the grace"
    );
    a.terminate();
    let status = a.exited(Duration::from_secs(2)).await;
    assert!(
        status.is_some_and(|s| !s.success()),
        "the second signal ends it at once, as a failure: {status:?}"
    );
    client.abort();
}

/// A producer stalled past its lease (SIGSTOP) while a standby took over: when it wakes up, its
/// next append is refused (superseded) and it becomes a standby itself, so that when the new
/// producer crashes it takes over again. A client on a third, serve-only replica sees every id
/// exactly once and the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_that_lost_its_lease_while_stalled_becomes_a_standby_again() {
    const N: u64 = 400;
    let server = RedisServer::start();
    let url = server.url();
    let mut args = producer_args(&url, Some(N));
    args.extend(["--lease-ms".to_string(), "1000".to_string()]);
    let a = Replica::start(&args).await;
    let b = Mutex::new(Some(Replica::start(&args).await));
    let c = Replica::start(&["--redis", &url, "--serve-only"]).await;

    let mut client = Client::new();
    let attempt = get_events(c.addr, None, Duration::from_secs(60), |f| {
        client.on_frame(f);
        match client.ids.len() {
            // A stalls; B takes over once A's lease lapses.
            50 => a.pause(true),
            // B is producing: A wakes up, finds itself superseded, and stands by.
            150 => a.pause(false),
            // B crashes: A takes over again.
            250 => {
                if let Some(mut producer) = b.lock().unwrap().take() {
                    producer.kill();
                }
            }
            _ => {}
        }
    })
    .await
    .expect("the stream on C");
    assert_eq!(attempt.status, 200);
    assert!(b.lock().unwrap().is_none(), "B was killed mid-stream");
    assert!(client.ended, "A produced to the end and closed the stream");
    client.assert_complete(N, "every id exactly once, in order, across both take-overs");
}

/// A producer that died after its last event but before closing leaves a stream at the demo's
/// `--events` id: the replica that takes it over only closes it, adding no event past that id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_over_at_the_last_id_only_closes_the_stream() {
    const N: u64 = 20;
    let server = RedisServer::start();
    let url = server.url();
    let lease = Duration::from_millis(500);
    let backend = server
        .backend_with(replay_ring_redis::RedisConfig {
            lease,
            ..Default::default()
        })
        .await;
    // The demo's stream: name `events`, `--capacity 8192`.
    let stream = backend
        .create(&replay_ring_sse::StreamId::new("events").unwrap(), 8192)
        .await
        .unwrap();
    let mut dead = stream.acquire_producer().await.unwrap();
    for n in 1..=N {
        let payload = format!("{{\"n\":{n}}}");
        assert_eq!(dead.append(payload.as_bytes()).await.unwrap(), n);
    }
    drop(dead); // never closed: its lease lapses

    let mut args = producer_args(&url, Some(N));
    args.extend(["--lease-ms".to_string(), lease.as_millis().to_string()]);
    let replica = Replica::start(&args).await;
    let identity = stream.identity();
    let from_start = EventId::new(identity.stream, identity.epoch, 0).to_string();
    let mut ids = Vec::new();
    let mut terminal = None;
    let attempt = get_events(
        replica.addr,
        Some(&from_start),
        Duration::from_secs(30),
        |f| match (&f.event, &f.id) {
            (Some(event), _) => terminal = Some(event.clone()),
            (None, Some(id)) if !f.data.is_empty() => {
                ids.push(EventId::parse(id).expect("a valid id").seq)
            }
            _ => {}
        },
    )
    .await
    .expect("the stream on the replica");
    assert_eq!(attempt.status, 200);
    assert_eq!(ids, (1..=N).collect::<Vec<_>>(), "nothing past id {N}");
    assert_eq!(terminal.as_deref(), Some("end"));
    let window = replay_ring_sse::backend::Backend::window(&stream).await;
    assert_eq!(window.unwrap().head, N);
}

/// The only producing replica loses its lease while it waits for room in a full window (a Redis
/// stall or a pause past the lease; here the lease key is deleted), so its backpressure close is
/// refused. The stream is not closed in Redis, and nobody else will produce: the replica must
/// stand by and take the lease again, then go on or end the stream explicitly — never leave it
/// open with no producer, which clients would see as keep-alives forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_whose_backpressure_close_is_refused_takes_the_stream_up_again() {
    const CAPACITY: u64 = 16;
    let server = RedisServer::start();
    let url = server.url();
    let mut args = producer_args(&url, None);
    let capacity = args.iter().position(|a| a == "--capacity").unwrap() + 1;
    args[capacity] = CAPACITY.to_string();
    args.extend(
        [
            "--lease-ms",
            "500",
            "--resumption-window-ms",
            "60000",
            "--backpressure-timeout-ms",
            "1500",
        ]
        .map(String::from),
    );
    let _replica = Replica::start(&args).await;
    let stream = server
        .backend()
        .await
        .open(&replay_ring_sse::StreamId::new("events").unwrap())
        .await
        .unwrap();
    let state = || async { stream.state().await.unwrap() };
    common::eventually(Duration::from_secs(10), "a full window", || async {
        state().await.head == CAPACITY
    })
    .await;
    let lease = stream.key_names()[3].to_owned();
    let deleted: u64 = redis::cmd("DEL")
        .arg(&lease)
        .query(&mut server.raw())
        .unwrap();
    assert_eq!(deleted, 1, "the replica held the lease");
    let fence = state().await.fence;

    common::eventually(
        Duration::from_secs(15),
        "the stream to go on or end under a new lease",
        || async {
            let s = state().await;
            s.fence > fence && (s.head > CAPACITY || s.closed.is_some())
        },
    )
    .await;
}
