//! Redis Cluster: every key of a stream shares one slot, so a stream lives whole on one node, and
//! a backend connected to any node of a cluster serves streams on every node. Its shared
//! connections route each command to the node that serves its slot; blocking reads follow
//! `MOVED` to that node, also when a slot moves while a stream is in use.

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::cluster::Cluster;
use common::live_tail::{ended, expect, follow};
use common::sse_client::{get_events, producer_args, Replica, ResumingClient};
use replay_ring_e2e::{ChaosProxy, ProxyConfig};
use replay_ring_redis::{
    CloseReason, Error, ReadItem, RedisBackend, RedisConfig, RedisProducer, RedisStream,
};
use replay_ring_sse::{contract, StreamId};
use tokio::task::JoinHandle;

const DEADLINE: Duration = Duration::from_secs(30);

fn sid(name: &str) -> StreamId {
    StreamId::new(name).unwrap()
}

fn payload(id: u64) -> Vec<u8> {
    format!("event-{id}").into_bytes()
}

/// Names whose streams, together, live on every node of `cluster`: one name per node.
fn one_name_per_node(cluster: &Cluster) -> Vec<String> {
    let mut found: Vec<Option<String>> = vec![None; cluster.nodes.len()];
    for i in 0.. {
        let name = format!("s{i}");
        let node = cluster.owner_of(cluster.slot_of(&name));
        found[node].get_or_insert(name);
        if found.iter().all(Option::is_some) {
            break;
        }
    }
    found.into_iter().map(Option::unwrap).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_connected_to_one_node_serves_streams_on_every_node() {
    let cluster = Cluster::start(3).await;
    let names = one_name_per_node(&cluster);
    // Connected to the last node: most streams live elsewhere.
    let backend = cluster.backend(2).await;
    for name in &names {
        let stream = tokio::time::timeout(DEADLINE, backend.create(&sid(name), 8))
            .await
            .unwrap()
            .unwrap();
        let mut producer = stream.acquire_producer().await.unwrap();
        assert_eq!(producer.append(b"one").await.unwrap(), 1, "{name}");

        // A reader that waits on the live tail before the next append: its blocking read has
        // to reach the node that serves the stream.
        let mut reader = stream.resume(Some(1)).await.unwrap();
        let waiting = tokio::spawn(async move {
            let mut ids = Vec::new();
            loop {
                match tokio::time::timeout(DEADLINE, reader.recv()).await.unwrap() {
                    Ok(ReadItem::Events(events)) => ids.extend(events.iter().map(|e| e.0)),
                    Ok(ReadItem::Closed(reason)) => return (ids, reason),
                    Err(e) => panic!("reader: {e}"),
                }
            }
        });
        // The blocking read is in Redis once the backend has counted it.
        let blocked_before = backend.stats().blocked_reads;
        common::eventually(DEADLINE, "the reader's blocking read", || {
            let now = backend.stats().blocked_reads;
            async move { now > blocked_before }
        })
        .await;
        assert_eq!(producer.append(b"two").await.unwrap(), 2, "{name}");
        assert_eq!(producer.append(b"three").await.unwrap(), 3, "{name}");
        producer.close(CloseReason::Completed).await.unwrap();
        let (ids, reason) = waiting.await.unwrap();
        assert_eq!(ids, vec![2, 3], "{name}");
        assert_eq!(reason, CloseReason::Completed, "{name}");

        // Every row of the resume table holds on this node too.
        stream.release_through(1).await.unwrap();
        assert!(matches!(
            stream.resume(Some(0)).await,
            Err(Error::Gap { .. })
        ));
        assert!(matches!(
            stream.resume(Some(4)).await,
            Err(Error::AheadOfHead { .. })
        ));
        let mut reader = stream.resume(Some(1)).await.unwrap();
        assert_eq!(
            reader.recv().await.unwrap(),
            ReadItem::Events(vec![(2, "two".into()), (3, "three".into())])
        );
    }
    // Every command went straight to the node that serves its stream, the blocking reads'
    // dedicated connections included (the backend's slot map): none was redirected.
    assert_eq!(cluster.error_answers(2, "MOVED"), 0);
}

/// The SSE layer's generic backend contract, every check, with its streams spread over a
/// three-node cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backend_contract_holds_on_a_cluster() {
    let cluster = Cluster::start(3).await;
    let backend = cluster.backend(0).await;
    let names = Arc::new(Mutex::new(Vec::new()));
    let open = |capacity: usize| {
        let (backend, names) = (backend.clone(), names.clone());
        async move {
            // Relaxed: only distinct names are needed.
            static N: AtomicU64 = AtomicU64::new(0);
            let name = format!("contract-{}", N.fetch_add(1, Ordering::Relaxed));
            names.lock().unwrap().push(name.clone());
            let stream = backend
                .create(&sid(&name), capacity as u64)
                .await
                .unwrap()
                .with_max_readers(8);
            let producer: RedisProducer = stream.acquire_producer().await.unwrap();
            (producer, stream)
        }
    };
    contract::run_all(open).await;
    let nodes: BTreeSet<usize> = names
        .lock()
        .unwrap()
        .iter()
        .map(|name| cluster.owner_of(cluster.slot_of(name)))
        .collect();
    assert_eq!(nodes.len(), 3, "the suite's streams lived on every node");
}

