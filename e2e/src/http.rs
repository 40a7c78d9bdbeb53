//! Just enough HTTP/1.1 for the chaos proxy: buffered head reading, header parsing and an incremental
//! chunked-transfer decoder. Heads are forwarded byte for byte; only bodies are re-framed.

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt};

/// Largest request/response head accepted (bytes), so a broken peer cannot grow memory unbounded.
pub const MAX_HEAD: usize = 64 * 1024;

/// A parsed head: the first line, header fields in order, and the raw bytes it came from.
#[derive(Debug, Clone)]
pub struct Head {
    /// Request line or status line, without the line break.
    pub first_line: String,
    /// Header fields as `(name, value)`, value trimmed; names keep their case.
    pub headers: Vec<(String, String)>,
    /// The exact bytes of the head including the final empty line.
    pub raw: Vec<u8>,
}

impl Head {
    /// First value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Whether any comma-separated token of header `name` equals `token` (case-insensitive).
    pub fn header_has_token(&self, name: &str, token: &str) -> bool {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .flat_map(|(_, v)| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    }

    /// The declared `Content-Length`, if present and valid.
    pub fn content_length(&self) -> Option<u64> {
        self.header("content-length")?.trim().parse().ok()
    }

    /// Whether the body uses chunked transfer coding.
    pub fn is_chunked(&self) -> bool {
        self.header_has_token("transfer-encoding", "chunked")
    }
}

/// Parses a head (everything up to and including the blank line).
pub fn parse_head(raw: Vec<u8>) -> io::Result<Head> {
    let text = std::str::from_utf8(&raw).map_err(|_| invalid("head is not UTF-8"))?;
    let mut lines = text.split("\r\n");
    let first_line = lines.next().unwrap_or_default().to_string();
    if first_line.is_empty() {
        return Err(invalid("empty first line"));
    }
    let mut headers = Vec::new();
    for line in lines.take_while(|l| !l.is_empty()) {
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| invalid("header line without ':'"))?;
        headers.push((name.trim().to_string(), value.trim().to_string()));
    }
    Ok(Head {
        first_line,
        headers,
        raw,
    })
}

/// An `InvalidData` error with a fixed message.
pub fn invalid(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_string())
}

/// A read half plus the bytes read past the last consumed item.
#[derive(Debug)]
pub struct Buffered<R> {
    /// Underlying reader.
    pub inner: R,
    /// Bytes read but not yet consumed.
    pub buf: Vec<u8>,
}

impl<R: AsyncRead + Unpin> Buffered<R> {
    /// Wraps a reader with an empty buffer.
    pub fn new(inner: R) -> Self {
        Self {
            inner,
            buf: Vec::new(),
        }
    }

    /// Reads one head. `Ok(None)` on a clean EOF before any byte of a new head.
    pub async fn read_head(&mut self) -> io::Result<Option<Head>> {
        let mut searched: usize = 0;
        loop {
            if let Some(pos) = find(&self.buf[searched.saturating_sub(3)..], b"\r\n\r\n") {
                let end = searched.saturating_sub(3) + pos + 4;
                let raw: Vec<u8> = self.buf.drain(..end).collect();
                return parse_head(raw).map(Some);
            }
            searched = self.buf.len();
            if searched > MAX_HEAD {
                return Err(invalid("head too large"));
            }
            let mut tmp = [0u8; 4096];
            let n = self.inner.read(&mut tmp).await?;
            if n == 0 {
                if self.buf.is_empty() {
                    return Ok(None);
                }
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "eof inside head",
                ));
            }
            self.buf.extend_from_slice(&tmp[..n]);
        }
    }

    /// Returns up to `max` bytes (at least 1), from the buffer first; empty on EOF.
    pub async fn read_some(&mut self, max: usize) -> io::Result<Vec<u8>> {
        let max = max.max(1);
        if !self.buf.is_empty() {
            let n = max.min(self.buf.len());
            return Ok(self.buf.drain(..n).collect());
        }
        let mut tmp = vec![0u8; max];
        let n = self.inner.read(&mut tmp).await?;
        tmp.truncate(n);
        Ok(tmp)
    }
}

/// Position of `needle` in `hay`.
pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    /// Reading hex digits of a chunk size.
    Size,
    /// Skipping a chunk extension up to CR.
    Ext,
    /// Expecting LF after the size line.
    SizeLf,
    /// Inside chunk data, this many bytes left.
    Data(u64),
    /// Expecting CR after chunk data.
    DataCr,
    /// Expecting LF after chunk data.
    DataLf,
    /// At the start of a trailer line (an empty one ends the body).
    TrailerStart,
    /// Inside a trailer line.
    Trailer,
    /// Expecting LF after a trailer line; `true` when the line was empty (end of body).
    TrailerLf(bool),
    /// The last-chunk and trailers are complete.
    Done,
}

/// Incremental decoder for `Transfer-Encoding: chunked`.
#[derive(Debug)]
pub struct ChunkedDecoder {
    state: ChunkState,
    size: u64,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        Self {
            state: ChunkState::Size,
            size: 0,
        }
    }
}

