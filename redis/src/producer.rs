//! The single producer of a stream, fenced by a lease.
//!
//! Fencing protocol: the lease key holds the fencing token of the current producer and expires
//! unless renewed. Tokens come from a counter in the stream's meta key, so each acquisition gets a
//! larger one. The append script compares the caller's token with the lease key *in the same
//! atomic step* as the write, so a producer that lost its lease (paused past expiry, partitioned,
//! restarted, or replaced) is refused (`Fenced`) instead of interleaving its ids with the new
//! holder's. Appends carry the id they expect (the producer's own sequence); a resend of an append
//! whose reply was lost is recognised by that id, so retries are idempotent.

use std::collections::VecDeque;
use std::ops::RangeInclusive;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use redis::streams::StreamReadOptions;
use redis::AsyncCommands;
use replay_ring::CloseReason;

use crate::backend::Counters;
use crate::blocking_conn::BlockingConn;
use crate::codec::{self, Reply};
use crate::error::Error;
use crate::scripts;
use crate::stream::RedisStream;

/// The lease-holding producer of one stream. Not `Clone`: one producer per lease.
#[derive(Debug)]
pub struct RedisProducer {
    stream: RedisStream,
    token: String,
    /// The id the next append writes (head + 1 as far as this producer knows).
    next_id: u64,
    /// Appends (batches) whose outcome is not known yet, oldest first: one whose reply was lost,
    /// and any a caller cancelled before it went out. Each is sent (again) with the next ids
    /// before anything newer; the script recognises one that did arrive.
    pending: VecDeque<Arc<[Bytes]>>,
    /// The floor as of the last reply: `next_id - known_floor < capacity` means room for sure
    /// (only releases move the floor, and only up), so the trait's `try_append_with` can refuse a
    /// full window before building the payload without an extra round trip per append.
    pub(crate) known_floor: u64,
    /// Dedicated connection for blocking waits on ctl (created on first wait).
    pub(crate) wait_conn: BlockingConn,
    /// Dropped with the producer: its [`LeaseKeeper`]s then stop renewing.
    alive: Arc<()>,
}

impl RedisProducer {
    pub(crate) fn new(stream: RedisStream, token: String, head: u64) -> Self {
        RedisProducer {
            stream,
            token,
            next_id: head + 1,
            pending: VecDeque::new(),
            known_floor: 1,
            wait_conn: BlockingConn::default(),
            alive: Arc::new(()),
        }
    }

    /// The stream this producer writes.
    ///
    /// ```no_run
    /// # fn f(p: replay_ring_redis::RedisProducer) {
    /// println!("{}", p.stream().identity().stream.as_str());
    /// # }
    /// ```
    pub fn stream(&self) -> &RedisStream {
        &self.stream
    }

    /// This producer's fencing token (larger than every earlier producer's).
    ///
    /// ```no_run
    /// # fn f(p: replay_ring_redis::RedisProducer) {
    /// assert!(p.fencing_token() > 0);
    /// # }
    /// ```
    pub fn fencing_token(&self) -> u64 {
        self.token.parse().unwrap_or(0)
    }

    /// The id of the next event this producer writes: the oldest pending event's
    /// ([`has_pending`](Self::has_pending)), or else the next append's.
    ///
    /// ```no_run
    /// # fn f(p: replay_ring_redis::RedisProducer) {
    /// assert!(p.next_id() >= 1);
    /// # }
    /// ```
    pub fn next_id(&self) -> u64 {
        self.next_id
    }

    /// How many events are pending (their batches together).
    fn pending_events(&self) -> u64 {
        self.pending.iter().map(|batch| batch.len() as u64).sum()
    }

