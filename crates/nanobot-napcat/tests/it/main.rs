//! The NapCat channel against the testkit's fake OneBot v11 server (the fake itself is checked by a OneBot client
//! library and by the Python nanobot 0.3.5's own NapCat channel in the testkit's tests): a real WebSocket and real
//! HTTP on loopback, under the channel manager.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod e2e;
