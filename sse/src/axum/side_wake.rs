//! Polling a side future (a timer, a watchdog) only when its own wake-up fired.
//!
//! A connection's task is woken for every event its stream publishes. A `select!` over the read
//! and a timer would poll the timer on each of those wake-ups, and re-polling a registered timer
//! or `Notified` re-registers the task's waker (atomic read-modify-writes, a lock for `Notified`).
//! [`Supervised`] polls the side future with a waker of its own, which records that it fired
//! before waking the task, and skips the side future on every other wake-up.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use futures_util::task::AtomicWaker;

/// The side future's waker, kept across polls (and across side futures: [`arm`](Self::arm) a new
/// or reset one so that the next poll registers it).
pub(crate) struct SideWake {
    signal: Arc<Signal>,
    waker: Waker,
}

struct Signal {
    fired: AtomicBool,
    task: AtomicWaker,
}

impl Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Release: pairs with the Acquire swap in `Supervised::poll`, so the poll that sees the
        // flag also sees what the side published before waking.
        self.fired.store(true, Ordering::Release);
        self.task.wake();
    }
}

impl SideWake {
    /// Armed: the first poll polls the side future.
    pub(crate) fn new() -> Self {
        let signal = Arc::new(Signal {
            fired: AtomicBool::new(true),
            task: AtomicWaker::new(),
        });
        SideWake {
            waker: Waker::from(signal.clone()),
            signal,
        }
    }

    /// The next poll polls the side future: call it for a new side future, or one that must be
    /// polled again to register (a reset timer).
    pub(crate) fn arm(&self) {
        // Relaxed: read by this task's own next poll.
        self.signal.fired.store(true, Ordering::Relaxed);
    }
}

/// Polls `main` on every wake-up of the task and `side` only when `side`'s waker fired (or was
/// armed). Completes with whichever finishes first; the other is left as it is.
pub(crate) struct Supervised<'a, M, S> {
    main: M,
    side: S,
    wake: &'a SideWake,
}

/// Which future of a [`Supervised`] pair completed.
pub(crate) enum First<A, B> {
    Main(A),
    Side(B),
}

impl<'a, M: Future + Unpin, S: Future + Unpin> Supervised<'a, M, S> {
    pub(crate) fn new(wake: &'a SideWake, main: M, side: S) -> Self {
        Supervised { main, side, wake }
    }
}

impl<M: Future + Unpin, S: Future + Unpin> Future for Supervised<'_, M, S> {
    type Output = First<M::Output, S::Output>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let signal = &this.wake.signal;
        // Registered before the flag is read: a side wake-up after the read wakes this task again.
        signal.task.register(cx.waker());
        if let Poll::Ready(out) = Pin::new(&mut this.main).poll(cx) {
            return Poll::Ready(First::Main(out));
        }
        // A load first: most wake-ups are the main future's and leave the flag's line shared.
        // Acquire: pairs with the Release store in `Signal::wake_by_ref`.
        if signal.fired.load(Ordering::Relaxed) && signal.fired.swap(false, Ordering::Acquire) {
            let mut side_cx = Context::from_waker(&this.wake.waker);
            if let Poll::Ready(out) = Pin::new(&mut this.side).poll(&mut side_cx) {
                return Poll::Ready(First::Side(out));
            }
        }
        Poll::Pending
    }
}
