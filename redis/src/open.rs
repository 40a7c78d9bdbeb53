//! Creating and opening a stream on a backend: the handles every replica starts from.

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
}
