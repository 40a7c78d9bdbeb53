//! Publishing into an [`SseStream`]: the crate's [`Publisher`] (the one backpressure loop) over the
//! stream's ring, with the stream's retention state (and so its slow-consumer policy) as the
//! policy it consults while the window is full; and the constructors that build a stream with its
//! producer.

use std::fmt;
use std::future::Future;
use std::time::Instant;

use bytes::Bytes;
use replay_ring::{CloseReason, Producer, ReplayRing};

use super::config::SseConfig;
use super::endpoint::SseStream;
use super::shared::add;
use crate::backend::{Backend, BackendProducer, ReleaseError};
use crate::{ConfigError, PublishError, Publisher, RetentionPolicy, StreamIdentity};

/// The stream's retention state as the [`Publisher`]'s policy.
pub(crate) struct StreamRetention<B>(SseStream<B>);

impl<B: fmt::Debug> fmt::Debug for StreamRetention<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("StreamRetention").field(&self.0).finish()
    }
}

impl<B: Backend<Payload = Bytes>> RetentionPolicy<B> for StreamRetention<B> {
    fn release_due(
        &mut self,
        _backend: &B,
        now: Instant,
    ) -> impl Future<Output = Result<bool, ReleaseError>> + Send {
        // Also cuts slow consumers whose deadline passed (`Retention::release_target`). The
        // stream's backend is the publisher's.
        let shared = self.0.shared.clone();
        async move { Ok(shared.release_due(now).await) }
    }

    fn next_due(&self) -> Option<Instant> {
        // The publisher asks just before it waits: the next writer to report a write notifies
        // `changed` (one writer, not every chunk of every connection).
        let shared = &self.0.shared;
        let retention = shared.retention();
        shared.set_publisher_waiting(&retention);
        retention.next_expiry()
    }

    fn changed(&self) -> impl Future<Output = ()> + Send {
        // Completes once a writer reported a write after the last `next_due` (a new checkpoint or
        // a slow-consumer deadline may now come sooner than the publisher's computed wake-up).
        self.0.shared.progress.notified()
    }
}

/// The producing side of an [`SseStream`]: publishes events through the crate's [`Publisher`],
/// which waits while the window is full (releasing expired events and cutting slow consumers as
/// they come due) and closes the stream with [`CloseReason::BackpressureTimeout`] once it has
/// waited [`backpressure_timeout`](crate::RetentionConfig::backpressure_timeout). Never drops an
/// event.
///
/// ```
/// use replay_ring_sse::axum::{SseConfig, SseStream};
/// use replay_ring_sse::{Epoch, StreamId, StreamIdentity};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let me = StreamIdentity::new(StreamId::new("events").unwrap(), Epoch::new(1));
/// let (stream, mut producer) = SseStream::new(me, SseConfig::default()).unwrap();
/// assert_eq!(producer.send("a").await.unwrap(), 1);
/// assert_eq!(producer.send_with(|id| format!("{{\"n\":{id}}}").into()).await.unwrap(), 2);
/// assert_eq!(stream.ring().head(), 2);
/// # });
/// ```
pub struct SseProducer<B: Backend = ReplayRing<Bytes>> {
    publisher: Publisher<B::Producer, StreamRetention<B>>,
    stream: SseStream<B>,
}

impl<B: Backend + fmt::Debug> fmt::Debug for SseProducer<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SseProducer")
            .field("stream", &self.stream)
            .finish_non_exhaustive()
    }
}

