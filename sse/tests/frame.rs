//! Frame encoding checked against a reference event-stream parser written from the HTML living
//! standard (§9.2.6 "Interpreting an event stream"): whatever is encoded is parsed back to the
//! same event, and CR/LF/NUL never reach the wire in ids, event names or comments.

use bytes::BytesMut;
use proptest::prelude::*;
use replay_ring_sse::{
    encode_event, encode_keep_alive, encode_priming, EventId, Frame, FrameError, FrameField,
};
use std::time::Duration;

/// What a browser would dispatch (or record) for one stream.
#[derive(Debug, Default, PartialEq, Eq)]
struct Parsed {
    /// (type, data, last event id) per dispatched event.
    events: Vec<(String, String, String)>,
    last_event_id: String,
    retry: Option<u64>,
    comments: usize,
}

/// The standard's algorithm, verbatim in structure: lines end at CRLF, LF or CR; a blank line
/// dispatches; `field: value` strips one leading space; `id` containing NUL is ignored.
fn parse_stream(bytes: &[u8]) -> Parsed {
    let text = String::from_utf8_lossy(bytes);
    let mut out = Parsed::default();
    let (mut data, mut event_type, mut last_id_buf) = (String::new(), String::new(), String::new());
    let mut lines = Vec::new();
    let mut rest: &str = &text;
    while let Some(i) = rest.find(['\r', '\n']) {
        lines.push(&rest[..i]);
        let skip = if rest[i..].starts_with("\r\n") { 2 } else { 1 };
        rest = &rest[i + skip..];
    }
    assert!(
        rest.is_empty(),
        "stream does not end with a line break: {rest:?}"
    );
    for line in lines {
        if line.is_empty() {
            out.last_event_id = last_id_buf.clone();
            if data.is_empty() {
                event_type.clear();
                continue;
            }
            if data.ends_with('\n') {
                data.pop();
            }
            let kind = if event_type.is_empty() {
                "message".to_owned()
            } else {
                event_type.clone()
            };
            out.events
                .push((kind, std::mem::take(&mut data), last_id_buf.clone()));
            event_type.clear();
            continue;
        }
        if line.starts_with(':') {
            out.comments += 1;
            continue;
        }
        let (name, value) = match line.find(':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(' ').unwrap_or(v))
            }
            None => (line, ""),
        };
        match name {
            "event" => event_type = value.to_owned(),
            "data" => {
                data.push_str(value);
                data.push('\n');
            }
            "id" if !value.contains('\0') => last_id_buf = value.to_owned(),
            "retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                out.retry = value.parse().ok()
            }
            _ => {}
        }
    }
    out
}

fn normalise_newlines(s: &str) -> String {
    s.replace("\r\n", "\n").replace('\r', "\n")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 5_000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn encoded_frames_parse_back(
        id in "[ -~]{0,20}",
        event in "[ -~]{1,12}",
        data in "(\\PC|\r|\n|\r\n){0,40}",
        retry_ms in 0u64..100_000,
    ) {
        let mut buf = BytesMut::new();
        Frame::new()
            .raw_id(&id)
            .event(&event)
            .retry(Duration::from_millis(retry_ms))
            .data(data.as_bytes())
            .encode_into(&mut buf)
            .unwrap();
        let parsed = parse_stream(&buf);
        prop_assert_eq!(parsed.events, vec![(event.clone(), normalise_newlines(&data), id.clone())]);
        prop_assert_eq!(parsed.retry, Some(retry_ms));
        prop_assert_eq!(parsed.last_event_id, id);
    }

    #[test]
    fn forbidden_bytes_are_refused_and_nothing_is_written(
        prefix in "[ -~]{0,8}",
        bad in prop::sample::select(vec!['\r', '\n', '\0']),
        suffix in "[ -~]{0,8}",
        field in 0u8..3,
    ) {
        let value = format!("{prefix}{bad}{suffix}");
        let mut buf = BytesMut::from(&b"previous"[..]);
        let frame = match field {
            0 => Frame::new().raw_id(&value).data(b"x"),
            1 => Frame::new().event(&value).data(b"x"),
            _ => Frame::new().comment(&value),
        };
        let err = frame.encode_into(&mut buf).unwrap_err();
        let expected_field = [FrameField::Id, FrameField::Event, FrameField::Comment][field as usize];
        prop_assert_eq!(
            err,
            FrameError::ForbiddenByte { field: expected_field, position: prefix.len(), byte: bad as u8 }
        );
        prop_assert_eq!(&buf[..], &b"previous"[..]);
    }

    #[test]
    fn many_frames_into_one_reused_buffer(payloads in prop::collection::vec("[ -~\n]{0,16}", 1..20)) {
        let id = EventId::parse("s.1.0").unwrap();
        let mut buf = BytesMut::with_capacity(64);
        let mut wire = Vec::new();
        for (i, p) in payloads.iter().enumerate() {
            let id = EventId::new(id.stream, id.epoch, i as u64 + 1);
            encode_event(&mut buf, id, None, p.as_bytes()).unwrap();
            wire.extend_from_slice(&buf.split().freeze());
        }
        let parsed = parse_stream(&wire);
        prop_assert_eq!(parsed.events.len(), payloads.len());
        for (i, (kind, data, last)) in parsed.events.iter().enumerate() {
            prop_assert_eq!(kind.as_str(), "message");
            prop_assert_eq!(data, &payloads[i]);
            prop_assert_eq!(last, &format!("s.1.{}", i + 1));
        }
    }
}

