//! Replicas of the demo server (`sse_server --redis`) after Redis lost their stream: restarted
//! without persistence (the stream is gone), or from a snapshot older than the last events (the
//! log is shorter than what clients saw). Every replica moves on to the stream's next incarnation,
//! with a new epoch: old cursors get `404 stream_lost`, and no id of the old epoch is ever handed
//! out again with another event.

mod common;

use std::time::Duration;

use common::sse_client::{get_events, producer_args, Replica, SseFrame};
use common::RedisServer;
use replay_ring_sse::{Epoch, EventId};

const LIMIT: Duration = Duration::from_secs(30);

/// A producing replica (never ending the stream) and a serve-only one on Redis at `url`.
async fn two_replicas(url: &str) -> (Replica, Replica) {
    let producer = Replica::start(&producer_args(url, None)).await;
    let serving = Replica::start(&["--redis", url, "--serve-only"]).await;
    (producer, serving)
}

/// What one short GET saw: status, and the events' ids (the priming event's too).
struct Look {
    status: u16,
    ids: Vec<EventId>,
    body: String,
}

/// GETs `/events` for `for_how_long` (a live stream never ends by itself) and keeps every id.
async fn look(replica: &Replica, last_event_id: Option<&str>, for_how_long: Duration) -> Look {
    let mut ids = Vec::new();
    let mut body = String::new();
    let on_frame = |f: &SseFrame| {
        body.push_str(&f.data);
        if let Some(id) = &f.id {
            ids.push(EventId::parse(id).expect("a valid id"));
        }
    };
    let status = match get_events(replica.addr, last_event_id, for_how_long, on_frame).await {
        Ok(attempt) => attempt.status,
        // Still streaming when the time was up: a 200.
        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => 200,
        Err(e) => panic!("GET /events: {e}"),
    };
    Look { status, ids, body }
}

/// A resume from `cursor` that the replica is expected to refuse: `Connection: close`, so the
/// refusal's body ends with the connection (a 200 would stream until the time limit).
async fn refusal(replica: &Replica, cursor: &EventId) -> Look {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let request = format!(
        "GET /events HTTP/1.1\r\nHost: {}\r\nLast-Event-ID: {cursor}\r\nConnection: close\r\n\r\n",
        replica.addr
    );
    let mut conn = tokio::net::TcpStream::connect(replica.addr).await.unwrap();
    conn.write_all(request.as_bytes()).await.unwrap();
    let mut reply = Vec::new();
    tokio::time::timeout(LIMIT, conn.read_to_end(&mut reply))
        .await
        .expect("a refusal, not a stream")
        .unwrap();
    let reply = String::from_utf8_lossy(&reply).into_owned();
    let status = reply
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Look {
        status,
        ids: Vec::new(),
        body: reply,
    }
}

/// Polls fresh subscriptions on `replica` until one is served from an epoch other than `old`
/// and carries events; returns that epoch.
async fn next_incarnation(replica: &Replica, old: Epoch) -> Epoch {
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let seen = look(replica, None, Duration::from_millis(500)).await;
        let new = seen.ids.iter().find(|id| id.epoch != old && id.seq > 0);
        if let (200, Some(id)) = (seen.status, new) {
            return id.epoch;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no new incarnation served (last: {} {:?})",
            seen.status,
            seen.ids.last()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_serve_the_stream_created_again_after_a_restart_lost_it() {
    let mut server = RedisServer::start_with(&["--appendonly", "no"]);
    let (producer, serving) = two_replicas(&server.url()).await;
    let before = look(&serving, None, Duration::from_millis(500)).await;
    let old = *before.ids.last().expect("events before the restart");

    server.restart(); // no persistence: the stream is gone
    let epoch = next_incarnation(&serving, old.epoch).await;
    assert_eq!(next_incarnation(&producer, old.epoch).await, epoch);
    for replica in [&producer, &serving] {
        let resume = refusal(replica, &old).await;
        assert_eq!(resume.status, 404, "an old cursor: {}", resume.body);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_id_is_handed_out_again_after_a_restart_from_an_older_snapshot() {
    let mut server = RedisServer::start_with(&["--appendonly", "no"]);
    let (producer, serving) = two_replicas(&server.url()).await;
    let saved: String = redis::cmd("SAVE").query(&mut server.raw()).unwrap();
    assert_eq!(saved, "OK");
    // The priming event's id: the head when the GET arrived, just after the snapshot.
    let snapshot_head = look(&serving, None, Duration::from_millis(300))
        .await
        .ids
        .first()
        .expect("a priming event")
        .seq;
    // Events after the snapshot, seen by a client (and so by the replica that served them).
    let after = look(&serving, None, Duration::from_millis(500)).await;
    let old = *after.ids.last().expect("events after the snapshot");
    assert!(
        old.seq > snapshot_head + 10,
        "{} after {snapshot_head}",
        old.seq
    );

    server.restart(); // loads the snapshot: the log ends before ids clients have seen

    let epoch = next_incarnation(&serving, old.epoch).await;
    assert_eq!(next_incarnation(&producer, old.epoch).await, epoch);
    // The old epoch never went on past the snapshot: a client holding an id of it is refused.
    for replica in [&producer, &serving] {
        let resume = refusal(replica, &old).await;
        assert_eq!(resume.status, 404, "the last id seen: {}", resume.body);
        let early = EventId::new(old.stream, old.epoch, snapshot_head);
        let resume = refusal(replica, &early).await;
        assert_eq!(
            resume.status, 404,
            "an id within the snapshot: {}",
            resume.body
        );
    }
}
