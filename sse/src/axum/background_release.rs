//! A release a connection planned, run beside its response instead of in front of it.
//!
//! Releasing is a write to the backend. A network backend can hold writes back while it still
//! answers reads: Redis under `CLIENT PAUSE WRITE`, as during a failover, keeps a write waiting
//! until the pause ends or the command times out. A writer that awaited its release before
//! handing out the next chunk would stall a resume's priming event, replay and keep-alives behind
//! it, although everything they need is a read. So the writer starts the release, polls it
//! whenever it polls for its next chunk, and hands chunks out meanwhile. For the in-process ring
//! the release is done at its first poll, as before.
//!
//! Dropping a release that has not finished cancels it: releases are idempotent and monotonic,
//! and the next one the policy plans reaches at least as far.

use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};

/// A release in flight, with the id it releases through.
pub(crate) struct BackgroundRelease {
    through: u64,
    run: Pin<Box<dyn Future<Output = ()> + Send>>,
}

impl BackgroundRelease {
    /// `run` releases through `through` and does its own accounting.
    pub(crate) fn new(through: u64, run: impl Future<Output = ()> + Send + 'static) -> Self {
        BackgroundRelease {
            through,
            run: Box::pin(run),
        }
    }

    /// The id this release releases through.
    pub(crate) fn through(&self) -> u64 {
        self.through
    }
}

/// Runs `main` to completion while driving the release in `slot` beside it; the slot is emptied
/// when the release finishes, whichever finishes first.
pub(crate) async fn beside<T>(
    slot: &mut Option<BackgroundRelease>,
    main: impl Future<Output = T>,
) -> T {
    let mut main = pin!(main);
    poll_fn(|cx| {
        if let Some(release) = slot {
            if release.run.as_mut().poll(cx).is_ready() {
                *slot = None;
            }
        }
        main.as_mut().poll(cx)
    })
    .await
}

/// Polls the release in `slot` once: a release the backend completes at once (the in-process
/// ring) is done when this returns; any other goes on at the next poll.
pub(crate) async fn poke(slot: &mut Option<BackgroundRelease>) {
    beside(slot, std::future::ready(())).await;
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use super::*;

    #[tokio::test]
    async fn a_release_that_completes_at_once_is_done_after_one_poke() {
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        let mut slot = Some(BackgroundRelease::new(7, async move {
            flag.store(true, Ordering::Relaxed); // Relaxed: read on this thread only.
        }));
        poke(&mut slot).await;
        assert!(slot.is_none());
        assert!(done.load(Ordering::Relaxed));
    }

    #[tokio::test]
    async fn a_pending_release_does_not_hold_back_main_and_finishes_beside_a_later_one() {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let mut slot = Some(BackgroundRelease::new(3, async move {
            let _ = rx.await;
        }));
        assert_eq!(beside(&mut slot, async { 1 }).await, 1);
        assert_eq!(slot.as_ref().map(BackgroundRelease::through), Some(3));
        // The release finishes while `main` waits: the slot is emptied, `main` still completes.
        let (go, wait) = tokio::sync::oneshot::channel::<u8>();
        let main = async move { wait.await.unwrap() };
        let driver = async {
            tx.send(()).unwrap();
            tokio::task::yield_now().await;
            go.send(2).unwrap();
        };
        let (got, ()) = tokio::join!(beside(&mut slot, main), driver);
        assert_eq!(got, 2);
        assert!(slot.is_none());
    }
}
