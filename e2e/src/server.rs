//! Launching the demo SSE server (`sse/demo`: the `sse_server` example plus Redis and load-test
//! flags) for the e2e tests, plus a tiny loopback HTTP GET client for `/metrics` and direct probes.
//!
//! Contract with the server: `--port 0` makes it print `listening on http://127.0.0.1:PORT` as its
//! first stdout line; `--capacity`, `--rate`, `--events`, `--resumption-window-ms`,
//! `--backpressure-timeout-ms` configure it; `/metrics` is Prometheus text.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};

use crate::http::{Buffered, ChunkedDecoder};

/// Upper bound for the server to print its address.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// Builds the demo server (`sse/demo`, binary `sse_server`) once per process and returns the
/// executable.
///
/// `REPLAY_RING_SSE_SERVER` overrides the path (skips the build).
pub fn server_binary() -> io::Result<PathBuf> {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Ok(p) = std::env::var("REPLAY_RING_SSE_SERVER") {
            return Ok(PathBuf::from(p));
        }
        build_server().map_err(|e| e.to_string())
    })
    .clone()
    .map_err(io::Error::other)
}

fn build_server() -> io::Result<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = std::process::Command::new(cargo)
        .current_dir(&root)
        .args([
            "build",
            "-p",
            "replay-ring-sse-demo",
            "--bin",
            "sse_server",
            "--message-format=json-render-diagnostics",
        ])
        .stderr(Stdio::inherit())
        .output()?;
    if !out.status.success() {
        return Err(io::Error::other("cargo build --bin sse_server failed"));
    }
    // The compiler-artifact message for the binary names the executable exactly, wherever
    // CARGO_TARGET_DIR or the workspace config put it.
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["reason"] == "compiler-artifact" && v["target"]["name"] == "sse_server")
        .find_map(|v| v["executable"].as_str().map(PathBuf::from))
        .ok_or_else(|| io::Error::other("no sse_server executable in cargo output"))
}

/// Flags for the demo server; `None` leaves the server's default.
#[derive(Debug, Clone, Default)]
pub struct ServerOptions {
    /// `--capacity`
    pub capacity: Option<usize>,
    /// `--rate` (events/s)
    pub rate: Option<u64>,
    /// `--events` (produce N, then close with `event: end`)
    pub events: Option<u64>,
    /// `--resumption-window-ms`
    pub resumption_window_ms: Option<u64>,
    /// `--backpressure-timeout-ms`
    pub backpressure_timeout_ms: Option<u64>,
    /// Anything else, appended verbatim.
    pub extra_args: Vec<String>,
}

impl ServerOptions {
    fn args(&self) -> Vec<String> {
        let mut a = vec!["--port".to_string(), "0".to_string()];
        let mut flag = |name: &str, v: Option<String>| {
            if let Some(v) = v {
                a.push(name.to_string());
                a.push(v);
            }
        };
        flag("--capacity", self.capacity.map(|v| v.to_string()));
        flag("--rate", self.rate.map(|v| v.to_string()));
        flag("--events", self.events.map(|v| v.to_string()));
        flag(
            "--resumption-window-ms",
            self.resumption_window_ms.map(|v| v.to_string()),
        );
        flag(
            "--backpressure-timeout-ms",
            self.backpressure_timeout_ms.map(|v| v.to_string()),
        );
        a.extend(self.extra_args.iter().cloned());
        a
    }
}

/// A running demo server; killed on drop.
pub struct DemoServer {
    child: Child,
    addr: SocketAddr,
}

