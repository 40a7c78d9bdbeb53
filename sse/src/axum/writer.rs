//! One event-stream response body: the per-connection writer that turns batches read from the
//! backend into response chunks.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::time::{sleep_until, Instant, Sleep};

use super::background_release::{beside, poke, BackgroundRelease};
use super::frames::{encode_cut, encode_terminal};
use super::shared::{add, Shared};
use super::side_wake::{First, SideWake, Supervised};
use crate::backend::{Backend, Tail, TailError};
use crate::deadline::after_tokio;
use crate::frame::{encode_stream_event, stream_event_len_hint};
use crate::{encode_keep_alive, ConnectionId, EventIdBuf, KEEP_ALIVE_EVENT};

/// Encoded bytes one response chunk stops growing at (it always holds at least one event, and the
/// chunk that ends a stream may carry the terminal frame beyond it). A
/// client that comes back after a long absence is sent its catch-up in chunks of about this size, so
/// what a connection holds encoded at a time stays bounded however large the window is; the events
/// not yet encoded wait as reference-counted handles.
pub const MAX_CHUNK_BYTES: usize = 64 * 1024;

/// Room reserved for a terminal frame that ends a chunk of events: a close reason's frame, with
/// its JSON, is under this for every reason but a long application error message (which then
/// grows the chunk once).
const TERMINAL_FRAME_RESERVE: usize = 256;

/// One event-stream response body: reads whole batches from the backend as the HTTP stack asks
/// for chunks, so it drains at socket speed and holds no pin while the socket is slow.
pub(crate) struct Writer<B: Backend> {
    shared: Arc<Shared<B>>,
    tail: B::Tail,
    /// Reused batch: once it has grown to the largest batch, reading does not allocate.
    batch: Vec<(u64, Bytes)>,
    /// How many events of `batch` are already encoded: a batch larger than one chunk
    /// ([`MAX_CHUNK_BYTES`]) is sent over several.
    encoded: usize,
    conn: Option<ConnectionId>,
    /// The chunk being encoded, allocated per chunk (see [`take_chunk`](Self::take_chunk)).
    buf: BytesMut,
    /// The chunk handed to the HTTP stack and not yet taken: `Some(last id in it)` (0 for a chunk
    /// without events). The stack asking for the next chunk means it took this one.
    handed: Option<u64>,
    first: Option<Bytes>,
    finished: bool,
    /// The keep-alive timer, armed for `last_handed + keep_alive` at most once per interval: a
    /// timer set and cancelled per chunk would cost two timer-wheel updates per event and
    /// connection. Created at the first wait (a timer needs the runtime the body is polled on).
    keep_alive: Option<Pin<Box<Sleep>>>,
    /// The keep-alive timer's own waker: the timer is polled when it fired, not on every wake-up.
    timer_wake: SideWake,
    /// When the last chunk was handed to the HTTP stack.
    last_handed: Instant,
    /// The stream's ids up to the sequence number, rendered once.
    id_prefix: EventIdBuf,
    /// A release this connection started that the backend has not finished (held back by a
    /// network backend), driven beside the response.
    release: Option<BackgroundRelease>,
}

impl<B: Backend<Payload = Bytes>> Writer<B> {
    /// The writer of a connection that `conn` registered with the retention state, reading from
    /// `tail`; `first` (the priming event) is its first chunk.
    pub(crate) fn new(
        shared: Arc<Shared<B>>,
        tail: B::Tail,
        conn: ConnectionId,
        first: Bytes,
    ) -> Self {
        let id_prefix = shared.identity.id_prefix();
        Writer {
            shared,
            tail,
            batch: Vec::new(),
            encoded: 0,
            conn: Some(conn),
            buf: BytesMut::new(),
            handed: None,
            first: Some(first),
            finished: false,
            keep_alive: None,
            timer_wake: SideWake::new(),
            last_handed: Instant::now(),
            id_prefix,
            release: None,
        }
    }

    /// Hands the writer a release to drive beside the response (a resume's acknowledgement that
    /// the backend did not finish at once).
    pub(crate) fn drive_release(&mut self, release: BackgroundRelease) {
        self.release = Some(release);
    }

