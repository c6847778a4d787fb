//! Integration tests of nanobot-channels.

mod manager;
