//! The SSE layer's generic backend contract suite (`replay_ring_sse::contract`), run against
//! `RedisStream` on a private redis-server: one test per check, each on fresh streams.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};

use common::RedisServer;
use replay_ring_redis::{RedisBackend, RedisProducer, RedisStream};
use replay_ring_sse::{contract, StreamId};

/// Opens a fresh stream of `capacity` on `backend` with 8 reader places (so the reader-limit check
/// runs too), with its producer holding the lease.
async fn fresh(backend: &RedisBackend, capacity: usize) -> (RedisProducer, RedisStream) {
    // Relaxed: only distinct names are needed.
    static N: AtomicU64 = AtomicU64::new(0);
    let name = format!("contract-{}", N.fetch_add(1, Ordering::Relaxed));
    let stream = backend
        .create(&StreamId::new(&name).unwrap(), capacity as u64)
        .await
        .unwrap()
        .with_max_readers(8);
    let producer = stream.acquire_producer().await.unwrap();
    (producer, stream)
}

macro_rules! contract_test {
    ($name:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let server = RedisServer::start();
            let backend = server.backend().await;
            contract::$name(&|capacity| fresh(&backend, capacity)).await;
        }
    };
}

contract_test!(resume_table);
contract_test!(resume_on_fresh_and_emptied_windows);
contract_test!(refused_appends_burn_no_id);
contract_test!(release_and_floor);
contract_test!(ready_waits_for_a_release);
contract_test!(close_drains_then_reports_the_reason);
contract_test!(too_many_readers);
contract_test!(concurrent_producer_readers_releaser);