#[test]
fn header_and_frame_injection_attempts_are_refused() {
    let attacks = [
        "1\nevent: admin",
        "1\r\ndata: injected",
        "1\rretry: 1",
        "1\n\ndata: second event",
        "1\0",
    ];
    for attack in attacks {
        assert!(matches!(
            Frame::new().raw_id(attack).encode(),
            Err(FrameError::ForbiddenByte {
                field: FrameField::Id,
                ..
            })
        ));
        assert!(matches!(
            Frame::new().event(attack).encode(),
            Err(FrameError::ForbiddenByte {
                field: FrameField::Event,
                ..
            })
        ));
    }
    // A data payload carrying what looks like fields stays data.
    let frame = Frame::new()
        .data(b"x\nid: 999\nevent: admin\r\n\r\ny")
        .encode()
        .unwrap();
    let parsed = parse_stream(&frame);
    assert_eq!(
        parsed.events,
        vec![(
            "message".into(),
            "x\nid: 999\nevent: admin\n\ny".into(),
            String::new()
        )]
    );
    assert_eq!(
        Frame::new().event("").data(b"x").encode(),
        Err(FrameError::EmptyEventName)
    );
}

#[test]
fn priming_keep_alive_and_retry_behave_as_the_standard_says() {
    let mut buf = BytesMut::new();
    encode_priming(
        &mut buf,
        EventId::parse("events.a.41").unwrap(),
        Some(Duration::from_millis(2500)),
    );
    encode_keep_alive(&mut buf);
    let parsed = parse_stream(&buf);
    // The priming event sets the last event id and the retry; a browser dispatches it with empty data.
    assert_eq!(parsed.last_event_id, "events.a.41");
    assert_eq!(parsed.retry, Some(2500));
    assert_eq!(
        parsed.events,
        vec![("message".into(), String::new(), "events.a.41".into())]
    );
    assert_eq!(parsed.comments, 1);

    // Values starting with a space survive (one space is always written after the colon).
    let f = Frame::new()
        .raw_id(" x")
        .event(" e")
        .data(b" d")
        .encode()
        .unwrap();
    assert_eq!(
        parse_stream(&f).events,
        vec![(" e".into(), " d".into(), " x".into())]
    );

    // A frame without data dispatches nothing but still sets the id (and an empty id resets it).
    let mut buf = BytesMut::new();
    Frame::new().raw_id("7").encode_into(&mut buf).unwrap();
    assert_eq!(parse_stream(&buf).last_event_id, "7");
    Frame::new().raw_id("").encode_into(&mut buf).unwrap();
    let parsed = parse_stream(&buf);
    assert!(parsed.events.is_empty());
    assert_eq!(parsed.last_event_id, "");
}

/// `retry:` carries whole milliseconds: a delay under one is rounded up, not written as
/// `retry: 0` (reconnect at once), and only a zero delay is zero.
#[test]
fn retry_rounds_up_to_whole_milliseconds() {
    for (delay, ms) in [
        (Duration::ZERO, 0),
        (Duration::from_nanos(1), 1),
        (Duration::from_micros(999), 1),
        (Duration::from_millis(1), 1),
        (Duration::from_micros(1_001), 2),
        (Duration::from_millis(1500), 1500),
    ] {
        let frame = Frame::new().retry(delay).encode().unwrap();
        assert_eq!(parse_stream(&frame).retry, Some(ms), "{delay:?}");
    }
}
