//! [`serve`](super::serve) switches no protocol: an upgraded connection (a WebSocket, a `CONNECT`
//! tunnel) belongs to its handler, outside the connection cap, the timeouts and the graceful
//! shutdown that are the point of `serve`. A handler's protocol switch is answered with an
//! explicit `501` instead, which the client can act on, rather than a `101` followed by a closed
//! connection.

use ::axum::body::Body;
use ::axum::extract::Request;
use ::axum::http::{header, HeaderValue, Method, StatusCode};
use ::axum::middleware::Next;
use ::axum::response::Response;

/// Middleware (`from_fn`): replaces a protocol switch — a `101 Switching Protocols`, or a `2xx`
/// answer to `CONNECT` — with `501 Not Implemented` and a JSON body. Hyper then keeps the
/// connection, and the handler waiting for the upgrade gets an error.
pub(super) async fn refuse_upgrades(request: Request, next: Next) -> Response {
    let tunnel = request.method() == Method::CONNECT;
    let response = next.run(request).await;
    let status = response.status();
    if status != StatusCode::SWITCHING_PROTOCOLS && !(tunnel && status.is_success()) {
        return response;
    }
    let body = serde_json::json!({
        "error": "upgrade_not_supported",
        "message": "this server does not switch protocols: serve upgrades (WebSocket, CONNECT) \
                    from a server of their own",
    })
    .to_string();
    let mut refused = Response::new(Body::from(body));
    *refused.status_mut() = StatusCode::NOT_IMPLEMENTED;
    refused.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    refused
}
