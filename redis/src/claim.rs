//! Lease acquisitions whose outcome is unknown, recognised when they are repeated.
//!
//! An acquisition is a write: when its reply is lost (a timeout while Redis stalls, a dropped
//! connection, a cancelled call), the script may have run and granted a token that nobody holds,
//! and every later acquisition would be refused until that lease expired: production stops for a
//! whole lease after Redis recovers. So each acquisition carries a claim, a random nonce that the
//! script stores next to the fencing counter when it grants the lease. A handle keeps the claim of
//! an acquisition that got no answer and sends it again with its next one; the script then finds
//! the lease held by the token it granted under that claim (the claim is stored with its token,
//! so a later grant by anything else never matches it) and hands the same token back instead of
//! refusing. A handle's acquisitions take turns, so a claim is out with one at a time and the
//! token still goes to exactly one producer.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use tokio::sync::{Mutex, OwnedMutexGuard};

/// The claim a handle (and its clones) keeps for its next acquisition. Acquisitions of one handle
/// take turns: two unanswered ones at once would leave two claims, of which the handle could keep
/// only one, perhaps not the one the lease was granted under.
#[derive(Debug, Default, Clone)]
pub(crate) struct Claims(Arc<Mutex<Option<String>>>);

impl Claims {
    /// The claim for one acquisition, once no other acquisition of this handle is under way: the
    /// one left by an acquisition that got no answer, or a new one. It stays with the handle
    /// unless [`answered`](Claim::answered).
    pub(crate) async fn take(&self) -> Claim {
        let mut slot = self.0.clone().lock_owned().await;
        slot.get_or_insert_with(new_nonce);
        Claim { slot }
    }
}

/// One acquisition's claim (see [`Claims::take`]); the handle's next acquisition waits for it.
pub(crate) struct Claim {
    slot: OwnedMutexGuard<Option<String>>,
}

impl Claim {
    /// The nonce to send.
    pub(crate) fn nonce(&self) -> &str {
        self.slot.as_deref().unwrap_or_default()
    }

    /// Redis answered: the outcome is known, and the claim is not sent again.
    pub(crate) fn answered(mut self) {
        *self.slot = None;
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

    #[tokio::test]
    async fn an_unanswered_claim_is_sent_again_and_an_answered_one_is_not() {
        let claims = Claims::default();
        let first = claims.take().await;
        let nonce = first.nonce().to_owned();
        assert_eq!(nonce.len(), 32);
        // A second acquisition of the handle waits for the first.
        let clone = claims.clone();
        let mut second = Box::pin(async move { clone.take().await.nonce().to_owned() });
        assert!(futures_util::FutureExt::now_or_never(second.as_mut()).is_none());
        drop(first);
        assert_eq!(second.await, nonce, "unanswered: sent again");
        let again = claims.take().await;
        assert_eq!(again.nonce(), nonce);
        again.answered();
        assert_ne!(claims.take().await.nonce(), nonce, "answered: spent");
    }
}
