//! The store's event log on Redis Streams (feature `redis`): every event a stream stores is also
//! appended, with the same id, to a Redis stream through `replay-ring-redis` before any
//! connection may send it, so any replica can replay it.
//!
//! The in-process ring stays the stream's window on the replica that owns the MCP session: it
//! assigns the ids, applies backpressure and retention, and feeds that replica's connections
//! without a copy. Redis holds the same events as the log of record for resumes that land
//! elsewhere (`RingEventStore::remote_resume`, in `remote.rs`). A connection on the owning replica
//! is never handed an event before Redis acknowledged it (the *durable* mark, `Gate` in
//! `gate.rs`).
//!
//! Names: the store's stream `s7` of store epoch `9f3a2c1e` is the Redis stream `9f3a2c1e-s7`
//! (keys `<prefix>:{9f3a2c1e-s7}:…`, one hash tag per stream). Wire ids keep the store's format
//! `s7.9f3a2c1e.<seq>`, so any replica derives the Redis stream from a `Last-Event-ID`. Each name
//! is created once, by the one process whose store carries that epoch: a Redis stream that is
//! gone (expired, flushed, lost in a failover) is never created again under the same name, and a
//! cursor naming it is answered `404 stream_lost`.

use std::sync::Arc;

use parking_lot::Mutex;
use redis::AsyncCommands;
use replay_ring::CloseReason;
use replay_ring_redis::{
    Error as RedisError, LeaseKeeper, RedisBackend, RedisConfig, RedisProducer, RedisStream,
};
use replay_ring_sse::{Epoch, StreamId};
use rmcp::model::RequestId;
use rmcp::transport::streamable_http_server::session::ServerSseMessage;
use serde_json::{json, Value};

use crate::gate::Gate;

/// How every error of the event log begins. rmcp passes a failed store call on as the text of a
/// plain-text 500, and the guard recognises the event log's by it.
pub(crate) const EVENT_LOG: &str = "event log on Redis";

/// The connection to Redis a [`RingEventStore`](crate::RingEventStore) keeps its event log on.
/// Cheap to clone.
///
/// ```no_run
/// use replay_ring_mcp::{RedisEventLog, RingEventStore, StoreConfig};
/// use replay_ring_redis::RedisConfig;
///
/// # async fn run() -> Result<(), replay_ring_redis::Error> {
/// let log = RedisEventLog::connect("redis://127.0.0.1:6379/", RedisConfig::default()).await?;
/// let store = RingEventStore::with_redis(StoreConfig::default(), log);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisEventLog {
    pub(crate) backend: RedisBackend,
}

impl std::fmt::Debug for RedisEventLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisEventLog")
            .field("backend", &self.backend)
            .finish_non_exhaustive()
    }
}

impl RedisEventLog {
    /// Connects to `url` (`redis://host:port/db`). `config.stream_ttl` is how long a stream's
    /// events stay in Redis after its last write (then a resume anywhere is `404 stream_lost`);
    /// `config.lease` how long a stream whose replica died stays open before other replicas
    /// end its resumed connections with an explicit error.
    ///
    /// # Errors
    /// `InvalidArgument` for a bad URL or configuration, `Unavailable` when Redis cannot be
    /// reached.
    ///
    /// # Cancel safety
    /// Cancel safe: nothing is created on the server.
    pub async fn connect(url: &str, config: RedisConfig) -> Result<Self, RedisError> {
        let backend = RedisBackend::connect(url, config).await?;
        Ok(RedisEventLog { backend })
    }

    /// The backend (streams, counters).
    pub fn backend(&self) -> &RedisBackend {
        &self.backend
    }

    /// The Redis stream name of the store's stream `stream` under store epoch `epoch`.
    pub(crate) fn name(epoch: Epoch, stream: &StreamId) -> Result<StreamId, String> {
        StreamId::new(&format!("{epoch}-{stream}")).map_err(|e| e.to_string())
    }