    /// Whether an append with an unknown outcome is waiting to be resent.
    ///
    /// ```no_run
    /// # fn f(p: replay_ring_redis::RedisProducer) {
    /// if p.has_pending() { /* the next append resends it first */ }
    /// # }
    /// ```
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Appends `payload` and returns its id: the window check, the lease check and the write are
    /// one atomic script. A refused append consumes no id. If an earlier append's reply was lost
    /// ([`Error::Unknown`]), that event is resent first (idempotently), then this one is appended.
    ///
    /// # Errors
    /// [`Error::Full`] (nothing appended; wait for a release, see [`append_wait`](Self::append_wait)),
    /// [`Error::Fenced`], [`Error::Closed`], [`Error::Unknown`] (reply lost: resent on the next
    /// call), [`Error::Conflict`], [`Error::OutOfSequence`], [`Error::IdsExhausted`],
    /// [`Error::TooLarge`] (past [`RedisConfig::max_payload_bytes`](crate::RedisConfig)),
    /// [`Error::NotFound`] / [`Error::EpochChanged`] / [`Error::LogRolledBack`] (stream lost),
    /// [`Error::Corrupt`], [`Error::OutOfMemory`], [`Error::Unavailable`]. If resending a pending event fails with
    /// [`Error::Unknown`] (its reply was lost again), `payload` joins the pending events and the
    /// error names the id it will get; if the resend is refused (any other error), that error is
    /// returned and `payload` was not appended.
    ///
    /// # Cancel safety
    /// Cancel safe in the same sense as a lost reply: a cancelled call may or may not have
    /// appended `payload`; the producer keeps it as pending ([`has_pending`](Self::has_pending))
    /// and resends it, idempotently, before the next append. Every cancelled call keeps its
    /// payload, in order: a caller that keeps cancelling appends while Redis does not answer
    /// holds each of them until [`resolve_pending`](Self::resolve_pending) (or the next append)
    /// has sent them; appending the same payload again would store it twice.
    pub async fn append(&mut self, payload: &[u8]) -> Result<u64, Error> {
        self.check_size(payload.len() as u64)?;
        let batch: Arc<[Bytes]> = Arc::new([Bytes::copy_from_slice(payload)]);
        self.append_owned(batch).await.map(|ids| *ids.end())
    }

    /// Appends several events in one atomic script (one round trip): all of them get consecutive
    /// ids, or none does. Returns the ids. The same rules as [`append`](Self::append) apply to the
    /// batch as a whole: a refusal consumes no id, a lost reply keeps the whole batch pending.
    ///
    /// Redis runs the script in one piece, and no other command on that Redis runs meanwhile, so
    /// a batch's size is how long every other client waits. Keep batches to thousands of events,
    /// not hundreds of thousands: a batch whose script, or the comparison its resend makes, takes
    /// longer than [`RedisConfig::response_timeout`](crate::RedisConfig) is stored but reported
    /// [`Error::Unknown`] on every send, until the lease lapses behind it and the producer is
    /// [`Error::Fenced`]. (On a 2-vCPU machine, 200,000 small events took longer than 300 ms.)
    ///
    /// # Errors
    /// As [`append`](Self::append); [`Error::Full`] if the window lacks room for the whole batch;
    /// [`Error::InvalidArgument`] for an empty batch.
    ///
    /// # Cancel safety
    /// As [`append`](Self::append).
    pub async fn append_batch<P: AsRef<[u8]>>(
        &mut self,
        payloads: &[P],
    ) -> Result<RangeInclusive<u64>, Error> {
        if payloads.is_empty() {
            return Err(Error::InvalidArgument("an empty batch"));
        }
        let largest = payloads.iter().map(|p| p.as_ref().len() as u64).max();
        self.check_size(largest.unwrap_or(0))?;
        let batch: Arc<[Bytes]> = payloads
            .iter()
            .map(|p| Bytes::copy_from_slice(p.as_ref()))
            .collect();
        self.append_owned(batch).await
    }

    /// Refuses a payload longer than Redis takes as one argument, before it is copied or queued:
    /// Redis would drop the connection under it, and under every resend of it.
    fn check_size(&self, bytes: u64) -> Result<(), Error> {
        let limit = self.stream.backend.config().max_payload_bytes as u64;
        if bytes > limit {
            return Err(Error::TooLarge { bytes, limit });
        }
        Ok(())
    }

