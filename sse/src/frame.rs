//! Event-stream frame encoding (HTML living standard, "server-sent events", §9.2.5 and §9.2.6).
//!
//! Every field is written as `name: value\n` (one space after the colon, which the parser strips,
//! so values that start with a space survive). Data is split into one `data:` line per line of
//! the payload, on `\r\n`, `\n` and lone `\r`, exactly the line breaks a parser recognises. Values
//! that would end a line early (CR, LF) or that a parser discards (NUL in `id`) are refused
//! before anything is written: a refused frame leaves the buffer untouched.

use std::fmt;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};

use crate::event_id::{EventId, EventIdBuf};

/// Which frame field held a forbidden byte.
///
/// ```
/// use replay_ring_sse::{Frame, FrameError, FrameField};
/// let err = Frame::new().comment("a\rb").encode().unwrap_err();
/// assert_eq!(err, FrameError::ForbiddenByte { field: FrameField::Comment, position: 1, byte: b'\r' });
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameField {
    /// The `id:` field.
    Id,
    /// The `event:` field.
    Event,
    /// A `:` comment line.
    Comment,
}

impl fmt::Display for FrameField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FrameField::Id => "id",
            FrameField::Event => "event",
            FrameField::Comment => "comment",
        })
    }
}

/// A frame that would not mean what the caller asked for on the wire.
///
/// ```
/// use replay_ring_sse::{Frame, FrameError, FrameField};
///
/// let err = Frame::new().event("a\nid: 1").data(b"x").encode().unwrap_err();
/// assert_eq!(err, FrameError::ForbiddenByte { field: FrameField::Event, position: 1, byte: b'\n' });
/// assert_eq!(err.to_string(), "event field has forbidden byte 0x0a at offset 1 (CR, LF and NUL are never passed through)");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FrameError {
    /// CR or LF (which would end the line and inject fields or frames) or NUL (which makes
    /// parsers ignore an `id`) inside an `id`, `event` or comment value.
    ForbiddenByte {
        /// The field.
        field: FrameField,
        /// Offset in the value.
        position: usize,
        /// The byte.
        byte: u8,
    },
    /// An empty `event:` name (parsers would dispatch it as `message`; say so explicitly instead).
    EmptyEventName,
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            FrameError::ForbiddenByte { field, position, byte } => write!(
                f,
                "{field} field has forbidden byte {byte:#04x} at offset {position} (CR, LF and NUL are never passed through)"
            ),
            FrameError::EmptyEventName => f.write_str("event name is empty"),
        }
    }
}

impl std::error::Error for FrameError {}

fn check_value(field: FrameField, value: &str) -> Result<(), FrameError> {
    match value.bytes().position(|b| matches!(b, b'\r' | b'\n' | 0)) {
        Some(position) => Err(FrameError::ForbiddenByte {
            field,
            position,
            byte: value.as_bytes()[position],
        }),
        None => Ok(()),
    }
}

/// The id of a frame: a validated [`EventId`] or any other string (checked when encoding).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FrameId<'a> {
    Event(EventId),
    Raw(&'a str),
}

/// One event-stream frame, built field by field and encoded with [`encode_into`](Self::encode_into)
/// (appends to a caller's `BytesMut`, so a connection can reuse one buffer) or
/// [`encode`](Self::encode). A frame without `data` dispatches nothing in a client; it can still
/// set the last event id or the reconnection time.
///
/// ```
/// use replay_ring_sse::{EventId, Frame};
/// use std::time::Duration;
///
/// let id = EventId::parse("events.1f.42").unwrap();
/// let bytes = Frame::new()
///     .id(id)
///     .event("progress")
///     .retry(Duration::from_millis(1500))
///     .data(b"line one\r\nline two")
///     .encode()
///     .unwrap();
/// assert_eq!(
///     &bytes[..],
///     &b"id: events.1f.42\nevent: progress\nretry: 1500\ndata: line one\ndata: line two\n\n"[..]
/// );
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[must_use = "a frame does nothing until it is encoded"]
pub struct Frame<'a> {
    comment: Option<&'a str>,
    id: Option<FrameId<'a>>,
    event: Option<&'a str>,
    retry: Option<Duration>,
    data: Option<&'a [u8]>,
}

