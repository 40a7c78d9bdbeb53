//! The measurement programs outside criterion, run once at tiny sizes so that CI sees them work:
//! `reader-registration` (registration cost and memory per reader, `docs/benchmarks.md`) and the
//! `sse-load` command line that `scripts/bench-http` drives (scenario 9), here against the
//! baseline server.

use std::process::Command;

/// `reader-registration` registers every reader it is asked for and reports the run.
#[test]
fn reader_registration_reports_a_small_run() {
    let out = Command::new(env!("CARGO_BIN_EXE_reader-registration"))
        .args(["--readers", "1000"])
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.starts_with("readers=1000 "), "{stdout}");
    assert!(stdout.contains(" rss_per_reader_bytes="), "{stdout}");
}

/// `sse-load` starts the server it is given, runs the load and prints one JSON line; with
/// `--require-complete` it exits 0 only if every connection got every event.
#[test]
fn sse_load_prints_a_complete_run_against_the_baseline() {
    let out = Command::new(env!("CARGO_BIN_EXE_sse-load"))
        .args(["--server", "baseline", "--server-bin"])
        .arg(env!("CARGO_BIN_EXE_sse-baseline"))
        .args(["--connections", "10", "--rate", "200", "--events", "40"])
        .args([
            "--start-after-connected",
            "--require-complete",
            "--timeout-s",
            "60",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{stdout}");
    let line: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(line["complete"], 10, "{line}");
    assert_eq!(line["frames"], 400, "{line}");
    assert_eq!(line["dropped"], 0, "{line}");
}
