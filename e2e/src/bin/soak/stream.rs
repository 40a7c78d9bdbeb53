//! One event-stream connection as a soak client sees it: connect, send the GET (with
//! `Last-Event-ID` on a resume), read the response head, then the body's frames; and the
//! continuity check every client applies to the ids it receives.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use replay_ring_e2e::http::{find, Buffered, ChunkedDecoder, Head};
use replay_ring_sse::{EventId, KEEP_ALIVE_EVENT_NAME};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// Bytes asked of the socket per read.
const READ_SIZE: usize = 64 * 1024;

/// What a group of clients (live or stalled) received, updated as they go.
#[derive(Debug, Default)]
pub struct Tally {
    /// Events taken in order (cursor + 1).
    pub events: AtomicU64,
    /// Ids skipped inside a 200 response: events lost without an explicit refusal.
    pub lost: AtomicU64,
    /// Events at or below the cursor.
    pub duplicated: AtomicU64,
    /// Resumed responses whose priming frame did not name the client's cursor.
    pub priming_mismatches: AtomicU64,
    /// `slow_consumer` error frames received.
    pub slow_consumer_frames: AtomicU64,
    /// Frames with an id that does not parse or names another stream.
    pub malformed: AtomicU64,
}

/// One parsed event-stream frame (the server writes LF line ends only). Only what the checks need
/// is kept: the payload of an event is measured, not copied.
#[derive(Debug, Default)]
pub struct Frame {
    /// The `id:` field.
    pub id: Option<String>,
    /// The `event:` field (terminal frames: `end`, `stream-error`).
    pub event: Option<String>,
    /// Bytes of `data:` values.
    pub data_len: usize,
    /// The `data:` value of a named frame (the terminal frames' JSON).
    pub named_data: Option<String>,
}

impl Frame {
    fn parse(raw: &[u8]) -> Frame {
        let mut frame = Frame::default();
        let mut data = Vec::new();
        for line in raw.split(|&b| b == b'\n') {
            if line.first() == Some(&b':') {
                continue;
            }
            let (field, value) = match find(line, b":") {
                Some(i) => (&line[..i], &line[i + 1..]),
                None => (line, &b""[..]),
            };
            let value = value.strip_prefix(b" ").unwrap_or(value);
            match field {
                b"id" => frame.id = Some(String::from_utf8_lossy(value).into_owned()),
                b"event" => frame.event = Some(String::from_utf8_lossy(value).into_owned()),
                b"data" => {
                    frame.data_len += value.len();
                    data.push(value);
                }
                _ => {}
            }
        }
        if frame.event.is_some() {
            frame.named_data = Some(String::from_utf8_lossy(&data.join(&b'\n')).into_owned());
        }
        frame
    }

    /// An error frame of the slow-consumer policy (`event: stream-error`, `"error":"slow_consumer"`).
    pub fn is_slow_consumer_cut(&self) -> bool {
        self.event.as_deref() == Some("stream-error")
            && self
                .named_data
                .as_deref()
                .and_then(|d| serde_json::from_str::<serde_json::Value>(d).ok())
                .is_some_and(|v| v["error"] == "slow_consumer")
    }
}

/// What one frame was, after the continuity check.
#[derive(Debug, PartialEq, Eq)]
pub enum Seen {
    /// The priming frame (names the position the response starts after).
    Priming,
    /// The next event.
    Event,
    /// An event at or below the cursor (counted as duplicated).
    Duplicate,
    /// A keep-alive (a comment, or `event: keep-alive`) or another frame without an id.
    Other,
    /// A named frame: the response ends.
    Terminal,
}

/// A client's position in the stream: the stream's identity (from the first id seen; later ids
/// must match) and the last event it received.
#[derive(Debug, Default)]
pub struct Cursor {
    identity: Option<(String, u64)>,
    /// The last event received (or the position a 416's floor moved it to).
    pub last: Option<u64>,
}

impl Cursor {
    /// The `Last-Event-ID` for a resume, once a first id has been seen.
    pub fn last_event_id(&self) -> Option<String> {
        match (&self.identity, self.last) {
            (Some((stream, epoch)), Some(c)) => Some(format!("{stream}.{epoch:x}.{c}")),
            _ => None,
        }
    }

    /// Accepts an explicit gap (a 416 with `Replay-Floor`): resumes from the floor from now on.
    /// Returns how many events were explicitly gone.
    pub fn accept_gap(&mut self, floor: u64) -> u64 {
        let gone = self
            .last
            .map_or(0, |c| floor.saturating_sub(c.saturating_add(1)));
        self.last = Some(floor.saturating_sub(1));
        gone
    }

