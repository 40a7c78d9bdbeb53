//! Shared harness for the loom models in `tests/` (one file per race; see `docs/verification.md`).
//!
//! Everything here exists only under `--cfg replay_ring_loom`; an ordinary workspace build compiles
//! an empty crate and empty test binaries.
#![deny(missing_docs, missing_debug_implementations)]

#[cfg(replay_ring_loom)]
mod harness;
#[cfg(replay_ring_loom)]
pub use harness::*;
