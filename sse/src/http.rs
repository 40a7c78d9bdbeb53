//! The HTTP mapping of a [`ResumeDecision`], as plain data any framework can copy into its
//! response type. See `docs/protocol.md` for the reasoning behind each status code.
//!
//! | decision | status | body |
//! |---|---|---|
//! | `Live`, `Replay`, `NoOp` | 200 `text/event-stream` | the stream (priming event first) |
//! | `Gap` | 416 | `{"error":"replay_gap",...,"floor":F,"head":H}` |
//! | `Mismatch` | 409 | `{"error":"cursor_ahead_of_head",...}` |
//! | `InvalidCursor` (incl. a repeated header) | 400 | `{"error":"invalid_last_event_id","reason":...}` |
//! | `StreamLost` | 404 | `{"error":"stream_lost","reason":...}` |
//! | `SessionLost` | 404 | `{"error":"session_lost"}` |
//! | `Busy` | 503 + `Retry-After` | `{"error":"too_many_readers","limit":N,"floor":F,"head":H}` |
//! | `Unavailable` | 503 + `Retry-After` | `{"error":"backend_unavailable",...}` |
//!
//! Every response for an existing stream carries `Replay-Floor` and `Replay-Head`.

use bytes::Bytes;

use serde::Serialize;

use crate::event_id::LastEventIdError;
use crate::resume::{Refused, ResumeDecision, StreamState};

/// Response header naming the oldest id the stream can still replay (decimal sequence number).
///
/// ```
/// use replay_ring_sse::{HttpResponse, StreamState, StreamIdentity, StreamId, Epoch, REPLAY_FLOOR_HEADER, REPLAY_HEAD_HEADER, REPLAY_STREAM_HEADER};
/// let me = StreamIdentity::new(StreamId::new("s").unwrap(), Epoch::new(0xf));
/// let r = HttpResponse::stream(&StreamState { identity: me, floor: 4, head: 9 });
/// assert_eq!(r.header(REPLAY_FLOOR_HEADER), Some("4"));
/// assert_eq!(r.header(REPLAY_HEAD_HEADER), Some("9"));
/// assert_eq!(r.header(REPLAY_STREAM_HEADER), Some("s.f"));
/// ```
pub const REPLAY_FLOOR_HEADER: &str = "replay-floor";
/// Response header naming the stream's newest id (decimal sequence number); see
/// [`REPLAY_FLOOR_HEADER`] for an example.
///
/// ```
/// assert_eq!(replay_ring_sse::REPLAY_HEAD_HEADER, "replay-head");
/// ```
pub const REPLAY_HEAD_HEADER: &str = "replay-head";
/// Response header naming the stream and epoch (`<stream>.<epoch>`), so a client can tell a
/// restarted stream from the one it was reading before it sees any event.
///
/// ```
/// assert_eq!(replay_ring_sse::REPLAY_STREAM_HEADER, "replay-stream");
/// ```
pub const REPLAY_STREAM_HEADER: &str = "replay-stream";
/// Request header a client sends to resume (per the HTML standard; header names are
/// case-insensitive).
///
/// ```
/// assert_eq!(replay_ring_sse::LAST_EVENT_ID_HEADER, "last-event-id");
/// ```
pub const LAST_EVENT_ID_HEADER: &str = "last-event-id";
/// Content type of an event stream.
///
/// ```
/// assert_eq!(replay_ring_sse::EVENT_STREAM_CONTENT_TYPE, "text/event-stream");
/// ```
pub const EVENT_STREAM_CONTENT_TYPE: &str = "text/event-stream";

/// A status, headers and body: the full answer to one GET, independent of the HTTP framework.
/// For a 200 the body is empty here: the event stream follows.
///
/// ```
/// use replay_ring_sse::{HttpResponse, ResumeDecision, StreamState, StreamIdentity, StreamId, Epoch};
///
/// let me = StreamIdentity::new(StreamId::new("events").unwrap(), Epoch::new(0xa));
/// let state = StreamState { identity: me, floor: 65, head: 130 };
/// let gap = ResumeDecision::Gap { requested: 41, floor: 65, head: 130 };
/// let resp = HttpResponse::for_decision(&gap, Some(&state));
/// assert_eq!(resp.status, 416);
/// assert_eq!(resp.header("replay-floor"), Some("65"));
/// assert_eq!(resp.header("content-type"), Some("application/json"));
/// let body = std::str::from_utf8(&resp.body).unwrap();
/// assert!(body.starts_with(r#"{"error":"replay_gap","#));
/// assert!(body.contains(r#""requested":41,"floor":65,"head":130"#));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpResponse {
    /// HTTP status code.
    pub status: u16,
    /// Header names (lowercase) and values, in order. Values are visible ASCII.
    pub headers: Vec<(&'static str, String)>,
    /// JSON body for refusals; empty for a 200 (the stream follows).
    pub body: Bytes,
}

