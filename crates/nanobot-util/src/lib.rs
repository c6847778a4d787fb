//! nanobot's shared plumbing: one implementation of each small job that several crates need.
//!
//! **Owns:** the retry/restart delay schedule ([`Backoff`], on `backon`), atomic file replacement
//! ([`write_atomic`] for a path, [`replace_in`] for a directory handle), nanobot's own files in a directory the
//! model can write to, opened beneath a handle of it ([`ConfinedDir`]), poison-ignoring locks ([`lock`],
//! [`read_lock`], [`write_lock`]), one-line error chains ([`ErrorChain`]), the redacted [`Secret`] string and
//! [`SecretMap`] (on `secrecy`), the environment map libraries are handed ([`EnvMap`]), the lenient list of ids
//! settings are read with ([`de::string_list`]) and the trait of files shared between replicas ([`SharedFiles`]), line diffs of text
//! ([`text_diff`]), and the target and context hooks of the exported spans
//! ([`trace`]). `tests/one_owner.rs` keeps the locks and the file replacement here.
//!
//! **Must not know:** anything about nanobot's domain (messages, config schema, channels). It sits at the
//! bottom floor beside `nanobot-types`, so configuration, channels and the storage crates can all use it without
//! taking the conversation types. It never reads the process environment.
//!
//! ```
//! use std::time::Duration;
//! use nanobot_util::{Backoff, ErrorChain, Secret};
//!
//! let mut backoff = Backoff::exponential(Duration::from_secs(1), Duration::from_secs(4));
//! let delays: Vec<_> = (0..4).map(|_| backoff.next_delay()).collect();
//! assert_eq!(delays, [1, 2, 4, 4].map(Duration::from_secs));
//!
//! let key = Secret::new("sk-live-123");
//! assert_eq!(format!("{key:?} {key}"), "[REDACTED] [REDACTED]");
//!
//! let err = std::io::Error::other("disk full");
//! assert_eq!(ErrorChain(&err).to_string(), "disk full");
//! ```

mod backoff;
mod confined;
pub mod de;
mod env;
mod error_chain;
mod fs;
pub mod secret;
pub mod shared;
#[cfg(unix)]
mod stamp;
mod sync;
pub mod text_diff;
pub mod trace;

pub use backoff::Backoff;
pub use confined::{
    ConfinedDir, EntryKind, MAX_READ_BYTES, WORKSPACE_PROMPT_MAX_CHARS, replace_in, workspace_prompt,
};
pub use env::EnvMap;
pub use error_chain::{ErrorChain, error_chain};
pub use fs::{AtomicWriteError, normalize, read_bounded, read_to_string_bounded, real_path, write_atomic};
pub use secret::{Secret, SecretMap};
pub use shared::{MemorySharedFiles, SharedFile, SharedFiles, SharedFilesError};
#[cfg(unix)]
pub use stamp::{FileStamp, SETTLED};
pub use sync::{lock, read_lock, write_lock};
