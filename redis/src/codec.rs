//! How values are spelled in Redis (key names, epochs, close reasons) and how script replies are
//! read back. Everything read from Redis is untrusted: anything unexpected becomes
//! [`Error::Corrupt`], never a panic.

use std::time::Duration;

use bytes::Bytes;
use redis::Value;
use replay_ring::CloseReason;
use replay_ring_sse::{Epoch, StreamId};

use crate::error::Error;

/// The four keys of one stream. They share the `{stream}` hash tag, so in Redis Cluster they live
/// in one slot and every script can touch all of them.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    /// HASH: epoch, cap, head, floor, fence, ttl, closed; `subscribed` once an endpoint recorded a
    /// subscriber (`subscriber.rs`).
    pub meta: String,
    /// STREAM: the events, entry id `0-<seq>`, one field `d` = payload.
    pub log: String,
    /// STREAM: wake-ups for releases, close and re-creation (capped at a few entries; no event
    /// data).
    pub ctl: String,
    /// STRING with TTL: the current producer's fencing token.
    pub lease: String,
}

impl Keys {
    pub(crate) fn new(prefix: &str, stream: &StreamId) -> Keys {
        let s = stream.as_str();
        Keys {
            meta: format!("{prefix}:{{{s}}}:meta"),
            log: format!("{prefix}:{{{s}}}:log"),
            ctl: format!("{prefix}:{{{s}}}:ctl"),
            lease: format!("{prefix}:{{{s}}}:lease"),
        }
    }

    /// The four names: meta, log, ctl, lease.
    pub(crate) fn all(&self) -> [&str; 4] {
        [&self.meta, &self.log, &self.ctl, &self.lease]
    }
}

/// Spells a close reason for the meta hash.
pub(crate) fn encode_reason(reason: &CloseReason) -> String {
    match reason {
        CloseReason::Completed => "completed".to_owned(),
        CloseReason::ProducerDropped => "producer_dropped".to_owned(),
        // In nanoseconds, so readers get back exactly the reason the producer closed with.
        CloseReason::BackpressureTimeout { waited } => {
            format!("backpressure_timeout_ns:{}", waited.as_nanos())
        }
        CloseReason::Error(message) => format!("error:{message}"),
        // The enum is non-exhaustive; anything new is stored as a failure with its text.
        other => format!("error:{other}"),
    }
}

/// Reads a close reason back (`None` for an unknown spelling).
pub(crate) fn decode_reason(raw: &str) -> Option<CloseReason> {
    match raw {
        "completed" => Some(CloseReason::Completed),
        "producer_dropped" => Some(CloseReason::ProducerDropped),
        _ => {
            if let Some(ns) = raw.strip_prefix("backpressure_timeout_ns:") {
                let ns: u128 = ns.parse().ok()?;
                let secs = u64::try_from(ns / 1_000_000_000).ok()?;
                // The remainder is below 10^9, so it fits.
                let waited = Duration::new(secs, (ns % 1_000_000_000) as u32);
                Some(CloseReason::BackpressureTimeout { waited })
            } else if let Some(ms) = raw.strip_prefix("backpressure_timeout:") {
                // Whole milliseconds: the spelling of earlier versions, still read back.
                let ms: u64 = ms.parse().ok()?;
                Some(CloseReason::BackpressureTimeout {
                    waited: Duration::from_millis(ms),
                })
            } else {
                raw.strip_prefix("error:").map(CloseReason::error)
            }
        }
    }
}

/// Spells an epoch for the meta hash (lowercase hex, as on the wire).
pub(crate) fn encode_epoch(epoch: Epoch) -> String {
    epoch.to_string()
}

/// Reads an epoch back: only its own spelling, so a hash another writer left is not taken for
/// one of ours.
pub(crate) fn decode_epoch(raw: &str) -> Option<Epoch> {
    raw.parse().ok()
}

/// A script reply being taken apart, with the stream named in every error.
pub(crate) struct Reply<'a> {
    stream: &'a StreamId,
    items: std::vec::IntoIter<Value>,
}

impl<'a> Reply<'a> {
    /// Expects an array reply whose first element is a status word.
    pub(crate) fn new(stream: &'a StreamId, value: Value) -> Result<(Reply<'a>, String), Error> {
        let Value::Array(items) = value else {
            return Err(corrupt(stream, "script reply is not an array"));
        };
        let mut reply = Reply {
            stream,
            items: items.into_iter(),
        };
        let status = reply.string("status")?;
        Ok((reply, status))
    }

    fn next(&mut self, what: &str) -> Result<Value, Error> {
        self.items
            .next()
            .ok_or_else(|| corrupt(self.stream, &format!("script reply lacks {what}")))
    }

    /// The next element as bytes.
    pub(crate) fn bytes(&mut self, what: &str) -> Result<Vec<u8>, Error> {
        match self.next(what)? {
            Value::BulkString(b) => Ok(b),
            Value::SimpleString(s) => Ok(s.into_bytes()),
            Value::Okay => Ok(b"OK".to_vec()),
            _ => Err(corrupt(self.stream, &format!("{what} is not a string"))),
        }
    }

    /// The next element as UTF-8 text.
    pub(crate) fn string(&mut self, what: &str) -> Result<String, Error> {
        String::from_utf8(self.bytes(what)?)
            .map_err(|_| corrupt(self.stream, &format!("{what} is not UTF-8")))
    }

    /// The next element as a decimal id below 2^53.
    pub(crate) fn id(&mut self, what: &str) -> Result<u64, Error> {
        let s = self.string(what)?;
        parse_decimal(&s)
            .ok_or_else(|| corrupt(self.stream, &format!("{what} is not a decimal id")))
    }

