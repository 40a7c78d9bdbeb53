//! Loom models for replay-ring live in `tests/`; see docs/verification.md.