impl<'a> Frame<'a> {
    /// An empty frame (encodes to a lone blank line, which dispatches nothing).
    ///
    /// ```
    /// assert_eq!(&replay_ring_sse::Frame::new().encode().unwrap()[..], b"\n");
    /// ```
    pub fn new() -> Self {
        Frame::default()
    }

    /// Sets the `id:` field from a wire [`EventId`] (always valid).
    ///
    /// ```
    /// use replay_ring_sse::{EventId, Frame};
    /// let f = Frame::new().id(EventId::parse("s.1.2").unwrap()).encode().unwrap();
    /// assert_eq!(&f[..], b"id: s.1.2\n\n");
    /// ```
    pub fn id(mut self, id: EventId) -> Self {
        self.id = Some(FrameId::Event(id));
        self
    }

    /// Sets the `id:` field to an arbitrary string; CR, LF or NUL make encoding fail.
    /// An empty string is allowed and resets the client's last event id (per the standard).
    ///
    /// ```
    /// use replay_ring_sse::Frame;
    /// assert!(Frame::new().raw_id("a\rb").encode().is_err());
    /// assert_eq!(&Frame::new().raw_id("x-1").encode().unwrap()[..], b"id: x-1\n\n");
    /// ```
    pub fn raw_id(mut self, id: &'a str) -> Self {
        self.id = Some(FrameId::Raw(id));
        self
    }

    /// Sets the `event:` field (the type a browser dispatches to `addEventListener`).
    ///
    /// ```
    /// use replay_ring_sse::Frame;
    /// assert_eq!(&Frame::new().event("end").data(b"").encode().unwrap()[..], b"event: end\ndata:\n\n");
    /// ```
    pub fn event(mut self, name: &'a str) -> Self {
        self.event = Some(name);
        self
    }

    /// Sets the `retry:` field: the client's reconnection delay, in whole milliseconds, rounded
    /// up (only `Duration::ZERO` is written as `retry: 0`).
    ///
    /// ```
    /// use replay_ring_sse::Frame;
    /// use std::time::Duration;
    /// let f = Frame::new().retry(Duration::from_secs(3)).encode().unwrap();
    /// assert_eq!(&f[..], b"retry: 3000\n\n");
    /// ```
    pub fn retry(mut self, delay: Duration) -> Self {
        self.retry = Some(delay);
        self
    }

    /// Sets the payload. Each line (split on `\r\n`, `\n`, `\r`) becomes one `data:` line; an
    /// empty payload is one empty `data:` line, which a client dispatches as an event with empty
    /// data. Payloads should be UTF-8 (clients decode the stream as UTF-8).
    ///
    /// ```
    /// use replay_ring_sse::Frame;
    /// let f = Frame::new().data(b"a\rb\n\nc\n").encode().unwrap();
    /// assert_eq!(&f[..], b"data: a\ndata: b\ndata:\ndata: c\ndata:\n\n");
    /// ```
    pub fn data(mut self, payload: &'a [u8]) -> Self {
        self.data = Some(payload);
        self
    }

    /// Adds a `:` comment line first (ignored by clients; used for keep-alives).
    ///
    /// ```
    /// use replay_ring_sse::Frame;
    /// assert_eq!(&Frame::new().comment("hi").encode().unwrap()[..], b": hi\n\n");
    /// ```
    pub fn comment(mut self, text: &'a str) -> Self {
        self.comment = Some(text);
        self
    }

    fn validate(&self) -> Result<(), FrameError> {
        if let Some(text) = self.comment {
            check_value(FrameField::Comment, text)?;
        }
        if let Some(FrameId::Raw(id)) = self.id {
            check_value(FrameField::Id, id)?;
        }
        if let Some(name) = self.event {
            if name.is_empty() {
                return Err(FrameError::EmptyEventName);
            }
            check_value(FrameField::Event, name)?;
        }
        Ok(())
    }

