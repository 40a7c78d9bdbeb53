//! Waiting without allocating: async waits park their `Waker` in the ring's fixed waker table (one
//! entry for the producer, one per reader slot, allocated at construction); blocking waits turn the
//! same poll functions into a thread park with a deadline.
//!
//! The wake-up protocol itself (register, SeqCst fence, re-check; publish, SeqCst fence, wake) lives
//! next to the state it guards, in `producer.rs`, `reader.rs` and `shared.rs`.

#[cfg(not(replay_ring_loom))]
pub(crate) use blocking::{block_on_deadline, deadline_after, ThreadWaker};

#[cfg(not(replay_ring_loom))]
mod blocking {
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};
    use std::thread::{self, Thread, ThreadId};
    use std::time::{Duration, Instant};

    struct Unparker(Thread);

    impl Wake for Unparker {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }

        fn wake_by_ref(self: &Arc<Self>) {
            self.0.unpark();
        }
    }

    /// A `Waker` that unparks one thread, built once per handle and reused for every blocking wait
    /// on that thread (so blocking waits do not allocate either).
    #[derive(Debug, Default)]
    pub(crate) struct ThreadWaker {
        cached: Option<(ThreadId, Waker)>,
    }

    impl ThreadWaker {
        fn get(&mut self) -> &Waker {
            let current = thread::current();
            if self
                .cached
                .as_ref()
                .is_none_or(|(id, _)| *id != current.id())
            {
                let waker = Waker::from(Arc::new(Unparker(current.clone())));
                self.cached = Some((current.id(), waker));
            }
            &self.cached.as_ref().expect("just set").1
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
        waker: &mut ThreadWaker,
        deadline: Option<Instant>,
        mut poll: impl FnMut(&mut Context<'_>) -> Poll<R>,
    ) -> Option<R> {
        let waker = waker.get().clone();
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
}
