//! Blocking waits: the `*_timeout` calls turn the same poll functions the async waits use into a
//! thread park with a deadline, through a `Waker` that lives in the state every handle shares (a
//! reader's table entry, or the ring's shared state for the producer), so that no wait and no
//! registration allocates for it. Compiled out under loom, whose models drive the poll functions
//! directly.

use std::task::{Context, Poll, RawWaker, RawWakerVTable, Waker};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

/// The `Waker` of one handle's blocking waits: unparks whichever thread is blocked on the handle
/// right now. It lives in place, in memory that outlives every clone of its waker, so the waker is
/// a plain pointer to it and nothing is counted or allocated: a reader's in its reader-table entry
/// (entries are freed only with the table), the producer's in the ring's shared state. Each wait
/// only records the current thread in it (`thread::current()` clones a handle std already holds).
#[derive(Debug, Default)]
pub(crate) struct ThreadWaker {
    thread: parking_lot::Mutex<Option<Thread>>,
}

impl ThreadWaker {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Points the waker at the calling thread and returns it.
    ///
    /// # Safety
    ///
    /// No clone of the returned waker may be woken after `self` is dropped: it holds a plain
    /// pointer to `self` (cloning and dropping one never follow the pointer). The crate keeps
    /// them in the ring's shared state (a reader's entry, the producer's waker slot) or on the
    /// stack of the waiting thread, and only threads holding a handle on the ring wake them, so
    /// the `ThreadWaker`, stored in that same state, is alive whenever one is woken.
    pub(crate) unsafe fn bind(&self) -> Waker {
        let current = thread::current();
        let mut slot = self.thread.lock();
        if slot.as_ref().is_none_or(|t| t.id() != current.id()) {
            *slot = Some(current);
        }
        drop(slot);
        let data: *const ThreadWaker = self;
        // SAFETY: the vtable's functions only turn `data` back into `&ThreadWaker`, which the
        // caller keeps alive for as long as the waker and its clones exist (this function's
        // contract); a `ThreadWaker` is `Sync`, so any thread may use it.
        unsafe { Waker::from_raw(RawWaker::new(data.cast(), &VTABLE)) }
    }

    /// Forgets the thread, so that an entry handed to another reader does not keep a thread that
    /// may have exited (its handle holds the thread's name and parker).
    pub(crate) fn unbind(&self) {
        *self.thread.lock() = None;
    }

    #[cfg(test)]
    pub(crate) fn is_bound(&self) -> bool {
        self.thread.lock().is_some()
    }

    fn wake(&self) {
        if let Some(thread) = &*self.thread.lock() {
            thread.unpark();
        }
    }
}

static VTABLE: RawWakerVTable =
    RawWakerVTable::new(clone_waker, wake_waker, wake_waker, drop_waker);

/// Another waker on the same `ThreadWaker`: nothing is counted, the pointee outlives them all.
///
/// # Safety
///
/// `data` came from `ThreadWaker::bind` (the `RawWakerVTable` contract); it is not followed here.
unsafe fn clone_waker(data: *const ()) -> RawWaker {
    RawWaker::new(data, &VTABLE)
}

/// `wake` and `wake_by_ref` alike: a waker owns nothing to release.
///
/// # Safety
///
/// `data` came from `ThreadWaker::bind`, and that `ThreadWaker` is still alive (`bind`'s contract).
unsafe fn wake_waker(data: *const ()) {
    // SAFETY: `data` came from `ThreadWaker::bind`, whose caller keeps the `ThreadWaker` alive
    // while any waker on it exists.
    unsafe { &*data.cast::<ThreadWaker>() }.wake();
}

/// Nothing to release: a waker holds a plain pointer and no count.
///
/// # Safety
///
/// None beyond the `RawWakerVTable` contract; the pointer is not followed.
unsafe fn drop_waker(_: *const ()) {}

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