    /// Creates the Redis stream of a new store stream and takes its producer lease.
    pub(crate) async fn create(
        &self,
        epoch: Epoch,
        stream: &StreamId,
        capacity: usize,
    ) -> Result<(RedisStream, RedisProducer), String> {
        let name = Self::name(epoch, stream)?;
        let fail = |e: RedisError| format!("{EVENT_LOG}: {e}");
        let created = self
            .backend
            .create(&name, capacity as u64)
            .await
            .map_err(fail)?;
        let producer = created.acquire_producer().await.map_err(fail)?;
        if producer.next_id() != 1 {
            // The name exists with events: another process uses this store epoch.
            return Err(format!("{EVENT_LOG}: stream {name} already holds events"));
        }
        Ok((created, producer))
    }

    /// Opens the Redis stream behind a wire id of another replica (or of a stream this replica
    /// has forgotten).
    pub(crate) async fn open(
        &self,
        epoch: Epoch,
        stream: &StreamId,
    ) -> Result<RedisStream, RedisError> {
        let name =
            Self::name(epoch, stream).map_err(|_| RedisError::NotFound { stream: *stream })?;
        self.backend.open(&name).await
    }

    /// A key of this crate's next to `stream`'s own (the same hash tag): `<base>:<suffix>`.
    fn stream_key(stream: &RedisStream, suffix: &str) -> String {
        let [meta, ..] = stream.key_names();
        let base = meta.strip_suffix(":meta").unwrap_or(meta);
        format!("{base}:{suffix}")
    }

    fn owner_key(stream: &RedisStream) -> String {
        Self::stream_key(stream, "owner")
    }

    /// Records which MCP session owns `stream` (and which JSON-RPC request it answers), for the
    /// session check of resumes on other replicas. Expires with the stream's keys.
    pub(crate) async fn set_owner(
        &self,
        stream: &RedisStream,
        session: &str,
        request: Option<&RequestId>,
    ) -> Result<(), String> {
        let value = json!({ "session": session, "request": request }).to_string();
        let ttl = self.backend.config().stream_ttl;
        let key = Self::owner_key(stream);
        // The backend's connection: every owner-key command here may run twice (SET of one
        // value, DEL, GET, EXISTS), as `SharedConnection` requires.
        let mut conn = self.backend.connection();
        let result: Result<(), redis::RedisError> = if ttl.is_zero() {
            conn.set(&key, value).await
        } else {
            conn.pset_ex(&key, value, ttl.as_millis() as u64).await
        };
        result.map_err(|e| format!("{EVENT_LOG}: {e}"))
    }

    /// Forgets the owner of `stream` (its MCP session was deleted): resumes elsewhere are then
    /// answered as for an unknown session.
    pub(crate) async fn clear_owner(&self, stream: &RedisStream) -> Result<(), String> {
        let mut conn = self.backend.connection();
        conn.del(Self::owner_key(stream))
            .await
            .map_err(|e: redis::RedisError| format!("{EVENT_LOG}: {e}"))
    }

    fn session_gone_key(&self, session: &str) -> String {
        let prefix = &self.backend.config().key_prefix;
        format!("{prefix}:mcp-session-gone:{session}")
    }

    /// Records that the MCP session `session` was deleted, for as long as its streams may stay
    /// in Redis (`stream_ttl`; for good if that is zero): a resume of any of them, on any replica,
    /// is then refused as one of an unknown session, also once the replica that held a stream has
    /// forgotten it (and so could not clear its owner).
    pub(crate) async fn mark_session_gone(&self, session: &str) -> Result<(), String> {
        let ttl = self.backend.config().stream_ttl;
        let key = self.session_gone_key(session);
        let mut conn = self.backend.connection();
        let result: Result<(), redis::RedisError> = if ttl.is_zero() {
            conn.set(&key, 1).await
        } else {
            conn.pset_ex(&key, 1, ttl.as_millis() as u64).await
        };
        result.map_err(|e| format!("{EVENT_LOG}: {e}"))
    }

    /// Whether the MCP session `session` was deleted ([`mark_session_gone`](Self::mark_session_gone)).
    pub(crate) async fn session_gone(&self, session: &str) -> Result<bool, RedisError> {
        let mut conn = self.backend.connection();
        conn.exists(self.session_gone_key(session))
            .await
            .map_err(RedisError::Unavailable)
    }

