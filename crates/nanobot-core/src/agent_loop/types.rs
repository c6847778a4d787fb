//! The loop's public types (how a turn is asked for and what it produced, the restart request) and the job a
//! worker runs.

use std::sync::Arc;

use nanobot_bus::InboundMessage;
use serde_json::{Map, Value};
use tokio::sync::{mpsc, oneshot};

use crate::error::CoreError;
use crate::runner::StopReason;

/// Tool results longer than this are truncated in the stored session copy (the model saw them whole).
pub(crate) const STORED_TOOL_RESULT_MAX_CHARS: usize = 500;
/// What replaces inline images in stored sessions.
pub(crate) const IMAGE_PLACEHOLDER: &str = "[image]";
/// The assistant note stored after a user message whose turn was interrupted (`/stop`, shutdown, a killed
/// process) before any answer: the next turn sees the question and that it went unanswered, as in the Python
/// nanobot 0.3.5 (whose note carries the same `_recovery_interrupted` marker).
pub const TURN_INTERRUPTED_NOTE: &str = "Error: the turn was interrupted before an answer was produced.";

/// The chat that asked for a restart (`/restart`): the host tells it when the new process is up.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RestartRequest {
    /// Its channel.
    pub channel: String,
    /// Its chat id.
    pub chat_id: String,
    /// The metadata of the `/restart` message (thread ids, for the notice).
    pub metadata: Map<String, Value>,
}

/// What `/restart` calls ([`crate::AgentLoop::set_restart_handler`]).
pub type RestartHandler = Arc<dyn Fn(RestartRequest) + Send + Sync>;

/// How a turn is run and delivered.
#[derive(Clone, Default)]
pub struct TurnOptions {
    /// A cron-triggered turn (the `cron` tool refuses to add jobs).
    pub is_cron: bool,
    /// Publish progress, tool hints, streams and the reply on the bus (the bus-driven path).
    pub publish: bool,
    /// Receives visible answer text as it streams (CLI streaming).
    pub stream: Option<mpsc::UnboundedSender<String>>,
    /// Who is asked before a call that needs the user's yes (`tools.approval.mode`). `None`: on the bus path
    /// ([`TurnOptions::publish`]) the turn's own chat, elsewhere nobody (such calls are then refused, and the
    /// user can allow one with `/approve ID`).
    pub approver: Option<Arc<dyn crate::Approver>>,
    /// The user started this turn with `/goal <task>`: it may record (or replace) the session's sustained goal.
    pub goal: bool,
    /// The client says this request repeats its previous one (an API client retrying after its own timeout or a
    /// lost answer; OpenAI's SDKs send `x-stainless-retry-count`). When the session's latest user message is the
    /// same text, its answer is given again if it has one (no turn runs), else that cut-short turn runs again
    /// without a second copy of the question.
    pub retry: bool,
}

impl std::fmt::Debug for TurnOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TurnOptions")
            .field("is_cron", &self.is_cron)
            .field("publish", &self.publish)
            .field("stream", &self.stream.is_some())
            .field("approver", &self.approver.is_some())
            .field("goal", &self.goal)
            .field("retry", &self.retry)
            .finish()
    }
}

/// What a processed message produced.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TurnReply {
    /// The answer (or the command's output). Empty when the turn was cancelled.
    pub content: String,
    /// Why the turn ended (`None` for commands, which never call the model).
    pub stop_reason: Option<StopReason>,
    /// True when the `message` tool already delivered to this chat (no separate reply is sent).
    pub delivered_by_tool: bool,
    /// True when the answer was streamed on the bus and closed with a `StreamEnd` (no separate reply is sent).
    pub streamed: bool,
    /// Tokens used by every model call of the turn, as the provider reported them (zero for commands).
    pub usage: nanobot_providers::Usage,
    /// True when the message had been answered before (delivered again, or an API request retried with the same
    /// `Idempotency-Key`): no turn ran, `content` is the earlier answer as the session holds it (empty when it is
    /// not there any more), and nothing is sent to the chat again.
    pub replayed: bool,
    /// The W3C `traceparent` of the turn's span when spans are exported (`nanobot_util::trace`): the reply
    /// published after the turn names it, so that its send is the turn's child.
    pub trace: Option<String>,
}

impl TurnReply {
    /// The reply of a command (or of a turn that did not call the model).
    pub(super) fn command(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            stop_reason: None,
            delivered_by_tool: false,
            streamed: false,
            usage: nanobot_providers::Usage::default(),
            replayed: false,
            trace: None,
        }
    }
}

/// A message queued for its session's worker, with how to run it and where its reply goes.
pub(super) struct Job {
    pub(super) msg: InboundMessage,
    pub(super) opts: TurnOptions,
    pub(super) reply: Option<oneshot::Sender<Result<TurnReply, CoreError>>>,
}

/// The fixed part of a turn's requests ([`crate::AgentLoop::prompt_size`]), for `doctor` and embedders: what a
/// small context window must hold before the user's first word.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PromptSize {
    /// The system prompt (identity, workspace files, memory, skills), in estimated tokens.
    pub system_tokens: usize,
    /// The tool definitions, in estimated tokens.
    pub tool_tokens: usize,
    /// The tools offered, in the order they are sent.
    pub tools: Vec<String>,
    /// `agents.defaults.contextWindowTokens`.
    pub context_window_tokens: u32,
    /// `agents.defaults.maxTokens` (kept free for the answer).
    pub max_tokens: u32,
}

impl PromptSize {
    /// The prompt's estimated tokens.
    pub fn total(&self) -> usize {
        self.system_tokens + self.tool_tokens
    }

    /// The tokens a request may carry: the context window less the answer's room.
    pub fn input_budget(&self) -> usize {
        (self.context_window_tokens as usize).saturating_sub(self.max_tokens as usize)
    }
}
