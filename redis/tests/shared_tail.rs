//! Waiting readers of one stream handle share one blocking read, against a real redis-server: a
//! thousand idle readers hold one Redis connection between them, not a thousand; each still gets
//! every event exactly once, whether it keeps up or falls far behind; and the shared read ends
//! with its last reader.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::{eventually, RedisServer};
use replay_ring_redis::{
    ReadItem, RedisBackend, RedisConfig, RedisProducer, RedisReader, RedisStream,
};
use replay_ring_sse::StreamId;
use tokio::time::timeout;

const LIMIT: Duration = Duration::from_secs(30);

fn payload(id: u64) -> Vec<u8> {
    format!("event {id}").into_bytes()
}

/// Clients of the server that are blocked in `XREAD` now, and all its clients.
fn xread_clients(raw: &mut redis::Connection) -> (usize, usize) {
    let list: String = redis::cmd("CLIENT").arg("LIST").query(raw).unwrap();
    let blocked = list.lines().filter(|l| l.contains("cmd=xread")).count();
    (blocked, list.lines().count())
}

/// Reads until `last`, checking that ids continue the cursor exactly; returns how many events.
async fn read_through(mut reader: RedisReader, last: u64) -> u64 {
    let mut got = 0;
    while reader.last_id() < last {
        let before = reader.last_id();
        match timeout(LIMIT, reader.recv()).await.unwrap().unwrap() {
            ReadItem::Events(batch) => {
                for (i, (id, data)) in batch.iter().enumerate() {
                    assert_eq!(*id, before + 1 + i as u64, "ids continue the cursor");
                    assert_eq!(data, &Bytes::from(payload(*id)));
                }
                got += batch.len() as u64;
            }
            closed => panic!("{closed:?} before {last}"),
        }
    }
    got
}

