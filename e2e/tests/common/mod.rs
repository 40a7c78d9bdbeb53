//! Shared test helpers: tiny upstream servers (hand-rolled and axum) and a raw HTTP client.
#![allow(dead_code)]

pub mod mock_sse;

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use replay_ring_e2e::http::{Buffered, ChunkedDecoder, Head};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

/// What a hand-rolled upstream received: raw head and raw body, per request.
pub type Received = Arc<Mutex<Vec<(Head, Vec<u8>)>>>;

/// A hand-rolled upstream: for every request it records head+body (Content-Length or chunked)
/// and answers with `reply(head, body)` raw bytes, then closes.
pub async fn raw_upstream(
    reply: impl Fn(&Head, &[u8]) -> Vec<Vec<u8>> + Send + Sync + 'static,
) -> (SocketAddr, Received) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let got: Received = Arc::default();
    let reply = Arc::new(reply);
    let got2 = got.clone();
    tokio::spawn(async move {
        loop {
            let (s, _) = listener.accept().await.unwrap();
            let (got, reply) = (got2.clone(), reply.clone());
            tokio::spawn(async move {
                let (r, mut w) = s.into_split();
                let mut r = Buffered::new(r);
                let Ok(Some(head)) = r.read_head().await else {
                    return;
                };
                let mut body = Vec::new();
                if head.is_chunked() {
                    let mut dec = ChunkedDecoder::new();
                    let mut sink = Vec::new();
                    while !dec.is_done() {
                        let p = r.read_some(4096).await.unwrap();
                        assert!(!p.is_empty(), "eof in chunked request body");
                        let used = dec.feed(&p, &mut sink).unwrap();
                        body.extend_from_slice(&p[..used]);
                    }
                } else if let Some(n) = head.content_length() {
                    while (body.len() as u64) < n {
                        let p = r.read_some(4096).await.unwrap();
                        assert!(!p.is_empty(), "eof in request body");
                        body.extend_from_slice(&p);
                    }
                }
                let parts = reply(&head, &body);
                got.lock().unwrap().push((head, body));
                for p in parts {
                    if w.write_all(&p).await.is_err() {
                        return;
                    }
                    let _ = w.flush().await;
                }
            });
        }
    });
    (addr, got)
}

/// A response as a client saw it.
#[derive(Debug)]
pub struct Response {
    pub head: Head,
    pub status: u16,
    /// De-chunked payload.
    pub body: Vec<u8>,
    /// The body ended properly (last-chunk / full length), not by a cut.
    pub complete: bool,
}

/// Sends raw request bytes on a fresh connection and reads one response until its end or EOF.
pub async fn raw_request(addr: SocketAddr, request: &[u8]) -> io::Result<Response> {
    let mut s = TcpStream::connect(addr).await?;
    s.write_all(request).await?;
    read_response(&mut Buffered::new(s)).await
}

/// Reads one response from `r`.
pub async fn read_response(r: &mut Buffered<TcpStream>) -> io::Result<Response> {
    let head = r.read_head().await?.ok_or(io::ErrorKind::UnexpectedEof)?;
    let status = head.first_line.split(' ').nth(1).unwrap().parse().unwrap();
    let mut body = Vec::new();
    let complete;
    if status == 204 || status == 304 || (100..200).contains(&status) {
        complete = true;
    } else if head.is_chunked() {
        let mut dec = ChunkedDecoder::new();
        while !dec.is_done() {
            let p = r.read_some(4096).await?;
            if p.is_empty() {
                break;
            }
            let used = dec.feed(&p, &mut body)?;
            r.buf.splice(0..0, p[used..].iter().copied());
        }
        complete = dec.is_done();
    } else if let Some(n) = head.content_length() {
        while (body.len() as u64) < n {
            let p = r.read_some(4096).await?;
            if p.is_empty() {
                break;
            }
            body.extend_from_slice(&p);
        }
        complete = body.len() as u64 == n;
    } else {
        loop {
            let p = r.read_some(4096).await?;
            if p.is_empty() {
                break;
            }
            body.extend_from_slice(&p);
        }
        complete = true;
    }
    Ok(Response {
        head,
        status,
        body,
        complete,
    })
}

/// `id:` values of the event frames in an SSE payload.
pub fn sse_ids(body: &[u8]) -> Vec<String> {
    let mut s = replay_ring_e2e::sse::FrameScanner::new();
    s.feed(body).into_iter().filter_map(|f| f.id).collect()
}

/// A GET for `path` with optional `Last-Event-ID`.
pub fn get(path: &str, last_event_id: Option<&str>) -> Vec<u8> {
    let mut r = format!("GET {path} HTTP/1.1\r\nHost: test\r\nAccept: text/event-stream\r\n");
    if let Some(id) = last_event_id {
        r.push_str(&format!("Last-Event-ID: {id}\r\n"));
    }
    r.push_str("\r\n");
    r.into_bytes()
}
