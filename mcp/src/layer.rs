//! [`ResumeGuardLayer`]: checks `Last-Event-ID` against the store before rmcp sees a resume, and
//! answers an unreplayable cursor explicitly.
//!
//! rmcp 3.11 answers any failed resume with `200` and an empty event stream (its `tower.rs`,
//! "Resume failed, returning empty stream"), which official clients read as "stream ended,
//! reconnect" — forever. In front of it, this layer answers:
//!
//! | situation | status | `error.data.error` |
//! |---|---|---|
//! | MCP session unknown or gone | 404 | `session_lost` |
//! | unknown stream, an epoch from before a restart, or a stream of another MCP session | 404 | `stream_lost` |
//! | cursor below the retained floor | 416 | `replay_gap` (with `floor`, `head`, `lost_from`, `lost_through`) |
//! | cursor ahead of the head | 409 | `cursor_ahead_of_head` |
//! | cursor at the last id of a completed stream | 410 | `stream_complete` |
//! | cursor at the last id of a stream closed early (backpressure) | 410 | `stream_closed` |
//! | malformed or repeated `Last-Event-ID` | 400 | `invalid_last_event_id` |
//! | every reader slot taken | 503 | `too_many_readers` |
//! | a resume in an MCP session with `MCP-Protocol-Version` 2026-07-28 or later (a revision without sessions) | 400 | `unsupported_protocol_version` |
//!
//! A `POST` body that did not parse, or did not arrive, is answered as a client error too (see
//! `client_errors.rs`: 400 `invalid_json_rpc`, 400 `incomplete_body`, 408 `body_timeout`), where
//! rmcp 3.11 answers 415 and 500, and rmcp's other plain-text client errors (406, 405, 413, 415,
//! 403, 400) keep their status and come as JSON.
//!
//! Every refusal for an existing stream also carries `Replay-Floor`, `Replay-Head` and
//! `Replay-Stream` headers. A `DELETE` naming a session this process does not have is answered
//! 404 `session_lost` too (rmcp answers 202), and a request that would open a session beyond
//! [`ReplayRingSessionManager::with_max_sessions`] 503 `too_many_sessions` with `Retry-After`.
//! A request that would open a request stream beyond
//! [`ReplayRingSessionManager::with_max_streams_per_session`] or
//! [`ReplayRingSessionManager::with_max_streams`] is answered 503 `too_many_streams` with
//! `Retry-After` (rmcp refuses it with a plain-text 500).
//!
//! Answers to a `GET` or `DELETE` are JSON-RPC errors with `id: null`. Answers to a `POST` are the
//! same error object without the JSON-RPC envelope (`{"error": "session_lost", "message": ...}`):
//! the guard does not know the `POST`'s request id, and rmcp's own client hangs on an id-less
//! JSON-RPC error in a `POST`'s response (see `Envelope`).
//!
//! With a Redis event log (feature `redis`), a resume whose MCP session or stream this process
//! does not hold is served from Redis instead of being refused (`RingEventStore::remote_resume`);
//! Redis being unreachable is then `503` with `Retry-After`, and so is a request whose new stream
//! the event log could not create (rmcp answers it with a plain-text `500`). A malformed cursor is
//! refused before the session is looked at, so every replica answers it alike.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use replay_ring_sse::{
    last_event_id, EventId, HttpResponse, LastEventIdError, ResumeDecision, StreamState,
    LAST_EVENT_ID_HEADER, REPLAY_FLOOR_HEADER, REPLAY_HEAD_HEADER, REPLAY_STREAM_HEADER,
};
use rmcp::transport::streamable_http_server::session::{SessionId, SessionManager};

mod client_errors;

use crate::manager::ReplayRingSessionManager;
use crate::refusal::{RefusalReason, ResumeRefusal};
use client_errors::{
    answer_body_failure, answer_internal_failure, answer_plain_text, answer_session_cap, BodyKind,
};

/// The response body type of rmcp's `StreamableHttpService` (and of this layer's refusals).
pub type Body = BoxBody<Bytes, Infallible>;

const SESSION_HEADER: &str = "mcp-session-id";
const PROTOCOL_VERSION_HEADER: &str = "mcp-protocol-version";

