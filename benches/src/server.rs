//! Starting the server under test as a child process and finding its address.

use std::io::{self, BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Which server implementation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ServerKind {
    /// The demo server (`sse/demo`: `replay-ring-sse`'s example server plus load-test flags).
    ReplayRing,
    /// The `sse-baseline` bin: axum `Sse` over `tokio::sync::broadcast`.
    Baseline,
}

impl ServerKind {
    /// Label in reports.
    pub fn name(self) -> &'static str {
        match self {
            ServerKind::ReplayRing => "replay-ring",
            ServerKind::Baseline => "axum+tokio-broadcast",
        }
    }
}

/// How to run one server.
#[derive(Debug, Clone)]
pub struct ServerSpec {
    /// Implementation.
    pub kind: ServerKind,
    /// Its executable.
    pub bin: PathBuf,
    /// Events per second; 0 = as fast as the server's backpressure (or the baseline's overwrite)
    /// allows.
    pub rate: f64,
    /// Events to publish, then end every stream.
    pub events: u64,
    /// Window / channel capacity (events).
    pub capacity: usize,
    /// Connections the server must accept at once.
    pub connections: usize,
    /// Publish only once this many streams are open (`None`: from the first).
    pub start_after: Option<usize>,
    /// More arguments for the server, after the others (e.g. `--redis URL` for the demo server).
    pub extra_args: Vec<String>,
}

impl ServerSpec {
    /// Command-line arguments for this server.
    pub fn args(&self) -> Vec<String> {
        let mut args = vec![
            "--port".into(),
            "0".into(),
            "--rate".into(),
            self.rate.to_string(),
            "--events".into(),
            self.events.to_string(),
            "--capacity".into(),
            self.capacity.to_string(),
        ];
        if let Some(streams) = self.start_after {
            args.extend(["--start-after".into(), streams.to_string()]);
        }
        if self.kind == ServerKind::ReplayRing {
            args.extend([
                "--max-readers".into(),
                self.connections.to_string(),
                // Short resumption window: the ring's retention holds events this long after every
                // connection wrote them (sized with the capacity: rate × window < capacity).
                "--resumption-window-ms".into(),
                "1000".into(),
                "--backpressure-timeout-ms".into(),
                "60000".into(),
                // Lossless delivery to every connection is what is measured: the slow-consumer
                // policy (cutting a connection that lags while others keep up) is off, and the
                // write timeout is far above any stall the load client causes.
                "--max-lag-percent".into(),
                "0".into(),
                "--write-timeout-ms".into(),
                "30000".into(),
                // `{"n":id,"t":publish time}`, the payload the baseline publishes.
                "--timestamps".into(),
            ]);
        }
        args.extend(self.extra_args.iter().cloned());
        args
    }
}

/// A running server; killed on drop.
#[derive(Debug)]
pub struct Server {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
}

/// How long a server may take to print its address.
const STARTUP: Duration = Duration::from_secs(60);

impl Server {
    /// Starts the server and waits for its `listening on http://ADDR` line. Its stderr is
    /// inherited; an error (a flag it refuses, e.g. more readers than its table allows) comes back
    /// as `Err` with the exit status.
    pub fn spawn(spec: &ServerSpec) -> io::Result<Server> {
        let mut child = Command::new(&spec.bin)
            .args(spec.args())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", spec.bin.display())))?;
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let first = lines.next();
            let _ = tx.send(first);
            // Keep draining so the server never blocks on a full pipe.
            for _ in lines {}
        });
        let (etx, erx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut text = String::new();
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if text.len() < 4096 {
                    text.push_str(&line);
                    text.push('\n');
                }
            }
            let _ = etx.send(text);
        });
        let line = match rx.recv_timeout(STARTUP) {
            Ok(Some(Ok(line))) => line,
            _ => {
                let _ = child.kill();
                let status = child.wait()?;
                let stderr = erx.recv_timeout(Duration::from_secs(5)).unwrap_or_default();
                return Err(io::Error::other(format!(
                    "{} did not start ({status}): {}",
                    spec.kind.name(),
                    stderr.trim()
                )));
            }
        };
        let addr = line
            .strip_prefix("listening on http://")
            .and_then(|a| a.trim().parse().ok())
            .ok_or_else(|| io::Error::other(format!("unexpected first line {line:?}")))?;
        Ok(Server { child, addr })
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
