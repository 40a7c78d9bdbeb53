//! What rmcp gets from the session manager when a resume passed the guard's check and then the
//! check no longer holds (another connection took the last reader slot, the window moved, the
//! stream went away, the session was deleted). The race cannot be timed from a test, so these
//! call the manager the way rmcp does once the guard has let a resume through, or put a service
//! between the guard and rmcp that makes the check stale. Every answer from the manager starts
//! with the client's cursor, so that a client which tracks its last event id per connection (the
//! TypeScript SDK) reconnects from it and is told what happened, instead of opening a new stream
//! at the head.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::StreamExt;
use replay_ring_mcp::{ReplayRingSessionManager, ResumeGuardLayer, RingEventStore, StoreConfig};
use replay_ring_mcp_demo::{app, Storage};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::{
    ServerSseMessage, SessionId, SessionManager,
};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

mod in_process;

use in_process::{
    call, events, events_from, get, initialize, json_body, long_task, post, replayed,
};

fn ring_app(config: StoreConfig) -> (axum::Router, RingEventStore) {
    let (app, store) = app(Storage::ReplayRing(config));
    (app, store.expect("replay-ring storage has a store"))
}

/// `manager.resume(session, cursor)` on a manager over `store`, collected.
async fn resume(store: &RingEventStore, session: &str, cursor: &str) -> Vec<ServerSseMessage> {
    let manager = ReplayRingSessionManager::new(store.clone(), LocalSessionManager::default());
    manager
        .resume(&SessionId::from(session), cursor.to_owned())
        .await
        .unwrap()
        .collect()
        .await
}

/// A new session, and the cursor of its GET stream's priming event (the stream opened, then left).
async fn session_and_get_stream_cursor(app: &axum::Router) -> (String, String) {
    let session = initialize(app).await;
    let mut live = call(app, get(&session, None)).await.into_body();
    let got = events_from(&mut live, 2).await;
    let cursor = got.iter().find_map(|e| e.id.clone());
    (
        session,
        cursor.unwrap_or_else(|| panic!("not primed: {got:?}")),
    )
}

/// Asserts that `frame` is the priming event naming `cursor`: its id, no message, a retry hint.
fn assert_names_the_cursor(frame: &ServerSseMessage, cursor: &str) {
    assert_eq!(frame.event_id.as_deref(), Some(cursor), "{frame:?}");
    assert!(
        frame.message.is_none() && frame.retry.is_some(),
        "{frame:?}"
    );
}

/// The guard's check and the manager's resume race for the last reader slot. A resume that loses
/// it after passing the check ends with its cursor and a retry hint, so its client comes back
/// from the same place; a JSON-RPC error would end the request, whose result another connection
/// may still deliver (two final answers to one request).
#[tokio::test]
async fn a_resume_that_loses_the_last_reader_slot_after_the_check_is_told_to_retry() {
    let (app, store) = ring_app(StoreConfig {
        max_readers: 1,
        ..StoreConfig::default()
    });
    let session = initialize(&app).await;
    let all = events(call(&app, post(Some(&session), long_task(1, 3))).await, 100).await;
    let cursor = all[1].id.clone().unwrap();
    let held = call(&app, get(&session, Some(&cursor))).await;
    assert_eq!(held.status(), http::StatusCode::OK);
    let frames = resume(&store, &session, &cursor).await;
    assert_eq!(frames.len(), 1, "{frames:?}");
    assert_names_the_cursor(&frames[0], &cursor);
    assert_eq!(store.metrics().resumes_busy, 1);
    // The retry once the slot is free gets the rest of the call, result included.
    drop(held);
    let again = call(&app, get(&session, Some(&cursor))).await;
    let rest = replayed(again, &cursor, 100).await;
    assert_eq!(rest.last().unwrap().id, all.last().unwrap().id);
}

/// A resume of the session's GET stream that the store refuses after the guard's check (here the
/// stream is gone; a window that moved gives the same answer): the cursor, then the retry hint.
/// The GET stream answers no request, so there is no error response to send; the reconnect names
/// the cursor and gets the guard's explicit status.
#[tokio::test]
async fn a_get_stream_resume_refused_after_the_check_names_its_cursor_before_the_retry_hint() {
    let (app, store) = ring_app(StoreConfig::default());
    let (session, cursor) = session_and_get_stream_cursor(&app).await;
    assert!(store
        .check_resume(Some(&session), cursor.as_bytes())
        .is_ok());
    store.drop_session(&session);
    let frames = resume(&store, &session, &cursor).await;
    assert_eq!(frames.len(), 2, "{frames:?}");
    assert_names_the_cursor(&frames[0], &cursor);
    assert!(
        frames[1].event_id.is_none() && frames[1].message.is_none() && frames[1].retry.is_some(),
        "{frames:?}"
    );
}

/// A server with no tools: the session's GET stream is all these tests resume.
#[derive(Clone)]
struct NoTools;

impl rmcp::ServerHandler for NoTools {}

/// Between the guard and rmcp: closes the session of every resume before rmcp sees it, as a
/// `DELETE` that lands right after the guard's check does.
#[derive(Clone)]
struct DeleteBeforeRmcp<S> {
    inner: S,
    manager: Arc<ReplayRingSessionManager>,
}

impl<S, B> tower::Service<http::Request<B>> for DeleteBeforeRmcp<S>
where
    S: tower::Service<http::Request<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let resume = req.headers().contains_key("last-event-id");
        let session = req.headers().get("mcp-session-id").cloned();
        let manager = self.manager.clone();
        let call = self.inner.call(req);
        Box::pin(async move {
            if let (true, Some(session)) = (resume, session) {
                let id = SessionId::from(session.to_str().unwrap());
                manager.close_session(&id).await.unwrap();
            }
            call.await
        })
    }
}

/// A resume whose session is deleted after the guard found it, before rmcp serves it (a
/// `DELETE` racing the resume): answered 404 `session_lost`, as a resume of a session already
/// gone is, not rmcp's own 404.
#[tokio::test]
async fn a_resume_whose_session_is_deleted_after_the_check_is_404_session_lost() {
    let store = RingEventStore::new(StoreConfig::default());
    // Streams start with a priming event (its `retry:` hint), whose id the resume sends.
    let retry = Some(store.config().retry);
    let mut local = LocalSessionManager::default();
    local.session_config.sse_retry = retry;
    let manager = Arc::new(ReplayRingSessionManager::new(store, local));
    let service = StreamableHttpService::new(
        || Ok(NoTools),
        manager.clone(),
        StreamableHttpServerConfig::default().with_sse_retry(retry),
    );
    let racing = DeleteBeforeRmcp {
        inner: service,
        manager: manager.clone(),
    };
    let guarded = tower_layer::Layer::layer(&ResumeGuardLayer::new(manager), racing);
    let app = axum::Router::new().nest_service("/mcp", guarded);

    let (session, cursor) = session_and_get_stream_cursor(&app).await;
    let resp = call(&app, get(&session, Some(&cursor))).await;
    assert_eq!(resp.status(), http::StatusCode::NOT_FOUND);
    let body = json_body(resp).await;
    assert_eq!(body["error"]["data"]["error"], "session_lost", "{body}");
    assert!(body["id"].is_null(), "{body}");
}
