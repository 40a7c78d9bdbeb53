//! The connection to Redis shared by every stream of a process: configuration, the multiplexed
//! connection for short commands (`connection.rs`), and counters.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManagerConfig, MultiplexedConnection};
use redis::{AsyncConnectionConfig, ConnectionAddr};

use crate::cluster_clients::ClusterClients;
use crate::connection::SharedConnection;
use crate::error::Error;
use crate::slot_map::SlotMap;

/// Settings of a [`RedisBackend`].
///
/// ```
/// use std::time::Duration;
/// let config = replay_ring_redis::RedisConfig {
///     key_prefix: "myapp:sse".into(),
///     stream_ttl: Duration::from_secs(3600),
///     ..Default::default()
/// };
/// assert_eq!(config.lease, Duration::from_secs(10));
/// ```
#[derive(Debug, Clone)]
pub struct RedisConfig {
    /// Prefix of every key (`<prefix>:{<stream>}:meta|log|ctl|lease`). Must not contain `{` or `}`.
    pub key_prefix: String,
    /// An abandoned stream expires this long after its last append, release, renewal or close
    /// (`PEXPIRE`, refreshed by each). Expiry is "stream lost": resumes are then refused with 404.
    /// `Duration::ZERO` disables expiry; otherwise it must be at least `lease`, so that a stream
    /// never expires while its producer holds the lease. A stream keeps the ttl of the replica that created it; a lease holder
    /// configured with a longer lease than that ttl keeps it alive all the same (a grant, an
    /// append and a renewal set the expiry to at least the lease, and a release or a close never
    /// shortens it). `stream_ttl`, `lease` and `block` must each be below 2^53 milliseconds
    /// ([`RedisBackend::connect`] refuses more).
    pub stream_ttl: Duration,
    /// How long a producer lease lasts without renewal. Appends renew it. At least
    /// [`MIN_LEASE`].
    pub lease: Duration,
    /// Most events one replay or tail read fetches (one `XRANGE … COUNT` page): 1 to 2^63 − 1.
    pub read_batch: usize,
    /// How long one blocked `XREAD` waits before the waiting readers re-check the stream (expiry,
    /// deletion). The blocking read's dedicated connection allows this plus `response_timeout`.
    pub block: Duration,
    /// Response timeout of the shared connection (every command except a blocked read), and the
    /// margin a blocked read's reply has past `block`. Not zero. A reply later than this is
    /// [`Error::Unavailable`]; for the readers waiting on a stream's blocked read, their reads end
    /// with it (an SSE connection with its `backend_unavailable` frame, which the client resumes
    /// from). So keep it well above Redis's latency on a loaded host: the default is 2 s, and a
    /// margin of 100 ms ended idle readers on a healthy Redis beside a busy CPU.
    pub response_timeout: Duration,
    /// How long [`RedisBackend::connect`] may take in all, and each later reconnection attempt
    /// of a connection. Not zero.
    pub connect_timeout: Duration,
    /// The largest payload one event may have; a larger one is refused with [`Error::TooLarge`]
    /// before anything is sent (with the rest of its batch), and consumes no id. Not zero. The
    /// default, [`DEFAULT_MAX_PAYLOAD_BYTES`] (512 MiB), is Redis's default `proto-max-bulk-len`,
    /// the longest argument it takes. Keep it at or below that setting, and below
    /// `client-query-buffer-limit` (1 GiB by default), on your Redis: Redis drops
    /// the connection under a longer one, which reads as a lost reply, and the producer would
    /// resend that event, and queue every later one behind it, without end.
    pub max_payload_bytes: usize,
}

/// The shortest [`RedisConfig::lease`] that [`RedisConfig::check`] accepts: the producer renews its
/// lease every third of it, and a lease of a few milliseconds lapses between its grant and the
/// first append on a busy machine, so every append would be refused as fenced.
///
/// ```
/// use replay_ring_redis::{RedisConfig, MIN_LEASE};
/// let short = RedisConfig { lease: MIN_LEASE / 2, stream_ttl: MIN_LEASE, ..RedisConfig::default() };
/// assert!(short.check().is_err());
/// ```
pub const MIN_LEASE: Duration = Duration::from_millis(100);

