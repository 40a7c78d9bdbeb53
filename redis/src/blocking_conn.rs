//! A connection of its own for one caller's blocking reads (`XREAD BLOCK`), whose read outlives a
//! cancelled caller. The caller is a stream handle's shared tail (`tail_task.rs`) or a producer waiting
//! for room in the window.
//!
//! Redis answers a connection's commands in order, and a blocked `XREAD` holds its connection until
//! data arrives or its block time runs out. A caller that gives up on such a read (a `select!`
//! whose other branch won, a timeout, the SSE writer sending a keep-alive) drops only its side:
//! the read stays blocked in Redis, and a read sent next on the same connection would queue behind
//! it, wait up to two block times, and run out the connection's response timeout (one block time
//! plus `response_timeout`). So the read runs on a task of its own, and the next call picks up the
//! reply of the read still in flight when it asks for the same thing, which it does whenever its
//! cursor has not moved (a cursor moves only when a reply is delivered). A call that asks for
//! something else leaves the busy connection to finish on its own and opens another.

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{Cmd, ErrorKind, RedisError, ServerErrorKind, Value};
use tokio::task::JoinHandle;

use crate::backend::RedisBackend;

/// A read in flight on its own task: the command it sent (as sent), and its reply to come.
#[derive(Debug)]
struct InFlight {
    packed: Vec<u8>,
    task: JoinHandle<Result<Value, RedisError>>,
}

impl Drop for InFlight {
    /// Nobody will ask for the reply: stop waiting for it (the connection is dropped with it).
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A dedicated connection (created on first use, and again after an error) and the blocking read
/// in flight on it, if a caller gave up on one.
#[derive(Debug, Default)]
pub(crate) struct BlockingConn {
    conn: Option<MultiplexedConnection>,
    in_flight: Option<InFlight>,
    /// On a Redis Cluster, the node (`host:port`) that the backend's slot map named as serving
    /// the stream's slot when this connection was first made, or that a `MOVED` (or the cluster's
    /// slot map, when the node before could not be reached) named since; with none of these, the
    /// URL's node.
    node: Option<String>,
    /// `node` is the one an `ASK` named: it is importing the slot, whose keys it has, and serves
    /// them only to a command right behind `ASKING`. Each read is sent that way until a `MOVED`
    /// (the migration ended either way) or a fresh look at the slot map replaces the node; once
    /// the node owns the slot, `ASKING` changes nothing.
    asking: bool,
}

/// How many times one call follows a cluster node's `MOVED` or `ASK` to the node it names.
const REDIRECTS: u32 = 3;

impl BlockingConn {
    /// Sends `cmd` on this connection (calling `on_send` as it goes out) and returns Redis's
    /// reply; if an earlier call sent the same command and was cancelled before its reply came,
    /// returns that read's reply instead of sending another. After an error the next call
    /// connects again. On a Redis Cluster a `MOVED` or an `ASK` (the command did not run) is
    /// followed to the node it names, which later calls keep using (after an `ASK`, behind
    /// `ASKING`); `key` (one of the command's keys) names the slot when that node cannot be
    /// reached.
    ///
    /// Cancel safe: the read goes on, and the next call with the same command takes its reply.
    pub(crate) async fn query(
        &mut self,
        backend: &RedisBackend,
        key: &str,
        cmd: &Cmd,
        mut on_send: impl FnMut(),
    ) -> Result<Value, RedisError> {
        let mut redirects = 0;
        let mut looked_up = false;
        loop {
            let reply = self.query_once(backend, key, cmd, &mut on_send).await;
            let Err(e) = &reply else { return reply };
            if e.kind() == ErrorKind::Server(ServerErrorKind::ClusterDown)
                && backend.is_cluster()
                && !looked_up
            {
                // A node that no longer knows the slot (taken out of the cluster and reset, as
                // `redis-cli --cluster del-node` leaves it, or restarted without its cluster
                // config) answers `CLUSTERDOWN`, never `MOVED`; the backend's slot map may still
                // name it. The cluster's own slot map names the node that serves the slot now.
                looked_up = true;
                if self.move_to_serving_node(backend, key).await {
                    continue;
                }
                return reply;
            }
            let Some((node, slot)) = e.redirect_node().filter(|_| backend.is_cluster()) else {
                return reply;
            };
            if redirects == REDIRECTS {
                // The slot keeps moving: worth a later try, like `TRYAGAIN`.
                return Err(crate::connection::still_redirected(reply.unwrap_err()));
            }
            let asked = e.kind() == ErrorKind::Server(ServerErrorKind::Ask);
            if !asked {
                // Only a `MOVED` says the slot's node changed; an `ASK` is for this command.
                backend.learn_node(slot, node);
            }
            self.node = Some(node.to_owned());
            self.asking = asked;
            redirects += 1;
        }
    }

