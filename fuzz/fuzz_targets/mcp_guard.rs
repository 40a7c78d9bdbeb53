//! The MCP resume guard (`ResumeGuardLayer`) driven through its public tower `Layer` over a
//! trivial inner service, with arbitrary methods, `Last-Event-ID` and `Mcp-Session-Id` headers,
//! against two stores with known contents:
//!
//! - one stream with three events, bound to no session, and one with two events on the live
//!   session's common stream (readable only in that session). One store keeps everything (floor 1), the other has a zero
//!   resumption window, so whatever retention lets go has expired by the time a cursor is
//!   checked (the range is read from the store with a cursor at the head).
//!
//! Checked for every request: nothing panics; an `Mcp-Session-Id` that is empty or not visible
//! ASCII is refused with 400 whatever the method (as the bare error object for a `POST`); a
//! `DELETE` reaches the inner service exactly when
//! it names the live session or no session; any other request without a cursor, or not a `GET`,
//! reaches it untouched (a `POST` opening a session is far below the session cap); a cursor
//! reaches it exactly when it names a retained position of a stream the request may read
//! (decided here from the fixture and the retained range); every
//! refusal has the status of the module's table, a JSON-RPC error body whose `error.data.error`
//! names the refusal, and `Replay-Floor` / `Replay-Head` headers that agree with the fixture.
#![no_main]

use std::convert::Infallible;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use arbitrary::Arbitrary;
use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use libfuzzer_sys::fuzz_target;
use replay_ring_mcp::{
    Body, ReplayRingSessionManager, ResumeGuardLayer, RingEventStore, StoreConfig,
    STREAM_BROKEN_CODE,
};
use replay_ring_sse::{Epoch, EventId, RetentionConfig};
use rmcp::model::ServerJsonRpcMessage;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::{
    EventStore, ServerSseMessage, SessionId, SessionManager,
};
use tower::{Layer, Service, ServiceExt};

const EPOCH: u64 = 0xabc;
/// Events in `s0` and `s1`.
const HEADS: [u64; 2] = [3, 2];
const INNER: &str = "x-inner";

struct Store {
    manager: Arc<ReplayRingSessionManager>,
    /// Zero resumption window: every event has expired.
    expired: bool,
    /// The live session that owns the second stream.
    session: SessionId,
    /// The names of the two streams (from the ids the store handed out).
    names: [String; 2],
}

struct Fixture {
    rt: tokio::runtime::Runtime,
    stores: [Store; 2],
}

fn message(n: u64) -> ServerSseMessage {
    let msg: ServerJsonRpcMessage = serde_json::from_value(serde_json::json!({
        "jsonrpc": "2.0", "method": "notifications/progress",
        "params": {"progressToken": "t", "progress": n}
    }))
    .expect("a progress notification");
    ServerSseMessage::from_message(msg)
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let build = |window: Duration| {
            rt.block_on(async {
                let store = RingEventStore::with_epoch(
                    StoreConfig {
                        retention: RetentionConfig {
                            resumption_window: window,
                            ..RetentionConfig::default()
                        },
                        ..StoreConfig::default()
                    },
                    Epoch::new(EPOCH),
                );
                let local = LocalSessionManager::default();
                let manager = Arc::new(ReplayRingSessionManager::new(store.clone(), local));
                let (id, _transport) = manager.create_session().await.expect("session");
                let mut names = [String::new(), String::new()];
                let rmcp_ids = ["req-1".to_string(), format!("{id}:common")];
                for (stream, rmcp_id) in rmcp_ids.iter().enumerate() {
                    for n in 1..=HEADS[stream] {
                        let wire = store
                            .store_event(rmcp_id, &message(n))
                            .await
                            .expect("stored");
                        let parsed = EventId::parse(&wire).expect("a wire id");
                        assert_eq!((parsed.seq, parsed.epoch), (n, Epoch::new(EPOCH)));
                        names[stream] = parsed.stream.as_str().to_string();
                    }
                }
                Store {
                    manager,
                    expired: window.is_zero(),
                    session: id,
                    names,
                }
            })
        };
        let kept = build(Duration::from_secs(3600));
        let expired = build(Duration::ZERO);
        Fixture {
            rt,
            stores: [kept, expired],
        }
    })
}

