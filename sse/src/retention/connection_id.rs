//! The id of a connection in a retention table, stamped with the table that issued it.

use std::sync::atomic::{AtomicU64, Ordering};

/// A live connection's entry in a [`Retention`](super::Retention) table (not `Clone`: one per
/// connection).
///
/// ```
/// let mut r = replay_ring_sse::Retention::new(Default::default(), 2);
/// let a = r.connect(0).unwrap();
/// let b = r.connect(0).unwrap();
/// assert_ne!(a, b);
/// ```
///
/// An id belongs to the table that issued it: handing it to another `Retention` is a caller's bug,
/// and panics there rather than touching whichever connection has the same index.
///
/// ```should_panic
/// let mut a = replay_ring_sse::Retention::new(Default::default(), 1);
/// let mut b = replay_ring_sse::Retention::new(Default::default(), 1);
/// let from_a = a.connect(0).unwrap();
/// let _b0 = b.connect(0).unwrap();
/// b.on_written(&from_a, 1, std::time::Instant::now()); // panics: not b's connection
/// ```
#[derive(Debug, PartialEq, Eq)]
pub struct ConnectionId {
    pub(super) index: usize,
    table: TableTag,
}

/// Which table issued a [`ConnectionId`]: unique per table for the life of the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct TableTag(u64);

impl TableTag {
    pub(super) fn new() -> Self {
        // Relaxed: only uniqueness matters, which the read-modify-write gives; it orders nothing.
        static NEXT: AtomicU64 = AtomicU64::new(0);
        TableTag(NEXT.fetch_add(1, Ordering::Relaxed))
    }

    pub(super) fn issue(self, index: usize) -> ConnectionId {
        ConnectionId { index, table: self }
    }

    /// `conn`'s index in this table.
    ///
    /// # Panics
    ///
    /// If another table issued `conn`.
    pub(super) fn index_of(self, conn: &ConnectionId) -> usize {
        assert!(
            conn.table == self,
            "a ConnectionId from another Retention was used on this one"
        );
        conn.index
    }
}
