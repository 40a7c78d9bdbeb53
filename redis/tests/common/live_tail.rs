//! A reader on a stream's live tail whose events the test takes one at a time, for tests that
//! check what reaches it while the cluster or Redis changes under it.

use std::ops::RangeInclusive;
use std::time::Duration;

use bytes::Bytes;
use replay_ring_redis::{CloseReason, ReadItem, RedisStream};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::task::JoinHandle;

const DEADLINE: Duration = Duration::from_secs(30);

/// A reader of `stream` from after id `after`: each event it gets goes to the channel; the task
/// ends with the stream's close reason, and panics on an error or after 30 s without news.
pub fn follow(
    stream: &RedisStream,
    after: u64,
) -> (UnboundedReceiver<(u64, Bytes)>, JoinHandle<CloseReason>) {
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

/// Waits for the events `ids` from [`follow`]'s channel, in order, each with `payload(id)`.
pub async fn expect(
    seen: &mut UnboundedReceiver<(u64, Bytes)>,
    ids: RangeInclusive<u64>,
    payload: impl Fn(u64) -> Vec<u8>,
) {
    for id in ids {
        let got = tokio::time::timeout(DEADLINE, seen.recv()).await;
        let got = got.unwrap_or_else(|_| panic!("event {id} never reached the reader"));
        assert_eq!(got, Some((id, payload(id).into())));
    }
}

/// The close reason [`follow`]'s reader ended with, within 30 s.
pub async fn ended(reading: JoinHandle<CloseReason>) -> CloseReason {
    let reason = tokio::time::timeout(DEADLINE, reading).await;
    reason
        .expect("the reader ends in time")
        .expect("the reader does not panic")
}
