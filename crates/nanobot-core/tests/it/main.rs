//! Integration tests of nanobot-core.
