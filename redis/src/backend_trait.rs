//! The SSE layer's backend contract ([`replay_ring_sse::backend`]) on Redis: [`RedisStream`] is
//! the [`Backend`], [`RedisProducer`] the [`BackendProducer`], [`RedisReader`] the [`Tail`]. Code
//! written against the traits (the SSE endpoint, the `Publisher`) runs on Redis unchanged.

use bytes::Bytes;
use replay_ring::{CloseReason, ResumeError};
use replay_ring_sse::backend::{
    AppendError, Backend, BackendProducer, Counters, OpenError, ReleaseError, Tail, TailError,
    Unavailable, Window,
};

use crate::error::Error;
use crate::producer::RedisProducer;
use crate::reader::{ReadItem, RedisReader};
use crate::stream::RedisStream;

fn unavailable(what: &str, e: Error) -> Unavailable {
    Unavailable::with_source(what.to_owned(), e)
}

impl Backend for RedisStream {
    type Payload = Bytes;
    type Producer = RedisProducer;
    type Tail = RedisReader;

    fn capacity(&self) -> usize {
        usize::try_from(self.capacity).unwrap_or(usize::MAX)
    }

    /// The handle's limit ([`RedisStream::with_max_readers`]; unlimited by default). Redis keeps
    /// no reader table, and the handle's waiting readers share one blocking read, so the limit
    /// bounds this replica's memory and work per stream, not Redis's connections.
    fn max_readers(&self) -> usize {
        RedisStream::max_readers(self)
    }

    async fn window(&self) -> Result<Window, Unavailable> {
        let s = self.state().await.map_err(|e| unavailable("window", e))?;
        Ok(Window {
            floor: s.floor,
            head: s.head,
        })
    }

    /// From the handle's shared blocking read (`tail_task.rs`, its view in `tail.rs`), while its
    /// readers wait on it: the newest id it read and the floor after the releases it saw. Spares
    /// each connection's writer a state read per chunk.
    fn recent_window(&self) -> Option<Window> {
        let (floor, head) = self.tail.recent_window()?;
        Some(Window { floor, head })
    }

    async fn release_through(&self, id: u64) -> Result<u64, ReleaseError> {
        match RedisStream::release_through(self, id).await {
            Ok((floor, _head)) => Ok(floor),
            Err(Error::AheadOfHead { requested, head }) => {
                Err(ReleaseError::AheadOfHead { requested, head })
            }
            Err(e) if e.is_stream_lost() => Err(ReleaseError::Gone),
            Err(e) => Err(ReleaseError::Unavailable(unavailable("release", e))),
        }
    }

    async fn resume(&self, last_event_id: Option<u64>) -> Result<RedisReader, OpenError> {
        match RedisStream::resume(self, last_event_id).await {
            Ok(reader) => Ok(reader),
            Err(Error::Gap {
                requested,
                floor,
                head,
            }) => Err(OpenError::Refused(ResumeError::BelowFloor {
                requested,
                floor,
                head,
            })),
            Err(Error::AheadOfHead { requested, head }) => {
                Err(OpenError::Refused(ResumeError::AheadOfHead {
                    requested,
                    head,
                }))
            }
            Err(Error::TooManyReaders { limit }) => Err(OpenError::TooManyReaders { limit }),
            Err(e) if e.is_stream_lost() => Err(OpenError::Gone),
            Err(e) => Err(OpenError::Unavailable(unavailable("resume", e))),
        }
    }

    async fn close_reason(&self) -> Result<Option<CloseReason>, Unavailable> {
        Ok(self
            .state()
            .await
            .map_err(|e| unavailable("close reason", e))?
            .closed)
    }

    async fn counters(&self) -> Result<Counters, Unavailable> {
        let s = self.state().await.map_err(|e| unavailable("counters", e))?;
        let stats = self.backend.stats();
        let mut c = Counters::default();
        c.events_enqueued = s.head;
        c.events_released = s.floor - 1;
        c.resumes_ok = stats.resumes;
        c.resumes_noop = stats.resumes_noop;
        c.resumes_below_floor = stats.resumes_below_floor;
        c.resumes_ahead_of_head = stats.resumes_ahead_of_head;
        c.producer_full = stats.refused_full;
        c.readers_active = self.readers.open();
        c.floor = s.floor;
        c.head = s.head;
        c.capacity = self.capacity();
        Ok(c)
    }

    /// Sets field `subscribed` of this incarnation's meta hash (`subscriber.rs`).
    async fn announce_subscriber(&self) -> Result<(), Unavailable> {
        self.record_subscriber()
            .await
            .map_err(|e| unavailable("announce subscriber", e))
    }

    /// Reads that field until it is set, or the incarnation is found gone: at once, then after
    /// 250 ms, doubling up to 2 s (`subscriber.rs`).
    async fn subscriber_announced(&self) {
        RedisStream::subscriber_announced(self).await;
    }
}

impl BackendProducer for RedisProducer {
    type Backend = RedisStream;

    fn backend(&self) -> RedisStream {
        self.stream().clone()
    }

