//! A lock-free, single-producer / multi-reader replay buffer for resumable event streams.
//!
//! A server keeps each stream's recent events in a [`ReplayRing`] so that a client reconnecting with
//! an SSE `Last-Event-ID` gets *every* event it missed, exactly once, or an explicit error — never a
//! stream that silently starts somewhere else.
//!
//! # Guarantees
//!
//! - **Eager, gap-free ids.** Every accepted event gets the next id (1, 2, 3, …) before its payload
//!   is built ([`Producer::try_push_with`]). A refused push consumes no id. Ids never wrap: the
//!   last one is `u64::MAX - 1`, after which pushes fail with [`PushError::IdsExhausted`].
//! - **Release, never evict.** Events leave the window only through
//!   [`ReplayRing::release_through`]. When the window is full the producer is backpressured
//!   ([`PushError::Full`], or [`Producer::push`] waits) — nothing a resume may ask for is dropped.
//! - **Typed resume.** [`ReplayRing::resume`] with `Last-Event-ID = x` yields exactly
//!   `x + 1 ..= head`, or [`ResumeError::BelowFloor`] / [`ResumeError::AheadOfHead`]. The decision
//!   itself is the pure function [`classify_resume`], for layers that answer a `Last-Event-ID`
//!   before (or without) touching a ring.
//! - **Wait-free, zero-copy replay.** Each read takes a bounded number of steps (no lock, no CAS
//!   loop; once the stream has closed, a read that reaches its end locks the close reason) and
//!   lends the events as at most two slices ([`Batch::as_slices`]); the producer cannot
//!   overwrite them while they are lent. A resume adds a lock-free reader registration (a
//!   compare-exchange retried only when another registration or drop won the race).
//! - **Bounded waiting.** Waiting producers and readers park wakers that live in the ring's shared
//!   state; push, read and waits allocate nothing, and a push wakes only the readers that wait. Readers
//!   register by the hundred thousand (the reader table grows on demand, up to [`MAX_READERS`])
//!   without slowing the producer down while they are idle (its check for borrowed slots visits a
//!   reader only after that reader read, at most twice); a registration ([`ReplayRing::reader`] or
//!   [`ReplayRing::resume`]) allocates only when it opens a new segment of the table. A ring may
//!   also start small and grow its slot array as events arrive ([`Builder::initial_slots`]): only
//!   the push that first reaches a new segment allocates it.
//! - **Checked.** The protocol is model-checked with loom (`loom-tests/`, `docs/verification.md`).
//! - **Panics in user code** (a payload's `Clone` or `Drop`, a closure, an iterator, a waker)
//!   come back to the caller and leave the ring consistent: no id is skipped or reused (a
//!   `try_push_with` closure that panics consumes no id, so the next push is handed the same
//!   one), every
//!   value is dropped once, no table entry or pin is leaked, and a batch whose handling panicked
//!   is lent again (see [`Batch`]). A waker that panics while its thread is already unwinding
//!   aborts the process, as any panic during unwinding does.
//!
//! # Reading and waiting
//!
//! Every waiting operation comes as `try_*` (never waits), an `async fn` (waits for a wake-up) and
//! `*_timeout` (blocks the thread up to a deadline), as in `crossbeam-channel`:
//!
//! | | never waits | async | blocking |
//! |---|---|---|---|
//! | push | [`Producer::try_push`] | [`Producer::push`] | [`Producer::push_timeout`] |
//! | wait for space | — | [`Producer::ready`] | [`Producer::ready_timeout`] |
//! | lend every available event (zero-copy) | [`Reader::try_read`] | [`Reader::read`] | [`Reader::read_timeout`] |
//! | lend batch after batch until caught up, under one pin (busy polling) | [`Reader::drain`] | — | — |
//! | poll under a pin kept between polls; the reader gates the producer (a dedicated polling thread) | [`Reader::gating`], then [`Gating::try_read`] | — | — |
//! | clone one event out | [`Reader::try_recv`] | [`Reader::recv`] | [`Reader::recv_timeout`] |
//!
//! # Features
//!
//! - `stream` (default): `futures_core::Stream` for [`Reader`] (events cloned out one at a time).
//! - `tokio`: `Reader::read_coalesced`, a [`Reader::read`] for tokio tasks that, after reads that
//!   never parked, yields to the scheduler (up to four times, while events keep arriving) before
//!   it reads fewer than 16 events or waits, so that a task chasing a busy producer reads larger
//!   batches. Without it the crate depends on no runtime.
//!
//! # Example
//!
//! ```
//! use replay_ring::{ReplayRing, ResumeError};
//!
//! let (mut producer, ring) = ReplayRing::<String>::new(4, 8).unwrap();
//! for n in 1..=4 {
//!     producer.try_push_with(|id| format!("progress {n} (id {id})")).unwrap();
//! }
//! // Full: the producer is told, and every retained event stays.
//! assert!(producer.try_push("five".into()).unwrap_err().is_full());
//!
//! // A client that saw id 2 reconnects and gets exactly 3 and 4.
//! let mut reader = ring.resume(Some(2)).unwrap();
//! let ids: Vec<u64> = reader.try_read().unwrap().unwrap().iter().map(|(id, _)| id).collect();
//! assert_eq!(ids, [3, 4]);
//!
//! // The server's retention policy acknowledges 1..=2; a client asking for 1 gets an explicit gap.
//! ring.release_through(2).unwrap();
//! assert_eq!(
//!     ring.resume(Some(0)).unwrap_err(),
//!     ResumeError::BelowFloor { requested: 0, floor: 3, head: 4 }
//! );
//! assert_eq!(producer.try_push("five".into()), Ok(5));
//! ```
//!
//! The `replay-ring-sse` crate puts rings on the wire: event-id format, `Last-Event-ID` parsing,
//! frame encoding, the resume decision and its HTTP mapping, a retention policy, a publisher and an
//! axum endpoint.
#![deny(missing_docs, missing_debug_implementations, unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]
#![warn(rust_2018_idioms, unreachable_pub)]

#[cfg(not(replay_ring_loom))]
mod blocking;
mod builder;
mod error;
mod metrics;
mod prefetch;
mod producer;
mod reader;
mod resume;
mod ring;
mod shared;
mod slots;
mod sync;
mod table;
mod wait;

pub use builder::{Builder, WakeupFences, MAX_CAPACITY, MAX_READERS};
pub use error::{
    BuildError, CloseReason, PushError, ReadError, ReleaseError, ResumeError, TooManyReaders,
};
pub use metrics::Metrics;
pub use producer::Producer;
pub use reader::{Batch, Event, Gating, Reader};
#[cfg(all(feature = "tokio", not(replay_ring_loom)))]
pub use reader::{COALESCE_MAX_YIELDS, COALESCE_TARGET};
pub use resume::{classify_resume, Resumption};
pub use ring::ReplayRing;

/// The README's example is compiled and run as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
