//! Blocking waits: the `*_timeout` calls turn the same poll functions the async waits use into a
//! thread park with a deadline, through a `Waker` allocated with each handle so that no wait
//! allocates. Compiled out under loom, whose models drive the poll functions directly.

use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

/// Unparks whichever thread is blocked on the handle right now.
struct Unparker(parking_lot::Mutex<Option<Thread>>);

impl Wake for Unparker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if let Some(thread) = &*self.0.lock() {
            thread.unpark();
        }
    }
}

/// The `Waker` of a handle's blocking waits, allocated with the handle (at registration), so that
/// no blocking wait allocates, on whichever thread it runs: each wait only records the current
/// thread in it (`thread::current()` clones a handle std already holds).
#[derive(Debug)]
pub(crate) struct ThreadWaker {
    unparker: Arc<Unparker>,
    waker: Waker,
}

impl std::fmt::Debug for Unparker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Unparker")
    }
}

impl ThreadWaker {
    pub(crate) fn new() -> Self {
        let unparker = Arc::new(Unparker(parking_lot::Mutex::new(None)));
        let waker = Waker::from(unparker.clone());
        ThreadWaker { unparker, waker }
    }

    /// Points the waker at the calling thread and returns a handle on it (a reference count,
    /// not an allocation).
    pub(crate) fn bind(&self) -> Waker {
        let current = thread::current();
        let mut slot = self.unparker.0.lock();
        if slot.as_ref().is_none_or(|t| t.id() != current.id()) {
            *slot = Some(current);
        }
        self.waker.clone()
    }
}

/// The deadline `timeout` from now, or `None` (no deadline) when it is beyond what `Instant` can
/// represent: `Duration::MAX` is the usual way to say "wait as long as it takes".
pub(crate) fn deadline_after(timeout: Duration) -> Option<Instant> {
    Instant::now().checked_add(timeout)
}

/// Polls `poll` until it is ready or `deadline` passes (never, for `None`), parking the thread
/// in between. `None` means the deadline passed first.
pub(crate) fn block_on_deadline<R>(
    waker: Waker,
    deadline: Option<Instant>,
    mut poll: impl FnMut(&mut Context<'_>) -> Poll<R>,
) -> Option<R> {
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(r) = poll(&mut cx) {
            return Some(r);
        }
        // A spurious or early unpark only costs another poll.
        match deadline {
            None => thread::park(),
            Some(deadline) => {
                let now = Instant::now();
                if now >= deadline {
                    return None;
                }
                thread::park_timeout(deadline - now);
            }
        }
    }
}
