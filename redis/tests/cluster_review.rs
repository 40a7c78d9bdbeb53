//! Redis Cluster: the backend's slot map (where a stream's blocking reads connect first) in cluster
//! states that a long-running process meets.

mod common;

use std::time::Duration;

use common::cluster::Cluster;
use replay_ring_redis::{CloseReason, ReadItem, RedisStream};
use replay_ring_sse::StreamId;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::task::JoinHandle;

const DEADLINE: Duration = Duration::from_secs(30);

fn sid(name: &str) -> StreamId {
    StreamId::new(name).unwrap()
}

fn payload(id: u64) -> Vec<u8> {
    format!("event-{id}").into_bytes()
}

/// A reader of `stream` from after id `after`, on the live tail: each id it gets goes to the
/// channel; the task ends with the stream's close reason, and panics on an error.
fn follow(
    stream: &RedisStream,
    after: u64,
) -> (
    UnboundedReceiver<(u64, bytes::Bytes)>,
    JoinHandle<CloseReason>,
) {
    let stream = stream.clone();
    let (seen_tx, seen) = tokio::sync::mpsc::unbounded_channel();
    let reading = tokio::spawn(async move {
        let mut reader = stream.resume(Some(after)).await.unwrap();
        loop {
            match tokio::time::timeout(DEADLINE, reader.recv()).await {
                Err(_) => panic!("reader: no event and no close in {DEADLINE:?}"),
                Ok(Ok(ReadItem::Events(events))) => {
                    for event in events {
                        seen_tx.send(event).unwrap();
                    }
                }
                Ok(Ok(ReadItem::Closed(reason))) => return reason,
                Ok(Err(e)) => panic!("reader: {e}"),
            }
        }
    });
    (seen, reading)
}

async fn expect(
    seen: &mut UnboundedReceiver<(u64, bytes::Bytes)>,
    ids: std::ops::RangeInclusive<u64>,
) {
    for id in ids {
        let got = tokio::time::timeout(DEADLINE, seen.recv()).await;
        let got = got.unwrap_or_else(|_| panic!("event {id} never reached the reader"));
        assert_eq!(got, Some((id, payload(id).into())));
    }
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
    let (mut seen, reading) = follow(&stream, 1);
    for id in 2..=3 {
        assert_eq!(producer.append(&payload(id)).await.unwrap(), id);
    }
    expect(&mut seen, 2..=3).await;
    producer.close(CloseReason::Completed).await.unwrap();
    let reason = tokio::time::timeout(DEADLINE, reading)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reason, CloseReason::Completed);
}