impl DemoServer {
    /// Builds (once) and starts the server; its stderr and later stdout go to `log`.
    pub async fn spawn(opts: &ServerOptions, log: &std::path::Path) -> io::Result<Self> {
        let bin = server_binary()?;
        let log = std::fs::File::create(log)?;
        let mut child = Command::new(bin)
            .args(opts.args())
            .env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_default())
            .stdout(Stdio::piped())
            .stderr(log.try_clone()?)
            .kill_on_drop(true)
            .spawn()?;
        let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let first = tokio::time::timeout(STARTUP_TIMEOUT, lines.next_line())
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "sse_server did not start"))??
            .ok_or_else(|| io::Error::other("sse_server exited before printing its address"))?;
        let addr = parse_listening(&first)
            .ok_or_else(|| io::Error::other(format!("unexpected first line: {first:?}")))?;
        // Keep draining stdout so the server never blocks on a full pipe.
        let mut log = tokio::fs::File::from_std(log);
        tokio::spawn(async move {
            while let Ok(Some(l)) = lines.next_line().await {
                let _ = log.write_all(format!("{l}\n").as_bytes()).await;
            }
        });
        Ok(Self { child, addr })
    }

    /// The server's loopback address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// OS process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Resident set size in KiB, from `/proc/PID/status`.
    pub fn rss_kib(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()?)).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
    }

    /// `/metrics`, parsed.
    pub async fn metrics(&self) -> io::Result<Metrics> {
        let (status, _, body) = http_get(self.addr, "/metrics", &[]).await?;
        if status != 200 {
            return Err(io::Error::other(format!("/metrics answered {status}")));
        }
        Ok(Metrics::parse(&String::from_utf8_lossy(&body)))
    }
}

/// `listening on http://127.0.0.1:PORT` → the address.
pub fn parse_listening(line: &str) -> Option<SocketAddr> {
    line.trim()
        .strip_prefix("listening on http://")?
        .trim_end_matches('/')
        .parse()
        .ok()
}

/// Prometheus text exposition, flattened: `name{labels}` → value.
#[derive(Debug, Clone, Default)]
pub struct Metrics(pub HashMap<String, f64>);

impl Metrics {
    /// Parses `name value` / `name{l="v"} value` lines; skips comments and junk.
    pub fn parse(text: &str) -> Self {
        let mut m = HashMap::new();
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            // The value is the first token after the series (labels may contain spaces).
            let split = match line.rfind('}') {
                Some(close) => close + 1,
                None => line.find(char::is_whitespace).unwrap_or(line.len()),
            };
            let (series, rest) = line.split_at(split);
            if let Some(v) = rest.split_whitespace().next().and_then(|v| v.parse().ok()) {
                m.insert(series.trim().to_string(), v);
            }
        }
        Metrics(m)
    }

    /// Sum over every series of metric `name` whose name ends with `suffix`-free `name`
    /// (any labels), or `None` if there is none. A `_total` suffix is tried too.
    pub fn get(&self, name: &str) -> Option<f64> {
        let total = format!("{name}_total");
        let mut found = None;
        for (series, v) in &self.0 {
            let base = series.split('{').next().unwrap_or(series);
            if base == name
                || base == total
                || base.ends_with(&format!("_{name}"))
                || base.ends_with(&format!("_{total}"))
            {
                *found.get_or_insert(0.0) += v;
            }
        }
        found
    }
}

/// One GET over a fresh loopback connection (`Connection: close`); returns status, headers and
/// the de-chunked body. Not for event streams that never end.
pub async fn http_get(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> io::Result<(u16, Vec<(String, String)>, Vec<u8>)> {
    let mut s = TcpStream::connect(addr).await?;
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).await?;
    let mut r = Buffered::new(s);
    let head = r
        .read_head()
        .await?
        .ok_or_else(|| io::Error::other("no response"))?;
    let status = head
        .first_line
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let mut raw = std::mem::take(&mut r.buf);
    r.inner.read_to_end(&mut raw).await?;
    let body = if head.is_chunked() {
        let mut out = Vec::new();
        ChunkedDecoder::new().feed(&raw, &mut out)?;
        out
    } else {
        raw
    };
    Ok((status, head.headers, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_listening_line() {
        assert_eq!(
            parse_listening("listening on http://127.0.0.1:4321\n"),
            Some("127.0.0.1:4321".parse().unwrap())
        );
        assert_eq!(parse_listening("hello"), None);
    }

    #[test]
    fn parses_prometheus_text() {
        let m = Metrics::parse(
            "# HELP x y\n# TYPE replay_producer_waits_total counter\nreplay_producer_waits_total 7\n\
             replay_head{stream=\"a b\"} 12\nreplay_head{stream=\"c\"} 3\nbad line here\n",
        );
        assert_eq!(m.get("producer_waits"), Some(7.0));
        assert_eq!(m.get("head"), Some(15.0));
        assert_eq!(m.get("floor"), None);
    }
}
