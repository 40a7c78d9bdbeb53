//! A TCP proxy whose traffic can be held and whose upstream can be switched: enough to stage a
//! failover by hand. In front of a replica's link to its primary it holds replication back (the
//! replica stops receiving writes while the link stays up, without iptables); in front of a
//! backend it plays the address that moves to the promoted replica (a Sentinel-aware client or a
//! virtual IP), so the backend's handles keep running across the switch.

#![allow(dead_code)]

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct SwitchProxy {
    pub addr: SocketAddr,
    /// Where new connections go; `None` keeps them waiting (accepted, not yet connected on).
    upstream: watch::Sender<Option<u16>>,
    /// While true, bytes read from either side are kept, not forwarded.
    held: watch::Sender<bool>,
}

impl SwitchProxy {
    /// A proxy to the loopback port `upstream`. Must be called within a tokio runtime: its
    /// tasks live as long as the runtime.
    pub async fn start(upstream: u16) -> SwitchProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let upstream = watch::Sender::new(Some(upstream));
        let held = watch::Sender::new(false);
        let (to, hold) = (upstream.subscribe(), held.subscribe());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (mut to, hold) = (to.clone(), hold.clone());
                tokio::spawn(async move {
                    let port = match to.wait_for(Option::is_some).await {
                        Ok(port) => port.expect("waited for a port"),
                        Err(_) => return, // the proxy is gone
                    };
                    if let Ok(server) = TcpStream::connect(("127.0.0.1", port)).await {
                        let (cr, cw) = client.into_split();
                        let (sr, sw) = server.into_split();
                        // Either side closing ends both (dropping the halves closes the sockets).
                        tokio::select! {
                            () = forward(cr, sw, hold.clone()) => {}
                            () = forward(sr, cw, hold) => {}
                        }
                    }
                });
            }
        });
        SwitchProxy {
            addr,
            upstream,
            held,
        }
    }

    pub fn url(&self) -> String {
        format!("redis://{}/", self.addr)
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Holds every connection's traffic (`true`) or lets it flow again. What is read while held
    /// is forwarded only once released: a byte read after `hold(true)` returned is not
    /// forwarded before `hold(false)`.
    pub fn hold(&self, hold: bool) {
        self.held.send_replace(hold);
    }

    /// New connections go to `port` from now on (`None`: they wait until a port is set).
    /// Connections already made stay with their server.
    pub fn point_at(&self, port: Option<u16>) {
        self.upstream.send_replace(port);
    }
}

/// Copies `from` to `to`, pausing after each read while the traffic is held.
async fn forward(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, mut held: watch::Receiver<bool>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        // Checked after the read, so bytes that arrive after the hold began wait for its end.
        if held.wait_for(|h| !*h).await.is_err() || to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