    async fn append_owned(&mut self, batch: Arc<[Bytes]>) -> Result<RangeInclusive<u64>, Error> {
        // Past the last id even after the pending events: refused before it is queued, so no
        // error ever promises it an id that cannot exist.
        if self.next_id + self.pending_events() + batch.len() as u64 - 1 > crate::MAX_ID {
            return Err(Error::IdsExhausted);
        }
        // Pending before the first await until its outcome is known, so a call cancelled anywhere
        // (even while an earlier event is resent) leaves it to be sent like a lost reply.
        self.pending.push_back(batch.clone());
        while self.pending.len() > 1 {
            match self.resend_oldest().await {
                Ok(_) => {}
                // An earlier event's reply was lost again: this one stays queued behind it, as
                // `Error::Unknown` promises, under the id it will get once those are stored.
                Err(Error::Unknown { source, .. }) => {
                    return Err(Error::Unknown {
                        id: self.next_id + self.pending_events() - batch.len() as u64,
                        source,
                    })
                }
                Err(e) => {
                    // A definite refusal of an earlier event: this one never went out, and the
                    // caller is told so (the error), so it is not kept.
                    self.pending.pop_back();
                    return Err(e);
                }
            }
        }
        match self.send(self.next_id, &batch).await {
            Ok(ids) => {
                self.pending.clear();
                Ok(ids)
            }
            Err(Error::Unavailable(source)) => {
                // The request may have reached Redis: keep the payloads, resend them before the
                // next append. The ids stay reserved for them.
                Counters::bump(&self.stream.backend.shared.counters.unknown_outcomes);
                Err(Error::Unknown {
                    id: self.next_id,
                    source,
                })
            }
            Err(e) => {
                // A definite refusal: nothing was written.
                self.pending.clear();
                Err(e)
            }
        }
    }

    /// Resends every append whose reply was lost (or that a cancelled call left unsent), oldest
    /// first, and returns the last id (`None` if nothing was pending). The script recognises an
    /// event that did arrive and answers with its id instead of writing it again.
    ///
    /// # Errors
    /// As [`append`](Self::append); on [`Error::Unavailable`] the events stay pending.
    ///
    /// # Cancel safety
    /// Cancel safe: each event stays pending until a resend is answered.
    pub async fn resolve_pending(&mut self) -> Result<Option<u64>, Error> {
        let mut last = None;
        while !self.pending.is_empty() {
            last = Some(self.resend_oldest().await?);
        }
        Ok(last)
    }

    /// Sends the oldest pending append (again) and returns its last id; it stays pending unless
    /// the answer is that it is stored.
    async fn resend_oldest(&mut self) -> Result<u64, Error> {
        let batch = self.pending.front().expect("something pending").clone();
        match self.send(self.next_id, &batch).await {
            Ok(ids) => {
                self.pending.pop_front();
                Ok(*ids.end())
            }
            Err(Error::Unavailable(source)) => Err(Error::Unknown {
                id: self.next_id,
                source,
            }),
            Err(e) => Err(e),
        }
    }

