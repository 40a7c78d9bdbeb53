//! A private `redis-server` per test: free loopback port, its own temp dir, AOF with
//! `appendfsync always`, no RDB snapshots. Stopped (SIGKILL) when dropped. Shared by the tests of
//! the Redis, MCP and end-to-end crates (`#[path]`).

#![allow(dead_code)]

pub mod cluster;
pub mod cut_proxy;
pub mod failover;
pub mod live_tail;
pub mod sse_client;
pub mod switch_proxy;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use replay_ring_redis::{RedisBackend, RedisConfig, RedisStream};

pub struct RedisServer {
    pub port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
    extra: Vec<String>,
}

/// A free loopback port (bound then released; the server binds it right after).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind an ephemeral loopback port")
        .local_addr()
        .expect("local addr")
        .port()
}

fn binary() -> PathBuf {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("redis-server"))
            .find(|p| p.is_file())
    });
    found.expect("redis-server not found on PATH: run scripts/redis-setup")
}

impl RedisServer {
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// Starts with extra `--option value` arguments (e.g. `["--maxmemory", "1mb"]`).
    pub fn start_with(extra: &[&str]) -> RedisServer {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut s = RedisServer {
            port: free_port(),
            dir,
            child: None,
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        s.spawn();
        s
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn spawn(&mut self) {
        let child = Command::new(binary())
            .arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--protected-mode", "no"])
            .args([
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--save",
                "",
            ])
            .arg("--dir")
            .arg(self.dir.path())
            .args(["--daemonize", "no", "--loglevel", "warning"])
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn redis-server");
        self.child = Some(child);
        self.wait_ready();
    }

    /// Polls PING until the server answers. The deadline is generous because CI runs many tests'
    /// servers at once on two cores; a server that exits instead (its port taken, a bad option)
    /// fails at once, its reason on stderr.
    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let client = redis::Client::open(self.url()).expect("url");
        loop {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "redis-server on port {} exited before it answered ({status})",
                    self.port
                );
            }
            if let Ok(mut c) = client.get_connection_with_timeout(Duration::from_millis(200)) {
                match redis::cmd("PING").query::<String>(&mut c) {
                    // Started with `--requirepass`: it answers, if only to refuse.
                    Ok(_) => return,
                    Err(e) if e.code() == Some("NOAUTH") => return,
                    Err(_) => {}
                }
            }
            assert!(
                Instant::now() < deadline,
                "redis-server on port {} did not start",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// SIGKILL, like a crash: no shutdown, no final fsync.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts again on the same port and data dir (replays the AOF).
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// Freezes the server (`SIGSTOP`) until [`thaw`](Self::thaw): its clients' connections stay
    /// open and nothing answers them, the outage a client cannot tell from a slow server until
    /// its timeouts say so.
    pub fn freeze(&self) {
        self.signal("-STOP");
    }

    /// Lets a frozen server run again (`SIGCONT`).
    pub fn thaw(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        send_signal(
            self.child.as_ref().expect("redis-server is running"),
            signal,
        );
    }

    /// A plain synchronous connection for poking at keys behind the backend's back.
    pub fn raw(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .expect("url")
            .get_connection_with_timeout(Duration::from_secs(2))
            .expect("connect")
    }

    /// Every entry in `stream`'s log as (id, payload), straight from Redis.
    pub fn log_entries(&self, stream: &RedisStream) -> Vec<(u64, Vec<u8>)> {
        let mut raw = self.raw();
        let reply: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
            .arg(stream.key_names()[1])
            .arg("-")
            .arg("+")
            .query(&mut raw)
            .unwrap();
        reply
            .ids
            .into_iter()
            .map(|e| {
                let id = e.id.strip_prefix("0-").unwrap().parse().unwrap();
                let data: Vec<u8> = e.get("d").unwrap();
                (id, data)
            })
            .collect()
    }

    /// Moves a stream with no events yet to `head` (retaining none), as if `head` events had
    /// come and gone, by writing its keys behind the backend's back.
    pub fn move_head_to(&self, stream: &RedisStream, head: u64) {
        let mut raw = self.raw();
        let [meta, log, _, _] = stream.key_names();
        let _: String = redis::cmd("XADD")
            .arg(log)
            .arg(format!("0-{head}"))
            .arg("d")
            .arg("x")
            .query(&mut raw)
            .unwrap();
        let _: () = redis::cmd("XTRIM")
            .arg(log)
            .arg("MAXLEN")
            .arg(0)
            .query(&mut raw)
            .unwrap();
        let _: () = redis::cmd("HSET")
            .arg(meta)
            .arg("head")
            .arg(head.to_string())
            .arg("floor")
            .arg((head + 1).to_string())
            .query(&mut raw)
            .unwrap();
    }

    pub async fn backend(&self) -> RedisBackend {
        self.backend_with(RedisConfig::default()).await
    }

    pub async fn backend_with(&self, config: RedisConfig) -> RedisBackend {
        RedisBackend::connect(&self.url(), config)
            .await
            .expect("connect backend")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Sends `signal` (`-STOP`, `-CONT`, `-TERM`) to `child` with `kill`.
pub fn send_signal(child: &Child, signal: &str) {
    let pid = child.id();
    let status = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill {signal} {pid}: {status}");
}

/// Polls `cond` until it holds or `timeout` passes.
pub async fn eventually<F, Fut>(timeout: Duration, what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if cond().await {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