/// A stream's slot moves to another node while a producer appends and a reader follows the
/// live tail: the reader gets every id exactly once, in order, and the producer goes on; while
/// the keys are in transit commands may fail as unavailable, never with a wrong answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_keeps_its_ids_while_its_slot_moves_to_another_node() {
    const N: u64 = 400;
    let cluster = Cluster::start(3).await;
    let backend = cluster.backend(0).await;
    let name = "moving";
    let slot = cluster.slot_of(name);
    let from = cluster.owner_of(slot);
    let to = (from + 1) % 3;
    let stream = backend.create(&sid(name), 64).await.unwrap();

    let (appended, producer, reader) = traffic(&stream, N);

    // Relaxed: a progress counter read for its own value.
    common::eventually(DEADLINE, "the first half", || {
        let n = appended.load(Ordering::Relaxed);
        async move { n >= N / 2 }
    })
    .await;
    cluster.move_slot(slot, from, to);
    assert_eq!(cluster.owner_of(slot), to, "the slot moved");

    let transient = tokio::time::timeout(DEADLINE, producer)
        .await
        .unwrap()
        .unwrap();
    let (ids, reason, resumes) = tokio::time::timeout(DEADLINE, reader)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ids, (1..=N).collect::<Vec<_>>(), "every id once, in order");
    assert_eq!(reason, CloseReason::Completed);
    // The keys are on the new node, and the old one has none of them.
    let keys: u64 = redis::cmd("CLUSTER")
        .arg("COUNTKEYSINSLOT")
        .arg(slot)
        .query(&mut cluster.nodes[to].raw())
        .unwrap();
    assert!(keys >= 2, "the new node holds the stream's keys ({keys})");
    eprintln!(
        "during the move: {transient} transient producer errors, reader resumes: {resumes:?}"
    );
}

/// What a reader of [`traffic`] read: the ids, the close reason, and the errors it resumed after.
type Read = (Vec<u64>, CloseReason, Vec<String>);