impl HttpResponse {
    /// The first value of header `name` (compared case-insensitively).
    ///
    /// ```
    /// use replay_ring_sse::{HttpResponse, ResumeDecision};
    /// let r = HttpResponse::for_decision(&ResumeDecision::SessionLost, None);
    /// assert_eq!(r.header("Content-Type"), Some("application/json"));
    /// ```
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The response for `decision`. `state` is the stream's snapshot (`None` if it does not
    /// exist); it supplies the `Replay-*` headers.
    ///
    /// ```
    /// use replay_ring_sse::{HttpResponse, ResumeDecision, StreamState, StreamIdentity, StreamId, Epoch};
    /// let me = StreamIdentity::new(StreamId::new("s").unwrap(), Epoch::new(1));
    /// let state = StreamState { identity: me, floor: 3, head: 9 };
    /// let ok = HttpResponse::for_decision(&ResumeDecision::Replay { from: 5, through: 9 }, Some(&state));
    /// assert_eq!(ok.status, 200);
    /// assert_eq!(ok.header("content-type"), Some("text/event-stream"));
    /// assert_eq!(ok.header("replay-head"), Some("9"));
    /// assert!(ok.body.is_empty());
    /// ```
    pub fn for_decision(decision: &ResumeDecision, state: Option<&StreamState>) -> Self {
        let state = state.map(|s| as_decided(decision, *s));
        let state = state.as_ref();
        let status = status_for(decision);
        let mut headers: Vec<(&'static str, String)> = Vec::with_capacity(7);
        if decision.is_accepted() {
            headers.push(("content-type", EVENT_STREAM_CONTENT_TYPE.to_owned()));
            // `no-transform`: an intermediary that compresses bodies would hold frames back to
            // fill its blocks, so a client would see events late, in bursts.
            headers.push(("cache-control", "no-store, no-transform".to_owned()));
            // Tell buffering reverse proxies (nginx) to pass frames through as they are written.
            headers.push(("x-accel-buffering", "no".to_owned()));
        } else {
            headers.push(("content-type", "application/json".to_owned()));
            headers.push(("cache-control", "no-store".to_owned()));
        }
        if let Some(s) = state {
            headers.push((REPLAY_FLOOR_HEADER, s.floor.to_string()));
            headers.push((REPLAY_HEAD_HEADER, s.head.to_string()));
            headers.push((
                REPLAY_STREAM_HEADER,
                format!("{}.{}", s.identity.stream, s.identity.epoch),
            ));
        }
        if let ResumeDecision::Busy { .. } | ResumeDecision::Unavailable = decision {
            headers.push(("retry-after", "1".to_owned()));
        }
        let body = if decision.is_accepted() {
            Bytes::new()
        } else {
            error_body(decision, state)
        };
        HttpResponse {
            status,
            headers,
            body,
        }
    }

    /// The 200 head for an accepted stream.
    ///
    /// ```
    /// use replay_ring_sse::{HttpResponse, StreamState, StreamIdentity, StreamId, Epoch};
    /// let me = StreamIdentity::new(StreamId::new("s").unwrap(), Epoch::new(1));
    /// let r = HttpResponse::stream(&StreamState { identity: me, floor: 1, head: 0 });
    /// assert_eq!((r.status, r.header("replay-floor")), (200, Some("1")));
    /// ```
    pub fn stream(state: &StreamState) -> Self {
        Self::for_decision(&ResumeDecision::NoOp { head: state.head }, Some(state))
    }

    /// The response for a refusal from [`resume`](super::resume()).
    ///
    /// ```
    /// use replay_ring_sse::{resume, Epoch, HttpResponse, StreamId, StreamIdentity};
    /// let me = StreamIdentity::new(StreamId::new("s").unwrap(), Epoch::new(1));
    /// let (_p, ring) = replay_ring::ReplayRing::<u8>::new(4, 1).unwrap();
    /// let refused = resume(&ring, &me, Some(b"s.1.5")).unwrap_err();
    /// assert_eq!(HttpResponse::refused(&refused).status, 409);
    /// ```
    pub fn refused(refused: &Refused) -> Self {
        Self::for_decision(&refused.decision, refused.state.as_ref())
    }
}

/// The request's `Last-Event-ID`, from *all* of its values for that header (in any framework:
/// `headers.get_all("last-event-id").iter().map(|v| v.as_bytes())`). `Ok(None)` when absent.
/// Integrations call this rather than taking the first value: with two values the client's cursor
/// is ambiguous (a proxy appended one, or a client bug), and resuming from either could replay the
/// wrong suffix, so the request is refused as [`ResumeDecision::InvalidCursor`] (HTTP 400). A
/// value with a comma is two values too: HTTP lets a proxy join repeated header lines with
/// commas, and no event id contains one.
///
/// ```
/// use replay_ring_sse::{last_event_id, LastEventIdError};
///
/// assert_eq!(last_event_id(std::iter::empty()), Ok(None));
/// assert_eq!(last_event_id([&b"s.1.4"[..]]), Ok(Some(&b"s.1.4"[..])));
/// assert_eq!(
///     last_event_id([&b"s.1.4"[..], &b"s.1.4"[..]]),
///     Err(LastEventIdError::Duplicate { count: 2 })
/// );
/// assert_eq!(
///     last_event_id([&b"s.1.4, s.1.5"[..]]),
///     Err(LastEventIdError::Duplicate { count: 2 })
/// );
/// ```
///
/// # Errors
/// [`LastEventIdError::Duplicate`] when the header appears more than once (even with equal
/// values), or once with values joined by commas.
pub fn last_event_id<'a, I>(values: I) -> Result<Option<&'a [u8]>, LastEventIdError>
where
    I: IntoIterator<Item = &'a [u8]>,
{
    let mut values = values.into_iter();
    let Some(first) = values.next() else {
        return Ok(None);
    };
    let joined = |value: &[u8]| value.iter().filter(|&&b| b == b',').count();
    let count = 1 + joined(first) + values.map(|v| 1 + joined(v)).sum::<usize>();
    match count {
        1 => Ok(Some(first)),
        count => Err(LastEventIdError::Duplicate { count }),
    }
}

/// The status code for a decision: the one table every integration uses (the SSE endpoint and
/// the MCP layer alike; see the module table and `docs/protocol.md` for why each code).
///
/// ```
/// use replay_ring_sse::{status_for, ResumeDecision};
/// assert_eq!(status_for(&ResumeDecision::Mismatch { requested: 9, head: 3 }), 409);
/// assert_eq!(status_for(&ResumeDecision::SessionLost), 404);
/// ```
pub fn status_for(decision: &ResumeDecision) -> u16 {
    match decision {
        ResumeDecision::Live { .. }
        | ResumeDecision::Replay { .. }
        | ResumeDecision::NoOp { .. } => 200,
        ResumeDecision::Gap { .. } => 416,
        ResumeDecision::Mismatch { .. } => 409,
        ResumeDecision::InvalidCursor(_) => 400,
        ResumeDecision::StreamLost(_) | ResumeDecision::SessionLost => 404,
        ResumeDecision::Busy { .. } | ResumeDecision::Unavailable => 503,
    }
}

/// The JSON body of a refusal: one flat object, keys in this order, absent fields omitted.
#[derive(Serialize)]
struct ErrorBody<'a> {
    error: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'static str>,
    message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    requested: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    floor: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    head: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lost_from: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lost_through: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    limit: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    epoch: Option<String>,
}

