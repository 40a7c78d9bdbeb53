//! `Last-Event-ID` parsing: every error variant, and property tests over untrusted input.
//!
//! Inputs tried per `cargo test` run, with `N` = `SSE_FUZZ_CASES` (default 20,000):
//! - `arbitrary_bytes_never_panic`: N random byte strings of length 0..=96;
//! - `near_miss_strings_never_panic`: N strings over the id alphabet plus troublemakers;
//! - `mutated_ids_never_panic`: N valid ids with one byte replaced, inserted or removed;
//! - `round_trip`: N random (stream, epoch, seq) triples;
//!
//! so 4 × N inputs (80,000 by default). docs/protocol.md records the deep runs.

use proptest::prelude::*;
use replay_ring_sse::{
    Epoch, EventId, IdField, LastEventIdError, Malformed, StreamId, StreamIdentity,
    MAX_EVENT_ID_LEN,
};

fn stream() -> impl Strategy<Value = StreamId> {
    "[A-Za-z0-9_-]{1,32}".prop_map(|s| StreamId::new(&s).unwrap())
}

fn event_id() -> impl Strategy<Value = EventId> {
    (
        stream(),
        any::<u64>(),
        prop_oneof![any::<u64>(), 0u64..1000, Just(u64::MAX)],
    )
        .prop_map(|(s, e, q)| EventId::new(s, Epoch::new(e), q))
}

/// The parser's contract on any input: a typed result, and if accepted, the input is canonical.
fn check_contract(input: &[u8]) {
    match EventId::parse_bytes(input) {
        Ok(id) => {
            assert_eq!(
                id.encode().as_bytes(),
                input,
                "accepted a non-canonical spelling"
            );
            assert!(input.len() <= MAX_EVENT_ID_LEN);
        }
        Err(err) => {
            // Messages are loggable: printable ASCII, and never the raw input.
            let message = err.to_string();
            assert!(
                message.bytes().all(|b| (0x20..0x7f).contains(&b)),
                "{message:?}"
            );
            assert!(!err.code().is_empty());
            match err {
                LastEventIdError::Empty => assert!(input.is_empty()),
                LastEventIdError::TooLong { len, max } => {
                    assert_eq!((len, max), (input.len(), MAX_EVENT_ID_LEN));
                    assert!(len > max);
                }
                LastEventIdError::NonAscii { position } => assert!(!input[position].is_ascii()),
                LastEventIdError::Malformed { position, .. } => assert!(position <= input.len()),
                LastEventIdError::Overflow { .. } => {}
                other => panic!("syntax parse returned {other:?}"),
            }
        }
    }
}

