//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, pinned) against the
//! demo server on the replay-ring store, through the chaos proxy (pass-through) on loopback.
//! Needs `scripts/mcp-setup`; run by `scripts/test-all`.

mod common;

use std::time::Duration;

use common::*;
use replay_ring_mcp::demo::Storage;
use replay_ring_mcp::StoreConfig;

/// Every server scenario of the suite (0.1.16, `conformance list`): each must pass with no failure
/// and no warning. The suite's default ("active") run leaves some out (e.g. `server-sse-polling`),
/// so each is run explicitly.
const SCENARIOS: &[&str] = &[
    "server-sse-polling",
    "server-sse-multiple-streams",
    "server-initialize",
    "ping",
    "logging-set-level",
    "completion-complete",
    "tools-list",
    "tools-call-simple-text",
    "tools-call-image",
    "tools-call-audio",
    "tools-call-embedded-resource",
    "tools-call-mixed-content",
    "tools-call-with-logging",
    "tools-call-error",
    "tools-call-with-progress",
    "tools-call-sampling",
    "tools-call-elicitation",
    "json-schema-2020-12",
    "elicitation-sep1034-defaults",
    "elicitation-sep1330-enums",
    "resources-list",
    "resources-read-text",
    "resources-read-binary",
    "resources-templates-read",
    "resources-subscribe",
    "resources-unsubscribe",
    "prompts-list",
    "prompts-get-simple",
    "prompts-get-with-args",
    "prompts-get-embedded-resource",
    "prompts-get-with-image",
    "dns-rebinding-protection",
];

#[derive(Debug, Default)]
struct Outcome {
    success: usize,
    warning: usize,
    failure: usize,
    messages: Vec<String>,
}

async fn run_scenario(url: &str, scenario: &str, out_dir: &std::path::Path) -> Outcome {
    let dir = out_dir.join(scenario);
    let suite = clients_dir().join("node_modules/@modelcontextprotocol/conformance/dist/index.js");
    let mut cmd = tokio::process::Command::new(node());
    cmd.arg(&suite)
        .args(["server", "--url", url, "--scenario", scenario, "-o"])
        .arg(&dir)
        .current_dir(clients_dir())
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(120), cmd.output())
        .await
        .unwrap_or_else(|_| panic!("{scenario} did not finish in 120 s"))
        .expect("spawn conformance suite");
    let checks_file = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| {
            panic!(
                "{scenario}: no results in {} ({e})\n{}",
                dir.display(),
                String::from_utf8_lossy(&output.stdout)
            )
        })
        .filter_map(Result::ok)
        .map(|e| e.path().join("checks.json"))
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("{scenario}: no checks.json"));
    let checks: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&checks_file).expect("read checks"))
            .expect("checks JSON");
    let mut outcome = Outcome::default();
    for c in checks.as_array().expect("array of checks") {
        match c["status"].as_str() {
            Some("SUCCESS") => outcome.success += 1,
            Some("WARNING") => {
                outcome.warning += 1;
                outcome
                    .messages
                    .push(format!("WARNING {}: {}", c["id"], c["errorMessage"]));
            }
            Some("FAILURE") => {
                outcome.failure += 1;
                outcome
                    .messages
                    .push(format!("FAILURE {}: {}", c["id"], c["errorMessage"]));
            }
            _ => {}
        }
    }
    outcome
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs python/node clients; run by scripts/test-all"]
async fn conformance_suite_server_scenarios() {
    let server = start_server(Storage::ReplayRing(StoreConfig {
        retry: Duration::from_millis(500),
        ..StoreConfig::default()
    }))
    .await;
    let proxy = start_proxy(server.addr, |_| {}).await;
    let url = format!("{}/mcp", proxy.url());
    let out_dir = std::env::temp_dir().join(format!(
        "replay-ring-mcp-conformance-{}",
        std::process::id()
    ));
    let mut table = vec![
        "| scenario | result | checks passed |".to_owned(),
        "|---|---|---|".to_owned(),
    ];
    let mut broken = Vec::new();
    for scenario in SCENARIOS {
        let o = run_scenario(&url, scenario, &out_dir).await;
        let verdict = match (o.failure, o.warning) {
            (0, 0) => "pass",
            (0, _) => "pass with warnings",
            _ => "FAIL",
        };
        table.push(format!(
            "| `{scenario}` | {verdict} | {}/{} |",
            o.success,
            o.success + o.warning + o.failure
        ));
        if o.failure > 0 || o.warning > 0 {
            broken.push(format!("{scenario}: {:?}", o.messages));
        }
    }
    println!("CONFORMANCE\n{}", table.join("\n"));
    let _ = std::fs::remove_dir_all(&out_dir);
    assert!(
        broken.is_empty(),
        "scenarios did not pass cleanly:\n{}",
        broken.join("\n")
    );
    // The SSE polling scenario resumed through a GET with Last-Event-ID on a replay-ring stream.
    let log = proxy.requests();
    assert!(
        assert_resumes_continuous(&log) >= 1,
        "no resume seen on the wire"
    );
}
