//! Long-term memory of the nanobot agent.
//!
//! **Owns:** the memory files of a workspace ([`MemoryStore`]: `memory/MEMORY.md`, the append-only
//! `memory/history.jsonl` with unique increasing cursors, `memory/.dream_cursor`, migration of the legacy
//! `memory/HISTORY.md`), consolidation of long sessions into memory by 0.3.5's archive prompt (the model's text answer goes
//! to `history.jsonl`; [`Consolidator`]), Dream, the periodic curator that edits `MEMORY.md` / `SOUL.md` / `USER.md` / `skills/`
//! with restricted file tools and keeps an undo log ([`Dream`], [`DreamRecord`]), and the `memory_search` tool
//! over an embedded SQLite FTS5 index ([`SearchIndex`], [`MemorySearchTool`]). [`Memory`] bundles them for the
//! agent core.
//!
//! **Must not know:** configuration files, the process environment, channels, the agent loop. Models are
//! reached through [`nanobot_types::Provider`], sessions through [`nanobot_sessions::SessionStore`]; the
//! core resolves config into [`ConsolidationSettings`] and [`DreamSettings`] and schedules Dream.
//!
//! # Files (inside the workspace)
//!
//! | file | what |
//! |---|---|
//! | `memory/MEMORY.md` | long-term facts, always in the system prompt; replaced atomically |
//! | `memory/history.jsonl` | `{"cursor","timestamp","content","session_key"}` per line, append-only |
//! | `memory/.dream_cursor` | the last history cursor Dream processed |
//! | `memory/HISTORY.md.bak` | the legacy log after its one-time migration |
//! | `memory/.dream/<n>.json` | Dream change records (contents before and after) |
//! | `memory/scopes/<name>/…` | the same files for one chat's or person's memory ([`scope`]; `per-chat`/`per-user`) |
//!
//! Every one of them is opened beneath a handle of the workspace ([`nanobot_util::ConfinedDir`]): the model's
//! commands can write there, and a link they leave that leads out of the workspace is refused, never followed.
//! The `memory_search` index (rebuildable from the files above and the sessions) is kept out of the workspace, in
//! the session store's folder ([`SESSION_DIR_INDEX_FILE`]), because SQLite opens files by name; embedders may
//! still put one at `memory/index.sqlite` with [`SearchIndex::open_in_workspace`].
//!
//! # Example
//!
//! ```
//! # #[cfg(feature = "search")] {
//! use nanobot_memory::{MemoryStore, SearchIndex};
//!
//! let ws = tempfile::tempdir().unwrap();
//! let store = MemoryStore::new(ws.path());
//! std::fs::create_dir_all(store.dir()).unwrap();
//! std::fs::write(store.dir().join("HISTORY.md"), "[2025-12-24 18:00] Bought a blue bike.\n\n").unwrap();
//! assert_eq!(store.migrate_legacy_history().unwrap(), Some(1));
//! assert!(store.dir().join("HISTORY.md.bak").exists());
//!
//! let entry = store.append_history("[2026-01-01 09:00] Planned a trip to Lisbon.", Some("cli:direct")).unwrap();
//! assert_eq!(entry.cursor, 2);
//!
//! let index = SearchIndex::open_in_workspace(ws.path()).unwrap();
//! index.sync_history(&store).unwrap();
//! assert_eq!(index.search("bike", 5).unwrap()[0].position, 1);
//! # }
//! ```
//!
//! # Cargo features
//!
//! - `search` (default): `memory_search` over an embedded SQLite FTS5 index (SQLite is compiled in). Without it
//!   there is no index and no tool; consolidation and Dream are unchanged.

mod consolidate;
mod dream;
mod error;
mod format;
mod fsio;
pub mod scope;
#[cfg(feature = "search")]
mod search;
mod store;
mod sync;
#[cfg(feature = "search")]
mod tool;

use std::path::Path;
use std::sync::Arc;

use nanobot_sessions::SessionStore;
use nanobot_types::Provider;

