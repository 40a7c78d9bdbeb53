//! The demo server's own flags, on the real process: payloads padded to `--payload-bytes` (the
//! soak loads sockets with them), publish times with `--timestamps` (the HTTP benchmark's latency),
//! and the `sse_server_heap_bytes` gauge in `/metrics` (the soak's leak check).

use replay_ring_e2e::server::{http_get, DemoServer, ServerOptions};

/// The `data:` payloads of a finished event stream, as JSON, with the sequence number of each
/// frame's `id:` (`events.abc.<seq>`); the priming frame (no data) is skipped.
fn events(body: &[u8]) -> Vec<(u64, serde_json::Value)> {
    let text = String::from_utf8_lossy(body);
    let mut out = Vec::new();
    for frame in text.split("\n\n") {
        let field = |name: &str| frame.lines().find_map(|l| l.strip_prefix(name));
        if frame.lines().any(|l| l.starts_with("event:")) {
            continue; // `event: end`
        }
        if let (Some(id), Some(data)) = (field("id: "), field("data: ")) {
            let seq = id.rsplit('.').next().unwrap().parse().unwrap();
            out.push((seq, serde_json::from_str(data).unwrap()));
        }
    }
    out
}

async fn finished_stream(
    name: &str,
    extra: &[&str],
) -> (DemoServer, Vec<(u64, serde_json::Value)>) {
    let mut args: Vec<String> = ["--eager", "--epoch", "abc"].map(String::from).to_vec();
    args.extend(extra.iter().map(|a| a.to_string()));
    let opts = ServerOptions {
        rate: Some(0),
        events: Some(3),
        extra_args: args,
        ..ServerOptions::default()
    };
    let log = std::env::temp_dir().join(format!("{name}-{}.log", std::process::id()));
    let server = DemoServer::spawn(&opts, &log)
        .await
        .expect("start sse_server");
    // From id 0: the whole stream, which ends after event 3, so the response ends too.
    let resume = [("Last-Event-ID", "events.abc.0")];
    let (status, _, body) = http_get(server.addr(), "/events", &resume).await.unwrap();
    assert_eq!(status, 200);
    (server, events(&body))
}

#[tokio::test]
async fn payloads_are_padded_to_the_requested_size_and_the_heap_is_reported() {
    let (server, events) = finished_stream("padded", &["--payload-bytes", "600"]).await;
    assert_eq!(
        events.iter().map(|(seq, _)| *seq).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    for (seq, json) in &events {
        assert_eq!(json.to_string().len(), 600, "{json}");
        assert_eq!(json["n"], *seq);
        assert!(json["pad"].as_str().unwrap().bytes().all(|b| b == b'.'));
    }
    let metrics = server.metrics().await.unwrap();
    if cfg!(all(target_os = "linux", target_env = "gnu")) {
        let heap = metrics.0.get("sse_server_heap_bytes").copied();
        assert!(heap.is_some_and(|bytes| bytes > 0.0), "{heap:?}");
    }
    // The example's own series are still there.
    assert!(
        metrics.get("replay_ring_events_enqueued").is_some(),
        "{metrics:?}"
    );
}

#[tokio::test]
async fn timestamps_carry_the_publish_time() {
    let before = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    let before = before.unwrap().as_nanos() as f64;
    let (_server, events) = finished_stream("timestamps", &["--timestamps"]).await;
    assert_eq!(events.len(), 3);
    for (seq, json) in &events {
        assert_eq!(json["n"], *seq);
        let t = json["t"].as_f64().unwrap();
        assert!(
            t >= before,
            "publish time {t} before the server started ({before})"
        );
    }
}
