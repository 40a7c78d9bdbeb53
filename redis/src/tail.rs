//! One blocking read per stream handle, shared by every reader of the handle that waits.
//!
//! A reader that has delivered everything up to the head waits for the log to grow, or for ctl
//! to say that something else changed (a release, a close, a re-creation). If each waiting reader
//! sent an `XREAD BLOCK` of its own, it would need a connection of its own (a blocked read holds
//! its connection), and a replica with 10,000 idle SSE connections on one stream would hold 10,000
//! Redis connections and make Redis answer 10,000 reads per append. Instead the handle and its
//! clones share one [`Tail`]: a task that blocks in `XREAD` on log and ctl from the newest id it
//! has read, on one dedicated connection, and publishes what it read as a [`TailView`]. A waiting
//! reader looks at the view and either takes the entries that continue its cursor, waits for the
//! next view, or goes back to reading the stream itself ([`Next`]).
//!
//! ```text
//!   readers (cursor, ctl mark)          Tail task                         Redis
//!   ─────────────────────────           ─────────                         ─────
//!   wait ──► view: Wait  ◄───────┐      XREAD BLOCK log (0-pos, ctl mark) ─► blocks
//!   wait ──► view: Wait  ◄───────┤                                        ◄─ entries pos+1..=p
//!                                └───── publish view {pos = p, recent = …, mark}
//!   each: take (cursor+1..=p) from `recent`, deliver, wait again
//! ```
//!
//! **Why a reader may take entries from the view without reading the stream's state.** The
//! reader's own state read (the READ script) told it ctl's newest id then, its `ctl_mark`. The
//! view's entries were all read by `XREAD`s that watched ctl after the view's mark and found
//! nothing newer. If the two marks are equal, no close, release or re-creation was recorded
//! between the reader's state read and the reads of those entries, so they are this incarnation's
//! entries (a re-creation writes ctl) that existed when read (so they were not released), and the
//! stream was not closed before them. That is the argument a reader blocked in its own `XREAD`
//! relied on; the marks must be equal for it to carry over. A reader whose mark is older than the
//! view's re-reads the state; one whose mark is newer waits, because the task's read watches ctl
//! from an older id and so returns at once with the change the reader has already seen.
//!
//! **Releases.** Every release that moves the floor writes ctl, and the retention of an SSE
//! endpoint releases often. Were every ctl entry a reason to re-read the state, each release would
//! cost one state read per waiting reader. A release only matters to a reader whose next event it
//! removed, so the view remembers the marks it moved on from through releases alone
//! ([`TailView::released`]) and how far those releases went: a reader whose mark is one of them,
//! and whose cursor is at or past what was released since, takes the view's mark as its own. This
//! holds only if the task saw *every* ctl entry after its mark: ctl keeps its newest 16 entries,
//! so a read that returned 16 (or a full page) may have missed a close or a re-creation trimmed
//! away behind releases, and is treated as a change that every reader must re-read.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use redis::streams::StreamReadOptions;
use redis::{Cmd, RedisError};
use tokio::sync::watch;

use crate::backend::Counters;
use crate::blocking_conn::BlockingConn;
use crate::codec;
use crate::connection::closed_under_it;
use crate::error::Error;
use crate::stream::RedisStream;

/// Events in id order, as read from the log.
pub(crate) type Entries = Vec<(u64, Bytes)>;

/// The longest pause before the task connects again after Redis closed its connection; the pause
/// doubles from 10 ms with every close in a row.
const MAX_RECONNECT_PAUSE: Duration = Duration::from_secs(1);

/// The shared tail of one stream handle (and its clones).
#[derive(Debug)]
pub(crate) struct Tail {
    /// Whether the task runs. Readers subscribe and start the task under this lock, and the task
    /// stops under it, so a reader never waits on a task that has stopped.
    running: Mutex<bool>,
    view: watch::Sender<Arc<TailView>>,
}