#[derive(Debug, Arbitrary)]
enum Cursor {
    Raw(Vec<u8>),
    /// One of the two streams or an unknown one, the right epoch or a neighbour, a small seq.
    Known {
        stream: u8,
        right_epoch: bool,
        seq: u8,
    },
}

#[derive(Debug, Arbitrary)]
enum Session {
    Absent,
    Live,
    Raw(Vec<u8>),
}

#[derive(Debug, Arbitrary)]
struct Input {
    expired_store: bool,
    method: u8,
    cursor: Option<Cursor>,
    session: Session,
}

/// What the guard must do, from the fixture alone.
#[derive(Debug, PartialEq, Eq)]
enum Expected {
    Inner,
    Refused(u16, &'static str),
}

fn expected(
    method: &Method,
    cursor: Option<&[u8]>,
    session: Option<&[u8]>,
    live: &str,
    names: &[String; 2],
    ranges: &[(u64, u64); 2],
) -> Expected {
    // Session ids are visible ASCII: any other value is no session's, and refused as such.
    let visible = |s: &[u8]| !s.is_empty() && s.iter().all(|b| (0x21..=0x7e).contains(b));
    if session.is_some_and(|s| !visible(s)) {
        return Expected::Refused(400, "bad_request");
    }
    let session = session.map(|s| std::str::from_utf8(s).expect("visible ASCII"));
    // A `DELETE` names a session to end: one this process does not have is lost, as for any
    // request naming an unknown session; without a (textual) session it is rmcp's to answer.
    if method == Method::DELETE {
        return match session {
            Some(s) if s != live => Expected::Refused(404, "session_lost"),
            _ => Expected::Inner,
        };
    }
    let Some(cursor) = cursor.filter(|_| method == Method::GET) else {
        return Expected::Inner;
    };
    // A cursor that does not parse is refused before the session is looked at, so that every
    // replica answers it alike.
    let Ok(id) = EventId::parse_bytes(cursor) else {
        return Expected::Refused(400, "invalid_last_event_id");
    };
    if session.is_some_and(|s| s != live) {
        return Expected::Refused(404, "session_lost");
    }
    let Some(stream) = names.iter().position(|n| n == id.stream.as_str()) else {
        return Expected::Refused(404, "stream_lost");
    };
    if id.epoch != Epoch::new(EPOCH) {
        return Expected::Refused(404, "stream_lost");
    }
    // The first stream belongs to no session, the second to the live one: to a session, another
    // session's stream does not exist, and neither does a session's stream to a request without
    // one.
    if session.is_some() == (stream == 0) {
        return Expected::Refused(404, "stream_lost");
    }
    let (floor, head) = ranges[stream];
    if id.seq > head {
        Expected::Refused(409, "cursor_ahead_of_head")
    } else if id.seq + 1 < floor {
        Expected::Refused(416, "replay_gap")
    } else {
        Expected::Inner
    }
}

fuzz_target!(|input: Input| {
    let fx = fixture();
    let Store {
        manager,
        expired,
        session: live,
        names,
    } = &fx.stores[usize::from(input.expired_store)];
    // Each stream's retained range as the store reports it for a cursor at its head (always
    // accepted). Which events have expired is the retention policy's business; the guard's is
    // to map a cursor against the range correctly.
    let ranges = [0, 1].map(|stream| {
        let at_head = format!("{}.{EPOCH:x}.{}", names[stream], HEADS[stream]);
        // Each stream as the request that may read it: the first without a session, the
        // session's GET stream in its session.
        let reader = (stream == 1).then_some(&**live);
        let state = manager
            .store()
            .check_resume(reader, at_head.as_bytes())
            .expect("a cursor at the head is accepted");
        assert_eq!(state.head, HEADS[stream]);
        assert!(state.floor >= 1 && state.floor <= state.head + 1);
        if !*expired {
            assert_eq!(state.floor, 1, "nothing expires within the hour");
        }
        (state.floor, state.head)
    });
    let method = match input.method % 4 {
        0 | 1 => Method::GET,
        2 => Method::POST,
        _ => Method::DELETE,
    };
    let cursor: Option<Vec<u8>> = input.cursor.map(|c| match c {
        Cursor::Raw(b) => b,
        Cursor::Known {
            stream,
            right_epoch,
            seq,
        } => {
            let epoch = if right_epoch { EPOCH } else { EPOCH + 1 };
            let name = names
                .get(usize::from(stream % 3))
                .map_or("zz", String::as_str);
            format!("{name}.{epoch:x}.{}", seq % 8).into_bytes()
        }
    });
    let session: Option<Vec<u8>> = match input.session {
        Session::Absent => None,
        Session::Live => Some(live.as_bytes().to_vec()),
        Session::Raw(b) => Some(b),
    };

    let mut req = Request::builder().method(method.clone()).uri("/mcp");
    let cursor_value = match cursor.as_deref().map(HeaderValue::from_bytes) {
        Some(Ok(v)) => Some(v),
        Some(Err(_)) => return, // not a header value any HTTP stack would deliver
        None => None,
    };
    let session_value = match session.as_deref().map(HeaderValue::from_bytes) {
        Some(Ok(v)) => Some(v),
        Some(Err(_)) => return,
        None => None,
    };
    if let Some(v) = &cursor_value {
        req = req.header("last-event-id", v.clone());
    }
    if let Some(v) = &session_value {
        req = req.header("mcp-session-id", v.clone());
    }
    let req = req.body(()).expect("request");
    let want = expected(
        &method,
        cursor_value.as_ref().map(HeaderValue::as_bytes),
        session_value.as_ref().map(HeaderValue::as_bytes),
        live,
        names,
        &ranges,
    );

    let inner = tower::service_fn(|_req: Request<()>| async {
        let mut resp: Response<Body> = Response::new(Full::new(Bytes::new()).boxed());
        resp.headers_mut()
            .insert(INNER, HeaderValue::from_static("1"));
        Ok::<_, Infallible>(resp)
    });
    let mut guard = ResumeGuardLayer::new(manager.clone()).layer(inner);
    let resp = fx.rt.block_on(async {
        let svc = guard.ready().await.expect("ready");
        let resp = svc.call(req).await.expect("infallible");
        let (parts, body) = resp.into_parts();
        let body = body.collect().await.expect("infallible").to_bytes();
        (parts, body)
    });
    let (parts, body) = resp;

    if parts.headers.contains_key(INNER) {
        assert_eq!(
            want,
            Expected::Inner,
            "passed through: {cursor:?} {session:?}"
        );
        return;
    }
    let code = match &want {
        Expected::Refused(status, code) => {
            assert_eq!(
                parts.status,
                StatusCode::from_u16(*status).unwrap(),
                "{code}"
            );
            *code
        }
        Expected::Inner => panic!("refused {cursor:?} {session:?}: {} {body:?}", parts.status),
    };
    assert_eq!(parts.headers["content-type"], "application/json");
    let json: serde_json::Value = serde_json::from_slice(&body).expect("a JSON body");
    if method == Method::POST {
        // A `POST` is answered with the bare error object (see `client_errors`).
        assert_eq!(json["error"], code, "{json}");
        return;
    }
    assert_eq!(json["jsonrpc"], "2.0");
    assert!(json["id"].is_null());
    assert_eq!(json["error"]["code"], STREAM_BROKEN_CODE);
    assert_eq!(json["error"]["data"]["error"], code, "{json}");
    let header = |name: &str| {
        parts
            .headers
            .get(name)
            .map(|v| v.to_str().expect("ascii").parse::<u64>().expect("a number"))
    };
    if let (Some(floor), Some(head)) = (header("replay-floor"), header("replay-head")) {
        let id = EventId::parse_bytes(cursor.as_deref().unwrap()).expect("a parsed cursor");
        let stream = names
            .iter()
            .position(|n| n == id.stream.as_str())
            .expect("a known stream");
        assert_eq!((floor, head), ranges[stream]);
    } else {
        assert!(
            !matches!(code, "replay_gap" | "cursor_ahead_of_head"),
            "a range refusal without the range"
        );
    }
});