    /// The next chunk of the response body; `None` ends it.
    pub(crate) async fn next_chunk(&mut self) -> Option<Bytes> {
        if self.finished {
            // A response that ended in a chunk carrying events (`encode_batch`): record them
            // written, as the next chunk would have.
            if let (Some(through), Some(conn)) = (self.handed.take(), &self.conn) {
                let now = Instant::now().into_std();
                self.shared.retention().on_written(conn, through, now);
            }
            return None;
        }
        // Borrowed, not cloned: every connection's writer runs this per chunk, and cloning the
        // `Arc` would bounce its count between the worker threads twice per chunk.
        let shared = &*self.shared;
        let conn = self.conn.as_ref()?;
        let now = Instant::now().into_std();
        let window = shared.policy_window().await;
        // One look at the retention state per chunk (every connection of the stream takes this
        // lock): record the chunk written, apply the slow-consumer policy and plan what expired
        // (as `release_due`), and read this connection's verdict after that.
        let (target, cut, publisher_waits) = {
            let mut retention = shared.retention();
            if let Some(through) = self.handed.take() {
                retention.on_written(conn, through, now);
            }
            // No window: the backend cannot answer now; the checkpoints stay for the next look.
            let target = window.and_then(|window| retention.release_target(window, now));
            let publisher_waits = shared.take_publisher_waiting(&retention);
            (target, retention.cut_verdict(conn), publisher_waits)
        };
        if publisher_waits {
            // Before any await: this writer took the request, so a writer dropped during the
            // release below must not swallow it. A permit is stored if the publisher is not
            // waiting yet, so the wake-up is never lost (at worst it costs the publisher one
            // extra look at the retention state).
            shared.progress.notify_one();
        }
        // A release wakes a producer waiting for room. It runs beside the response, so a backend
        // that holds writes back delays neither this chunk nor later ones (`background_release`).
        if let (Some(window), Some(target)) = (window, target) {
            if self.release.as_ref().is_none_or(|r| r.through() < target) {
                let shared = self.shared.clone();
                let run = async move {
                    shared.release_planned(window, Some(target)).await;
                };
                self.release = Some(BackgroundRelease::new(target, run));
            }
        }
        poke(&mut self.release).await;
        if let Some(verdict) = cut {
            // Cut by the slow-consumer policy: say so where the socket still takes a frame, and
            // end. The client resumes with its Last-Event-ID like after any disconnect.
            self.finished = true;
            add(&shared.counters.slow_consumer_frames, 1);
            encode_cut(&mut self.buf, &verdict);
            return Some(self.take_chunk());
        }
        let chunk = match self.first.take() {
            Some(first) => {
                self.handed = Some(0);
                first
            }
            None => {
                let mut release = self.release.take();
                let chunk = beside(&mut release, self.read_chunk()).await;
                self.release = release;
                chunk
            }
        };
        self.last_handed = Instant::now();
        // A chunk that carries events or a keep-alive (`handed`) is a pending write until the next
        // poll: also the last one, which may end the response (`encode_batch`). A cut or error
        // frame is not: the response ends there.
        if let (Some(_), Some(conn)) = (self.handed, &self.conn) {
            self.shared
                .retention()
                .on_write_pending(conn, self.last_handed.into_std());
        }
        Some(chunk)
    }