    /// The next element as an optional close reason (empty string = open).
    pub(crate) fn reason(&mut self, what: &str) -> Result<Option<CloseReason>, Error> {
        let s = self.string(what)?;
        if s.is_empty() {
            return Ok(None);
        }
        decode_reason(&s)
            .map(Some)
            .ok_or_else(|| corrupt(self.stream, &format!("{what} is not a close reason")))
    }

    /// The next element as an array of stream entries `[id, [field, value…]]`.
    pub(crate) fn entries(&mut self, what: &str) -> Result<Vec<(u64, Bytes)>, Error> {
        let Value::Array(raw) = self.next(what)? else {
            return Err(corrupt(self.stream, &format!("{what} is not an array")));
        };
        raw.into_iter().map(|e| entry(self.stream, e)).collect()
    }
}

/// One stream entry: `[ "0-<seq>", ["d", payload] ]`.
pub(crate) fn entry(stream: &StreamId, value: Value) -> Result<(u64, Bytes), Error> {
    let bad = |what: &str| corrupt(stream, &format!("log entry {what}"));
    let Value::Array(mut parts) = value else {
        return Err(bad("is not an array"));
    };
    if parts.len() != 2 {
        return Err(bad("has the wrong shape"));
    }
    let fields = parts.pop().expect("len checked");
    let id = parts.pop().expect("len checked");
    let id: &[u8] = match &id {
        Value::BulkString(b) => b,
        Value::SimpleString(s) => s.as_bytes(),
        _ => return Err(bad("id is not a string")),
    };
    // Parsed in place: no string is built per entry on the replay path.
    let seq = id
        .strip_prefix(b"0-")
        .and_then(|d| std::str::from_utf8(d).ok())
        .and_then(parse_decimal)
        .ok_or_else(|| {
            let id = String::from_utf8_lossy(id);
            bad(&format!("id {id:?} was not written by this crate"))
        })?;
    let Value::Array(mut fields) = fields else {
        return Err(bad("fields are not an array"));
    };
    if fields.len() != 2 {
        return Err(bad(&format!("{seq} has unexpected fields")));
    }
    let payload = fields.pop().expect("len checked");
    let name = fields.pop().expect("len checked");
    if !matches!(&name, Value::BulkString(n) if n == b"d") {
        return Err(bad(&format!("{seq} has unexpected fields")));
    }
    let Value::BulkString(payload) = payload else {
        return Err(bad(&format!("{seq} payload is not a string")));
    };
    Ok((seq, Bytes::from(payload)))
}

/// A canonical decimal below 2^53 (what the scripts write).
pub(crate) fn parse_decimal(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 16 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse::<u64>().ok().filter(|&n| n <= crate::MAX_ID + 1)
}

pub(crate) fn corrupt(stream: &StreamId, detail: &str) -> Error {
    Error::Corrupt {
        stream: *stream,
        detail: detail.to_owned(),
    }
}

/// Result of one READ script run.
pub(crate) struct Page {
    pub(crate) floor: u64,
    pub(crate) head: u64,
    pub(crate) closed: Option<CloseReason>,
    pub(crate) ctl: String,
    pub(crate) entries: Vec<(u64, Bytes)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_round_trip() {
        for r in [
            CloseReason::Completed,
            CloseReason::ProducerDropped,
            CloseReason::BackpressureTimeout {
                waited: Duration::from_millis(1500),
            },
            CloseReason::BackpressureTimeout {
                waited: Duration::from_nanos(1_500_001),
            },
            CloseReason::BackpressureTimeout {
                waited: Duration::from_micros(500),
            },
            CloseReason::BackpressureTimeout {
                waited: Duration::MAX,
            },
            CloseReason::error("tool crashed: x:y"),
        ] {
            assert_eq!(decode_reason(&encode_reason(&r)), Some(r));
        }
        assert_eq!(
            decode_reason("backpressure_timeout:1500"),
            Some(CloseReason::BackpressureTimeout {
                waited: Duration::from_millis(1500)
            })
        );
        assert_eq!(decode_reason("garbage"), None);
        assert_eq!(decode_reason("backpressure_timeout:x"), None);
        assert_eq!(decode_reason("backpressure_timeout_ns:-1"), None);
        assert_eq!(
            decode_reason(&format!("backpressure_timeout_ns:{}", u128::MAX)),
            None
        );
    }

    #[test]
    fn epochs_round_trip_and_garbage_is_refused() {
        let e = Epoch::new(0x3f9a2c71d0);
        assert_eq!(decode_epoch(&encode_epoch(e)), Some(e));
        for bad in [
            "",
            "xyz",
            "12345678901234567",
            "-1",
            "+2a",
            "2A",
            "02a",
            "10000000000000000",
        ] {
            assert_eq!(decode_epoch(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn keys_share_one_hash_tag() {
        let k = Keys::new("rr", &StreamId::new("events").unwrap());
        for key in [&k.meta, &k.log, &k.ctl, &k.lease] {
            assert!(key.starts_with("rr:{events}:"), "{key}");
        }
    }

    #[test]
    fn decimals_are_canonical_and_bounded() {
        assert_eq!(parse_decimal("42"), Some(42));
        assert_eq!(parse_decimal("9007199254740992"), Some(1 << 53));
        assert_eq!(parse_decimal("9007199254740993"), None);
        assert_eq!(parse_decimal("+1"), None);
        assert_eq!(parse_decimal(""), None);
    }
}
