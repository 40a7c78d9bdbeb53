//! On a Redis Cluster, which node serves each hash slot, as far as this backend has learned it:
//! from the cluster's slot map (`CLUSTER SLOTS`) when it connects and whenever a blocking read
//! cannot reach its node, and from each `MOVED` a blocking read follows.
//!
//! A stream's blocking reads (its shared tail, a producer waiting for room) run on connections of
//! their own, which start at the node this map names for the stream's slot. Without it they
//! started at the URL's node, and every stream handle whose slot another node serves paid one
//! connection and one redirected read more. An entry that went stale costs what no entry costs:
//! the node answers `MOVED` (followed, and learned here), or cannot be reached or answers
//! `CLUSTERDOWN` (a node taken out of the cluster and reset): the slot map is read again.
//! Entries `CLUSTER SLOTS` gives no usable address for (an empty host, `?`) stay unknown.
//!
//! Memory: two bytes per slot (32 KiB) and one address per node, per backend.

use std::sync::Mutex;

/// How many hash slots a Redis Cluster has.
const SLOTS: usize = 16_384;

/// No node known for a slot.
const UNKNOWN: u16 = u16::MAX;

/// The hash slot of `key`: CRC16 (XMODEM) of its hash tag, the text between the first `{` and
/// the next `}` when that is not empty, or of the whole key.
pub(crate) fn slot_of(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    let hashed = tagged.unwrap_or(key);
    crc16::State::<crc16::XMODEM>::calculate(hashed) % SLOTS as u16
}

#[derive(Debug)]
pub(crate) struct SlotMap {
    known: Mutex<Known>,
}

#[derive(Debug)]
struct Known {
    /// Per slot, an index into `nodes`, or [`UNKNOWN`].
    slots: Box<[u16]>,
    /// Every node (`host:port`) some slot was learned at. Nodes a cluster forgot stay listed: a
    /// cluster has at most a few hundred nodes, and an address may come back.
    nodes: Vec<String>,
}

impl Known {
    fn index_of(&mut self, node: &str) -> u16 {
        if let Some(i) = self.nodes.iter().position(|n| n == node) {
            return i as u16;
        }
        // A cluster's nodes number in the hundreds at most, far below `UNKNOWN`; past that, the
        // map forgets everything and starts over rather than mixing indexes up.
        if self.nodes.len() >= usize::from(UNKNOWN) {
            self.nodes.clear();
            self.slots.fill(UNKNOWN);
        }
        self.nodes.push(node.to_owned());
        (self.nodes.len() - 1) as u16
    }
}

impl SlotMap {
    pub(crate) fn new() -> Self {
        SlotMap {
            known: Mutex::new(Known {
                slots: vec![UNKNOWN; SLOTS].into_boxed_slice(),
                nodes: Vec::new(),
            }),
        }
    }

    fn known(&self) -> std::sync::MutexGuard<'_, Known> {
        // A panic while the lock was held left at worst a half-updated map, which is only a hint.
        self.known
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The node that serves `key`'s slot, if one was learned.
    pub(crate) fn node_for(&self, key: &str) -> Option<String> {
        let known = self.known();
        let index = known.slots[usize::from(slot_of(key.as_bytes()))];
        known.nodes.get(usize::from(index)).cloned()
    }

    /// Every node (`host:port`) a slot was learned at.
    pub(crate) fn nodes(&self) -> Vec<String> {
        self.known().nodes.clone()
    }

    /// Records that `node` serves `slot` (a `MOVED` said so); slots out of range are ignored.
    pub(crate) fn learn(&self, slot: u16, node: &str) {
        if usize::from(slot) >= SLOTS {
            return;
        }
        let mut known = self.known();
        let index = known.index_of(node);
        known.slots[usize::from(slot)] = index;
    }

    /// Records a slot map read from the cluster: each range of slots (first and last, inclusive)
    /// with the node that serves it. Slots no range covers keep what was known of them.
    pub(crate) fn learn_ranges(&self, ranges: &[(u16, u16, String)]) {
        let mut known = self.known();
        for (first, last, node) in ranges {
            let (first, last) = (*first, *last);
            let index = known.index_of(node);
            let last = usize::from(last).min(SLOTS - 1);
            if let Some(slots) = known.slots.get_mut(usize::from(first)..=last) {
                slots.fill(index);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Slots of keys as Redis computes them (`CLUSTER KEYSLOT`, Redis 7.0), the hash tag rules
    /// included: the first `{…}` counts, an empty `{}` does not make a tag.
    #[test]
    fn slots_are_redis_s() {
        assert_eq!(slot_of(b"foo"), 12182);
        assert_eq!(slot_of(b"123456789"), 12739);
        assert_eq!(slot_of(b"{user1000}.following"), slot_of(b"user1000"));
        assert_ne!(slot_of(b"foo{}{bar}"), slot_of(b"bar"));
        assert_eq!(slot_of(b"foo{{bar}}zap"), slot_of(b"{bar"));
        assert_eq!(slot_of(b"foo{bar}{zap}"), slot_of(b"bar"));
    }

    #[test]
    fn learned_nodes_are_found_by_key() {
        let map = SlotMap::new();
        assert_eq!(map.node_for("foo"), None);
        let range = |first, last, node: &str| (first, last, node.to_owned());
        map.learn_ranges(&[range(0, 8191, "a:1"), range(8192, 16383, "b:2")]);
        assert_eq!(map.node_for("foo").as_deref(), Some("b:2"));
        map.learn(slot_of(b"foo"), "c:3");
        assert_eq!(map.node_for("foo").as_deref(), Some("c:3"));
        assert_eq!(map.node_for("123456789").as_deref(), Some("b:2"));
        // Out of range: ignored, not a panic.
        map.learn(16384, "d:4");
        map.learn_ranges(&[range(16000, u16::MAX, "e:5"), range(9, 3, "f:6")]);
        assert_eq!(map.node_for("foo").as_deref(), Some("c:3"));
    }
}
