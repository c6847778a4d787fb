//! [`MemoryService`]: what the agent loop asks of long-term memory (consolidation, archiving, Dream).
//!
//! The implementation lives in `nanobot-memory`; the loop holds an `Option<Arc<dyn MemoryService>>` and works
//! without one (then `/compact` archives raw text, see [`raw_archive`]). The trait only mentions types of the
//! lower crates (sessions, memory scopes), so it can move down into a shared crate without changing its users.
//!
//! Every call names the memory scope it works on ([`ScopeKey`]: the shared memory, a chat's or a person's; the
//! loop resolves it per turn from `agents.defaults.memoryScope`).

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use nanobot_memory::ScopeKey;
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
    /// Consolidates the oldest safe slice of session `session_key` (moving its `last_consolidated`) into the
    /// history of `scope`, if the trigger calls for it. Must not run two consolidations of one session at once.
    async fn consolidate(
        &self,
        session_key: &str,
        scope: &ScopeKey,
        trigger: ConsolidationTrigger,
    ) -> Result<ConsolidationReport, BoxError>;

    /// Archives a whole session that `/new` just reset (`session` holds its messages before the reset) into the
    /// history of `scope`.
    async fn archive_session(&self, session: Session, scope: &ScopeKey) -> Result<(), BoxError>;

    /// Runs Dream on the memory of `scope` now (`/dream`); returns a short report for the user.
    async fn dream(&self, scope: &ScopeKey) -> Result<String, BoxError>;

    /// Runs Dream on every memory (the scheduled run): the shared one and each scope's. Returns a report.
    async fn dream_all(&self) -> Result<String, BoxError> {
        self.dream(&ScopeKey::Shared).await
    }

    /// `/dream-log [n]`: recent Dream changes of `scope`'s memory, for the user.
    async fn dream_log(&self, _scope: &ScopeKey, _args: &str) -> Result<String, BoxError> {
        Ok("Dream history is not available.".to_owned())
    }

    /// `/dream-restore <id>`: undoes a Dream change of `scope`'s memory; returns a report for the user.
    async fn dream_restore(&self, _scope: &ScopeKey, _args: &str) -> Result<String, BoxError> {
        Ok("Dream restore is not available.".to_owned())
    }
}

/// Appends a raw archive entry (`{"cursor","timestamp","content","session_key"}`) of `messages` to the
/// `history.jsonl` of `scope` (`<workspace>/memory/history.jsonl` for the shared memory) — the fallback when no
/// [`MemoryService`] is configured. Returns the cursor.
pub(crate) fn raw_archive(
    workspace: &Path,
    scope: &ScopeKey,
    session_key: &str,
    messages: &[SessionMessage],
) -> std::io::Result<u64> {
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
        .scoped(scope)
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
        assert_eq!(
            raw_archive(ws.path(), &ScopeKey::Shared, "cli:direct", &msgs).unwrap(),
            1
        );
        assert_eq!(
            raw_archive(ws.path(), &ScopeKey::Shared, "cli:direct", &msgs).unwrap(),
            2
        );
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
        scope: &ScopeKey,
        trigger: ConsolidationTrigger,
    ) -> Result<ConsolidationReport, BoxError> {
        let c = &self.memory.consolidator.scoped(scope);
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

    async fn archive_session(&self, session: Session, scope: &ScopeKey) -> Result<(), BoxError> {
        self.memory
            .consolidator
            .scoped(scope)
            .archive_session(session)
            .await?;
        Ok(())
    }

    async fn dream(&self, scope: &ScopeKey) -> Result<String, BoxError> {
        Ok(self.memory.dream.scoped(scope).run().await?.report())
    }

    async fn dream_all(&self) -> Result<String, BoxError> {
        let runs = self.memory.dream.run_all().await;
        let several = runs.len() > 1;
        let mut reports = Vec::with_capacity(runs.len());
        let mut first_error = None;
        for (scope, outcome) in runs {
            let text = match outcome {
                Ok(o) => o.report(),
                Err(e) => {
                    let text = format!("Dream failed: {}", nanobot_util::error_chain(&e));
                    first_error.get_or_insert(e);
                    text
                }
            };
            reports.push(if several {
                format!("[{scope}] {text}")
            } else {
                text
            });
        }
        // One memory: its error is the run's error, as before scopes. Several: one failing scope must not hide
        // what the others did; its error is in the report and the log.
        match first_error {
            Some(e) if !several => Err(e.into()),
            Some(e) => {
                tracing::warn!(error = %nanobot_util::error_chain(&e), "Dream failed for a memory scope");
                Ok(reports.join("\n"))
            }
            None => Ok(reports.join("\n")),
        }
    }

    async fn dream_log(&self, scope: &ScopeKey, args: &str) -> Result<String, BoxError> {
        Ok(self.memory.dream.scoped(scope).log_text(args).await?)
    }

    async fn dream_restore(&self, scope: &ScopeKey, args: &str) -> Result<String, BoxError> {
        Ok(self.memory.dream.scoped(scope).restore_text(args).await?)
    }
}