    async fn query_once(
        &mut self,
        backend: &RedisBackend,
        key: &str,
        cmd: &Cmd,
        on_send: &mut impl FnMut(),
    ) -> Result<Value, RedisError> {
        let packed = cmd.get_packed_command();
        if self.in_flight.as_ref().is_some_and(|f| f.packed != packed) {
            // The connection is busy with a read nobody wants: let it finish apart from ours.
            self.in_flight = None;
            self.conn = None;
        }
        if self.in_flight.is_none() {
            if self.conn.is_none() {
                self.conn = Some(self.connect(backend, key).await?);
            }
            let mut conn = self.conn.clone().expect("connected above");
            let cmd = cmd.clone();
            let asking = self.asking;
            on_send();
            let task = tokio::spawn(async move {
                if asking {
                    behind_asking(&mut conn, &cmd).await
                } else {
                    cmd.query_async::<Value>(&mut conn).await
                }
            });
            self.in_flight = Some(InFlight { packed, task });
        }
        let in_flight = self.in_flight.as_mut().expect("sent above");
        let reply = (&mut in_flight.task).await;
        self.in_flight = None;
        let reply = reply.unwrap_or_else(|panicked| Err(std::io::Error::other(panicked).into()));
        if reply.is_err() {
            self.conn = None;
        }
        reply
    }

    /// A connection to the node that serves `key`'s slot, as far as this connection knows it, or
    /// else the backend (`slot_map.rs`; the URL's node if neither knows).
    ///
    /// On a Redis Cluster that node may be gone for good: a primary that failed, whose replica
    /// now serves its slots. No `MOVED` can come from a node that does not answer, so the
    /// cluster's slot map, which the shared connection gets from nodes that do, names the node
    /// to use instead.
    async fn connect(
        &mut self,
        backend: &RedisBackend,
        key: &str,
    ) -> Result<MultiplexedConnection, RedisError> {
        if self.node.is_none() && backend.is_cluster() {
            self.node = backend.known_node(key);
        }
        let first = backend.dedicated(self.node.as_deref()).await;
        if first.is_ok() || !backend.is_cluster() {
            return first;
        }
        if self.move_to_serving_node(backend, key).await {
            return backend.dedicated(self.node.as_deref()).await;
        }
        first
    }

    /// Reads the cluster's slot map again and, if it names another node than this connection's
    /// for `key`'s slot, takes that node (without `ASKING`: it serves the slot). Whether it did.
    async fn move_to_serving_node(&mut self, backend: &RedisBackend, key: &str) -> bool {
        match backend.serving_node(key).await {
            Some(node) if self.node.as_ref() != Some(&node) => {
                self.node = Some(node);
                self.asking = false;
                true
            }
            _ => false,
        }
    }
}

/// Sends `cmd` right behind `ASKING` in one pipeline, so that no other command comes between, and
/// returns `cmd`'s reply. A blocked read sent this way to a node importing its slot is served
/// when data arrives there (Redis 7.0), and answered `MOVED` if the migration is called off.
async fn behind_asking(conn: &mut MultiplexedConnection, cmd: &Cmd) -> Result<Value, RedisError> {
    let mut pipe = redis::pipe();
    pipe.cmd("ASKING").add_command(cmd.clone());
    // Only the command's reply: the pipeline's first reply is `ASKING`'s.
    match conn.req_packed_commands(&pipe, 1, 1).await?.pop() {
        Some(Value::ServerError(e)) => Err(e.into()),
        Some(value) => Ok(value),
        None => Err(RedisError::from((
            ErrorKind::Client,
            "a Redis Cluster node sent no reply to a command behind ASKING",
        ))),
    }
}
