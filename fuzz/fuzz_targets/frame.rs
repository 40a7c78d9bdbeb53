//! The event-stream frame encoder against an independent parser of the HTML standard's rules.
//!
//! - A frame is refused exactly when a comment, raw id or event name holds CR, LF or NUL (or the
//!   event name is empty), with the first offending field and offset; a refused frame appends
//!   nothing to the caller's buffer.
//! - An accepted frame is one block ending in its only blank line: a client parsing it dispatches
//!   exactly one event when there is data (none otherwise), with the event type, the data (line
//!   breaks normalised to LF), the last event id and the retry the frame was given.
#![no_main]

use std::time::Duration;

use arbitrary::Arbitrary;
use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use replay_ring_fuzz::event_stream::{normalise_line_breaks, parse, Dispatched};
use replay_ring_sse::{
    encode_priming, Epoch, EventId, Frame, FrameError, FrameField, StreamId, MAX_STREAM_LEN,
};

#[derive(Debug, Arbitrary)]
enum Id {
    /// A validated wire id (stream name folded into its alphabet).
    Event { stream: u64, epoch: u64, seq: u64 },
    /// Any string.
    Raw(String),
}

#[derive(Debug, Arbitrary)]
struct Input {
    prefix: Vec<u8>,
    comment: Option<String>,
    id: Option<Id>,
    event: Option<String>,
    retry: Option<(u64, u32)>,
    data: Option<Vec<u8>>,
}

fn forbidden(field: FrameField, value: &str) -> Option<FrameError> {
    let position = value.bytes().position(|b| matches!(b, b'\r' | b'\n' | 0))?;
    Some(FrameError::ForbiddenByte {
        field,
        position,
        byte: value.as_bytes()[position],
    })
}

fn wire_id(stream: u64, epoch: u64, seq: u64) -> EventId {
    // 1 to 32 characters from the stream alphabet, derived from the fuzzer's number.
    let len = (stream % MAX_STREAM_LEN as u64) as usize + 1;
    let name: String = (0..len)
        .map(|i| b"abcXYZ019-_"[((stream >> (i % 60)) % 11) as usize] as char)
        .collect();
    EventId::new(StreamId::new(&name).unwrap(), Epoch::new(epoch), seq)
}

fuzz_target!(|input: Input| {
    let event_id = match &input.id {
        Some(Id::Event { stream, epoch, seq }) => Some(wire_id(*stream, *epoch, *seq)),
        _ => None,
    };
    let raw_id = match &input.id {
        Some(Id::Raw(s)) => Some(s.as_str()),
        _ => None,
    };
    let retry = input
        .retry
        .map(|(secs, nanos)| Duration::new(secs, nanos % 1_000_000_000));

    let mut frame = Frame::new();
    if let Some(c) = &input.comment {
        frame = frame.comment(c);
    }
    if let Some(id) = event_id {
        frame = frame.id(id);
    }
    if let Some(id) = raw_id {
        frame = frame.raw_id(id);
    }
    if let Some(e) = &input.event {
        frame = frame.event(e);
    }
    if let Some(r) = retry {
        frame = frame.retry(r);
    }
    if let Some(d) = &input.data {
        frame = frame.data(d);
    }

    // The refusal the standard's rules call for, in the encoder's documented field order.
    let expected_error = input
        .comment
        .as_deref()
        .and_then(|c| forbidden(FrameField::Comment, c))
        .or_else(|| raw_id.and_then(|id| forbidden(FrameField::Id, id)))
        .or_else(|| match input.event.as_deref() {
            Some("") => Some(FrameError::EmptyEventName),
            Some(e) => forbidden(FrameField::Event, e),
            None => None,
        });

    let mut buf = BytesMut::from(&input.prefix[..]);
    let result = frame.encode_into(&mut buf);
    assert_eq!(result.err(), expected_error);
    assert_eq!(
        &buf[..input.prefix.len()],
        &input.prefix[..],
        "prefix changed"
    );
    if expected_error.is_some() {
        assert_eq!(buf.len(), input.prefix.len(), "a refused frame wrote bytes");
        return;
    }
    let bytes = &buf[input.prefix.len()..];
    assert_eq!(
        frame.encode().unwrap(),
        bytes,
        "encode and encode_into differ"
    );

    let parsed = parse(bytes);
    assert!(parsed.trailing.is_empty(), "unterminated line in {bytes:?}");
    assert_eq!(parsed.blank_lines, 1, "not exactly one frame: {bytes:?}");
    assert!(bytes.ends_with(b"\n"));
    let id_string: Vec<u8> = match (event_id, raw_id) {
        (Some(id), _) => id.encode().as_bytes().to_vec(),
        (_, Some(raw)) => raw.as_bytes().to_vec(),
        _ => Vec::new(),
    };
    assert_eq!(parsed.last_event_id, id_string);
    assert_eq!(
        parsed.retry_ms,
        retry.map(|r| r.as_nanos().div_ceil(1_000_000).min(u128::from(u64::MAX)))
    );
    let expected_events = match &input.data {
        Some(d) => vec![Dispatched {
            event_type: input
                .event
                .as_deref()
                .unwrap_or("message")
                .as_bytes()
                .to_vec(),
            data: normalise_line_breaks(d),
            last_event_id: id_string.clone(),
        }],
        None => Vec::new(),
    };
    assert_eq!(parsed.events, expected_events, "{bytes:?}");

    // The priming event: one empty `message` carrying the id and the retry.
    if let Some(id) = event_id {
        let mut primed = BytesMut::new();
        encode_priming(&mut primed, id, retry);
        let p = parse(&primed);
        assert_eq!((p.blank_lines, p.trailing.len()), (1, 0));
        assert_eq!(
            p.events,
            vec![Dispatched {
                event_type: b"message".to_vec(),
                data: Vec::new(),
                last_event_id: id_string.clone(),
            }]
        );
        assert_eq!(
            p.retry_ms,
            retry.map(|r| r.as_nanos().div_ceil(1_000_000).min(u128::from(u64::MAX)))
        );
    }
});
