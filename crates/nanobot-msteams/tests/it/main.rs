//! The Teams channel against the testkit's fake Microsoft services (the fake itself is checked by Microsoft's Bot
//! Framework SDK and by the Python nanobot 0.3.5's own Teams channel in the testkit's tests): real HTTPS on
//! loopback for the token endpoint, the published keys and the Bot Connector, the channel's own webhook, under
//! the channel manager.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod e2e;
