//! Integration tests of nanobot-config.

mod schema;
