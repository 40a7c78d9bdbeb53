//! The shared connection for short commands: a [`ConnectionManager`] that sends a command once
//! more when the connection it went out on turned out to be closed.
//!
//! Redis closes its clients' connections on a restart, a failover, `CLIENT KILL` or its idle
//! `timeout`. Over RESP2 the manager learns of it only when a command fails on the closed
//! connection; it then connects again in the background, but that first command has failed
//! although Redis may have been back for a long time, and an SSE request would be answered 503
//! (which ends a browser's `EventSource` for good). So a command that fails because its
//! connection was closed is sent once more, on the new connection. A refused connection (Redis
//! down) and a timeout are not retried: the second attempt would fail the same way, only later.
//!
//! Sending a command twice is safe because every command of this crate is idempotent: reads,
//! `DEL`, and scripts that recognise a repeat (an append carries its id and is acknowledged again,
//! releases and closes are monotonic, creating an existing stream opens it, and a lease
//! acquisition carries its handle's claim and is handed the token it was granted again, see
//! `claim.rs`).

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::{Cmd, Pipeline, RedisError, RedisFuture, Value};

/// A backend's shared connection to Redis ([`RedisBackend::connection`]), for commands of your
/// own next to the backend's: a reconnecting multiplexed connection that sends a command once
/// more when Redis had closed the connection under it (a restart, a failover, `CLIENT KILL`, its
/// idle `timeout`). Send only commands that may run twice (reads, `SET` of a fixed value, `DEL`):
/// when the reply is lost the first attempt may have run. Cheap to clone.
///
/// ```no_run
/// # async fn f(backend: replay_ring_redis::RedisBackend) -> redis::RedisResult<()> {
/// use redis::AsyncCommands;
/// let mut conn = backend.connection();
/// let owner: Option<String> = conn.get("my-app:owner").await?;
/// # Ok(()) }
/// ```
///
/// [`RedisBackend::connection`]: crate::RedisBackend::connection
#[derive(Clone)]
pub struct SharedConnection(ConnectionManager);

impl std::fmt::Debug for SharedConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedConnection").finish_non_exhaustive()
    }
}

impl SharedConnection {
    pub(crate) fn new(manager: ConnectionManager) -> Self {
        SharedConnection(manager)
    }
}

/// The connection the command went out on was closed before its reply came: the manager has
/// started a new one, and the command can go out again on it.
pub(crate) fn closed_under_it(e: &RedisError) -> bool {
    e.is_connection_dropped() && !e.is_connection_refusal() && !e.is_timeout()
}

impl ConnectionLike for SharedConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            match self.0.req_packed_command(cmd).await {
                Err(e) if closed_under_it(&e) => self.0.req_packed_command(cmd).await,
                other => other,
            }
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            match self.0.req_packed_commands(pipeline, offset, count).await {
                Err(e) if closed_under_it(&e) => {
                    self.0.req_packed_commands(pipeline, offset, count).await
                }
                other => other,
            }
        })
    }

    fn get_db(&self) -> i64 {
        self.0.get_db()
    }
}
