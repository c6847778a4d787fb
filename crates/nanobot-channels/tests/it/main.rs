//! Integration tests of nanobot-channels.

mod layering;
mod manager;
