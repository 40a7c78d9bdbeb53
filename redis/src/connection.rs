//! The shared connection for short commands: a [`ConnectionManager`] that sends a command once
//! more when the connection it went out on turned out to be closed.
//!
//! Redis closes its clients' connections on a restart, a failover, `CLIENT KILL` or its idle
//! `timeout`. Over RESP2 the manager learns of it only when a command fails on the closed
//! connection; it then connects again in the background, but that first command has failed
//! although Redis may have been back for a long time, and an SSE request would be answered 503
//! (which ends a browser's `EventSource` for good). So a command that fails because its
//! connection was closed is sent once more, on the new connection.
//!
//! A refused connection is tried once more too. The manager keeps the outcome of its last
//! reconnection and answers the next command with it before it starts another: after Redis was
//! down for longer than the manager's retries, the first command once Redis is back would fail
//! with the old refusal. The second attempt waits for a fresh connection; while Redis is really
//! down it fails the same way, one connection attempt later. A refused command never reached
//! Redis, so this resend is safe for any command. A timeout is not retried: the command may
//! still be running, and a second one would only fail later.
//!
//! Sending a command twice is safe because every command of this crate is idempotent: reads,
//! `DEL`, and scripts that recognise a repeat (an append carries its id and is acknowledged again,
//! releases are monotonic, creating an existing stream opens it, and a lease acquisition carries
//! its handle's claim and is handed the token it was granted again, see `claim.rs`). A resend
//! can still be refused where the first attempt ran (an ACL rule or `-OOM` in between, or a
//! lease check that comes before the repeat is recognised: a close gives its lease up, and a
//! lease may lapse meanwhile), so a handle remembers that it resent
//! ([`SharedConnection::was_cut_off`]) and the producer takes such a refusal of an append for an
//! unknown outcome, and of a close for the stored reason.

use std::io;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::SingleNodeRoutingInfo;
use redis::{
    Client, Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, RedisResult, ServerErrorKind, Value,
};

use crate::cluster_clients::ClusterClients;

/// The least time between two replacements of a manager whose reconnection failed to
/// authenticate: a Redis that keeps refusing the credentials costs one connection attempt (and
/// its retries) a second, not one per command.
const REPLACE_PAUSE: Duration = Duration::from_secs(1);

/// A backend's shared connection to Redis ([`RedisBackend::connection`]), for commands of your
/// own next to the backend's: a reconnecting multiplexed connection that sends a command once
/// more when Redis had closed the connection under it (a restart, a failover, `CLIENT KILL`, its
/// idle `timeout`), or when the connection was refused (by a reconnection that failed before
/// Redis came back, or because Redis is still down). Send only commands that may run twice
/// (reads, `SET` of a fixed value, `DEL`): when the reply is lost the first attempt may have run.
/// Cheap to clone.
///
/// On a Redis Cluster it is a cluster client: each command goes to the node that serves its
/// keys' slot, and a command a node redirected (`MOVED`, `ASK`, `TRYAGAIN`: it did not run) is
/// sent again, a few times within a moment (after an `ASK`, a command goes at once to the node
/// it names, behind `ASKING`; a pipeline goes to its slot's node again). A command of your own
/// that names keys of several slots is refused (`CROSSSLOT`), except `MGET`, `MSET`, `DEL`,
/// `EXISTS`, `UNLINK` and `TOUCH`, which redis-rs splits into one command per slot: those run
/// on each node apart, not atomically. Give keys used together a common `{hash tag}`.
///
/// If a reconnection is refused at authentication (the credentials were changed, or the user
/// disabled), commands fail with that error until Redis accepts the credentials again; the
/// connection tries again at most once a second, and recovers by itself once they work.
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
pub struct SharedConnection {
    link: Link,
    /// A command sent through this handle went out again after its connection closed under it:
    /// its first attempt may have run, whatever the second was told.
    cut_off: bool,
}

