//! Publishing into an [`SseStream`]: the one backpressure loop (wait for space, release what the
//! retention policy allows, give up explicitly past the bound).

use std::fmt;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use replay_ring::{CloseReason, Producer, PushError};
use tokio::time::{sleep_until, Instant};

use super::endpoint::{add, SseStream};
use crate::BackpressureClock;

/// Why [`SseProducer::send`] did not publish: the stream is closed (by an earlier
/// [`close`](SseProducer::close), the backpressure bound, or running out of ids).
///
/// ```
/// use replay_ring::CloseReason;
/// let e = replay_ring_sse::axum::Closed(CloseReason::Completed);
/// assert!(e.to_string().contains("closed"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Closed(pub CloseReason);

impl fmt::Display for Closed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "stream closed: {}", self.0)
    }
}

impl std::error::Error for Closed {}

/// The producing side of an [`SseStream`]: publishes events, waits while the window is full
/// (releasing expired events and cutting slow consumers as they come due), and closes the stream
/// with [`CloseReason::BackpressureTimeout`] once it has waited
/// [`backpressure_timeout`](crate::RetentionConfig::backpressure_timeout). Never drops an event.
///
/// ```
/// use replay_ring_sse::axum::{SseConfig, SseStream};
/// use replay_ring_sse::{Epoch, StreamId, StreamIdentity};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let me = StreamIdentity::new(StreamId::new("events").unwrap(), Epoch::new(1));
/// let (stream, mut producer) = SseStream::new(me, SseConfig::default()).unwrap();
/// assert_eq!(producer.send("a").await, Ok(1));
/// assert_eq!(producer.send_with(|id| format!("{{\"n\":{id}}}").into()).await, Ok(2));
/// assert_eq!(stream.ring().head(), 2);
/// # });
/// ```
#[derive(Debug)]
pub struct SseProducer {
    producer: Option<Producer<Bytes>>,
    closed: Option<CloseReason>,
    stream: SseStream,
    clock: BackpressureClock,
}

impl SseProducer {
    pub(crate) fn new(producer: Producer<Bytes>, stream: SseStream) -> Self {
        let clock = BackpressureClock::new(stream.config().retention.backpressure_timeout);
        SseProducer {
            producer: Some(producer),
            closed: None,
            stream,
            clock,
        }
    }

    /// The stream this producer publishes into.
    ///
    /// ```
    /// # use replay_ring_sse::axum::{SseConfig, SseStream};
    /// # use replay_ring_sse::{Epoch, StreamId, StreamIdentity};
    /// # let me = StreamIdentity::new(StreamId::new("s").unwrap(), Epoch::new(1));
    /// let (stream, producer) = SseStream::new(me, SseConfig::default()).unwrap();
    /// assert_eq!(producer.stream().identity(), stream.identity());
    /// ```
    pub fn stream(&self) -> &SseStream {
        &self.stream
    }

    /// Publishes `payload` as the next event; returns its id.
    ///
    /// # Errors
    ///
    /// [`Closed`] if the stream is closed, including when this call waited past the backpressure
    /// bound (the stream is then closed with `BackpressureTimeout`, after every event already
    /// published).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped before it returns, nothing was published and no id was used.
    ///
    /// ```
    /// # use replay_ring_sse::axum::{SseConfig, SseStream};
    /// # use replay_ring_sse::{Epoch, StreamId, StreamIdentity};
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// # let me = StreamIdentity::new(StreamId::new("s").unwrap(), Epoch::new(1));
    /// let (_stream, mut producer) = SseStream::new(me, SseConfig::default()).unwrap();
    /// assert_eq!(producer.send(r#"{"hello":1}"#).await, Ok(1));
    /// # });
    /// ```
    pub async fn send(&mut self, payload: impl Into<Bytes>) -> Result<u64, Closed> {
        let payload = payload.into();
        self.send_with(move |_| payload).await
    }