    /// Encodes the rest of the current batch, or waits for events (or the keep-alive interval)
    /// and encodes them.
    async fn read_chunk(&mut self) -> Bytes {
        if self.encoded < self.batch.len() {
            self.encode_batch();
            return self.take_chunk();
        }
        // Zero would be a comment per poll, a busy loop: it means none, like `Duration::MAX`.
        let keep_alive = match self.shared.config.keep_alive {
            Duration::ZERO => Duration::MAX,
            interval => interval,
        };
        let due = after_tokio(self.last_handed, keep_alive);
        let timer = self.keep_alive.get_or_insert_with(|| {
            self.timer_wake.arm();
            Box::pin(sleep_until(due))
        });
        loop {
            // The timer is polled only when it fired, not on every event's wake-up. Cancel safe
            // (the `Tail` contract): losing to the keep-alive timer takes no event.
            let first = {
                let read = std::pin::pin!(self.tail.next_batch(&mut self.batch));
                Supervised::new(&mut self.timer_wake, read, timer.as_mut()).await
            };
            match first {
                First::Main(Ok(_)) => {
                    self.encoded = 0;
                    self.encode_batch();
                }
                First::Main(Err(err)) => {
                    self.finished = true;
                    if matches!(err, TailError::Unavailable(_)) {
                        add(&self.shared.counters.backend_unavailable_frames, 1);
                    }
                    encode_terminal(&mut self.buf, &err);
                }
                First::Side(()) => {
                    if Instant::now() < due {
                        // Set for an earlier chunk's deadline: move it to this one's and wait on.
                        timer.as_mut().reset(due);
                        self.timer_wake.arm();
                        continue;
                    }
                    add(&self.shared.counters.keep_alives, 1);
                    if self.shared.config.keep_alive_event {
                        self.buf.extend_from_slice(KEEP_ALIVE_EVENT);
                    } else {
                        encode_keep_alive(&mut self.buf);
                    }
                    self.handed = Some(0);
                    // The timer has fired and fires no more: the next wait polls it first, which
                    // moves it to that wait's deadline (the branch above).
                    self.timer_wake.arm();
                }
            }
            break;
        }
        self.take_chunk()
    }

    /// The encoded chunk, handed over whole: each chunk is its own allocation. One buffer per
    /// connection that chunks are split off would write every event to bytes of that connection's
    /// buffer not touched since its previous events, which with thousands of connections are out
    /// of the cache (and, the first time, a page fault). A fresh allocation of the size the chunk
    /// needs is memory the worker's allocator just got back from an earlier chunk, hot in its
    /// cache; and a connection between chunks holds no buffer at all.
    fn take_chunk(&mut self) -> Bytes {
        std::mem::take(&mut self.buf).freeze()
    }

    /// Encodes events of `batch` from `encoded` on until the chunk reaches [`MAX_CHUNK_BYTES`].
    ///
    /// If the rest of the batch fits and the stream has ended after it, the chunk also carries the
    /// terminal frame and ends the response: at the end of a stream every connection finishes at
    /// once, and this spares each one more wake-up, chunk and write. Backends that cannot tell
    /// without a round trip answer `None` ([`Backend::ended_after`]), and the next read reports the
    /// end as before.
    fn encode_batch(&mut self) {
        // One allocation for the chunk, of the size its events take (exactly, for one-line
        // payloads: a `Bytes` made from a full allocation needs no second one for its count).
        let mut size = 0;
        let mut rest_fits = true;
        for (id, payload) in &self.batch[self.encoded..] {
            size += stream_event_len_hint(self.id_prefix.len_with_seq(*id), payload.len());
            if size >= MAX_CHUNK_BYTES {
                rest_fits = false;
                break;
            }
        }
        // The tail's cursor is already past the whole batch.
        let ending = rest_fits
            .then(|| self.shared.backend.ended_after(self.tail.cursor()))
            .flatten();
        if ending.is_some() {
            size += TERMINAL_FRAME_RESERVE;
        }
        self.buf.reserve(size);
        let mut last = 0;
        let mut n = 0;
        for (id, payload) in &self.batch[self.encoded..] {
            encode_stream_event(&mut self.buf, self.id_prefix, *id, payload);
            last = *id;
            n += 1;
            if self.buf.len() >= MAX_CHUNK_BYTES {
                break;
            }
        }
        self.encoded += n;
        let whole = self.encoded == self.batch.len();
        if whole {
            // Drops the payload handles now; `clear` keeps the capacity for the next read.
            self.batch.clear();
            self.encoded = 0;
        }
        add(&self.shared.counters.frames_written, n as u64);
        self.handed = Some(last);
        // Only after the batch's last event: the size above is a hint (each line break in a
        // payload adds a field), so the chunk may have filled up before it.
        if let (true, Some(reason)) = (whole, ending) {
            self.finished = true;
            encode_terminal(&mut self.buf, &TailError::Closed(reason));
        }
    }
}

impl<B: Backend> Drop for Writer<B> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.shared
                .retention()
                .disconnect(conn, Instant::now().into_std());
        }
    }
}