/// Runs `sync` on the blocking pool; a failure is logged (naming `when`), never fails the caller: a turn or a
/// memory job goes on with the local copy, and the next sync publishes what it wrote.
pub(crate) async fn sync_memory(
    sync: &nanobot_memory::MemorySync,
    scope: Option<&ScopeKey>,
    when: &'static str,
) {
    sync_memory_files(sync, scope, when, false).await;
}

/// [`sync_memory`] with Dream's change records (around Dream runs, restores and `/dream-log`).
async fn sync_memory_and_records(
    sync: &nanobot_memory::MemorySync,
    scope: Option<&ScopeKey>,
    when: &'static str,
) {
    sync_memory_files(sync, scope, when, true).await;
}

async fn sync_memory_files(
    sync: &nanobot_memory::MemorySync,
    scope: Option<&ScopeKey>,
    when: &'static str,
    records: bool,
) {
    let (sync, scope) = (sync.clone(), scope.cloned());
    let done = tokio::task::spawn_blocking(move || match (&scope, records) {
        (Some(s), false) => sync.sync(s),
        (Some(s), true) => sync.sync_with_records(s),
        (None, false) => sync.sync_all(),
        (None, true) => sync.sync_all_with_records(),
    })
    .await;
    match done {
        Ok(Ok(report)) => {
            if report.renumbered_records > 0 {
                tracing::info!(
                    when,
                    records = report.renumbered_records,
                    "memory: Dream records whose numbers another replica took first were given the next ones"
                );
            }
            if !report.conflicts.is_empty() {
                let kept: Vec<String> = report.conflicts.iter().map(|p| p.display().to_string()).collect();
                tracing::warn!(
                    when,
                    kept = %kept.join(", "),
                    "memory: another replica changed a memory file first; this replica's version is kept beside it"
                );
            }
        }
        Ok(Err(e)) => tracing::warn!(
            when,
            error = %nanobot_util::error_chain(&e),
            "memory: cannot synchronise the memory files with the other replicas"
        ),
        Err(e) => tracing::warn!(when, error = %e, "memory: the synchronisation task failed"),
    }
}

/// A [`MemoryService`] whose memory files are shared with other replicas ([`nanobot_memory::MemorySync`]): every
/// archive, Dream run and restore is preceded and followed by a sync of its memory's files, a consolidation that
/// archived something followed by one.
pub(crate) struct SyncedMemory {
    pub(crate) inner: Arc<dyn MemoryService>,
    pub(crate) sync: nanobot_memory::MemorySync,
}

#[async_trait]
impl MemoryService for SyncedMemory {
    async fn consolidate(
        &self,
        session_key: &str,
        scope: &ScopeKey,
        trigger: ConsolidationTrigger,
    ) -> Result<ConsolidationReport, BoxError> {
        // No sync first: a turn's consolidation follows the turn's own sync, and an append made on a stale copy is
        // appended again after the others' (cursors renumbered). Published when it wrote something.
        let out = self.inner.consolidate(session_key, scope, trigger).await;
        if out.as_ref().map_or(true, |r| r.archived_messages > 0) {
            sync_memory(&self.sync, Some(scope), "after a consolidation").await;
        }
        out
    }

    async fn archive_session(&self, session: Session, scope: &ScopeKey) -> Result<(), BoxError> {
        sync_memory(&self.sync, Some(scope), "before an archive").await;
        let out = self.inner.archive_session(session, scope).await;
        sync_memory(&self.sync, Some(scope), "after an archive").await;
        out
    }

    async fn dream(&self, scope: &ScopeKey) -> Result<String, BoxError> {
        sync_memory_and_records(&self.sync, Some(scope), "before Dream").await;
        let out = self.inner.dream(scope).await;
        sync_memory_and_records(&self.sync, Some(scope), "after Dream").await;
        out
    }

    async fn dream_all(&self) -> Result<String, BoxError> {
        sync_memory_and_records(&self.sync, None, "before Dream").await;
        let out = self.inner.dream_all().await;
        sync_memory_and_records(&self.sync, None, "after Dream").await;
        out
    }

    async fn dream_log(&self, scope: &ScopeKey, args: &str) -> Result<String, BoxError> {
        sync_memory_and_records(&self.sync, Some(scope), "before /dream-log").await;
        self.inner.dream_log(scope, args).await
    }

    async fn dream_restore(&self, scope: &ScopeKey, args: &str) -> Result<String, BoxError> {
        sync_memory_and_records(&self.sync, Some(scope), "before a Dream restore").await;
        let out = self.inner.dream_restore(scope, args).await;
        sync_memory_and_records(&self.sync, Some(scope), "after a Dream restore").await;
        out
    }
}