impl ChunkedDecoder {
    /// A decoder at the start of a chunked body.
    pub fn new() -> Self {
        Self::default()
    }

    /// True once the terminating zero-size chunk and trailers were consumed.
    pub fn is_done(&self) -> bool {
        self.state == ChunkState::Done
    }

    /// Decodes `input`, appending payload bytes to `out`. Returns how many input bytes were consumed
    /// (less than `input.len()` only when the body ended inside `input`).
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> io::Result<usize> {
        let mut i = 0;
        while i < input.len() {
            let b = input[i];
            match self.state {
                ChunkState::Done => return Ok(i),
                ChunkState::Size => match b {
                    b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {
                        let digit = (b as char).to_digit(16).unwrap_or(0) as u64;
                        self.size = self
                            .size
                            .checked_mul(16)
                            .and_then(|s| s.checked_add(digit))
                            .ok_or_else(|| invalid("chunk size overflow"))?;
                    }
                    b';' | b' ' | b'\t' => self.state = ChunkState::Ext,
                    b'\r' => self.state = ChunkState::SizeLf,
                    _ => return Err(invalid("bad chunk size")),
                },
                ChunkState::Ext => {
                    if b == b'\r' {
                        self.state = ChunkState::SizeLf;
                    }
                }
                ChunkState::SizeLf => {
                    if b != b'\n' {
                        return Err(invalid("expected LF after chunk size"));
                    }
                    self.state = if self.size == 0 {
                        ChunkState::TrailerStart
                    } else {
                        ChunkState::Data(self.size)
                    };
                    self.size = 0;
                }
                ChunkState::Data(left) => {
                    let n = (left.min((input.len() - i) as u64)) as usize;
                    out.extend_from_slice(&input[i..i + n]);
                    i += n;
                    let left = left - n as u64;
                    self.state = if left == 0 {
                        ChunkState::DataCr
                    } else {
                        ChunkState::Data(left)
                    };
                    continue;
                }
                ChunkState::DataCr => {
                    if b != b'\r' {
                        return Err(invalid("expected CR after chunk data"));
                    }
                    self.state = ChunkState::DataLf;
                }
                ChunkState::DataLf => {
                    if b != b'\n' {
                        return Err(invalid("expected LF after chunk data"));
                    }
                    self.state = ChunkState::Size;
                }
                ChunkState::TrailerStart => {
                    self.state = if b == b'\r' {
                        ChunkState::TrailerLf(true)
                    } else {
                        ChunkState::Trailer
                    };
                }
                ChunkState::Trailer => {
                    if b == b'\r' {
                        self.state = ChunkState::TrailerLf(false);
                    }
                }
                ChunkState::TrailerLf(last) => {
                    if b != b'\n' {
                        return Err(invalid("expected LF in trailer"));
                    }
                    self.state = if last {
                        ChunkState::Done
                    } else {
                        ChunkState::TrailerStart
                    };
                }
            }
            i += 1;
        }
        Ok(i)
    }
}

/// Encodes one chunk of a chunked body (`data` must be non-empty).
pub fn encode_chunk(data: &[u8]) -> Vec<u8> {
    let mut out = format!("{:x}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    out
}

/// The last-chunk with no trailers.
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_chunks_split_anywhere() {
        let raw: &[u8] =
            b"5;ext=1\r\nhello\r\n1A\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nX-T: 1\r\n\r\nNEXT";
        let body_len = raw.len() - b"NEXT".len();
        for cut in 0..=body_len {
            let mut d = ChunkedDecoder::new();
            let mut out = Vec::new();
            let a = d.feed(&raw[..cut], &mut out).unwrap();
            assert_eq!(a, cut);
            let b = d.feed(&raw[cut..], &mut out).unwrap();
            assert!(d.is_done(), "cut {cut}");
            assert_eq!(
                &raw[cut + b..],
                b"NEXT",
                "consumed exactly the body, cut {cut}"
            );
            assert_eq!(out, b"helloabcdefghijklmnopqrstuvwxyz");
        }
    }

    #[test]
    fn rejects_garbage_size() {
        let mut d = ChunkedDecoder::new();
        assert!(d.feed(b"zz\r\n", &mut Vec::new()).is_err());
    }

    #[test]
    fn encode_roundtrip() {
        let mut raw = encode_chunk(b"data: 1\n\n");
        raw.extend_from_slice(LAST_CHUNK);
        let mut d = ChunkedDecoder::new();
        let mut out = Vec::new();
        d.feed(&raw, &mut out).unwrap();
        assert!(d.is_done());
        assert_eq!(out, b"data: 1\n\n");
    }

    #[test]
    fn parses_head_and_headers() {
        let h = parse_head(
            b"GET /events HTTP/1.1\r\nHost: x\r\nLast-Event-ID: 42\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
                .to_vec(),
        )
        .unwrap();
        assert_eq!(h.first_line, "GET /events HTTP/1.1");
        assert_eq!(h.header("last-event-id"), Some("42"));
        assert!(h.is_chunked());
        assert_eq!(h.content_length(), None);
    }
}
