//! A fixed-size tournament tree: one optional key per slot, the smallest key in O(1), a slot
//! update in O(log n), and the first slot whose key passes a monotone test in O(log n). It lets
//! [`Retention`](super::Retention) answer "slowest live connection" and "which connections may be
//! due for a cut" per written batch without walking the whole connection table, and it never
//! allocates after construction.

/// `nodes[n + i]` is slot `i`'s key; every inner node `p` in `1..n` holds the smaller of
/// `nodes[2p]` and `nodes[2p + 1]` (`None` = no key). Any `n` works: each inner node has both
/// children in range, and node 1 is an ancestor of every slot.
#[derive(Debug, Clone)]
pub(super) struct MinTree<K> {
    n: usize,
    nodes: Box<[Option<K>]>,
}

fn smaller<K: Ord + Copy>(a: Option<K>, b: Option<K>) -> Option<K> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl<K: Ord + Copy> MinTree<K> {
    /// `n` slots, slot `i` holding `key(i)`. O(n).
    pub(super) fn from_fn(n: usize, key: impl Fn(usize) -> Option<K>) -> Self {
        let mut nodes = vec![None; 2 * n].into_boxed_slice();
        for i in 0..n {
            nodes[n + i] = key(i);
        }
        for p in (1..n).rev() {
            nodes[p] = smaller(nodes[2 * p], nodes[2 * p + 1]);
        }
        MinTree { n, nodes }
    }

    /// `n` empty slots.
    pub(super) fn new(n: usize) -> Self {
        Self::from_fn(n, |_| None)
    }

    /// Sets slot `i`'s key. O(log n); stops early once an ancestor is unchanged.
    pub(super) fn set(&mut self, i: usize, key: Option<K>) {
        let mut p = self.n + i;
        if self.nodes[p] == key {
            return;
        }
        self.nodes[p] = key;
        while p > 1 {
            p /= 2;
            let min = smaller(self.nodes[2 * p], self.nodes[2 * p + 1]);
            if self.nodes[p] == min {
                return;
            }
            self.nodes[p] = min;
        }
    }

    /// The smallest key of any slot.
    pub(super) fn min(&self) -> Option<K> {
        // With one slot, node 1 is that slot; with none there is no node 1.
        self.nodes.get(1).copied().flatten()
    }

    /// A slot whose key passes `test`, where `test` holds for every key up to some bound and for
    /// none above it (so a subtree holds a passing key iff its smallest key passes). O(log n).
    pub(super) fn find(&self, test: impl Fn(K) -> bool) -> Option<usize> {
        let passes = |p: usize| self.nodes[p].is_some_and(&test);
        if self.n == 0 || !passes(1) {
            return None;
        }
        let mut p = 1;
        while p < self.n {
            p = if passes(2 * p) { 2 * p } else { 2 * p + 1 };
        }
        Some(p - self.n)
    }
}

#[cfg(test)]
mod tests {
    use super::MinTree;
    use proptest::prelude::*;

    proptest! {
        /// Against a plain vector: `min` is the minimum, `find` returns a passing slot exactly
        /// when one exists.
        #[test]
        fn matches_a_plain_scan(
            n in 0usize..40,
            ops in proptest::collection::vec((0usize..40, proptest::option::of(0u32..50)), 0..120),
            bound in 0u32..50,
        ) {
            let mut tree = MinTree::new(n);
            let mut plain = vec![None; n];
            for (i, key) in ops {
                if n == 0 { break; }
                let i = i % n;
                tree.set(i, key);
                plain[i] = key;
                prop_assert_eq!(tree.min(), plain.iter().flatten().min().copied());
                match tree.find(|k| k <= bound) {
                    Some(found) => prop_assert!(plain[found].is_some_and(|k| k <= bound)),
                    None => prop_assert!(plain.iter().flatten().all(|&k| k > bound)),
                }
            }
            let built = MinTree::from_fn(n, |i| plain[i]);
            prop_assert_eq!(built.min(), tree.min());
        }
    }
}
