//! The `memory_search` tool.

use std::fmt::Write as _;

use async_trait::async_trait;
use nanobot_sessions::SessionStore;
use nanobot_tools::{Tool, ToolContext, ToolError, ToolOutput};
use serde_json::{Value, json};

use crate::scope::ScopeKey;
use crate::search::{HitKind, SearchIndex};
use crate::store::MemoryStore;

/// Name of the tool.
pub const MEMORY_SEARCH_TOOL: &str = "memory_search";
/// Results returned when the model gives no `limit`.
pub const DEFAULT_LIMIT: usize = 5;
/// The most results one call returns.
pub const MAX_LIMIT: usize = 20;

/// `memory_search(query, limit)`: ranked snippets from past conversations and the history log, each with its
/// session and time. Before each search the index catches up with new history entries (of the turn's memory
/// scope, a [`ScopeKey`] in the tool context's extensions; the shared memory without one) and changed sessions.
#[derive(Debug, Clone)]
pub struct MemorySearchTool {
    index: SearchIndex,
    store: MemoryStore,
    sessions: Option<SessionStore>,
}

impl MemorySearchTool {
    /// A tool searching `index`, kept up to date from `store` (and `sessions` when given).
    pub fn new(index: SearchIndex, store: MemoryStore, sessions: Option<SessionStore>) -> Self {
        Self {
            index,
            store,
            sessions,
        }
    }

    async fn run(
        &self,
        query: &str,
        limit: usize,
        session: Option<String>,
        scope: &ScopeKey,
    ) -> Result<String, crate::MemoryError> {
        let (index, store) = (self.index.clone(), self.store.scoped(scope));
        tokio::task::spawn_blocking(move || index.sync_history(&store)).await??;
        if let Some(sessions) = &self.sessions {
            self.index.sync_sessions(sessions).await?;
        }
        let index = self.index.clone();
        let q = query.to_owned();
        let hits =
            tokio::task::spawn_blocking(move || index.search_in(&q, limit, session.as_deref())).await??;
        if hits.is_empty() {
            return Ok(format!("No memories match \"{query}\"."));
        }
        let mut out = format!("{} result(s) for \"{query}\", best first:\n", hits.len());
        for (i, h) in hits.iter().enumerate() {
            let source = match h.kind {
                HitKind::History => format!("history #{}", h.position),
                _ => format!("message #{}", h.position),
            };
            let session = h.session_key.as_deref().unwrap_or("-");
            let _ = writeln!(
                out,
                "{}. [{}] {source}, session {session}: {}",
                i + 1,
                h.timestamp,
                h.snippet.replace('\n', " ")
            );
        }
        Ok(out)
    }
}

#[async_trait]
impl Tool for MemorySearchTool {
    fn name(&self) -> &str {
        MEMORY_SEARCH_TOOL
    }

    fn description(&self) -> &str {
        "Search long-term memory: past conversations and the consolidated history log. Returns ranked snippets \
         with their session and time. Use it to recall facts, decisions or events that are no longer in the \
         conversation."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Words to look for (all must match; if none do, any)."},
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_LIMIT,
                    "description": format!("Maximum results (default {DEFAULT_LIMIT}).")
                }
            },
            "required": ["query"]
        })
    }

    fn read_only(&self) -> bool {
        true
    }

    async fn execute(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let query = args
            .get("query")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|q| !q.is_empty())
            .ok_or_else(|| ToolError::InvalidArguments("`query` must be a non-empty string".into()))?;
        let limit = args
            .get("limit")
            .and_then(Value::as_u64)
            .map_or(DEFAULT_LIMIT, |n| usize::try_from(n).unwrap_or(MAX_LIMIT))
            .clamp(1, MAX_LIMIT);
        // The turn's memory scope (the agent core puts it in the context); none: the shared memory.
        let scope = ctx.extensions.get::<ScopeKey>().cloned().unwrap_or_default();
        self.run(query, limit, search_scope(ctx), &scope)
            .await
            .map(ToolOutput::text)
            .map_err(|e| ToolError::Failed(nanobot_util::error_chain(&e)))
    }
}

/// The session a search is confined to: a chat sees its own conversation (and history entries that name no
/// session), never what was said in other chats. The local CLI (the owner at the machine) and calls outside any
/// session search everything.
fn search_scope(ctx: &ToolContext) -> Option<String> {
    (ctx.channel != "cli" && !ctx.session_key.is_empty()).then(|| ctx.session_key.clone())
}
