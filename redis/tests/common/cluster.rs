//! A Redis Cluster of private `redis-server` nodes (see `RedisServer`), for the cluster tests of
//! the Redis and MCP crates.

use std::time::{Duration, Instant};

use replay_ring_redis::{RedisBackend, RedisConfig};

use super::RedisServer;

const DEADLINE: Duration = Duration::from_secs(30);

/// A cluster of nodes, each serving an equal share of the 16,384 slots.
pub struct Cluster {
    pub nodes: Vec<RedisServer>,
}

impl Cluster {
    /// Starts `n` nodes, splits the slots between them, and waits until every node reports the
    /// cluster healthy.
    pub async fn start(n: usize) -> Cluster {
        Cluster::start_with(n, &[]).await
    }

    /// A node of its own: cluster mode, and `extra` arguments (`--cluster-node-timeout`, say).
    pub fn spawn_node(extra: &[&str]) -> (RedisServer, u16) {
        // The bus port is given: by default it is the client port + 10000, and a node whose
        // (ephemeral) client port is above 55535 refuses to start.
        let bus = super::free_port().to_string();
        let mut args = vec![
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-port",
            &bus,
        ];
        args.extend_from_slice(extra);
        (RedisServer::start_with(&args), bus.parse().unwrap())
    }

    /// As [`start`](Self::start), each node started with `extra` arguments too.
    pub async fn start_with(n: usize, extra: &[&str]) -> Cluster {
        let mut nodes = Vec::new();
        let mut buses = Vec::new();
        for _ in 0..n {
            let (node, bus) = Cluster::spawn_node(extra);
            nodes.push(node);
            buses.push(bus);
        }
        let share = 16384 / n;
        for (i, node) in nodes.iter().enumerate() {
            let first = i * share;
            let last = if i + 1 == n { 16383 } else { first + share - 1 };
            let _: () = redis::cmd("CLUSTER")
                .arg("ADDSLOTSRANGE")
                .arg(first)
                .arg(last)
                .query(&mut node.raw())
                .unwrap();
        }
        for (node, bus) in nodes.iter().zip(&buses).skip(1) {
            let _: () = redis::cmd("CLUSTER")
                .arg("MEET")
                .arg("127.0.0.1")
                .arg(node.port)
                .arg(bus)
                .query(&mut nodes[0].raw())
                .unwrap();
        }
        let cluster = Cluster { nodes };
        let known = format!("cluster_known_nodes:{n}");
        let started = Instant::now();
        loop {
            let healthy = cluster.nodes.iter().all(|node| {
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query(&mut node.raw())
                    .unwrap();
                info.contains("cluster_state:ok") && info.contains(&known)
            });
            if healthy {
                return cluster;
            }
            assert!(started.elapsed() < DEADLINE, "the cluster never formed");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn slot_of(&self, stream: &str) -> u16 {
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(format!("{{{stream}}}"))
            .query(&mut self.nodes[0].raw())
            .unwrap()
    }

    /// The index of the node that serves `slot`, as node 0 sees it.
    pub fn owner_of(&self, slot: u16) -> usize {
        let addr = self.node_for(slot);
        self.nodes
            .iter()
            .position(|n| n.port == addr)
            .expect("a node of this cluster")
    }

    /// The port of the node that serves `slot`, from `CLUSTER SHARDS`' slot ranges as node 0
    /// sees them.
    pub fn node_for(&self, slot: u16) -> u16 {
        let nodes: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query(&mut self.nodes[0].raw())
            .unwrap();
        for line in nodes.lines() {
            let fields: Vec<&str> = line.split(' ').collect();
            // <id> <ip:port@bus> <flags> <master> <ping> <pong> <epoch> <state> <slot ranges…>
            let port: u16 = fields[1]
                .split('@')
                .next()
                .and_then(|a| a.rsplit_once(':'))
                .map(|(_, p)| p.parse().unwrap())
                .unwrap();
            for range in &fields[8..] {
                if range.starts_with('[') {
                    continue; // a migration in progress, not an assignment
                }
                let (first, last) = range.split_once('-').unwrap_or((range, range));
                let (first, last): (u16, u16) = (first.parse().unwrap(), last.parse().unwrap());
                if (first..=last).contains(&slot) {
                    return port;
                }
            }
        }
        panic!("slot {slot} is not served");
    }

    /// How many clients wait in a blocking command on `node` (`INFO clients`).
    pub fn blocked_clients(&self, node: usize) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("clients")
            .query(&mut self.nodes[node].raw())
            .unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("blocked_clients:"))
            .map_or(0, |n| n.trim().parse().unwrap())
    }