/// A producer that appends `payload(1..=n)` then closes the stream (its task returns how many
/// calls failed for a while), and a reader of the live tail that releases what it read and
/// resumes after an error (its task returns the ids, the close reason and its errors). The
/// counter is the last id appended.
fn traffic(stream: &RedisStream, n: u64) -> (Arc<AtomicU64>, JoinHandle<u32>, JoinHandle<Read>) {
    // The reader resumes after an error, as an SSE client reconnecting with its last id.
    let reader_stream = stream.clone();
    let reader = tokio::spawn(async move {
        let mut ids = Vec::new();
        let mut resumes = Vec::new();
        let mut reader = reader_stream.resume(Some(0)).await.unwrap();
        loop {
            match tokio::time::timeout(DEADLINE, reader.recv()).await.unwrap() {
                Ok(ReadItem::Events(events)) => {
                    for (id, data) in events {
                        assert_eq!(data, payload(id).as_slice());
                        ids.push(id);
                    }
                    reader_stream.release_through(reader.last_id()).await.ok();
                }
                Ok(ReadItem::Closed(reason)) => return (ids, reason, resumes),
                Err(e) if e.is_transient() => {
                    resumes.push(e.to_string());
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    let last = ids.last().copied().unwrap_or(0);
                    reader = loop {
                        match reader_stream.resume(Some(last)).await {
                            Ok(r) => break r,
                            Err(e) if e.is_transient() => {
                                tokio::time::sleep(Duration::from_millis(20)).await;
                            }
                            Err(e) => panic!("resume: {e}"),
                        }
                    };
                }
                Err(e) => panic!("reader: {e}"),
            }
        }
    });

    let appended = Arc::new(AtomicU64::new(0));
    let producer_appended = appended.clone();
    let producer_stream = stream.clone();
    let producer = tokio::spawn(async move {
        let mut p = producer_stream.acquire_producer().await.unwrap();
        let mut transient = 0;
        while p.next_id() <= n {
            let id = p.next_id();
            // After an unknown outcome the producer resends the event itself (same id).
            let result = if p.has_pending() {
                p.resolve_pending().await.map(|got| got.expect("pending"))
            } else {
                p.append_wait(&payload(id), DEADLINE).await
            };
            match result {
                Ok(got) => {
                    assert_eq!(got, id);
                    // Relaxed: a progress counter polled by the test driver.
                    producer_appended.store(got, Ordering::Relaxed);
                }
                // (Resent by the next round: `has_pending`.)
                Err(e) if e.is_transient() || matches!(e, Error::Unknown { .. }) => {
                    transient += 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => panic!("producer: {e:?}"),
            }
        }
        p.close(CloseReason::Completed).await.unwrap();
        transient
    });

    (appended, producer, reader)
}

/// A backend that cannot tell it is on a cluster (its user may not run `INFO`) talks to its
/// URL's node only: a stream another node serves is refused with an error that names the node,
/// never a retry loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_info_a_stream_on_another_node_is_a_clear_error() {
    let cluster = Cluster::start(2).await;
    for node in &cluster.nodes {
        let _: () = redis::cmd("ACL")
            .arg("SETUSER")
            .arg("app")
            .arg("on")
            .arg(">secret")
            .arg("~*")
            .arg("+@all")
            .arg("-info")
            .query(&mut node.raw())
            .unwrap();
    }
    let url = format!("redis://app:secret@127.0.0.1:{}/", cluster.nodes[0].port);
    let backend = RedisBackend::connect(&url, RedisConfig::default())
        .await
        .unwrap();
    let names = one_name_per_node(&cluster);

    let stream = backend.create(&sid(&names[0]), 8).await.unwrap();
    let mut producer = stream.acquire_producer().await.unwrap();
    assert_eq!(producer.append(b"one").await.unwrap(), 1);

    let err = tokio::time::timeout(DEADLINE, backend.create(&sid(&names[1]), 8))
        .await
        .unwrap()
        .unwrap_err();
    assert!(matches!(err, Error::Server(_)), "{err:?}");
    assert!(!err.is_transient(), "retrying cannot help");
    let text = err.to_string();
    let node2 = format!("127.0.0.1:{}", cluster.nodes[1].port);
    assert!(
        text.contains("Redis Cluster") && text.contains(&node2) && text.contains("INFO"),
        "the error names Cluster, the node that serves the slot and why: {text}"
    );
}

/// The connection is to a cluster node, but the cluster is down (a slot without a node): an
/// explicit transient error, not a hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_with_an_unserved_slot_is_unavailable_for_its_streams() {
    let cluster = Cluster::start(2).await;
    let backend = cluster.backend(0).await;
    let names = one_name_per_node(&cluster);
    let slot = cluster.slot_of(&names[1]);
    for node in &cluster.nodes {
        let _: redis::Value = redis::cmd("CLUSTER")
            .arg("DELSLOTS")
            .arg(slot)
            .query(&mut node.raw())
            .unwrap();
    }
    let err = tokio::time::timeout(DEADLINE, backend.create(&sid(&names[1]), 8))
        .await
        .expect("an answer, not a hang")
        .unwrap_err();
    assert!(err.is_transient(), "{err:?}");
}