    /// Checks `frame` (the `first` of its response or not) against the cursor and advances it.
    ///
    /// The first frame of a response primes at the cursor (it has an id and no data); every event
    /// after it must be the cursor + 1. A skipped id counts as lost, an id at or below the cursor
    /// as duplicated.
    pub fn check(&mut self, frame: &Frame, first: bool, tally: &Tally) -> io::Result<Seen> {
        if frame.event.as_deref() == Some(KEEP_ALIVE_EVENT_NAME) {
            // An id would move a browser's cursor: no keep-alive may carry one.
            return match &frame.id {
                None => Ok(Seen::Other),
                Some(id) => Err(io::Error::other(format!("keep-alive event with id {id:?}"))),
            };
        }
        if frame.event.is_some() {
            if frame.is_slow_consumer_cut() {
                tally.slow_consumer_frames.fetch_add(1, Relaxed);
            }
            return Ok(Seen::Terminal);
        }
        let Some(raw) = frame.id.as_deref() else {
            return Ok(Seen::Other);
        };
        let id =
            EventId::parse(raw).map_err(|e| io::Error::other(format!("bad id {raw:?}: {e}")))?;
        let this = (id.stream.as_str().to_string(), id.epoch.get());
        match &self.identity {
            Some(known) if *known != this => {
                return Err(io::Error::other(format!("stream changed to {raw}")));
            }
            Some(_) => {}
            None => self.identity = Some(this),
        }
        if first && frame.data_len == 0 {
            if let Some(c) = self.last {
                if id.seq != c {
                    tally.priming_mismatches.fetch_add(1, Relaxed);
                }
            }
            self.last.get_or_insert(id.seq);
            return Ok(Seen::Priming);
        }
        match self.last {
            Some(c) if id.seq == c + 1 => {}
            Some(c) if id.seq > c + 1 => {
                tally.lost.fetch_add(id.seq - c - 1, Relaxed);
            }
            Some(_) => {
                tally.duplicated.fetch_add(1, Relaxed);
                return Ok(Seen::Duplicate);
            }
            None => {}
        }
        self.last = Some(id.seq);
        tally.events.fetch_add(1, Relaxed);
        Ok(Seen::Event)
    }
}

/// A response: its status, head and body.
pub struct Response {
    /// The status code (0 if the status line did not parse).
    pub status: u16,
    /// The response head.
    pub head: Head,
    /// The body, read frame by frame.
    pub body: Body,
}

/// Connects (with an optional receive buffer size, set before connecting so the window is
/// advertised small from the start), sends the GET and reads the response head within `timeout`.
pub async fn open(
    addr: SocketAddr,
    path: &str,
    last_event_id: Option<&str>,
    recv_buffer: Option<u32>,
    timeout: Duration,
) -> io::Result<Response> {
    let socket = TcpSocket::new_v4()?;
    if let Some(size) = recv_buffer {
        socket.set_recv_buffer_size(size)?;
    }
    let open = async {
        let mut stream = socket.connect(addr).await?;
        let mut req =
            format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n");
        if let Some(c) = last_event_id {
            req.push_str(&format!("Last-Event-ID: {c}\r\n"));
        }
        req.push_str("\r\n");
        stream.write_all(req.as_bytes()).await?;
        let mut r = Buffered::new(stream);
        let head = r
            .read_head()
            .await?
            .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "closed before head"))?;
        Ok::<_, io::Error>((head, r))
    };
    let (head, r) = tokio::time::timeout(timeout, open)
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no response head"))??;
    let status = head
        .first_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let chunked = head.is_chunked();
    let mut body = Body {
        stream: r.inner,
        chunked: chunked.then(ChunkedDecoder::new),
        read: Vec::with_capacity(READ_SIZE),
        decoded: Vec::new(),
        first: true,
        bytes: 0,
    };
    body.push(&r.buf)?;
    Ok(Response { status, head, body })
}

/// A response body: reads from the socket into a reused buffer, de-chunks, splits frames.
pub struct Body {
    stream: TcpStream,
    chunked: Option<ChunkedDecoder>,
    /// Reused read buffer (no zeroing, no allocation per read).
    read: Vec<u8>,
    /// De-chunked bytes not yet split into frames.
    decoded: Vec<u8>,
    /// No frame taken yet: the next one is the response's first.
    first: bool,
    /// Bytes read from the socket.
    bytes: u64,
}