    /// Appends the encoded frame to `buf`. On error nothing is appended.
    ///
    /// # Errors
    /// Checked before anything is written, field by field (comment, id, event); the first problem
    /// is returned:
    /// - [`FrameError::ForbiddenByte`] when the comment, a [raw id](Self::raw_id) or the event name
    ///   contains CR, LF or NUL (the error names the field, offset and byte).
    /// - [`FrameError::EmptyEventName`] when the event name is empty.
    ///
    /// ```
    /// use bytes::BytesMut;
    /// use replay_ring_sse::Frame;
    ///
    /// let mut buf = BytesMut::with_capacity(256);
    /// Frame::new().data(b"1").encode_into(&mut buf).unwrap();
    /// assert!(Frame::new().event("").encode_into(&mut buf).is_err());
    /// Frame::new().data(b"2").encode_into(&mut buf).unwrap();
    /// assert_eq!(&buf.split().freeze()[..], b"data: 1\n\ndata: 2\n\n");
    /// ```
    pub fn encode_into(&self, buf: &mut BytesMut) -> Result<(), FrameError> {
        self.validate()?;
        buf.reserve(self.encoded_len_hint());
        if let Some(text) = self.comment {
            put_field(buf, b"", text.as_bytes());
        }
        match self.id {
            Some(FrameId::Event(id)) => put_field(buf, b"id", id.encode().as_bytes()),
            Some(FrameId::Raw(id)) => put_field(buf, b"id", id.as_bytes()),
            None => {}
        }
        if let Some(name) = self.event {
            put_field(buf, b"event", name.as_bytes());
        }
        if let Some(delay) = self.retry {
            // Rounded up: a delay under a millisecond is not "reconnect at once" (`retry: 0`).
            let ms = u64::try_from(delay.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX);
            let mut digits = itoa_buf();
            put_field(buf, b"retry", itoa(ms, &mut digits));
        }
        if let Some(payload) = self.data {
            for line in DataLines::new(payload) {
                put_field(buf, b"data", line);
            }
        }
        buf.put_u8(b'\n');
        Ok(())
    }

    /// Encodes into a fresh `Bytes` (one allocation, sized up front).
    ///
    /// # Errors
    /// The same as [`encode_into`](Self::encode_into): [`FrameError::ForbiddenByte`] for CR, LF or
    /// NUL in the comment, a raw id or the event name; [`FrameError::EmptyEventName`] for an empty
    /// event name.
    ///
    /// ```
    /// use replay_ring_sse::Frame;
    /// assert_eq!(&Frame::new().data(b"{\"n\":1}").encode().unwrap()[..], b"data: {\"n\":1}\n\n");
    /// ```
    pub fn encode(&self) -> Result<Bytes, FrameError> {
        let mut buf = BytesMut::with_capacity(self.encoded_len_hint());
        self.encode_into(&mut buf)?;
        Ok(buf.freeze())
    }

    /// Upper bound of the encoded size except for payloads with many line breaks.
    fn encoded_len_hint(&self) -> usize {
        let mut n = 1;
        n += self.comment.map_or(0, |c| c.len() + 3);
        n += match self.id {
            Some(FrameId::Event(_)) => super::event_id::MAX_EVENT_ID_LEN + 5,
            Some(FrameId::Raw(id)) => id.len() + 5,
            None => 0,
        };
        n += self.event.map_or(0, |e| e.len() + 8);
        n += self.retry.map_or(0, |_| 28);
        n += self.data.map_or(0, |d| d.len() + 7);
        n
    }
}

/// `name: value\n`, or `name:\n` for an empty value (no trailing space). A comment has an empty
/// name and becomes `: value\n`.
fn put_field(buf: &mut BytesMut, name: &[u8], value: &[u8]) {
    buf.put_slice(name);
    buf.put_u8(b':');
    if !value.is_empty() {
        buf.put_u8(b' ');
        buf.put_slice(value);
    }
    buf.put_u8(b'\n');
}

fn itoa_buf() -> [u8; 20] {
    [0; 20]
}