/// Two replicas of the demo SSE server on one cluster, each connected to a different node (and
/// neither, perhaps, to the node that serves the stream): a client cut again and again, each
/// reconnect going to the other replica, gets every id exactly once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_on_different_nodes_serve_one_stream_gap_free() {
    const N: u64 = 300;
    let cluster = Cluster::start(3).await;
    let a = Replica::start(&producer_args(&cluster.nodes[0].url(), Some(N))).await;
    let b = Replica::start(&["--redis", &cluster.nodes[1].url(), "--serve-only"]).await;
    let mut config_a = ProxyConfig::new(a.addr);
    config_a.cut_after_frames = Some(9);
    let mut config_b = ProxyConfig::new(b.addr);
    config_b.cut_after_frames = Some(13);
    let proxies = [
        ChaosProxy::start(config_a).await.unwrap(),
        ChaosProxy::start(config_b).await.unwrap(),
    ];

    let mut client = ResumingClient::new();
    let mut attempts = 0;
    while !client.ended {
        attempts += 1;
        assert!(attempts < 500, "no end after {attempts} attempts");
        let proxy = &proxies[attempts % 2];
        if attempts > 1 {
            client.verifier.on_reconnect();
        }
        let last = client.last_event_id.clone();
        let attempt = get_events(proxy.addr(), last.as_deref(), DEADLINE * 2, |f| {
            client.on_frame(f)
        })
        .await
        .expect("attempt");
        assert_eq!(attempt.status, 200, "attempt {attempts} after {last:?}");
    }
    client.assert_complete(N, "every id exactly once, in order");
    for (i, proxy) in proxies.iter().enumerate() {
        let resumes = proxy
            .requests()
            .iter()
            .filter(|r| r.last_event_id.is_some() && r.status == Some(200))
            .count();
        assert!(resumes >= 5, "replica {i} served {resumes} resumes");
    }
    drop((a, b));
}

/// A three-node cluster in which node 1 has a replica, whose nodes take one that does not answer
/// for a second for failed (so a failover takes seconds), and a stream name that node 1 serves:
/// the cluster, the name, its slot and the replica's index.
async fn cluster_with_a_replica_of_node_1() -> (Cluster, String, u16, usize) {
    let timeout = ["--cluster-node-timeout", "1000"];
    let mut cluster = Cluster::start_with(3, &timeout).await;
    let name = one_name_per_node(&cluster)[1].clone();
    let slot = cluster.slot_of(&name);
    let replica = cluster.add_replica(1, &timeout).await;
    (cluster, name, slot, replica)
}

