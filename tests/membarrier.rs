//! Asymmetric wake-up fences must never be left half-done. If `membarrier` stops working after a
//! ring registered for it (here: a seccomp filter installed after the ring is built makes it fail
//! with `EPERM`), the side that is about to sleep cannot complete the fence pair, and the process
//! aborts with a message instead of silently losing wake-ups. Forbidden before the first ring is
//! built, it is never used: that ring runs, and reports, symmetric fences.
//!
//! Each case re-runs this test binary as a child process (selected by an environment variable).
//! In the abort cases the child builds a ring, installs the filter, and waits, and the parent
//! checks that it died of `SIGABRT` with the documented message; in the fallback case the child
//! installs the filter first, and the parent checks that its waits returned.
// Ordinary builds only: a `--cfg replay_ring_loom` build swaps in loom atomics and drops the
// blocking API; its checks are the models in `loom-tests/`.
#![cfg(not(replay_ring_loom))]
#![cfg(target_os = "linux")]

use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::process::Command;
use std::time::Duration;

use replay_ring::{ReplayRing, WakeupFences};

#[path = "support/membarrier_query.rs"]
mod membarrier_query;
use membarrier_query::expedited_membarrier_supported;

const CHILD: &str = "REPLAY_RING_MEMBARRIER_CHILD";
const MESSAGE: &str =
    "membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) failed with errno 1 after registration succeeded";

/// Makes every later `membarrier` call of this thread fail with `EPERM`; everything else is allowed.
fn deny_membarrier() {
    let filter = [
        // Load the system call number (offset 0 of `struct seccomp_data`).
        bpf_stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0),
        bpf_jump(
            libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K,
            libc::SYS_membarrier as u32,
            0,
            1,
        ),
        bpf_stmt(
            libc::BPF_RET | libc::BPF_K,
            libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
        ),
        bpf_stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW),
    ];
    let program = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: plain prctl calls; `program` points at `filter`, which outlives the call (the kernel
    // copies it).
    unsafe {
        assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
        assert_eq!(
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &program as *const libc::sock_fprog
            ),
            0,
            "installing the seccomp filter failed"
        );
    }
}

fn bpf_stmt(code: u32, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

fn bpf_jump(code: u32, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    }
}

/// The child's side: build the ring (this registers for expedited membarriers), install the
/// filter, then make the sleeping side issue its heavy fence.
fn child(case: &str) {
    match case {
        "producer" => {
            let (mut producer, _ring) = ReplayRing::<u8>::new(1, 1).unwrap();
            producer.try_push(1).unwrap();
            deny_membarrier();
            // The window is full: the producer parks, which needs the heavy fence.
            let _ = producer.ready_timeout(Duration::from_millis(10));
        }
        "reader" => {
            let (_producer, ring) = ReplayRing::<u8>::builder()
                .wakeup_fences(WakeupFences::Asymmetric)
                .build()
                .unwrap();
            let mut reader = ring.reader().unwrap();
            deny_membarrier();
            // Nothing to read: the reader parks, which needs the heavy fence.
            let _ = reader.read_timeout(Duration::from_millis(10));
        }
        "denied_before_the_first_ring" => {
            // Forbidden before any ring registers: the process runs symmetric fences, and says so;
            // neither side's wait needs the system call.
            deny_membarrier();
            let (mut producer, ring) = ReplayRing::<u8>::builder()
                .capacity(1)
                .wakeup_fences(WakeupFences::Asymmetric)
                .build()
                .unwrap();
            assert_eq!(ring.wakeup_fences(), WakeupFences::Symmetric);
            let mut reader = ring.reader().unwrap();
            let _ = reader.read_timeout(Duration::from_millis(10));
            producer.try_push(1).unwrap();
            // The window is full: the producer parks.
            let _ = producer.ready_timeout(Duration::from_millis(10));
        }
        other => panic!("unknown case {other}"),
    }
    println!("the wait returned without aborting");
}

/// Runs `test` again as a child process that takes `case`, and returns its output with its stdout
/// and stderr as text; `None` in the child itself, after it ran the case.
fn spawn_child(case: &str, test: &str) -> Option<(std::process::Output, String, String)> {
    if let Ok(case) = std::env::var(CHILD) {
        child(&case);
        return None;
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CHILD, case)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    Some((out, stdout, stderr))
}

fn run_child(case: &str, test: &str) {
    let Some((out, stdout, stderr)) = spawn_child(case, test) else {
        return;
    };
    if !expedited_membarrier_supported() {
        // Without the system call, rings fall back to symmetric fences, whose waits need no
        // membarrier: the child's wait must return instead of aborting. The abort cannot be
        // checked on this kernel, and the run says so on its stderr itself (libtest hides what a
        // passing test prints with `eprintln!`, but not what it writes to the stream directly).
        assert!(
            out.status.success() && stdout.contains("the wait returned without aborting"),
            "the fallback must not abort; status {:?}\nstdout: {stdout}\nstderr: {stderr}",
            out.status
        );
        let _ = writeln!(
            std::io::stderr(),
            "{test}: this kernel has no MEMBARRIER_CMD_PRIVATE_EXPEDITED; \
             checked the symmetric fallback, not the abort"
        );
        return;
    }
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGABRT),
        "the child must abort; status {:?}\nstdout: {stdout}\nstderr: {stderr}",
        out.status
    );
    assert!(stderr.contains(MESSAGE), "stderr: {stderr}");
}

#[test]
fn producer_wait_aborts_when_membarrier_fails_after_registration() {
    run_child(
        "producer",
        "producer_wait_aborts_when_membarrier_fails_after_registration",
    );
}

#[test]
fn asymmetric_reader_wait_aborts_when_membarrier_fails_after_registration() {
    run_child(
        "reader",
        "asymmetric_reader_wait_aborts_when_membarrier_fails_after_registration",
    );
}

#[test]
fn a_ring_built_after_membarrier_is_forbidden_runs_symmetric_fences() {
    let test = "a_ring_built_after_membarrier_is_forbidden_runs_symmetric_fences";
    let Some((out, stdout, stderr)) = spawn_child("denied_before_the_first_ring", test) else {
        return;
    };
    assert!(
        out.status.success() && stdout.contains("the wait returned without aborting"),
        "a ring built under the filter must fall back, not abort; status {:?}\nstdout: {stdout}\n\
         stderr: {stderr}",
        out.status
    );
    if !expedited_membarrier_supported() {
        // Every ring here runs symmetric fences, filter or not: the fallback was not provoked.
        let _ = writeln!(
            std::io::stderr(),
            "{test}: this kernel has no MEMBARRIER_CMD_PRIVATE_EXPEDITED; nothing was forbidden"
        );
    }
}