impl Body {
    fn push(&mut self, bytes: &[u8]) -> io::Result<()> {
        match &mut self.chunked {
            Some(decoder) => {
                decoder.feed(bytes, &mut self.decoded)?;
            }
            None => self.decoded.extend_from_slice(bytes),
        }
        Ok(())
    }

    /// Reads once from the socket; `Ok(false)` at the end of the body: the end of a chunked body
    /// (the server ended the response and may keep the connection for another request), or the end
    /// of the connection.
    ///
    /// Cancel safe: bytes are only taken from the socket by a read that completes.
    pub async fn read(&mut self) -> io::Result<bool> {
        if self.chunked.as_ref().is_some_and(ChunkedDecoder::is_done) {
            return Ok(false);
        }
        self.read.clear();
        if self.stream.read_buf(&mut self.read).await? == 0 {
            return Ok(false);
        }
        let read = std::mem::take(&mut self.read);
        let pushed = self.push(&read);
        self.bytes += read.len() as u64;
        self.read = read;
        pushed.map(|()| true)
    }

    /// Bytes read from the socket so far (after the head).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Splits off every complete frame, each with whether it is the response's first.
    pub fn frames(&mut self) -> Vec<(Frame, bool)> {
        let mut frames = Vec::new();
        let mut start = 0;
        while let Some(end) = find(&self.decoded[start..], b"\n\n") {
            let frame = Frame::parse(&self.decoded[start..start + end]);
            frames.push((frame, std::mem::take(&mut self.first)));
            start += end + 2;
        }
        self.decoded.drain(..start);
        frames
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(bytes: &[u8], tally: &Tally, cursor: &mut Cursor) -> Vec<Seen> {
        let mut decoded = bytes.to_vec();
        let mut out = Vec::new();
        let mut first = true;
        while let Some(end) = find(&decoded, b"\n\n") {
            let frame = Frame::parse(&decoded[..end]);
            out.push(cursor.check(&frame, first, tally).unwrap());
            first = false;
            decoded.drain(..end + 2);
        }
        out
    }

    #[test]
    fn a_resume_primes_at_the_cursor_and_continues_at_the_next_id() {
        let tally = Tally::default();
        let mut cursor = Cursor::default();
        let seen = body(
            b"id: s.a.4\nretry: 1000\ndata\n\nid: s.a.5\ndata: {\"n\":5}\n\n: keep-alive\n\n\
              event: keep-alive\ndata:\n\nid: s.a.6\ndata: {\"n\":6}\n\n",
            &tally,
            &mut cursor,
        );
        assert_eq!(
            seen,
            [
                Seen::Priming,
                Seen::Event,
                Seen::Other,
                Seen::Other,
                Seen::Event
            ]
        );
        assert_eq!(cursor.last_event_id().as_deref(), Some("s.a.6"));
        let seen = body(
            b"id: s.a.3\ndata\n\nid: s.a.6\ndata: x\n\nid: s.a.9\ndata: x\n\n",
            &tally,
            &mut cursor,
        );
        assert_eq!(seen, [Seen::Priming, Seen::Duplicate, Seen::Event]);
        assert_eq!(tally.priming_mismatches.load(Relaxed), 1);
        assert_eq!(tally.duplicated.load(Relaxed), 1);
        assert_eq!(tally.lost.load(Relaxed), 2);
        assert_eq!(tally.events.load(Relaxed), 3);
    }

    #[test]
    fn a_keep_alive_event_with_an_id_is_malformed() {
        let frame = Frame::parse(b"event: keep-alive\nid: s.a.7\ndata:");
        let err = Cursor::default()
            .check(&frame, false, &Tally::default())
            .unwrap_err();
        assert!(err.to_string().contains("keep-alive"), "{err}");
    }

    #[test]
    fn a_slow_consumer_frame_is_recognised_and_ends_the_response() {
        let tally = Tally::default();
        let mut cursor = Cursor::default();
        let seen = body(
            b"event: stream-error\ndata: {\"error\":\"slow_consumer\",\"reason\":\"write_timeout\"}\n\n\
              event: stream-error\ndata: {\"error\":\"replay_gap\"}\n\n",
            &tally,
            &mut cursor,
        );
        assert_eq!(seen, [Seen::Terminal, Seen::Terminal]);
        assert_eq!(tally.slow_consumer_frames.load(Relaxed), 1);
    }

    #[test]
    fn an_explicit_gap_moves_the_cursor_to_the_floor() {
        let mut cursor = Cursor {
            identity: Some(("s".into(), 10)),
            last: Some(4),
        };
        assert_eq!(cursor.accept_gap(10), 5);
        assert_eq!(cursor.last_event_id().as_deref(), Some("s.a.9"));
    }
}