/// `state` with the floor and head the decision was made on, where it carries them: the snapshot is
/// read separately and a live stream may have moved since, but a refusal's headers and body must
/// state one window (the one that explains the refusal).
fn as_decided(decision: &ResumeDecision, mut state: StreamState) -> StreamState {
    match *decision {
        ResumeDecision::Gap { floor, head, .. } => {
            state.floor = floor;
            state.head = head;
        }
        ResumeDecision::Mismatch { head, .. } => {
            state.head = head;
            // Keeps `floor <= head + 1` if releases went past the decision's head since.
            state.floor = state.floor.min(head.saturating_add(1));
        }
        _ => {}
    }
    state
}

fn error_body(decision: &ResumeDecision, state: Option<&StreamState>) -> Bytes {
    let mut body = ErrorBody {
        error: decision.code(),
        reason: None,
        message: decision.to_string(),
        requested: None,
        floor: state.map(|s| s.floor),
        head: state.map(|s| s.head),
        lost_from: None,
        lost_through: None,
        limit: None,
        stream: state.map(|s| s.identity.stream.as_str()),
        epoch: state.map(|s| s.identity.epoch.to_string()),
    };
    match *decision {
        ResumeDecision::InvalidCursor(err) | ResumeDecision::StreamLost(err) => {
            body.reason = Some(err.code());
        }
        ResumeDecision::Gap {
            requested,
            floor,
            head,
        } => {
            body.requested = Some(requested);
            body.floor = Some(floor);
            body.head = Some(head);
            body.lost_from = Some(requested.saturating_add(1));
            body.lost_through = Some(floor.saturating_sub(1));
        }
        ResumeDecision::Mismatch { requested, head } => {
            body.requested = Some(requested);
            body.head = Some(head);
        }
        ResumeDecision::Busy { limit } => body.limit = Some(limit),
        _ => {}
    }
    // Serialising a struct of strings and integers cannot fail.
    Bytes::from(serde_json::to_vec(&body).unwrap_or_default())
}
