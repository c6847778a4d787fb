//! The `~/.nanobot/config.json` schema, its loader and the nanobot paths.
//!
//! This crate owns the typed [`Config`] (camelCase keys as the Python nanobot writes them, snake_case
//! accepted), secrets that never print ([`Secret`], [`SecretMap`]), and the paths under `~/.nanobot`.
//!
//! It must not know about HTTP, LLMs or chat platforms, and it never reads the process environment or the
//! home directory on its own: the binaries pass both in.
//!
//! ```
//! use nanobot_config::{Config, Secret};
//!
//! let config: Config = serde_json::from_str(r#"{
//!     "agents": {"defaults": {"model": "openai/gpt-4o", "max_tokens": 4096}},
//!     "providers": {"openai": {"apiKey": "sk-123"}}
//! }"#)?;
//! assert_eq!(config.agents.defaults.max_tokens, 4096);
//! assert_eq!(config.gateway.port, 18790);
//! assert_eq!(config.providers.get("openai").and_then(|p| p.api_key.clone()), Some(Secret::new("sk-123")));
//! assert!(!format!("{config:?}").contains("sk-123"));
//! # Ok::<(), serde_json::Error>(())
//! ```

mod doc;
mod env_overlay;
pub mod env_vars;
mod error;
mod interpolate;
mod layers;
mod load;
mod migrate;
pub mod paths;
mod presets;
mod save;
mod schema;
mod secret;
mod unknown;
mod validate;

pub use error::ConfigError;
pub use load::{ConfigWarning, LoadedConfig, WarningKind, load, load_str};
pub use presets::{DEFAULT_PRESET, ModelPreset};
pub use save::save;
pub use schema::*;
pub use secret::{EMPTY_SECRET, REDACTED, Secret, SecretMap, SecretOptionExt};
