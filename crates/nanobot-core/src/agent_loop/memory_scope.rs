//! The memory scope of a turn (`agents.defaults.memoryScope`; see [`nanobot_memory::scope`]).

use nanobot_bus::InboundMessage;
use nanobot_memory::{MemoryScope, ScopeKey};
use serde_json::Value;

use super::inner::LoopInner;
use super::routes::reply_route;
use super::types::TurnOptions;

/// Session metadata key under which the memory scope of the session's last message from a person is recorded, so
/// turns nobody typed in that session (cron jobs, the heartbeat, subagent reports) use the same memory.
pub(crate) const MEMORY_SCOPE_KEY: &str = "memory_scope";

impl LoopInner {
    /// Which memory the turn of `msg` in session `key` reads and writes.
    ///
    /// A message from a person decides it from its channel, chat, sender and whether the chat is a group
    /// ([`InboundMessage::is_group`]), and the decision is recorded with the session ([`MEMORY_SCOPE_KEY`]; written
    /// only when it changes). A turn nobody typed (cron, heartbeat, a subagent's report) uses what is recorded with
    /// its session, else with its chat's own session (`channel:chat_id`), else its chat's memory: never a person's
    /// memory that no message of theirs chose.
    pub(super) async fn memory_scope(&self, key: &str, msg: &InboundMessage, opts: &TurnOptions) -> ScopeKey {
        let mode = self.settings.memory_scope;
        if mode == MemoryScope::Shared {
            return ScopeKey::Shared;
        }
        let (channel, chat_id) = reply_route(msg);
        if !opts.is_cron && !msg.is_system_report() {
            let scope = mode.resolve(&channel, &chat_id, &msg.sender_id, msg.is_group());
            let id = scope.id();
            let recorded = self
                .ledger
                .store()
                .update_header(key, move |h| {
                    if h.metadata.get(MEMORY_SCOPE_KEY).and_then(Value::as_str) != Some(id.as_str()) {
                        h.metadata.insert(MEMORY_SCOPE_KEY.into(), Value::String(id));
                    }
                })
                .await;
            if let Err(e) = recorded {
                tracing::warn!(session = %key, error = %e, "cannot record the session's memory scope");
            }
            return scope;
        }
        let chat_session = format!("{channel}:{chat_id}");
        for session in [key, chat_session.as_str()] {
            if let Some(scope) = self.recorded_scope(session).await {
                return scope;
            }
        }
        mode.resolve(&channel, &chat_id, "", None)
    }

    /// The memory scope recorded with session `key`, if any.
    async fn recorded_scope(&self, key: &str) -> Option<ScopeKey> {
        match self.ledger.store().history_and_metadata(key, 0).await {
            Ok((_, metadata)) => metadata
                .get(MEMORY_SCOPE_KEY)
                .and_then(Value::as_str)
                .and_then(ScopeKey::parse),
            Err(e) => {
                tracing::debug!(session = %key, error = %e, "no memory scope read from the session");
                None
            }
        }
    }
}

/// What the tools of a turn in `scope` must not reach: every divided memory (`memory/scopes/`) but the turn's own
/// ([`nanobot_tools::HiddenPaths`]). Its own folder is created if missing (beneath the workspace handle, so a link
/// planted on the way is not followed) and shown only when it and its parents are real folders of the workspace.
/// `None` for the shared memory.
pub(crate) fn scope_confinement(
    workspace: &std::path::Path,
    scope: &ScopeKey,
) -> Option<nanobot_tools::HiddenPaths> {
    if scope.is_shared() {
        return None;
    }
    let rel = scope.dir();
    if let Err(e) = nanobot_util::ConfinedDir::new(workspace).create_dir_all(&rel) {
        tracing::debug!(dir = %rel.display(), error = %e, "cannot create the turn's memory folder");
    }
    let scopes = rel.parent().map(|p| workspace.join(p))?;
    let own = workspace.join(&rel);
    let real_dir = |p: &std::path::Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir());
    let shown = if rel
        .ancestors()
        .all(|a| a.as_os_str().is_empty() || real_dir(&workspace.join(a)))
    {
        vec![own]
    } else {
        Vec::new()
    };
    Some(nanobot_tools::HiddenPaths::new(vec![scopes], shown))
}