/// The future of a [`ResumeGuard`] call.
type GuardFuture<E> = Pin<Box<dyn Future<Output = Result<Response<Body>, E>> + Send>>;

/// Layer putting a [`ResumeGuard`] in front of rmcp's `StreamableHttpService`.
#[derive(Debug, Clone)]
pub struct ResumeGuardLayer {
    manager: Arc<ReplayRingSessionManager>,
}

impl ResumeGuardLayer {
    /// A guard consulting `manager` (the one the rmcp service uses).
    pub fn new(manager: Arc<ReplayRingSessionManager>) -> Self {
        ResumeGuardLayer { manager }
    }
}

impl<S> tower_layer::Layer<S> for ResumeGuardLayer {
    type Service = ResumeGuard<S>;
    fn layer(&self, inner: S) -> ResumeGuard<S> {
        ResumeGuard {
            inner,
            manager: self.manager.clone(),
        }
    }
}

/// The service [`ResumeGuardLayer`] builds.
#[derive(Debug, Clone)]
pub struct ResumeGuard<S> {
    inner: S,
    manager: Arc<ReplayRingSessionManager>,
}

impl<S, B> tower_service::Service<Request<B>> for ResumeGuard<S>
where
    S: tower_service::Service<Request<B>, Response = Response<Body>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    // A `DELETE` is served on a task of its own (see `delete`), which hands back the error too.
    S::Error: Send + 'static,
    B: Send + 'static,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = GuardFuture<S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let envelope = Envelope::for_method(req.method());
        let guarded = self.guard(req);
        Box::pin(async move {
            let response = guarded.await?;
            Ok(answer_plain_text(response, envelope).await)
        })
    }
}

impl<S> ResumeGuard<S> {
    /// The guard's answer to `req`, or rmcp's.
    fn guard<B>(&mut self, req: Request<B>) -> GuardFuture<S::Error>
    where
        S: tower_service::Service<Request<B>, Response = Response<Body>> + Clone + Send + 'static,
        S::Future: Send + 'static,
        S::Error: Send + 'static,
        B: Send + 'static,
    {
        if let Some(response) = repeated_header(&req).or_else(|| malformed_session_id(&req)) {
            return Box::pin(async move { Ok(response) });
        }
        if req.method() == Method::DELETE {
            return self.delete(req);
        }
        if req.method() == Method::POST && !req.headers().contains_key(SESSION_HEADER) {
            return self.open_session(req);
        }
        if req.method() != Method::GET {
            return self.in_session(req);
        }
        let values = req.headers().get_all(LAST_EVENT_ID_HEADER);
        // Two values make the cursor ambiguous (rmcp would take the first). A cursor that does
        // not parse is refused before the session is looked at, so every replica answers it
        // alike, whether or not it holds the session.
        let parsed = last_event_id(values.iter().map(HeaderValue::as_bytes)).and_then(|cursor| {
            cursor
                .map(|c| EventId::parse_bytes(c).map(|_| c.to_vec()))
                .transpose()
        });
        let cursor = match parsed {
            Ok(Some(cursor)) => cursor,
            Ok(None) => return self.in_session(req),
            Err(e) => {
                let response = refusal_response(&self.manager.store().malformed(e));
                return Box::pin(async move { Ok(response) });
            }
        };
        let session = session_of(&req);
        if let Some(version) = session.as_ref().and(stateless_protocol_version(&req)) {
            self.manager.store().count_unsupported_version();
            let response = resume_needs_a_session_revision(&version);
            return Box::pin(async move { Ok(response) });
        }
        let mut inner = self.take_ready();
        let manager = self.manager.clone();
        Box::pin(async move {
            let store = manager.store();
            if let Some(session) = &session {
                if !manager.has_session(session).await.unwrap_or(false) {
                    // Another replica's MCP session: with a Redis event log, its stream's resume
                    // is served from Redis (after checking the session recorded there).
                    #[cfg(feature = "redis")]
                    if let Some(response) = store.remote_resume(Some(session), &cursor).await {
                        return Ok(response);
                    }
                    return Ok(refusal_response(&store.session_lost()));
                }
            }
            match store.check_resume(session.as_deref(), &cursor) {
                Ok(_) => {
                    let response = inner.call(req).await?;
                    // A `DELETE` may have raced this resume since the check above.
                    match &session {
                        Some(session) if lost_under(&response, &manager, session).await => {
                            Ok(refusal_response(&store.session_lost()))
                        }
                        _ => Ok(response),
                    }
                }
                Err(refusal) => {
                    // A stream this process no longer holds may still be in Redis.
                    #[cfg(feature = "redis")]
                    if refusal.code() == "stream_lost" {
                        if let Some(response) =
                            store.remote_resume(session.as_deref(), &cursor).await
                        {
                            return Ok(response);
                        }
                    }
                    Ok(refusal_response(&refusal))
                }
            }
        })
    }
}