    /// Like [`append`](Self::append), but when the window is full waits (up to `timeout`;
    /// `Duration::MAX` waits without a deadline) for a release to make room, woken by the release
    /// itself (no polling).
    ///
    /// # Errors
    /// As [`append`](Self::append); [`Error::Full`] once `timeout` has passed without room.
    ///
    /// # Cancel safety
    /// As [`append`](Self::append): a cancelled call leaves the payload pending at worst.
    pub async fn append_wait(&mut self, payload: &[u8], timeout: Duration) -> Result<u64, Error> {
        // `None`: no deadline (`Duration::MAX` and anything else past the clock's range).
        let deadline = Instant::now().checked_add(timeout);
        let mut mark: Option<String> = None;
        loop {
            match self.append(payload).await {
                Err(Error::Full {
                    floor,
                    head,
                    capacity,
                }) => {
                    let now = Instant::now();
                    if deadline.is_some_and(|d| now >= d) {
                        return Err(Error::Full {
                            floor,
                            head,
                            capacity,
                        });
                    }
                    match &mark {
                        // First refusal: note ctl's newest id, then try once more, so a release
                        // landing between that try and the blocking read still wakes us.
                        None => mark = Some(self.ctl_mark().await?),
                        Some(m) => {
                            let block = self.stream.backend.config().block;
                            let wait = deadline.map_or(block, |d| (d - now).min(block));
                            self.wait_ctl(m, wait).await?;
                            mark = None;
                        }
                    }
                }
                other => return other,
            }
        }
    }

    /// Extends the lease (and the stream's expiry). Call it at least every `lease / 3` while idle
    /// (or run a [`LeaseKeeper`]); appends renew the lease themselves.
    ///
    /// # Errors
    /// [`Error::Fenced`] if the lease was lost; [`Error::NotFound`], [`Error::Corrupt`],
    /// [`Error::Unavailable`], [`Error::OutOfMemory`].
    ///
    /// # Cancel safety
    /// Cancel safe: idempotent.
    pub async fn renew(&self) -> Result<(), Error> {
        renew(&self.stream, &self.token).await
    }

    /// A handle that renews this producer's lease from another task (see [`LeaseKeeper::run`]),
    /// for a producer that may sit idle longer than the lease: waiting for its first subscriber,
    /// for room in the window, or between rare events.
    ///
    /// ```no_run
    /// # async fn f(p: replay_ring_redis::RedisProducer) {
    /// let keeper = p.lease_keeper();
    /// tokio::spawn(keeper.run()); // ends once the lease is gone (closed, handed over, lost)
    /// # }
    /// ```
    pub fn lease_keeper(&self) -> LeaseKeeper {
        LeaseKeeper {
            stream: self.stream.clone(),
            token: self.token.clone(),
            producer: Arc::downgrade(&self.alive),
        }
    }

    /// Closes the stream with `reason`: readers get every event, then the reason. Gives up the
    /// lease. Closing twice keeps the first reason.
    ///
    /// An event still pending ([`has_pending`](Self::has_pending)) is resent first. If the window
    /// has no room for it (or ids are exhausted), it was never stored and has no id; the close
    /// goes ahead without it, since a closing stream will not make room again.
    ///
    /// # Errors
    /// [`Error::Closed`] (already closed, with the stored reason), [`Error::Fenced`],
    /// [`Error::LogRolledBack`] (Redis lost events this handle saw: nothing is closed), and the
    /// backend errors of [`append`](Self::append) from resending a pending event.
    ///
    /// # Cancel safety
    /// The close itself is one atomic script, but pending events are resent before it: a
    /// cancelled close may have stored some of them, and may or may not have closed the stream.
    /// The producer is consumed either way, and a lease left behind expires.
    pub async fn close(mut self, reason: CloseReason) -> Result<(), Error> {
        match self.resolve_pending().await {
            // Refused before it was written (the script answers `DUP` for an event that did
            // arrive): nothing to wait for once the stream ends.
            Err(Error::Full { .. } | Error::IdsExhausted) => self.pending.clear(),
            other => {
                other?;
            }
        }
        let s = &self.stream;
        // The script refuses to close a log shorter than this (`BEHIND`): the stream would end
        // without events clients may have seen.
        let seen = s.head_seen_before();
        let mut conn = s.backend.write_conn();
        let value: redis::Value = scripts::CLOSE_SCRIPT
            .key(&s.keys.meta)
            .key(&s.keys.lease)
            .key(&s.keys.ctl)
            .key(&s.keys.log)
            .arg(&self.token)
            .arg(codec::encode_reason(&reason))
            .arg(codec::encode_epoch(s.epoch))
            .arg(seen.to_string())
            .invoke_async(&mut conn)
            .await
            .map_err(|e| Error::from_redis(&s.id, e))?;
        let (mut reply, status) = Reply::new(&s.id, value)?;
        match status.as_str() {
            "OK" => Ok(()),
            // The lease is checked before the close is: a close that landed gave the lease up, so
            // its resend (the reply was lost) finds no holder. The stored reason tells.
            "FENCED" if conn.was_cut_off() => match s.state().await {
                Ok(state) if state.closed.as_ref() == Some(&reason) => Ok(()),
                _ => Err(self.fenced(&mut reply)),
            },
            "FENCED" => Err(self.fenced(&mut reply)),
            "CLOSED" => Err(Error::Closed(
                reply
                    .reason("closed")?
                    .unwrap_or_else(|| CloseReason::error("closed")),
            )),
            "BEHIND" => Err(Error::LogRolledBack {
                stream: s.id,
                seen,
                head: reply.id("head")?,
            }),
            other => Err(s.common_status(other, &mut reply)),
        }
    }

