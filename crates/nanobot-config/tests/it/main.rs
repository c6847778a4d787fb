//! Integration tests of nanobot-config: the Python fixture, loading, environment, save round trips.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers outside #[test] functions"
)]

mod schema;