    /// Builds the payload only when the window has room: the producer knows a lower bound of the
    /// floor from its last reply, and re-reads the window (one extra round trip) only when that
    /// bound says full. A lease that moved to another producer is `Superseded`, and a payload
    /// past [`RedisConfig::max_payload_bytes`](crate::RedisConfig) is `TooLarge` (refused before
    /// it is sent). A stream that ended is `Closed`: closed, or lost in Redis (deleted, expired,
    /// rolled back by a restore, or holding entries this crate did not write), found before
    /// `make` runs (`Closed(Some(make))`) or by the append's own refusal (`Closed(None)`:
    /// nothing was stored). An append sent whose reply never came is `Unavailable { make: None }`:
    /// the event is kept and resent first (idempotently) on the next append or close. One Redis
    /// refused after its payload was built (out of memory, an ACL rule) is `Refused`: nothing
    /// stored, nothing kept.
    async fn try_append_with<F>(&mut self, make: F) -> Result<u64, AppendError<F>>
    where
        F: FnOnce(u64) -> Bytes + Send,
    {
        if let Err(e) = self.resolve_pending().await {
            return Err(before_make(e, make));
        }
        let id = self.next_id();
        if id > crate::MAX_ID {
            return Err(AppendError::IdsExhausted(make));
        }
        let capacity = self.stream().window_capacity();
        if self.known_floor > id {
            // Released past this producer's next id: another producer appended since, so the
            // lease has moved (floors only rise, and only through appended ids).
            return Err(AppendError::Superseded(Some(make)));
        }
        if id - self.known_floor >= capacity {
            match self.stream().state().await {
                Ok(state) => {
                    self.known_floor = state.floor;
                    if let Some(_reason) = state.closed {
                        return Err(AppendError::Closed(Some(make)));
                    }
                    if state.floor > id {
                        // As above.
                        return Err(AppendError::Superseded(Some(make)));
                    }
                    if id - state.floor >= capacity {
                        return Err(AppendError::Full(make));
                    }
                }
                Err(e) => return Err(before_make(e, make)),
            }
        }
        let payload = make(id);
        match self.append(&payload).await {
            Ok(got) => Ok(got),
            // The script refused before writing: the lease moved to another producer.
            Err(Error::Fenced { .. }) => Err(AppendError::Superseded(None)),
            // Checked before anything is sent or queued: no id consumed.
            Err(Error::TooLarge { bytes, limit }) => Err(AppendError::TooLarge { bytes, limit }),
            // A definite refusal: nothing was stored, and every later append would be refused
            // the same way. Reported as unavailable, it would be retried forever.
            Err(e) if matches!(e, Error::Closed(_)) || e.is_stream_lost() => {
                Err(AppendError::Closed(None))
            }
            // The reply was lost: the producer keeps the event and resends it first.
            Err(e @ Error::Unknown { .. }) => Err(AppendError::Unavailable {
                make: None,
                error: unavailable("append", e),
            }),
            // Refused, nothing stored and nothing kept (out of memory, an ACL denial, …): the
            // caller publishes the event again. (Not kept for a resend of the producer's own: a
            // refusal that lasts would then hold up every later append and the close too.)
            Err(e) => Err(AppendError::Refused(unavailable("append", e))),
        }
    }

    /// A stream lost in Redis is ready: there is nothing to wait for, and the append that
    /// follows reports the end (`Closed`).
    async fn ready(&mut self) -> Result<(), Unavailable> {
        let mark = match self.ctl_mark().await {
            Ok(mark) => mark,
            Err(e) if e.is_stream_lost() => return Ok(()),
            Err(e) => return Err(unavailable("ready", e)),
        };
        let state = match self.stream().state().await {
            Ok(state) => state,
            Err(e) if e.is_stream_lost() => return Ok(()),
            Err(e) => return Err(unavailable("ready", e)),
        };
        self.known_floor = state.floor;
        // A floor past `next_id` (another producer appended and released since) is room as far
        // as waiting goes: the append that follows finds the lease gone. Room for the oldest
        // pending event is enough: the append that follows stores it at once.
        if state.closed.is_some() || self.next_id().saturating_sub(state.floor) < state.capacity {
            return Ok(());
        }
        let wait = self.stream().backend.config().block;
        self.wait_ctl(&mark, wait)
            .await
            .map_err(|e| unavailable("ready", e))
    }

    async fn close(self, reason: CloseReason) -> Result<(), Unavailable> {
        match RedisProducer::close(self, reason).await {
            Ok(()) | Err(Error::Closed(_)) => Ok(()),
            Err(e) => Err(unavailable("close", e)),
        }
    }
}

/// Maps an error that happened before `make` was called.
fn before_make<F>(e: Error, make: F) -> AppendError<F> {
    match e {
        Error::Full { .. } => AppendError::Full(make),
        Error::IdsExhausted => AppendError::IdsExhausted(make),
        Error::Closed(_) => AppendError::Closed(Some(make)),
        Error::Fenced { .. } => AppendError::Superseded(Some(make)),
        e if e.is_stream_lost() => AppendError::Closed(Some(make)),
        e => AppendError::Unavailable {
            make: Some(make),
            error: unavailable("append", e),
        },
    }
}

impl Tail for RedisReader {
    type Payload = Bytes;

    fn cursor(&self) -> u64 {
        self.last_id() + 1
    }

    async fn next_batch(&mut self, out: &mut Vec<(u64, Bytes)>) -> Result<usize, TailError> {
        match self.recv().await {
            Ok(ReadItem::Events(events)) => {
                out.clear();
                out.extend(events);
                Ok(out.len())
            }
            Ok(ReadItem::Closed(reason)) => Err(TailError::Closed(reason)),
            Err(Error::Gap {
                requested,
                floor,
                head,
            }) => Err(TailError::Gap {
                next: requested + 1,
                floor,
                head,
            }),
            // A lost stream will never continue: end the tail explicitly, with the cause.
            Err(e) if e.is_stream_lost() => Err(TailError::StreamLost(e.to_string())),
            Err(e) => Err(TailError::Unavailable(unavailable("read", e))),
        }
    }
}