impl<S: Clone> ResumeGuard<S> {
    /// The inner service that was polled ready, to serve this request; a clone takes its place
    /// (tower's usual swap).
    fn take_ready(&mut self) -> S {
        let clone = self.inner.clone();
        std::mem::replace(&mut self.inner, clone)
    }

    /// A request in a session that is not a resume (a POST, the standalone GET): passed on. rmcp
    /// checks the session first and answers a plain-text 404 if it is gone, and a session deleted
    /// while rmcp serves the request (a `DELETE` racing it), or whose service has ended while the
    /// manager still drains it (closed for inactivity: up to 5 s), fails inside with a 500 (a
    /// `POST`; a `GET` is still served until the drain ends); all are answered 404
    /// `session_lost`, as the transport requires for a request naming an unknown session. A body
    /// that did not arrive or parse is answered as `client_errors.rs` says.
    fn in_session<B>(&mut self, req: Request<B>) -> GuardFuture<S::Error>
    where
        S: tower_service::Service<Request<B>, Response = Response<Body>> + Send + 'static,
        S::Future: Send + 'static,
        B: Send + 'static,
    {
        // A POST without a session went to `open_session`: nothing here has a body to answer for.
        let Some(session) = session_of(&req) else {
            return Box::pin(self.inner.call(req));
        };
        let body = BodyKind::of(&req);
        let envelope = Envelope::for_method(req.method());
        let mut inner = self.take_ready();
        let manager = self.manager.clone();
        Box::pin(async move {
            let response = inner.call(req).await?;
            let response = answer_body_failure(response, body).await;
            if lost_under(&response, &manager, &session).await {
                return Ok(refusal_answer(&session_lost(), envelope));
            }
            let gone = || refusal_answer(&session_lost(), envelope);
            Ok(answer_internal_failure(response, envelope, gone).await)
        })
    }

    /// A `POST` without a session opens one (an `initialize`): refused with 503 while the
    /// manager's session cap is reached.
    fn open_session<B>(&mut self, req: Request<B>) -> GuardFuture<S::Error>
    where
        S: tower_service::Service<Request<B>, Response = Response<Body>> + Send + 'static,
        S::Future: Send + 'static,
        B: Send + 'static,
    {
        let body = BodyKind::of(&req);
        let mut inner = self.take_ready();
        let manager = self.manager.clone();
        Box::pin(async move {
            let limit = manager.max_sessions();
            if manager.session_count().await >= limit {
                return Ok(too_many_sessions(limit));
            }
            let response = inner.call(req).await?;
            let response = answer_body_failure(response, body).await;
            // The manager's own check, made as the session is created, refused it: many requests
            // passed the one above together while their bodies were on the way.
            Ok(answer_session_cap(response, || too_many_sessions(limit)).await)
        })
    }

