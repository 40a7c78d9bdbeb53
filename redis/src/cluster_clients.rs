//! Where a Redis Cluster client of the backend starts: the URL's node, or else the other nodes
//! the backend's slot map has learned.
//!
//! A cluster client learns the slots from the first of its starting nodes that answers. The
//! backend's clients start from the URL's node, as the URL says. A client built to replace one
//! that kept sending commands to a node that no longer serves their slots (`connection.rs`,
//! `ClusterLink`) may find the URL's node to be the very node that stopped answering; it then
//! starts from every other node the slot map knows, at once, and redis-rs keeps those it
//! reaches. Not from all of them in the first place: the map keeps nodes the cluster has since
//! forgotten, and one reset and still running answers `CLUSTER SLOTS` with a cluster of its own
//! (no slots), which a client that asked it first would take for the truth.

use std::sync::Arc;
use std::time::Duration;

use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::{ConnectionInfo, RedisResult};

use crate::backend::node_addr;
use crate::slot_map::SlotMap;

/// What the backend's cluster clients are built from.
pub(crate) struct ClusterClients {
    /// The URL's node: its address, credentials and settings, which every node shares.
    url: ConnectionInfo,
    connect_timeout: Duration,
    response_timeout: Duration,
    known: Arc<SlotMap>,
}

impl ClusterClients {
    pub(crate) fn new(
        url: ConnectionInfo,
        connect_timeout: Duration,
        response_timeout: Duration,
        known: Arc<SlotMap>,
    ) -> Self {
        ClusterClients {
            url,
            connect_timeout,
            response_timeout,
            known,
        }
    }

    /// A new cluster client's connection, which has learned the slots: from the URL's node, or,
    /// if that fails, from the first other known node that answers.
    pub(crate) async fn connect(&self) -> RedisResult<ClusterConnection> {
        let from_url = self
            .client(vec![self.url.clone()])?
            .get_async_connection()
            .await;
        if from_url.is_ok() {
            return from_url;
        }
        match self.other_nodes() {
            others if others.is_empty() => from_url,
            others => self.client(others)?.get_async_connection().await,
        }
    }

    /// Every node the slot map knows but the URL's, reached the way the URL's node is (the ones
    /// whose address cannot be parsed left out).
    fn other_nodes(&self) -> Vec<ConnectionInfo> {
        // `host:port`, as the slot map names nodes.
        let url_node = self.url.addr().to_string();
        self.known
            .nodes()
            .into_iter()
            .filter(|node| *node != url_node)
            .filter_map(|node| node_addr(self.url.addr(), &node).ok())
            .map(|addr| self.url.clone().set_addr(addr))
            .collect()
    }

    /// A cluster client starting from `nodes`, with the backend's timeouts and no resends of its
    /// own: `SharedConnection` resends, and must know when it did.
    fn client(&self, nodes: Vec<ConnectionInfo>) -> RedisResult<ClusterClient> {
        ClusterClientBuilder::new(nodes)
            .retries(0)
            .connection_timeout(self.connect_timeout)
            .response_timeout(self.response_timeout)
            .build()
    }
}
