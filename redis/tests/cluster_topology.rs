//! Redis Cluster: what the backend knows of the cluster's slots (its own slot map, where a
//! stream's blocking reads connect first, and its shared connections' cluster clients) in cluster
//! states that a long-running process meets: a cluster of one node, a node taken out of the
//! cluster after its slots left it.

mod common;

use std::time::Duration;

use common::cluster::Cluster;
use common::live_tail::{ended, expect, follow};
use replay_ring_redis::{CloseReason, RedisProducer, RedisStream};
use replay_ring_sse::StreamId;

const DEADLINE: Duration = Duration::from_secs(30);

fn sid(name: &str) -> StreamId {
    StreamId::new(name).unwrap()
}

fn payload(id: u64) -> Vec<u8> {
    format!("event-{id}").into_bytes()
}

/// A stream name whose slot node `node` serves.
fn name_on(cluster: &Cluster, node: usize) -> String {
    (0..)
        .map(|i| format!("s{i}"))
        .find(|name| cluster.owner_of(cluster.slot_of(name)) == node)
        .unwrap()
}

/// A reader that starts on `stream` after its first event gets the two appended next, then the
/// close.
async fn a_new_reader_gets_the_next_events(stream: &RedisStream, mut producer: RedisProducer) {
    let (mut seen, reading) = follow(stream, 1);
    for id in 2..=3 {
        assert_eq!(producer.append(&payload(id)).await.unwrap(), id);
    }
    expect(&mut seen, 2..=3, payload).await;
    producer.close(CloseReason::Completed).await.unwrap();
    assert_eq!(ended(reading).await, CloseReason::Completed);
}

/// Waits until every node of `cluster` knows `nodes` nodes and reports the cluster healthy.
async fn healthy(cluster: &Cluster, nodes: usize) {
    let known = format!("cluster_known_nodes:{nodes}");
    common::eventually(DEADLINE, "a healthy cluster", || {
        let ok = cluster.nodes.iter().all(|node| {
            let info: String = redis::cmd("CLUSTER")
                .arg("INFO")
                .query(&mut node.raw())
                .unwrap();
            info.contains(&known) && info.contains("cluster_state:ok")
        });
        async move { ok }
    })
    .await;
}

/// A cluster of one node (a development setup, or a cluster before its other nodes joined): its
/// `CLUSTER SLOTS` names the node by an empty host (it has never learnt its own address from a
/// peer). A reader on the live tail still gets its events: its blocking read goes to the URL's
/// node, which serves every slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_on_the_live_tail_of_a_one_node_cluster_gets_its_events() {
    let cluster = Cluster::start(1).await;
    let backend = cluster.backend(0).await;
    let stream = backend.create(&sid("alone"), 64).await.unwrap();
    let mut producer = stream.acquire_producer().await.unwrap();
    assert_eq!(producer.append(&payload(1)).await.unwrap(), 1);
    a_new_reader_gets_the_next_events(&stream, producer).await;
}

/// A node that served a stream's slot when the backend connected, then gave its slots away and
/// left the cluster the way `redis-cli --cluster del-node` leaves it: forgotten by the others,
/// reset (`CLUSTER RESET SOFT`), still running. It answers `CLUSTERDOWN` for every key, never
/// `MOVED`. A state read, and a reader that starts on the stream afterwards, still get their
/// answers and events from the node that serves the slot now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_finds_its_stream_after_the_node_it_was_mapped_to_left_the_cluster() {
    let mut cluster = Cluster::start(2).await;
    let name = name_on(&cluster, 0);
    let slot = cluster.slot_of(&name);

    // A third node joins, and the (still empty) slot moves to it.
    let (leaving, bus) = Cluster::spawn_node(&[]);
    let _: () = redis::cmd("CLUSTER")
        .arg("MEET")
        .arg("127.0.0.1")
        .arg(leaving.port)
        .arg(bus)
        .query(&mut cluster.nodes[0].raw())
        .unwrap();
    cluster.nodes.push(leaving);
    let w = cluster.nodes.len() - 1;
    healthy(&cluster, 3).await;
    cluster.assign_slot(slot, 0, w);
    cluster.await_owner(slot, w).await;
    healthy(&cluster, 3).await;

    // The backend's slot map names the third node for the slot.
    let backend = cluster.backend(0).await;

    // Scale-in: the slot goes back, then the node leaves the cluster.
    cluster.assign_slot(slot, w, 0);
    cluster.await_owner(slot, 0).await;
    healthy(&cluster, 3).await;
    let stream = backend.create(&sid(&name), 64).await.unwrap();
    let mut producer = stream.acquire_producer().await.unwrap();
    assert_eq!(producer.append(&payload(1)).await.unwrap(), 1);
    let w_id = cluster.id_of(w);
    for node in 0..w {
        let _: () = redis::cmd("CLUSTER")
            .arg("FORGET")
            .arg(&w_id)
            .query(&mut cluster.nodes[node].raw())
            .unwrap();
    }
    let _: () = redis::cmd("CLUSTER")
        .arg("RESET")
        .arg("SOFT")
        .query(&mut cluster.nodes[w].raw())
        .unwrap();

    // The backend's connection for reads has sent nothing since the slot moved back, so its
    // cluster client still maps the slot to the node that left, which answers `CLUSTERDOWN`
    // (never `MOVED`): the connection is renewed, and the read goes to the slot's node.
    assert_eq!(stream.state().await.unwrap().head, 1);
    a_new_reader_gets_the_next_events(&stream, producer).await;
}
