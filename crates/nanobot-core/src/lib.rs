//! The agent core of nanobot: the model ⇄ tools loop and everything around it.
//!
//! **Owns:** [`AgentRunner`] (the loop, reusable by the main agent, subagents, Dream and the API: parallel
//! read-only tools, iteration cap, empty-answer retry, `length` continuation, think stripping, context budget,
//! checkpoints), [`AgentHook`] / [`CompositeHook`] with the [`LoggingHook`] and [`UsageHook`],
//! [`ContextBuilder`] (system prompt from identity, bootstrap files, `memory/MEMORY.md` and skills; runtime
//! context and images on the user message), [`AgentLoop`] (one worker per session, slash [`commands`], session
//! saving, crash recovery, progress/tool hints/streaming, `system` routing; [`AgentLoop::submit`] for bus
//! messages (the one place deciding who answers), [`AgentLoop::process_direct`], [`AgentLoop::shutdown`]), the
//! bus-aware tools `message`, `spawn` (subagents), `cron` and the session tools (`list_sessions`, `read_session`,
//! `search_sessions`, `send_session_message`), the goal tools (`create_goal`, `update_goal`, with `/goal`), the system jobs ([`SystemJob`]: Dream and the
//! heartbeat, run by [`AgentLoop::run_system_job`], their one handler), the [`MemoryService`] trait
//! (implemented over `nanobot-memory` by [`MemoryAdapter`]), and the embedding API ([`Agent::builder`]).
//!
//! **Must not know:** `config.json` (it takes typed [`AgentSettings`]; `nanobot-runtime` wires the config), any
//! chat platform (channels meet the agent on the bus), the process environment or `~/.nanobot` by itself.
//!
//! ```
//! use std::sync::Arc;
//! use nanobot_core::{strip_think, commands::{parse, Command, Parsed}};
//!
//! assert_eq!(strip_think("<think>plan</think>Hi!"), "Hi!");
//! assert_eq!(parse("/status@my_bot"), Some(Parsed::Known(Command::Status, String::new())));
//! // An agent needs only a provider (any `Arc<dyn Provider>`; see examples/embed.rs for a full run):
//! let builder = nanobot_core::Agent::builder().workspace(std::env::temp_dir()).model("gpt-4o-mini");
//! assert!(builder.build().is_err()); // no provider yet
//! ```

mod budget;
mod error;
mod hook;
mod runner;
mod text;

pub use budget::{ContextBudget, TokenEstimator, tokenizer_loaded};
pub use error::{BoxError, CoreError};
pub use hook::{
    AgentHook, CompositeHook, IterationEnd, IterationStart, LoggingHook, ToolBatch, UsageHook, UsageTotals,
    Veto,
};
pub use runner::{
    AgentRunner, CheckpointPhase, CheckpointSink, EMPTY_FINAL_RESPONSE, REPEATED_CALLS_LIMIT, RunCheckpoint,
    RunResult, RunSpec, StopReason, max_iterations_message, provider_error_message, repeated_calls_message,
};
pub use text::{StreamThinkFilter, strip_think, tool_hint, truncate_chars};
pub mod commands;
mod context;
mod memory;
pub mod presets;
pub mod rights;
mod subagent;
mod tools;

pub use context::{
    BOOTSTRAP_FILES, ContextBuilder, LEGACY_BOOTSTRAP_FILES, MEMORY_FRAME, RUNTIME_CONTEXT_END,
    RUNTIME_CONTEXT_TAG, SKILLS_FRAME, TurnOrigin, UNEDITED_TEMPLATES, is_unedited_template,
    strip_runtime_context,
};
pub use memory::{ConsolidationReport, ConsolidationTrigger, MemoryAdapter, MemoryService, raw_archive};
pub use presets::{ModelChoice, ModelPresets};
pub use subagent::{SubagentManager, SubagentOrigin, SubagentSettings};
pub use tools::{
    CreateGoalArgs, CreateGoalTool, GOAL_STATE_KEY, GoalAction, GoalTools, MAX_CONTINUATION_ROUNDS,
    MAX_OBJECTIVE_CHARS, UpdateGoalArgs, UpdateGoalTool,
};
#[cfg(feature = "cron")]
pub use tools::{CronAction, CronArgs, CronTool};
pub use tools::{
    ListSessionsArgs, ListSessionsTool, ROUTE_METADATA_KEY, ReadSessionArgs, ReadSessionTool,
    SESSION_MESSAGE_METADATA_KEY, SearchSessionsArgs, SearchSessionsTool, SendSessionMessageArgs,
    SendSessionMessageTool, SessionAccess,
};
pub use tools::{MessageArgs, MessageTool, SpawnArgs, SpawnTool, TurnInfo};
mod agent_loop;
mod approval;
pub mod control;
#[cfg(test)]
mod shared_fake;
pub use approval::{ApprovalAnswer, ApprovalPolicy, ApprovalRequest, ApprovalSettings, Approver, PARKED_FOR};
pub use control::{ControlLedger, EVALUATOR_PROMPT_FILE, HEARTBEAT_FILE, HeldFile};
mod settings;

pub use agent_loop::{
    AgentLoop, AgentLoopBuilder, DELIVERIES_KEY, IMAGE_PLACEHOLDER, MEMORY_SCOPE_KEY, PromptSize,
    RestartHandler, RestartRequest, STORED_TOOL_RESULT_MAX_CHARS, TURN_INTERRUPTED_NOTE, TurnOptions,
    TurnReply, stored_message,
};
pub use settings::{AgentSettings, builtin_skills_dir};
mod embed;

pub use embed::{Agent, AgentBuilder, AgentResponse};
mod heartbeat;
mod system_jobs;

pub use system_jobs::SystemJob;

pub use heartbeat::{DEFAULT_EVALUATOR_PROMPT, HEARTBEAT_OK, HEARTBEAT_SESSION, HeartbeatOutcome, has_tasks};
