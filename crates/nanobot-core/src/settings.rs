//! [`AgentSettings`]: the agent's typed settings (the runtime crate turns `config.json` into them).

use std::path::PathBuf;

use chrono_tz::Tz;

/// The agent's resolved settings (`agents.defaults` and a few more), in one place.
#[derive(Debug, Clone)]
pub struct AgentSettings {
    /// The workspace directory.
    pub workspace: PathBuf,
    /// The data directory (`~/.nanobot`): sessions live below it.
    pub data_dir: PathBuf,
    /// `tools.restrictToWorkspace`: also confines the `message` tool's attachments (default on outside a config).
    pub restrict_to_workspace: bool,
    /// The user's home directory, for `~` in attachment paths (`None`: `~` is refused).
    pub home: Option<PathBuf>,
    /// Model id.
    pub model: String,
    /// Output-token limit.
    pub max_tokens: u32,
    /// The model's context window.
    pub context_window_tokens: u32,
    /// Sampling temperature.
    pub temperature: Option<f64>,
    /// Reasoning effort.
    pub reasoning_effort: Option<String>,
    /// Tool iterations per turn.
    pub max_tool_iterations: usize,
    /// Subagents at once.
    pub max_concurrent_subagents: usize,
    /// Iteration cap of subagents.
    pub subagent_max_iterations: usize,
    /// Turns of different sessions processed at once.
    pub max_concurrent_sessions: usize,
    /// Characters of a tool hint's argument.
    pub tool_hint_max_length: usize,
    /// History messages replayed per turn.
    pub max_history_messages: usize,
    /// The user's time zone.
    pub timezone: Tz,
    /// The agent's name.
    pub bot_name: String,
    /// One session for every channel (`agents.defaults.unifiedSession`).
    pub unified_session: bool,
    /// How long-term memory is divided between chats and people (`agents.defaults.memoryScope`).
    pub memory_scope: nanobot_memory::MemoryScope,
    /// Longest a turn may run (`agents.defaults.timeouts.turn`); then it is stopped and the user told so.
    pub turn_timeout: std::time::Duration,
    /// When the user is asked before a tool call runs (`tools.approval.mode`, `timeoutS`).
    pub approval: crate::ApprovalSettings,
    /// Messages one session may send to others a minute (`tools.maxSessionMessagesPerMinute`).
    pub max_session_messages_per_minute: u32,
    /// Whether the `my` tool is offered (`tools.my.enable`).
    pub my_enabled: bool,
    /// Whether `my` may change settings (`tools.my.allowSet`; default off).
    pub my_allow_set: bool,
}

impl AgentSettings {
    /// Defaults (as `agents.defaults`) for `workspace`, with sessions under `data_dir`.
    pub fn new(
        workspace: impl Into<PathBuf>,
        data_dir: impl Into<PathBuf>,
        model: impl Into<String>,
    ) -> Self {
        Self {
            workspace: workspace.into(),
            data_dir: data_dir.into(),
            restrict_to_workspace: true,
            home: None,
            model: model.into(),
            max_tokens: 8192,
            context_window_tokens: 200_000,
            temperature: Some(0.1),
            reasoning_effort: None,
            max_tool_iterations: 200,
            max_concurrent_subagents: 4,
            subagent_max_iterations: 15,
            max_concurrent_sessions: 8,
            tool_hint_max_length: 40,
            max_history_messages: 500,
            timezone: Tz::UTC,
            bot_name: "nanobot".into(),
            unified_session: false,
            memory_scope: nanobot_memory::MemoryScope::Shared,
            turn_timeout: std::time::Duration::from_secs(3600),
            approval: crate::ApprovalSettings::default(),
            max_session_messages_per_minute: 6,
            my_enabled: true,
            my_allow_set: false,
        }
    }
}

/// Where the built-in skills are written so `read_file` can read them: `<data dir>/builtin-skills`.
pub fn builtin_skills_dir(data_dir: &std::path::Path) -> PathBuf {
    data_dir.join("builtin-skills")
}