    /// Publishes the event `make(id)` builds for its id (e.g. a payload that names it).
    ///
    /// # Errors
    ///
    /// As [`send`](Self::send).
    ///
    /// # Cancel safety
    ///
    /// As [`send`](Self::send): `make` runs only when the event is published.
    ///
    /// ```
    /// # use replay_ring_sse::axum::{SseConfig, SseStream};
    /// # use replay_ring_sse::{Epoch, StreamId, StreamIdentity};
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// # let me = StreamIdentity::new(StreamId::new("s").unwrap(), Epoch::new(1));
    /// let (stream, mut producer) = SseStream::new(me, SseConfig::default()).unwrap();
    /// producer.send_with(|id| format!("event {id}").into()).await.unwrap();
    /// let mut reader = stream.ring().resume(Some(0)).unwrap();
    /// assert_eq!(&reader.try_read().unwrap().unwrap().iter().next().unwrap().1[..], b"event 1");
    /// # });
    /// ```
    pub async fn send_with<F: FnOnce(u64) -> Bytes>(&mut self, make: F) -> Result<u64, Closed> {
        let mut make = make;
        loop {
            let Some(producer) = self.producer.as_mut() else {
                return Err(Closed(
                    self.closed.clone().unwrap_or(CloseReason::Completed),
                ));
            };
            match producer.try_push_with(make) {
                Ok(id) => {
                    self.clock.on_pushed();
                    // Relaxed: only the producer writes it; writers read it under the retention
                    // lock (a stale `true` costs one spurious wake-up).
                    self.stream
                        .shared
                        .producer_waiting
                        .store(false, Ordering::Relaxed);
                    return Ok(id);
                }
                Err(PushError::Full(back)) => make = back,
                Err(PushError::IdsExhausted(_)) => {
                    let reason = CloseReason::error("event ids exhausted");
                    self.close_with(reason.clone());
                    return Err(Closed(reason));
                }
            }
            let shared = &self.stream.shared;
            // Relaxed: published to the writers by the retention lock taken next; a writer that
            // records progress after this critical section sees it and wakes the producer, one
            // that recorded before is seen in the `next_expiry` below.
            shared.producer_waiting.store(true, Ordering::Relaxed);
            let now = Instant::now();
            let (released, expiry) = {
                let mut retention = shared.retention();
                let released = retention.release_expired(&shared.ring, now.into_std());
                (released, retention.next_expiry())
            };
            if released.is_some() {
                continue;
            }
            let deadline = match self.clock.on_full(now.into_std()) {
                Ok(deadline) => deadline,
                Err(reason) => {
                    add(&shared.counters.backpressure_timeouts, 1);
                    self.close_with(reason.clone());
                    return Err(Closed(reason));
                }
            };
            // Wake for whichever comes first: space (a batch ends, a release), a writer's progress
            // (it may bring a checkpoint), the next checkpoint or stall deadline, or the bound.
            let wake = expiry.map_or(deadline, |e| e.min(deadline));
            let Some(producer) = self.producer.as_mut() else {
                continue;
            };
            tokio::select! {
                _ = producer.ready() => {}
                _ = shared.progress.notified() => {}
                _ = sleep_until(Instant::from_std(wake)) => {}
            }
        }
    }

    /// Waits until the first event-stream response opens (to start producing only once someone
    /// listens: a subscriber without `Last-Event-ID` starts at the head).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe; the wake-up stays stored for the next call.
    ///
    /// ```
    /// # use replay_ring_sse::axum::{SseConfig, SseStream};
    /// # use replay_ring_sse::{Epoch, StreamId, StreamIdentity};
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// # let me = StreamIdentity::new(StreamId::new("s").unwrap(), Epoch::new(1));
    /// let (stream, producer) = SseStream::new(me, SseConfig::default()).unwrap();
    /// let _response = stream.respond(&Default::default());
    /// producer.first_subscriber().await; // returns at once: a stream opened already
    /// # });
    /// ```
    pub async fn first_subscriber(&self) {
        self.stream.shared.subscribed.notified().await;
        // Keep the permit for a later call.
        self.stream.shared.subscribed.notify_one();
    }

    /// Ends the stream: readers get every retained event, then the terminal frame for `reason`.
    ///
    /// ```
    /// # use replay_ring_sse::axum::{SseConfig, SseStream};
    /// # use replay_ring_sse::{Epoch, StreamId, StreamIdentity};
    /// # let me = StreamIdentity::new(StreamId::new("s").unwrap(), Epoch::new(1));
    /// let (stream, producer) = SseStream::new(me, SseConfig::default()).unwrap();
    /// producer.close(replay_ring::CloseReason::Completed);
    /// assert!(stream.ring().is_closed());
    /// ```
    pub fn close(mut self, reason: CloseReason) {
        self.close_with(reason);
    }

    fn close_with(&mut self, reason: CloseReason) {
        if let Some(producer) = self.producer.take() {
            producer.close(reason.clone());
            self.closed = Some(reason);
        }
    }
}
