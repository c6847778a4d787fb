//! The Python wheel, in a test binary of its own: building it rewrites `target/debug/nanobot` (maturin builds the
//! binary with its own feature set), so it must not run beside the `cli` tests, which execute that file. Cargo
//! runs test binaries one after another.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test helpers may panic")]

#[path = "../cli/support.rs"]
#[allow(
    dead_code,
    reason = "shared with the cli tests; the wheel test uses a few of its helpers"
)]
mod support;
mod wheel;
