//! A deadline for the whole request body, counted from the request head: a client that trickles
//! its body (a byte now and then) moves bytes, so the idle timeout never closes its connection,
//! and without a deadline it holds a connection, and the handler reading the body, for as long
//! as it likes.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use ::axum::body::Body;
use ::axum::extract::State;
use ::axum::http::Request;
use ::axum::BoxError;
use bytes::Bytes;
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use super::serve_stats::{count, Closed};
use crate::deadline::after_tokio;

/// Middleware (`map_request_with_state`): gives the request's body until `timeout` after now to
/// arrive in full; a body still arriving then ends with [`BodyTimedOut`], which the handler
/// reading it answers as a bad body, and the connection closes after that response.
pub(super) async fn with_body_deadline(
    State(timeout): State<Duration>,
    request: Request<Body>,
) -> Request<Body> {
    let deadline = after_tokio(Instant::now(), timeout);
    request.map(|inner| {
        Body::new(BodyDeadline {
            inner,
            deadline,
            sleep: None,
            timed_out: false,
        })
    })
}

/// The request body did not arrive in full within `ServeConfig::body_read_timeout`.
#[derive(Debug)]
pub struct BodyTimedOut;

impl std::fmt::Display for BodyTimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the request body did not arrive within the body read timeout")
    }
}

impl std::error::Error for BodyTimedOut {}

struct BodyDeadline {
    inner: Body,
    deadline: Instant,
    /// Armed at the first poll that finds no data ready: a body that is there at once (and every
    /// body-less request) costs no timer.
    sleep: Option<Pin<Box<Sleep>>>,
    /// The deadline has passed and been reported (and counted) once.
    timed_out: bool,
}

impl HttpBody for BodyDeadline {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(BoxError::from)));
        }
        let deadline = this.deadline;
        let sleep = this
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => {
                if !std::mem::replace(&mut this.timed_out, true) {
                    count(Closed::BodyReadTimeout);
                }
                Poll::Ready(Some(Err(BodyTimedOut.into())))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