/// Default [`RedisConfig::max_payload_bytes`]: 512 MiB, Redis's default `proto-max-bulk-len`.
///
/// ```
/// use replay_ring_redis::{RedisConfig, DEFAULT_MAX_PAYLOAD_BYTES};
/// assert_eq!(RedisConfig::default().max_payload_bytes, DEFAULT_MAX_PAYLOAD_BYTES);
/// ```
pub const DEFAULT_MAX_PAYLOAD_BYTES: usize = 512 * 1024 * 1024;

impl RedisConfig {
    /// Checks the settings as [`RedisBackend::connect`] does, without connecting: for settings
    /// from outside (flags, config files), to report them before anything is started.
    ///
    /// ```
    /// use std::time::Duration;
    /// use replay_ring_redis::RedisConfig;
    ///
    /// assert!(RedisConfig::default().check().is_ok());
    /// let short = RedisConfig { stream_ttl: Duration::from_secs(5), ..RedisConfig::default() };
    /// assert!(short.check().is_err(), "a TTL shorter than the lease");
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the setting that cannot work.
    pub fn check(&self) -> Result<(), Error> {
        if self.key_prefix.contains(['{', '}']) || self.key_prefix.is_empty() {
            return Err(Error::InvalidArgument(
                "key_prefix must be non-empty and contain no '{' or '}'",
            ));
        }
        if self.read_batch == 0
            || self.lease.is_zero()
            || self.block.is_zero()
            || self.response_timeout.is_zero()
            || self.connect_timeout.is_zero()
            || self.max_payload_bytes == 0
        {
            return Err(Error::InvalidArgument(
                "read_batch, lease, block, response_timeout, connect_timeout and max_payload_bytes \
                 must be non-zero",
            ));
        }
        if self.lease < MIN_LEASE {
            return Err(Error::InvalidArgument(
                "lease must be at least 100 ms (MIN_LEASE): a shorter one lapses before the \
                 producer's appends and renewals reach Redis",
            ));
        }
        // It reaches Redis as `XRANGE … COUNT`, a signed 64-bit integer.
        if u64::try_from(self.read_batch).map_or(true, |n| n > i64::MAX as u64) {
            return Err(Error::InvalidArgument(
                "read_batch must be at most 2^63 - 1",
            ));
        }
        // Each of them reaches Redis in milliseconds (`PEXPIRE`, `SET PX`, `XREAD BLOCK`), read
        // back by the scripts as exact Lua numbers.
        let max = Duration::from_millis(crate::MAX_ID);
        if self.stream_ttl > max || self.lease > max || self.block > max {
            return Err(Error::InvalidArgument(
                "stream_ttl, lease and block must be below 2^53 milliseconds",
            ));
        }
        if !self.stream_ttl.is_zero() && self.stream_ttl < self.lease {
            // Renewals every `lease / 3` refresh the expiry too: a shorter TTL would let a stream
            // expire under a live producer between two of them.
            return Err(Error::InvalidArgument(
                "stream_ttl must be zero (no expiry) or at least lease",
            ));
        }
        Ok(())
    }
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            key_prefix: "replay-ring".to_owned(),
            stream_ttl: Duration::from_secs(24 * 3600),
            lease: Duration::from_secs(10),
            read_batch: 512,
            block: Duration::from_secs(5),
            response_timeout: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(2),
            max_payload_bytes: DEFAULT_MAX_PAYLOAD_BYTES,
        }
    }
}