    /// Gives the lease up without closing the stream (e.g. a graceful hand-over to another
    /// replica). Does nothing if the lease is no longer ours. Appends still pending (their
    /// replies were lost: [`has_pending`](Self::has_pending)) are resent first, so that the
    /// successor continues after them; if that fails, the lease is given up all the same, and
    /// those events are stored or not as a crashed producer's are.
    ///
    /// # Errors
    /// [`Error::Unavailable`]; the lease then expires by itself.
    ///
    /// # Cancel safety
    /// Cancel safe: the lease expires by itself. A pending event whose resend is cancelled is
    /// stored or not, as a crashed producer's is.
    pub async fn release_lease(mut self) -> Result<(), Error> {
        // Best effort: a Redis that cannot take the resend will not take the release either,
        // and a fenced producer's release does nothing.
        let _ = self.resolve_pending().await;
        let s = &self.stream;
        let _: redis::Value = scripts::UNLEASE_SCRIPT
            .key(&s.keys.lease)
            .key(&s.keys.meta)
            .arg(&self.token)
            .arg(codec::encode_epoch(s.epoch))
            .invoke_async(&mut s.backend.write_conn())
            .await
            .map_err(|e| Error::from_redis(&s.id, e))?;
        Ok(())
    }

    /// One append attempt of `batch` as ids `first ..`.
    async fn send(&mut self, first: u64, batch: &[Bytes]) -> Result<RangeInclusive<u64>, Error> {
        let last = first + batch.len() as u64 - 1;
        if last > crate::MAX_ID {
            return Err(Error::IdsExhausted);
        }
        let s = &self.stream;
        let counters = &s.backend.shared.counters;
        let keys = [&s.keys.meta, &s.keys.log, &s.keys.lease, &s.keys.ctl];
        let (first_arg, lease) = (first.to_string(), s.lease_ms());
        let epoch = codec::encode_epoch(s.epoch);
        let head = [
            self.token.as_bytes(),
            first_arg.as_bytes(),
            lease.as_bytes(),
            epoch.as_bytes(),
        ];
        let args = head.into_iter().chain(batch.iter().map(|p| p.as_ref()));
        let seen = s.head_seen_before();
        let mut conn = s.backend.write_conn();
        let value = scripts::eval(&scripts::APPEND_SCRIPT, &mut conn, &keys, args)
            .await
            .map_err(|e| {
                if conn.was_cut_off() {
                    Error::from_redis_after_resend(&s.id, e)
                } else {
                    Error::from_redis(&s.id, e)
                }
            })?;
        let (mut reply, status) = Reply::new(&s.id, value)?;
        match status.as_str() {
            "OK" | "DUP" => {
                let got = reply.id("first")?..=reply.id("last")?;
                self.known_floor = reply.id("floor")?;
                if got != (first..=last) {
                    return Err(codec::corrupt(&s.id, "append answered other ids"));
                }
                if status == "DUP" {
                    Counters::bump(&counters.duplicates_resolved);
                } else {
                    counters
                        .appended
                        // Relaxed: statistics only (see Counters::bump).
                        .fetch_add(batch.len() as u64, std::sync::atomic::Ordering::Relaxed);
                }
                self.next_id = last + 1;
                if status == "OK" {
                    // The new head: every head seen before was lower.
                    s.check_head(seen, last)?;
                }
                Ok(got)
            }
            "FULL" => {
                Counters::bump(&counters.refused_full);
                let floor = reply.id("floor")?;
                self.known_floor = floor;
                Err(Error::Full {
                    floor,
                    head: reply.id("head")?,
                    capacity: reply.id("capacity")?,
                })
            }
            // The lease is checked before a resend is recognised: if the first attempt ran and
            // the lease lapsed before the resend, the event is stored all the same.
            "FENCED" if conn.was_cut_off() => Err(Error::Unavailable(
                crate::connection::may_have_run("the lease is no longer held".into()),
            )),
            "FENCED" => Err(self.fenced(&mut reply)),
            "CLOSED" => Err(Error::Closed(
                reply
                    .reason("closed")?
                    .unwrap_or_else(|| CloseReason::error("closed")),
            )),
            "CONFLICT" => Err(Error::Conflict {
                id: reply.id("id")?,
            }),
            "SEQ" => {
                let head = reply.id("head")?;
                // Below the id this producer's last append got: Redis lost acknowledged events.
                s.check_head(seen.max(first - 1), head)?;
                Err(Error::OutOfSequence { head, id: first })
            }
            "EXHAUSTED" => Err(Error::IdsExhausted),
            other => Err(s.common_status(other, &mut reply)),
        }
    }

