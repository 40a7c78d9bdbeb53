//! The task that follows one stream handle's log: its blocking reads, the state reads it makes for
//! every waiting reader, and its reconnects (see the `tail` module for the protocol).

use std::sync::Arc;
use std::time::Duration;

use redis::streams::StreamReadOptions;
use redis::Cmd;

use crate::backend::Counters;
use crate::blocking_conn::BlockingConn;
use crate::codec::{self, Page};
use crate::connection::closed_under_it;
use crate::error::Error;
use crate::page::read_page;
use crate::stream::RedisStream;
use crate::tail::{ctl_news, CtlNews, Entries, Failure, Outcome, Start, Tail, TailView};

/// The longest pause before the task connects again after Redis closed its connection; the pause
/// doubles from 10 ms with every close in a row.
const MAX_RECONNECT_PAUSE: Duration = Duration::from_secs(1);

/// Marks the tail stopped when its task is dropped without stopping: readers that wait on it
/// then read the state themselves, and the next one to wait starts another task.
struct Alive {
    tail: Arc<Tail>,
    task: u64,
}

impl Drop for Alive {
    fn drop(&mut self) {
        let mut running = self.tail.running.lock().unwrap_or_else(|p| p.into_inner());
        if running.on && running.task == self.task {
            running.on = false;
            self.tail.view.send_modify(|v| {
                let v = Arc::make_mut(v);
                v.version += 1;
                v.outcome = Outcome::Unsettled;
                v.live = false;
            });
        }
    }
}

impl Tail {
    /// Starts the task unless it runs, reading after the position of the (subscribed) reader that
    /// starts it: its cursor, the ctl mark and floor of its last state read, and whether its
    /// cursor was the head then.
    pub(crate) fn ensure_running(&self, stream: &RedisStream, start: Start<'_>) {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        if running.on {
            return;
        }
        running.on = true;
        running.task += 1;
        let task = running.task;
        self.view.send_modify(|v| {
            *v = Arc::new(TailView {
                version: v.version + 1,
                ctl_mark: start.ctl_mark.to_owned(),
                released: Vec::new(),
                pos: start.cursor,
                recent: Arc::from(Vec::new()),
                outcome: Outcome::Reading,
                floor: Some(start.floor),
                caught_up: start.at_head,
                live: true,
                issued: 0,
                mark_since: v.version + 1,
                settled: None,
            });
        });
        tokio::spawn(run(stream.clone(), task));
    }
}