    /// A `DELETE` of a session this process does not have is answered 404 `session_lost`, as the
    /// MCP transport requires for every request naming an unknown session (rmcp answers 202).
    fn delete<B>(&mut self, req: Request<B>) -> GuardFuture<S::Error>
    where
        S: tower_service::Service<Request<B>, Response = Response<Body>> + Send + 'static,
        S::Future: Send + 'static,
        S::Error: Send + 'static,
        B: Send + 'static,
    {
        let Some(session) = session_of(&req) else {
            return Box::pin(self.inner.call(req));
        };
        let mut inner = self.take_ready();
        let manager = self.manager.clone();
        Box::pin(async move {
            if !manager.has_session(&session).await.unwrap_or(false) {
                return Ok(refusal_response(&session_lost()));
            }
            // Only a DELETE ends a session for good: one that rmcp closes for inactivity may be
            // restored, with its id, from a session store. So a DELETE that rmcp accepted (not
            // one it refused: a foreign `Origin`, a wrong protocol version) is recorded in Redis,
            // and answered once it is. Both run on a task of their own, so that a client that
            // goes away mid-DELETE cannot stop the record of a session rmcp closed.
            #[cfg(feature = "redis")]
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let call = inner.call(req);
                let deleting = runtime.spawn(async move {
                    let response = call.await;
                    if response.as_ref().is_ok_and(|r| r.status().is_success()) {
                        manager.store().mark_session_gone(&session).await;
                    }
                    response
                });
                return deleting
                    .await
                    .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
            }
            inner.call(req).await
        })
    }
}

/// The shape of the guard's error answers, by the request they answer.
///
/// A JSON-RPC error names the request it answers by its id, and the guard answers before rmcp
/// reads the body, so it never knows a `POST`'s id. rmcp 3.11's own client takes an id-less
/// JSON-RPC error in the response to a `POST` for a message from the server, logs it and drops
/// it, and the call that sent the `POST` then waits forever. So a `POST` gets the error object
/// alone (what would be the JSON-RPC error's `data`: `error`, `message`, ...), which every client
/// reports as the HTTP error it is; the other requests (resumes, the standalone `GET`, `DELETE`)
/// get a JSON-RPC error with `id: null`, which clients of those report by status alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Envelope {
    /// `{"jsonrpc": "2.0", "id": null, "error": {"code", "message", "data"}}`.
    JsonRpc,
    /// The `data` object alone.
    Bare,
}

impl Envelope {
    /// The shape for answers to a request with `method`.
    pub(crate) fn for_method(method: &Method) -> Self {
        if method == Method::POST {
            Envelope::Bare
        } else {
            Envelope::JsonRpc
        }
    }
}

