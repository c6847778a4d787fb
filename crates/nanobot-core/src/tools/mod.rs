//! The bus-aware tools: `message`, `spawn`, `cron`, the session tools and the goal tools, and the per-turn facts they read from the
//! [`ToolContext`] extensions ([`TurnInfo`]).

mod message;
mod spawn;
mod turn_info;

pub(crate) use message::MessageTool;
pub(crate) use message::{OUTBOX_KEEP, sweep_outbox};
pub(crate) use spawn::SpawnTool;
pub(crate) use turn_info::TurnInfo;

#[cfg(feature = "cron")]
mod cron;
mod goals;
mod sessions;
#[cfg(feature = "cron")]
pub use cron::CronAction;
#[cfg(feature = "cron")]
pub(crate) use cron::CronTool;
pub(crate) use goals::{
    CONTINUATION_MARK, CONTINUATION_ROUNDS_KEY, CONTINUATION_SENDER, continuation_prompt, goal_active,
    goal_notes,
};
pub(crate) use goals::{CreateGoalTool, GoalTools, MAX_CONTINUATION_ROUNDS, UpdateGoalTool};
pub(crate) use sessions::session_message_note;
pub(crate) use sessions::{
    ListSessionsTool, ROUTE_METADATA_KEY, ReadSessionTool, SearchSessionsTool, SendSessionMessageTool,
    SessionAccess,
};
