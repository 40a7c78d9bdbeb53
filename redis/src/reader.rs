//! A reader of one stream: the replay after its cursor, then the live tail, then the close reason.

use std::sync::Arc;

use bytes::Bytes;
use replay_ring::CloseReason;
use tokio::sync::watch;

use crate::backend::Counters;
use crate::codec;
use crate::error::Error;
use crate::page::read_page;
use crate::stream::{ReaderPlace, RedisStream};
use crate::tail::{Known, Next, Start, TailView};

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
    /// Its cursor, and what its last state read (or a tail view it took) said.
    known: Known,
    /// The first page, read atomically with the resume decision.
    first: Option<Vec<(u64, Bytes)>>,
    /// Whether the next read must re-read the stream's state (the READ script) before it may
    /// wait: see [`RedisReader::recv`] for when it may skip it.
    recheck: bool,
    /// Its subscription to the handle's shared tail (taken when it first waits).
    tail: Option<watch::Receiver<Arc<TailView>>>,
    /// The reader place this reader holds on its stream handle.
    pub(crate) place: Option<ReaderPlace>,
}

impl RedisReader {
    /// Decides the resume and reads the first page in one script.
    pub(crate) async fn start(stream: RedisStream, after: u64) -> Result<RedisReader, Error> {
        // The tail's versions around the state read order it against the shared read's (see
        // "When Redis loses ctl entries" in tail.rs).
        let sent_at = stream.tail.version();
        let page = read_page(&stream, after).await?;
        let read_at = stream.tail.version();
        Ok(RedisReader {
            known: Known {
                cursor: after,
                ctl_mark: page.ctl,
                floor: page.floor,
                head: page.head,
                closed: page.closed,
                seen: read_at,
                rechecked: u64::MAX,
                sent_at,
                read_at,
            },
            recheck: page.entries.len() >= stream.backend.config().read_batch,
            first: Some(page.entries),
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
        self.known.cursor
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
        (self.known.floor, self.known.head)
    }

    /// Waits for and returns the next events (or the close reason once everything was delivered).
    /// Never skips: if the next id was released meanwhile, returns [`Error::Gap`].
    ///
    /// # Errors
    /// [`Error::Gap`], [`Error::NotFound`] / [`Error::EpochChanged`] / [`Error::LogRolledBack`]
    /// (stream lost: deleted, expired, recreated, or Redis lost events this handle saw),
    /// [`Error::Corrupt`], [`Error::Unavailable`] (the cursor is kept; call again to continue).
    ///
    /// # Cancel safety
    /// Cancel safe: the cursor only moves when events are returned, so a cancelled call loses
    /// nothing; the next call continues from the same cursor. The blocking read a waiting call
    /// shares goes on for the handle's other readers, and for the next call.
    pub async fn recv(&mut self) -> Result<ReadItem, Error> {
        let item = self.next_item().await;
        let ended = match &item {
            Ok(ReadItem::Events(_)) => false,
            Ok(ReadItem::Closed(_)) => true,
            Err(e) => !e.is_transient(),
        };
        if ended {
            // Nothing more to wait for: let the shared read stop with the handle's other
            // readers. (A reader asked again subscribes again.)
            self.tail = None;
        }
        item
    }

    /// What [`recv`](Self::recv) returns.
    async fn next_item(&mut self) -> Result<ReadItem, Error> {
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
                let k = &mut self.known;
                let sent_at = self.stream.tail.version();
                let page = read_page(&self.stream, k.cursor).await?;
                (k.sent_at, k.read_at) = (sent_at, self.stream.tail.version());
                self.recheck = page.entries.len() >= self.stream.backend.config().read_batch;
                k.ctl_mark = page.ctl;
                k.head = page.head;
                k.floor = page.floor;
                k.closed = page.closed;
                self.stream.tail.learn_floor(&k.ctl_mark, k.floor);
                if !page.entries.is_empty() {
                    return self.deliver(page.entries);
                }
            }
            // Closed, and everything up to its final head delivered. (A close taken from the
            // shared tail's state read can come with a head past what the tail has read: the
            // reader then waits for the tail to read the rest.)
            let k = &self.known;
            if let Some(reason) = k.closed.as_ref().filter(|_| k.cursor >= k.head) {
                return Ok(ReadItem::Closed(reason.clone()));
            }
            // Caught up: wait until the log grows past the cursor or ctl signals a change.
            match self.wait().await? {
                Woken::Events(events) => return self.deliver(events),
                Woken::Closed(reason) => return Ok(ReadItem::Closed(reason)),
                Woken::Recheck => self.recheck = true,
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
        let mut expect = self.known.cursor + 1;
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
        self.known.cursor = expect - 1;
        Counters::bump(&self.stream.backend.shared.counters.pages_read);
        Ok(ReadItem::Events(events))
    }

    /// Waits on the handle's shared tail (`tail.rs`) until it has entries that continue the
    /// cursor, or the stream closed and the reader has every event, or the reader must re-read
    /// the state: ctl changed after its last state read in a way the tail cannot vouch for, the
    /// tail could not read the state itself, or the entries it needs are older than the tail
    /// keeps.
    async fn wait(&mut self) -> Result<Woken, Error> {
        let stream = &self.stream;
        let known = &mut self.known;
        let rx = self.tail.get_or_insert_with(|| stream.tail.subscribe());
        let start = Start {
            cursor: known.cursor,
            ctl_mark: &known.ctl_mark,
            floor: known.floor,
            at_head: known.cursor >= known.head,
        };
        stream.tail.ensure_running(stream, start);
        loop {
            let view = rx.borrow_and_update().clone();
            match view.next_for(known) {
                Next::Take(entries) => return Ok(Woken::Events(entries)),
                Next::Closed(reason) => return Ok(Woken::Closed(reason)),
                Next::Recheck => return Ok(Woken::Recheck),
                // The task gives up its blocking read and reads the state: the view that
                // follows has Redis's mark.
                Next::ViewMarkLost => stream.tail.want_settle(),
                Next::Fail(failure) => return Err(failure.into_error(stream)),
                Next::Wait => {}
            }
            if rx.changed().await.is_err() {
                // The handle owns the sender, so this cannot happen while the reader holds it.
                return Ok(Woken::Recheck);
            }
        }
    }
}

/// Why [`RedisReader::wait`] returned.
enum Woken {
    /// Entries that continue the cursor.
    Events(Vec<(u64, Bytes)>),
    /// The stream was closed with this reason after the reader's last event.
    Closed(CloseReason),
    /// The reader must read the state itself.
    Recheck,
}

/// Opening a reader.
impl RedisStream {
    /// Resumes after `after` (the client's `Last-Event-ID` seq), or from the head if `None` (a new
    /// subscription). The window check and the first page of the replay are one atomic script, so
    /// no release can slip in between. The reader yields exactly `after+1 ..= head`, then live
    /// events, then the close reason.
    ///
    /// # Errors
    /// [`Error::Gap`] (`after < floor - 1`), [`Error::AheadOfHead`] (`after > head`),
    /// [`Error::NotFound`] / [`Error::EpochChanged`] / [`Error::LogRolledBack`] (stream lost),
    /// [`Error::Corrupt`], [`Error::Unavailable`]; then (the cursor is judged first)
    /// [`Error::TooManyReaders`].
    ///
    /// # Cancel safety
    /// Cancel safe: read only; a reader opened by a cancelled call gives its place back.
    pub async fn resume(&self, after: Option<u64>) -> Result<RedisReader, Error> {
        let counters = &self.backend.shared.counters;
        let result = match after {
            Some(x) => RedisReader::start(self.clone(), x).await,
            None => {
                let head = self.state().await?.head;
                RedisReader::start(self.clone(), head).await
            }
        };
        let result = result.and_then(|mut reader| match self.readers.take() {
            Some(place) => {
                reader.place = Some(place);
                Ok(reader)
            }
            None => Err(Error::TooManyReaders {
                limit: self.readers.limit(),
            }),
        });
        match &result {
            Ok(r) if r.window().1 == r.last_id() => Counters::bump(&counters.resumes_noop),
            Ok(_) => Counters::bump(&counters.resumes),
            Err(Error::Gap { .. }) => Counters::bump(&counters.resumes_below_floor),
            Err(Error::AheadOfHead { .. }) => Counters::bump(&counters.resumes_ahead_of_head),
            Err(_) => Counters::bump(&counters.resumes_refused),
        }
        result
    }
}