/// The task: reads after the view's position until no reader is subscribed or a read fails.
async fn run(stream: RedisStream, task: u64) {
    let tail = stream.tail.clone();
    let _alive = Alive {
        tail: tail.clone(),
        task,
    };
    let config = stream.backend.config();
    let opts = StreamReadOptions::default()
        .block(config.block.as_millis().max(1) as usize)
        .count(config.read_batch);
    let mut conn = BlockingConn::default();
    let mut closed_in_a_row: u32 = 0;
    // After Redis closed the connection (a restart, a failover), the state is read before the
    // next blocking read: Redis may have come back with less than it had (`LogRolledBack`).
    let mut reconnected = false;
    loop {
        if std::mem::take(&mut reconnected) {
            let (pos, issued) = {
                let v = tail.view.borrow();
                (v.pos, v.version)
            };
            match read_state(&stream, pos).await {
                Ok((from, page)) => tail.settle(from, page, config.read_batch, issued),
                Err(_) => tail.publish(None, None, config.read_batch, issued),
            }
        }
        let (pos, ctl_mark, issued) = {
            let v = tail.view.borrow();
            (v.pos, v.ctl_mark.clone(), v.version)
        };
        let cursor_id = format!("0-{pos}");
        let xread = Cmd::xread_options(
            &[&stream.keys.log, &stream.keys.ctl],
            &[cursor_id.as_str(), ctl_mark.as_str()],
            &opts,
        );
        let counted = || Counters::bump(&stream.backend.shared.counters.blocked_reads);
        let reply = tokio::select! {
            biased;
            // Nobody waits any more: stop (dropping the connection and its read) unless a
            // reader subscribed meanwhile; then the same read is picked up again.
            () = tail.view.closed() => {
                if tail.stop_if_unwatched() {
                    return;
                }
                continue;
            }
            // Redis lost the view's mark (a reader's state read says so): read the state now.
            // The blocking read left behind is given up by the next, which watches other ids.
            () = tail.settle_wanted.notified() => {
                match read_state(&stream, pos).await {
                    Ok((from, page)) => tail.settle(from, page, config.read_batch, issued),
                    Err(_) => tail.publish(None, None, config.read_batch, issued),
                }
                continue;
            }
            reply = conn.query(&stream.backend, &stream.keys.log, &xread, counted) => reply,
        };
        match reply {
            Ok(value) => {
                closed_in_a_row = 0;
                let (log, ctl) = match split_reply(&stream, value, config.read_batch) {
                    Ok(read) => read,
                    Err(detail) => return tail.fail(Failure::Corrupt(detail)),
                };
                if let Some((last, _)) = log.as_ref().and_then(|l| l.last()) {
                    // The log reaches `last`: a later state read that finds a lower head
                    // reports the loss instead of serving a shortened log.
                    stream.saw_head(*last);
                }
                // A close, a re-creation, ctl entries the read may have missed, or a timeout
                // (the stream may have expired or been deleted, which writes nothing to ctl):
                // one state read here answers for every waiting reader, instead of one each.
                let unsettled = match &ctl {
                    Some(news) => news.releases_only.is_none(),
                    None => log.is_none(),
                };
                // (Sent after the blocking read, so `issued` dates it soundly too.)
                let settled = if unsettled {
                    read_state(&stream, pos).await.ok()
                } else {
                    None
                };
                match settled {
                    Some((from, page)) => tail.settle(from, page, config.read_batch, issued),
                    // Nothing to settle, or the state read failed (the stream is lost, or Redis
                    // is unavailable): each reader reads it, and reports what it finds.
                    None => tail.publish(log, ctl, config.read_batch, issued),
                }
            }
            // Redis closed the connection under the read (a restart, `CLIENT KILL`, its idle
            // `timeout`) but accepted it: connect again, at once the first time, then backing
            // off, so that a Redis that closes every connection costs one attempt a second. A
            // Redis that refuses connections fails the next connect, which ends the read.
            // On a Redis Cluster, the stream's slot is being migrated to another node (`ASK`,
            // `TRYAGAIN`) or kept moving: the keys are served again once it ends, so the read
            // is retried the same way instead of failing every waiting reader. A primary that
            // turned replica (a failover: `CLUSTER FAILOVER`, Sentinel) ends its blocked reads
            // with `UNBLOCKED`: read again, and the read finds the node that took over (`MOVED`).
            Err(e) if closed_under_it(&e) || matches!(e.code(), Some("TRYAGAIN" | "UNBLOCKED")) => {
                if closed_in_a_row > 0 {
                    let pause = Duration::from_millis(10) * (1 << closed_in_a_row.min(7));
                    tokio::time::sleep(pause.min(MAX_RECONNECT_PAUSE)).await;
                }
                closed_in_a_row = closed_in_a_row.saturating_add(1);
                reconnected = true;
            }
            Err(e) => return tail.fail(Failure::Redis(e)),
        }
        if tail.stop_if_unwatched() {
            return;
        }
    }
}

/// The task's state read at its position `pos`: where it read from (`pos`, or below the floor
/// when releases passed it) and what it found.
async fn read_state(stream: &RedisStream, pos: u64) -> Result<(u64, Page), Error> {
    match read_page(stream, pos).await {
        Err(Error::Gap { floor, .. }) => Ok((floor - 1, read_page(stream, floor - 1).await?)),
        other => other.map(|page| (pos, page)),
    }
}

impl Failure {
    /// The error a reader reports for it.
    pub(crate) fn into_error(self, stream: &RedisStream) -> Error {
        match self {
            Failure::Redis(e) => Error::from_redis(&stream.id, e),
            Failure::Corrupt(detail) => codec::corrupt(&stream.id, &detail),
        }
    }
}

/// Takes an XREAD reply on log and ctl apart: the log's entries (`None` if it had none) and
/// what ctl had that is new (`None` if nothing). `count` is the read's `COUNT`.
fn split_reply(
    stream: &RedisStream,
    reply: redis::Value,
    count: usize,
) -> Result<(Option<Entries>, Option<CtlNews>), String> {
    const SHAPE: &str = "XREAD reply has an unexpected shape";
    let log_key = stream.keys.log.as_bytes();
    let mut ctl = None;
    let mut log = None;
    let streams: Vec<redis::Value> = match reply {
        redis::Value::Nil => return Ok((None, None)),
        redis::Value::Array(items) => items,
        redis::Value::Map(pairs) => pairs
            .into_iter()
            .map(|(k, v)| redis::Value::Array(vec![k, v]))
            .collect(),
        _ => return Err(SHAPE.to_owned()),
    };
    for s in streams {
        let redis::Value::Array(mut kv) = s else {
            return Err(SHAPE.to_owned());
        };
        if kv.len() != 2 {
            return Err(SHAPE.to_owned());
        }
        let entries = kv.pop().expect("len checked");
        let key = kv.pop().expect("len checked");
        let redis::Value::Array(entries) = entries else {
            return Err(SHAPE.to_owned());
        };
        if !matches!(&key, redis::Value::BulkString(k) if k == log_key) {
            ctl = Some(ctl_news(&entries, count).ok_or_else(|| SHAPE.to_owned())?);
            continue;
        }
        let parsed = entries
            .into_iter()
            .map(|e| codec::entry(&stream.id, e))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())?;
        log = Some(parsed);
    }
    Ok((log, ctl))
}
