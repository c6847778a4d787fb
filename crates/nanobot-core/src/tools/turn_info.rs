//! The per-turn facts the bus-aware tools read from the [`ToolContext`] extensions ([`TurnInfo`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use nanobot_bus::Bus;
use nanobot_tools::ToolContext;
use serde_json::{Map, Value};

/// Facts about the running turn that bus-aware tools need; stored in [`ToolContext::extensions`].
#[derive(Clone)]
pub(crate) struct TurnInfo {
    /// The bus, when the turn runs under the agent loop.
    pub bus: Option<Arc<dyn Bus>>,
    /// Set by `message` when it delivered to the turn's own chat (then the loop sends no duplicate reply).
    pub message_sent: Arc<AtomicBool>,
    /// True for turns started by a cron job (the `cron` tool then refuses to add jobs).
    pub is_cron: bool,
    /// Metadata of the inbound message (message id, thread id…), copied onto replies.
    pub metadata: Map<String, Value>,
    /// The user started this turn with `/goal`: `create_goal` (and replacing a goal) is allowed until a goal is
    /// closed.
    pub goal_allowed: Arc<AtomicBool>,
    /// Who sent the message the turn answers (`12345|alice`).
    pub sender_id: String,
}

impl std::fmt::Debug for TurnInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TurnInfo")
            .field("has_bus", &self.bus.is_some())
            .field("message_sent", &self.message_sent.load(Ordering::SeqCst))
            .field("is_cron", &self.is_cron)
            .finish_non_exhaustive()
    }
}

impl TurnInfo {
    /// Turn facts with this bus, nothing sent yet, not a cron turn.
    pub(crate) fn new(bus: Option<Arc<dyn Bus>>) -> Self {
        Self {
            bus,
            message_sent: Arc::new(AtomicBool::new(false)),
            is_cron: false,
            metadata: Map::new(),
            goal_allowed: Arc::new(AtomicBool::new(false)),
            sender_id: String::new(),
        }
    }
}

pub(super) fn turn_info(ctx: &ToolContext) -> Option<&TurnInfo> {
    ctx.extensions.get::<TurnInfo>()
}
