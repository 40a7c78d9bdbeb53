//! `Last-Event-ID` parsing of untrusted bytes.
//!
//! - Parsing never panics, whatever the bytes.
//! - An accepted value is canonical: formatting the parsed id gives back the exact input bytes
//!   (every id has one spelling), and parsing that again gives the same id.
//! - Every id built from parts (any valid stream name, any epoch, any sequence) round-trips:
//!   `parse(format(id)) == id`.
//! - A refusal's message is printable ASCII (header bytes are untrusted and messages end up in
//!   logs).
//! - `StreamIdentity::parse_last_event_id` accepts exactly the ids of its own stream and epoch.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use replay_ring_sse::{
    Epoch, EventId, LastEventIdError, StreamId, StreamIdentity, MAX_EVENT_ID_LEN, MAX_STREAM_LEN,
};

#[derive(Debug, Arbitrary)]
enum Input {
    /// Raw header bytes.
    Raw(Vec<u8>),
    /// An id assembled from parts; the stream name is folded into the valid alphabet.
    Parts {
        stream: Vec<u8>,
        epoch: u64,
        seq: u64,
    },
}

const STREAM_ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

fn check_raw(bytes: &[u8]) {
    let identity = StreamIdentity::new(StreamId::new("events").unwrap(), Epoch::new(0x1f));
    match EventId::parse_bytes(bytes) {
        Ok(id) => {
            let encoded = id.encode();
            assert_eq!(
                encoded.as_bytes(),
                bytes,
                "accepted a non-canonical spelling"
            );
            assert!(bytes.len() <= MAX_EVENT_ID_LEN);
            assert_eq!(EventId::parse(encoded.as_str()), Ok(id));
            assert_eq!(id.to_string(), encoded.as_str());
            let own = id.stream == identity.stream && id.epoch == identity.epoch;
            match identity.parse_last_event_id(bytes) {
                Ok(seq) => assert!(own && seq == id.seq, "accepted a foreign id {id}"),
                Err(e) => {
                    assert!(!own, "refused its own id {id}: {e}");
                    assert!(!e.is_syntax(), "a parsed id refused as syntax: {e}");
                }
            }
        }
        Err(e) => {
            check_message(&e);
            assert!(
                e.is_syntax(),
                "a syntax refusal not marked as syntax: {e:?}"
            );
            assert_eq!(identity.parse_last_event_id(bytes), Err(e));
            if let LastEventIdError::TooLong { len, max } = e {
                assert_eq!((len, max), (bytes.len(), MAX_EVENT_ID_LEN));
            }
        }
    }
}

/// Messages are printable ASCII: a control byte or a non-ASCII byte of the input never reaches a
/// log line through them.
fn check_message(e: &LastEventIdError) {
    let message = e.to_string();
    assert!(
        message.bytes().all(|b| (0x20..0x7f).contains(&b)),
        "unprintable error message {message:?}"
    );
}

fn check_parts(stream: &[u8], epoch: u64, seq: u64) {
    let name: String = stream
        .iter()
        .take(MAX_STREAM_LEN)
        .map(|&b| STREAM_ALPHABET[b as usize % STREAM_ALPHABET.len()] as char)
        .collect();
    let Ok(stream) = StreamId::new(&name) else {
        assert!(name.is_empty(), "valid name {name:?} refused");
        return;
    };
    let id = EventId::new(stream, Epoch::new(epoch), seq);
    let encoded = id.encode();
    assert_eq!(
        EventId::parse_bytes(encoded.as_bytes()),
        Ok(id),
        "{encoded:?}"
    );
    assert_eq!(encoded.as_str(), format!("{name}.{epoch:x}.{seq}"));
    let identity = StreamIdentity::new(stream, Epoch::new(epoch));
    assert_eq!(identity.parse_last_event_id(encoded.as_bytes()), Ok(seq));
}

fuzz_target!(|input: Input| match input {
    Input::Raw(bytes) => check_raw(&bytes),
    Input::Parts { stream, epoch, seq } => check_parts(&stream, epoch, seq),
});