    fn fenced(&self, reply: &mut Reply<'_>) -> Error {
        fenced(&self.stream, reply)
    }

    /// ctl's newest entry id ("0-0" if none).
    pub(crate) async fn ctl_mark(&self) -> Result<String, Error> {
        let s = &self.stream;
        let reply: redis::streams::StreamRangeReply = s
            .backend
            .connection()
            .xrevrange_count(&s.keys.ctl, "+", "-", 1)
            .await
            .map_err(|e| Error::from_redis(&s.id, e))?;
        Ok(reply
            .ids
            .first()
            .map(|e| e.id.clone())
            .unwrap_or_else(|| "0-0".to_owned()))
    }

    /// Blocks on ctl (dedicated connection) until an entry newer than `mark` or `wait` passes.
    /// Cancel safe: the read goes on, and the next wait for the same `mark` and `wait` takes its
    /// reply (`blocking_conn.rs`).
    pub(crate) async fn wait_ctl(&mut self, mark: &str, wait: Duration) -> Result<(), Error> {
        let s = &self.stream;
        let opts = StreamReadOptions::default().block(wait.as_millis().max(1) as usize);
        let xread = redis::Cmd::xread_options(&[&s.keys.ctl], &[mark], &opts);
        match self
            .wait_conn
            .query(&s.backend, &s.keys.ctl, &xread, || ())
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => Err(Error::from_redis(&s.id, e)),
        }
    }
}

fn fenced(stream: &RedisStream, reply: &mut Reply<'_>) -> Error {
    Counters::bump(&stream.backend.shared.counters.refused_fenced);
    let holder = reply.string("holder").ok().and_then(|h| h.parse().ok());
    Error::Fenced { holder }
}

/// The RENEW script for `token`.
async fn renew(s: &RedisStream, token: &str) -> Result<(), Error> {
    let value: redis::Value = scripts::RENEW_SCRIPT
        .key(&s.keys.lease)
        .key(&s.keys.meta)
        .key(&s.keys.log)
        .key(&s.keys.ctl)
        .arg(token)
        .arg(s.lease_ms())
        .arg(codec::encode_epoch(s.epoch))
        .invoke_async(&mut s.backend.write_conn())
        .await
        .map_err(|e| Error::from_redis(&s.id, e))?;
    let (mut reply, status) = Reply::new(&s.id, value)?;
    match status.as_str() {
        "OK" => Ok(()),
        "FENCED" => Err(fenced(s, &mut reply)),
        other => Err(s.common_status(other, &mut reply)),
    }
}

