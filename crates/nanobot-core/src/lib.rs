//! The agent core of nanobot: the model ⇄ tools loop and everything around it.
//!
//! **Owns:** [`AgentRunner`] (the loop, reusable by the main agent, subagents, Dream and the API: parallel
//! read-only tools, iteration cap, empty-answer retry, `length` continuation, think stripping, context budget,
//! checkpoints), [`AgentHook`] / [`CompositeHook`] with the [`LoggingHook`] and [`UsageHook`],
//! the context builder (system prompt from identity, bootstrap files, `memory/MEMORY.md` and skills; runtime
//! context and images on the user message), [`AgentLoop`] (one worker per session, slash [`commands`], session
//! saving, crash recovery, progress/tool hints/streaming, `system` routing, every model call recorded in a
//! usage ledger with who it was for and the budget kept (`AgentLoopBuilder::usage_ledger`, `/usage`);
//! [`AgentLoop::submit`] for bus
//! messages (the one place deciding who answers), [`AgentLoop::process_direct`], [`AgentLoop::shutdown`]), the
//! bus-aware tools `message`, `spawn` (subagents), `cron` and the session tools (`list_sessions`, `read_session`,
//! `search_sessions`, `send_session_message`), the goal tools (`create_goal`, `update_goal`, with `/goal`), the system jobs ([`SystemJob`]: Dream and the
//! heartbeat, run by [`AgentLoop::run_system_job`], their one handler), the [`MemoryService`] trait
//! (implemented over `nanobot-memory` by [`MemoryAdapter`]), and the embedding API ([`Agent::builder`]).
//!
//! **Public API** (what an embedder or the composition root uses, nothing more): [`Agent`] and [`AgentLoop`] with
//! their builders, settings, turn options and replies; the hooks; [`AgentRunner`] for a bare model ⇄ tools loop;
//! the approval types; [`MemoryService`]; [`SystemJob`]; the slash [`commands`], chat [`rights`] and model
//! [`presets`]; a few facts other crates show ([`HEARTBEAT_OK`], [`TURN_INTERRUPTED_NOTE`], the prompt templates
//! `onboard` compares with). The built-in tools, the prompt's pieces and the session metadata keys stay inside.
//!
//! **Must not know:** `config.json` (it takes typed [`AgentSettings`]; `nanobot-runtime` wires the config), any
//! chat platform (channels meet the agent on the bus), the process environment or `~/.nanobot` by itself.
//!
//! ```
//! use std::sync::Arc;
//! use nanobot_core::commands::{parse, Command, Parsed};
//!
//! assert_eq!(parse("/status@my_bot"), Some(Parsed::Known(Command::Status, String::new())));
//! // An agent needs only a provider (any `Arc<dyn Provider>`; see examples/embed.rs for a full run):
//! let builder = nanobot_core::Agent::builder().workspace(std::env::temp_dir()).model("gpt-4o-mini");
//! assert!(builder.build().is_err()); // no provider yet
//! ```

mod budget;
mod error;
mod hook;
mod model_span;
mod runner;
mod text;
mod tokenizer;

pub use budget::ContextBudget;
pub use error::{BoxError, CoreError};
pub use hook::{
    AgentHook, CompositeHook, IterationEnd, IterationStart, LoggingHook, ToolBatch, UsageHook, UsageTotals,
    Veto,
};
pub use model_span::traced_chat;
pub use runner::{
    AgentRunner, CheckpointPhase, CheckpointSink, RunCheckpoint, RunResult, RunSpec, StopReason,
};
pub use text::tool_hint;
pub mod commands;
mod context;
mod memory;
pub mod presets;
mod prompt_files;
pub mod rights;
mod subagent;
mod tools;

pub use context::{UNEDITED_TEMPLATES, is_unedited_template, strip_runtime_context};
pub use memory::{MemoryAdapter, MemoryService};
pub use presets::{ModelChoice, ModelPresets};

#[cfg(feature = "cron")]
pub use tools::CronAction;

mod agent_loop;
mod approval;
mod control;
pub use approval::{ApprovalAnswer, ApprovalPolicy, ApprovalRequest, ApprovalSettings, Approver};

mod settings;

pub use agent_loop::{
    AgentLoop, AgentLoopBuilder, PromptSize, RestartHandler, RestartRequest, TURN_INTERRUPTED_NOTE,
    TurnOptions, TurnReply,
};
pub use settings::{AgentSettings, builtin_skills_dir};
mod embed;

pub use embed::{Agent, AgentBuilder, AgentResponse};
mod heartbeat;
mod system_jobs;

pub use system_jobs::SystemJob;

pub use heartbeat::{HEARTBEAT_OK, HeartbeatOutcome};
