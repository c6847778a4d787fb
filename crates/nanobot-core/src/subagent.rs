//! Subagents: background tasks started by the `spawn` tool, with a restricted tool set and their own iteration
//! cap, at most `maxConcurrentSubagents` at once, reporting back through the bus as `system` inbound messages.

use nanobot_util::lock;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tracing::Instrument;

use nanobot_bus::{Bus, InboundMessage};
use nanobot_providers::{ChatMessage, Provider};
use nanobot_tools::{ToolContext, ToolRegistry};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::hook::{AgentHook, CompositeHook};
use crate::runner::{AgentRunner, RunSpec, StopReason};

/// Settings of the subagent manager.
#[derive(Debug, Clone)]
pub(crate) struct SubagentSettings {
    /// The model subagents use.
    pub model: String,
    /// Their iteration cap.
    pub max_iterations: usize,
    /// How many may run at once (more wait).
    pub max_concurrent: usize,
    /// Output-token limit.
    pub max_tokens: Option<u32>,
    /// Temperature.
    pub temperature: Option<f64>,
    /// The workspace.
    pub workspace: PathBuf,
}

/// Where a subagent was started from (its report goes back there).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SubagentOrigin {
    /// Channel of the chat.
    pub channel: String,
    /// Chat id.
    pub chat_id: String,
    /// Session key of the parent conversation.
    pub session_key: String,
}

struct Running {
    id: String,
    cancel: CancellationToken,
}

/// Starts, limits and cancels subagents. Cheap to clone.
#[derive(Clone)]
pub(crate) struct SubagentManager {
    provider: Arc<dyn Provider>,
    tools: Arc<ToolRegistry>,
    settings: SubagentSettings,
    permits: Arc<Semaphore>,
    running: Arc<Mutex<HashMap<String, Vec<Running>>>>,
    hooks: Option<HookFactory>,
}

/// Builds the hooks of a subagent's run from its parent session's key and the run's own token (the approval gate
/// and the control-file record apply to subagents as to their parent's turn, and so does the budget).
pub(crate) type HookFactory = Arc<dyn Fn(&str, CancellationToken) -> SubagentHooks + Send + Sync>;

/// What the loop adds to one subagent run.
pub(crate) struct SubagentHooks {
    /// The run's hooks.
    pub(crate) hooks: Vec<Arc<dyn AgentHook>>,
    /// The budget the run is held by (one of `hooks`, which cancels the run's token once over).
    pub(crate) budget: Option<Arc<dyn BudgetWatch>>,
}

/// The budget a subagent is held by: checked before it starts, and naming the limit when it stopped the run.
#[async_trait::async_trait]
pub(crate) trait BudgetWatch: Send + Sync {
    /// The limit already reached (the run must not start), as the user reads it.
    async fn reached(&self) -> Option<String>;
    /// The limit that stopped the run, if one did.
    fn stopped(&self) -> Option<String>;
}

