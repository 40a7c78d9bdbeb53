//! Following a stream from one incarnation to the next: noticing that Redis lost the one a handle
//! refers to, and moving on to the stream's next incarnation (a new epoch) the same way on every
//! replica.

use std::time::Duration;

use crate::error::Error;
use crate::stream::RedisStream;

impl RedisStream {
    /// Waits until Redis has lost this incarnation of the stream, and returns why: an error for
    /// which [`Error::is_stream_lost`] holds ([`Error::NotFound`]: deleted, expired, or gone in a
    /// Redis restart without persistence; [`Error::EpochChanged`]: created again;
    /// [`Error::LogRolledBack`]: Redis lost events this handle saw; [`Error::Corrupt`]).
    ///
    /// It reads the stream's state every `check_every` (one read-only script). Errors that are
    /// not a loss, such as Redis being unreachable for a while, do not end the wait: the next
    /// check tries again. Each read also records the head this handle has seen, which is how a
    /// log that went back behind it is told; so call this on the handle the replica serves and
    /// produces with. A closed stream is not lost: it is served as it is until it expires or is
    /// deleted, and then this returns.
    ///
    /// Then call [`next_incarnation`](Self::next_incarnation) and serve the handle it returns.
    ///
    /// # Panics
    /// If `check_every` is zero (a loop that never waits).
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use replay_ring_redis::{RedisBackend, RedisConfig, StreamId};
    ///
    /// # async fn f() -> Result<(), replay_ring_redis::Error> {
    /// let backend = RedisBackend::connect("redis://127.0.0.1:6379", RedisConfig::default()).await?;
    /// let mut stream = backend.create(&StreamId::new("events").unwrap(), 1024).await?;
    /// loop {
    ///     // Serve `stream` (and produce into it) until it is lost…
    ///     let lost = stream.until_lost(Duration::from_secs(1)).await;
    ///     eprintln!("{lost}; moving on to the next incarnation");
    ///     // …then the next incarnation, which every replica converges on. Clients holding ids
    ///     // of the lost one get "stream lost" (404) and start over.
    ///     stream = loop {
    ///         match stream.next_incarnation(&lost).await {
    ///             Ok(next) => break next,
    ///             // Redis down or out of memory: retry; anything else (a `Corrupt` stream,
    ///             // say) needs an operator (`RedisBackend::purge`)
    ///             Err(e) if e.is_transient() => tokio::time::sleep(Duration::from_secs(1)).await,
    ///             Err(e) => return Err(e),
    ///         }
    ///     };
    /// }
    /// # }
    /// ```
    pub async fn until_lost(&self, check_every: Duration) -> Error {
        assert!(!check_every.is_zero(), "until_lost: check_every is zero");
        loop {
            tokio::time::sleep(check_every).await;
            match self.state().await {
                Err(e) if e.is_stream_lost() => return e,
                // Unreachable for now, out of memory: the stream may well be there.
                Ok(_) | Err(_) => {}
            }
        }
    }

    /// Opens the stream's next incarnation after this one was `lost` (as
    /// [`until_lost`](Self::until_lost) or any other call on a handle of it reported), creating
    /// it with a new epoch unless another replica already did: replicas that all call this
    /// converge on one incarnation, as [`RedisBackend::create`](crate::RedisBackend::create)
    /// does. It keeps this handle's window capacity (for a stream it creates) and its
    /// [`max_readers`](Self::max_readers).
    ///
    /// After [`Error::LogRolledBack`] it first deletes this incarnation, whose log Redis shortened
    /// behind ids clients hold: continuing it would hand those ids out again with other events.
    /// (A newer incarnation that another replica created meanwhile is left alone.) It deletes
    /// nothing for any other error; a [`Corrupt`](Error::Corrupt) stream, whose keys hold foreign
    /// data, is left to an operator ([`RedisBackend::purge`](crate::RedisBackend::purge), or
    /// [`delete`](Self::delete) on a handle) and this fails with `Corrupt` again. For an error
    /// that is not a loss at all, this opens the incarnation that is there, which may be this
    /// one.
    ///
    /// It opens whatever incarnation Redis has. A Redis restored from a snapshot taken before
    /// the stream was last created again brings back an older epoch with a short log, and this
    /// opens and continues it; no handle remembers that epoch's head to tell the rollback. Keep
    /// the epochs a process has left and delete rather than serve one that comes back, or avoid
    /// such restores (`docs/scaling.md`).
    ///
    /// # Errors
    /// [`Error::Unavailable`] or [`Error::OutOfMemory`] (try again), [`Error::Corrupt`]; as
    /// [`create`](crate::RedisBackend::create).
    ///
    /// # Cancel safety
    /// Cancel safe: the deletion and the creation are one atomic script each, and calling again
    /// converges.
    pub async fn next_incarnation(&self, lost: &Error) -> Result<RedisStream, Error> {
        self.delete_if_rolled_back(lost).await?;
        let next = self.backend.create(&self.id, self.capacity).await?;
        Ok(next.with_max_readers(self.max_readers()))
    }

    /// The first step of [`next_incarnation`](Self::next_incarnation), for a process that opens
    /// the next incarnation without creating it (one that only serves what others produce):
    /// deletes this incarnation if `lost` is [`Error::LogRolledBack`] for this stream, and does
    /// nothing otherwise. Any process that saw the rollback must do this, or one that opens the
    /// stream again would serve the shortened log.
    ///
    /// # Errors
    /// [`Error::Unavailable`] (try again).
    ///
    /// # Cancel safety
    /// Cancel safe: one script, which deletes every key or none.
    pub async fn delete_if_rolled_back(&self, lost: &Error) -> Result<(), Error> {
        match lost {
            Error::LogRolledBack { stream, .. } if *stream == self.id => self.delete().await,
            _ => Ok(()),
        }
    }
}