    /// The MCP session that owns `stream` and the request it answers, if recorded.
    pub(crate) async fn owner(&self, stream: &RedisStream) -> Result<Option<Owner>, RedisError> {
        let mut conn = self.backend.connection();
        let value: Option<String> = conn
            .get(Self::owner_key(stream))
            .await
            .map_err(RedisError::Unavailable)?;
        let Some(v) = value.and_then(|v| serde_json::from_str::<Value>(&v).ok()) else {
            return Ok(None);
        };
        let Some(session) = v["session"].as_str() else {
            return Ok(None);
        };
        Ok(Some(Owner {
            session: session.to_owned(),
            request: serde_json::from_value(v["request"].clone()).ok(),
        }))
    }

    fn readers_key(stream: &RedisStream) -> String {
        Self::stream_key(stream, "readers")
    }

    /// Records that the connection `token` that this replica serves from Redis has written
    /// `stream` through `through`, with its report count `beat` (which moves at every report, so
    /// the owning replica can tell a live reader from one whose replica died). A hash next to
    /// the stream's keys, field `token`, value `<through>:<beat>`; it expires with the stream.
    pub(crate) async fn report_reader(
        &self,
        stream: &RedisStream,
        token: &str,
        through: u64,
        beat: u64,
    ) -> Result<(), RedisError> {
        let key = Self::readers_key(stream);
        let ttl = self.backend.config().stream_ttl;
        let mut pipe = redis::pipe();
        pipe.hset(&key, token, format!("{through}:{beat}")).ignore();
        if !ttl.is_zero() {
            pipe.pexpire(&key, ttl.as_millis() as i64).ignore();
        }
        // Both commands may run twice (the same field value, the same expiry).
        let mut conn = self.backend.connection();
        pipe.query_async::<()>(&mut conn)
            .await
            .map_err(RedisError::Unavailable)
    }

    /// Removes the reports `fields` (connections that ended, seen dead, or fields that are not
    /// reports at all).
    pub(crate) async fn forget_readers(
        &self,
        stream: &RedisStream,
        fields: &[Vec<u8>],
    ) -> Result<(), RedisError> {
        if fields.is_empty() {
            return Ok(());
        }
        let mut conn = self.backend.connection();
        conn.hdel(Self::readers_key(stream), fields)
            .await
            .map_err(RedisError::Unavailable)
    }

    /// The reports of every connection other replicas serve `stream` to
    /// ([`report_reader`](Self::report_reader)), and the fields that are not reports (written
    /// behind our back: a name or a value that does not parse), for removal. A key of another
    /// type in the hash's place is deleted (the name is this crate's) and read as no reports.
    pub(crate) async fn remote_readers(
        &self,
        stream: &RedisStream,
    ) -> Result<ReaderReports, RedisError> {
        let key = Self::readers_key(stream);
        let mut conn = self.backend.connection();
        let fields: Vec<(Vec<u8>, Vec<u8>)> = match conn.hgetall(&key).await {
            Ok(fields) => fields,
            Err(e) if e.code() == Some("WRONGTYPE") => {
                let _: Result<(), _> = conn.del(&key).await;
                Vec::new()
            }
            Err(e) => return Err(RedisError::Unavailable(e)),
        };
        let mut read = ReaderReports::default();
        for (name, value) in fields {
            match parse_report(&name, &value) {
                Some(report) => read.reports.push(report),
                None => read.junk.push(name),
            }
        }
        Ok(read)
    }

    /// Whether `stream`'s producer is gone: no replica held its lease over a whole renewal
    /// interval. A live producer's lease can be missing for a moment: one that lapsed while Redis
    /// did not answer is taken back by its replica's next maintenance (every third of the
    /// lease), so a missing lease is looked at again after that interval and two commands' time.
    pub(crate) async fn producer_gone(&self, stream: &RedisStream) -> Result<bool, RedisError> {
        if self.has_producer(stream).await? {
            return Ok(false);
        }
        let config = self.backend.config();
        tokio::time::sleep(config.lease / 3 + 2 * config.response_timeout).await;
        Ok(!self.has_producer(stream).await?)
    }

    /// Whether a producer holds `stream`'s lease right now.
    async fn has_producer(&self, stream: &RedisStream) -> Result<bool, RedisError> {
        let [.., lease] = stream.key_names();
        let mut conn = self.backend.connection();
        conn.exists(lease).await.map_err(RedisError::Unavailable)
    }
}

/// What one connection served from Redis by another replica last reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReaderReport {
    pub(crate) token: String,
    pub(crate) through: u64,
    pub(crate) beat: u64,
}

