//! The loop's state, as the parts that own it: each part keeps its own state behind its own methods, and a turn
//! is a short pipeline over them (`dispatch` → `turn`).

use std::sync::Arc;

use nanobot_bus::{Bus, InboundMessage};

use super::gate::Gate;
use super::kit::Kit;
use super::ledger::Ledger;
use super::memory_work::MemoryWork;
use super::routes::Routes;
#[cfg(feature = "cron")]
use super::schedules::Schedules;
use super::spending::Spending;
use super::workers::Workers;
use crate::settings::AgentSettings;

/// Everything an [`crate::AgentLoop`] shares between its clones.
pub(super) struct LoopInner {
    pub(super) settings: AgentSettings,
    /// Model, tools, MCP, subagents, prompt and the hooks of every run.
    pub(super) kit: Kit,
    /// The sessions: history, checkpoints, deliveries.
    pub(super) ledger: Ledger,
    /// Approvals, control files, chat rights.
    pub(super) gate: Arc<Gate>,
    /// Long-term memory around turns.
    pub(super) memory: MemoryWork,
    /// The bus and the chats replies and notices go to.
    pub(super) routes: Routes,
    /// Session queues, running turns, shutdown.
    pub(super) workers: Workers,
    /// Usage recorded per model call, budgets.
    pub(super) spending: Arc<Spending>,
    /// Cron jobs and local triggers.
    #[cfg(feature = "cron")]
    pub(super) schedules: Schedules,
}

impl LoopInner {
    /// The attached bus, if any.
    pub(super) fn bus(&self) -> Option<Arc<dyn Bus>> {
        self.routes.bus()
    }

    /// The session `msg` belongs to.
    pub(super) fn session_key(&self, msg: &InboundMessage) -> String {
        msg.turn_session_key(self.settings.unified_session)
    }

    /// Cancels the running turn and the subagents of `key`; how many were stopped.
    pub(super) fn stop_session(&self, key: &str) -> usize {
        usize::from(self.workers.cancel(key)) + self.kit.subagents.cancel_session(key)
    }
}