/// An error response with `status`, as `application/json`, shaped by `envelope`; `data` names the
/// error (`error`) and says what happened (`message`).
pub(crate) fn error_response(
    envelope: Envelope,
    status: StatusCode,
    code: i64,
    message: &str,
    data: serde_json::Value,
) -> Response<Body> {
    let body = match envelope {
        Envelope::JsonRpc => serde_json::json!({
            "jsonrpc": "2.0",
            "id": null,
            "error": { "code": code, "message": message, "data": data },
        }),
        Envelope::Bare => data,
    };
    let mut resp = Response::new(Full::new(Bytes::from(body.to_string())).boxed());
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// 400 `bad_request` for a request that carries `Mcp-Session-Id` or `MCP-Protocol-Version` more
/// than once: which one counts would be a guess (this guard and rmcp take the first; a proxy may
/// have added the other), as for a repeated `Last-Event-ID`.
fn repeated_header<B>(req: &Request<B>) -> Option<Response<Body>> {
    [
        (SESSION_HEADER, "Mcp-Session-Id"),
        (PROTOCOL_VERSION_HEADER, "MCP-Protocol-Version"),
    ]
    .into_iter()
    .find_map(|(name, shown)| {
        let count = req.headers().get_all(name).iter().count();
        (count > 1).then(|| bad_request(req, &format!("{shown} carried {count} values; send one")))
    })
}

/// 400 `bad_request` for an `Mcp-Session-Id` that is not visible ASCII (0x21 to 0x7E, as the
/// transport requires of every session id): no session has it, and without this it would be
/// read as no session at all.
fn malformed_session_id<B>(req: &Request<B>) -> Option<Response<Body>> {
    let value = req.headers().get(SESSION_HEADER)?;
    if !value.is_empty() && value.as_bytes().iter().all(|b| (0x21..=0x7e).contains(b)) {
        return None;
    }
    Some(bad_request(
        req,
        "Mcp-Session-Id must be visible ASCII (0x21 to 0x7E)",
    ))
}

/// 400 `bad_request` saying `message`, in the shape the request's method calls for.
fn bad_request<B>(req: &Request<B>, message: &str) -> Response<Body> {
    let data = serde_json::json!({ "error": "bad_request", "message": message });
    error_response(
        Envelope::for_method(req.method()),
        StatusCode::BAD_REQUEST,
        crate::STREAM_BROKEN_CODE as i64,
        message,
        data,
    )
}

/// The request's `Mcp-Session-Id`, if it has one that is text.
fn session_of<B>(req: &Request<B>) -> Option<SessionId> {
    req.headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(SessionId::from)
}

/// The `MCP-Protocol-Version` of `req` if it names 2026-07-28 or later, the revisions without
/// sessions and without resumability. rmcp serves a `GET` with such a version through its
/// stateless path, which answers a cursor it cannot replay with an empty `200`.
fn stateless_protocol_version<B>(req: &Request<B>) -> Option<String> {
    let value = req.headers().get(PROTOCOL_VERSION_HEADER)?;
    // Not text: rmcp answers it 400 itself.
    let version = value.to_str().ok()?;
    // Revisions are dates (`YYYY-MM-DD`), so they order as text (as rmcp compares them). Anything
    // else (`latest`, `v2`) names no revision: rmcp refuses it as unsupported.
    let is_date = version.len() == 10
        && version.bytes().enumerate().all(|(i, b)| match i {
            4 | 7 => b == b'-',
            _ => b.is_ascii_digit(),
        });
    (is_date && version >= rmcp::model::ProtocolVersion::V_2026_07_28.as_str())
        .then(|| version.to_owned())
}

/// 400 for a resume in an MCP session that names a revision without sessions: the session
/// negotiated an earlier revision, so the header contradicts it (the transport answers an
/// unsupported `MCP-Protocol-Version` with 400), and rmcp would look for the stream outside any
/// session and find none.
fn resume_needs_a_session_revision(version: &str) -> Response<Body> {
    let message = format!(
        "MCP-Protocol-Version {version} has no resumable streams: resume with the revision the \
         session negotiated (2025-03-26 to 2025-11-25)"
    );
    let data = serde_json::json!({
        "error": "unsupported_protocol_version",
        "message": message,
        "version": version,
    });
    error_response(
        Envelope::JsonRpc,
        StatusCode::BAD_REQUEST,
        crate::STREAM_BROKEN_CODE.into(),
        &message,
        data,
    )
}

/// The refusal for a request, other than a resume, naming a session that is gone: built here
/// rather than counted among the refused resumes.
/// Whether rmcp's `response` to a request of `session` means the session went away under it:
/// rmcp's own 404 for a session it does not have (plain text), or a 500 for a session deleted
/// while rmcp served the request (a 500 for a session that still exists is something else, such
/// as a stream the event log could not create).
async fn lost_under(
    response: &Response<Body>,
    manager: &ReplayRingSessionManager,
    session: &SessionId,
) -> bool {
    let status = response.status();
    (status == StatusCode::NOT_FOUND || status == StatusCode::INTERNAL_SERVER_ERROR)
        && !manager.has_session(session).await.unwrap_or(true)
}

fn session_lost() -> ResumeRefusal {
    ResumeRefusal {
        reason: RefusalReason::Decision(ResumeDecision::SessionLost),
        state: None,
    }
}

/// The HTTP status for a refusal (see the module table): the SSE layer's mapping for its
/// decisions, 404 for a stream of another MCP session (as for any stream this session does not
/// have), 410 for the last id of a stream that has ended.
///
/// ```
/// use replay_ring_mcp::{refusal_status, RefusalReason, ResumeRefusal};
/// use replay_ring::CloseReason;
///
/// let done = ResumeRefusal { reason: RefusalReason::StreamEnded(CloseReason::Completed), state: None };
/// assert_eq!(refusal_status(&done), http::StatusCode::GONE);
/// let stream = replay_ring_sse::StreamId::new("s1").unwrap();
/// let foreign = ResumeRefusal { reason: RefusalReason::ForeignSession { stream }, state: None };
/// assert_eq!(refusal_status(&foreign), http::StatusCode::NOT_FOUND);
/// ```
pub fn refusal_status(refusal: &ResumeRefusal) -> StatusCode {
    match &refusal.reason {
        RefusalReason::Decision(d) => {
            StatusCode::from_u16(replay_ring_sse::status_for(d)).unwrap_or(StatusCode::BAD_REQUEST)
        }
        RefusalReason::ForeignSession { .. } => StatusCode::NOT_FOUND,
        RefusalReason::StreamEnded(_) => StatusCode::GONE,
    }
}

/// A JSON-RPC error response (`id: null`, code -32000) whose `data` is the SSE layer's
/// machine-readable body (`error`, `message`, `floor`, `head`, ...).
///
/// ```
/// use replay_ring_mcp::{refusal_response, RefusalReason, ResumeRefusal};
/// use replay_ring::CloseReason;
///
/// let done = ResumeRefusal { reason: RefusalReason::StreamEnded(CloseReason::Completed), state: None };
/// let resp = refusal_response(&done);
/// assert_eq!(resp.status(), 410);
/// assert_eq!(resp.headers()["content-type"], "application/json");
/// ```
pub fn refusal_response(refusal: &ResumeRefusal) -> Response<Body> {
    refusal_answer(refusal, Envelope::JsonRpc)
}

/// [`refusal_response`] in the shape `envelope` asks for.
fn refusal_answer(refusal: &ResumeRefusal, envelope: Envelope) -> Response<Body> {
    let sse = match &refusal.reason {
        RefusalReason::Decision(d) => HttpResponse::for_decision(d, refusal.state.as_ref()),
        // A foreign stream is answered exactly like an unknown one, and without its window.
        RefusalReason::ForeignSession { stream } => HttpResponse::for_decision(
            &ResumeDecision::StreamLost(LastEventIdError::UnknownStream { stream: *stream }),
            None,
        ),
        RefusalReason::StreamEnded(_) => ended_response(refusal.state.as_ref()),
    };
    let mut data: serde_json::Value =
        serde_json::from_slice(&sse.body).unwrap_or_else(|_| serde_json::json!({}));
    if !data.is_object() {
        data = serde_json::json!({});
    }
    data["error"] = refusal.code().into();
    data["message"] = refusal.to_string().into();
    if let RefusalReason::StreamEnded(reason) = &refusal.reason {
        data["reason"] = reason.to_string().into();
        if let Some(state) = &refusal.state {
            data["floor"] = state.floor.into();
            data["head"] = state.head.into();
        }
    }
    let mut resp = error_response(
        envelope,
        refusal_status(refusal),
        crate::STREAM_BROKEN_CODE.into(),
        &refusal.to_string(),
        data,
    );
    for (name, value) in sse.headers.iter().filter(|(n, _)| *n != "content-type") {
        if let Ok(v) = HeaderValue::from_str(value) {
            resp.headers_mut().insert(*name, v);
        }
    }
    resp
}

/// 503 for a request that would open a session beyond the cap (a `POST`: the bare error object).
fn too_many_sessions(limit: usize) -> Response<Body> {
    let message = format!("all {limit} MCP sessions of this server are open; retry later");
    let data =
        serde_json::json!({ "error": "too_many_sessions", "message": message, "limit": limit });
    let mut resp = error_response(
        Envelope::Bare,
        StatusCode::SERVICE_UNAVAILABLE,
        crate::STREAM_BROKEN_CODE.into(),
        &message,
        data,
    );
    resp.headers_mut()
        .insert(http::header::RETRY_AFTER, HeaderValue::from_static("1"));
    resp
}

/// Headers of a 410 for a stream that has ended (its body is filled in by the caller).
fn ended_response(state: Option<&StreamState>) -> HttpResponse {
    let mut headers = vec![("cache-control", "no-store".to_owned())];
    if let Some(s) = state {
        headers.push((REPLAY_FLOOR_HEADER, s.floor.to_string()));
        headers.push((REPLAY_HEAD_HEADER, s.head.to_string()));
        headers.push((
            REPLAY_STREAM_HEADER,
            format!("{}.{}", s.identity.stream, s.identity.epoch),
        ));
    }
    HttpResponse {
        status: StatusCode::GONE.as_u16(),
        headers,
        body: Bytes::new(),
    }
}
