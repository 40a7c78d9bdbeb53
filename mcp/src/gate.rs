//! [`Gate`]: how far a stream's events are durable in its external event log, which every
//! connection of the stream waits for before it sends an event.

use std::sync::Arc;

/// How far a stream's events are durable in its external event log (feature `redis`), or why
/// the log failed. Connections send no event past `through`.
#[derive(Debug, Clone, Default)]
pub(crate) struct Durable {
    through: u64,
    failed: Option<Arc<str>>,
}

impl Durable {
    /// Ids up to this one are in the log.
    pub(crate) fn through(&self) -> u64 {
        self.through
    }

    /// Why the log failed, once it has.
    pub(crate) fn failed(&self) -> Option<&Arc<str>> {
        self.failed.as_ref()
    }
}

/// The durable mark of a stream whose events are also written to an external log: a connection
/// holds each event back until the log acknowledged it, so no client ever sees an id that
/// another replica could not replay. Streams without an external log have no gate.
#[derive(Debug, Clone)]
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) struct Gate(Arc<tokio::sync::watch::Sender<Durable>>);

#[cfg_attr(not(feature = "redis"), allow(dead_code))]
impl Gate {
    pub(crate) fn new() -> Self {
        Gate(Arc::new(tokio::sync::watch::channel(Durable::default()).0))
    }

    /// Ids up to `seq` are in the log.
    pub(crate) fn advance(&self, seq: u64) {
        self.0.send_if_modified(|d| {
            let moved = seq > d.through;
            d.through = d.through.max(seq);
            moved
        });
    }

    /// The log failed: nothing past the durable mark will ever be sent.
    pub(crate) fn fail(&self, reason: &str) {
        self.0.send_modify(|d| {
            d.failed.get_or_insert_with(|| reason.into());
        });
    }

    /// The last durable id once the log has failed: nothing after it will ever be sent.
    pub(crate) fn failed_through(&self) -> Option<u64> {
        let durable = self.0.borrow();
        durable.failed.as_ref().map(|_| durable.through)
    }

    pub(crate) fn subscribe(&self) -> tokio::sync::watch::Receiver<Durable> {
        self.0.subscribe()
    }
}
