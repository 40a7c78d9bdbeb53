//! A reader of one stream: the replay after its cursor, then the live tail, then the close reason.

use std::sync::Arc;

use bytes::Bytes;
use replay_ring::CloseReason;
use tokio::sync::watch;

use crate::backend::Counters;
use crate::codec::{self, Reply};
use crate::error::Error;
use crate::scripts;
use crate::stream::{ReaderPlace, RedisStream};
use crate::tail::{Next, Start, TailView};

/// What [`RedisReader::recv`] yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadItem {
    /// The next events, in id order, gap-free from the reader's cursor + 1.
    Events(Vec<(u64, Bytes)>),
    /// Every event was delivered and the producer closed the stream with this reason. Further
    /// calls return it again.
    Closed(CloseReason),
}

/// Reads one stream from a cursor on: every id exactly once, in order, or a typed error. Readers
/// that have caught up wait on one blocking `XREAD` per stream handle (shared by its clones),
/// which runs on a dedicated connection of its own, so they never hold up the shared connection
/// and a thousand idle readers cost Redis one connection and one read per append, not a
/// thousand. A `recv` cancelled during that wait loses nothing.
#[derive(Debug)]
pub struct RedisReader {
    stream: RedisStream,
    /// Last id delivered (or the resume cursor).
    cursor: u64,
    /// The first page, read atomically with the resume decision.
    first: Option<Vec<(u64, Bytes)>>,
    /// ctl's newest id when the state was last read: a later close, release or re-creation
    /// wakes the XREAD.
    ctl_mark: String,
    /// Whether the next read must re-read the stream's state (the READ script) before it may
    /// block: see [`RedisReader::recv`] for when it may skip it.
    recheck: bool,
    closed: Option<CloseReason>,
    head: u64,
    floor: u64,
    /// Its subscription to the handle's shared tail (taken when it first waits).
    tail: Option<watch::Receiver<Arc<TailView>>>,
    /// The newest tail view whose outcome this reader has acted on.
    tail_seen: u64,
    /// The reader place this reader holds on its stream handle.
    pub(crate) place: Option<ReaderPlace>,
}

/// Result of one READ script run.
struct Page {
    floor: u64,
    head: u64,
    closed: Option<CloseReason>,
    ctl: String,
    entries: Vec<(u64, Bytes)>,
}

impl RedisReader {
    /// Decides the resume and reads the first page in one script.
    pub(crate) async fn start(stream: RedisStream, after: u64) -> Result<RedisReader, Error> {
        let page = read_page(&stream, after).await?;
        Ok(RedisReader {
            cursor: after,
            recheck: page.entries.len() >= stream.backend.config().read_batch,
            first: Some(page.entries),
            ctl_mark: page.ctl,
            closed: page.closed,
            head: page.head,
            floor: page.floor,
            tail_seen: stream.tail.version(),
            stream,
            tail: None,
            place: None,
        })
    }

    /// The last id delivered (the resume cursor before the first delivery): what the client's
    /// `Last-Event-ID` names.
    ///
    /// ```no_run
    /// # fn f(r: replay_ring_redis::RedisReader) {
    /// let last_event_id_seq = r.last_id();
    /// # }
    /// ```
    pub fn last_id(&self) -> u64 {
        self.cursor
    }

    /// Floor and head as of the reader's last read of the stream's state (at resume time, this is
    /// the window the decision was made against).
    ///
    /// ```no_run
    /// # fn f(r: replay_ring_redis::RedisReader) {
    /// let (floor, head) = r.window();
    /// assert!(floor <= head + 1);
    /// # }
    /// ```
    pub fn window(&self) -> (u64, u64) {
        (self.floor, self.head)
    }

