//! rmcp's client errors, answered as JSON like every other refusal of the guard. rmcp 3.11
//! answers them in plain text, and two of them with the wrong status. Answers to a `POST` are the
//! bare error object and the others a JSON-RPC error with `id: null` (see `Envelope` for why).
//!
//! A `POST` body that could not be used: rmcp answers a JSON body that does not deserialize as a
//! JSON-RPC message with `415 Unsupported Media Type` (as for a `Content-Type` other than JSON),
//! and a body that could not be read (the client stopped sending, sent a bad chunk, or ran out the
//! server's body read timeout) with `500 Internal Server Error`. The guard answers instead:
//!
//! | body | status | `error` |
//! |---|---|---|
//! | declared `application/json`, not a JSON-RPC message | 400 | `invalid_json_rpc` (+ `detail`) |
//! | ended before it was complete, or malformed framing | 400 | `incomplete_body` (+ `detail`) |
//! | not complete within the body read timeout | 408 | `body_timeout` |
//!
//! The cases are told apart by rmcp's status and the start of its text, which this module pins
//! (rmcp is pinned to 3.11); a response that does not match passes unchanged.
//!
//! Every other plain-text 4xx of rmcp (406 for an `Accept` without `text/event-stream`, 405 for
//! another method, 413 for a body over its limit, 415 for another `Content-Type`, 403 for a
//! `Host` or `Origin` it does not allow, 400 for a missing session id or an unsupported protocol
//! version) keeps its status and headers (`Allow` on a 405), with rmcp's text as `message` and an
//! `error` naming the status (`not_acceptable`, `method_not_allowed`, `payload_too_large`,
//! `unsupported_media_type`, `forbidden`, `bad_request`); as a JSON-RPC error its code is -32000.

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};

use super::{error_response, Body, Envelope};

/// How rmcp 3.11 begins the body of a 415 for a body that did not deserialize.
const RMCP_PARSE_FAILURE: &str = "fail to deserialize request body";
/// How rmcp 3.11 begins the body of a 500 for a body that could not be read.
const RMCP_READ_FAILURE: &str = "Failed to read request body:";
/// The body error of `replay_ring_sse::axum::serve`'s body read timeout: `BodyTimedOut`'s text,
/// which lives behind `replay-ring-sse`'s `axum` feature (this crate does not enable it); the test
/// `a_post_body_that_breaks_off_is_a_client_error_not_500` sends the real error, so the two cannot
/// drift apart unnoticed.
const BODY_TIMED_OUT: &str = "the request body did not arrive within the body read timeout";
const JSON: &str = "application/json";
const EVENT_STREAM: &str = "text/event-stream";
/// rmcp's texts are a line or two; a longer body is not one of them.
const TEXT_LIMIT: usize = 4096;

/// What a request's body is, as far as the answers here go.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BodyKind {
    post: bool,
    json: bool,
}

impl BodyKind {
    pub(crate) fn of<B>(req: &Request<B>) -> Self {
        BodyKind {
            post: req.method() == Method::POST,
            json: media_type(req.headers()).is_some_and(|m| m.eq_ignore_ascii_case(JSON)),
        }
    }
}

/// `response` from rmcp, or the client error it stands for (see the module table).
pub(crate) async fn answer_body_failure(
    response: Response<Body>,
    body: BodyKind,
) -> Response<Body> {
    let status = response.status();
    let parse_failure = body.post && body.json && status == StatusCode::UNSUPPORTED_MEDIA_TYPE;
    let read_failure = body.post && status == StatusCode::INTERNAL_SERVER_ERROR;
    if !parse_failure && !read_failure {
        return response;
    }
    let (parts, text) = match read_text(response).await {
        Ok(read) => read,
        Err(emptied) => return emptied,
    };
    let detail = String::from_utf8_lossy(&text).trim().to_owned();
    if parse_failure {
        let detail = detail.strip_prefix(RMCP_PARSE_FAILURE).unwrap_or(&detail);
        return client_error(
            Envelope::Bare,
            StatusCode::BAD_REQUEST,
            "invalid_json_rpc",
            "Parse error: the request body is not a JSON-RPC message",
            detail.trim(),
        );
    }
    match detail.strip_prefix(RMCP_READ_FAILURE).map(str::trim) {
        Some(reason) if reason.contains(BODY_TIMED_OUT) => client_error(
            Envelope::Bare,
            StatusCode::REQUEST_TIMEOUT,
            "body_timeout",
            "the request body did not arrive within the server's body read timeout",
            "",
        ),
        Some(reason) => client_error(
            Envelope::Bare,
            StatusCode::BAD_REQUEST,
            "incomplete_body",
            "Parse error: the request body ended before it was complete",
            reason,
        ),
        None => Response::from_parts(parts, Full::new(text).boxed()),
    }
}

