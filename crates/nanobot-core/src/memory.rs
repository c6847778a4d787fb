//! [`MemoryService`]: what the agent loop asks of long-term memory (consolidation, archiving, Dream).
//!
//! The implementation lives in `nanobot-memory`; the loop holds an `Option<Arc<dyn MemoryService>>` and works
//! without one (then `/compact` archives raw text, see [`raw_archive`]). The trait only mentions types of the
//! lower crates (sessions), so it can move down into a shared crate without changing its users.

use std::path::Path;

use async_trait::async_trait;
use nanobot_sessions::{Session, SessionMessage};

use crate::error::BoxError;

/// Why a consolidation was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConsolidationTrigger {
    /// After a turn: consolidate only if the unconsolidated history is over its budget.
    AfterTurn,
    /// Before a turn: the same rule, awaited, so history the request cannot hold is archived before it is
    /// left out of the request (a session another process left over its budget, or one-shot runs).
    BeforeTurn,
    /// `/compact`: consolidate now, keeping only a short recent tail.
    Compact,
}

/// What a consolidation did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConsolidationReport {
    /// Messages archived into memory.
    pub archived_messages: usize,
    /// The session's new `last_consolidated`.
    pub last_consolidated: usize,
    /// Whether the model summarised (false: a raw archive entry was written).
    pub summarised: bool,
}

impl ConsolidationReport {
    /// A report.
    pub fn new(archived_messages: usize, last_consolidated: usize, summarised: bool) -> Self {
        Self {
            archived_messages,
            last_consolidated,
            summarised,
        }
    }
}

/// Long-term memory as the agent loop sees it. Implemented by `nanobot-memory`.
///
/// Every method may take time (model calls); the loop calls them off the user's turn where it can.
#[async_trait]
pub trait MemoryService: Send + Sync {
    /// Consolidates the oldest safe slice of session `session_key` (moving its `last_consolidated`), if the
    /// trigger calls for it. Must not run two consolidations of one session at once.
    async fn consolidate(
        &self,
        session_key: &str,
        trigger: ConsolidationTrigger,
    ) -> Result<ConsolidationReport, BoxError>;

    /// Archives a whole session that `/new` just reset (`session` holds its messages before the reset).
    async fn archive_session(&self, session: Session) -> Result<(), BoxError>;

    /// Runs Dream now (`/dream`); returns a short report for the user.
    async fn dream(&self) -> Result<String, BoxError>;

    /// `/dream-log [n]`: recent Dream changes, for the user.
    async fn dream_log(&self, _args: &str) -> Result<String, BoxError> {
        Ok("Dream history is not available.".to_owned())
    }

    /// `/dream-restore <id>`: undoes a Dream change; returns a report for the user.
    async fn dream_restore(&self, _args: &str) -> Result<String, BoxError> {
        Ok("Dream restore is not available.".to_owned())
    }
}

/// Appends a raw archive entry (`{"cursor","timestamp","content","session_key"}`) of `messages` to
/// `<workspace>/memory/history.jsonl` — the fallback when no [`MemoryService`] is configured. Returns the cursor.
pub fn raw_archive(workspace: &Path, session_key: &str, messages: &[SessionMessage]) -> std::io::Result<u64> {
    let mut content = String::from("[RAW] ");
    for m in messages {
        let role = m.role().unwrap_or("?").to_uppercase();
        let text = m.content_text().unwrap_or_default();
        if text.trim().is_empty() {
            continue;
        }
        let text = crate::context::strip_runtime_context(&text);
        content.push_str(&format!(
            "\n[{}] {}: {}",
            m.timestamp().unwrap_or(""),
            role,
            crate::text::truncate_chars(&text, 2000)
        ));
    }
    // The memory store's writer holds the history lock while it reads the last cursor and appends, so entries
    // written here and by a running consolidation never share a cursor.
    nanobot_memory::MemoryStore::new(workspace)
        .append_history(&content, Some(session_key))
        .map(|entry| entry.cursor)
        .map_err(std::io::Error::other)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_archive_appends_increasing_cursors() {
        let ws = tempfile::tempdir().unwrap();
        let msgs = vec![
            SessionMessage::new("user", "remember the milk"),
            SessionMessage::new("assistant", "ok"),
        ];
        assert_eq!(raw_archive(ws.path(), "cli:direct", &msgs).unwrap(), 1);
        assert_eq!(raw_archive(ws.path(), "cli:direct", &msgs).unwrap(), 2);
        let text = std::fs::read_to_string(ws.path().join("memory/history.jsonl")).unwrap();
        let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(first["session_key"], "cli:direct");
        assert!(
            first["content"]
                .as_str()
                .unwrap()
                .contains("USER: remember the milk")
        );
    }
}

/// [`MemoryService`] over `nanobot-memory`'s [`nanobot_memory::Memory`] (consolidator, Dream, undo log).
#[derive(Debug, Clone)]
pub struct MemoryAdapter {
    memory: nanobot_memory::Memory,
}

impl MemoryAdapter {
    /// Wraps `memory`.
    pub fn new(memory: nanobot_memory::Memory) -> Self {
        Self { memory }
    }

    /// The wrapped memory (its `memory_search` tool, store, index).
    pub fn memory(&self) -> &nanobot_memory::Memory {
        &self.memory
    }
}

fn report(o: &nanobot_memory::ConsolidationOutcome) -> ConsolidationReport {
    ConsolidationReport::new(o.archived_messages(), o.range().end, o.summarised())
}

#[async_trait]
impl MemoryService for MemoryAdapter {
    async fn consolidate(
        &self,
        session_key: &str,
        trigger: ConsolidationTrigger,
    ) -> Result<ConsolidationReport, BoxError> {
        let c = &self.memory.consolidator;
        match trigger {
            ConsolidationTrigger::Compact => Ok(report(&c.compact(session_key).await?)),
            _ => {
                let outcomes = c.run_if_needed(session_key).await?;
                let mut total = ConsolidationReport::default();
                for o in &outcomes {
                    let r = report(o);
                    total.archived_messages += r.archived_messages;
                    total.last_consolidated = total.last_consolidated.max(r.last_consolidated);
                    total.summarised |= r.summarised;
                }
                Ok(total)
            }
        }
    }

    async fn archive_session(&self, session: Session) -> Result<(), BoxError> {
        self.memory.consolidator.archive_session(session).await?;
        Ok(())
    }

    async fn dream(&self) -> Result<String, BoxError> {
        Ok(self.memory.dream.run().await?.report())
    }

    async fn dream_log(&self, args: &str) -> Result<String, BoxError> {
        Ok(self.memory.dream.log_text(args).await?)
    }

    async fn dream_restore(&self, args: &str) -> Result<String, BoxError> {
        Ok(self.memory.dream.restore_text(args).await?)
    }
}
