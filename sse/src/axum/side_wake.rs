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
    /// The task waker `signal.task` holds, as far as this task knows: registering costs two
    /// read-modify-writes, so a poll registers only when the task's waker changed or a side
    /// wake-up took it out.
    registered: Option<Waker>,
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
            registered: None,
        }
    }

    /// Registers the task's waker for side wake-ups, unless it is already there.
    fn register(&mut self, task: &Waker, taken: bool) {
        if taken || !self.registered.as_ref().is_some_and(|w| w.will_wake(task)) {
            self.signal.task.register(task);
            self.registered = Some(task.clone());
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
/// armed), the side first. Completes with whichever finishes first; the other is left as it is.
pub(crate) struct Supervised<'a, M, S> {
    main: M,
    side: S,
    wake: &'a mut SideWake,
}

/// Which future of a [`Supervised`] pair completed.
pub(crate) enum First<A, B> {
    Main(A),
    Side(B),
}

impl<'a, M: Future + Unpin, S: Future + Unpin> Supervised<'a, M, S> {
    pub(crate) fn new(wake: &'a mut SideWake, main: M, side: S) -> Self {
        Supervised { main, side, wake }
    }
}

impl<M: Future + Unpin, S: Future + Unpin> Future for Supervised<'_, M, S> {
    type Output = First<M::Output, S::Output>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        // Registered before the flag is read: a side wake-up after the read wakes this task again.
        this.wake.register(cx.waker(), false);
        // A load first: most wake-ups are the main future's and leave the flag's line shared.
        // Acquire: pairs with the Release store in `Signal::wake_by_ref`.
        let signal = &this.wake.signal;
        if signal.fired.load(Ordering::Relaxed) && signal.fired.swap(false, Ordering::Acquire) {
            // The wake-up that set the flag took the task's waker out of `signal.task` (unless
            // `arm` set it): register it again before the side future can fire once more.
            this.wake.register(cx.waker(), true);
            let mut side_cx = Context::from_waker(&this.wake.waker);
            if let Poll::Ready(out) = Pin::new(&mut this.side).poll(&mut side_cx) {
                return Poll::Ready(First::Side(out));
            }
            // A firing between the swap and the registration found no waker but set the flag
            // (as does a side future that yields for tokio's cooperative budget): be polled again
            // rather than loop here. Relaxed: only a hint to poll again; the next poll's Acquire
            // swap of the flag (above) pairs with the firing's Release store.
            if this.wake.signal.fired.load(Ordering::Relaxed) {
                cx.waker().wake_by_ref();
            }
        }
        // The side first: a main future that uses up tokio's cooperative budget on every poll (a
        // response always ready to write to a fast reader) would otherwise leave the side none,
        // and a side resource out of budget only wakes itself and waits for the next poll.
        if let Poll::Ready(out) = Pin::new(&mut this.main).poll(cx) {
            return Poll::Ready(First::Main(out));
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use std::future::{pending, Future};
    use std::pin::pin;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};
    use std::time::Duration;

    use super::{First, SideWake, Supervised};

    /// Counts the polls of a future that never completes; wakes its waker on every poll if
    /// `self_wake` (as a tokio resource out of cooperative budget does).
    struct CountPolls {
        polls: Arc<AtomicUsize>,
        self_wake: bool,
    }

    impl Future for CountPolls {
        type Output = ();
        fn poll(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Ordering::Relaxed);
            if self.self_wake {
                cx.waker().wake_by_ref();
            }
            Poll::Pending
        }
    }

    struct CountWakes(AtomicUsize);

    impl Wake for CountWakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn the_side_is_polled_once_when_armed_and_not_on_the_tasks_other_wake_ups() {
        let polls = Arc::new(AtomicUsize::new(0));
        let side = CountPolls {
            polls: polls.clone(),
            self_wake: false,
        };
        let mut wake = SideWake::new();
        let main = pin!(pending::<()>());
        let mut sup = pin!(Supervised::new(&mut wake, main, side));
        let waker = Waker::from(Arc::new(CountWakes(AtomicUsize::new(0))));
        let mut cx = Context::from_waker(&waker);
        for _ in 0..10 {
            assert!(sup.as_mut().poll(&mut cx).is_pending());
        }
        assert_eq!(polls.load(Ordering::Relaxed), 1, "polled only when armed");
    }

    #[test]
    fn a_side_that_wakes_itself_while_pending_asks_for_a_later_poll_instead_of_looping() {
        let polls = Arc::new(AtomicUsize::new(0));
        let side = CountPolls {
            polls: polls.clone(),
            self_wake: true,
        };
        let mut wake = SideWake::new();
        let main = pin!(pending::<()>());
        let mut sup = pin!(Supervised::new(&mut wake, main, side));
        let wakes = Arc::new(CountWakes(AtomicUsize::new(0)));
        let waker = Waker::from(wakes.clone());
        let mut cx = Context::from_waker(&waker);
        for round in 1..=3 {
            assert!(sup.as_mut().poll(&mut cx).is_pending());
            assert_eq!(
                polls.load(Ordering::Relaxed),
                round,
                "one side poll per task poll"
            );
            assert!(
                wakes.0.load(Ordering::Relaxed) >= round,
                "the task asks to be polled again"
            );
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn side_wake_ups_from_another_thread_are_never_lost() {
        // The side is a Notify notified from another thread, many times over, while the main
        // future stays pending: every round must complete with `Side`.
        let notify = Arc::new(tokio::sync::Notify::new());
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let notifier = {
            let notify = notify.clone();
            std::thread::spawn(move || {
                while go_rx.recv().is_ok() {
                    notify.notify_waiters();
                }
            })
        };
        let mut wake = SideWake::new();
        for _ in 0..2_000 {
            let mut notified = pin!(notify.notified());
            // Registered with the Notify before the other thread is asked to notify.
            notified.as_mut().enable();
            wake.arm();
            go_tx.send(()).unwrap();
            let first = tokio::time::timeout(
                Duration::from_secs(10),
                Supervised::new(&mut wake, pin!(pending::<()>()), notified),
            )
            .await
            .expect("the side wake-up reached the task");
            assert!(matches!(first, First::Side(())));
        }
        drop(go_tx);
        notifier.join().unwrap();
    }
}
