//! A replica failover staged by hand, for tests of what it loses: a primary and a replica whose
//! link runs through a [`SwitchProxy`] that can hold replication back, and `front`, another one
//! that clients reach "the stream's Redis" at and that the failover switches to the replica once
//! it is promoted (as a Sentinel-aware client or a virtual IP would), so the clients' handles keep
//! running across it.

#![allow(dead_code)]

use std::time::Duration;

use super::cluster::repl_field;
use super::switch_proxy::SwitchProxy;
use super::{eventually, RedisServer};

pub struct Failover {
    pub primary: RedisServer,
    pub replica: RedisServer,
    /// The replica's link to the primary.
    pub link: SwitchProxy,
    /// Where clients connect: the primary, then the promoted replica.
    pub front: SwitchProxy,
}

impl Failover {
    pub async fn start() -> Failover {
        // The primary sends its first sync without the 5 s wait for more replicas.
        let primary = RedisServer::start_with(&["--repl-diskless-sync-delay", "0"]);
        let replica = RedisServer::start();
        let link = SwitchProxy::start(primary.port).await;
        let _: () = redis::cmd("REPLICAOF")
            .arg("127.0.0.1")
            .arg(link.port())
            .query(&mut replica.raw())
            .unwrap();
        let front = SwitchProxy::start(primary.port).await;
        Failover {
            primary,
            replica,
            link,
            front,
        }
    }

    /// Waits until the replica has processed everything the primary has written so far, then
    /// holds replication: the replica gets nothing more, while the primary goes on acknowledging
    /// writes. Compares offsets: `WAIT` on a fresh connection, which wrote nothing, would be
    /// satisfied at once.
    pub async fn sync_then_hold(&self) {
        let written = repl_field(&info(&self.primary, "replication"), "master_repl_offset");
        eventually(Duration::from_secs(20), "the replica's sync", || {
            let info = info(&self.replica, "replication");
            let linked = info.contains("master_link_status:up");
            let copied = repl_field(&info, "slave_repl_offset");
            async move { linked && copied >= written }
        })
        .await;
        self.link.hold(true);
    }

    /// The failover: new connections to `front` wait while the primary dies (`kill -9`) and the
    /// replica is promoted (`REPLICAOF NO ONE`), then reach the replica. Connections to the
    /// primary end with it.
    pub fn fail_over(&mut self) {
        self.front.point_at(None);
        self.primary.kill();
        let _: () = redis::cmd("REPLICAOF")
            .arg("NO")
            .arg("ONE")
            .query(&mut self.replica.raw())
            .unwrap();
        assert!(info(&self.replica, "replication").contains("role:master"));
        self.front.point_at(Some(self.replica.port));
    }
}

/// A section of `server`'s `INFO`.
pub fn info(server: &RedisServer, section: &str) -> String {
    redis::cmd("INFO")
        .arg(section)
        .query(&mut server.raw())
        .unwrap()
}