fn itoa(mut n: u64, out: &mut [u8; 20]) -> &[u8] {
    let mut i = out.len();
    loop {
        i -= 1;
        out[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &out[i..]
}

/// Splits a payload into lines on `\r\n`, `\n` and lone `\r`. Always yields at least one line;
/// a trailing break yields a final empty line (so the client rebuilds the trailing newline).
struct DataLines<'a> {
    rest: Option<&'a [u8]>,
}

impl<'a> DataLines<'a> {
    fn new(payload: &'a [u8]) -> Self {
        DataLines {
            rest: Some(payload),
        }
    }
}

impl<'a> Iterator for DataLines<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let rest = self.rest?;
        // memchr: every connection scans every payload it writes, so a vectorised search pays.
        match memchr::memchr2(b'\n', b'\r', rest) {
            None => {
                self.rest = None;
                Some(rest)
            }
            Some(i) => {
                let skip = if rest[i] == b'\r' && rest.get(i + 1) == Some(&b'\n') {
                    2
                } else {
                    1
                };
                self.rest = Some(&rest[i + skip..]);
                Some(&rest[..i])
            }
        }
    }
}

/// The comment frame servers send while idle, so that clients and proxies see the connection is
/// alive: `: keep-alive\n\n`.
///
/// ```
/// assert_eq!(replay_ring_sse::KEEP_ALIVE, b": keep-alive\n\n");
/// ```
pub const KEEP_ALIVE: &[u8] = b": keep-alive\n\n";

/// The keep-alive as an event a page can see: `event: keep-alive` with empty data and no id. A
/// browser's `EventSource` delivers it only to `addEventListener("keep-alive", …)` (never to
/// `onmessage`), and it leaves the last event id as it was; comments, by contrast, never reach
/// page script, so only this form lets a page notice a connection that went silently dead.
///
/// A client of its own skips it by its name, [`KEEP_ALIVE_EVENT_NAME`].
///
/// ```
/// assert_eq!(replay_ring_sse::KEEP_ALIVE_EVENT, b"event: keep-alive\ndata:\n\n");
/// ```
pub const KEEP_ALIVE_EVENT: &[u8] = b"event: keep-alive\ndata:\n\n";

/// The `event:` name of [`KEEP_ALIVE_EVENT`]. A client that reads named events (terminal frames
/// such as `end`) passes over this one: it carries no id and no data, and ends nothing.
///
/// ```
/// let frame = std::str::from_utf8(replay_ring_sse::KEEP_ALIVE_EVENT).unwrap();
/// let name = replay_ring_sse::KEEP_ALIVE_EVENT_NAME;
/// assert_eq!(frame.lines().next(), Some(format!("event: {name}").as_str()));
/// ```
pub const KEEP_ALIVE_EVENT_NAME: &str = "keep-alive";

/// Appends a keep-alive comment frame ([`KEEP_ALIVE`]).
///
/// ```
/// use bytes::BytesMut;
/// let mut buf = BytesMut::new();
/// replay_ring_sse::encode_keep_alive(&mut buf);
/// assert_eq!(&buf[..], b": keep-alive\n\n");
/// ```
pub fn encode_keep_alive(buf: &mut BytesMut) {
    buf.extend_from_slice(KEEP_ALIVE);
}

/// Appends the priming event a server sends first on every stream response: the client's
/// current position as `id` (so a connection that drops before any real event still reconnects
/// with a `Last-Event-ID`), the reconnection delay, and one empty `data:` line (MCP 2025-11-25).
/// Browsers dispatch it as a `message` with empty data; pages should skip it, recognised as the
/// first message of each response (an application event may have empty data too).
///
/// ```
/// use bytes::BytesMut;
/// use replay_ring_sse::{encode_priming, EventId};
/// use std::time::Duration;
///
/// let mut buf = BytesMut::new();
/// encode_priming(&mut buf, EventId::parse("events.9.41").unwrap(), Some(Duration::from_millis(500)));
/// assert_eq!(&buf[..], b"id: events.9.41\nretry: 500\ndata:\n\n");
/// ```
pub fn encode_priming(buf: &mut BytesMut, id: EventId, retry: Option<Duration>) {
    let mut frame = Frame::new().id(id).data(b"");
    if let Some(delay) = retry {
        frame = frame.retry(delay);
    }
    // Cannot fail: the id is a validated EventId and there is no event name or comment.
    let _ = frame.encode_into(buf);
}

