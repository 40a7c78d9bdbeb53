//! [`serve`](super::serve) switches no protocol: an upgraded connection (a WebSocket, a `CONNECT`
//! tunnel) belongs to its handler, outside the connection cap, the timeouts and the graceful
//! shutdown that are the point of `serve`. A request for a switch is answered with an explicit
//! `501` instead, which the client can act on, rather than a `101` followed by a closed
//! connection.

use ::axum::body::Body;
use ::axum::extract::Request;
use ::axum::http::{header, HeaderValue, Method, StatusCode};
use ::axum::middleware::Next;
use ::axum::response::Response;

/// Middleware (`from_fn`): takes the request's upgrade away from the handler, so that a handler
/// waiting for one fails at once (rather than when the connection ends), and answers a switch
/// with `501 Not Implemented` and a JSON body. A switch is a `101 Switching Protocols`, a `2xx`
/// answer to `CONNECT`, or the `426 Upgrade Required` with which an extractor such as axum's
/// `WebSocketUpgrade` refuses a request whose upgrade it cannot take.
pub(super) async fn refuse_upgrades(mut request: Request, next: Next) -> Response {
    let tunnel = request.method() == Method::CONNECT;
    let asks_to_switch = tunnel || request.headers().contains_key(header::UPGRADE);
    request
        .extensions_mut()
        .remove::<hyper::upgrade::OnUpgrade>();
    let response = next.run(request).await;
    let status = response.status();
    let switch = status == StatusCode::SWITCHING_PROTOCOLS
        || (tunnel && status.is_success())
        || (asks_to_switch && status == StatusCode::UPGRADE_REQUIRED);
    if !switch {
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