/// What the commands go out on.
#[derive(Clone)]
enum Link {
    /// One Redis (or one node of a cluster that is not in cluster mode).
    Single(Arc<Managed>),
    /// A Redis Cluster: each command goes to the node that serves its keys' slot. Built with no
    /// retries of its own (`RedisBackend::connect`), because redis-rs's cluster client resends a
    /// command after its connection dropped without saying so, and a resend must set
    /// [`SharedConnection::was_cut_off`]; redirections are followed here instead.
    Cluster(Arc<ClusterLink>),
}

impl Clone for SharedConnection {
    /// A handle on the same connection that has sent nothing yet.
    fn clone(&self) -> Self {
        SharedConnection {
            link: self.link.clone(),
            cut_off: false,
        }
    }
}

impl std::fmt::Debug for SharedConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedConnection").finish_non_exhaustive()
    }
}

/// The manager in use, and what it takes to replace it.
struct Managed {
    client: Client,
    config: ConnectionManagerConfig,
    current: Replaceable<ConnectionManager>,
}

/// A Redis Cluster client's connection in use, and what it takes to replace it.
///
/// redis-rs's cluster client refreshes its map of the slots only after a `MOVED`. Two kinds of
/// node never answer one, so a client whose map still names them for some slots would fail every
/// command on those slots for as long as it runs:
/// - a node that left the cluster (`redis-cli --cluster del-node` forgets it and resets it, and
///   leaves it running) answers `CLUSTERDOWN` for every key;
/// - a primary that stopped answering (a frozen process or VM, a partition that drops packets)
///   while the cluster promoted its replica answers nothing, and every command to it times out.
///
/// A new client learns the slots from the URL's node, or from another node the backend's slot
/// map has learned if the URL's does not answer (`cluster_clients.rs`).
struct ClusterLink {
    clients: Arc<ClusterClients>,
    current: Replaceable<ClusterConnection>,
}

/// A connection that commands clone to go out on, replaced when it cannot recover by itself: at
/// most once per [`REPLACE_PAUSE`], and once for all the commands that saw the same one fail.
struct Replaceable<C> {
    state: Mutex<Generation<C>>,
}

struct Generation<C> {
    conn: C,
    /// Counts replacements, so that of the commands that saw one connection fail, only the
    /// first replaces it.
    number: u64,
    replaced_at: Option<Instant>,
}

