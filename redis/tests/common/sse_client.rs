//! A minimal SSE client over raw HTTP/1.1 (loopback), for driving replicas through the chaos
//! proxy: one GET per attempt, frames handed to a callback as they arrive.

#![allow(dead_code)]

use std::io;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use replay_ring_e2e::http::{Buffered, ChunkedDecoder};
use replay_ring_sse::client::ContinuityVerifier;
use replay_ring_sse::EventId;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// One event-stream frame (comments dropped).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SseFrame {
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: String,
    pub retry: Option<u64>,
}

/// How one GET went.
#[derive(Debug)]
pub struct Attempt {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// The body ended with the terminating chunk (false: the connection was cut).
    pub complete: bool,
}

/// GETs `/events` from `addr` with an optional `Last-Event-ID`, calling `on_frame` for every
/// frame until the body ends or the connection drops (overall limit `limit`).
pub async fn get_events(
    addr: SocketAddr,
    last_event_id: Option<&str>,
    limit: Duration,
    mut on_frame: impl FnMut(&SseFrame),
) -> io::Result<Attempt> {
    tokio::time::timeout(limit, async move {
        let mut conn = TcpStream::connect(addr).await?;
        let mut req =
            format!("GET /events HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n");
        if let Some(id) = last_event_id {
            req.push_str(&format!("Last-Event-ID: {id}\r\n"));
        }
        req.push_str("\r\n");
        conn.write_all(req.as_bytes()).await?;
        let mut reader = Buffered::new(conn);
        let head = reader
            .read_head()
            .await?
            .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "no response"))?;
        let status: u16 = head
            .first_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| io::Error::other("bad status line"))?;
        let chunked = head.is_chunked();
        let mut decoder = ChunkedDecoder::new();
        let mut text = Vec::new();
        let mut complete = false;
        loop {
            let bytes = match reader.read_some(16 * 1024).await {
                Ok(b) => b,
                Err(_) => break, // reset: a cut
            };
            if bytes.is_empty() {
                complete = !chunked;
                break;
            }
            if chunked {
                decoder.feed(&bytes, &mut text)?;
            } else {
                text.extend_from_slice(&bytes);
            }
            while let Some(end) = find_frame_end(&text) {
                let raw: Vec<u8> = text.drain(..end + 2).collect();
                if let Some(frame) = parse_frame(&raw[..end]) {
                    on_frame(&frame);
                }
            }
            if chunked && decoder.is_done() {
                complete = true;
                break;
            }
        }
        Ok(Attempt {
            status,
            headers: head.headers.clone(),
            complete,
        })
    })
    .await
    .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "attempt took too long"))?
}

fn find_frame_end(text: &[u8]) -> Option<usize> {
    text.windows(2).position(|w| w == b"\n\n")
}

