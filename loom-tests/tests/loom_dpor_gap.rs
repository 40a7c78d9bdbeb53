//! Which loom the models run on: the pattern that loom 0.7.3's DPOR skips (tokio-rs/loom#166,
//! #392; `docs/verification.md`, "What loom does not check"). A spawned thread loads an atomic and
//! then stores to it; the main thread loads it once. Either load order is possible, so the main
//! thread may see the store or not. Stock loom explores only one of the two; the loom that
//! `LOOM_DPOR_PATCH=1 scripts/loom` builds explores both, and this model fails if a run that
//! asked for the patch got stock loom, or if stock loom stops skipping the schedule (then the
//! docs and the patch need revisiting).
#![cfg(replay_ring_loom)]

use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc as StdArc, Mutex as StdMutex};

use loom::sync::atomic::AtomicBool;
use loom::sync::Arc;
use loom::thread;
use replay_ring_loom_tests::{model, Bound};

#[test]
fn a_load_then_store_is_tried_before_an_earlier_load() {
    let seen = StdArc::new(StdMutex::new([false; 2]));
    let record = seen.clone();
    model(
        "a_load_then_store_is_tried_before_an_earlier_load",
        Bound::Exhaustive,
        move || {
            let flag = Arc::new(AtomicBool::new(false));
            let theirs = flag.clone();
            let other = thread::spawn(move || {
                let _ = theirs.load(Relaxed);
                theirs.store(true, Relaxed);
            });
            let saw_store = flag.load(Relaxed);
            other.join().unwrap();
            record.lock().unwrap()[usize::from(saw_store)] = true;
        },
    );
    let seen = *seen.lock().unwrap();
    let patched = std::env::var("LOOM_DPOR_PATCH").is_ok_and(|v| v == "1");
    let expected = if patched { [true, true] } else { [true, false] };
    assert_eq!(
        seen,
        expected,
        "outcomes explored (store not seen, store seen) with LOOM_DPOR_PATCH={}: \
         {seen:?}, expected {expected:?}",
        if patched { "1" } else { "unset" }
    );
}
