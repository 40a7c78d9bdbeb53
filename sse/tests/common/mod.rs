//! A raw HTTP/1.1 client over loopback TCP for the endpoint tests: requests are written by hand,
//! responses de-chunked and event-stream frames parsed as the HTML standard describes.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::timeout;

/// Upper bound for any single wait in these tests.
pub const LIMIT: Duration = Duration::from_secs(30);

/// A parsed response head plus the body read so far (de-chunked).
#[derive(Debug, Default)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// Complete frames in the body (a trailing partial frame is left out).
    pub fn frames(&self) -> Vec<Frame> {
        parse_frames(&self.body)
    }
}

/// One event-stream frame: `id`, `event`, `data` (lines joined with `\n`), or a comment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Frame {
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: Option<String>,
    pub comment: Option<String>,
}

impl Frame {
    /// The sequence number of the frame's id (`<stream>.<epoch>.<seq>`).
    pub fn seq(&self) -> Option<u64> {
        self.id.as_deref()?.rsplit('.').next()?.parse().ok()
    }

    /// An event frame (not the priming event, a comment or a terminal frame): its sequence number.
    pub fn event_seq(&self) -> Option<u64> {
        if self.data.as_deref() == Some("") || self.event.is_some() {
            return None;
        }
        self.seq()
    }
}

pub fn parse_frames(body: &[u8]) -> Vec<Frame> {
    let text = String::from_utf8_lossy(body);
    let complete = &text[..text.rfind("\n\n").map_or(0, |i| i + 2)];
    complete
        .split("\n\n")
        .filter(|f| !f.is_empty())
        .map(|f| {
            let mut frame = Frame::default();
            for line in f.split('\n') {
                let (name, value) = line.split_once(':').unwrap_or((line, ""));
                let value = value.strip_prefix(' ').unwrap_or(value);
                match name {
                    "" => frame.comment = Some(value.to_owned()),
                    "id" => frame.id = Some(value.to_owned()),
                    "event" => frame.event = Some(value.to_owned()),
                    "data" => {
                        let data = frame.data.get_or_insert_with(String::new);
                        if !data.is_empty() {
                            data.push('\n');
                        }
                        data.push_str(value);
                    }
                    "retry" => {}
                    other => panic!("unexpected field {other:?} in {f:?}"),
                }
            }
            frame
        })
        .collect()
}

/// The request bytes of a GET with extra headers.
pub fn request(path: &str, headers: &[(&str, &str)], close: bool) -> Vec<u8> {
    request_with("GET", path, headers, close)
}

/// The request bytes of `method` with extra headers.
pub fn request_with(method: &str, path: &str, headers: &[(&str, &str)], close: bool) -> Vec<u8> {
    let mut r = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n");
    if close {
        r.push_str("Connection: close\r\n");
    }
    for (k, v) in headers {
        r.push_str(&format!("{k}: {v}\r\n"));
    }
    r.push_str("\r\n");
    r.into_bytes()
}

/// GET `path` and read the whole response (the server ends it).
pub async fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Reply {
    whole_response(addr, &request(path, headers, true)).await
}