impl<B: Backend<Payload = Bytes>> SseProducer<B> {
    pub(crate) fn new(producer: B::Producer, stream: SseStream<B>) -> Self {
        let bound = stream.config().retention.backpressure_timeout;
        let publisher = Publisher::with_policy(producer, StreamRetention(stream.clone()), bound);
        SseProducer { publisher, stream }
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
    pub fn stream(&self) -> &SseStream<B> {
        &self.stream
    }

    /// Publishes `payload` as the next event; returns its id.
    ///
    /// # Errors
    ///
    /// [`PublishError`] if the stream is closed, including when this call waited past the
    /// backpressure bound (`BackpressureTimeout`: the stream is then closed with that reason,
    /// after every event already published), or was taken over (`Superseded`). With a network
    /// backend also `Unavailable` (the store could not be reached, or refused the event for now;
    /// nothing stored, publish the event again), `Unconfirmed` (sent, but its answer was lost:
    /// the producer stores it before the next event, so do not publish it again) and `TooLarge`
    /// (this event is longer than the store takes; nothing stored, no id used): the stream stays
    /// open after all three.
    ///
    /// # Cancel safety
    ///
    /// As [`Publisher::publish_with`]: dropped while it waits for room, nothing was published and
    /// no id was used.
    ///
    /// ```
    /// # use replay_ring_sse::axum::{SseConfig, SseStream};
    /// # use replay_ring_sse::{Epoch, StreamId, StreamIdentity};
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// # let me = StreamIdentity::new(StreamId::new("s").unwrap(), Epoch::new(1));
    /// let (_stream, mut producer) = SseStream::new(me, SseConfig::default()).unwrap();
    /// assert_eq!(producer.send(r#"{"hello":1}"#).await.unwrap(), 1);
    /// # });
    /// ```
    pub async fn send(&mut self, payload: impl Into<Bytes>) -> Result<u64, PublishError> {
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
    pub async fn send_with<F>(&mut self, make: F) -> Result<u64, PublishError>
    where
        F: FnOnce(u64) -> Bytes + Send,
    {
        let result = self.publisher.publish_with(make).await;
        if let Err(PublishError::BackpressureTimeout { .. }) = result {
            add(&self.stream.shared.counters.backpressure_timeouts, 1);
        }
        result
    }

    /// Waits until the first event-stream response opens (to start producing only once someone
    /// listens: a subscriber without `Last-Event-ID` starts at the head).
    ///
    /// On a stream shared between processes (a Redis stream, served elsewhere by
    /// [`SseStream::without_producer`] or a standby replica's endpoint), a subscriber of another
    /// process counts too: each endpoint records its first subscriber in the backend
    /// ([`Backend::announce_subscriber`]), and this waits for that as well
    /// ([`Backend::subscriber_announced`]; on Redis, reads of the stream's meta hash while it
    /// waits, 250 ms apart at first and at most 2 s apart later). A client whose first request
    /// reaches a replica that does not produce sees the priming event, then the events once this
    /// producer has started. On Redis it also returns once the stream is found gone (deleted,
    /// expired, or replaced by another incarnation): the next send then reports the loss,
    /// instead of the producer waiting for a subscriber that cannot come.
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
        let shared = &self.stream.shared;
        tokio::select! {
            () = shared.subscribed.notified() => {}
            () = shared.backend.subscriber_announced() => {}
        }
        // Keep a permit for a later call (at most one is stored).
        shared.subscribed.notify_one();
    }

    /// Ends the stream: readers get every retained event, then the terminal frame for `reason`.
    ///
    /// # Errors
    ///
    /// As [`Publisher::close`] (never for the in-process ring).
    ///
    /// # Cancel safety
    ///
    /// For the in-process ring the close happens before the first await point.
    ///
    /// ```
    /// # use replay_ring_sse::axum::{SseConfig, SseStream};
    /// # use replay_ring_sse::{Epoch, StreamId, StreamIdentity};
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// # let me = StreamIdentity::new(StreamId::new("s").unwrap(), Epoch::new(1));
    /// let (stream, producer) = SseStream::new(me, SseConfig::default()).unwrap();
    /// producer.close(replay_ring::CloseReason::Completed).await.unwrap();
    /// assert!(stream.ring().is_closed());
    /// # });
    /// ```
    pub async fn close(mut self, reason: CloseReason) -> Result<(), PublishError> {
        self.publisher.close(reason).await
    }

    /// Stops publishing without ending the stream and returns the backend's producer; `None` if
    /// the stream was closed (by this producer, or found closed by a send) or another producer
    /// took it over. A replica that shuts down while other
    /// replicas serve the stream gives its producer lease back this way, so that a standby takes
    /// over at once instead of after the lease lapses
    /// (`replay_ring_redis::RedisProducer::release_lease`). Connections keep being served.
    ///
    /// ```
    /// # use replay_ring_sse::axum::{SseConfig, SseStream};
    /// # use replay_ring_sse::{Epoch, StreamId, StreamIdentity};
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// # let me = StreamIdentity::new(StreamId::new("s").unwrap(), Epoch::new(1));
    /// let (stream, mut producer) = SseStream::new(me, SseConfig::default()).unwrap();
    /// producer.send("a").await.unwrap();
    /// let ring_producer = producer.into_backend_producer().unwrap();
    /// assert_eq!(ring_producer.next_id(), 2);
    /// assert!(!stream.ring().is_closed());
    /// # });
    /// ```
    pub fn into_backend_producer(self) -> Option<B::Producer> {
        self.publisher.into_producer()
    }
}

/// Building a stream with its producer.
impl SseStream {
    /// A stream with a fresh window (ids from 1) and its producer.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] for the first setting [`SseConfig::check`] finds wrong: `capacity` or
    /// `max_connections` out of the ring's range ([`ConfigError::Ring`]), a keep-alive shorter
    /// than 10 ms, a `retry` past what browsers' timers hold, a slow-consumer policy that
    /// cannot work.
    ///
    /// ```
    /// use replay_ring_sse::axum::{SseConfig, SseStream};
    /// use replay_ring_sse::{Epoch, StreamId, StreamIdentity};
    /// let me = StreamIdentity::new(StreamId::new("s").unwrap(), Epoch::new(1));
    /// assert!(SseStream::new(me, SseConfig { capacity: 0, ..SseConfig::default() }).is_err());
    /// ```
    pub fn new(
        identity: StreamIdentity,
        config: SseConfig,
    ) -> Result<(SseStream, SseProducer), ConfigError> {
        config.check_stream_settings()?;
        let (producer, _ring): (Producer<Bytes>, _) = ReplayRing::builder()
            .capacity(config.capacity)
            .max_readers(config.max_connections)
            .build()?;
        Ok(SseStream::with_backend(producer, identity, config))
    }
}

/// Building a stream with its producer, over any backend.
impl<B: Backend<Payload = Bytes>> SseStream<B> {
    /// A stream over `producer`'s backend (any [`Backend`] with [`Bytes`] payloads) and the
    /// producer that publishes into it. The retention table is sized by the backend's
    /// [`max_readers`](Backend::max_readers); [`SseConfig::capacity`] and
    /// [`SseConfig::max_connections`] are the backend's business.
    ///
    /// # Panics
    ///
    /// If `config` fails one of [`SseConfig::check`]'s checks other than the ring's two (as
    /// [`without_producer`](Self::without_producer)). Settings that come from outside are
    /// checked with [`SseConfig::check`] first.
    ///
    /// ```
    /// use bytes::Bytes;
    /// use replay_ring::ReplayRing;
    /// use replay_ring_sse::axum::{SseConfig, SseStream};
    /// use replay_ring_sse::backend::Backend;
    /// use replay_ring_sse::{Epoch, StreamId, StreamIdentity};
    ///
    /// let (producer, ring) = ReplayRing::<Bytes>::new(256, 8).unwrap();
    /// let me = StreamIdentity::new(StreamId::new("events").unwrap(), Epoch::new(1));
    /// let (stream, _producer) = SseStream::with_backend(producer, me, SseConfig::default());
    /// assert_eq!(Backend::capacity(stream.backend()), 256);
    /// # drop(ring);
    /// ```
    pub fn with_backend<P>(
        producer: P,
        identity: StreamIdentity,
        config: SseConfig,
    ) -> (SseStream<B>, SseProducer<B>)
    where
        P: BackendProducer<Backend = B>,
        B: Backend<Producer = P>,
    {
        let stream = SseStream::without_producer(producer.backend(), identity, config);
        let producer = stream.attach_producer(producer);
        (stream, producer)
    }

