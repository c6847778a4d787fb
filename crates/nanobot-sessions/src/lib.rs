//! Conversation sessions: the JSONL files the Python nanobot writes, read and written compatibly.
//!
//! This crate owns [`Session`] (one conversation), [`SessionMessage`] (one stored message, kept as its JSON
//! object so unknown fields survive), the [`SessionStore`] that maps session keys to files, the history replayed
//! to the model ([`Session::history`]: starts at a user turn, no orphan tool results, interrupted tool calls
//! closed), and crash-recovery checkpoints ([`SessionStore::write_checkpoint`]).
//!
//! It does not know LLM providers, tools, channels or configuration: messages are JSON objects (the agent core
//! converts them to its typed chat messages with serde), and the config dir and workspace are passed in.
//!
//! # Files
//!
//! `<config dir>/sessions/<workspace id>/<unpadded base64url(key)>.jsonl`, where the workspace id is read from
//! `<workspace>/.nanobot/workspace-id`; the folder's `.workspace` marker names the workspace it belongs to (see
//! [`namespace`]). First line: the metadata record
//! `{"_type":"metadata","key":…,"created_at":…,"updated_at":…,"metadata":{…},"last_consolidated":N}`; then one
//! OpenAI-style message per line, each with a `timestamp`. A later metadata change is appended as a complete
//! metadata record (the last one wins; the Python loader treats such lines the same way), and the file is
//! compacted to a single first-line record from time to time. See [`SessionStore`] for durability, caching and
//! concurrency.
//!
//! # Cost on long sessions
//!
//! Appending is one write of the new lines. Metadata records appended by this crate also carry
//! `"_message_count"` (the number of messages before them; ignored by the Python nanobot), and one is appended at
//! least every 256 messages. Reading the history of a session that is not cached therefore reads the file
//! backwards: up to the newest metadata record (which gives `last_consolidated` and every message's index) and
//! the newest `2 × max_messages + 32` messages — a bounded amount, whatever the session's length. A file written
//! by the Python nanobot is read whole once, then gets such a record. `docs/benchmarks.md` has the figures.
//!
//! # Example
//!
//! ```
//! use nanobot_sessions::{SessionMessage, SessionStore};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).build()?;
//! # rt.block_on(async {
//! let home = tempfile::tempdir()?;
//! let workspace = tempfile::tempdir()?;
//! let store = SessionStore::new(home.path(), workspace.path())?;
//!
//! store.append("cli:direct", vec![SessionMessage::new("user", "hi")]).await?;
//! store.append("cli:direct", vec![SessionMessage::new("assistant", "hello")]).await?;
//!
//! let history = store.history("cli:direct", 50).await?;
//! assert_eq!(history.len(), 2);
//! assert_eq!(history[0].role(), Some("user"));
//! assert!(store.path_for("cli:direct").ends_with("Y2xpOmRpcmVjdA.jsonl"));
//! # Ok::<_, Box<dyn std::error::Error>>(())
//! # })
//! # }
//! ```

mod error;
mod format;
mod fsio;
pub mod handles;
pub mod keyname;
pub mod legacy;
mod message;
pub mod namespace;
mod session;
mod store;
mod tail;
mod time;

pub use error::{Result, SessionError};
pub use handles::{HANDLE_METADATA_KEY, SessionHandle};
pub use message::SessionMessage;
pub use session::{INTERRUPTED_TOOL_RESULT, LAST_SUMMARY_KEY, Session, SessionHeader};
pub use store::{
    FsyncPolicy, HeaderChange, MAX_MESSAGE_BYTES, Opening, RestoreReport, SPILL_PREVIEW_BYTES, SessionInfo,
    SessionStore, SessionVersion, StoreOptions, Unconsolidated, WORKSPACE_ID_FILE,
};