/// HEAD `path` and read the response head (the server closes the connection after it).
pub async fn head(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Reply {
    whole_response(addr, &request_with("HEAD", path, headers, true)).await
}

/// Sends `request` (which asks to close the connection) and reads the whole response.
async fn whole_response(addr: SocketAddr, request: &[u8]) -> Reply {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(request).await.unwrap();
    let mut raw = Vec::new();
    timeout(LIMIT, s.read_to_end(&mut raw))
        .await
        .expect("response did not end")
        .unwrap();
    parse_reply(&raw).expect("a complete response head")
}

/// An event-stream response read incrementally.
pub struct Stream {
    pub socket: TcpStream,
    raw: Vec<u8>,
    pub eof: bool,
}

impl Stream {
    /// Opens `GET path` on a fresh connection (optionally with a small receive buffer).
    pub async fn open(
        addr: SocketAddr,
        path: &str,
        headers: &[(&str, &str)],
        recv_buffer: Option<u32>,
    ) -> Stream {
        let socket = TcpSocket::new_v4().unwrap();
        if let Some(size) = recv_buffer {
            socket.set_recv_buffer_size(size).unwrap();
        }
        let mut socket = socket.connect(addr).await.unwrap();
        socket
            .write_all(&request(path, headers, false))
            .await
            .unwrap();
        Stream {
            socket,
            raw: Vec::new(),
            eof: false,
        }
    }

    /// The sizes of the complete body chunks received so far (chunked transfer encoding: the HTTP
    /// stack writes each chunk the endpoint hands it as one).
    pub fn chunk_sizes(&self) -> Vec<usize> {
        let Some(split) = self.raw.windows(4).position(|w| w == b"\r\n\r\n") else {
            return Vec::new();
        };
        let mut body = &self.raw[split + 4..];
        let mut sizes = Vec::new();
        while let Some(eol) = body.windows(2).position(|w| w == b"\r\n") {
            let line = std::str::from_utf8(&body[..eol]).unwrap().trim();
            let size = usize::from_str_radix(line, 16).unwrap();
            if size == 0 || body.len() < eol + 2 + size + 2 {
                break;
            }
            sizes.push(size);
            body = &body[eol + 2 + size + 2..];
        }
        sizes
    }

    /// What arrived so far.
    pub fn reply(&self) -> Option<Reply> {
        parse_reply(&self.raw)
    }

    /// Reads until `done(reply)` holds or the connection ends; panics after [`LIMIT`].
    pub async fn read_until(&mut self, mut done: impl FnMut(&Reply) -> bool) -> Reply {
        let mut buf = vec![0u8; 64 * 1024];
        // Keep-alive comments keep each read under `LIMIT`: a condition that never comes true
        // must still end the test.
        let deadline = tokio::time::Instant::now() + 2 * LIMIT;
        loop {
            if let Some(reply) = self.reply() {
                if done(&reply) || self.eof {
                    return reply;
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "condition not met within {:?}: {reply:?}",
                    2 * LIMIT
                );
            } else if self.eof {
                panic!("connection ended before a response head");
            }
            self.read_more(&mut buf).await;
        }
    }

    /// Reads until the bytes received contain `needle` (or the connection ends), then parses the
    /// reply once. For long streams: `read_until` parses the whole reply after every read, which
    /// costs O(reply²) per connection; with dozens of readers in a debug build that is enough CPU
    /// to make every reader lag, which the slow-consumer tests must not confuse with a stall.
    pub async fn read_until_contains(&mut self, needle: &[u8]) -> Reply {
        let mut buf = vec![0u8; 64 * 1024];
        let mut scanned: usize = 0;
        loop {
            let from = scanned.saturating_sub(needle.len());
            if memchr::memmem::find(&self.raw[from..], needle).is_some() || self.eof {
                return self.reply().expect("a response head");
            }
            scanned = self.raw.len();
            self.read_more(&mut buf).await;
        }
    }

    /// One read from the socket into `raw`; a reset or the end sets `eof`. Panics after [`LIMIT`].
    async fn read_more(&mut self, buf: &mut [u8]) {
        let n = match timeout(LIMIT, self.socket.read(buf)).await {
            Ok(Ok(n)) => n,
            Ok(Err(_)) => 0, // reset: treat as the end
            Err(_) => panic!("stream stalled: {:?}", self.reply()),
        };
        if n == 0 {
            self.eof = true;
        }
        self.raw.extend_from_slice(&buf[..n]);
    }

    /// Reads to the end of the response.
    pub async fn read_to_end(&mut self) -> Reply {
        self.read_until(|_| false).await
    }
}

/// Parses a head and de-chunks the complete chunks of the body; `None` before the head is complete.
pub fn parse_reply(raw: &[u8]) -> Option<Reply> {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..split]).unwrap();
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let mut reply = Reply {
        status,
        headers,
        body: Vec::new(),
    };
    let rest = &raw[split + 4..];
    if reply
        .header("transfer-encoding")
        .is_some_and(|v| v.contains("chunked"))
    {
        reply.body = dechunk(rest);
    } else {
        reply.body = rest.to_vec();
    }
    Some(reply)
}

/// The chunk data received so far, as a streaming decoder delivers it (a partial last chunk
/// included).
fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = body.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let Ok(size) = usize::from_str_radix(std::str::from_utf8(&body[..eol]).unwrap().trim(), 16)
        else {
            return out;
        };
        body = &body[eol + 2..];
        if size == 0 {
            return out;
        }
        if body.len() < size + 2 {
            out.extend_from_slice(&body[..size.min(body.len())]);
            return out;
        }
        out.extend_from_slice(&body[..size]);
        body = &body[size + 2..];
    }
}

/// Polls `cond` every few milliseconds until it holds; panics with `what` after [`LIMIT`].
pub async fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + LIMIT;
    while !cond() {
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        // Polling interval under a deadline: the state is observed, not signalled.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
