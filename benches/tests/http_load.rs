//! The end-to-end HTTP scenario as a correctness test: C = 100 SSE connections to the replay-ring
//! demo server, every connection must get every event of its stream with gap-free ids and the
//! payload's id matching the frame's; and the same harness against the tokio-broadcast baseline with
//! a channel larger than the whole stream (so it cannot lag), which checks the harness itself on
//! both servers. The stream lasts ~3 s, so all connections join while it flows. Two more checks
//! of the harness and the contract: a lagging baseline has every id it dropped counted, and every
//! connection to the replay-ring server that leaves mid-stream resumes with nothing lost.

use std::path::PathBuf;
use std::time::Duration;

use replay_ring_benches::load::{self, LoadReport, LoadSpec};
use replay_ring_benches::server::{Server, ServerKind, ServerSpec};

const CONNECTIONS: usize = 100;
const EVENTS: u64 = 300;
const RATE: f64 = 100.0;

fn run(kind: ServerKind, bin: PathBuf, start_after: Option<usize>) -> LoadReport {
    load(ServerSpec {
        kind,
        bin,
        rate: RATE,
        events: EVENTS,
        capacity: 4096,
        connections: CONNECTIONS,
        start_after,
        extra_args: Vec::new(),
    })
}

fn load(spec: ServerSpec) -> LoadReport {
    load_with(spec, CONNECTIONS, None)
}

/// `connections` clients (the server may be told to take more) that each leave and resume at
/// `reconnect_at`, if given.
fn load_with(spec: ServerSpec, connections: usize, reconnect_at: Option<u64>) -> LoadReport {
    let server = Server::spawn(&spec).unwrap();
    let load = LoadSpec {
        addr: server.addr,
        server_pid: Some(server.pid()),
        connections,
        events: spec.events,
        timeout: Duration::from_secs(120),
        from_first: spec.start_after.is_some(),
        reconnect_at,
    };
    let report = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(load::run(&load))
        .unwrap();
    drop(server);
    report
}

fn assert_every_event_delivered(report: &LoadReport) {
    assert_eq!(report.connected, CONNECTIONS, "{report:?}");
    assert_eq!(report.complete, CONNECTIONS, "{report:?}");
    assert_eq!((report.dropped, report.duplicates), (0, 0), "{report:?}");
    assert!(report.errors.is_empty(), "{report:?}");
    // Connections join while events flow; each got at least the events published after the last
    // one connected, and at most all of them.
    assert!(report.frames <= CONNECTIONS as u64 * EVENTS, "{report:?}");
    assert!(
        report.window_frames > 0 && report.events_per_s > 0.0,
        "{report:?}"
    );
    assert!(
        report.rss_per_connection.is_some() && report.cpu_ns.is_some(),
        "{report:?}"
    );
}

#[test]
fn replay_ring_server_delivers_every_event_to_100_connections() {
    let bin = replay_ring_e2e::server::server_binary().expect("build the demo sse_server");
    let report = run(ServerKind::ReplayRing, bin, None);
    assert_every_event_delivered(&report);
    // The demo server stamps its payloads: latency is measured.
    assert!(
        report.latency_samples > 0 && report.p99_ns.is_some(),
        "{report:?}"
    );
}

#[test]
fn baseline_server_with_a_channel_larger_than_the_stream_delivers_every_event() {
    let report = run(
        ServerKind::Baseline,
        PathBuf::from(env!("CARGO_BIN_EXE_sse-baseline")),
        None,
    );
    assert_every_event_delivered(&report);
    assert!(
        report.latency_samples > 0 && report.p99_ns.is_some(),
        "{report:?}"
    );
}

/// With `--start-after C` both servers hold the stream until every connection is open, so each
/// connection gets the whole stream, from id 1.
#[test]
fn started_after_all_connected_both_servers_send_every_connection_the_whole_stream() {
    let servers = [
        (
            ServerKind::ReplayRing,
            replay_ring_e2e::server::server_binary().expect("build the demo sse_server"),
        ),
        (
            ServerKind::Baseline,
            PathBuf::from(env!("CARGO_BIN_EXE_sse-baseline")),
        ),
    ];
    for (kind, bin) in servers {
        let report = run(kind, bin, Some(CONNECTIONS));
        assert_every_event_delivered(&report);
        assert_eq!(
            report.frames,
            CONNECTIONS as u64 * EVENTS,
            "{kind:?}: {report:?}"
        );
    }
}

