//! The agent loop. [`AgentLoop`] (`api`) is the handle hosts hold, built by [`AgentLoopBuilder`] (`builder`).
//!
//! Its state is split by owner (`inner` composes the parts), and each part keeps its state behind its own methods:
//! - `kit`: model and presets, tools and MCP servers, subagents, the prompt builder, the hooks of every run;
//! - `ledger`: the sessions, with checkpoints, crash recovery and redelivered messages (`persist`, `redelivery`);
//! - `gate`: approvals, control files and chat rights (who may do what);
//! - `memory_work`: long-term memory around turns and its background work (`memory_scope`: which memory);
//! - `routes`: the bus and where answers and notices go;
//! - `workers`: session queues, running turns, shutdown;
//! - `schedules`: cron jobs and local triggers (the `cron` feature).
//!
//! The pipeline over them: `dispatch` (a queued message to its worker, then a command or a turn), `turn`
//! (prepare → open → run → save → deliver), `slash` and `status` (commands), `publish` (progress and replies on
//! the bus), `cron` and `unattended` (scheduled runs), `my` (the self-inspection tool). No file imports one that
//! imports it back (`scripts/module-cycles`).

mod api;
mod builder;
#[cfg(feature = "cron")]
mod cron;
mod dispatch;
mod gate;
mod inner;
mod kit;
mod ledger;
mod memory_scope;
mod memory_work;
mod my;
mod persist;
mod publish;
mod redelivery;
mod routes;
#[cfg(feature = "cron")]
mod schedules;
mod slash;
mod spending;
pub(crate) use spending::Payer;
mod status;
mod turn;
mod types;
mod unattended;
mod workers;

pub use api::AgentLoop;
pub use builder::AgentLoopBuilder;
pub use types::{PromptSize, RestartHandler, RestartRequest, TURN_INTERRUPTED_NOTE, TurnOptions, TurnReply};