/// Renews a producer's lease while the producer is idle (from [`RedisProducer::lease_keeper`]).
///
/// It only extends a lease its producer still holds: it never takes one back, so fencing is
/// unchanged. A producer that loses its lease (expired during an outage, handed over, closed)
/// is refused at its next append exactly as without a keeper. Run it in the producer's process:
/// a paused or partitioned process then stops renewing too, and its lease expires. It stops once
/// its producer is dropped, so that a producer dropped without a close (the stream stays open in
/// Redis) leaves a lease that lapses and a standby can take, not one renewed for nobody.
#[derive(Debug, Clone)]
pub struct LeaseKeeper {
    stream: RedisStream,
    token: String,
    producer: Weak<()>,
}

impl LeaseKeeper {
    /// Renews the lease once, if its producer still holds it.
    ///
    /// # Errors
    /// As [`RedisProducer::renew`]: [`Error::Fenced`] if the lease was lost or handed over;
    /// [`Error::ProducerDropped`] once the producer is dropped (nothing is sent).
    ///
    /// # Cancel safety
    /// Cancel safe: idempotent.
    pub async fn renew(&self) -> Result<(), Error> {
        if self.producer.strong_count() == 0 {
            return Err(Error::ProducerDropped);
        }
        renew(&self.stream, &self.token).await
    }

    /// Renews the lease every third of [`RedisConfig::lease`](crate::RedisConfig::lease) until it
    /// is gone, and returns why: [`Error::ProducerDropped`] once the producer was dropped or
    /// consumed (by [`close`](RedisProducer::close) or
    /// [`release_lease`](RedisProducer::release_lease) too); [`Error::Fenced`] once another
    /// producer took the lease or it lapsed; [`Error::NotFound`] / [`Error::EpochChanged`] /
    /// [`Error::Corrupt`] for a lost stream. While Redis is unreachable it keeps trying at the
    /// same pace.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping it stops the renewals (the lease then lasts until its expiry, or
    /// the producer's next append).
    pub async fn run(self) -> Error {
        let period = (self.stream.backend.config().lease / 3).max(Duration::from_millis(1));
        loop {
            match self.renew().await {
                Ok(()) | Err(Error::Unavailable(_) | Error::OutOfMemory(_)) => {}
                Err(e) => return e,
            }
            tokio::time::sleep(period).await;
        }
    }
}

