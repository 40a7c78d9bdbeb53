//! Redis Streams backend for replay-ring: the same stream contract as the in-process ring, shared
//! by every replica behind a load balancer and surviving process restarts.
//!
//! - **Ids** are assigned by one atomic script per append, `1, 2, 3, …` gap-free; a refused append
//!   (window full, producer fenced, stream closed) consumes none. Ids stay below 2^53 ([`MAX_ID`]).
//! - **Backpressure, never eviction**: the window holds at most `capacity` events; a full window
//!   refuses the append ([`Error::Full`]) or makes [`RedisProducer::append_wait`] wait for a
//!   release. Events leave only through [`RedisStream::release_through`] (`XTRIM MINID`); no
//!   `MAXLEN`, no `XDEL`.
//! - **Resume** from `X` yields exactly `X+1..=head` then live events, or a typed error:
//!   [`Error::Gap`] below the floor, [`Error::AheadOfHead`] past the head, [`Error::NotFound`] /
//!   [`Error::EpochChanged`] for a lost stream. The decision and the first page are one script.
//! - **One producer**, enforced by a lease with a fencing token checked inside the append
//!   script: a stale producer is refused ([`Error::Fenced`]) instead of interleaving ids.
//! - **Idempotent retries**: an append whose reply was lost ([`Error::Unknown`]) is resent with
//!   the same id before the next append; the script recognises it, so nothing is duplicated or
//!   skipped.
//! - **Close** stores a reason; readers get every event, then [`ReadItem::Closed`].
//! - **Cluster**: all keys of a stream share the `{stream}` hash tag, so a stream lives whole on
//!   one node. Connected to any node of a Redis Cluster, the backend serves streams on every
//!   node: it routes each command to the node that serves the stream's slot and follows the
//!   cluster when slots move (a resharding, a failover). **Expiry**: an abandoned
//!   stream expires after [`RedisConfig::stream_ttl`]; that is "stream lost", and the epoch in
//!   every event id keeps a recreated stream's ids from being mistaken for the old ones.
//! - **A lost stream** (deleted, expired, or rolled back behind ids a handle saw:
//!   [`Error::LogRolledBack`]) is reported by [`RedisStream::until_lost`]; every replica then
//!   moves on to one next incarnation with [`RedisStream::next_incarnation`].
//!
//! Deployment guidance (persistence settings, failover, memory) is in `docs/scaling.md`.
//!
//! ```no_run
//! use replay_ring_redis::{CloseReason, ReadItem, RedisBackend, RedisConfig, StreamId};
//!
//! # async fn demo() -> Result<(), replay_ring_redis::Error> {
//! let backend = RedisBackend::connect("redis://127.0.0.1:6379", RedisConfig::default()).await?;
//! let stream = backend.create(&StreamId::new("events").unwrap(), 1024).await?;
//!
//! // One replica produces (holding the lease)…
//! let mut producer = stream.acquire_producer().await?;
//! assert_eq!(producer.append(b"hello").await?, 1);
//! assert_eq!(producer.append(b"world").await?, 2);
//! producer.close(CloseReason::Completed).await?;
//!
//! // …any replica serves a client that reconnects with Last-Event-ID seq 1.
//! let mut reader = stream.resume(Some(1)).await?;
//! assert_eq!(reader.recv().await?, ReadItem::Events(vec![(2, "world".into())]));
//! assert_eq!(reader.recv().await?, ReadItem::Closed(CloseReason::Completed));
//!
//! // The client acknowledged 2: release it.
//! stream.release_through(2).await?;
//! assert!(matches!(stream.resume(Some(0)).await, Err(replay_ring_redis::Error::Gap { .. })));
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

mod backend;
mod backend_trait;
mod blocking_conn;
mod claim;
mod cluster_clients;
mod codec;
mod connection;
mod error;
mod incarnation;
mod open;
/// The README's example is compiled as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

mod page;
mod producer;
mod reader;
mod scripts;
mod slot_map;
mod sse;
mod stream;
mod subscriber;
mod tail;
mod tail_task;

/// The ring and SSE crates whose types this one's API uses, re-exported so that they come in
/// the versions this crate uses.
pub use replay_ring;
pub use replay_ring::CloseReason;
pub use replay_ring_sse;
pub use replay_ring_sse::StreamId;

pub use backend::{RedisBackend, RedisConfig, RedisStats, DEFAULT_MAX_PAYLOAD_BYTES, MIN_LEASE};
pub use connection::SharedConnection;
pub use error::Error;
pub use producer::{LeaseKeeper, RedisProducer};
pub use reader::{ReadItem, RedisReader};
pub use sse::decision_for;
pub use stream::{RedisStream, RedisStreamState};

/// The largest id a stream can assign: 2^53 − 1, below which Redis's Lua (double precision)
/// arithmetic is exact.
pub const MAX_ID: u64 = (1 << 53) - 1;