/// rmcp's text for a request in a session whose service has ended: closed for inactivity, or
/// ending after a `DELETE`. The session manager still holds such a session while rmcp drains it
/// (up to 5 s), so a check of the manager does not tell it from a live one.
const SESSION_SERVICE_TERMINATED: &str = "Session service terminated";

/// `response` from rmcp, or, if it is rmcp's plain-text 500:
/// - `session_gone()` when the session's service has ended (the session is lost, though the
///   manager still drains it);
/// - a 503 with `Retry-After` for a refusal or failure of the session manager that the request
///   can be sent again after: `too_many_streams` when the session or the whole server holds its
///   most request streams, and (with a Redis event log) `backend_unavailable` when the event log
///   failed the request's new stream or its first event, as a resume refused while Redis is down
///   is.
pub(crate) async fn answer_internal_failure(
    response: Response<Body>,
    envelope: Envelope,
    session_gone: impl FnOnce() -> Response<Body>,
) -> Response<Body> {
    let (parts, text) = match plain_text_500(response).await {
        Ok(read) => read,
        Err(other) => return other,
    };
    let full = String::from_utf8_lossy(&text);
    if full.contains(SESSION_SERVICE_TERMINATED) {
        return session_gone();
    }
    // rmcp prefixes the manager's text with its own ("Encounter an error when get session: "):
    // the detail starts at the manager's, which is what a client can act on.
    let detail = [
        crate::manager::TOO_MANY_STREAMS,
        crate::manager::TOO_MANY_SERVER_STREAMS,
    ]
    .iter()
    .find_map(|marker| full.find(marker).map(|at| &full[at..]))
    .unwrap_or(&full);
    let (error, message, retry_after) = if detail.contains(crate::manager::TOO_MANY_STREAMS) {
        (
            "too_many_streams",
            "this MCP session holds its most request streams; retry later",
            stated_retry_after(detail).unwrap_or(1),
        )
    } else if detail.contains(crate::manager::TOO_MANY_SERVER_STREAMS) {
        (
            "too_many_streams",
            "this server holds its most request streams; retry later",
            stated_retry_after(detail).unwrap_or(1),
        )
    } else if is_event_log_failure(detail) {
        (
            "backend_unavailable",
            "the event log on Redis failed this request; retry later",
            1,
        )
    } else {
        return Response::from_parts(parts, Full::new(text).boxed());
    };
    let mut answer = client_error(
        envelope,
        StatusCode::SERVICE_UNAVAILABLE,
        error,
        message,
        detail.trim(),
    );
    answer.headers_mut().insert(
        http::header::RETRY_AFTER,
        http::HeaderValue::from(retry_after),
    );
    answer
}

/// `response` from rmcp, or `refusal()` if it is rmcp's plain-text 500 for the manager's
/// [`TooManySessions`](crate::ManagerError::TooManySessions).
pub(crate) async fn answer_session_cap(
    response: Response<Body>,
    refusal: impl FnOnce() -> Response<Body>,
) -> Response<Body> {
    let (parts, text) = match plain_text_500(response).await {
        Ok(read) => read,
        Err(other) => return other,
    };
    if String::from_utf8_lossy(&text).contains(crate::manager::TOO_MANY_SESSIONS) {
        return refusal();
    }
    Response::from_parts(parts, Full::new(text).boxed())
}

/// rmcp's plain-text 500 as its parts and text; any other response as `Err`, unchanged (or
/// emptied, if its text could not be read).
async fn plain_text_500(
    response: Response<Body>,
) -> Result<(http::response::Parts, Bytes), Response<Body>> {
    if response.status() != StatusCode::INTERNAL_SERVER_ERROR || is_structured(response.headers()) {
        return Err(response);
    }
    read_text(response).await
}

/// The whole seconds the manager's refusal text states after
/// [`RETRY_AFTER_MARK`](crate::manager::RETRY_AFTER_MARK), if it does.
fn stated_retry_after(text: &str) -> Option<u64> {
    let (_, rest) = text.split_once(crate::manager::RETRY_AFTER_MARK)?;
    let digits = rest.split(|c: char| !c.is_ascii_digit()).next()?;
    digits.parse().ok()
}

/// Whether rmcp's text is that of a failure of the event log on Redis.
#[cfg(feature = "redis")]
fn is_event_log_failure(text: &str) -> bool {
    text.contains(crate::redis_log::EVENT_LOG)
}

#[cfg(not(feature = "redis"))]
fn is_event_log_failure(_text: &str) -> bool {
    false
}

/// JSON-RPC's first implementation-defined server error, which the MCP SDKs' servers use for
/// refusals at the transport level.
const TRANSPORT_ERROR_CODE: i64 = crate::STREAM_BROKEN_CODE as i64;