/// Taking the producer lease.
impl RedisStream {
    /// Takes the producer lease: only one producer per stream at a time. The lease lasts
    /// [`RedisConfig::lease`](crate::RedisConfig::lease), is extended by every append and by
    /// [`RedisProducer::renew`], and is given up by [`RedisProducer::close`] or
    /// [`RedisProducer::release_lease`].
    ///
    /// # Errors
    /// [`Error::LeaseHeld`] while another producer holds it; [`Error::Closed`] once the stream
    /// was closed (the lease is left alone); [`Error::NotFound`], [`Error::EpochChanged`],
    /// [`Error::LogRolledBack`], [`Error::Corrupt`], [`Error::Unavailable`],
    /// [`Error::OutOfMemory`].
    ///
    /// # Cancel safety
    /// Cancel safe when called again on the same handle (or a clone): if the call was cancelled,
    /// or failed without an answer from Redis ([`Error::Unavailable`]: a timeout, a dropped
    /// connection), after Redis granted the lease, the next call is recognised as the same
    /// acquisition and gets that lease; any other caller finds it held until it expires.
    pub async fn acquire_producer(&self) -> Result<RedisProducer, Error> {
        let lease_ms = self.backend.config().lease.as_millis().max(1).to_string();
        // The script refuses the lease on a log shorter than this (`BEHIND`): a producer must not
        // hand out ids again that clients may have seen with other events.
        let seen = self.head_seen_before();
        let claim = self.claims.take().await;
        let value: redis::Value = scripts::ACQUIRE_SCRIPT
            .key(&self.keys.meta)
            .key(&self.keys.lease)
            .key(&self.keys.log)
            .key(&self.keys.ctl)
            .arg(codec::encode_epoch(self.epoch))
            .arg(lease_ms)
            .arg(seen.to_string())
            .arg(claim.nonce())
            .invoke_async(&mut self.backend.write_conn())
            .await
            .map_err(|e| Error::from_redis(&self.id, e))?;
        // No error: Redis ran the script, and its answer below is final. (An error leaves the
        // claim with the handle, for the next acquisition to send again, and so does a cancel.)
        claim.answered();
        let (mut reply, status) = Reply::new(&self.id, value)?;
        match status.as_str() {
            "OK" => {
                let token = reply.string("token")?;
                let head = reply.id("head")?;
                self.check_head(seen, head)?;
                Ok(RedisProducer::new(self.clone(), token, head))
            }
            "CLOSED" => Err(Error::Closed(
                reply
                    .reason("closed")?
                    .unwrap_or_else(|| CloseReason::error("closed")),
            )),
            "BEHIND" => Err(Error::LogRolledBack {
                stream: self.id,
                seen,
                head: reply.id("head")?,
            }),
            "HELD" => {
                let holder = reply.string("holder")?;
                let ttl = reply.string("ttl")?;
                Err(Error::LeaseHeld {
                    holder: holder.parse().unwrap_or(0),
                    expires_in_ms: ttl.parse().unwrap_or(-1),
                })
            }
            other => Err(self.common_status(other, &mut reply)),
        }
    }

    /// Takes the producer lease as soon as it is free: a standby replica's call. While another
    /// producer holds the lease this tries again every tenth of a lease (sooner if the holder's
    /// lease would expire sooner, as Redis reports it), so it returns within a tenth of a lease of
    /// the holder giving the lease back ([`RedisProducer::release_lease`], a graceful shutdown),
    /// soon after a holder stopped renewing it (a crashed replica) — and never while a live holder
    /// keeps renewing. Each try is one script call. Bound the wait with `tokio::time::timeout` or a
    /// `select!` if the caller must.
    ///
    /// # Errors
    /// As [`acquire_producer`](Self::acquire_producer), except [`Error::LeaseHeld`], which is
    /// waited out. A transient error ([`Error::Unavailable`]) is returned, not retried.
    ///
    /// # Cancel safety
    /// As [`acquire_producer`](Self::acquire_producer): cancelled while waiting, nothing is held;
    /// cancelled just after Redis granted the lease, the next call on this handle gets it.
    ///
    /// ```no_run
    /// # async fn f(stream: replay_ring_redis::RedisStream) -> Result<(), replay_ring_redis::Error> {
    /// // Serve readers meanwhile; produce once the active replica is gone.
    /// let producer = stream.acquire_producer_when_free().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire_producer_when_free(&self) -> Result<RedisProducer, Error> {
        let lease = self.backend.config().lease;
        loop {
            match self.acquire_producer().await {
                Err(Error::LeaseHeld { expires_in_ms, .. }) => {
                    // A holder that shuts down gives the lease back early: look again after a
                    // tenth of a lease, or when the holder's lease would lapse if that is sooner.
                    let poll = (lease / 10).max(Duration::from_millis(1));
                    let wait = match u64::try_from(expires_in_ms) {
                        Ok(ms) if ms > 0 => Duration::from_millis(ms).min(poll),
                        // No TTL to go by (expiring this instant, or none reported).
                        _ => poll,
                    };
                    tokio::time::sleep(wait).await;
                }
                other => return other,
            }
        }
    }
}
