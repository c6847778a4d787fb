//! How nanobot talks to language models.
//!
//! (Seed: the full crate arrives with the providers issue. [`ToolSpec`] is fixed here first because the tools
//! crate builds on it.)

mod types;

pub use types::ToolSpec;