fn parse_frame(raw: &[u8]) -> Option<SseFrame> {
    let text = String::from_utf8_lossy(raw);
    let mut frame = SseFrame::default();
    let mut data = Vec::new();
    let mut any = false;
    for line in text.split('\n') {
        if line.starts_with(':') {
            continue;
        }
        let (name, value) = match line.split_once(':') {
            Some((n, v)) => (n, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        any = true;
        match name {
            "id" => frame.id = Some(value.to_owned()),
            "event" => frame.event = Some(value.to_owned()),
            "data" => data.push(value.to_owned()),
            "retry" => frame.retry = value.parse().ok(),
            _ => {}
        }
    }
    frame.data = data.join("\n");
    any.then_some(frame)
}

/// What a client of the demo server has seen across reconnects.
pub struct ResumingClient {
    pub verifier: ContinuityVerifier,
    pub last_event_id: Option<String>,
    pub ids: Vec<u64>,
    /// The cursor of the very first priming event: a new subscription starts live at the head.
    pub start: Option<u64>,
    pub ended: bool,
    pub stream_errors: Vec<String>,
}

impl ResumingClient {
    pub fn new() -> ResumingClient {
        ResumingClient {
            verifier: ContinuityVerifier::new(),
            last_event_id: None,
            ids: Vec::new(),
            start: None,
            ended: false,
            stream_errors: Vec::new(),
        }
    }

    /// Checks one frame: priming carries the cursor, events continue it with the right payload.
    /// The ids a client that subscribed at `start` must have seen by the end.
    pub fn expected(&self, n: u64) -> Vec<u64> {
        let start = self.start.expect("a priming event");
        assert!(
            start < n / 2,
            "subscribed too late to test much: head was {start}"
        );
        (start + 1..=n).collect()
    }

    /// The stream ended with every id from the subscription on, exactly once and in order, and
    /// no error frame.
    pub fn assert_complete(&self, n: u64, what: &str) {
        assert_eq!(self.ids, self.expected(n), "{what}");
        assert!(self.stream_errors.is_empty(), "{:?}", self.stream_errors);
    }

    pub fn on_frame(&mut self, frame: &SseFrame) {
        match (&frame.event, &frame.id) {
            (Some(e), _) if e == "end" => self.ended = true,
            (Some(e), _) if e == "stream-error" => self.stream_errors.push(frame.data.clone()),
            (None, Some(id)) => {
                let parsed = EventId::parse(id).expect("server sent a valid id");
                if frame.data.is_empty() {
                    self.verifier
                        .on_priming_id(&parsed)
                        .expect("priming id is the cursor");
                    self.start.get_or_insert(parsed.seq);
                } else {
                    self.verifier
                        .on_event_id(&parsed)
                        .expect("gap-free, in order, same epoch");
                    assert_eq!(
                        frame.data,
                        format!("{{\"n\":{}}}", parsed.seq),
                        "payload of {id}"
                    );
                    self.ids.push(parsed.seq);
                    self.last_event_id = Some(id.clone());
                }
            }
            other => panic!("unexpected frame {other:?}"),
        }
    }
}

/// A producing replica's flags: creates the stream (window 8,192) or takes it over, produces at
/// 200 events/s from start-up (not at its own first request: clients may all be on another
/// replica) and, with `events`, ends the stream with `event: end` after that id.
pub fn producer_args(url: &str, events: Option<u64>) -> Vec<String> {
    let mut args: Vec<String> = [
        "--redis",
        url,
        "--eager",
        "--rate",
        "200",
        "--capacity",
        "8192",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if let Some(n) = events {
        args.extend(["--events".to_string(), n.to_string()]);
    }
    args
}

/// A replica process of the demo server (`sse/demo`'s `sse_server` with `--redis`).
pub struct Replica {
    pub addr: SocketAddr,
    child: Child,
    /// Every line the replica wrote to stderr so far (also copied to the test's stderr).
    log: Arc<Mutex<Vec<String>>>,
}

impl Replica {
    /// Builds (once) and starts `sse_server` with `args`; waits for its `listening on` line.
    pub async fn start<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Replica {
        let exe = replay_ring_e2e::server::server_binary().expect("build sse_server");
        let mut child = Command::new(exe)
            .args(args)
            .args(["--port", "0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn sse_server");
        let log = Arc::new(Mutex::new(Vec::new()));
        let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
        let lines = log.clone();
        std::thread::spawn(move || {
            for line in std::io::BufRead::lines(stderr).map_while(Result::ok) {
                eprintln!("{line}");
                lines.lock().unwrap().push(line);
            }
        });
        let stdout = child.stdout.take().unwrap();
        let stdout = tokio::process::ChildStdout::from_std(stdout).unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("replica start-up")
            .unwrap()
            .expect("replica printed nothing");
        let addr = line
            .strip_prefix("listening on http://")
            .expect("listening line")
            .parse()
            .unwrap();
        // Keep draining stdout so the child never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Replica { addr, child, log }
    }

    /// Waits up to `timeout` for a stderr line containing `text`; whether one came.
    pub async fn logged(&self, text: &str, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if self.log.lock().unwrap().iter().any(|l| l.contains(text)) {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGSTOP (`pause = true`: a stall past its lease, as in a long GC pause or a frozen VM) or
    /// SIGCONT.
    pub fn pause(&self, pause: bool) {
        self.signal(if pause { "-STOP" } else { "-CONT" });
    }

    /// SIGTERM: a graceful shutdown (a rolling deploy).
    pub fn terminate(&self) {
        self.signal("-TERM");
    }

    fn signal(&self, signal: &str) {
        super::send_signal(&self.child, signal);
    }

    /// Waits up to `timeout` for the process to exit by itself; its exit status, `None` if it
    /// is still running.
    pub async fn exited(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for the replica") {
                return Some(status);
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGKILL: a crash.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill();
    }
}