impl<C: Clone> Replaceable<C> {
    fn new(conn: C) -> Self {
        Replaceable {
            state: Mutex::new(Generation {
                conn,
                number: 0,
                replaced_at: None,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Generation<C>> {
        // Poisoning cannot leave `Generation` half-updated: every update is a few plain stores.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The connection in use, and its generation.
    fn current(&self) -> (C, u64) {
        let current = self.lock();
        (current.conn.clone(), current.number)
    }

    /// Whether the connection of `generation` may be replaced now (it is still the one in use,
    /// and none was replaced within [`REPLACE_PAUSE`]); if so, the pause starts now, so that the
    /// commands failing meanwhile leave the replacement to this one.
    fn claim(&self, generation: u64) -> bool {
        let mut current = self.lock();
        let now = Instant::now();
        if current.number != generation
            || current
                .replaced_at
                .is_some_and(|at| now.duration_since(at) < REPLACE_PAUSE)
        {
            return false;
        }
        current.replaced_at = Some(now);
        true
    }

    /// Puts `conn` in place of the connection of `generation`, unless another took its place
    /// meanwhile, and returns the connection in use.
    fn replace(&self, generation: u64, conn: C) -> C {
        let mut current = self.lock();
        if current.number == generation {
            current.conn = conn;
            current.number += 1;
        }
        current.conn.clone()
    }
}

impl ClusterLink {
    /// After a `CLUSTERDOWN` from the connection of `generation`: replaces it with a new client's
    /// (a cluster that is down answers every command so: see [`Replaceable`]), and returns the
    /// connection to send on now. A connection that cannot be made leaves the current one in
    /// place.
    async fn renew(&self, generation: u64) -> ClusterConnection {
        if self.current.claim(generation) {
            if let Ok(conn) = self.clients.connect().await {
                return self.current.replace(generation, conn);
            }
        }
        self.current.current().0
    }

    /// After a command on the connection of `generation` timed out: its node may have stopped
    /// answering while its replica took over ([`ClusterLink`]), so the connection is replaced as
    /// for a `CLUSTERDOWN`, for the commands that come next. On a task of its own: the command
    /// that timed out is answered now (it may have run, so it is not sent again), not after
    /// the new client's connections, which take up to their own timeouts if the URL's node is
    /// the one that stopped. A slow Redis costs a new client at most once per [`REPLACE_PAUSE`].
    fn renew_after_timeout(self: &Arc<Self>, generation: u64) {
        // Outside a runtime (a caller's own executor) nothing is spawned: the next `CLUSTERDOWN`
        // or `MOVED` is then what renews the map.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let link = Arc::clone(self);
            runtime.spawn(async move { link.renew(generation).await });
        }
    }
}

impl SharedConnection {
    pub(crate) fn new(
        client: Client,
        config: ConnectionManagerConfig,
        manager: ConnectionManager,
    ) -> Self {
        SharedConnection {
            link: Link::Single(Arc::new(Managed {
                client,
                config,
                current: Replaceable::new(manager),
            })),
            cut_off: false,
        }
    }

    /// A connection to a Redis Cluster through a client that `clients` builds (with no retries
    /// of its own).
    pub(crate) async fn cluster(clients: Arc<ClusterClients>) -> RedisResult<Self> {
        let conn = clients.connect().await?;
        Ok(SharedConnection {
            link: Link::Cluster(Arc::new(ClusterLink {
                clients,
                current: Replaceable::new(conn),
            })),
            cut_off: false,
        })
    }

    /// Whether a command sent through this handle was sent again because its connection closed
    /// under it: its first attempt may have run, so a refusal of the second (an ACL rule, `-OOM`,
    /// a failed login on the new connection) does not say it did not.
    pub(crate) fn was_cut_off(&self) -> bool {
        self.cut_off
    }
}

impl Managed {
    /// After `error` from the manager of `generation`: replaces a manager that cannot recover.
    ///
    /// redis-rs's manager connects again only after an I/O error. When that reconnection is
    /// refused at authentication, the manager keeps the failed attempt and answers every later
    /// command with its error, for good, even once Redis accepts the credentials again; a new
    /// manager, connecting lazily on its first command, is the only way out.
    fn after_failure(&self, error: &RedisError, generation: u64) {
        if error.kind() != ErrorKind::AuthenticationFailed || !self.current.claim(generation) {
            return;
        }
        // Fails only for a push-sender setting this crate never makes.
        if let Ok(manager) =
            ConnectionManager::new_lazy_with_config(self.client.clone(), self.config.clone())
        {
            self.current.replace(generation, manager);
        }
    }
}

/// The connection the command went out on was closed before its reply came: the manager has
/// started a new one, and the command can go out again on it.
pub(crate) fn closed_under_it(e: &RedisError) -> bool {
    e.is_connection_dropped() && !e.is_connection_refusal() && !e.is_timeout()
}

/// The command never went out: the connection was refused, possibly by a reconnection that
/// failed before Redis came back (the manager answers with that outcome once, then connects
/// again). Sending it once more is safe for any command.
fn refused(e: &RedisError) -> bool {
    e.is_connection_refusal()
}

/// The lost connection a command that may have run comes down to, with what its resend was
/// told (`answer`).
pub(crate) fn may_have_run(answer: String) -> RedisError {
    RedisError::from(io::Error::new(
        io::ErrorKind::ConnectionAborted,
        format!(
            "the connection closed under the command, and sending it again failed ({answer}): \
             it may have run"
        ),
    ))
}

/// How many times a command is sent again after a cluster node redirected it (`MOVED`, `ASK`,
/// `TRYAGAIN`: it did not run there). redis-rs refreshes its slot map in the background after a
/// `MOVED`, so each resend waits a little longer; a slot being migrated (`ASK`, `TRYAGAIN`) is
/// served again once the migration of its keys ends.
const REDIRECTS: u32 = 4;

/// The pause before the `n`th resend of a redirected command: 10, 20, 40, 80 ms.
fn redirect_pause(n: u32) -> Duration {
    Duration::from_millis(10 << n.saturating_sub(1).min(6))
}

/// A cluster node answered that another node serves the command's slot, or that the slot's
/// keys are being migrated (`TRYAGAIN`: some of a multi-key command's keys have left): it did
/// not run.
fn redirected(e: &RedisError) -> bool {
    e.redirect_node().is_some() || e.kind() == ErrorKind::Server(ServerErrorKind::TryAgain)
}

/// The node (host, port) an `ASK` sends the command to: the slot is being migrated there, and
/// the command's keys have left the node that still serves it. That node answers `ASK` until
/// the migration ends, however often the command is sent to it, and redis-rs's cluster client
/// (built without resends of its own) does not follow it.
fn ask_target(e: &RedisError) -> Option<(String, u16)> {
    if e.kind() != ErrorKind::Server(ServerErrorKind::Ask) {
        return None;
    }
    let (node, _slot) = e.redirect_node()?;
    let (host, port) = node.rsplit_once(':')?;
    Some((host.to_owned(), port.parse().ok()?))
}

/// Sends `cmd` to the node an `ASK` named, right behind `ASKING` in one pipeline on that node's
/// connection, so that no other command comes between: a node serves a slot it is importing
/// only to the command that follows its client's `ASKING`.
async fn asking(
    conn: &mut ClusterConnection,
    cmd: &Cmd,
    (host, port): (String, u16),
) -> RedisResult<Value> {
    let mut pipe = redis::pipe();
    pipe.cmd("ASKING").add_command(cmd.clone());
    let route = SingleNodeRoutingInfo::ByAddress { host, port };
    // Only the command's reply: the pipeline's first reply is `ASKING`'s.
    match conn.route_pipeline(pipe, 1, 1, route).await?.pop() {
        Some(Value::ServerError(e)) => Err(e.into()),
        Some(value) => Ok(value),
        None => Err(RedisError::from((
            ErrorKind::Client,
            "a Redis Cluster node sent no reply to a command behind ASKING",
        ))),
    }
}

/// A command still redirected after [`REDIRECTS`] resends: the cluster's slot map is changing
/// (a failover or a resharding under way), which is worth trying again later, like `TRYAGAIN`.
pub(crate) fn still_redirected(e: RedisError) -> RedisError {
    RedisError::from((
        ErrorKind::Server(ServerErrorKind::TryAgain),
        "the Redis Cluster kept redirecting the command (its slot map is changing)",
        e.to_string(),
    ))
}

/// What a failed attempt allows.
enum Next {
    /// Send the command again, after this pause.
    Resend(Duration),
    /// Give this answer.
    Answer(RedisError),
}

async fn pause_before_resend(pause: Duration) {
    if !pause.is_zero() {
        tokio::time::sleep(pause).await;
    }
}

/// Counts a handle's attempts at one command and decides after each failure whether to send it
/// again: once after its connection closed under it (then it may have run: `cut_off`) or was
/// refused, and on a cluster up to [`REDIRECTS`] times after a redirection.
struct Attempts {
    /// Only a cluster client sends a redirected command to the node it was redirected to; on a
    /// single connection the redirection is the answer (`Error::from_redis` explains it).
    follow_redirects: bool,
    resent: bool,
    redirects: u32,
}

impl Attempts {
    fn new(link: &Link) -> Self {
        Attempts {
            follow_redirects: matches!(link, Link::Cluster(_)),
            resent: false,
            redirects: 0,
        }
    }

    fn after(&mut self, error: RedisError, cut_off: &mut bool) -> Next {
        if self.follow_redirects && redirected(&error) {
            if self.redirects == REDIRECTS {
                return Next::Answer(still_redirected(error));
            }
            self.redirects += 1;
            return Next::Resend(redirect_pause(self.redirects));
        }
        if self.resent {
            return Next::Answer(error);
        }
        if closed_under_it(&error) {
            *cut_off = true;
        } else if !refused(&error) {
            return Next::Answer(error);
        }
        self.resent = true;
        Next::Resend(Duration::ZERO)
    }
}

/// One attempt's connection: a clone of the link's current one.
#[derive(Clone)]
enum Target {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl SharedConnection {
    /// Sends a command or pipeline through `send` (given the connection, and on a cluster the
    /// node an `ASK` named when `follows_ask`) until [`Attempts`] accepts an answer; on a single
    /// Redis, then replaces a manager that cannot recover.
    async fn attempt<T, F, Fut>(&mut self, follows_ask: bool, mut send: F) -> RedisResult<T>
    where
        F: FnMut(Target, Option<(String, u16)>) -> Fut,
        Fut: std::future::Future<Output = RedisResult<T>>,
    {
        let (mut target, generation) = match &self.link {
            Link::Single(managed) => {
                let (manager, generation) = managed.current.current();
                (Target::Single(manager), generation)
            }
            Link::Cluster(link) => {
                let (conn, generation) = link.current.current();
                (Target::Cluster(conn), generation)
            }
        };
        let mut attempts = Attempts::new(&self.link);
        let mut ask = None;
        let mut renewed = false;
        let result = loop {
            match send(target.clone(), ask.take()).await {
                Err(e) => {
                    if let (Link::Cluster(link), false) = (&self.link, renewed) {
                        if e.kind() == ErrorKind::Server(ServerErrorKind::ClusterDown) {
                            // The command did not run; its node may have left the cluster
                            // (`ClusterLink`): once more, on a client that knows the slots now.
                            renewed = true;
                            target = Target::Cluster(link.renew(generation).await);
                            continue;
                        }
                    }
                    let asked = ask_target(&e).filter(|_| follows_ask);
                    match attempts.after(e, &mut self.cut_off) {
                        // Straight to the node that has the keys: waiting would not change the
                        // old node's answer before the slot moves.
                        Next::Resend(_) if asked.is_some() => ask = asked,
                        Next::Resend(pause) => pause_before_resend(pause).await,
                        Next::Answer(e) => break Err(e),
                    }
                }
                ok => break ok,
            }
        };
        match (&result, &self.link) {
            (Err(e), Link::Single(managed)) => managed.after_failure(e, generation),
            (Err(e), Link::Cluster(link)) if e.is_timeout() => link.renew_after_timeout(generation),
            _ => {}
        }
        result
    }
}

impl ConnectionLike for SharedConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(self.attempt(true, move |target, ask| async move {
            match (target, ask) {
                (Target::Cluster(mut conn), Some(node)) => asking(&mut conn, cmd, node).await,
                (Target::Cluster(mut conn), None) => conn.req_packed_command(cmd).await,
                (Target::Single(mut manager), _) => manager.req_packed_command(cmd).await,
            }
        }))
    }

    /// A pipeline answered `ASK` goes to its slot's node again (behind a pause), as after a
    /// `MOVED`: `ASKING` covers only the one command after it.
    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(self.attempt(false, move |target, _| async move {
            match target {
                Target::Cluster(mut conn) => {
                    conn.req_packed_commands(pipeline, offset, count).await
                }
                Target::Single(mut manager) => {
                    manager.req_packed_commands(pipeline, offset, count).await
                }
            }
        }))
    }

    fn get_db(&self) -> i64 {
        match &self.link {
            Link::Single(managed) => managed.current.current().0.get_db(),
            // Redis Cluster has database 0 only.
            Link::Cluster(_) => 0,
        }
    }
}
