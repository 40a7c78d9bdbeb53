//! Whether a thread sleeps, for the tests whose subject is the wake-up of a parked thread: the
//! ring counts the producer's waits (`Metrics::producer_waits`, counted before it parks) and
//! nothing of a reader's, so neither shows that the thread has parked. Linux shows it in `/proc`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The calling thread's `/proc/<pid>/task/<tid>` directory, where Linux shows whether it sleeps;
/// `None` without one (another system, no `/proc`, or Miri, whose threads all run on one thread
/// of the host), where a test cannot see that a thread has parked.
pub fn this_task() -> Option<PathBuf> {
    if cfg!(miri) {
        return None;
    }
    std::fs::read_link("/proc/thread-self")
        .ok()
        .map(|task| Path::new("/proc").join(task))
}

/// Waits until the thread of `task` ([`this_task`]) sleeps in the kernel, as a thread parked by a
/// blocking wait does.
pub fn wait_until_asleep(task: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let stat = std::fs::read_to_string(task.join("stat")).unwrap();
        // The state follows the thread's name, which is in parentheses and may hold any byte.
        let state = stat.rsplit_once(')').unwrap().1.trim_start().chars().next();
        if state == Some('S') {
            return;
        }
        assert!(Instant::now() < deadline, "the thread never slept: {stat}");
        std::thread::yield_now();
    }
}
