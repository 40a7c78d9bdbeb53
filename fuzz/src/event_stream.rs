//! A reference parser for `text/event-stream`, written from the HTML living standard, §9.2.6
//! ("Interpreting an event stream"), independently of the encoder it checks.
//!
//! It works on bytes: CR and LF are never part of a multi-byte UTF-8 sequence, so splitting lines
//! before or after UTF-8 decoding gives the same lines.

/// One dispatched event, as a browser's `EventSource` would deliver it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dispatched {
    /// The event type (`message` when no `event:` field was given).
    pub event_type: Vec<u8>,
    /// The data, lines joined with LF.
    pub data: Vec<u8>,
    /// The event's `lastEventId`.
    pub last_event_id: Vec<u8>,
}

/// What a client knows after reading a whole stream.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Parsed {
    /// Events in dispatch order.
    pub events: Vec<Dispatched>,
    /// How many blank lines (dispatch points) were seen, including those that dispatched nothing.
    pub blank_lines: usize,
    /// The client's last event id string after the stream.
    pub last_event_id: Vec<u8>,
    /// The reconnection time, if a valid `retry:` field was seen.
    pub retry_ms: Option<u128>,
    /// Bytes after the last line break (an unterminated line, discarded by clients).
    pub trailing: Vec<u8>,
}

/// Parses a complete stream.
pub fn parse(stream: &[u8]) -> Parsed {
    let mut out = Parsed::default();
    let mut data: Vec<u8> = Vec::new();
    let mut event_type: Vec<u8> = Vec::new();
    let mut id_buffer: Vec<u8> = Vec::new();
    let mut rest = stream;
    // "Lines must be separated by either a U+000D CARRIAGE RETURN U+000A LINE FEED (CRLF)
    // character pair, a single U+000A LINE FEED (LF) character, or a single U+000D CARRIAGE
    // RETURN (CR) character."
    while let Some(i) = rest.iter().position(|&b| b == b'\n' || b == b'\r') {
        let line = &rest[..i];
        let skip = if rest[i] == b'\r' && rest.get(i + 1) == Some(&b'\n') {
            2
        } else {
            1
        };
        rest = &rest[i + skip..];
        if line.is_empty() {
            // Dispatch the event.
            out.blank_lines += 1;
            out.last_event_id = id_buffer.clone();
            if data.is_empty() {
                event_type.clear();
                continue;
            }
            if data.last() == Some(&b'\n') {
                data.pop();
            }
            out.events.push(Dispatched {
                event_type: if event_type.is_empty() {
                    b"message".to_vec()
                } else {
                    std::mem::take(&mut event_type)
                },
                data: std::mem::take(&mut data),
                last_event_id: id_buffer.clone(),
            });
            event_type.clear();
            continue;
        }
        if line[0] == b':' {
            continue; // a comment
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(c) => {
                let value = &line[c + 1..];
                (&line[..c], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"event" => event_type = value.to_vec(),
            b"data" => {
                data.extend_from_slice(value);
                data.push(b'\n');
            }
            b"id" if !value.contains(&0) => id_buffer = value.to_vec(),
            b"retry" if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
                // Saturating: a value beyond u128 does not occur in what the encoder writes.
                out.retry_ms = Some(value.iter().fold(0u128, |n, d| {
                    n.saturating_mul(10).saturating_add(u128::from(d - b'0'))
                }));
            }
            _ => {}
        }
    }
    out.trailing = rest.to_vec();
    out
}

/// The data a client sees for a payload: lines split on CRLF, LF or CR, joined with LF.
pub fn normalise_line_breaks(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len());
    let mut i = 0;
    while i < payload.len() {
        match payload[i] {
            b'\r' if payload.get(i + 1) == Some(&b'\n') => {
                out.push(b'\n');
                i += 2;
                continue;
            }
            b'\r' => out.push(b'\n'),
            b => out.push(b),
        }
        i += 1;
    }
    out
}
