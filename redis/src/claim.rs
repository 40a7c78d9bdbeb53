//! Lease acquisitions whose outcome is unknown, recognised when they are repeated.
//!
//! An acquisition is a write: when its reply is lost (a timeout while Redis stalls, a dropped
//! connection, a cancelled call), the script may have run and granted a token that nobody holds,
//! and every later acquisition would be refused until that lease expired: production stops for a
//! whole lease after Redis recovers. So each acquisition carries a claim, a random nonce that the
//! script stores next to the fencing counter when it grants the lease. A handle keeps the claim of
//! an acquisition that got no answer and sends it again with its next one; the script then finds
//! the lease held by the token it granted under that claim and hands the same token back instead
//! of refusing. A claim is used by one acquisition at a time, so the token still goes to exactly
//! one producer.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// The claim a handle (and its clones) keeps for its next acquisition.
#[derive(Debug, Default, Clone)]
pub(crate) struct Claims(Arc<Mutex<Option<String>>>);

impl Claims {
    /// The claim for one acquisition: the one left by an acquisition that got no answer, or a new
    /// one. It goes back to the handle when dropped, unless [`answered`](Claim::answered).
    pub(crate) fn take(&self) -> Claim<'_> {
        let left = self.0.lock().unwrap_or_else(|e| e.into_inner()).take();
        Claim {
            claims: self,
            nonce: Some(left.unwrap_or_else(new_nonce)),
        }
    }
}

/// One acquisition's claim (see [`Claims::take`]).
pub(crate) struct Claim<'a> {
    claims: &'a Claims,
    nonce: Option<String>,
}

impl Claim<'_> {
    /// The nonce to send.
    pub(crate) fn nonce(&self) -> &str {
        self.nonce.as_deref().unwrap_or_default()
    }

    /// Redis answered: the outcome is known, and the claim is not sent again.
    pub(crate) fn answered(mut self) {
        self.nonce = None;
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        if let Some(nonce) = self.nonce.take() {
            let mut slot = self.claims.0.lock().unwrap_or_else(|e| e.into_inner());
            // Another acquisition may have left its own meanwhile; either one is enough to
            // recognise a lease granted to this handle, and the newest is the likelier.
            *slot = Some(nonce);
        }
    }
}

/// 128 random bits in hex: two keyed hashes of a process-wide counter. `RandomState` keys come
/// from the operating system's randomness, so claims of different processes do not collide, and
/// the counter keeps those of one process apart.
fn new_nonce() -> String {
    static KEYS: OnceLock<(RandomState, RandomState)> = OnceLock::new();
    // Relaxed: the counter only has to hand out distinct values; it orders nothing else.
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let (a, b) = KEYS.get_or_init(|| (RandomState::new(), RandomState::new()));
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{:016x}{:016x}", a.hash_one(n), b.hash_one(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unanswered_claim_is_sent_again_and_an_answered_one_is_not() {
        let claims = Claims::default();
        let first = claims.take();
        let nonce = first.nonce().to_owned();
        assert_eq!(nonce.len(), 32);
        drop(first);
        let again = claims.take();
        assert_eq!(again.nonce(), nonce);
        // While it is out, a concurrent acquisition gets a claim of its own.
        let other = claims.take();
        assert_ne!(other.nonce(), nonce);
        other.answered();
        again.answered();
        assert_ne!(claims.take().nonce(), nonce);
    }
}