impl std::fmt::Debug for SubagentManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubagentManager")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl SubagentManager {
    /// A manager whose subagents use `tools` (file, exec and web tools only: never `message`, `spawn`, `cron`).
    pub(crate) fn new(
        provider: Arc<dyn Provider>,
        tools: Arc<ToolRegistry>,
        settings: SubagentSettings,
    ) -> Self {
        let permits = Arc::new(Semaphore::new(settings.max_concurrent.max(1)));
        Self {
            provider,
            tools,
            settings,
            permits,
            running: Arc::default(),
            hooks: None,
        }
    }

    /// Gives every subagent run the hooks `factory` builds for its parent session.
    #[must_use]
    pub(crate) fn with_hooks(mut self, factory: HookFactory) -> Self {
        self.hooks = Some(factory);
        self
    }

    /// Subagents running (or waiting for a slot) for `session_key`.
    pub(crate) fn running_for(&self, session_key: &str) -> usize {
        lock(&self.running).get(session_key).map_or(0, Vec::len)
    }

    /// Cancels every subagent of `session_key`; returns how many.
    pub(crate) fn cancel_session(&self, session_key: &str) -> usize {
        let list = lock(&self.running).remove(session_key).unwrap_or_default();
        for r in &list {
            r.cancel.cancel();
        }
        list.len()
    }

    /// Starts a subagent for `task` in the background and returns its id at once. When it finishes, its result
    /// is published on `bus` as an inbound message on the `system` channel, routed to `origin`.
    /// `temperature` is the subagent's own sampling temperature (`None`: the agent's).
    pub(crate) fn spawn_with(
        &self,
        task: String,
        label: Option<String>,
        temperature: Option<f64>,
        origin: SubagentOrigin,
        bus: Arc<dyn Bus>,
    ) -> String {
        let id = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
        let label = label
            .filter(|l| !l.trim().is_empty())
            .unwrap_or_else(|| crate::text::truncate_chars(&task, 30));
        let cancel = CancellationToken::new();
        lock(&self.running)
            .entry(origin.session_key.clone())
            .or_default()
            .push(Running {
                id: id.clone(),
                cancel: cancel.clone(),
            });
        let this = self.clone();
        let task_id = id.clone();
        // Its model and tool calls are spans under this one, a child of the call that started it.
        let span = tracing::info_span!(
            target: nanobot_util::trace::TARGET,
            "subagent",
            otel.name = "subagent",
            nanobot.session = %origin.session_key,
            nanobot.subagent.id = %id,
        );
        let task_run = async move {
            let outcome = this
                .run_one(&task, &origin.session_key, cancel.clone(), temperature)
                .await;
            this.forget(&origin.session_key, &task_id);
            let Some((ok, result)) = outcome else {
                tracing::info!(id = %task_id, "subagent cancelled");
                return;
            };
            let status = if ok { "completed successfully" } else { "failed" };
            let content = format!(
                "[Subagent '{label}' {status}]\n\nTask: {task}\n\nResult:\n{result}\n\n\
                 Summarize this naturally for the user. Keep it brief (1-2 sentences). Do not mention technical \
                 details like \"subagent\" or task IDs."
            );
            let msg = InboundMessage::system_report("subagent", &origin.channel, &origin.chat_id, content)
                .with_session_key(origin.session_key.clone())
                .with_metadata("subagent_id", task_id.clone());
            if let Err(e) = bus.publish_inbound(msg).await {
                tracing::warn!(id = %task_id, error = %e, "cannot report a subagent result");
            }
        };
        tokio::spawn(task_run.instrument(span));
        id
    }

    /// Runs a subagent for `task` and waits for its result (`spawn` with `wait=true`: a consultation whose answer
    /// the current turn needs). It counts as one of `session_key`'s subagents while it runs (so `/stop` ends it, as
    /// does `cancel`, the turn's token). Returns whether it succeeded and its final text; `None` when cancelled.
    pub(crate) async fn run_waiting(
        &self,
        task: &str,
        temperature: Option<f64>,
        session_key: &str,
        cancel: &CancellationToken,
    ) -> Option<(bool, String)> {
        let id = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
        let token = cancel.child_token();
        lock(&self.running)
            .entry(session_key.to_owned())
            .or_default()
            .push(Running {
                id: id.clone(),
                cancel: token.clone(),
            });
        let outcome = self.run_one(task, session_key, token, temperature).await;
        self.forget(session_key, &id);
        outcome
    }

    fn forget(&self, session_key: &str, id: &str) {
        let mut map = lock(&self.running);
        if let Some(list) = map.get_mut(session_key) {
            list.retain(|r| r.id != id);
            if list.is_empty() {
                map.remove(session_key);
            }
        }
    }

    /// Runs one task to the end; `None` when cancelled.
    async fn run_one(
        &self,
        task: &str,
        parent: &str,
        cancel: CancellationToken,
        temperature: Option<f64>,
    ) -> Option<(bool, String)> {
        let _permit = tokio::select! {
            () = cancel.cancelled() => return None,
            p = self.permits.clone().acquire_owned() => p.ok()?,
        };
        let ws = self.settings.workspace.display().to_string();
        let system = format!(
            "# Subagent\n\nYou are a subagent spawned by the main agent to complete one specific task.\n\n\
             ## Rules\n1. Stay focused: complete only the assigned task.\n2. Your final response is reported back \
             to the main agent, so make it a complete, concise result.\n3. You cannot message the user directly or \
             start other subagents.\n\n## Workspace\nYour workspace is at: {ws}\n\nCurrent time: {}",
            chrono::Utc::now().format("%Y-%m-%d %H:%M UTC")
        );
        let mut runner = AgentRunner::new(self.provider.clone(), self.tools.clone());
        // The run's own token: cancelled by `cancel` (`/stop`, the waiting turn) and by the budget, told apart below.
        let run_cancel = cancel.child_token();
        let mut budget = None;
        if let Some(factory) = &self.hooks {
            let made = factory(parent, run_cancel.clone());
            runner = runner.with_hook(Arc::new(CompositeHook::new(made.hooks)));
            budget = made.budget;
        }
        if let Some(b) = &budget
            && let Some(limit) = b.reached().await
        {
            tracing::info!(parent = %parent, "a subagent was not started: over budget");
            return Some((false, format!("⛔ Not started: {limit}")));
        }
        let ctx = ToolContext::new(&self.settings.workspace).with_cancel(run_cancel.clone());
        let mut spec = RunSpec::new(
            vec![ChatMessage::system(system), ChatMessage::user(task)],
            &self.settings.model,
            ctx,
        );
        spec.max_iterations = self.settings.max_iterations;
        spec.max_tokens = self.settings.max_tokens;
        spec.temperature = temperature.or(self.settings.temperature);
        let result = runner.run(spec).await;
        match result.stop_reason {
            StopReason::Cancelled if !cancel.is_cancelled() => {
                let limit = budget.as_ref().and_then(|b| b.stopped());
                Some((
                    false,
                    format!("⛔ Stopped before the next step: {}", limit.unwrap_or_default()),
                ))
            }
            StopReason::Cancelled => None,
            StopReason::Error => Some((false, result.content)),
            _ => Some((true, result.content)),
        }
    }
}
