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
//! **When Redis loses ctl entries** (restored from an older snapshot, a failover to a lagging
//! replica), a mark may name an entry Redis no longer has, and waiting for a read to return with
//! it, or to move past it, could take until the next ctl write. The tail's view versions order
//! the reads of the task and of the readers: a reader notes the version just before it sends its
//! state read and just after the answer ([`Known::sent_at`], [`Known::read_at`]); the task notes
//! the version each read was sent at ([`TailView::issued`]) and since when the view has its mark
//! ([`TailView::mark_since`]). Redis answers one command at a time, so:
//! - (Rule A) a view whose read was sent after a reader's state read was answered
//!   (`issued > read_at`), yet has an older mark than the reader's, shows that Redis lost the
//!   reader's mark: the reader re-reads the state, once per view, and takes Redis's mark;
//! - (Rule B) a reader's state read sent after the view had its mark (`sent_at >= mark_since`)
//!   that finds an older one shows that Redis lost the view's mark: the reader asks the task to
//!   read the state ([`Tail::want_settle`]) and waits for the view that follows, instead of
//!   re-reading the state on every view as a reader with an older mark otherwise does.
//!
//! One case stays ambiguous: a task read sent before a reader's state read was answered, that
//! reaches Redis after Redis lost the reader's mark. It returns without that mark, like a read
//! Redis answered before the mark was written. The reader then waits for the task's next read,
//! which Rule A covers: it comes with the next append or ctl write, or when the block time runs
//! out. Telling the two apart would take a state read per such view, which without any loss would
//! cost one whenever a release lands while the task's read is on its way.
//!
//! **Releases.** Every release that moves the floor writes ctl, and the retention of an SSE
//! endpoint releases often. Were every ctl entry a reason to re-read the state, each release would
//! cost one state read per waiting reader. A release only matters to a reader whose next event it
//! removed, so the view remembers the marks it moved on from through releases alone
//! ([`TailView::released`]) and how far those releases went: a reader whose mark is one of them,
//! and whose cursor is at or past what was released since, takes the view's mark as its own. This
//! holds only if the task saw *every* ctl entry after its mark: ctl keeps its newest 16 entries,
//! so a read that returned 16 (or a full page) may have missed a close or a re-creation trimmed
//! away behind releases, and is treated like a close.
//!
//! **Closes, timeouts and reconnects: one state read for everyone.** After any other ctl change,
//! a read that timed out (the stream may have expired or been deleted, which writes nothing to
//! ctl) or a new connection (Redis may have restarted with less), the task reads the state itself
//! (the READ script after its position, as a reader would) and publishes it ([`Settled`]). A
//! reader whose mark is older takes that state instead of reading its own: the task and the reader
//! hold the same handle, so the script checked the reader's incarnation, and within one
//! incarnation ctl records only releases and the close. The reader takes it only if the floor then
//! had not passed its cursor; otherwise it reads the state itself and gets its `Gap`. If the task's
//! state read fails (the stream is lost, the log rolled back, Redis is unavailable), every reader
//! reads the state itself and reports its own error. So a close reaches 10,000 waiting readers
//! through one state read, not 10,000.
//!
//! **Lost events.** Entries the task reads raise the handle's highest seen head, so a later state
//! read (a reader's, a resume's or the task's) that finds a lower head reports `LogRolledBack`
//! instead of serving, from the view or from Redis, a log that lost what was delivered.
//!
//! **Lifetime.** The task runs while any reader that has waited holds its subscription, and stops
//! with the last one, dropping its connection. A task dropped without stopping (its runtime shut
//! down) marks the tail stopped and tells waiting readers to read the state themselves; the next
//! reader to wait starts another task on its own runtime.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use redis::RedisError;
use replay_ring::CloseReason;
use tokio::sync::{watch, Notify};

use crate::codec::Page;

/// Events in id order, as read from the log.
pub(crate) type Entries = Vec<(u64, Bytes)>;

/// The shared tail of one stream handle (and its clones).
#[derive(Debug)]
pub(crate) struct Tail {
    /// Whether the task runs. Readers subscribe and start the task under this lock, and the task
    /// stops under it, so a reader never waits on a task that has stopped.
    pub(crate) running: Mutex<Running>,
    pub(crate) view: watch::Sender<Arc<TailView>>,
    /// A reader found that Redis lost the view's mark: the task gives up its blocking read and
    /// reads the state.
    pub(crate) settle_wanted: Notify,
}

/// Whether the task runs, and which one.
#[derive(Debug, Default)]
pub(crate) struct Running {
    pub(crate) on: bool,
    /// Bumped by every start: a task dropped without stopping (its runtime shut down) marks the
    /// tail stopped only if no later task was started since.
    pub(crate) task: u64,
}

/// What the task has read, as every waiting reader sees it.
#[derive(Debug, Clone)]
pub(crate) struct TailView {
    /// Bumped with every new view: a reader acts on an outcome ([`Outcome::Unsettled`],
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
    /// The version the read behind this view was sent at (0 for a view no read made).
    pub(crate) issued: u64,
    /// The version since which `ctl_mark` has its value.
    pub(crate) mark_since: u64,
    /// What the task's own state read found at `ctl_mark` (kept through releases after it, which
    /// close nothing), if it made one: readers whose mark is older take it instead of each
    /// reading the state.
    pub(crate) settled: Option<Settled>,
}