/// Counters of one backend (all streams), as a snapshot: see [`RedisBackend::stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedisStats {
    /// Appends that wrote an event.
    pub appended: u64,
    /// Resends that found their event already written (an earlier reply was lost).
    pub duplicates_resolved: u64,
    /// Appends refused because the window was full.
    pub refused_full: u64,
    /// Appends or closes refused because the producer no longer held the lease.
    pub refused_fenced: u64,
    /// Appends whose reply was lost (outcome unknown until resent).
    pub unknown_outcomes: u64,
    /// Release calls Redis answered (including those that found the floor already past them).
    pub releases: u64,
    /// Resumes answered with a replay (cursor below the head).
    pub resumes: u64,
    /// Resumes at the head (nothing to replay) or new subscriptions.
    pub resumes_noop: u64,
    /// Resumes refused below the floor.
    pub resumes_below_floor: u64,
    /// Resumes refused ahead of the head.
    pub resumes_ahead_of_head: u64,
    /// Resumes refused for any other reason (stream lost, corrupt, Redis unavailable).
    pub resumes_refused: u64,
    /// Pages of events read by readers (replay and tail).
    pub pages_read: u64,
    /// Times a reader blocked in `XREAD` waiting for events.
    pub blocked_reads: u64,
    /// Records of a stream's first subscriber (for a producer on another replica that waits for
    /// one) that failed: Redis could not be reached, refused the write, or the stream was gone.
    /// The SSE endpoint tries again while its client waits.
    pub subscriber_records_failed: u64,
    /// Reads of whether a stream has a subscriber, by a producer waiting for its first one, that
    /// failed (Redis could not be reached or refused the read). The producer reads again later.
    pub subscriber_checks_failed: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub appended: AtomicU64,
    pub duplicates_resolved: AtomicU64,
    pub refused_full: AtomicU64,
    pub refused_fenced: AtomicU64,
    pub unknown_outcomes: AtomicU64,
    pub releases: AtomicU64,
    pub resumes: AtomicU64,
    pub resumes_noop: AtomicU64,
    pub resumes_below_floor: AtomicU64,
    pub resumes_ahead_of_head: AtomicU64,
    pub resumes_refused: AtomicU64,
    pub pages_read: AtomicU64,
    pub blocked_reads: AtomicU64,
    pub subscriber_records_failed: AtomicU64,
    pub subscriber_checks_failed: AtomicU64,
}