async fn new_stream(
    server: &RedisServer,
    config: RedisConfig,
    name: &str,
) -> (RedisBackend, RedisStream) {
    let backend = server.backend_with(config).await;
    let stream = backend
        .create(&StreamId::new(name).unwrap(), 100_000)
        .await
        .unwrap();
    (backend, stream)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_waiting_readers_share_one_blocking_read() {
    const READERS: usize = 1_000;
    const EVENTS: u64 = 40;
    let server = RedisServer::start();
    let (backend, stream) = new_stream(&server, RedisConfig::default(), "many").await;
    let mut tasks = Vec::new();
    for i in 0..READERS {
        // Half on clones of the handle: clones share the read too.
        let handle = if i % 2 == 0 {
            stream.clone()
        } else {
            stream.clone().clone()
        };
        let reader = handle.resume(Some(0)).await.unwrap();
        tasks.push(tokio::spawn(read_through(reader, EVENTS)));
    }
    let mut raw = server.raw();
    eventually(LIMIT, "the shared read blocked in XREAD", || {
        std::future::ready(xread_clients(&mut raw).0 == 1)
    })
    .await;
    let (blocked, clients) = xread_clients(&mut raw);
    assert_eq!(blocked, 1, "one blocked XREAD for {READERS} readers");
    assert!(
        clients <= 4,
        "{clients} Redis clients for {READERS} waiting readers"
    );

    let mut producer = stream.acquire_producer().await.unwrap();
    for id in 1..=EVENTS {
        assert_eq!(producer.append(&payload(id)).await.unwrap(), id);
    }
    for task in tasks {
        assert_eq!(task.await.unwrap(), EVENTS, "every event exactly once");
    }
    // One read per append or fewer (appends that land together share a read), plus the odd
    // timed-out one; a read per reader would be at least READERS.
    let reads = backend.stats().blocked_reads;
    assert!(reads <= 2 * EVENTS + 10, "{reads} blocking reads");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_far_behind_the_shared_read_and_keeping_up_both_get_every_event() {
    const EVENTS: u64 = 2_000;
    // Small pages, so the lagging reader falls far behind what the shared read keeps.
    let config = RedisConfig {
        read_batch: 16,
        ..RedisConfig::default()
    };
    let server = RedisServer::start();
    let (_backend, stream) = new_stream(&server, config, "lag").await;
    let fast: Vec<_> = (0..8)
        .map(|_| {
            let stream = stream.clone();
            tokio::spawn(async move {
                let reader = stream.resume(Some(0)).await.unwrap();
                read_through(reader, EVENTS).await
            })
        })
        .collect();
    let slow_reader = stream.resume(Some(0)).await.unwrap();
    let (go, gate) = tokio::sync::oneshot::channel::<()>();
    let mut go = Some(go);
    let slow = tokio::spawn(async move {
        gate.await.unwrap();
        read_through(slow_reader, EVENTS).await
    });
    let mut producer = stream.acquire_producer().await.unwrap();
    let mut next = 1;
    while next <= EVENTS {
        let batch: Vec<Vec<u8>> = (next..next + 10).map(payload).collect();
        producer.append_batch(&batch).await.unwrap();
        next += 10;
        if next == EVENTS / 2 + 1 {
            // Half the events are out and the slow reader has read none: now it reads.
            go.take().unwrap().send(()).unwrap();
        }
    }
    for task in fast {
        assert_eq!(task.await.unwrap(), EVENTS);
    }
    assert_eq!(slow.await.unwrap(), EVENTS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shared_read_ends_with_its_last_reader() {
    let server = RedisServer::start();
    let (_backend, stream) = new_stream(&server, RedisConfig::default(), "ends").await;
    let waiting: Vec<_> = (0..10)
        .map(|_| {
            let stream = stream.clone();
            tokio::spawn(async move {
                let mut reader = stream.resume(Some(0)).await.unwrap();
                reader.recv().await
            })
        })
        .collect();
    let mut raw = server.raw();
    eventually(LIMIT, "the shared read blocked in XREAD", || {
        std::future::ready(xread_clients(&mut raw).0 == 1)
    })
    .await;
    for task in &waiting {
        task.abort();
    }
    // The read's connection closes well before its 5 s block time would have run out.
    eventually(Duration::from_secs(3), "no blocked XREAD left", || {
        std::future::ready(xread_clients(&mut raw).0 == 0)
    })
    .await;
    // A reader that comes later starts the shared read again and is woken by an append.
    let mut reader = stream.resume(Some(0)).await.unwrap();
    let next = tokio::spawn(async move { reader.recv().await });
    eventually(LIMIT, "the shared read blocked again", || {
        std::future::ready(xread_clients(&mut raw).0 == 1)
    })
    .await;
    let mut producer = stream.acquire_producer().await.unwrap();
    producer.append(&payload(1)).await.unwrap();
    let got = timeout(LIMIT, next).await.unwrap().unwrap().unwrap();
    assert_eq!(got, ReadItem::Events(vec![(1, Bytes::from(payload(1)))]));
}

/// Calls of `EVALSHA_RO` (the read-only scripts: a reader's state read) the server has answered.
fn state_reads(raw: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(raw).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha_ro:calls="))
        .map_or(0, |rest| rest.split(',').next().unwrap().parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_cost_waiting_readers_no_state_read_and_a_reader_they_passed_gets_a_gap() {
    const READERS: u64 = 100;
    const EVENTS: u64 = 20;
    // A long block time, so that no read times out (which makes every reader re-read the state).
    let config = RedisConfig {
        block: Duration::from_secs(60),
        ..RedisConfig::default()
    };
    let server = RedisServer::start();
    let (_backend, stream) = new_stream(&server, config, "releases").await;
    let delivered = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..READERS {
        let mut reader = stream.resume(Some(0)).await.unwrap();
        let delivered = delivered.clone();
        tasks.push(tokio::spawn(async move {
            while reader.last_id() < EVENTS {
                match timeout(LIMIT, reader.recv()).await.unwrap().unwrap() {
                    ReadItem::Events(batch) => {
                        assert_eq!(batch[0].0, reader.last_id() - batch.len() as u64 + 1);
                        // SeqCst: pairs with the driver's load below; only the count itself is
                        // read through it.
                        delivered
                            .fetch_add(batch.len() as u64, std::sync::atomic::Ordering::SeqCst);
                    }
                    closed => panic!("{closed:?}"),
                }
            }
        }));
    }
    // Resumed at 0 and then left alone while events 1.. are released.
    let mut passed = stream.resume(Some(0)).await.unwrap();
    let mut raw = server.raw();
    let before = state_reads(&mut raw);
    let mut producer = stream.acquire_producer().await.unwrap();
    for id in 1..=EVENTS {
        producer.append(&payload(id)).await.unwrap();
        eventually(LIMIT, "every reader has the event", || {
            // SeqCst: pairs with the readers' increments; a count polled for its own value.
            let all = delivered.load(std::sync::atomic::Ordering::SeqCst) == id * READERS;
            std::future::ready(all)
        })
        .await;
        stream.release_through(id).await.unwrap();
    }
    for task in tasks {
        task.await.unwrap();
    }
    let reads = state_reads(&mut raw) - before;
    // Re-reading the state on every release would be READERS × EVENTS = 2,000 reads.
    assert!(reads < READERS, "{reads} state reads for {EVENTS} releases");
    match timeout(LIMIT, passed.recv()).await.unwrap() {
        Err(replay_ring_redis::Error::Gap {
            requested: 0,
            floor,
            ..
        }) => assert_eq!(floor, EVENTS + 1),
        other => panic!("expected a gap, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_connections_on_redis_read_the_window_from_the_shared_read_not_per_chunk() {
    use futures_util::StreamExt;
    use replay_ring_sse::axum::{SseConfig, SseStream};
    const CONNECTIONS: u64 = 100;
    const EVENTS: u64 = 30;
    let config = RedisConfig {
        block: Duration::from_secs(60),
        ..RedisConfig::default()
    };
    let server = RedisServer::start();
    let (_backend, stream) = new_stream(&server, config, "sse").await;
    let identity = stream.identity();
    let producer = stream.acquire_producer().await.unwrap();
    let (sse, mut publisher) = SseStream::with_backend(producer, identity, SseConfig::default());
    let delivered = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut clients = Vec::new();
    for _ in 0..CONNECTIONS {
        let response = sse.respond_async(&http::HeaderMap::new()).await;
        assert_eq!(response.status(), http::StatusCode::OK);
        let mut body = response.into_body().into_data_stream();
        let delivered = delivered.clone();
        clients.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            let mut text = String::new();
            while ids.last() != Some(&EVENTS) {
                let chunk = timeout(LIMIT, body.next()).await.unwrap().unwrap().unwrap();
                text.push_str(std::str::from_utf8(&chunk).unwrap());
                while let Some(end) = text.find("\n\n") {
                    let frame: String = text.drain(..end + 2).collect();
                    if let Some(id) = frame.lines().find_map(|l| l.strip_prefix("id: ")) {
                        let seq: u64 = id.rsplit('.').next().unwrap().parse().unwrap();
                        if seq > 0 {
                            ids.push(seq);
                            // SeqCst: pairs with the driver's load below; only the count itself
                            // is read through it.
                            delivered.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        }
                    }
                }
            }
            ids
        }));
    }
    let mut raw = server.raw();
    let before = state_reads(&mut raw);
    for id in 1..=EVENTS {
        assert_eq!(publisher.send(payload(id)).await.unwrap(), id);
        // One event at a time, so every connection writes a chunk per event.
        eventually(LIMIT, "every connection has the event", || {
            // SeqCst: pairs with the clients' increments; a count polled for its own value.
            let all = delivered.load(std::sync::atomic::Ordering::SeqCst) == id * CONNECTIONS;
            std::future::ready(all)
        })
        .await;
    }
    for client in clients {
        assert_eq!(
            timeout(LIMIT, client).await.unwrap().unwrap(),
            (1..=EVENTS).collect::<Vec<_>>()
        );
    }
    let reads = state_reads(&mut raw) - before;
    // A state read per chunk would be at least CONNECTIONS × EVENTS = 3,000.
    assert!(
        reads < CONNECTIONS * EVENTS / 10,
        "{reads} state reads for {} chunks",
        CONNECTIONS * EVENTS
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_reaches_every_waiting_reader_through_one_state_read() {
    const READERS: usize = 500;
    let config = RedisConfig {
        block: Duration::from_secs(60),
        ..RedisConfig::default()
    };
    let server = RedisServer::start();
    let (_backend, stream) = new_stream(&server, config, "close").await;
    let mut producer = stream.acquire_producer().await.unwrap();
    producer.append(&payload(1)).await.unwrap();
    let mut tasks = Vec::new();
    for _ in 0..READERS {
        let mut reader = stream.resume(Some(0)).await.unwrap();
        tasks.push(tokio::spawn(async move {
            let first = timeout(LIMIT, reader.recv()).await.unwrap().unwrap();
            assert_eq!(first, ReadItem::Events(vec![(1, Bytes::from(payload(1)))]));
            // Waits on the shared read until the close.
            let end = timeout(LIMIT, reader.recv()).await.unwrap().unwrap();
            // Asked again, the reader says the same.
            assert_eq!(timeout(LIMIT, reader.recv()).await.unwrap().unwrap(), end);
            end
        }));
    }
    let mut raw = server.raw();
    eventually(LIMIT, "the shared read blocked in XREAD", || {
        std::future::ready(xread_clients(&mut raw).0 == 1)
    })
    .await;
    let before = state_reads(&mut raw);
    let reason = replay_ring::CloseReason::error("tool crashed");
    producer.close(reason.clone()).await.unwrap();
    for task in tasks {
        assert_eq!(task.await.unwrap(), ReadItem::Closed(reason.clone()));
    }
    let reads = state_reads(&mut raw) - before;
    // A state read per reader would be READERS.
    assert!(
        reads <= 5,
        "{reads} state reads to tell {READERS} readers of the close"
    );
}

#[test]
fn a_shared_read_whose_runtime_shut_down_is_started_again_by_the_next_reader() {
    let main = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let server = RedisServer::start();
    let (_backend, stream) = main.block_on(new_stream(&server, RedisConfig::default(), "rt"));
    // A reader on a runtime of its own starts the shared read there; the runtime then shuts
    // down with the read's task in it.
    let short = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut early = short.block_on(stream.resume(Some(0))).unwrap();
    let waited = short.block_on(async { timeout(Duration::from_millis(300), early.recv()).await });
    assert!(waited.is_err(), "nothing to read yet");
    drop(short);
    let got = main.block_on(async {
        let mut reader = stream.resume(Some(0)).await.unwrap();
        let next = tokio::spawn(async move { reader.recv().await });
        let mut producer = stream.acquire_producer().await.unwrap();
        producer.append(&payload(1)).await.unwrap();
        timeout(LIMIT, next).await.unwrap().unwrap().unwrap()
    });
    assert_eq!(got, ReadItem::Events(vec![(1, Bytes::from(payload(1)))]));
    // The first reader, still held, reads on the main runtime too.
    let again = main.block_on(async { timeout(LIMIT, early.recv()).await.unwrap().unwrap() });
    assert_eq!(again, ReadItem::Events(vec![(1, Bytes::from(payload(1)))]));
}

/// `DEBUG RELOAD NOSAVE`: Redis goes back to its last snapshot, connections kept (as a failover
/// to a lagging replica behind a proxy may).
fn reload(raw: &mut redis::Connection) {
    let _: String = redis::cmd("DEBUG")
        .arg("RELOAD")
        .arg("NOSAVE")
        .query(raw)
        .unwrap();
}

/// [`reload`], then waits until the shared read's block time runs out and it reads the state,
/// taking Redis's mark.
async fn reload_until_the_shared_read_reads_the_state(raw: &mut redis::Connection) {
    reload(raw);
    let before = state_reads(raw);
    eventually(LIMIT, "the shared read's state read", || {
        std::future::ready(state_reads(raw) > before)
    })
    .await;
}

/// A stream whose ctl's newest entry is one a [`reload`] loses: event 1 appended, a snapshot
/// (`SAVE`), then `on_snapshot` and a release of event 1.
struct ReleasedAfterASnapshot {
    server: RedisServer,
    stream: RedisStream,
    producer: RedisProducer,
    raw: redis::Connection,
}

async fn released_after_a_snapshot(
    name: &str,
    block: Duration,
    on_snapshot: impl FnOnce(&mut redis::Connection, &RedisStream),
) -> ReleasedAfterASnapshot {
    let server = RedisServer::start_with(&["--enable-debug-command", "local"]);
    let config = RedisConfig {
        block,
        ..RedisConfig::default()
    };
    let (_backend, stream) = new_stream(&server, config, name).await;
    let mut producer = stream.acquire_producer().await.unwrap();
    producer.append(&payload(1)).await.unwrap();
    let mut raw = server.raw();
    let _: String = redis::cmd("SAVE").query(&mut raw).unwrap();
    on_snapshot(&mut raw, &stream);
    stream.release_through(1).await.unwrap();
    ReleasedAfterASnapshot {
        server,
        stream,
        producer,
        raw,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_after_redis_lost_what_the_shared_read_saw_is_refused_not_served_from_memory() {
    let server = RedisServer::start_with(&["--enable-debug-command", "local"]);
    let (_backend, stream) = new_stream(&server, RedisConfig::default(), "rollback").await;
    let mut producer = stream.acquire_producer().await.unwrap();
    for id in 1..=10 {
        producer.append(&payload(id)).await.unwrap();
    }
    let _: String = redis::cmd("SAVE").query(&mut server.raw()).unwrap();
    // This replica reads, another one produces: only its shared read sees 11..=20.
    let replica = server.backend().await;
    let readers = replica
        .open(&StreamId::new("rollback").unwrap())
        .await
        .unwrap();
    let follower = tokio::spawn(read_through(readers.resume(Some(10)).await.unwrap(), 20));
    for id in 11..=20 {
        producer.append(&payload(id)).await.unwrap();
    }
    assert_eq!(timeout(LIMIT, follower).await.unwrap().unwrap(), 10);
    // Redis goes back to the snapshot at 10: 11..=20 are gone.
    reload(&mut server.raw());
    match readers.resume(Some(10)).await {
        Err(replay_ring_redis::Error::LogRolledBack {
            seen: 20, head: 10, ..
        }) => {}
        other => panic!("expected LogRolledBack, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_waits_quietly_when_redis_lost_the_ctl_entries_the_shared_read_saw() {
    let ReleasedAfterASnapshot {
        server: _server,
        stream,
        mut raw,
        ..
    } = released_after_a_snapshot("ctl-lost", Duration::from_secs(60), |_, _| {}).await;
    // A reader resumed after the release starts the shared read from its mark.
    let mut first = stream.resume(Some(1)).await.unwrap();
    let waiting = tokio::spawn(async move { timeout(Duration::from_secs(2), first.recv()).await });
    eventually(LIMIT, "the shared read blocked in XREAD", || {
        std::future::ready(xread_clients(&mut raw).0 == 1)
    })
    .await;
    // Redis goes back to the snapshot from before the release.
    reload(&mut raw);
    let before = state_reads(&mut raw);
    let mut late = stream.resume(Some(1)).await.unwrap();
    let waited = timeout(Duration::from_secs(1), late.recv()).await;
    assert!(waited.is_err(), "nothing to read: {waited:?}");
    let reads = state_reads(&mut raw) - before;
    assert!(
        reads <= 5,
        "{reads} state reads in a second by one waiting reader"
    );
    drop(waiting);
}

/// Reads until the close, checking that ids continue the cursor exactly; returns the ids.
async fn read_to_close(reader: &mut RedisReader) -> (Vec<u64>, replay_ring::CloseReason) {
    let mut ids = Vec::new();
    loop {
        let before = reader.last_id();
        match timeout(LIMIT, reader.recv()).await.unwrap().unwrap() {
            ReadItem::Events(batch) => {
                for (i, (id, data)) in batch.iter().enumerate() {
                    assert_eq!(*id, before + 1 + i as u64, "ids continue the cursor");
                    assert_eq!(data, &Bytes::from(payload(*id)));
                    ids.push(*id);
                }
            }
            ReadItem::Closed(reason) => return (ids, reason),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_after_more_than_a_page_of_events_reaches_readers_after_the_last_one() {
    const EVENTS: u64 = 600; // more than one page of the default `read_batch` (512)
    let server = RedisServer::start();
    let mut raw = server.raw();
    let every: Vec<u64> = (1..=EVENTS).collect();
    let reason = replay_ring::CloseReason::error("done");
    for waiting_before in [false, true] {
        let name = format!("burst-{waiting_before}");
        let (_backend, stream) = new_stream(&server, RedisConfig::default(), &name).await;
        // A reader that only starts reading after the burst and the close (the shared read
        // then starts with both in Redis), and one that waits on the shared read before them.
        let mut late = stream.resume(Some(0)).await.unwrap();
        let waiting = waiting_before.then(|| {
            let stream = stream.clone();
            tokio::spawn(async move {
                let mut reader = stream.resume(Some(0)).await.unwrap();
                read_to_close(&mut reader).await
            })
        });
        if waiting.is_some() {
            eventually(LIMIT, "the shared read blocked in XREAD", || {
                std::future::ready(xread_clients(&mut raw).0 == 1)
            })
            .await;
        }
        let mut producer = stream.acquire_producer().await.unwrap();
        let batch: Vec<Vec<u8>> = (1..=EVENTS).map(payload).collect();
        producer.append_batch(&batch).await.unwrap();
        producer.close(reason.clone()).await.unwrap();
        if let Some(waiting) = waiting {
            assert_eq!(waiting.await.unwrap(), (every.clone(), reason.clone()));
        }
        assert_eq!(
            read_to_close(&mut late).await,
            (every.clone(), reason.clone())
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_whose_ctl_mark_redis_lost_still_gets_new_events() {
    let ReleasedAfterASnapshot {
        server: _server,
        stream,
        mut producer,
        mut raw,
    } = released_after_a_snapshot("mark-lost", Duration::from_millis(500), |_, _| {}).await;
    // Resumed after the release: the reader's mark is the release's ctl entry.
    let mut reader = stream.resume(Some(1)).await.unwrap();
    let next = tokio::spawn(async move { timeout(LIMIT, reader.recv()).await });
    eventually(LIMIT, "the shared read blocked in XREAD", || {
        std::future::ready(xread_clients(&mut raw).0 == 1)
    })
    .await;
    // ctl's newest entry is older than the reader's mark now, and so is the shared read's.
    reload_until_the_shared_read_reads_the_state(&mut raw).await;
    producer.append(&payload(2)).await.unwrap();
    match next.await.unwrap() {
        Ok(got) => assert_eq!(
            got.unwrap(),
            ReadItem::Events(vec![(2, Bytes::from(payload(2)))])
        ),
        Err(_) => panic!("event 2 was appended, but the reader waited {LIMIT:?} without it"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_ended_lets_the_shared_read_go_while_it_is_held() {
    let config = RedisConfig {
        read_batch: 2,
        ..RedisConfig::default()
    };
    let server = RedisServer::start();
    let (_backend, stream) = new_stream(&server, config, "ended").await;
    let mut producer = stream.acquire_producer().await.unwrap();
    let mut reader = stream.resume(Some(0)).await.unwrap();
    // A cancelled wait leaves the reader subscribed to the shared read.
    let waited = timeout(Duration::from_millis(100), reader.recv()).await;
    assert!(waited.is_err(), "nothing to read yet: {waited:?}");
    let mut raw = server.raw();
    eventually(LIMIT, "the shared read blocked in XREAD", || {
        std::future::ready(xread_clients(&mut raw).0 == 1)
    })
    .await;
    // Far more than the shared read keeps (2): the reader reads its pages and finds the close
    // with them, in its own state reads.
    let batch: Vec<Vec<u8>> = (1..=10).map(payload).collect();
    producer.append_batch(&batch).await.unwrap();
    producer
        .close(replay_ring::CloseReason::error("done"))
        .await
        .unwrap();
    let (ids, _) = read_to_close(&mut reader).await;
    assert_eq!(ids, (1..=10).collect::<Vec<_>>());
    // Ended but still held: the shared read's connection goes with its last subscription.
    eventually(Duration::from_secs(3), "no blocked XREAD left", || {
        std::future::ready(xread_clients(&mut raw).0 == 0)
    })
    .await;
    assert!(matches!(
        timeout(LIMIT, reader.recv()).await.unwrap(),
        Ok(ReadItem::Closed(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_whose_mark_redis_lost_before_it_first_waited_gets_new_events() {
    let ReleasedAfterASnapshot {
        server: _server,
        stream,
        mut producer,
        mut raw,
    } = released_after_a_snapshot("never-held", Duration::from_millis(300), |_, _| {}).await;
    // Resumed after the release (its mark is the release's ctl entry); it has not waited yet.
    let mut late = stream.resume(Some(1)).await.unwrap();
    reload(&mut raw);
    // Another reader waits first: the shared read starts at Redis's mark, older than `late`'s.
    let other = stream.resume(Some(1)).await.unwrap();
    let other = tokio::spawn(read_through(other, 3));
    eventually(LIMIT, "the shared read blocked in XREAD", || {
        std::future::ready(xread_clients(&mut raw).0 == 1)
    })
    .await;
    let next = tokio::spawn(async move { timeout(LIMIT, late.recv()).await });
    producer.append(&payload(2)).await.unwrap();
    producer.append(&payload(3)).await.unwrap();
    assert_eq!(other.await.unwrap(), 2);
    match next.await.unwrap() {
        Ok(item) => match item.unwrap() {
            ReadItem::Events(batch) => assert_eq!(batch[0], (2, Bytes::from(payload(2)))),
            closed => panic!("{closed:?}"),
        },
        Err(_) => panic!("2 and 3 were appended, but the reader waited {LIMIT:?} without them"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_behind_a_view_whose_mark_redis_lost_do_not_read_the_state_per_event() {
    const EVENTS: u64 = 40;
    const READERS: u64 = 5;
    // A block time longer than the test: only the readers' request ends the shared read early.
    let ReleasedAfterASnapshot {
        server: _server,
        stream,
        mut producer,
        mut raw,
    } = released_after_a_snapshot("view-lost", Duration::from_secs(60), |_, _| {}).await;
    // The shared read starts at the release's mark, which Redis then loses; the other readers'
    // state reads give Redis's older mark.
    let first = stream.resume(Some(1)).await.unwrap();
    let mut readers = vec![tokio::spawn(read_through(first, 1 + EVENTS))];
    eventually(LIMIT, "the shared read blocked in XREAD", || {
        std::future::ready(xread_clients(&mut raw).0 == 1)
    })
    .await;
    reload(&mut raw);
    for _ in 1..READERS {
        let reader = stream.resume(Some(1)).await.unwrap();
        readers.push(tokio::spawn(read_through(reader, 1 + EVENTS)));
    }
    let before = state_reads(&mut raw);
    for id in 2..=1 + EVENTS {
        producer.append(&payload(id)).await.unwrap();
    }
    for reader in readers {
        assert_eq!(timeout(LIMIT, reader).await.unwrap().unwrap(), EVENTS);
    }
    let reads = state_reads(&mut raw) - before;
    // Re-reading the state on every view would be about READERS × EVENTS = 200.
    assert!(
        reads <= 2 * READERS,
        "{reads} state reads for {EVENTS} events and {READERS} readers"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_mark_numbered_after_later_ctl_entries_still_gives_way() {
    // A primary whose clock ran a minute ahead wrote the release Redis then loses; the entries
    // written after the loss are numbered before it.
    let numbered_ahead = |raw: &mut redis::Connection, stream: &RedisStream| {
        let ahead = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
            + 60_000;
        let _: () = redis::cmd("XSETID")
            .arg(stream.key_names()[2])
            .arg(format!("{ahead}-0"))
            .query(raw)
            .unwrap();
    };
    let ReleasedAfterASnapshot {
        server: _server,
        stream,
        mut producer,
        mut raw,
    } = released_after_a_snapshot("skew", Duration::from_millis(300), numbered_ahead).await;
    let mut reader = stream.resume(Some(1)).await.unwrap();
    // A wait given up: the reader stays subscribed, and the shared read runs from its mark.
    let waited = timeout(Duration::from_millis(100), reader.recv()).await;
    assert!(waited.is_err(), "nothing to read yet: {waited:?}");
    eventually(LIMIT, "the shared read blocked in XREAD", || {
        std::future::ready(xread_clients(&mut raw).0 == 1)
    })
    .await;
    reload_until_the_shared_read_reads_the_state(&mut raw).await;
    // A release then writes an entry numbered before the lost one.
    stream.release_through(1).await.unwrap();
    let witness = stream.resume(Some(1)).await.unwrap();
    let witness = tokio::spawn(read_through(witness, 2));
    producer.append(&payload(2)).await.unwrap();
    assert_eq!(witness.await.unwrap(), 1);
    match timeout(LIMIT, reader.recv()).await {
        Ok(item) => assert_eq!(
            item.unwrap(),
            ReadItem::Events(vec![(2, Bytes::from(payload(2)))])
        ),
        Err(_) => panic!("2 was appended, but the reader waited {LIMIT:?} without it"),
    }
}
