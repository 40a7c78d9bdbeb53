//! Shared helpers live in `benches/common/`; this library is empty so that the package has a target
//! besides its benchmarks.