/// What a state read by the task found, besides the floor ([`TailView::floor`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Settled {
    /// The head then.
    pub(crate) head: u64,
    /// The close reason, if the stream was closed.
    pub(crate) closed: Option<CloseReason>,
}

/// What a reader knows: its cursor, and what its last state read (or a view it took) said.
#[derive(Debug)]
pub(crate) struct Known {
    /// The last id delivered (or the resume cursor).
    pub(crate) cursor: u64,
    /// ctl's newest id at that state read: a later close, release or re-creation is newer.
    pub(crate) ctl_mark: String,
    pub(crate) floor: u64,
    pub(crate) head: u64,
    pub(crate) closed: Option<CloseReason>,
    /// The newest view version whose outcome the reader has acted on.
    pub(crate) seen: u64,
    /// The view version at which the reader last went to read the state because the view's mark
    /// differed from its own (`u64::MAX`: never).
    pub(crate) rechecked: u64,
    /// The view version just before its last state read was sent.
    pub(crate) sent_at: u64,
    /// The view version just after its last state read was answered.
    pub(crate) read_at: u64,
}

/// How the task's last read ended.
#[derive(Debug, Clone)]
pub(crate) enum Outcome {
    /// With entries or a ctl change, or the task has just started: it is reading again.
    Reading,
    /// Something may have changed that the task could not read the state for (its read timed
    /// out, so the stream may have expired or been deleted, which writes nothing to ctl; or ctl
    /// changed): every reader reads it itself.
    Unsettled,
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
    /// Redis lost the view's mark: have the task read the state ([`Tail::want_settle`]) and wait.
    ViewMarkLost,
    /// The task's read failed.
    Fail(Failure),
    /// The stream was closed, and the reader has every event.
    Closed(CloseReason),
}