    /// The producer for a stream built [`without_producer`](Self::without_producer) that starts
    /// producing later: a standby replica that took the producer lease once the active one gave it
    /// up or crashed (for Redis, `RedisStream::acquire_producer_when_free`). `producer` must
    /// publish into this stream's backend, as for [`with_backend`](Self::with_backend); a backend
    /// admits one producer at a time (the ring's `Producer` is unique, Redis fences a second
    /// lease holder), so a stream never has two that publish.
    ///
    /// ```
    /// use bytes::Bytes;
    /// use replay_ring::ReplayRing;
    /// use replay_ring_sse::axum::{SseConfig, SseStream};
    /// use replay_ring_sse::{Epoch, StreamId, StreamIdentity};
    ///
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let (producer, ring) = ReplayRing::<Bytes>::new(64, 4).unwrap();
    /// let me = StreamIdentity::new(StreamId::new("events").unwrap(), Epoch::new(1));
    /// let stream = SseStream::without_producer(ring, me, SseConfig::default());
    /// // ... serving resumes meanwhile; then this process becomes the producer:
    /// let mut publisher = stream.attach_producer(producer);
    /// assert_eq!(publisher.send("first").await.unwrap(), 1);
    /// # });
    /// ```
    pub fn attach_producer(&self, producer: B::Producer) -> SseProducer<B>
    where
        B: Backend<Payload = Bytes>,
    {
        SseProducer::new(producer, self.clone())
    }
}