/// What the task has read, as every waiting reader sees it.
#[derive(Debug, Clone)]
pub(crate) struct TailView {
    /// Bumped with every new view: a reader acts on an outcome ([`Outcome::TimedOut`],
    /// [`Outcome::Failed`]) once.
    pub(crate) version: u64,
    /// ctl's newest id as the task knows it: `recent` was read by `XREAD`s that watched ctl after
    /// this id and found nothing newer.
    pub(crate) ctl_mark: String,
    /// The log id the task reads after (it has read everything up to it).
    pub(crate) pos: u64,
    /// Earlier marks that `ctl_mark` follows through releases alone, oldest first, each with the
    /// highest id released since it: a reader at such a mark whose cursor is at or past that id
    /// lost nothing to them, and takes `ctl_mark` as its own.
    pub(crate) released: Vec<(String, u64)>,
    /// The newest entries read under `ctl_mark`, gap-free, ending at `pos` (or empty).
    pub(crate) recent: Arc<[(u64, Bytes)]>,
    /// How the task's last read ended.
    pub(crate) outcome: Outcome,
    /// The floor as of `ctl_mark` and the releases after it, when known (not after a close, a
    /// re-creation or ctl entries the task may have missed, until a reader re-reads the state).
    pub(crate) floor: Option<u64>,
    /// Whether the task's last read found nothing past `pos` beyond what it returned (fewer
    /// entries than a page), so that `pos` was the head when it was read.
    pub(crate) caught_up: bool,
    /// Whether the task runs.
    pub(crate) live: bool,
}

/// How the task's last read ended.
#[derive(Debug, Clone)]
pub(crate) enum Outcome {
    /// With entries or a ctl change, or the task has just started: it is reading again.
    Reading,
    /// The read's block time ran out with nothing new: readers re-read the state (the stream
    /// may have expired or been deleted, which writes nothing to ctl).
    TimedOut,
    /// The read failed; the task has stopped, and the next reader to wait starts it again.
    Failed(Failure),
}

/// Why the task stopped.
#[derive(Debug, Clone)]
pub(crate) enum Failure {
    /// Redis's error, which each waiting reader reports as its own.
    Redis(RedisError),
    /// A reply this crate cannot read.
    Corrupt(String),
}

/// What a waiting reader does with a view.
#[derive(Debug)]
pub(crate) enum Next {
    /// Deliver these: they continue the cursor.
    Take(Entries),
    /// Nothing for this reader yet: wait for the next view.
    Wait,
    /// Read the stream's state (and the entries after the cursor) directly.
    Recheck,
    /// The task's read failed.
    Fail(Failure),
}

impl TailView {
    /// What a reader at `cursor` whose last state read gave `ctl_mark` does with this view.
    /// `seen` is the newest view version it has acted on; updated here, as are `ctl_mark` and
    /// the reader's `floor` when the view's mark follows its own through releases that removed
    /// nothing the reader still needs.
    pub(crate) fn next_for(
        &self,
        cursor: u64,
        ctl_mark: &mut String,
        floor: &mut u64,
        seen: &mut u64,
    ) -> Next {
        let fresh = self.version > *seen;
        *seen = (*seen).max(self.version);
        let released_since = self
            .released
            .iter()
            .find(|(mark, _)| mark == ctl_mark)
            .map(|(_, through)| *through)
            .filter(|through| cursor >= *through);
        if let Some(through) = released_since {
            ctl_mark.clone_from(&self.ctl_mark);
            *floor = (*floor).max(through + 1);
        }
        if *ctl_mark == self.ctl_mark {
            let first = self.recent.first().map_or(self.pos + 1, |(id, _)| *id);
            if cursor + 1 >= first && cursor < self.pos {
                let from = (cursor + 1 - first) as usize;
                return Next::Take(self.recent[from..].to_vec());
            }
            if cursor < self.pos {
                // Behind what the view keeps: those entries were read before; read them again.
                return Next::Recheck;
            }
        } else if ctl_order(ctl_mark) < ctl_order(&self.ctl_mark) {
            // ctl changed after the reader's state read: it must see what changed.
            return Next::Recheck;
        }
        // Nothing to take: the reader is at (or ahead of) the task's position, or it knows of a
        // newer ctl entry than the task, whose read (watching ctl from an older id) returns at
        // once with it.
        match &self.outcome {
            Outcome::Failed(f) if fresh => Next::Fail(f.clone()),
            Outcome::TimedOut if fresh => Next::Recheck,
            _ => Next::Wait,
        }
    }
}