    /// Waits for and returns the next events (or the close reason once everything was delivered).
    /// Never skips: if the next id was released meanwhile, returns [`Error::Gap`].
    ///
    /// # Errors
    /// [`Error::Gap`], [`Error::NotFound`] / [`Error::EpochChanged`] (stream lost: deleted,
    /// expired, recreated), [`Error::Corrupt`], [`Error::Unavailable`] (the cursor is kept; call
    /// again to continue).
    ///
    /// # Cancel safety
    /// Cancel safe: the cursor only moves when events are returned, so a cancelled call loses
    /// nothing; the next call continues from the same cursor. The blocking read a waiting call
    /// shares goes on for the handle's other readers, and for the next call.
    pub async fn recv(&mut self) -> Result<ReadItem, Error> {
        if let Some(first) = self.first.take() {
            if !first.is_empty() {
                return self.deliver(first);
            }
        }
        loop {
            // The state (epoch, floor, close reason, ctl's newest id) is re-read only when
            // something may have changed that the log alone does not show:
            // - after a full page (a replay: more may follow; the pipelined page costs no extra
            //   round trip);
            // - when the shared tail's read timed out (the stream may be gone: expired, deleted),
            //   or ctl changed after this reader's mark (a close, a re-creation, or a release of
            //   what it has not read), or the entries it needs are older than the tail keeps.
            // After entries from the tail, the reader goes straight back to waiting on it: why
            // that is sound is in `tail.rs`. That spares the tail one round trip per delivery.
            if self.recheck {
                let page = read_page(&self.stream, self.cursor).await?;
                self.recheck = page.entries.len() >= self.stream.backend.config().read_batch;
                self.ctl_mark = page.ctl;
                self.head = page.head;
                self.floor = page.floor;
                self.closed = page.closed;
                self.stream.tail.learn_floor(&self.ctl_mark, self.floor);
                if !page.entries.is_empty() {
                    return self.deliver(page.entries);
                }
            }
            // Everything up to the head as of the last state read was delivered.
            if let Some(reason) = &self.closed {
                return Ok(ReadItem::Closed(reason.clone()));
            }
            // Caught up: wait until the log grows past the cursor or ctl signals a change.
            match self.wait().await? {
                Some(events) => return self.deliver(events),
                None => self.recheck = true,
            }
        }
    }

    /// The reader as a [`Stream`](futures_core::Stream) of what [`recv`](Self::recv) returns, for
    /// `StreamExt` combinators and `select!` loops. It ends after yielding
    /// [`ReadItem::Closed`] or an error that ends the reader ([`Error::Gap`], a lost stream); a
    /// transient error ([`Error::is_transient`], e.g. Redis unavailable) is yielded and the stream
    /// goes on from the same cursor, so a consumer that wants to stop on it simply stops polling.
    ///
    /// ```no_run
    /// use futures_util::StreamExt;
    /// use replay_ring_redis::ReadItem;
    /// # async fn f(reader: replay_ring_redis::RedisReader) {
    /// let mut events = std::pin::pin!(reader.into_stream());
    /// while let Some(item) = events.next().await {
    ///     match item {
    ///         Ok(ReadItem::Events(batch)) => println!("{} events", batch.len()),
    ///         Ok(ReadItem::Closed(reason)) => println!("closed: {reason}"),
    ///         Err(e) => eprintln!("{e}"),
    ///     }
    /// }
    /// # }
    /// ```
    pub fn into_stream(self) -> impl futures_core::Stream<Item = Result<ReadItem, Error>> + Send {
        futures_util::stream::unfold(Some(self), |reader| async move {
            let mut reader = reader?;
            let item = reader.recv().await;
            let goes_on = match &item {
                Ok(ReadItem::Events(_)) => true,
                Ok(ReadItem::Closed(_)) => false,
                Err(e) => e.is_transient(),
            };
            Some((item, goes_on.then_some(reader)))
        })
    }

    /// Checks that `events` continue the cursor exactly, then advances it.
    fn deliver(&mut self, events: Vec<(u64, Bytes)>) -> Result<ReadItem, Error> {
        let mut expect = self.cursor + 1;
        for (id, _) in &events {
            if *id != expect {
                return Err(codec::corrupt(
                    &self.stream.id,
                    &format!(
                        "the log jumps from {} to {id}: an entry was removed outside this crate",
                        expect - 1
                    ),
                ));
            }
            expect += 1;
        }
        self.cursor = expect - 1;
        Counters::bump(&self.stream.backend.shared.counters.pages_read);
        Ok(ReadItem::Events(events))
    }

    /// Waits on the handle's shared tail (`tail.rs`) until it has entries that continue the
    /// cursor (returned), or the reader must re-read the state (`None`): ctl changed after its
    /// last state read, the tail's read timed out, or the entries it needs are older than what
    /// the tail keeps.
    async fn wait(&mut self) -> Result<Option<Vec<(u64, Bytes)>>, Error> {
        let stream = &self.stream;
        let rx = self.tail.get_or_insert_with(|| stream.tail.subscribe());
        let start = Start {
            cursor: self.cursor,
            ctl_mark: &self.ctl_mark,
            floor: self.floor,
            at_head: self.cursor >= self.head,
        };
        stream.tail.ensure_running(stream, start);
        loop {
            let view = rx.borrow_and_update().clone();
            let next = view.next_for(
                self.cursor,
                &mut self.ctl_mark,
                &mut self.floor,
                &mut self.tail_seen,
            );
            match next {
                Next::Take(entries) => return Ok(Some(entries)),
                Next::Recheck => return Ok(None),
                Next::Fail(failure) => return Err(failure.into_error(stream)),
                Next::Wait => {}
            }
            if rx.changed().await.is_err() {
                // The handle owns the sender, so this cannot happen while the reader holds it.
                return Ok(None);
            }
        }
    }
}

