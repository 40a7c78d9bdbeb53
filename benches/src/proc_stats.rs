//! Resident memory and CPU time of a process, from `/proc/<pid>/status` and `/proc/<pid>/stat`.

use std::fs;
use std::io;

/// `VmRSS` of `pid`, in bytes.
pub fn rss_bytes(pid: u32) -> io::Result<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|kb| kb.trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .ok_or_else(|| io::Error::other(format!("no VmRSS in /proc/{pid}/status")))
}

/// User + system CPU time of `pid` so far, in nanoseconds.
pub fn cpu_ns(pid: u32) -> io::Result<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (which may contain spaces, so split after its closing paren):
    // state is field 3; utime and stime are fields 14 and 15.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or_else(|| io::Error::other("malformed /proc/<pid>/stat"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    let (utime, stime) = ticks(11)
        .zip(ticks(12))
        .ok_or_else(|| io::Error::other("no utime/stime in /proc/<pid>/stat"))?;
    Ok((utime + stime) * 1_000_000_000 / clock_ticks_per_second())
}

/// The unit of `/proc/<pid>/stat` times: `sysconf(_SC_CLK_TCK)`.
fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf reads a configuration value; it has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(ticks).ok().filter(|&t| t > 0).unwrap_or(100)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_process() {
        let pid = std::process::id();
        assert!(rss_bytes(pid).unwrap() > 1024 * 1024);
        let before = cpu_ns(pid).unwrap();
        // Burn CPU until the counter moves (it counts in clock ticks), with a deadline.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let mut x = 0u64;
        while cpu_ns(pid).unwrap() == before {
            assert!(
                std::time::Instant::now() < deadline,
                "CPU time never advanced"
            );
            for _ in 0..1_000_000 {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        }
    }
}
