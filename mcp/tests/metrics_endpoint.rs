//! The demo app's `GET /metrics` in-process (no sockets): the store's counters and gauges
//! through the `metrics` facade.

use axum::body::Body;
use axum::Router;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use replay_ring_mcp::StoreConfig;
use replay_ring_mcp_demo::{app, Storage};

mod in_process;

use in_process::{call, events, get, initialize, long_task, post, replayed};

/// `GET /metrics`, parsed: `(name, kind, value)` for every `replay_ring_mcp_*` series.
async fn scrape(app: &Router) -> Vec<(String, String, u64)> {
    let req = Request::get("/metrics").body(Body::empty()).unwrap();
    let resp = call(app, req).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    let kind_of = |name: &str| {
        let prefix = format!("# TYPE {name} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("no TYPE line for {name}:\n{text}"))
            .to_owned()
    };
    text.lines()
        .filter(|l| l.starts_with("replay_ring_mcp_"))
        .map(|l| {
            let (name, value) = l.split_once(' ').unwrap();
            (name.to_owned(), kind_of(name), value.parse().unwrap())
        })
        .collect()
}

fn series<'a>(scraped: &'a [(String, String, u64)], name: &str) -> (&'a str, u64) {
    scraped
        .iter()
        .find(|(n, _, _)| n == &format!("replay_ring_mcp_{name}"))
        .map(|(_, kind, value)| (kind.as_str(), *value))
        .unwrap_or_else(|| panic!("{name} missing from /metrics: {scraped:?}"))
}

/// `/metrics` is the store's snapshot through the `metrics` facade: every field under its name,
/// monotonic counters as counters, the store's state as gauges, and a later scrape shows later
/// activity.
#[tokio::test]
async fn metrics_endpoint_publishes_the_store_counters_through_the_facade() {
    let (app, store) = app(Storage::ReplayRing(StoreConfig::default()));
    let store = store.expect("replay-ring storage has a store");
    let session = initialize(&app).await;
    let all = events(call(&app, post(Some(&session), long_task(1, 3))).await, 100).await;
    let last = all.last().unwrap().id.clone().unwrap();
    let (prefix, _) = last.rsplit_once('.').unwrap();
    let cursor = format!("{prefix}.2");
    let replay = replayed(call(&app, get(&session, Some(&cursor))).await, &cursor, 100).await;
    assert_eq!(replay.len(), 3, "{replay:?}");
    for cursor in [format!("{prefix}.99"), "0".to_owned()] {
        let resp = call(&app, get(&session, Some(&cursor))).await;
        assert!(resp.status().is_client_error(), "{cursor}: {resp:?}");
    }

    let before = scrape(&app).await;
    let m = store.metrics();
    assert_eq!(before.len(), m.fields().len(), "{before:?}");
    for (field, value) in m.fields() {
        let gauge = matches!(
            field,
            "streams_open"
                | "retained"
                | "readers_active"
                | "producer_full"
                | "producer_waits"
                | "ack_releases"
                | "window_releases"
                | "slow_consumers_cut"
        );
        let kind = if gauge { "gauge" } else { "counter" };
        assert_eq!(series(&before, field), (kind, value), "{field}");
    }
    assert_eq!(series(&before, "resumes_ok").1, 1);
    assert_eq!(series(&before, "resumes_ahead_of_head").1, 1);
    assert_eq!(series(&before, "resumes_malformed").1, 1);
    assert_eq!(series(&before, "resumes_refused_total").1, 2);
    assert!(series(&before, "events_stored").1 >= 5, "{before:?}");

    // A second call: its priming event, three progress notifications and its result.
    let second = events(call(&app, post(Some(&session), long_task(2, 3))).await, 100).await;
    assert_eq!(second.len(), 5, "{second:?}");
    let after = scrape(&app).await;
    assert_eq!(
        series(&after, "events_stored").1,
        series(&before, "events_stored").1 + 5
    );
    assert_eq!(
        series(&after, "streams_created").1,
        series(&before, "streams_created").1 + 1
    );
}