/// A server that writes its keep-alives as events (`--keep-alive-event`) is read like any other:
/// the client passes over each `event: keep-alive` (no id, no data) and every stream stays whole.
/// At 20 events/s with a 10 ms keep-alive (the shortest a stream takes), every 50 ms gap between
/// events holds keep-alives.
#[test]
fn keep_alive_events_are_passed_over_and_every_stream_stays_whole() {
    const EVENTS: u64 = 30;
    let report = load(ServerSpec {
        kind: ServerKind::ReplayRing,
        bin: replay_ring_e2e::server::server_binary().expect("build the demo sse_server"),
        rate: 20.0,
        events: EVENTS,
        capacity: 4096,
        connections: CONNECTIONS,
        start_after: Some(CONNECTIONS),
        extra_args: ["--keep-alive-ms", "10", "--keep-alive-event"]
            .map(String::from)
            .to_vec(),
    });
    assert!(report.errors.is_empty(), "{report:?}");
    assert_eq!(report.complete, CONNECTIONS, "{report:?}");
    assert_eq!((report.dropped, report.duplicates), (0, 0), "{report:?}");
    assert_eq!(report.frames, CONNECTIONS as u64 * EVENTS, "{report:?}");
    assert!(report.keep_alive_events > 0, "{report:?}");
}

/// A baseline whose channel holds one event, publishing as fast as it can to connections that
/// were all open before its first event: connections lag, and every id a connection missed is
/// counted as dropped, those before its first event included (every connection was owed id 1).
#[test]
fn a_lagging_baseline_has_every_missed_id_counted_as_dropped() {
    const EVENTS: u64 = 3_000;
    let report = load(ServerSpec {
        kind: ServerKind::Baseline,
        bin: PathBuf::from(env!("CARGO_BIN_EXE_sse-baseline")),
        rate: 0.0,
        events: EVENTS,
        capacity: 1,
        connections: CONNECTIONS,
        start_after: Some(CONNECTIONS),
        extra_args: Vec::new(),
    });
    assert_eq!(report.connected, CONNECTIONS, "{report:?}");
    assert_eq!(report.duplicates, 0, "{report:?}");
    assert!(report.dropped > 0, "the baseline did not lag: {report:?}");
    assert_eq!(
        report.frames + report.dropped,
        CONNECTIONS as u64 * EVENTS,
        "every id either delivered or counted as dropped: {report:?}"
    );
}

/// Resumable under load: every one of the 100 connections leaves mid-stream, as a client whose
/// network dropped, and comes back at once with `Last-Event-ID`; each gets the rest of the stream
/// from the next id, with no gap and no duplicate, and reaches the end. The server's reader table
/// has room for the reconnections while the old connections are being closed.
#[test]
fn every_connection_that_leaves_mid_stream_resumes_gap_free() {
    const RECONNECT_AT: u64 = EVENTS / 2;
    let report = load_with(
        ServerSpec {
            kind: ServerKind::ReplayRing,
            bin: replay_ring_e2e::server::server_binary().expect("build the demo sse_server"),
            rate: RATE,
            events: EVENTS,
            capacity: 4096,
            connections: 2 * CONNECTIONS,
            start_after: Some(CONNECTIONS),
            extra_args: Vec::new(),
        },
        CONNECTIONS,
        Some(RECONNECT_AT),
    );
    assert!(report.errors.is_empty(), "{report:?}");
    assert_eq!(report.reconnects, CONNECTIONS, "{report:?}");
    assert_eq!(report.complete, CONNECTIONS, "{report:?}");
    assert_eq!((report.dropped, report.duplicates), (0, 0), "{report:?}");
    assert_eq!(report.frames, CONNECTIONS as u64 * EVENTS, "{report:?}");
}
