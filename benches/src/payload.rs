//! The event payload of the HTTP scenario: `{"n":<id>,"t":<publish time>}`, the publish time in
//! nanoseconds since the Unix epoch (client and server share the machine's clock).

use std::time::{SystemTime, UNIX_EPOCH};

use serde::Deserialize;

/// Nanoseconds since the Unix epoch, now.
pub fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The JSON payload of event `id`, stamped now.
pub fn encode(id: u64) -> String {
    format!(r#"{{"n":{id},"t":{}}}"#, unix_ns())
}

/// A decoded payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct Payload {
    /// The event id the server put in the payload.
    pub n: u64,
    /// Publish time (Unix ns), when the server stamps it.
    pub t: Option<u64>,
}

/// Parses an event's `data`.
pub fn decode(data: &str) -> Result<Payload, serde_json::Error> {
    serde_json::from_str(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let p = decode(&encode(42)).unwrap();
        assert_eq!(p.n, 42);
        assert!(p.t.unwrap() > 0);
        assert_eq!(decode(r#"{"n":7}"#).unwrap(), Payload { n: 7, t: None });
        assert!(decode("{}").is_err());
    }
}
