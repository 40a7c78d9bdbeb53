//! Streams by name on a backend: creating and opening the handles every replica starts from, and
//! an operator's purge of a stream no handle can open.

use replay_ring_sse::{Epoch, StreamId};

use crate::backend::RedisBackend;
use crate::codec::{self, Keys, Reply};
use crate::error::Error;
use crate::scripts;
use crate::stream::{read_state, RedisStream};

impl RedisBackend {
    /// Creates stream `id` with a window of `capacity` events and a fresh epoch, or opens it if it
    /// already exists (then its stored epoch and capacity win). Replicas can all call this at
    /// start-up: they converge on one incarnation.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a capacity of 0 or ≥ 2^53; [`Error::Corrupt`] if the keys
    /// hold foreign data (an existing stream's state is checked as [`open`](Self::open) does);
    /// [`Error::NotFound`] if an existing stream was deleted while it was being opened;
    /// [`Error::Unavailable`], [`Error::OutOfMemory`].
    ///
    /// # Cancel safety
    /// Cancel safe: the creation is one atomic script; if cancelled, the stream either exists or
    /// not, and calling again converges.
    pub async fn create(&self, id: &StreamId, capacity: u64) -> Result<RedisStream, Error> {
        if capacity == 0 || capacity > crate::MAX_ID {
            return Err(Error::InvalidArgument("capacity must be in 1..2^53"));
        }
        let keys = Keys::new(&self.shared.config.key_prefix, id);
        let epoch = Epoch::generate();
        // Never a non-zero ttl rounded down to 0, which means none (`check` refuses a ttl under
        // `MIN_LEASE` anyway).
        let ttl = self.shared.config.stream_ttl;
        let ttl = if ttl.is_zero() {
            0
        } else {
            ttl.as_millis().max(1)
        }
        .to_string();
        let value: redis::Value = scripts::CREATE_SCRIPT
            .key(&keys.meta)
            .key(&keys.log)
            .key(&keys.ctl)
            .key(&keys.lease)
            .arg(codec::encode_epoch(epoch))
            .arg(capacity.to_string())
            .arg(ttl)
            .invoke_async(&mut self.write_conn())
            .await
            .map_err(|e| Error::from_redis(id, e))?;
        let (mut reply, status) = Reply::new(id, value)?;
        if status == "EXISTS" {
            // Opened, not created: the whole stored state is checked, as `open` does, so foreign
            // or damaged keys are `Corrupt` here rather than at the first read or append.
            let state = read_state(self, id, &keys).await?;
            let (epoch, capacity) = (state.identity.epoch, state.capacity);
            return Ok(RedisStream::new(self.clone(), *id, keys, epoch, capacity));
        }
        let epoch = reply.string("epoch")?;
        let epoch = codec::decode_epoch(&epoch)
            .ok_or_else(|| codec::corrupt(id, "meta field epoch is not a hex epoch"))?;
        let capacity = reply.id("cap")?;
        if capacity == 0 {
            return Err(codec::corrupt(id, "meta field cap is 0"));
        }
        Ok(RedisStream::new(self.clone(), *id, keys, epoch, capacity))
    }

    /// Opens existing stream `id` (whatever its epoch).
    ///
    /// # Errors
    /// [`Error::NotFound`] if it does not exist (never created, deleted, expired);
    /// [`Error::Corrupt`], [`Error::Unavailable`].
    ///
    /// # Cancel safety
    /// Cancel safe: read only.
    pub async fn open(&self, id: &StreamId) -> Result<RedisStream, Error> {
        let keys = Keys::new(&self.shared.config.key_prefix, id);
        let state = read_state(self, id, &keys).await?;
        Ok(RedisStream::new(
            self.clone(),
            *id,
            keys,
            state.identity.epoch,
            state.capacity,
        ))
    }

    /// Deletes every key of stream `id`, whichever incarnation they belong to and whatever they
    /// hold: the way back from a stream that is [`Error::Corrupt`] (keys holding data this crate
    /// did not write), on which [`open`](Self::open) and [`create`](Self::create) fail, so that
    /// no handle can delete it. Readers, producers and resumes of it then get "stream lost" (a
    /// resuming SSE client a 404), and [`create`](Self::create) makes a new incarnation.
    /// [`RedisStream::delete`] deletes only its own incarnation: prefer it where there is a
    /// handle.
    ///
    /// ```no_run
    /// # async fn f(backend: replay_ring_redis::RedisBackend) -> Result<(), replay_ring_redis::Error> {
    /// use replay_ring_redis::{Error, StreamId};
    /// let id = StreamId::new("events").unwrap();
    /// let stream = match backend.create(&id, 1024).await {
    ///     Err(Error::Corrupt { detail, .. }) => {
    ///         eprintln!("stream {id} held foreign data ({detail}); purging it");
    ///         backend.purge(&id).await?;
    ///         backend.create(&id, 1024).await?
    ///     }
    ///     other => other?,
    /// };
    /// # drop(stream); Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Unavailable`], [`Error::Server`] (an ACL rule refusing `DEL`, say).
    ///
    /// # Cancel safety
    /// Cancel safe: one `DEL` of the four keys, which share a slot: all are deleted or none.
    pub async fn purge(&self, id: &StreamId) -> Result<(), Error> {
        let keys = Keys::new(&self.shared.config.key_prefix, id);
        redis::cmd("DEL")
            .arg(&keys.all()[..])
            .query_async::<()>(&mut self.write_conn())
            .await
            .map_err(|e| Error::from_redis(id, e))
    }
}
