//! Integration tests for nanobot-providers.