/// One read of a stream's reports.
#[derive(Debug, Default)]
pub(crate) struct ReaderReports {
    pub(crate) reports: Vec<ReaderReport>,
    /// Fields that are not reports.
    pub(crate) junk: Vec<Vec<u8>>,
}

/// A report field: a UTF-8 token, and `<through>:<beat>`.
fn parse_report(name: &[u8], value: &[u8]) -> Option<ReaderReport> {
    let token = std::str::from_utf8(name).ok()?;
    let (through, beat) = std::str::from_utf8(value).ok()?.split_once(':')?;
    Some(ReaderReport {
        token: token.to_owned(),
        through: through.parse().ok()?,
        beat: beat.parse().ok()?,
    })
}

/// Who a stream in Redis belongs to.
#[derive(Debug)]
pub(crate) struct Owner {
    pub(crate) session: String,
    pub(crate) request: Option<RequestId>,
}

/// The serialized form of an event in Redis: the `ServerSseMessage` without its id (the id is
/// the entry's), as JSON: `{"message": <JSON-RPC message or null>, "retry": <ms or null>}`.
pub(crate) fn encode(event: &ServerSseMessage) -> Vec<u8> {
    let message = event
        .message
        .as_deref()
        .and_then(|m| serde_json::to_value(m).ok())
        .unwrap_or(Value::Null);
    // Rounded up as `Frame::retry` does: under a millisecond is not "reconnect at once".
    let retry = event
        .retry
        .map(|r| u64::try_from(r.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX));
    json!({ "message": message, "retry": retry })
        .to_string()
        .into_bytes()
}

/// A stream's lease, renewable without its writer: the writer keeps the keeper of the lease it
/// holds here, and the store's maintenance renews through it while the writer is busy (a push
/// waiting for room holds the writer for up to the backpressure bound, longer than a lease).
#[derive(Debug, Clone, Default)]
pub(crate) struct Lease(Arc<Mutex<Option<LeaseKeeper>>>);

impl Lease {
    fn hold(&self, producer: Option<&RedisProducer>) {
        *self.0.lock() = producer.map(RedisProducer::lease_keeper);
    }

    /// Renews the lease if the writer still holds one (failures: the next renewal tries again).
    pub(crate) async fn renew(&self) {
        let keeper = self.0.lock().clone();
        if let Some(keeper) = keeper {
            let _ = keeper.renew().await;
        }
    }
}

/// The Redis side of one stream, owned by the stream's writer.
pub(crate) struct LogWriter {
    log: RedisEventLog,
    stream: RedisStream,
    producer: Option<RedisProducer>,
    /// Everything up to here was released in Redis too.
    released: u64,
    gate: Gate,
    lease: Lease,
    /// The last append failed with its reply lost: Redis may hold it, or store it on a resend.
    reply_lost: bool,
}

impl LogWriter {
    pub(crate) fn new(
        log: RedisEventLog,
        stream: RedisStream,
        producer: RedisProducer,
        gate: Gate,
        lease: Lease,
    ) -> Self {
        lease.hold(Some(&producer));
        LogWriter {
            log,
            stream,
            producer: Some(producer),
            released: 0,
            gate,
            lease,
            reply_lost: false,
        }
    }

    pub(crate) fn stream(&self) -> &RedisStream {
        &self.stream
    }

    pub(crate) fn log(&self) -> &RedisEventLog {
        &self.log
    }