impl TailView {
    /// What a reader that knows `known` does with this view. Updates what it knows: the view
    /// version it has acted on, and its mark (with floor, head and close reason) when it can take
    /// the view's: the view's mark follows its own through releases that removed nothing it still
    /// needs, or the task read the state at the view's mark and nothing the reader needs was
    /// released by then.
    pub(crate) fn next_for(&self, known: &mut Known) -> Next {
        let fresh = self.version > known.seen;
        known.seen = known.seen.max(self.version);
        let cursor = known.cursor;
        let released_since = self
            .released
            .iter()
            .find(|(mark, _)| *mark == known.ctl_mark)
            .map(|(_, through)| *through)
            .filter(|through| cursor >= *through);
        if let Some(through) = released_since {
            known.ctl_mark.clone_from(&self.ctl_mark);
            known.floor = known.floor.max(through + 1);
        }
        if known.ctl_mark != self.ctl_mark && ctl_order(&known.ctl_mark) < ctl_order(&self.ctl_mark)
        {
            // ctl changed after the reader's state read. The task's own state read at the
            // view's mark answers for it (same handle, so the same incarnation: what changed was
            // releases or a close), unless it released an event the reader still needs.
            match (&self.settled, self.floor) {
                (Some(settled), Some(floor)) if cursor + 1 >= floor && cursor <= self.pos => {
                    known.ctl_mark.clone_from(&self.ctl_mark);
                    known.floor = floor;
                    known.head = settled.head;
                    known.closed.clone_from(&settled.closed);
                }
                // The reader's state read was sent after the view had its mark, and found an
                // older one: Redis lost the view's mark. Reading the state again would find the
                // same, on every view; the task's own state read gives the view Redis's mark.
                // (Unless the task has stopped, or could not read the state itself: then the
                // reader's own read reports what is wrong.)
                _ if known.sent_at >= self.mark_since
                    && self.live
                    && matches!(self.outcome, Outcome::Reading) =>
                {
                    return Next::ViewMarkLost
                }
                // Otherwise read the state, once per view unless entries remain to be read: a
                // read just made that still gives an older mark would give it again.
                _ if known.rechecked == self.version && cursor >= self.pos => {}
                _ => {
                    known.rechecked = self.version;
                    return Next::Recheck;
                }
            }
        }
        if ctl_order(&known.ctl_mark) > ctl_order(&self.ctl_mark)
            && self.issued > known.read_at
            && known.rechecked != self.version
        {
            // The task's read was sent after the reader's state read was answered, and did not
            // return the reader's newer mark: Redis lost it, and no read would ever return with
            // it. The reader takes Redis's mark from a state read of its own (once per view: a
            // read that returned only part of a long run of ctl entries looks the same, and a
            // later view catches up).
            known.rechecked = self.version;
            return Next::Recheck;
        }
        if known.ctl_mark == self.ctl_mark {
            let first = self.recent.first().map_or(self.pos + 1, |(id, _)| *id);
            if cursor + 1 >= first && cursor < self.pos {
                let from = (cursor + 1 - first) as usize;
                return Next::Take(self.recent[from..].to_vec());
            }
            if cursor < self.pos {
                // Behind what the view keeps: those entries were read before; read them again.
                return Next::Recheck;
            }
            if let Some(reason) = known.closed.as_ref().filter(|_| cursor >= known.head) {
                return Next::Closed(reason.clone());
            }
        }
        // Nothing to take: the reader is at (or ahead of) the task's position, or it knows of a
        // newer ctl entry than the task, whose read (watching ctl from an older id) returns at
        // once with it.
        match &self.outcome {
            Outcome::Failed(f) if fresh => Next::Fail(f.clone()),
            Outcome::Unsettled if fresh => Next::Recheck,
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
            issued: 0,
            mark_since: 0,
            settled: None,
        };
        Tail {
            running: Mutex::new(Running::default()),
            view: watch::Sender::new(Arc::new(view)),
            settle_wanted: Notify::new(),
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

    /// Asks the task to read the state now: a reader found that Redis lost the view's mark
    /// ([`Next::ViewMarkLost`]). The task's blocking read, which watches ctl from that mark,
    /// could otherwise go on until its block time runs out while readers wait.
    pub(crate) fn want_settle(&self) {
        // Stores a permit if the task is not waiting for one right now.
        self.settle_wanted.notify_one();
    }

    /// The newest view version (a new reader acts only on outcomes after it).
    pub(crate) fn version(&self) -> u64 {
        self.view.borrow().version
    }

    /// A subscription to the views. The task keeps reading while any subscription is held.
    pub(crate) fn subscribe(&self) -> watch::Receiver<Arc<TailView>> {
        self.view.subscribe()
    }

    /// Stops the task if no reader is subscribed; returns whether it stopped.
    pub(crate) fn stop_if_unwatched(&self) -> bool {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        if self.view.receiver_count() == 0 {
            running.on = false;
            self.view.send_modify(|v| Arc::make_mut(v).live = false);
        }
        !running.on
    }

    /// Publishes a failed read and stops the task.
    pub(crate) fn fail(&self, failure: Failure) {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        self.view.send_modify(|v| {
            let mut next = TailView::clone(v);
            next.version += 1;
            next.outcome = Outcome::Failed(failure);
            next.live = false;
            *v = Arc::new(next);
        });
        running.on = false;
    }

    /// Publishes the task's own state read (`page`, read after `from`): the view takes its mark,
    /// floor, head and close reason, and its entries after what the view kept (less what was
    /// released).
    pub(crate) fn settle(&self, from: u64, page: Page, keep: usize, issued: u64) {
        self.view.send_modify(|v| {
            let mut next = TailView::clone(v);
            next.version += 1;
            next.issued = issued;
            next.outcome = Outcome::Reading;
            let mut recent: Entries = Vec::new();
            if v.pos == from {
                recent.extend(v.recent.iter().cloned());
            }
            recent.extend(page.entries);
            recent.retain(|(id, _)| *id >= page.floor);
            next.pos = recent.last().map_or(from, |(id, _)| *id).max(from);
            next.caught_up = next.pos >= page.head;
            let drop = recent.len().saturating_sub(keep);
            next.recent = Arc::from(recent.split_off(drop));
            if page.ctl != v.ctl_mark {
                next.mark_since = next.version;
            }
            next.ctl_mark = page.ctl;
            next.released.clear();
            next.floor = Some(page.floor);
            next.settled = Some(Settled {
                head: page.head,
                closed: page.closed,
            });
            *v = Arc::new(next);
        });
    }

    /// Publishes what one read returned: `log` entries (if any), what ctl had that is new (if
    /// anything), or neither when the block time ran out.
    pub(crate) fn publish(
        &self,
        log: Option<Entries>,
        ctl: Option<CtlNews>,
        keep: usize,
        issued: u64,
    ) {
        self.view.send_modify(|v| {
            let mut next = TailView::clone(v);
            next.version += 1;
            next.issued = issued;
            next.outcome = if log.is_none() && ctl.is_none() {
                Outcome::Unsettled
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
            if ctl.is_some() {
                next.mark_since = next.version;
            }
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
                    next.settled = None;
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

/// What a read found new in ctl.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct CtlNews {
    /// ctl's newest id.
    newest: String,
    /// The highest id released, if every new entry is a release and the read saw them all.
    pub(crate) releases_only: Option<u64>,
}

/// How many entries ctl keeps (`XADD … MAXLEN 16` in `scripts.rs`).
const CTL_KEEPS: usize = 16;

/// How many marks a view remembers that its own follows through releases alone.
const MARKS_KEPT: usize = 16;

/// Reads ctl's new entries (each `[id, [field, value, …]]`): its newest id, and whether they are
/// all releases (`r <through>`, written by the RELEASE script) and all there were. Fewer entries
/// than ctl keeps and than the read asked for means none was trimmed unread.
pub(crate) fn ctl_news(entries: &[redis::Value], count: usize) -> Option<CtlNews> {
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
mod tests;
