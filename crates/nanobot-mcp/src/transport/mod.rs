//! The three transports and the code that opens a session over one of them.

pub mod sse;
pub(crate) mod stdio;

pub use sse::LegacySseTransport;
pub use stdio::{INHERITED_ENV, child_env};
