//! The POSTs between their request stream's priming event and the stream's binding to their
//! session. Such a stream belongs to no session yet, just like an orphan (a stream whose POST
//! went away before binding it); the sweep tells them apart by asking whether a POST that started
//! before the stream was created is still under way.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::Mutex;

use super::RingEventStore;

/// When each POST now between its start and its binding started (with a counter for ties).
#[derive(Debug, Default)]
pub(crate) struct BindsInFlight {
    started: Mutex<BTreeSet<(Instant, u64)>>,
    next: AtomicU64,
}

impl BindsInFlight {
    /// When the oldest POST still under way started.
    pub(crate) fn oldest(&self) -> Option<Instant> {
        self.started.lock().first().map(|&(at, _)| at)
    }
}

/// One POST under way, until dropped: after its stream is bound, or when the POST is cancelled.
pub(crate) struct BindInFlight {
    store: RingEventStore,
    key: (Instant, u64),
}

impl Drop for BindInFlight {
    fn drop(&mut self) {
        self.store.inner.binds.started.lock().remove(&self.key);
    }
}

impl RingEventStore {
    /// Marks a POST as under way: a request stream created from now on is not an orphan while
    /// the returned guard lives, however long the POST takes to bind it.
    pub(crate) fn start_binding(&self) -> BindInFlight {
        let binds = &self.inner.binds;
        // Relaxed: a unique counter; nothing is published through it.
        let key = (Instant::now(), binds.next.fetch_add(1, Ordering::Relaxed));
        binds.started.lock().insert(key);
        BindInFlight {
            store: self.clone(),
            key,
        }
    }
}