impl Counters {
    pub(crate) fn bump(counter: &AtomicU64) {
        // Relaxed: statistics only, no other memory is published through them.
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

pub(crate) struct Shared {
    /// The URL's node.
    pub client: redis::Client,
    /// The URL's node is part of a Redis Cluster (`INFO cluster`): the shared connections are a
    /// cluster client's, and blocking reads follow `MOVED` to the node that serves their slot.
    pub cluster: bool,
    pub conn: SharedConnection,
    /// Scripts that write (appends, leases, releases, closes, creation), on a connection of their
    /// own: Redis runs a connection's commands in order, so reads must not queue behind a write
    /// that Redis holds back (`CLIENT PAUSE WRITE` during a failover).
    pub writes: SharedConnection,
    pub config: RedisConfig,
    pub counters: Counters,
    /// On a Redis Cluster, which node serves each slot, as learned so far: where a stream's
    /// blocking reads connect first, and where a replacement cluster client starts
    /// (`cluster_clients.rs`).
    pub slot_map: Arc<SlotMap>,
}

/// A process's handle on Redis: creates and opens streams. Cheap to clone.
///
/// Two multiplexed connections (reconnecting, and sending a command again when Redis had closed
/// the connection under it; on a Redis Cluster, each a cluster client's) carry the short
/// commands: one the reads, one the scripts that write, so that a write Redis holds back
/// (`CLIENT PAUSE WRITE` during a failover) does not hold up the reads queued behind it. The
/// readers of a stream handle (and its clones) that wait for events share one blocking read on a
/// dedicated connection, for the same reason; a producer waiting for room in the window has one
/// too.
#[derive(Clone)]
pub struct RedisBackend {
    pub(crate) shared: Arc<Shared>,
}

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackend")
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

impl RedisBackend {
    /// Connects to `url` (`redis://host:port/db`).
    ///
    /// If that node is part of a Redis Cluster (its `INFO cluster` says so), the backend learns
    /// the other nodes from it and sends each stream's commands to the node that serves the
    /// stream's slot, following `MOVED` and `ASK` when slots move; a command that keeps being
    /// redirected for longer than a moment fails as [`Error::Unavailable`] (an append as
    /// [`Error::Unknown`]: the producer cannot tell it from a lost reply, and resends it). Give
    /// any node's URL (database 0, the only one a cluster has); that node must answer now, and
    /// the backend carries on without it later.
    ///
    /// Gives up after [`RedisConfig::connect_timeout`] in all, however many connection attempts
    /// that left time for.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad URL or configuration (also for `rediss://`: TLS is not
    /// compiled in), [`Error::Unavailable`] when Redis cannot be reached or does not answer
    /// within `connect_timeout`, [`Error::Server`] when it refuses the connection as configured
    /// (wrong credentials, or none where Redis requires them: `WRONGPASS`, `NOAUTH`) or the
    /// address answers with something other than the Redis protocol.
    ///
    /// # Cancel safety
    /// Cancel safe: nothing is created on the server.
    pub async fn connect(url: &str, config: RedisConfig) -> Result<RedisBackend, Error> {
        config.check()?;
        // Built without redis-rs's TLS support (and its dependencies), which would otherwise
        // report a `rediss://` URL as merely invalid.
        if url
            .get(..9)
            .is_some_and(|s| s.eq_ignore_ascii_case("rediss://"))
        {
            return Err(Error::InvalidArgument(
                "rediss:// (TLS) is not supported: connect with redis:// through a TLS proxy \
                 (stunnel, a sidecar) or on a private network",
            ));
        }
        let client = redis::Client::open(url)
            .map_err(|_| Error::InvalidArgument("not a valid redis URL"))?;
        // Each connection attempt has its own timeout and failed ones are retried, so without an
        // overall bound a Redis that accepts connections but does not answer (stopped, swapping)
        // would hold a replica's start for several timeouts.
        let timeout = config.connect_timeout;
        tokio::time::timeout(timeout, Self::connect_with(client, config))
            .await
            .unwrap_or_else(|_| {
                Err(Error::Unavailable(redis::RedisError::from(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no answer within connect_timeout ({timeout:?})"),
                ))))
            })
    }

    /// [`connect`](Self::connect) once the URL and configuration were checked.
    async fn connect_with(
        client: redis::Client,
        config: RedisConfig,
    ) -> Result<RedisBackend, Error> {
        let manager_config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(config.response_timeout))
            .set_connection_timeout(Some(config.connect_timeout))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(500));
        let conn = client
            .get_connection_manager_with_config(manager_config.clone())
            .await
            .map_err(Error::from_connect)?;
        let mut conn = SharedConnection::new(client.clone(), manager_config.clone(), conn);
        // Connecting sends no command when the URL has no credentials: a Redis that requires
        // them would refuse every later call instead (`NOAUTH`). One round trip says so now.
        redis::cmd("PING")
            .query_async::<()>(&mut conn)
            .await
            .map_err(Error::from_connect)?;
        let slot_map = Arc::new(SlotMap::new());
        let (conn, writes, cluster) = if cluster_enabled(&mut conn).await {
            let (conn, writes) = Self::connect_cluster(&client, &config, &slot_map).await?;
            (conn, writes, true)
        } else {
            let writes = client
                .get_connection_manager_with_config(manager_config.clone())
                .await
                .map_err(Error::from_connect)?;
            let writes = SharedConnection::new(client.clone(), manager_config, writes);
            (conn, writes, false)
        };
        let backend = RedisBackend {
            shared: Arc::new(Shared {
                client,
                cluster,
                conn,
                writes,
                config,
                counters: Counters::default(),
                slot_map,
            }),
        };
        if cluster {
            // So that the first blocking read of each stream goes straight to its slot's node.
            // Without an answer the map fills from redirections instead.
            backend.read_slot_map().await;
        }
        Ok(backend)
    }

    /// The two shared connections through a Redis Cluster client that starts from the URL's
    /// node and learns the others from it; a client that replaces one of them starts from the
    /// other nodes the slot map knows by then if the URL's does not answer (`cluster_clients.rs`).
    async fn connect_cluster(
        client: &redis::Client,
        config: &RedisConfig,
        slot_map: &Arc<SlotMap>,
    ) -> Result<(SharedConnection, SharedConnection), Error> {
        let clients = Arc::new(ClusterClients::new(
            client.get_connection_info().clone(),
            config.connect_timeout,
            config.response_timeout,
            Arc::clone(slot_map),
        ));
        let conn = SharedConnection::cluster(Arc::clone(&clients))
            .await
            .map_err(Error::from_connect)?;
        let writes = SharedConnection::cluster(clients)
            .await
            .map_err(Error::from_connect)?;
        Ok((conn, writes))
    }

    /// The configuration.
    ///
    /// ```no_run
    /// # async fn f(b: replay_ring_redis::RedisBackend) {
    /// assert!(!b.config().key_prefix.is_empty());
    /// # }
    /// ```
    pub fn config(&self) -> &RedisConfig {
        &self.shared.config
    }

    /// A snapshot of the counters.
    ///
    /// ```no_run
    /// # async fn f(b: replay_ring_redis::RedisBackend) {
    /// let s = b.stats();
    /// assert!(s.appended >= s.duplicates_resolved.min(s.appended));
    /// # }
    /// ```
    pub fn stats(&self) -> RedisStats {
        let c = &self.shared.counters;
        // Relaxed: independent statistics (see Counters::bump).
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        RedisStats {
            appended: get(&c.appended),
            duplicates_resolved: get(&c.duplicates_resolved),
            refused_full: get(&c.refused_full),
            refused_fenced: get(&c.refused_fenced),
            unknown_outcomes: get(&c.unknown_outcomes),
            releases: get(&c.releases),
            resumes: get(&c.resumes),
            resumes_noop: get(&c.resumes_noop),
            resumes_below_floor: get(&c.resumes_below_floor),
            resumes_ahead_of_head: get(&c.resumes_ahead_of_head),
            resumes_refused: get(&c.resumes_refused),
            pages_read: get(&c.pages_read),
            blocked_reads: get(&c.blocked_reads),
            subscriber_records_failed: get(&c.subscriber_records_failed),
            subscriber_checks_failed: get(&c.subscriber_checks_failed),
        }
    }

    /// The connection for scripts that write (`Shared::writes`).
    pub(crate) fn write_conn(&self) -> SharedConnection {
        self.shared.writes.clone()
    }

    /// The connection this backend sends its short reads on, for commands of your own that may
    /// run twice (see [`SharedConnection`]): no further connection per process.
    ///
    /// ```no_run
    /// # async fn f(backend: replay_ring_redis::RedisBackend) -> redis::RedisResult<()> {
    /// let pong: String = redis::cmd("PING").query_async(&mut backend.connection()).await?;
    /// # Ok(()) }
    /// ```
    pub fn connection(&self) -> SharedConnection {
        self.shared.conn.clone()
    }

    /// A new dedicated connection for blocking reads: its response timeout covers the block time.
    /// It goes to the URL's node, or on a Redis Cluster to `node` (`host:port`) once a `MOVED`
    /// named the node that serves the stream's slot.
    pub(crate) async fn dedicated(
        &self,
        node: Option<&str>,
    ) -> Result<MultiplexedConnection, redis::RedisError> {
        let c = &self.shared.config;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(c.connect_timeout))
            .set_response_timeout(Some(c.block.saturating_add(c.response_timeout)));
        let Some(node) = node.filter(|_| self.shared.cluster) else {
            return self
                .shared
                .client
                .get_multiplexed_async_connection_with_config(&config)
                .await;
        };
        // The same credentials and settings as the URL's node, at the node that serves the slot.
        let info = self.shared.client.get_connection_info();
        let addr = node_addr(info.addr(), node)?;
        redis::Client::open(info.clone().set_addr(addr))?
            .get_multiplexed_async_connection_with_config(&config)
            .await
    }

    /// On a Redis Cluster, the node (`host:port`) that serves `key`'s slot: the slot map is read
    /// again first (the shared connection sends `CLUSTER SLOTS` to any node it reaches) into
    /// [`SlotMap`], which answers. If no node answered, that is what the map knew before; `None`
    /// if it knows no node for the slot.
    pub(crate) async fn serving_node(&self, key: &str) -> Option<String> {
        self.read_slot_map().await;
        self.shared.slot_map.node_for(key)
    }

    /// The node that serves `key`'s slot as far as this backend knows (a Redis Cluster's slot map,
    /// and the redirections since): where a blocking read of the key connects first.
    pub(crate) fn known_node(&self, key: &str) -> Option<String> {
        self.shared.slot_map.node_for(key)
    }

    /// Records that `node` serves `slot`, as a `MOVED` said.
    pub(crate) fn learn_node(&self, slot: u16, node: &str) {
        self.shared.slot_map.learn(slot, node);
    }

    /// Reads the cluster's slot map (`CLUSTER SLOTS`) into [`SlotMap`]; does nothing if no node
    /// answers.
    async fn read_slot_map(&self) {
        use redis::Value;
        let ranges: Vec<Value> = match redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query_async(&mut self.connection())
            .await
        {
            Ok(ranges) => ranges,
            Err(_) => return,
        };
        // Each range: first slot, last slot, then the primary's [host, port, id, …] and its
        // replicas'.
        let ranges: Vec<(u16, u16, String)> = ranges
            .into_iter()
            .filter_map(|range| {
                let Value::Array(range) = range else {
                    return None;
                };
                let [Value::Int(first), Value::Int(last), Value::Array(primary), ..] = &range[..]
                else {
                    return None;
                };
                let [Value::BulkString(host), Value::Int(port), ..] = &primary[..] else {
                    return None;
                };
                let host = std::str::from_utf8(host).ok()?;
                // An empty host (a node that never learnt its own address from a peer: a
                // cluster of one node), `?` (an unknown hostname) or a wildcard address names
                // no node to connect to: such slots stay unknown, and their blocking reads
                // start at the URL's node and follow its `MOVED`.
                if host.is_empty() || host == "?" || host == "0.0.0.0" || host == "::" {
                    return None;
                }
                let (first, last) = (u16::try_from(*first).ok()?, u16::try_from(*last).ok()?);
                Some((first, last, format!("{host}:{port}")))
            })
            .collect();
        self.shared.slot_map.learn_ranges(&ranges);
    }

    /// Whether this backend is connected to a Redis Cluster.
    pub(crate) fn is_cluster(&self) -> bool {
        self.shared.cluster
    }
}

