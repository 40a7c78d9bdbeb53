//! Shared oracles for the fuzz targets: a reference event-stream parser ([`event_stream`]) and the
//! sequential reference model of the ring ([`ring_model`]).

pub mod event_stream;
// The model also drives the property test `tests/model.rs`; one file serves both.
#[path = "../../tests/support/ring_model.rs"]
pub mod ring_model;