/// The bytes [`encode_stream_event`] appends for an id of `id_len` bytes and a non-empty payload
/// of `data_len` bytes without a line break (an empty one takes a byte less, and each line break
/// adds a `data: ` field).
// The axum endpoint's encoder: unused without that feature.
#[cfg_attr(not(feature = "axum"), allow(dead_code))]
pub(crate) fn stream_event_len_hint(id_len: usize, data_len: usize) -> usize {
    // `id: <id>\n`, `data: <data>\n`, the blank line.
    4 + id_len + 1 + 6 + data_len + 1 + 1
}

/// Appends the frame of event `seq` of the stream whose ids start with `id_prefix`
/// ([`StreamIdentity::id_prefix`](crate::StreamIdentity)): the same bytes as [`encode_event`] with
/// that stream's id and no event name, without rendering the stream and epoch again.
// The axum endpoint's encoder: unused without that feature.
#[cfg_attr(not(feature = "axum"), allow(dead_code))]
pub(crate) fn encode_stream_event(
    buf: &mut BytesMut,
    id_prefix: EventIdBuf,
    seq: u64,
    data: &[u8],
) {
    let id = id_prefix.with_seq(seq);
    buf.reserve(stream_event_len_hint(id.as_bytes().len(), data.len()));
    put_field(buf, b"id", id.as_bytes());
    for line in DataLines::new(data) {
        put_field(buf, b"data", line);
    }
    buf.put_u8(b'\n');
}

/// Appends one ring event, the hot path: `id`, optional `event`, `data` lines.
///
/// # Errors
/// Only for the event name (the id is a validated [`EventId`] and any payload is valid):
/// [`FrameError::EmptyEventName`] for `Some("")`, [`FrameError::ForbiddenByte`] for a name with
/// CR, LF or NUL. On error nothing is appended.
///
/// ```
/// use bytes::BytesMut;
/// use replay_ring_sse::{encode_event, EventId};
///
/// let mut buf = BytesMut::new();
/// encode_event(&mut buf, EventId::parse("s.1.7").unwrap(), None, b"{\"n\":7}").unwrap();
/// assert_eq!(&buf[..], b"id: s.1.7\ndata: {\"n\":7}\n\n");
/// ```
pub fn encode_event(
    buf: &mut BytesMut,
    id: EventId,
    event: Option<&str>,
    data: &[u8],
) -> Result<(), FrameError> {
    let mut frame = Frame::new().id(id).data(data);
    if let Some(name) = event {
        frame = frame.event(name);
    }
    frame.encode_into(buf)
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;
    use proptest::prelude::*;

    use super::{encode_event, encode_stream_event, stream_event_len_hint};
    use crate::{Epoch, StreamId, StreamIdentity};

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2_000, failure_persistence: None, ..ProptestConfig::default() })]

        /// The endpoint's encoder writes exactly what the public one does for the same event.
        #[test]
        fn a_stream_event_is_the_frame_encode_event_writes(
            stream in "[A-Za-z0-9_-]{1,32}",
            epoch in any::<u64>(),
            seq in prop_oneof![any::<u64>(), 0u64..1000, Just(u64::MAX)],
            data in proptest::collection::vec(
                prop_oneof![Just(b'\n'), Just(b'\r'), any::<u8>()],
                0..200,
            ),
        ) {
            let identity = StreamIdentity::new(StreamId::new(&stream).unwrap(), Epoch::new(epoch));
            let mut public = BytesMut::new();
            encode_event(&mut public, identity.event_id(seq), None, &data).unwrap();
            let mut endpoint = BytesMut::from(&b"earlier frames\n\n"[..]);
            encode_stream_event(&mut endpoint, identity.id_prefix(), seq, &data);
            prop_assert_eq!(&endpoint[16..], &public[..]);
            // The size hint is exact for a non-empty payload without line breaks.
            if !data.is_empty() && !data.iter().any(|&b| b == b'\n' || b == b'\r') {
                let id_len = identity.event_id(seq).encode().as_str().len();
                prop_assert_eq!(public.len(), stream_event_len_hint(id_len, data.len()));
            }
        }
    }
}
