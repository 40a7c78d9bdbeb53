//! Redis Cluster: every key of a stream shares one slot, so a stream lives whole on one node.
//! The backend is not a Cluster client: it sends every command to the node its URL names. A
//! stream whose slot that node serves works as on a single Redis; one whose slot another node
//! serves is refused with an `Error::Server` that names the node, never a retry loop.

mod common;

use std::time::{Duration, Instant};

use common::RedisServer;
use replay_ring_redis::{Error, ReadItem};
use replay_ring_sse::StreamId;

const DEADLINE: Duration = Duration::from_secs(30);

/// Two cluster nodes, node 1 serving slots 0..=8191 and node 2 the rest, once both report the
/// cluster healthy.
async fn two_node_cluster() -> (RedisServer, RedisServer) {
    // The bus port is given: by default it is the client port + 10000, and a node whose
    // (ephemeral) client port is above 55535 refuses to start.
    let node = || {
        let bus = common::free_port();
        let server = RedisServer::start_with(&[
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-port",
            &bus.to_string(),
        ]);
        (server, bus)
    };
    let ((n1, _), (n2, n2_bus)) = (node(), node());
    for (node, first, last) in [(&n1, 0, 8191), (&n2, 8192, 16383)] {
        let _: () = redis::cmd("CLUSTER")
            .arg("ADDSLOTSRANGE")
            .arg(first)
            .arg(last)
            .query(&mut node.raw())
            .unwrap();
    }
    let _: () = redis::cmd("CLUSTER")
        .arg("MEET")
        .arg("127.0.0.1")
        .arg(n2.port)
        .arg(n2_bus)
        .query(&mut n1.raw())
        .unwrap();
    let started = Instant::now();
    loop {
        let healthy = [&n1, &n2].iter().all(|node| {
            let info: String = redis::cmd("CLUSTER")
                .arg("INFO")
                .query(&mut node.raw())
                .unwrap();
            info.contains("cluster_state:ok") && info.contains("cluster_known_nodes:2")
        });
        if healthy {
            return (n1, n2);
        }
        assert!(started.elapsed() < DEADLINE, "the cluster never formed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn slot_of(node: &RedisServer, stream: &str) -> u16 {
    redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(format!("{{{stream}}}"))
        .query(&mut node.raw())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_on_the_urls_node_works_and_one_on_another_node_is_a_clear_error() {
    let (n1, n2) = two_node_cluster().await;
    let backend = n1.backend().await;
    let names = ["a", "b", "c", "d", "events", "x1", "x2", "x3"];
    let (here, there): (Vec<&str>, Vec<&str>) =
        names.iter().partition(|name| slot_of(&n1, name) <= 8191);
    assert!(
        !here.is_empty() && !there.is_empty(),
        "{names:?} on both nodes"
    );

    for name in here {
        let id = StreamId::new(name).unwrap();
        let stream = tokio::time::timeout(DEADLINE, backend.create(&id, 8))
            .await
            .unwrap()
            .unwrap();
        let mut producer = stream.acquire_producer().await.unwrap();
        assert_eq!(producer.append(b"one").await.unwrap(), 1);
        assert_eq!(producer.append(b"two").await.unwrap(), 2);
        let mut reader = stream.resume(Some(0)).await.unwrap();
        let read = tokio::time::timeout(DEADLINE, reader.recv())
            .await
            .unwrap()
            .unwrap();
        let ReadItem::Events(events) = read else {
            panic!("{name}: {read:?}");
        };
        assert_eq!(events[0].0, 1, "{name}");
    }

    let node2 = format!("127.0.0.1:{}", n2.port);
    for name in there {
        let id = StreamId::new(name).unwrap();
        let err = tokio::time::timeout(DEADLINE, backend.create(&id, 8))
            .await
            .unwrap()
            .unwrap_err();
        assert!(matches!(err, Error::Server(_)), "{name}: {err:?}");
        assert!(!err.is_transient(), "{name}: retrying cannot help");
        let text = err.to_string();
        assert!(
            text.contains("Redis Cluster") && text.contains(&node2),
            "{name}: the error names Cluster and the node that serves the slot: {text}"
        );
    }
}
