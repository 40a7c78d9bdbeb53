//! rmcp event store backed by replay-ring (work in progress).