/// The address of cluster node `node` (`host:port`, as Redis names nodes in `MOVED` and
/// `CLUSTER SLOTS`, IPv6 hosts without brackets), reached the way the URL's node is: over TLS
/// with the URL's TLS settings if it is (`rediss://`), otherwise over TCP.
pub(crate) fn node_addr(
    url: &ConnectionAddr,
    node: &str,
) -> Result<ConnectionAddr, redis::RedisError> {
    let (host, port) = node
        .rsplit_once(':')
        .and_then(|(host, port)| Some((host.to_owned(), port.parse::<u16>().ok()?)))
        .ok_or_else(|| {
            redis::RedisError::from((
                redis::ErrorKind::Client,
                "a Redis Cluster node redirected to an address that is not host:port",
                node.to_owned(),
            ))
        })?;
    Ok(match url {
        ConnectionAddr::TcpTls {
            insecure,
            tls_params,
            ..
        } => ConnectionAddr::TcpTls {
            host,
            port,
            insecure: *insecure,
            tls_params: tls_params.clone(),
        },
        _ => ConnectionAddr::Tcp(host, port),
    })
}

/// Whether the node `conn` talks to runs in cluster mode (`INFO cluster` says `cluster_enabled:1`).
/// A Redis that refuses `INFO` (an ACL rule) is taken for a single one: a stream another node
/// would serve is then refused with an error that names that node (`Error::from_redis`).
async fn cluster_enabled(conn: &mut SharedConnection) -> bool {
    let info: Result<String, _> = redis::cmd("INFO").arg("cluster").query_async(conn).await;
    info.is_ok_and(|info| info.lines().any(|line| line.trim() == "cluster_enabled:1"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node a redirection or the slot map names is reached over TLS when the URL's node is,
    /// with the same settings, and over TCP otherwise; IPv6 hosts come without brackets.
    #[test]
    fn node_addresses_keep_the_url_s_transport() {
        let tls = ConnectionAddr::TcpTls {
            host: "a".into(),
            port: 1,
            insecure: true,
            tls_params: None,
        };
        match node_addr(&tls, "10.0.0.2:7001").unwrap() {
            ConnectionAddr::TcpTls {
                host,
                port,
                insecure,
                ..
            } => assert_eq!((host.as_str(), port, insecure), ("10.0.0.2", 7001, true)),
            other => panic!("{other:?}"),
        }
        let tcp = ConnectionAddr::Tcp("a".into(), 1);
        assert_eq!(
            node_addr(&tcp, "::1:7002").unwrap(),
            ConnectionAddr::Tcp("::1".into(), 7002)
        );
        assert!(node_addr(&tcp, "no-port").is_err());
        assert!(node_addr(&tcp, "host:99999").is_err());
    }
}