/// Appends `payload(id)` as event `id`, through a failover: an unavailable cluster is tried again
/// later, and an append whose reply was lost is resent by the producer itself (the same id).
async fn append_through_failover(producer: &mut RedisProducer, id: u64) {
    let started = Instant::now();
    loop {
        let result = if producer.has_pending() {
            producer
                .resolve_pending()
                .await
                .map(|got| got.expect("pending"))
        } else {
            producer.append(&payload(id)).await
        };
        match result {
            Ok(got) => return assert_eq!(got, id, "the append's id"),
            Err(e) if e.is_transient() || matches!(e, Error::Unknown { .. }) => {
                assert!(started.elapsed() < DEADLINE, "append {id}: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("append {id}: {e:?}"),
        }
    }
}

/// The node a backend's URL names is a primary that fails, and its replica takes over its
/// slots. The backend carries on (unavailable for a while): its appends continue the ids, and a
/// reader waiting on the live tail of a stream of that shard gets the next event, so its blocking
/// read finds the new primary although the URL's node is gone. Every id is stored once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_carries_on_when_its_urls_node_fails_over_to_a_replica() {
    let (mut cluster, name, slot, replica) = cluster_with_a_replica_of_node_1().await;
    let backend = cluster.outage_backend(1).await;
    let stream = backend.create(&sid(&name), 1024).await.unwrap();
    let mut producer = stream.acquire_producer().await.unwrap();
    for id in 1..=3 {
        append_through_failover(&mut producer, id).await;
    }
    cluster.fail_over(1, replica, slot).await;
    append_through_failover(&mut producer, 4).await;

    // A reader at the head waits on the live tail; its blocking read is in Redis once the
    // backend has counted it. A read that fails (the cluster still settling) is resumed.
    let started = Instant::now();
    let mut next = 5;
    let mut failures = Vec::new();
    loop {
        assert!(
            started.elapsed() < DEADLINE,
            "no reader on the live tail got an event after the failover: {} failures, the \
             last {:?}",
            failures.len(),
            failures.last()
        );
        let mut reader = match stream.resume(Some(next - 1)).await {
            Ok(reader) => reader,
            Err(e) if e.is_transient() => {
                failures.push(e.to_string());
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            Err(e) => panic!("resume: {e:?}"),
        };
        let blocked_before = backend.stats().blocked_reads;
        let waiting = tokio::spawn(async move { reader.recv().await });
        while !waiting.is_finished() && backend.stats().blocked_reads == blocked_before {
            assert!(
                started.elapsed() < DEADLINE,
                "the reader neither waited nor failed"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if waiting.is_finished() {
            let failed = waiting.await.unwrap();
            assert!(
                matches!(&failed, Err(e) if e.is_transient()),
                "a reader at the head: {failed:?}"
            );
            failures.push(failed.unwrap_err().to_string());
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        append_through_failover(&mut producer, next).await;
        next += 1;
        match tokio::time::timeout(DEADLINE, waiting)
            .await
            .unwrap()
            .unwrap()
        {
            Ok(ReadItem::Events(events)) => {
                assert_eq!(events, vec![(next - 1, payload(next - 1).into())]);
                break;
            }
            Err(e) if e.is_transient() => failures.push(e.to_string()),
            other => panic!("the live tail: {other:?}"),
        }
    }

    // Every acknowledged id, once, in order.
    let mut reader = stream.resume(Some(0)).await.unwrap();
    let mut ids = Vec::new();
    while ids.len() < (next - 1) as usize {
        match tokio::time::timeout(DEADLINE, reader.recv()).await.unwrap() {
            Ok(ReadItem::Events(events)) => {
                for (id, data) in events {
                    assert_eq!(data, payload(id).as_slice());
                    ids.push(id);
                }
            }
            other => panic!("replay: {other:?}"),
        }
    }
    assert_eq!(
        ids,
        (1..next).collect::<Vec<_>>(),
        "every id once, in order"
    );
    eprintln!(
        "after the failover: {} failures {failures:?}",
        failures.len()
    );
}

/// A producer waiting for room follows its stream to another node (`MOVED`), and that node then
/// fails; its replica takes over the slot. The producer's next wait for room reaches the new
/// primary instead of the failed node it last waited on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_waiting_for_room_finds_the_replica_that_took_over() {
    let (mut cluster, name, slot, replica) = cluster_with_a_replica_of_node_1().await;
    // Connected to node 0: the stream's node is known from a `MOVED` only.
    let backend = cluster.outage_backend(0).await;
    let stream = backend.create(&sid(&name), 2).await.unwrap();
    let mut producer = stream.acquire_producer().await.unwrap();
    // Refused appends do not renew the lease: a keeper does, while the producer waits.
    let keeper = tokio::spawn(producer.lease_keeper().run());
    for id in 1..=2 {
        append_through_failover(&mut producer, id).await;
    }
    let wait = Duration::from_millis(300);
    let full = producer.append_wait(&payload(3), wait).await;
    assert!(matches!(full, Err(Error::Full { .. })), "{full:?}");
    cluster.fail_over(1, replica, slot).await;
    // A read and a lease renewal find the new primary, each on its shared connection (so that
    // no append below goes out on a connection to the failed node, for an unknown outcome).
    common::eventually(DEADLINE, "a state read on the new primary", || {
        let stream = stream.clone();
        async move {
            match stream.state().await {
                Ok(_) => true,
                Err(e) if e.is_transient() => false,
                Err(e) => panic!("state: {e:?}"),
            }
        }
    })
    .await;
    let started = Instant::now();
    loop {
        match producer.renew().await {
            Ok(()) => break,
            Err(e) if e.is_transient() => {
                assert!(started.elapsed() < DEADLINE, "renew: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("renew: {e:?}"),
        }
    }

    // The window is still full: the wait for room must reach Redis and time out (`Full`).
    let mut failures = Vec::new();
    loop {
        assert!(
            started.elapsed() < DEADLINE,
            "the producer never waited for room after the failover: {} failures, the last {:?}",
            failures.len(),
            failures.last()
        );
        match producer.append_wait(&payload(3), wait).await {
            Err(Error::Full { .. }) => break,
            Err(e) if e.is_transient() => {
                failures.push(e.to_string());
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => panic!("append_wait: {other:?}"),
        }
    }
    stream.release_through(1).await.unwrap();
    assert_eq!(
        producer.append_wait(&payload(3), DEADLINE).await.unwrap(),
        3
    );
    keeper.abort();
    eprintln!(
        "after the failover: {} failures {failures:?}",
        failures.len()
    );
}

/// Every node of the cluster is down for a while, then comes back on its data: while they are
/// down, the backend's calls fail as `Unavailable` (an append: `Unknown`), as on a single Redis
/// that is down, never as a server's answer; afterwards the producer carries on, gap-free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_every_node_is_down_calls_are_unavailable_and_then_carry_on() {
    let mut cluster = Cluster::start(2).await;
    let backend = cluster.outage_backend(0).await;
    let stream = backend.create(&sid("outage"), 64).await.unwrap();
    let mut producer = stream.acquire_producer().await.unwrap();
    append_through_failover(&mut producer, 1).await;

    for node in &mut cluster.nodes {
        node.kill();
    }
    // The first calls meet the closed connections, the later ones find no connected node.
    for attempt in 0..5 {
        match stream.state().await {
            Err(Error::Unavailable(_)) => {}
            other => panic!("state read {attempt} while the cluster is down: {other:?}"),
        }
    }
    match producer.append(&payload(2)).await {
        Err(Error::Unknown { id: 2, .. }) => {}
        other => panic!("append while the cluster is down: {other:?}"),
    }
    for attempt in 0..5 {
        let resend = producer.resolve_pending().await;
        assert!(
            matches!(resend, Err(Error::Unknown { id: 2, .. })),
            "resend {attempt} while the cluster is down: {resend:?}"
        );
    }

    for node in &mut cluster.nodes {
        node.restart();
    }
    let started = Instant::now();
    let got = loop {
        match producer.resolve_pending().await {
            Ok(got) => break got,
            Err(e @ (Error::Unknown { .. } | Error::Unavailable(_))) => {
                assert!(started.elapsed() < DEADLINE, "after the restart: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("after the restart: {e:?}"),
        }
    };
    assert_eq!(got, Some(2));
    append_through_failover(&mut producer, 3).await;
    let mut reader = stream.resume(Some(0)).await.unwrap();
    assert_eq!(
        reader.recv().await.unwrap(),
        ReadItem::Events((1..=3).map(|id| (id, payload(id).into())).collect())
    );
}

/// A stream whose keys have been migrated to another node while its slot is not yet assigned to
/// that node (a resharding between its `MIGRATE` and its `SETSLOT NODE`): the old node answers
/// `ASK`, and the backend follows it, so appends and reads go on during the migration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_is_served_while_its_slot_is_migrating_after_its_keys_moved() {
    let cluster = Cluster::start(2).await;
    let name = one_name_per_node(&cluster)[0].clone();
    let slot = cluster.slot_of(&name);
    let backend = cluster.backend(0).await;
    let stream = backend.create(&sid(&name), 64).await.unwrap();
    let mut producer = stream.acquire_producer().await.unwrap();
    assert_eq!(producer.append(&payload(1)).await.unwrap(), 1);

    cluster.migrate_keys(slot, 0, 1);
    // Sent to node 0, which still serves the slot but no longer has the keys.
    assert_eq!(producer.append(&payload(2)).await.unwrap(), 2);
    let state = stream.state().await.unwrap();
    assert_eq!((state.floor, state.head), (1, 2));
    let mut reader = stream.resume(Some(0)).await.unwrap();
    assert_eq!(
        reader.recv().await.unwrap(),
        ReadItem::Events((1..=2).map(|id| (id, payload(id).into())).collect())
    );

    cluster.assign_slot(slot, 0, 1);
    assert_eq!(producer.append(&payload(3)).await.unwrap(), 3);
    let keys: u64 = redis::cmd("CLUSTER")
        .arg("COUNTKEYSINSLOT")
        .arg(slot)
        .query(&mut cluster.nodes[0].raw())
        .unwrap();
    assert_eq!(keys, 0, "the old node holds none of the stream's keys");
}

/// A migration left half done (the stream's keys moved, its slot not assigned to their new node):
/// the stream's shared tail follows the old node's `ASK` and waits on the importing node, where
/// the events appended meanwhile reach its reader without the slot being assigned; after the
/// assignment the reader goes on, every id once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_follows_a_migration_left_half_done() {
    let cluster = Cluster::start(2).await;
    let name = one_name_per_node(&cluster)[0].clone();
    let slot = cluster.slot_of(&name);
    // A short block time: the read blocked on the old node when the keys leave it waits that
    // long before it is sent again (and then answered `ASK`).
    let config = RedisConfig {
        block: Duration::from_millis(300),
        ..RedisConfig::default()
    };
    let backend = cluster.nodes[0].backend_with(config).await;
    let stream = backend.create(&sid(&name), 64).await.unwrap();
    let mut producer = stream.acquire_producer().await.unwrap();
    assert_eq!(producer.append(&payload(1)).await.unwrap(), 1);
    let (mut seen, reading) = follow(&stream, 1);

    cluster.migrate_keys(slot, 0, 1);
    for id in 2..=3 {
        assert_eq!(producer.append(&payload(id)).await.unwrap(), id);
    }
    // Before the migration ends.
    expect(&mut seen, 2..=3, payload).await;
    assert!(
        cluster.owner_of(slot) == 0,
        "the slot is still the old node's"
    );
    // The tail waits on the importing node, behind `ASKING`, rather than polling the old node,
    // which answers `ASK` each time, with a retried read's pauses.
    common::eventually(
        DEADLINE,
        "the tail's read blocked on the importing node",
        || {
            let blocked = cluster.blocked_clients(1);
            async move { blocked > 0 }
        },
    )
    .await;

    cluster.assign_slot(slot, 0, 1);
    assert_eq!(producer.append(&payload(4)).await.unwrap(), 4);
    producer.close(CloseReason::Completed).await.unwrap();
    assert_eq!(ended(reading).await, CloseReason::Completed);
    expect(&mut seen, 4..=4, payload).await;
    assert_eq!(seen.recv().await, None, "nothing after the last id");
}

/// A stream's primary hands its slots to its replica (`CLUSTER FAILOVER`, as for maintenance)
/// while a producer appends and a reader follows the live tail, each on a backend connected to
/// another node: the reader gets every id exactly once, in order, and the producer goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_keeps_its_ids_through_a_manual_failover() {
    let (cluster, name, slot, replica) = cluster_with_a_replica_of_node_1().await;
    let backend = cluster.backend(0).await;
    let stream = backend.create(&sid(&name), 64).await.unwrap();
    keeps_its_ids_through(&stream, cluster.planned_failover(replica, slot)).await;
}

/// A stream's primary stops answering (SIGSTOP), and the cluster promotes its replica, while a
/// producer appends and a reader follows the live tail on a backend connected to another node.
/// Commands sent to the frozen node time out, and redis-rs's cluster client would keep sending
/// them there (it reads the slots again only after a `MOVED`); the backend's connections find
/// the new primary, and the reader gets every id exactly once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_keeps_its_ids_when_its_primary_stops_answering() {
    through_a_frozen_primary(0).await;
}

/// As above, with the backend connected to the node that stops answering: the new client its
/// connections are replaced with cannot learn the slots from the URL's node, and learns them from
/// the other nodes the backend knows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_keeps_its_ids_when_the_urls_node_stops_answering() {
    through_a_frozen_primary(1).await;
}

/// Node 1, which serves the stream, freezes halfway through its traffic on a backend connected to
/// node `url_node`; its replica takes over.
async fn through_a_frozen_primary(url_node: usize) {
    let (cluster, name, slot, replica) = cluster_with_a_replica_of_node_1().await;
    let backend = cluster.outage_backend(url_node).await;
    let stream = backend.create(&sid(&name), 64).await.unwrap();
    keeps_its_ids_through(&stream, cluster.freeze_over(1, replica, slot)).await;
}

/// Runs [`traffic`] of 400 events on `stream`, with `change` (a failover) once half of them are
/// appended: the producer reaches the end, and the reader gets every id once, in order.
async fn keeps_its_ids_through(
    stream: &RedisStream,
    change: impl std::future::Future<Output = ()>,
) {
    const N: u64 = 400;
    let (appended, producer, reader) = traffic(stream, N);

    // Relaxed: a progress counter read for its own value.
    common::eventually(DEADLINE, "the first half", || {
        let n = appended.load(Ordering::Relaxed);
        async move { n >= N / 2 }
    })
    .await;
    change.await;

    let transient = tokio::time::timeout(DEADLINE, producer)
        .await
        .expect("the producer reaches the slot's node")
        .unwrap();
    let (ids, reason, resumes) = tokio::time::timeout(DEADLINE, reader)
        .await
        .expect("the reader reaches the slot's node")
        .unwrap();
    assert_eq!(ids, (1..=N).collect::<Vec<_>>(), "every id once, in order");
    assert_eq!(reason, CloseReason::Completed);
    eprintln!(
        "through the change: {transient} transient producer errors, reader resumes: {resumes:?}"
    );
}

/// The backend's URL names a replica, which then fails for good, and every primary restarts on
/// its data: once they are back, the backend serves the stream again (appends continue the ids,
/// a reader on the live tail gets the next event) without the node its URL names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_outlives_its_urls_node_and_a_restart_of_every_other_node() {
    let timeout = ["--cluster-node-timeout", "1000"];
    let mut cluster = Cluster::start_with(2, &timeout).await;
    let replica = cluster.add_replica(0, &timeout).await;
    let backend = cluster.outage_backend(replica).await;
    let stream = backend.create(&sid("outlives"), 64).await.unwrap();
    let mut producer = stream.acquire_producer().await.unwrap();
    append_through_failover(&mut producer, 1).await;

    cluster.nodes[replica].kill();
    for node in 0..replica {
        cluster.nodes[node].restart();
    }
    append_through_failover(&mut producer, 2).await;
    let started = Instant::now();
    loop {
        assert!(
            started.elapsed() < DEADLINE,
            "no live tail after the restart"
        );
        let Ok(mut reader) = stream.resume(Some(2)).await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let blocked_before = backend.stats().blocked_reads;
        let waiting = tokio::spawn(async move { reader.recv().await });
        while !waiting.is_finished() && backend.stats().blocked_reads == blocked_before {
            assert!(
                started.elapsed() < DEADLINE,
                "the reader neither waited nor failed"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if waiting.is_finished() {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        append_through_failover(&mut producer, 3).await;
        let got = tokio::time::timeout(DEADLINE, waiting)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got.unwrap(), ReadItem::Events(vec![(3, payload(3).into())]));
        break;
    }
}

/// A stream's primary hands its slots to its replica (`CLUSTER FAILOVER`, as for maintenance)
/// while a reader waits on the live tail. The demoted primary answers the blocked `XREAD` with
/// `UNBLOCKED` (it is a replica now): the tail reads again, on the node that took over, so the
/// waiting reader gets the next event instead of an error (an SSE client would otherwise get a
/// `stream-error` frame for a failover that lost nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_on_the_live_tail_waits_through_a_manual_failover() {
    let (cluster, name, slot, replica) = cluster_with_a_replica_of_node_1().await;
    let backend = cluster.backend(0).await;
    let stream = backend.create(&sid(&name), 64).await.unwrap();
    let mut producer = stream.acquire_producer().await.unwrap();
    append_through_failover(&mut producer, 1).await;

    let mut reader = stream.resume(Some(1)).await.unwrap();
    let blocked_before = backend.stats().blocked_reads;
    let waiting = tokio::spawn(async move { reader.recv().await });
    // The tail's blocking read is in Redis once the backend has counted it.
    common::eventually(DEADLINE, "the reader's blocking read", || {
        let blocked = backend.stats().blocked_reads;
        async move { blocked > blocked_before }
    })
    .await;
    cluster.planned_failover(replica, slot).await;
    append_through_failover(&mut producer, 2).await;

    match tokio::time::timeout(DEADLINE, waiting)
        .await
        .unwrap()
        .unwrap()
    {
        Ok(ReadItem::Events(events)) => assert_eq!(events, vec![(2, payload(2).into())]),
        other => panic!("the reader on the live tail, through the failover: {other:?}"),
    }
}
