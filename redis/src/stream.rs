//! One stream in Redis: its identity, window and releases. Any replica may hold a [`RedisStream`]
//! for the same stream; only the lease holder ([`RedisProducer`](crate::RedisProducer)) appends,
//! and readers open with [`RedisStream::resume`].

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use replay_ring::CloseReason;
use replay_ring_sse::{Epoch, StreamId, StreamIdentity, StreamState};

use crate::backend::{Counters, RedisBackend};
use crate::claim::Claims;
use crate::codec::{self, Keys, Reply};
use crate::error::Error;
use crate::scripts;
use crate::tail::Tail;

/// A stream's state in Redis at one instant (one atomic read).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedisStreamState {
    /// Name and epoch (the incarnation).
    pub identity: StreamIdentity,
    /// Window capacity (most retained events).
    pub capacity: u64,
    /// Oldest retained id (`head + 1` when nothing is retained).
    pub floor: u64,
    /// Newest id (0 before the first event).
    pub head: u64,
    /// The close reason, once the producer closed the stream.
    pub closed: Option<CloseReason>,
    /// The most recent fencing token handed out (0 if no producer ever held the lease).
    pub fence: u64,
}

impl RedisStreamState {
    /// The identity and window as the SSE layer's [`StreamState`], for
    /// [`decide`](replay_ring_sse::decide) and [`HttpResponse`](replay_ring_sse::HttpResponse).
    ///
    /// ```no_run
    /// # async fn f(s: replay_ring_redis::RedisStream) -> Result<(), replay_ring_redis::Error> {
    /// let state = s.state().await?.as_sse();
    /// assert!(state.floor <= state.head + 1);
    /// # Ok(()) }
    /// ```
    pub fn as_sse(&self) -> StreamState {
        StreamState {
            identity: self.identity,
            floor: self.floor,
            head: self.head,
        }
    }
}

/// A handle on one stream (one incarnation: name + epoch). Cheap to clone; clones share the
/// handle's reader places ([`with_max_readers`](Self::with_max_readers)).
#[derive(Debug, Clone)]
pub struct RedisStream {
    pub(crate) backend: RedisBackend,
    pub(crate) id: StreamId,
    pub(crate) keys: Keys,
    pub(crate) epoch: Epoch,
    pub(crate) capacity: u64,
    pub(crate) readers: Arc<ReaderPlaces>,
    /// The highest head this handle, its clones, producers and readers have seen in this
    /// incarnation: a head below it means Redis lost acknowledged events (a restore from an older
    /// snapshot, a failover to a lagging replica), and the handle reports
    /// [`Error::LogRolledBack`] instead of continuing on the shortened log.
    pub(crate) seen_head: Arc<AtomicU64>,
    /// The claim of this handle's (or a clone's) acquisition that got no answer, sent again with
    /// the next one.
    pub(crate) claims: Claims,
    /// The one blocking read that this handle's waiting readers (and its clones') share.
    pub(crate) tail: Arc<Tail>,
}

/// How many readers a handle (and its clones) may have open at once, and how many are.
#[derive(Debug)]
pub(crate) struct ReaderPlaces {
    limit: usize,
    open: AtomicUsize,
}

/// One taken reader place, given back when the reader is dropped.
#[derive(Debug)]
pub(crate) struct ReaderPlace(Arc<ReaderPlaces>);

impl ReaderPlaces {
    fn new(limit: usize) -> Arc<ReaderPlaces> {
        Arc::new(ReaderPlaces {
            limit,
            open: AtomicUsize::new(0),
        })
    }

    /// Takes a place, or `None` when all `limit` are taken.
    pub(crate) fn take(self: &Arc<Self>) -> Option<ReaderPlace> {
        // Relaxed: the count is the only data; no other memory is published through it.
        self.open
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < self.limit).then_some(n + 1)
            })
            .ok()
            .map(|_| ReaderPlace(self.clone()))
    }

    /// Readers open now.
    pub(crate) fn open(&self) -> usize {
        // Relaxed: a statistic (pairs with nothing).
        self.open.load(Ordering::Relaxed)
    }

    pub(crate) fn limit(&self) -> usize {
        self.limit
    }
}

