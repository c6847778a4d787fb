//! Integration tests for nanobot-testkit: a real reqwest client against the mock.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers outside #[test] fns fail the test by panicking"
)]

mod anthropic;
mod fake_sdks;
mod faults;
mod home;
mod openai;
mod peers;
mod real_sdk;
mod script;
mod snapshots;
mod support;
mod synapse;