/// Cases per property: `SSE_FUZZ_CASES` or 20,000.
fn cases() -> u32 {
    std::env::var("SSE_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(input in proptest::collection::vec(any::<u8>(), 0..=96)) {
        check_contract(&input);
        if let Ok(s) = std::str::from_utf8(&input) {
            prop_assert_eq!(EventId::parse(s), EventId::parse_bytes(&input));
        }
    }

    #[test]
    fn near_miss_strings_never_panic(input in "[a-f0-9A-Z._\\- \r\n\t:\u{0}\u{e9}]{0,80}") {
        check_contract(input.as_bytes());
    }

    #[test]
    fn mutated_ids_never_panic(
        id in event_id(),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
        op in 0u8..3,
    ) {
        let mut bytes = id.encode().as_bytes().to_vec();
        let i = at.index(bytes.len());
        match op {
            0 => bytes[i] = byte,
            1 => bytes.insert(i, byte),
            _ => { bytes.remove(i); }
        }
        check_contract(&bytes);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn round_trip(id in event_id()) {
        let text = id.to_string();
        prop_assert!(text.len() <= MAX_EVENT_ID_LEN);
        prop_assert!(!text.bytes().any(|b| matches!(b, b'\r' | b'\n' | 0 | b':' | b' ')));
        prop_assert_eq!(EventId::parse(&text), Ok(id));
        prop_assert_eq!(text.parse::<EventId>(), Ok(id));
        let me = StreamIdentity::new(id.stream, id.epoch);
        prop_assert_eq!(me.parse_last_event_id(text.as_bytes()), Ok(id.seq));
    }
}

#[test]
fn every_error_variant() {
    let me = StreamIdentity::new(StreamId::new("events").unwrap(), Epoch::new(0xabc));
    let malformed = |position, reason| Err(LastEventIdError::Malformed { position, reason });
    let cases: Vec<(&[u8], Result<u64, LastEventIdError>)> = vec![
        (b"", Err(LastEventIdError::Empty)),
        (
            &[b'a'; 71],
            Err(LastEventIdError::TooLong { len: 71, max: 70 }),
        ),
        (
            b"events.abc.\xc3\xa9",
            Err(LastEventIdError::NonAscii { position: 11 }),
        ),
        (b"events", malformed(6, Malformed::MissingSeparator)),
        (b"events.abc", malformed(10, Malformed::MissingSeparator)),
        (b".abc.1", malformed(0, Malformed::EmptyStream)),
        (b"ev ents.abc.1", malformed(2, Malformed::InvalidStreamByte)),
        (
            b"ev\rents.abc.1",
            malformed(2, Malformed::InvalidStreamByte),
        ),
        (
            b"events.abc.1\n",
            malformed(12, Malformed::InvalidSequenceByte),
        ),
        (
            b"events.abc.1.2",
            malformed(12, Malformed::InvalidSequenceByte),
        ),
        (b"events..1", malformed(7, Malformed::EmptyEpoch)),
        (b"events.ABC.1", malformed(7, Malformed::InvalidEpochByte)),
        (b"events.0abc.1", malformed(7, Malformed::LeadingZero)),
        (b"events.abc.", malformed(11, Malformed::EmptySequence)),
        (b"events.abc.01", malformed(11, Malformed::LeadingZero)),
        (
            b"events.abc.+1",
            malformed(11, Malformed::InvalidSequenceByte),
        ),
        (
            b"events.abc.-1",
            malformed(11, Malformed::InvalidSequenceByte),
        ),
        (b" events.abc.1", malformed(0, Malformed::InvalidStreamByte)),
        (b"events:abc.1", malformed(6, Malformed::InvalidStreamByte)),
        (
            b"events.abc.18446744073709551616",
            Err(LastEventIdError::Overflow {
                field: IdField::Sequence,
            }),
        ),
        (
            b"events.10000000000000000.1",
            Err(LastEventIdError::Overflow {
                field: IdField::Epoch,
            }),
        ),
        (
            b"events.abd.1",
            Err(LastEventIdError::UnknownEpoch {
                stream: me.stream,
                got: Epoch::new(0xabd),
                current: me.epoch,
            }),
        ),
        (
            b"other.abc.1",
            Err(LastEventIdError::UnknownStream {
                stream: StreamId::new("other").unwrap(),
            }),
        ),
        (b"events.abc.0", Ok(0)),
        (b"events.abc.18446744073709551615", Ok(u64::MAX)),
    ];
    for (input, expected) in cases {
        assert_eq!(
            me.parse_last_event_id(input),
            expected,
            "{:?}",
            String::from_utf8_lossy(input)
        );
    }
    // A 33-byte stream name fits the length limit but not the grammar.
    let long = format!("{}.abc.1", "s".repeat(33));
    assert_eq!(
        EventId::parse(&long),
        Err(LastEventIdError::Malformed {
            position: 32,
            reason: Malformed::StreamTooLong
        })
    );
    // The longest valid id is exactly the limit.
    let max = EventId::new(
        StreamId::new(&"s".repeat(32)).unwrap(),
        Epoch::new(u64::MAX),
        u64::MAX,
    );
    assert_eq!(max.to_string().len(), MAX_EVENT_ID_LEN);
    assert_eq!(EventId::parse(&max.to_string()), Ok(max));
}

#[test]
fn errors_are_std_errors_with_loggable_messages() {
    let err: Box<dyn std::error::Error + Send + Sync> =
        Box::new(EventId::parse_bytes(b"events.abc.\r\nset-cookie: x").unwrap_err());
    let message = err.to_string();
    assert!(
        !message.contains('\r') && !message.contains("set-cookie"),
        "{message}"
    );
    assert_eq!(
        message,
        "Last-Event-ID is malformed at offset 11: sequence byte outside [0-9]"
    );
}
