//! Shared oracles for the fuzz targets: a reference event-stream parser ([`event_stream`]) and the
//! sequential reference model of the ring ([`ring_model`]).

pub mod event_stream;
pub mod ring_model;