impl Drop for ReaderPlace {
    fn drop(&mut self) {
        // Relaxed: see `ReaderPlaces::take`.
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

impl RedisStream {
    pub(crate) fn new(
        backend: RedisBackend,
        id: StreamId,
        keys: Keys,
        epoch: Epoch,
        capacity: u64,
    ) -> Self {
        RedisStream {
            backend,
            id,
            keys,
            epoch,
            capacity,
            readers: ReaderPlaces::new(usize::MAX),
            seen_head: Arc::new(AtomicU64::new(0)),
            claims: Claims::default(),
            tail: Arc::default(),
        }
    }

    /// The highest head seen so far, read *before* a command is sent: every value in it came from
    /// a reply to a command that ran earlier, so the command's own head may not be lower unless
    /// events were lost.
    pub(crate) fn head_seen_before(&self) -> u64 {
        // Relaxed: a monotonic number compared with Redis's answer; it orders no other memory.
        self.seen_head.load(Ordering::Relaxed)
    }

    /// Records `head` from a reply, or reports [`Error::LogRolledBack`] if it is below what was
    /// seen before the command was sent (`before`, from [`head_seen_before`](Self::head_seen_before)).
    pub(crate) fn check_head(&self, before: u64, head: u64) -> Result<(), Error> {
        if head < before {
            return Err(Error::LogRolledBack {
                stream: self.id,
                seen: before,
                head,
            });
        }
        // Relaxed: as in `head_seen_before`.
        self.seen_head.fetch_max(head, Ordering::Relaxed);
        Ok(())
    }

    /// Records that the log reached `head` (entries up to it were read).
    pub(crate) fn saw_head(&self, head: u64) {
        // Relaxed: as in `head_seen_before`.
        self.seen_head.fetch_max(head, Ordering::Relaxed);
    }

    /// This handle with at most `limit` readers open at once (across its clones); a resume past
    /// that is refused with [`Error::TooManyReaders`] (a limit of 0 refuses every resume). An SSE
    /// server caps its connections per stream here. Unlimited by default. (The handle's waiting
    /// readers share one Redis connection and one blocking read whatever their number.)
    ///
    /// ```no_run
    /// # fn f(s: replay_ring_redis::RedisStream) {
    /// let s = s.with_max_readers(64);
    /// assert_eq!(s.max_readers(), 64);
    /// # }
    /// ```
    #[must_use = "the limit is set on the returned handle; the original is consumed"]
    pub fn with_max_readers(mut self, limit: usize) -> RedisStream {
        self.readers = ReaderPlaces::new(limit);
        self
    }

    /// The most readers this handle (with its clones) may have open at once.
    ///
    /// ```no_run
    /// # fn f(s: replay_ring_redis::RedisStream) {
    /// println!("up to {} readers", s.max_readers());
    /// # }
    /// ```
    pub fn max_readers(&self) -> usize {
        self.readers.limit()
    }

    /// The window capacity (most unreleased events), as stored with the stream.
    ///
    /// ```no_run
    /// # fn f(s: replay_ring_redis::RedisStream) {
    /// assert!(s.window_capacity() >= 1);
    /// # }
    /// ```
    pub fn window_capacity(&self) -> u64 {
        self.capacity
    }

    /// The stream's name and the epoch this handle refers to.
    ///
    /// ```no_run
    /// # async fn f(s: replay_ring_redis::RedisStream) {
    /// let me = s.identity();
    /// println!("{}.{}", me.stream.as_str(), me.epoch);
    /// # }
    /// ```
    pub fn identity(&self) -> StreamIdentity {
        StreamIdentity::new(self.id, self.epoch)
    }

    /// Reads capacity, floor, head, close reason and fence in one atomic step.
    ///
    /// # Errors
    /// [`Error::NotFound`] (deleted or expired), [`Error::EpochChanged`] (recreated since this
    /// handle was made), [`Error::LogRolledBack`] (Redis lost events this handle saw),
    /// [`Error::Corrupt`], [`Error::Unavailable`].
    ///
    /// # Cancel safety
    /// Cancel safe: read only.
    pub async fn state(&self) -> Result<RedisStreamState, Error> {
        let before = self.head_seen_before();
        let state = read_state(&self.backend, &self.id, &self.keys).await?;
        if state.identity.epoch != self.epoch {
            return Err(Error::EpochChanged {
                stream: self.id,
                expected: self.epoch,
                current: Some(state.identity.epoch),
            });
        }
        self.check_head(before, state.head)?;
        Ok(state)
    }

    /// Releases every event with id `<= through` (`XTRIM MINID`; the floor is kept in the meta
    /// key). Idempotent and monotonic: releasing below the floor does nothing. Returns the floor
    /// and head afterwards. A producer waiting for space is woken.
    ///
    /// # Errors
    /// [`Error::AheadOfHead`] if `through > head`; [`Error::NotFound`], [`Error::Corrupt`],
    /// [`Error::Unavailable`], [`Error::OutOfMemory`].
    ///
    /// # Cancel safety
    /// Cancel safe: one atomic, idempotent script; call again after a cancel.
    pub async fn release_through(&self, through: u64) -> Result<(u64, u64), Error> {
        let through_arg = through.min(crate::MAX_ID + 1).to_string();
        let value: redis::Value = scripts::RELEASE_SCRIPT
            .key(&self.keys.meta)
            .key(&self.keys.log)
            .key(&self.keys.ctl)
            .arg(through_arg)
            .arg(codec::encode_epoch(self.epoch))
            .invoke_async(&mut self.backend.write_conn())
            .await
            .map_err(|e| Error::from_redis(&self.id, e))?;
        let (mut reply, status) = Reply::new(&self.id, value)?;
        match status.as_str() {
            "OK" => {
                let floor = reply.id("floor")?;
                let head = reply.id("head")?;
                Counters::bump(&self.backend.shared.counters.releases);
                Ok((floor, head))
            }
            "AHEAD" => {
                let _floor = reply.id("floor")?;
                let head = reply.id("head")?;
                Err(Error::AheadOfHead {
                    requested: through,
                    head,
                })
            }
            other => Err(self.common_status(other, &mut reply)),
        }
    }

    /// Deletes every key of this incarnation of the stream. Readers and resumes then get "stream
    /// lost". If the stream was already deleted, or created again (another epoch), nothing is
    /// deleted: the newer incarnation is not this handle's to remove. A stream whose meta key
    /// holds something other than a hash, or a hash whose epoch is not spelled as an epoch
    /// ([`Error::Corrupt`]), is deleted too: that is the way to recover it (without a handle:
    /// [`RedisBackend::purge`](crate::RedisBackend::purge)).
    ///
    /// # Errors
    /// [`Error::Unavailable`].
    ///
    /// # Cancel safety
    /// Cancel safe: one script, which deletes every key or none.
    pub async fn delete(&self) -> Result<(), Error> {
        let k = &self.keys;
        scripts::DELETE_SCRIPT
            .key(&k.meta)
            .key(&k.log)
            .key(&k.ctl)
            .key(&k.lease)
            .arg(codec::encode_epoch(self.epoch))
            .invoke_async::<redis::Value>(&mut self.backend.write_conn())
            .await
            .map(drop)
            .map_err(|e| Error::from_redis(&self.id, e))
    }

    /// The Redis key names (meta, log, ctl, lease), for operators.
    ///
    /// ```no_run
    /// # fn f(s: replay_ring_redis::RedisStream) {
    /// let [meta, log, _ctl, _lease] = s.key_names();
    /// assert!(meta.ends_with(":meta") && log.ends_with(":log"));
    /// # }
    /// ```
    pub fn key_names(&self) -> [&str; 4] {
        self.keys.all()
    }

    /// Maps the statuses every script may answer.
    pub(crate) fn common_status(&self, status: &str, reply: &mut Reply<'_>) -> Error {
        match status {
            "NOSTREAM" => Error::NotFound { stream: self.id },
            "LOST" => Error::EpochChanged {
                stream: self.id,
                expected: self.epoch,
                current: reply
                    .string("epoch")
                    .ok()
                    .and_then(|e| codec::decode_epoch(&e)),
            },
            other => codec::corrupt(&self.id, &format!("unexpected script status {other:?}")),
        }
    }

    /// The lease duration in milliseconds, as a script argument.
    pub(crate) fn lease_ms(&self) -> String {
        self.backend
            .config()
            .lease
            .max(Duration::from_millis(1))
            .as_millis()
            .to_string()
    }
}

/// One atomic read of the meta hash.
pub(crate) async fn read_state(
    backend: &RedisBackend,
    id: &StreamId,
    keys: &Keys,
) -> Result<RedisStreamState, Error> {
    let value = scripts::eval_read(
        &scripts::STATE_SCRIPT,
        &mut backend.connection(),
        &[&keys.meta],
        [""; 0],
    )
    .await
    .map_err(|e| Error::from_redis(id, e))?;
    let (mut reply, status) = Reply::new(id, value)?;
    if status == "NOSTREAM" {
        return Err(Error::NotFound { stream: *id });
    }
    if status != "OK" {
        return Err(codec::corrupt(id, "unexpected script status"));
    }
    let epoch = reply.string("epoch")?;
    let epoch = codec::decode_epoch(&epoch)
        .ok_or_else(|| codec::corrupt(id, "meta field epoch is not a hex epoch"))?;
    let capacity = reply.id("cap")?;
    let head = reply.id("head")?;
    let floor = reply.id("floor")?;
    let closed = reply.reason("closed")?;
    let fence = reply.id("fence")?;
    let _ttl = reply.id("ttl")?;
    if head > crate::MAX_ID || floor > head + 1 || floor == 0 || capacity == 0 {
        return Err(codec::corrupt(
            id,
            &format!("inconsistent window: floor {floor}, head {head}, capacity {capacity}"),
        ));
    }
    Ok(RedisStreamState {
        identity: StreamIdentity::new(*id, epoch),
        capacity,
        floor,
        head,
        closed,
        fence,
    })
}