/// Orders ctl ids (`<ms>-<seq>`, as Redis numbers stream entries); an unreadable id orders first.
fn ctl_order(id: &str) -> (u64, u64) {
    id.split_once('-')
        .and_then(|(ms, seq)| Some((ms.parse().ok()?, seq.parse().ok()?)))
        .unwrap_or((0, 0))
}

impl Default for Tail {
    fn default() -> Self {
        let view = TailView {
            version: 0,
            ctl_mark: "0-0".to_owned(),
            released: Vec::new(),
            pos: 0,
            recent: Arc::from(Vec::new()),
            outcome: Outcome::Reading,
            floor: None,
            caught_up: false,
            live: false,
        };
        Tail {
            running: Mutex::new(false),
            view: watch::Sender::new(Arc::new(view)),
        }
    }
}

/// Where a reader that starts the task stands.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Start<'a> {
    /// Its cursor.
    pub(crate) cursor: u64,
    /// ctl's newest id at its last state read (or the mark it took from a view since).
    pub(crate) ctl_mark: &'a str,
    /// The floor as of `ctl_mark`.
    pub(crate) floor: u64,
    /// Whether its cursor was the head at its last state read.
    pub(crate) at_head: bool,
}

impl Tail {
    /// Floor and head as the task last read them, if it runs and that is known: the head is the
    /// newest id its last read returned (that read found nothing after it), the floor follows
    /// every release recorded since. A moment old, but no round trip.
    pub(crate) fn recent_window(&self) -> Option<(u64, u64)> {
        let v = self.view.borrow();
        if !v.live || !v.caught_up {
            return None;
        }
        let floor = v.floor?;
        // Released entries the task never read: the head is at least the last one released.
        Some((floor, v.pos.max(floor - 1)))
    }

    /// Records the floor a reader read with the state at `ctl_mark`, if the task knows none and
    /// reads from that same mark (after a close, a re-creation or ctl entries it may have missed).
    pub(crate) fn learn_floor(&self, ctl_mark: &str, floor: u64) {
        self.view.send_if_modified(|v| {
            if v.floor.is_some() || v.ctl_mark != ctl_mark {
                return false;
            }
            Arc::make_mut(v).floor = Some(floor);
            true
        });
    }

    /// The newest view version (a new reader acts only on outcomes after it).
    pub(crate) fn version(&self) -> u64 {
        self.view.borrow().version
    }

    /// A subscription to the views. The task keeps reading while any subscription is held.
    pub(crate) fn subscribe(&self) -> watch::Receiver<Arc<TailView>> {
        self.view.subscribe()
    }

    /// Starts the task unless it runs, reading after the position of the (subscribed) reader that
    /// starts it: its cursor, the ctl mark and floor of its last state read, and whether its
    /// cursor was the head then.
    pub(crate) fn ensure_running(&self, stream: &RedisStream, start: Start<'_>) {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        if *running {
            return;
        }
        *running = true;
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
            });
        });
        tokio::spawn(run(stream.clone()));
    }

    /// Stops the task if no reader is subscribed; returns whether it stopped.
    fn stop_if_unwatched(&self) -> bool {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        if self.view.receiver_count() == 0 {
            *running = false;
            self.view.send_modify(|v| Arc::make_mut(v).live = false);
        }
        !*running
    }

    /// Publishes a failed read and stops the task.
    fn fail(&self, failure: Failure) {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        self.view.send_modify(|v| {
            let mut next = TailView::clone(v);
            next.version += 1;
            next.outcome = Outcome::Failed(failure);
            next.live = false;
            *v = Arc::new(next);
        });
        *running = false;
    }

    /// Publishes what one read returned: `log` entries (if any), what ctl had that is new (if
    /// anything), or neither when the block time ran out.
    fn publish(&self, log: Option<Entries>, ctl: Option<CtlNews>, keep: usize) {
        self.view.send_modify(|v| {
            let mut next = TailView::clone(v);
            next.version += 1;
            next.outcome = if log.is_none() && ctl.is_none() {
                Outcome::TimedOut
            } else {
                Outcome::Reading
            };
            let old_pos = next.pos;
            if let Some(last) = log.as_ref().and_then(|l| l.last()) {
                next.pos = last.0;
            }
            next.caught_up = log.as_ref().is_none_or(|l| l.len() < keep);
            let continues =
                log.as_ref().and_then(|l| l.first()).map(|(id, _)| *id) == Some(old_pos + 1);
            let mut released_through = 0;
            let mut still_stands = true;
            match ctl {
                Some(CtlNews {
                    newest,
                    releases_only: None,
                }) => {
                    // A close or a re-creation (or ctl entries the read may not have seen all
                    // of): entries read before or with it may belong to what changed, so readers
                    // re-read the state and the view keeps none of them.
                    next.ctl_mark = newest;
                    next.released.clear();
                    next.floor = None;
                    still_stands = false;
                }
                Some(CtlNews {
                    newest,
                    releases_only: Some(through),
                }) => {
                    for (_, since) in &mut next.released {
                        *since = (*since).max(through);
                    }
                    next.released.push((v.ctl_mark.clone(), through));
                    let over = next.released.len().saturating_sub(MARKS_KEPT);
                    next.released.drain(..over);
                    next.ctl_mark = newest;
                    next.floor = next.floor.map(|f| f.max(through + 1));
                    // Entries up to `through` are gone: reading after it is the same read.
                    next.pos = next.pos.max(through);
                    released_through = through;
                }
                None => {}
            }
            let mut recent: Entries = Vec::new();
            if still_stands {
                // No change but releases: what the view kept stands, less what they released.
                if log.is_none() || continues {
                    recent.extend(v.recent.iter().cloned());
                }
                // Otherwise released before the read (or the log rolled back): what the view
                // kept does not continue into the new entries.
                recent.extend(log.into_iter().flatten());
                recent.retain(|(id, _)| *id > released_through);
            }
            let drop = recent.len().saturating_sub(keep);
            next.recent = Arc::from(recent.split_off(drop));
            *v = Arc::new(next);
        });
    }
}

