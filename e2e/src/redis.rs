//! A private `redis-server` for the browser tests of the demo on Redis: a free loopback port, no
//! persistence, stopped when dropped. It can be frozen (`SIGSTOP`) and thawed (`SIGCONT`), which
//! is Redis unreachable to its clients while their connections stay open: the outage a client
//! cannot tell from a slow server until its timeouts say so.

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Upper bound for the server to answer its first `PING`.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);

/// A running `redis-server`; killed when dropped.
pub struct RedisProcess {
    child: Child,
    addr: SocketAddr,
}

impl RedisProcess {
    /// Starts `redis-server` (from `PATH`; `scripts/redis-setup` installs it) on a free loopback
    /// port and waits until it answers.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a future dropped while it waits for the server drops the handle it holds,
    /// which kills the process.
    pub async fn start() -> io::Result<Self> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--loglevel", "warning"])
            .stdout(Stdio::null())
            .spawn()?;
        let redis = RedisProcess {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        };
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        while !redis.answers().await {
            if Instant::now() > deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "redis-server did not start",
                ));
            }
            // Polling under a deadline: a starting server has no readiness signal but its port.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(redis)
    }

    /// `redis://127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("redis://{}/", self.addr)
    }

    /// Freezes the server (`SIGSTOP`): it accepts and answers nothing until [`thaw`](Self::thaw).
    pub fn freeze(&self) -> io::Result<()> {
        self.signal("-STOP")
    }

    /// Lets a frozen server run again (`SIGCONT`).
    pub fn thaw(&self) -> io::Result<()> {
        self.signal("-CONT")
    }

    fn signal(&self, signal: &str) -> io::Result<()> {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()?;
        if status.success() {
            Ok(())
        } else {
            Err(io::Error::other(format!("kill {signal} failed: {status}")))
        }
    }

    /// One `PING` over a fresh connection.
    async fn answers(&self) -> bool {
        let ping = async {
            let mut s = TcpStream::connect(self.addr).await?;
            s.write_all(b"PING\r\n").await?;
            let mut reply = [0u8; 7];
            s.read_exact(&mut reply).await?;
            Ok::<_, io::Error>(&reply == b"+PONG\r\n")
        };
        matches!(
            tokio::time::timeout(Duration::from_secs(1), ping).await,
            Ok(Ok(true))
        )
    }
}

impl Drop for RedisProcess {
    fn drop(&mut self) {
        // SIGKILL ends a stopped process too.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