    /// How many errors of kind `code` (`MOVED`, `ASK`, …) `node` has answered (`INFO
    /// errorstats`).
    pub fn error_answers(&self, node: usize, code: &str) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("errorstats")
            .query(&mut self.nodes[node].raw())
            .unwrap();
        let prefix = format!("errorstat_{code}:count=");
        info.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .map_or(0, |n| n.trim().parse().unwrap())
    }

    pub fn id_of(&self, node: usize) -> String {
        redis::cmd("CLUSTER")
            .arg("MYID")
            .query(&mut self.nodes[node].raw())
            .unwrap()
    }

    /// Adds a node (started with `extra` arguments) that replicates node `of`, and waits until
    /// it is in sync with it. Returns its index.
    pub async fn add_replica(&mut self, of: usize, extra: &[&str]) -> usize {
        let (node, bus) = Cluster::spawn_node(extra);
        let _: () = redis::cmd("CLUSTER")
            .arg("MEET")
            .arg("127.0.0.1")
            .arg(node.port)
            .arg(bus)
            .query(&mut self.nodes[of].raw())
            .unwrap();
        let primary = self.id_of(of);
        let started = Instant::now();
        // The new node learns the primary by gossip; until then it refuses to replicate it.
        while redis::cmd("CLUSTER")
            .arg("REPLICATE")
            .arg(&primary)
            .query::<()>(&mut node.raw())
            .is_err()
        {
            assert!(
                started.elapsed() < DEADLINE,
                "the replica never met its primary"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        loop {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query(&mut node.raw())
                .unwrap();
            if info.contains("master_link_status:up") {
                break;
            }
            assert!(
                started.elapsed() < DEADLINE,
                "the replica never synchronised"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Every node knows it as the replica (a client learns the replicas from any of them).
        let replica_id: String = redis::cmd("CLUSTER")
            .arg("MYID")
            .query(&mut node.raw())
            .unwrap();
        let known = format!("slave {primary}");
        while !self.nodes.iter().all(|other| {
            let nodes: String = redis::cmd("CLUSTER")
                .arg("NODES")
                .query(&mut other.raw())
                .unwrap();
            nodes
                .lines()
                .any(|line| line.starts_with(&replica_id) && line.contains(&known))
        }) {
            assert!(
                started.elapsed() < DEADLINE,
                "the nodes never learnt of the replica"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.nodes.push(node);
        self.nodes.len() - 1
    }

    /// Moves `slot` with its keys from node `from` to node `to`, the way `redis-cli --cluster
    /// reshard` does: mark it importing and migrating, `MIGRATE` its keys, then assign it.
    pub fn move_slot(&self, slot: u16, from: usize, to: usize) {
        self.migrate_keys(slot, from, to);
        self.assign_slot(slot, from, to);
    }

    /// The first half of [`move_slot`](Self::move_slot): marks `slot` importing on `to` and
    /// migrating on `from`, and `MIGRATE`s its keys. `from` still serves the slot, and answers
    /// `ASK` for the keys that left it.
    pub fn migrate_keys(&self, slot: u16, from: usize, to: usize) {
        let (from_id, to_id) = (self.id_of(from), self.id_of(to));
        self.setslot(slot, to, "IMPORTING", &from_id);
        self.setslot(slot, from, "MIGRATING", &to_id);
        let keys: Vec<String> = redis::cmd("CLUSTER")
            .arg("GETKEYSINSLOT")
            .arg(slot)
            .arg(100)
            .query(&mut self.nodes[from].raw())
            .unwrap();
        assert!(!keys.is_empty(), "slot {slot} holds the stream's keys");
        let _: () = redis::cmd("MIGRATE")
            .arg("127.0.0.1")
            .arg(self.nodes[to].port)
            .arg("")
            .arg(0)
            .arg(5000)
            .arg("KEYS")
            .arg(&keys)
            .query(&mut self.nodes[from].raw())
            .unwrap();
    }

    /// The second half of [`move_slot`](Self::move_slot): assigns `slot` to `to` on every node.
    pub fn assign_slot(&self, slot: u16, from: usize, to: usize) {
        let to_id = self.id_of(to);
        // The new owner first, then the old one, then the rest (the order redis-cli uses).
        let mut order = vec![to, from];
        order.extend((0..self.nodes.len()).filter(|n| *n != from && *n != to));
        for node in order {
            self.setslot(slot, node, "NODE", &to_id);
        }
    }

    fn setslot(&self, slot: u16, node: usize, how: &str, id: &str) {
        let _: () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg(how)
            .arg(id)
            .query(&mut self.nodes[node].raw())
            .unwrap();
    }

    pub async fn backend(&self, node: usize) -> RedisBackend {
        self.nodes[node].backend().await
    }

    /// Waits until node `node` serves `slot`, as node 0 sees it.
    pub async fn await_owner(&self, slot: u16, node: usize) {
        super::eventually(Duration::from_secs(30), "the slot's new owner", || {
            let owner = self.owner_of(slot);
            async move { owner == node }
        })
        .await;
    }

    /// A planned failover: `replica` takes over from its primary with `CLUSTER FAILOVER` (which
    /// waits for it to have every write), and this waits until it serves `slot`.
    pub async fn planned_failover(&self, replica: usize, slot: u16) {
        let _: () = redis::cmd("CLUSTER")
            .arg("FAILOVER")
            .query(&mut self.nodes[replica].raw())
            .unwrap();
        self.await_owner(slot, replica).await;
    }

    /// Kills primary `primary` (SIGKILL) once `replica` has every write it acknowledged (a
    /// failover loses the ones its replica lacks), and waits until the replica has taken over
    /// `slot`.
    ///
    /// The replica's offset is compared with the primary's: `WAIT` would not do, since it counts
    /// replicas that have the writes of the connection it is sent on, and a new connection has
    /// written nothing (a replica still in its first sync, holding no data, would count).
    pub async fn fail_over(&mut self, primary: usize, replica: usize, slot: u16) {
        self.await_in_sync(primary, replica).await;
        self.nodes[primary].kill();
        self.await_owner(slot, replica).await;
    }

    /// As [`fail_over`](Self::fail_over), but primary `primary` stops answering instead
    /// (SIGSTOP: a frozen process or VM, a partition that drops packets). It still accepts
    /// connections, and is killed with the cluster.
    pub async fn freeze_over(&self, primary: usize, replica: usize, slot: u16) {
        self.await_in_sync(primary, replica).await;
        self.nodes[primary].freeze();
        self.await_owner(slot, replica).await;
    }

    /// Waits until `replica` has every write `primary` has taken so far.
    async fn await_in_sync(&self, primary: usize, replica: usize) {
        let written = self.repl_offset(primary, "master_repl_offset");
        super::eventually(Duration::from_secs(30), "the replica's sync", || {
            let info = self.replication(replica);
            let linked = info.contains("master_link_status:up");
            let copied = repl_field(&info, "slave_repl_offset");
            async move { linked && copied >= written }
        })
        .await;
    }

    /// A replication offset from node `node`'s `INFO replication`.
    fn repl_offset(&self, node: usize, field: &str) -> i64 {
        repl_field(&self.replication(node), field)
    }

    fn replication(&self, node: usize) -> String {
        redis::cmd("INFO")
            .arg("replication")
            .query(&mut self.nodes[node].raw())
            .unwrap()
    }

    /// A backend for tests that take nodes down: its producers' leases outlast an election on a
    /// loaded machine. Those tests are about the backend carrying on; a lease that lapses during
    /// a longer outage gets its producer `Fenced`, on a cluster as on one Redis.
    pub async fn outage_backend(&self, node: usize) -> RedisBackend {
        let config = RedisConfig {
            lease: Duration::from_secs(120),
            stream_ttl: Duration::from_secs(600),
            ..RedisConfig::default()
        };
        self.nodes[node].backend_with(config).await
    }
}

/// A numeric field of an `INFO replication` reply (-1 when it has none, as a replica before its
/// first sync).
pub fn repl_field(info: &str, field: &str) -> i64 {
    info.lines()
        .find_map(|line| line.trim().strip_prefix(field)?.strip_prefix(':'))
        .map_or(-1, |offset| offset.parse().unwrap())
}
