//! A stream's first subscriber, told across replicas: the SSE endpoint of any replica records in
//! the stream's meta hash that a client subscribed (field `subscribed`, written by a script that
//! checks the incarnation), and a producer waiting to start on its first subscriber
//! (`SseProducer::first_subscriber`) reads it. Without it, a producing replica would start only
//! on a client of its own, and a client that a load balancer sent to another replica would wait
//! on keep-alives.

use std::time::Duration;

use crate::backend::Counters;
use crate::codec;
use crate::error::Error;
use crate::scripts;
use crate::stream::RedisStream;

/// The first interval between a waiting producer's reads of whether a subscriber was recorded.
/// It doubles after each read that finds none, up to [`SUBSCRIBER_POLL_MAX`].
pub(crate) const SUBSCRIBER_POLL: Duration = Duration::from_millis(250);

/// The longest interval between those reads: a first subscriber on another replica waits at most
/// this long (plus a round trip) for the producer to start, and a producer that waits long for one
/// costs Redis one `HMGET` per interval (a process with many such streams, one per stream).
pub(crate) const SUBSCRIBER_POLL_MAX: Duration = Duration::from_secs(2);

impl RedisStream {
    /// Records that a client subscribed to this incarnation of the stream; a failure is counted
    /// (`RedisStats::subscriber_records_failed`), as the caller's retries are silent.
    ///
    /// # Errors
    /// [`Error::Unavailable`], [`Error::OutOfMemory`]; a stream that is gone or of another
    /// incarnation is left alone, and reported as lost.
    pub(crate) async fn record_subscriber(&self) -> Result<(), Error> {
        let recorded = self.try_record_subscriber().await;
        if recorded.is_err() {
            Counters::bump(&self.backend.shared.counters.subscriber_records_failed);
        }
        recorded
    }

    async fn try_record_subscriber(&self) -> Result<(), Error> {
        let value: redis::Value = scripts::SUBSCRIBED_SCRIPT
            .key(&self.keys.meta)
            .arg(codec::encode_epoch(self.epoch))
            .invoke_async(&mut self.backend.write_conn())
            .await
            .map_err(|e| Error::from_redis(&self.id, e))?;
        let (mut reply, status) = codec::Reply::new(&self.id, value)?;
        match status.as_str() {
            "OK" => Ok(()),
            other => Err(self.common_status(other, &mut reply)),
        }
    }

    /// Whether a client subscribed to this incarnation of the stream, on any replica, or whether
    /// the incarnation is gone.
    ///
    /// # Errors
    /// [`Error::Unavailable`].
    async fn subscriber_recorded(&self) -> Result<Subscriber, Error> {
        let (epoch, subscribed): (Option<String>, Option<String>) = redis::cmd("HMGET")
            .arg(&self.keys.meta)
            .arg("epoch")
            .arg("subscribed")
            .query_async(&mut self.backend.connection())
            .await
            .map_err(|e| Error::from_redis(&self.id, e))?;
        if epoch.as_deref() != Some(&*codec::encode_epoch(self.epoch)) {
            // No meta hash (deleted, expired, lost in a failover) or another incarnation's.
            return Ok(Subscriber::StreamGone);
        }
        Ok(match subscribed {
            Some(_) => Subscriber::Recorded,
            None => Subscriber::NotYet,
        })
    }

    /// Completes once a client subscribed to this incarnation of the stream, on any replica, or
    /// once the incarnation is found gone: no subscriber can come then, and the producer's next
    /// append reports the loss. Reads at once, then after [`SUBSCRIBER_POLL`], doubling up to
    /// [`SUBSCRIBER_POLL_MAX`], also while Redis cannot be reached (each failed read counted in
    /// `RedisStats::subscriber_checks_failed`).
    pub(crate) async fn subscriber_announced(&self) {
        let mut pause = SUBSCRIBER_POLL;
        loop {
            match self.subscriber_recorded().await {
                Ok(Subscriber::Recorded | Subscriber::StreamGone) => return,
                Ok(Subscriber::NotYet) => {}
                Err(_) => Counters::bump(&self.backend.shared.counters.subscriber_checks_failed),
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(SUBSCRIBER_POLL_MAX);
        }
    }
}

/// What the meta hash says of an incarnation's first subscriber.
enum Subscriber {
    Recorded,
    NotYet,
    /// The hash is gone or names another incarnation.
    StreamGone,
}
