//! The Signal channel against the testkit's fake signal-cli daemon (the fake itself is checked by
//! pysignalclijsonrpc and by the Python nanobot 0.3.5's own Signal channel in the testkit's tests): real HTTP on
//! loopback, the daemon's event stream and JSON-RPC, under the channel manager.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod e2e;
