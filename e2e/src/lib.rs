//! End-to-end harness: chaos proxy and client drivers (work in progress).
