//! The progress reports of a connection served from Redis (feature `redis`): how far it has
//! written, every third of the lease, into the stream's `:readers` hash, which the replica that
//! owns the stream counts as a connection of its retention (`remote_progress.rs`).

use std::time::{Duration, Instant};

use replay_ring_redis::RedisStream;

use crate::redis_log::RedisEventLog;

/// How often a connection served from Redis reports: as often as the owning replica reads the
/// reports (its maintenance, every third of the lease).
pub(crate) fn report_every(log: &RedisEventLog) -> Duration {
    (log.backend().config().lease / 3).max(Duration::from_millis(10))
}

/// One connection's reports. Dropped with the connection, it removes its report, so the owner
/// counts the client as departed at its next read.
pub(crate) struct ProgressReporter {
    log: RedisEventLog,
    stream: RedisStream,
    /// The connection's field in the hash: unique across replicas.
    token: String,
    every: Duration,
    /// When the last report was attempted.
    attempted_at: Option<Instant>,
    /// The count of reports made: a report whose count moves is a live reader.
    beat: u64,
    /// Whether this connection reports at all: the owner counts a request stream's readers only.
    active: bool,
}

impl ProgressReporter {
    pub(crate) fn new(
        log: RedisEventLog,
        stream: RedisStream,
        token: String,
        active: bool,
    ) -> Self {
        ProgressReporter {
            every: report_every(&log),
            log,
            stream,
            token,
            attempted_at: None,
            beat: 0,
            active,
        }
    }

    /// When the next report is due: at once for the first, then every [`report_every`] after the
    /// last attempt, whether or not anything new was written (the moving count is how the owner
    /// knows the reader is alive). `None` when this connection reports nothing.
    pub(crate) fn due(&self) -> Option<Instant> {
        self.active.then(|| {
            self.attempted_at
                .map_or_else(Instant::now, |at| at + self.every)
        })
    }

    /// Reports that the connection has written through `written` (what its transport took). A
    /// failure waits for the next report; a Redis outage ends the connection on its next read.
    pub(crate) async fn report(&mut self, written: u64) {
        self.attempted_at = Some(Instant::now());
        self.beat += 1;
        let report = self
            .log
            .report_reader(&self.stream, &self.token, written, self.beat);
        let _ = report.await;
    }
}

impl Drop for ProgressReporter {
    fn drop(&mut self) {
        // Also when no report was confirmed: one whose reply was lost may be in Redis. Should
        // this removal not reach Redis, the owner takes the report for dead once it stops moving.
        if !self.active {
            return;
        }
        let (log, stream) = (self.log.clone(), self.stream.clone());
        let token = std::mem::take(&mut self.token).into_bytes();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = log.forget_readers(&stream, &[token]).await;
            });
        }
    }
}
