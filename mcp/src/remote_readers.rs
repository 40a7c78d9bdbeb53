//! The count of connections this process serves from Redis rather than from its own ring (another
//! replica produces their streams), per stream: the limit on them, and the reader gauge.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use replay_ring_sse::StreamIdentity;

/// How many connections this process serves from Redis, per stream.
#[derive(Default)]
pub(crate) struct RemoteReaders(Mutex<HashMap<StreamIdentity, usize>>);

impl RemoteReaders {
    pub(crate) fn total(&self) -> usize {
        self.0.lock().values().sum()
    }
}

/// One connection's place among its stream's [`RemoteReaders`], given back on drop.
pub(crate) struct RemoteSlot {
    readers: Arc<RemoteReaders>,
    stream: StreamIdentity,
}

impl RemoteSlot {
    /// A place for one more connection to `stream`, unless `limit` are already served.
    pub(crate) fn take(
        readers: &Arc<RemoteReaders>,
        stream: StreamIdentity,
        limit: usize,
    ) -> Option<Self> {
        let mut counts = readers.0.lock();
        // Looked up before inserting, so that a refusal leaves no entry behind.
        if counts.get(&stream).copied().unwrap_or(0) >= limit {
            return None;
        }
        *counts.entry(stream).or_insert(0) += 1;
        Some(RemoteSlot {
            readers: readers.clone(),
            stream,
        })
    }
}

impl Drop for RemoteSlot {
    fn drop(&mut self) {
        let mut counts = self.readers.0.lock();
        if let Some(count) = counts.get_mut(&self.stream) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.stream);
            }
        }
    }
}
