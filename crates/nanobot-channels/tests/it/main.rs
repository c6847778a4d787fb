//! Integration tests of nanobot-channels.

#[cfg(feature = "download")]
mod download;
mod layering;
mod manager;