pub use consolidate::{
    ARCHIVE_PROMPT, Budget, ConsolidationOutcome, ConsolidationSettings, Consolidator, NOTHING_TO_KEEP,
    TokenCounter, last_summary,
};
pub use dream::{
    DEFAULT_DREAM_PROMPT, DREAM_FILES, DREAM_PROMPT_FILE, DREAM_RECORDS_DIR, DREAM_SKILLS_DIR, Dream,
    DreamOutcome, DreamRecord, DreamSettings, FileChange, RecordKind, RestoreOutcome,
    WORKSPACE_PROMPT_MAX_CHARS, workspace_dream_prompt,
};
pub use error::{MemoryError, Result};
pub use scope::{MemoryScope, SCOPES_DIR, ScopeKey};
#[cfg(feature = "search")]
pub use search::{HitKind, INDEX_FILE, SESSION_DIR_INDEX_FILE, SearchHit, SearchIndex};
pub use store::{
    DREAM_CURSOR_FILE, HISTORY_FILE, HistoryEntry, LEGACY_HISTORY_FILE, MEMORY_DIR, MEMORY_FILE, MemoryStore,
};
pub use sync::{
    MAX_ATTEMPTS as SYNC_MAX_ATTEMPTS, MemorySync, PROFILE_FILES, SHARED_PROFILE_DIR, SyncReport,
    shared_files_of, shared_name_of,
};
#[cfg(feature = "search")]
pub use tool::{DEFAULT_LIMIT, MAX_LIMIT, MEMORY_SEARCH_TOOL, MemorySearchTool};

/// Everything memory-related for one workspace, wired together: the files, the consolidator, Dream and the
/// search index (consolidation feeds the index; `memory_search` catches up with history and sessions).
///
/// The agent core keeps one per workspace and calls [`Consolidator::spawn_if_needed`] after each turn,
/// [`Consolidator::reset_and_archive`] on `/new`, [`Consolidator::compact`] on `/compact`, [`Dream::run`] on
/// `/dream` and on its schedule, [`Dream::log`] / [`Dream::restore`] for `/dream-log` / `/dream-restore`, and
/// registers [`Memory::search_tool`].
#[derive(Clone, Debug)]
pub struct Memory {
    /// The memory files.
    pub store: MemoryStore,
    /// Session consolidation.
    pub consolidator: Consolidator,
    /// The Dream curator.
    pub dream: Dream,
    /// The full-text index (cargo feature `search`).
    #[cfg(feature = "search")]
    pub index: SearchIndex,
    #[cfg(feature = "search")]
    sessions: SessionStore,
}

impl Memory {
    /// Opens the memory of `workspace`: creates `memory/`, migrates a legacy `HISTORY.md` (once); the search
    /// index ([`SESSION_DIR_INDEX_FILE`] in the session store's directory, outside the workspace) is opened on
    /// its first use. Blocking file I/O; call it at
    /// start-up (or in `spawn_blocking`).
    pub fn open(
        workspace: &Path,
        sessions: SessionStore,
        provider: Arc<dyn Provider>,
        consolidation: ConsolidationSettings,
        dream: DreamSettings,
    ) -> Result<Self> {
        let store = MemoryStore::new(workspace);
        store.ensure_dir()?;
        store.migrate_legacy_history()?;
        let consolidator =
            Consolidator::new(store.clone(), sessions.clone(), provider.clone(), consolidation);
        #[cfg(feature = "search")]
        let index = SearchIndex::open_lazy(&sessions.dir().join(SESSION_DIR_INDEX_FILE));
        #[cfg(feature = "search")]
        let consolidator = consolidator.with_index(index.clone());
        let dream = Dream::new(store.clone(), provider, dream);
        Ok(Self {
            store,
            consolidator,
            dream,
            #[cfg(feature = "search")]
            index,
            #[cfg(feature = "search")]
            sessions,
        })
    }

    /// The `memory_search` tool, sharing this memory's index (cargo feature `search`).
    #[cfg(feature = "search")]
    pub fn search_tool(&self) -> MemorySearchTool {
        MemorySearchTool::new(
            self.index.clone(),
            self.store.clone(),
            Some(self.sessions.clone()),
        )
    }
}