/// The task: reads after the view's position until no reader is subscribed or a read fails.
async fn run(stream: RedisStream) {
    let tail = stream.tail.clone();
    let config = stream.backend.config();
    let opts = StreamReadOptions::default()
        .block(config.block.as_millis().max(1) as usize)
        .count(config.read_batch);
    let mut conn = BlockingConn::default();
    let mut closed_in_a_row: u32 = 0;
    loop {
        let (pos, ctl_mark) = {
            let v = tail.view.borrow();
            (v.pos, v.ctl_mark.clone())
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
            reply = conn.query(&stream.backend, &xread, counted) => reply,
        };
        match reply {
            Ok(value) => {
                closed_in_a_row = 0;
                match split_reply(&stream, value, config.read_batch) {
                    Ok((log, ctl)) => tail.publish(log, ctl, config.read_batch),
                    Err(detail) => return tail.fail(Failure::Corrupt(detail)),
                }
            }
            // Redis closed the connection under the read (a restart, `CLIENT KILL`, its idle
            // `timeout`) but accepted it: connect again, at once the first time, then backing
            // off, so that a Redis that closes every connection costs one attempt a second. A
            // Redis that refuses connections fails the next connect, which ends the read.
            Err(e) if closed_under_it(&e) => {
                if closed_in_a_row > 0 {
                    let pause = Duration::from_millis(10) * (1 << closed_in_a_row.min(7));
                    tokio::time::sleep(pause.min(MAX_RECONNECT_PAUSE)).await;
                }
                closed_in_a_row = closed_in_a_row.saturating_add(1);
            }
            Err(e) => return tail.fail(Failure::Redis(e)),
        }
        if tail.stop_if_unwatched() {
            return;
        }
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

/// What a read found new in ctl.
#[derive(Debug, PartialEq, Eq)]
struct CtlNews {
    /// ctl's newest id.
    newest: String,
    /// The highest id released, if every new entry is a release and the read saw them all.
    releases_only: Option<u64>,
}

/// How many entries ctl keeps (`XADD … MAXLEN 16` in `scripts.rs`).
const CTL_KEEPS: usize = 16;

/// How many marks a view remembers that its own follows through releases alone.
const MARKS_KEPT: usize = 16;

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

/// Reads ctl's new entries (each `[id, [field, value, …]]`): its newest id, and whether they are
/// all releases (`r <through>`, written by the RELEASE script) and all there were. Fewer entries
/// than ctl keeps and than the read asked for means none was trimmed unread.
fn ctl_news(entries: &[redis::Value], count: usize) -> Option<CtlNews> {
    let mut releases_only = (entries.len() < CTL_KEEPS.min(count)).then_some(0);
    let mut newest = None;
    for entry in entries {
        let redis::Value::Array(parts) = entry else {
            return None;
        };
        let [id, fields] = parts.as_slice() else {
            return None;
        };
        newest = Some(text(id)?);
        let released = match fields {
            redis::Value::Array(f) if f.len() == 2 && text(&f[0]).as_deref() == Some("r") => {
                text(&f[1]).and_then(|x| x.parse::<u64>().ok())
            }
            _ => None,
        };
        releases_only = releases_only.zip(released).map(|(a, b)| a.max(b));
    }
    Some(CtlNews {
        newest: newest?,
        releases_only,
    })
}

/// A string reply as text.
fn text(v: &redis::Value) -> Option<String> {
    match v {
        redis::Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        redis::Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(version: u64, mark: &str, recent: impl IntoIterator<Item = u64>, pos: u64) -> TailView {
        TailView {
            version,
            ctl_mark: mark.to_owned(),
            released: Vec::new(),
            pos,
            recent: recent
                .into_iter()
                .map(|id| (id, Bytes::new()))
                .collect::<Vec<_>>()
                .into(),
            outcome: Outcome::Reading,
            floor: None,
            caught_up: false,
            live: true,
        }
    }

    fn m(mark: &str) -> String {
        mark.to_owned()
    }

    fn ids(next: Next) -> Vec<u64> {
        match next {
            Next::Take(e) => e.into_iter().map(|(id, _)| id).collect(),
            other => panic!("expected Take, got {other:?}"),
        }
    }

    #[test]
    fn a_reader_takes_exactly_what_continues_its_cursor() {
        let v = view(3, "5-0", 11..=20, 20);
        let mut seen = 0;
        assert_eq!(
            ids(v.next_for(10, &mut m("5-0"), &mut 0, &mut seen)),
            (11..=20).collect::<Vec<_>>()
        );
        assert_eq!(
            ids(v.next_for(15, &mut m("5-0"), &mut 0, &mut seen)),
            (16..=20).collect::<Vec<_>>()
        );
        assert_eq!(seen, 3);
        assert!(matches!(
            v.next_for(20, &mut m("5-0"), &mut 0, &mut seen),
            Next::Wait
        ));
        // Ahead of the task's position (it read from an older cursor): wait for it.
        assert!(matches!(
            v.next_for(25, &mut m("5-0"), &mut 0, &mut seen),
            Next::Wait
        ));
    }

    #[test]
    fn a_reader_behind_what_the_view_keeps_reads_itself() {
        let v = view(1, "5-0", 11..=20, 20);
        assert!(matches!(
            v.next_for(9, &mut m("5-0"), &mut 0, &mut 0),
            Next::Recheck
        ));
        let empty = view(1, "5-0", [], 20);
        assert!(matches!(
            empty.next_for(19, &mut m("5-0"), &mut 0, &mut 0),
            Next::Recheck
        ));
        assert!(matches!(
            empty.next_for(20, &mut m("5-0"), &mut 0, &mut 0),
            Next::Wait
        ));
    }

    #[test]
    fn a_ctl_change_the_reader_has_not_seen_makes_it_read_the_state() {
        let v = view(1, "7-3", 11..=20, 20);
        assert!(matches!(
            v.next_for(10, &mut m("7-2"), &mut 0, &mut 0),
            Next::Recheck
        ));
        assert!(matches!(
            v.next_for(20, &mut m("6-9"), &mut 0, &mut 0),
            Next::Recheck
        ));
        // The reader has seen a newer ctl entry than the task: the task's read returns with it.
        assert!(matches!(
            v.next_for(10, &mut m("7-4"), &mut 0, &mut 0),
            Next::Wait
        ));
        assert!(matches!(
            v.next_for(10, &mut m("8-0"), &mut 0, &mut 0),
            Next::Wait
        ));
    }

    #[test]
    fn an_outcome_is_acted_on_once() {
        let mut v = view(4, "5-0", [], 20);
        v.outcome = Outcome::TimedOut;
        let mut seen = 3;
        assert!(matches!(
            v.next_for(20, &mut m("5-0"), &mut 0, &mut seen),
            Next::Recheck
        ));
        assert!(matches!(
            v.next_for(20, &mut m("5-0"), &mut 0, &mut seen),
            Next::Wait
        ));
        v.version = 5;
        v.outcome = Outcome::Failed(Failure::Corrupt("x".into()));
        assert!(matches!(
            v.next_for(20, &mut m("5-0"), &mut 0, &mut seen),
            Next::Fail(_)
        ));
        assert!(matches!(
            v.next_for(20, &mut m("5-0"), &mut 0, &mut seen),
            Next::Wait
        ));
        // Entries that continue the cursor are taken whatever the outcome.
        v.version = 6;
        assert!(matches!(v.outcome, Outcome::Failed(_)));
        v.recent = vec![(21, Bytes::new())].into();
        v.pos = 21;
        assert_eq!(
            ids(v.next_for(20, &mut m("5-0"), &mut 0, &mut seen)),
            vec![21]
        );
    }

    #[test]
    fn ctl_ids_order_numerically() {
        assert!(ctl_order("10-0") > ctl_order("9-5"));
        assert!(ctl_order("9-10") > ctl_order("9-9"));
        assert_eq!(ctl_order("0-0"), (0, 0));
        assert_eq!(ctl_order("garbage"), (0, 0));
    }

    #[test]
    fn publishing_keeps_a_gap_free_window_ending_at_the_position() {
        let tail = Tail::default();
        let e = |r: std::ops::RangeInclusive<u64>| Some(r.map(|i| (i, Bytes::new())).collect());
        let recent = |t: &Tail| {
            t.view
                .borrow()
                .recent
                .iter()
                .map(|(i, _)| *i)
                .collect::<Vec<_>>()
        };
        tail.publish(e(1..=3), None, 4);
        assert_eq!(recent(&tail), vec![1, 2, 3]);
        tail.publish(e(4..=5), None, 4);
        assert_eq!(recent(&tail), vec![2, 3, 4, 5]);
        assert_eq!(tail.view.borrow().pos, 5);
        // Entries 6 and 7 were released before the read: nothing before 8 is kept.
        tail.publish(e(8..=9), None, 4);
        assert_eq!(recent(&tail), vec![8, 9]);
        // A close or a re-creation empties the window and moves the mark.
        let change = CtlNews {
            newest: "9-0".into(),
            releases_only: None,
        };
        tail.publish(e(10..=10), Some(change), 4);
        assert_eq!(recent(&tail), Vec::<u64>::new());
        assert_eq!(tail.view.borrow().pos, 10);
        assert_eq!(tail.view.borrow().ctl_mark, "9-0");
        tail.publish(None, None, 4);
        assert!(matches!(tail.view.borrow().outcome, Outcome::TimedOut));
        assert_eq!(tail.version(), 5);
    }

    #[test]
    fn releases_move_the_mark_for_readers_they_removed_nothing_from() {
        let tail = Tail::default();
        let e = |r: std::ops::RangeInclusive<u64>| Some(r.map(|i| (i, Bytes::new())).collect());
        let releases = |newest: &str, through| {
            Some(CtlNews {
                newest: newest.into(),
                releases_only: Some(through),
            })
        };
        tail.publish(e(1..=10), None, 64);
        // Released through 4, then through 7, while 11 and 12 came in.
        tail.publish(e(11..=12), releases("1-0", 4), 64);
        tail.publish(None, releases("2-0", 7), 64);
        let v = tail.view.borrow().clone();
        assert_eq!(v.ctl_mark, "2-0");
        assert_eq!(v.released, vec![(m("0-0"), 7), (m("1-0"), 7)]);
        let kept: Vec<u64> = v.recent.iter().map(|(id, _)| *id).collect();
        assert_eq!(
            kept,
            (8..=12).collect::<Vec<_>>(),
            "released entries leave the view"
        );
        // A reader at the first mark whose cursor is past the releases takes the new mark.
        let mut mark = m("0-0");
        assert_eq!(
            ids(v.next_for(9, &mut mark, &mut 0, &mut 0)),
            vec![10, 11, 12]
        );
        assert_eq!(mark, "2-0");
        // One whose next event was released reads the state (and finds the gap).
        let mut mark = m("0-0");
        assert!(matches!(
            v.next_for(5, &mut mark, &mut 0, &mut 0),
            Next::Recheck
        ));
        assert_eq!(mark, "0-0");
        // A close after them: every earlier mark must read the state again.
        let close = CtlNews {
            newest: "3-0".into(),
            releases_only: None,
        };
        tail.publish(None, Some(close), 64);
        let v = tail.view.borrow().clone();
        assert!(v.released.is_empty());
        let mut mark = m("2-0");
        assert!(matches!(
            v.next_for(12, &mut mark, &mut 0, &mut 0),
            Next::Recheck
        ));
    }

    fn entry(id: &str, field: &str, value: &str) -> redis::Value {
        let s = |t: &str| redis::Value::BulkString(t.as_bytes().to_vec());
        redis::Value::Array(vec![s(id), redis::Value::Array(vec![s(field), s(value)])])
    }

    #[test]
    fn ctl_news_trusts_releases_only_when_it_saw_every_entry() {
        let two = [entry("5-0", "r", "3"), entry("6-0", "r", "9")];
        let news = ctl_news(&two, 512).unwrap();
        assert_eq!(news.newest, "6-0");
        assert_eq!(news.releases_only, Some(9));
        // A close among them.
        let with_close = [entry("5-0", "r", "3"), entry("6-0", "c", "1")];
        assert_eq!(ctl_news(&with_close, 512).unwrap().releases_only, None);
        // As many as ctl keeps: one may have been trimmed unread.
        let full: Vec<_> = (0..CTL_KEEPS)
            .map(|i| entry(&format!("{i}-0"), "r", "1"))
            .collect();
        assert_eq!(ctl_news(&full, 512).unwrap().releases_only, None);
        // A full page of a small COUNT: more may follow.
        assert_eq!(ctl_news(&two, 2).unwrap().releases_only, None);
        assert!(ctl_news(&[redis::Value::Nil], 512).is_none());
    }

    #[test]
    fn the_window_follows_reads_and_releases_while_the_task_runs() {
        let tail = Tail::default();
        assert_eq!(tail.recent_window(), None, "no task");
        tail.view.send_modify(|v| {
            let v = Arc::make_mut(v);
            (v.live, v.floor, v.pos, v.caught_up) = (true, Some(1), 0, true);
        });
        assert_eq!(tail.recent_window(), Some((1, 0)));
        let e = |r: std::ops::RangeInclusive<u64>| Some(r.map(|i| (i, Bytes::new())).collect());
        tail.publish(e(1..=4), None, 4);
        assert_eq!(tail.recent_window(), None, "a full page: more may follow");
        tail.publish(e(5..=6), None, 4);
        assert_eq!(tail.recent_window(), Some((1, 6)));
        let releases = CtlNews {
            newest: "1-0".into(),
            releases_only: Some(5),
        };
        tail.publish(None, Some(releases), 4);
        assert_eq!(tail.recent_window(), Some((6, 6)));
        // Released past what the task read (it never saw 7 and 8): the head is at least 8.
        let releases = CtlNews {
            newest: "2-0".into(),
            releases_only: Some(8),
        };
        tail.publish(None, Some(releases), 4);
        assert_eq!(tail.recent_window(), Some((9, 8)));
        assert_eq!(tail.view.borrow().pos, 8);
        // A close: the floor is unknown until a reader reads the state at the new mark.
        let close = CtlNews {
            newest: "3-0".into(),
            releases_only: None,
        };
        tail.publish(None, Some(close), 4);
        assert_eq!(tail.recent_window(), None);
        tail.learn_floor("2-0", 9);
        assert_eq!(tail.recent_window(), None, "a state read at an older mark");
        tail.learn_floor("3-0", 9);
        assert_eq!(tail.recent_window(), Some((9, 8)));
        tail.fail(Failure::Corrupt("x".into()));
        assert_eq!(tail.recent_window(), None, "the task stopped");
    }

    #[test]
    fn a_reader_taking_the_mark_through_releases_moves_its_floor() {
        let mut v = view(1, "2-0", [], 10);
        v.released = vec![(m("1-0"), 7)];
        let (mut mark, mut floor) = (m("1-0"), 3);
        assert!(matches!(
            v.next_for(10, &mut mark, &mut floor, &mut 0),
            Next::Wait
        ));
        assert_eq!((mark.as_str(), floor), ("2-0", 8));
    }
}
