//! Integration tests of nanobot-memory: real files, real SQLite, the MockLlm over real HTTP.

#![allow(clippy::unwrap_used, reason = "test helpers: a failure should fail the test")]

mod confinement;
mod consolidation;
mod dream;
mod facade;
mod history;
mod scopes;
mod search;
mod support;