/// `response` from rmcp, as a JSON error in the shape `envelope` asks for if it is a client error
/// in plain text (see the module docs); anything else passes unchanged.
pub(crate) async fn answer_plain_text(
    response: Response<Body>,
    envelope: Envelope,
) -> Response<Body> {
    if !response.status().is_client_error() || is_structured(response.headers()) {
        return response;
    }
    let (parts, text) = match read_text(response).await {
        Ok(read) => read,
        // Longer than rmcp's own texts (it can echo what the client sent, a header say) or
        // unreadable: still a JSON error, with the status's own reason as its message.
        Err(emptied) => (emptied.into_parts().0, Bytes::new()),
    };
    let status = parts.status;
    let reason = status.canonical_reason().unwrap_or("Client Error");
    let text = String::from_utf8_lossy(&text);
    let message = match text.trim() {
        "" => reason,
        text => text,
    };
    let error = reason.to_ascii_lowercase().replace([' ', '-'], "_");
    let mut answer = client_error(envelope, status, &error, message, "");
    // What rmcp says about what to do next (`Allow` on a 405) stays; the body's own headers go.
    for (name, value) in &parts.headers {
        if name != http::header::CONTENT_TYPE && name != http::header::CONTENT_LENGTH {
            answer.headers_mut().append(name, value.clone());
        }
    }
    answer
}

/// The head and body of a plain-text response, or (`Err`) the response with an empty body when
/// the body is longer than any of rmcp's texts (so not one of them) or could not be read: by then
/// it is consumed either way.
async fn read_text(
    response: Response<Body>,
) -> Result<(http::response::Parts, Bytes), Response<Body>> {
    let (parts, inner) = response.into_parts();
    match Limited::new(inner, TEXT_LIMIT).collect().await {
        Ok(text) => Ok((parts, text.to_bytes())),
        Err(_) => Err(Response::from_parts(parts, Full::new(Bytes::new()).boxed())),
    }
}

/// Whether a response already has a body in a format clients parse (JSON, or an event stream).
fn is_structured(headers: &HeaderMap) -> bool {
    media_type(headers)
        .is_some_and(|m| m.eq_ignore_ascii_case(JSON) || m.eq_ignore_ascii_case(EVENT_STREAM))
}

/// The media type of a `Content-Type` (its parameters, such as `charset`, left out).
fn media_type(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(http::header::CONTENT_TYPE)?.to_str().ok()?;
    value.split(';').next().map(str::trim)
}

/// A client error whose JSON names it (`error`), says what happened (`message`) and, when there
/// is one, what the server saw (`detail`); as a JSON-RPC error, with code -32000.
fn client_error(
    envelope: Envelope,
    status: StatusCode,
    error: &str,
    message: &str,
    detail: &str,
) -> Response<Body> {
    let mut data = serde_json::json!({ "error": error, "message": message });
    if !detail.is_empty() {
        data["detail"] = detail.into();
    }
    error_response(envelope, status, TRANSPORT_ERROR_CODE, message, data)
}

#[cfg(all(test, feature = "redis"))]
mod tests {
    use super::*;

    fn plain_500(text: &str) -> Response<Body> {
        Response::builder()
            .status(StatusCode::INTERNAL_SERVER_ERROR)
            .body(Full::new(Bytes::from(text.to_owned())).boxed())
            .unwrap()
    }

    /// A stand-in for the layer's `session_lost` answer.
    fn gone() -> Response<Body> {
        Response::builder()
            .status(StatusCode::NOT_FOUND)
            .body(Full::new(Bytes::new()).boxed())
            .unwrap()
    }

    async fn body_text(response: Response<Body>) -> String {
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn a_500_for_an_event_log_failure_is_503_backend_unavailable() {
        let text = format!(
            "Encounter an error when get session: Session error: Event store error: {}: \
             redis unavailable: Connection refused",
            crate::redis_log::EVENT_LOG
        );
        let answer = answer_internal_failure(plain_500(&text), Envelope::Bare, gone).await;
        assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(answer.headers()[http::header::RETRY_AFTER], "1");
        let body: serde_json::Value = serde_json::from_str(&body_text(answer).await).unwrap();
        assert_eq!(body["error"], "backend_unavailable");
        assert!(body["detail"]
            .as_str()
            .unwrap()
            .contains("Connection refused"));
    }

    #[tokio::test]
    async fn any_other_500_passes_unchanged() {
        let text = "Encounter an error when get session: worker gone";
        let answer = answer_internal_failure(plain_500(text), Envelope::Bare, gone).await;
        assert_eq!(answer.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(body_text(answer).await, text);
    }

    #[tokio::test]
    async fn a_500_for_a_terminated_session_service_is_the_session_gone_answer() {
        for text in [
            "Encounter an error when get session: Session error: Session service terminated",
            "Encounter an error when accept message: Session error: Session service terminated",
        ] {
            let answer = answer_internal_failure(plain_500(text), Envelope::Bare, gone).await;
            assert_eq!(answer.status(), StatusCode::NOT_FOUND, "{text}");
        }
    }
}