/// One page after `after`: the READ script's decision (window, epoch, close reason) with a
/// native `XRANGE` pipelined right behind it, in one round trip. Commands of another connection
/// may run between the two, so the page is accepted only if it continues the cursor exactly
/// (entries that exist were not released); otherwise the script runs again with the entries
/// inside it, which classifies the case atomically (gap, or entries missing from the log).
async fn read_page(stream: &RedisStream, after: u64) -> Result<Page, Error> {
    let s = stream;
    let seen = s.head_seen_before();
    let after_arg = after.min(crate::MAX_ID + 1).to_string();
    let count = s.backend.config().read_batch;
    let mut pipe = redis::pipe();
    pipe.cmd("EVALSHA_RO")
        .arg(scripts::READ_SCRIPT.hash())
        .arg(3)
        .arg(&s.keys.meta)
        .arg(&s.keys.log)
        .arg(&s.keys.ctl)
        .arg(codec::encode_epoch(s.epoch))
        .arg(&after_arg)
        .arg(0)
        .cmd("XRANGE")
        .arg(&s.keys.log)
        .arg(format!("(0-{after_arg}"))
        .arg("+")
        .arg("COUNT")
        .arg(count);
    let mut conn = s.backend.connection();
    let reply: Result<(redis::Value, redis::Value), _> = pipe.query_async(&mut conn).await;
    let (decision, range) = match reply {
        Ok(r) => r,
        Err(e)
            if e.is_io_error()
                || e.is_timeout()
                || e.is_connection_dropped()
                || e.is_connection_refusal() =>
        {
            return Err(Error::from_redis(&s.id, e));
        }
        // An error reply inside the pipeline (NOSCRIPT after a restart or failover, a corrupt
        // field, a wrong key type): the single-command path reloads the script and reports the
        // error with its own code.
        Err(_) => return read_page_atomic(s, after).await,
    };
    let mut page = decide_page(s, after, seen, decision)?;
    if let redis::Value::Array(raw) = range {
        page.entries = raw
            .into_iter()
            .map(|e| codec::entry(&s.id, e))
            .collect::<Result<_, _>>()?;
    }
    if after < page.head && page.entries.first().map(|(id, _)| *id) != Some(after + 1) {
        // Released or removed between the two commands (or never there): decide atomically.
        return read_page_atomic(s, after).await;
    }
    Ok(page)
}

/// The READ script with the page inside it: decision and entries in one atomic step.
async fn read_page_atomic(stream: &RedisStream, after: u64) -> Result<Page, Error> {
    let s = stream;
    let seen = s.head_seen_before();
    let after_arg = after.min(crate::MAX_ID + 1).to_string();
    let epoch = codec::encode_epoch(s.epoch);
    let count = s.backend.config().read_batch.to_string();
    let value = scripts::eval_read(
        &scripts::READ_SCRIPT,
        &mut s.backend.connection(),
        &[&s.keys.meta, &s.keys.log, &s.keys.ctl],
        [epoch.as_str(), after_arg.as_str(), count.as_str()],
    )
    .await
    .map_err(|e| Error::from_redis(&s.id, e))?;
    let page = decide_page(s, after, seen, value)?;
    if after < page.head && page.entries.first().map(|(id, _)| *id) != Some(after + 1) {
        return Err(codec::corrupt(
            &s.id,
            &format!(
                "entry {} is missing from the log (retained {}..={})",
                after + 1,
                page.floor,
                page.head
            ),
        ));
    }
    Ok(page)
}

/// Reads the READ script's reply: the decision, and the entries if the script read them.
/// `seen`: the handle's highest head before the command was sent ([`RedisStream::check_head`]).
fn decide_page(s: &RedisStream, after: u64, seen: u64, value: redis::Value) -> Result<Page, Error> {
    let (mut reply, status) = Reply::new(&s.id, value)?;
    match status.as_str() {
        "OK" => {
            let floor = reply.id("floor")?;
            let head = reply.id("head")?;
            s.check_head(seen, head)?;
            let closed = reply.reason("closed")?;
            let ctl = reply.string("ctl")?;
            let entries = reply.entries("entries")?;
            Ok(Page {
                floor,
                head,
                closed,
                ctl,
                entries,
            })
        }
        "AHEAD" => {
            let _floor = reply.id("floor")?;
            let head = reply.id("head")?;
            s.check_head(seen, head)?;
            Err(Error::AheadOfHead {
                requested: after,
                head,
            })
        }
        "GAP" => {
            let floor = reply.id("floor")?;
            let head = reply.id("head")?;
            s.check_head(seen, head)?;
            Err(Error::Gap {
                requested: after,
                floor,
                head,
            })
        }
        other => Err(s.common_status(other, &mut reply)),
    }
}
