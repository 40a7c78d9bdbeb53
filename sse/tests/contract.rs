//! The backend contract suite against the in-process ring, one test per check.

use bytes::Bytes;
use replay_ring::ReplayRing;
use replay_ring_sse::contract;

async fn open(capacity: usize) -> (replay_ring::Producer<Bytes>, ReplayRing<Bytes>) {
    ReplayRing::<Bytes>::new(capacity, contract::MIN_READERS).unwrap()
}

#[tokio::test]
async fn resume_table() {
    contract::resume_table(&open).await;
}

#[tokio::test]
async fn resume_on_fresh_and_emptied_windows() {
    contract::resume_on_fresh_and_emptied_windows(&open).await;
}

#[tokio::test]
async fn refused_appends_burn_no_id() {
    contract::refused_appends_burn_no_id(&open).await;
}

#[tokio::test]
async fn release_and_floor() {
    contract::release_and_floor(&open).await;
}

#[tokio::test]
async fn ready_waits_for_a_release() {
    contract::ready_waits_for_a_release(&open).await;
}

#[tokio::test]
async fn close_drains_then_reports_the_reason() {
    contract::close_drains_then_reports_the_reason(&open).await;
}

#[tokio::test]
async fn too_many_readers() {
    contract::too_many_readers(&open).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_producer_readers_releaser() {
    contract::concurrent_producer_readers_releaser(&open).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_all_on_a_ring_with_a_first_id_above_one() {
    contract::run_all(|capacity| async move {
        ReplayRing::<Bytes>::builder()
            .capacity(capacity)
            .max_readers(contract::MIN_READERS)
            .first_id(1_000)
            .build()
            .unwrap()
    })
    .await;
}