    /// Appends `event` with id `seq` (the ring's), after releasing in Redis what the ring has
    /// released (so Redis, whose window has the ring's capacity, has room). On success the id
    /// becomes durable: connections may send it.
    ///
    /// # Errors
    /// Redis refused or could not be reached: the caller ends the stream explicitly.
    pub(crate) async fn append(
        &mut self,
        seq: u64,
        event: &ServerSseMessage,
        ring_floor: u64,
    ) -> Result<(), String> {
        self.release(ring_floor.saturating_sub(1)).await?;
        let payload = encode(event);
        let producer = self
            .producer
            .as_mut()
            .ok_or_else(|| format!("{EVENT_LOG}: the stream is closed"))?;
        let appended = match producer.append(&payload).await {
            // The lease lapsed (no append or renewal for a whole lease): nobody else can produce
            // for this name (it is this process's), so take it again, if Redis kept every event.
            Err(RedisError::Fenced { .. }) => {
                let again = self.stream.acquire_producer().await;
                match again {
                    Ok(p) if p.next_id() == seq => {
                        self.lease.hold(Some(&p));
                        let p = self.producer.insert(p);
                        p.append(&payload).await
                    }
                    Ok(p) => Err(RedisError::OutOfSequence {
                        head: p.next_id() - 1,
                        id: seq,
                    }),
                    Err(e) => Err(e),
                }
            }
            other => other,
        };
        match appended {
            Ok(id) if id == seq => {
                self.gate.advance(seq);
                Ok(())
            }
            Ok(id) => Err(format!("{EVENT_LOG}: stored as id {id}, expected {seq}")),
            Err(e) => {
                self.reply_lost = matches!(e, RedisError::Unknown { .. });
                Err(format!("{EVENT_LOG}: {e}"))
            }
        }
    }

    /// Releases in Redis through `through` if the ring got further.
    pub(crate) async fn release(&mut self, through: u64) -> Result<(), String> {
        if through <= self.released {
            return Ok(());
        }
        self.stream
            .release_through(through)
            .await
            .map_err(|e| format!("{EVENT_LOG}: {e}"))?;
        self.released = through;
        Ok(())
    }

    /// Keeps the lease of an idle producer (the store's maintenance renews every open stream).
    ///
    /// A lease that lapsed while Redis did not answer (a stall or a restart longer than the lease)
    /// is taken again, as `append` does, when nobody else holds it and Redis has every event
    /// this writer appended. Otherwise the stream would stay without a lease until its next
    /// event, and the other replicas, which read a missing lease as this replica gone, would
    /// answer its resumes 410 while it still runs.
    pub(crate) async fn renew(&mut self) {
        let Some(p) = &self.producer else {
            return;
        };
        if !matches!(p.renew().await, Err(RedisError::Fenced { holder: None })) || p.has_pending() {
            // Renewed, held by another producer, or Redis unreachable (the next pass tries
            // again); with an append of unknown outcome pending, `append` takes it back.
            return;
        }
        let next = p.next_id();
        match self.stream.acquire_producer().await {
            Ok(again) if again.next_id() == next => {
                self.lease.hold(Some(&again));
                self.producer = Some(again);
            }
            // Redis lost events this writer appended: the next append reports it and ends the
            // stream; the lease taken here goes back at once.
            Ok(again) => {
                let _ = again.release_lease().await;
            }
            Err(_) => {}
        }
    }

    /// Ends the Redis stream with `reason` (remote readers get everything, then the reason).
    pub(crate) async fn close(&mut self, reason: CloseReason) -> Result<(), String> {
        self.lease.hold(None);
        match self.producer.take() {
            Some(p) => match p.close(reason).await {
                Ok(()) => Ok(()),
                // Redis lost events this writer appended (a failover to a lagging replica), and
                // refuses to end the shortened log as if it were the stream: it is deleted, as
                // docs/scaling.md requires, so every replica answers its cursors 404
                // `stream_lost` at once rather than serve part of it until the lease lapses.
                Err(e @ RedisError::LogRolledBack { .. }) => {
                    let _ = self.stream.delete_if_rolled_back(&e).await;
                    Err(format!("{EVENT_LOG}: {e}"))
                }
                Err(e) => Err(format!("{EVENT_LOG}: {e}")),
            },
            None => Ok(()),
        }
    }

    /// After an append of `seq` failed and the [`close`](Self::close) that followed it: when the
    /// append's reply was lost, Redis may hold it (the append ran, or the close resent it), with
    /// the ring's payload under the ring's id. What it holds through `seq` becomes durable here
    /// too, so that this replica's connections send what the other replicas replay from Redis,
    /// and both end the stream at the same id. After any other failure nothing is confirmed.
    pub(crate) async fn confirm_stored(&self, seq: u64) {
        if !self.reply_lost {
            return;
        }
        if let Ok(state) = self.stream.state().await {
            self.gate.advance(state.head.min(seq));
        }
    }

    /// Refuses every later event: connections end with `reason` after the last durable id.
    pub(crate) fn fail(&mut self, reason: &str) {
        self.gate.fail(reason);
    }
}
