//! The bus-aware tools: `message`, `spawn`, `cron`, the session tools and the goal tools, and the per-turn facts they read from the
//! [`ToolContext`] extensions ([`TurnInfo`]).

mod message;
mod spawn;
mod turn_info;

pub use message::{MessageArgs, MessageTool};
pub(crate) use message::{OUTBOX_KEEP, sweep_outbox};
pub use spawn::{SpawnArgs, SpawnTool};
pub use turn_info::TurnInfo;

#[cfg(feature = "cron")]
mod cron;
mod goals;
mod sessions;
#[cfg(feature = "cron")]
pub use cron::{CronAction, CronArgs, CronTool};
pub(crate) use goals::{
    CONTINUATION_MARK, CONTINUATION_ROUNDS_KEY, CONTINUATION_SENDER, continuation_prompt, goal_active,
    goal_notes,
};
pub use goals::{
    CreateGoalArgs, CreateGoalTool, GOAL_STATE_KEY, GoalAction, GoalTools, MAX_CONTINUATION_ROUNDS,
    MAX_OBJECTIVE_CHARS, UpdateGoalArgs, UpdateGoalTool,
};
pub(crate) use sessions::session_message_note;
pub use sessions::{
    ListSessionsArgs, ListSessionsTool, ROUTE_METADATA_KEY, ReadSessionArgs, ReadSessionTool,
    SESSION_MESSAGE_METADATA_KEY, SearchSessionsArgs, SearchSessionsTool, SendSessionMessageArgs,
    SendSessionMessageTool, SessionAccess,
};
