//! The Matrix channel against a real homeserver: the testkit's synapse (checked by matrix-nio and by the Python
//! nanobot 0.3.5's own Matrix channel in the testkit's tests), users played through its client-server API, the
//! channel under the channel manager.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod e2e;
mod relay;
