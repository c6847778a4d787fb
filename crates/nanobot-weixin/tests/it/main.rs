//! The personal WeChat channel against the testkit's fake iLink bot API and CDN (the fake itself is checked by the
//! Python nanobot 0.3.5's own weixin channel, its `nanobot channels login weixin` and the PyPI client
//! `weixin-ilink` in the testkit's tests): real HTTP on loopback, the channel under the channel manager, the QR
//! login through the library function.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod e2e;
