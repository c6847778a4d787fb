//! `agents`: the model, limits and identity of the agent.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::extra::{Extra, string_list};

/// `agents`: only `defaults` today.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AgentsConfig {
    /// Settings every agent starts from.
    pub defaults: AgentDefaults,
    /// Keys this version does not model (kept on save).
    #[serde(flatten)]
    pub extra: Extra,
}

/// How a provider call is retried.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderRetryMode {
    /// A few retries with backoff, then the error is reported.
    #[default]
    Standard,
    /// Keep retrying transient errors.
    Persistent,
}

/// `agents.defaults.memoryScope`: whose long-term memory a turn reads and writes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MemoryScopeSetting {
    /// One memory for everyone (the Python nanobot's behaviour).
    #[default]
    Shared,
    /// One memory per chat (each private chat and each group).
    PerChat,
    /// One memory per person for their private chats; a group chat has the group's own.
    PerUser,
}

impl MemoryScopeSetting {
    /// Whether this is `shared` (then it is not written back).
    pub fn is_shared(&self) -> bool {
        *self == Self::Shared
    }
}

/// `agents.defaults`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AgentDefaults {
    /// The workspace directory (`~` is expanded against the home dir; see [`crate::paths`]).
    pub workspace: String,
    /// Name of an entry of the top-level `modelPresets` to use instead of `model`.
    #[serde(alias = "model_preset")]
    pub model_preset: Option<String>,
    /// Model id, optionally prefixed by a provider (`anthropic/claude-opus-4-5`).
    pub model: String,
    /// Provider name, or `"auto"` to pick it from the model name and configured keys.
    pub provider: String,
    /// Maximum tokens of one completion.
    #[serde(alias = "max_tokens")]
    pub max_tokens: u32,
    /// Size of the model's context window, used for compaction budgets.
    #[serde(alias = "context_window_tokens")]
    pub context_window_tokens: u32,
    /// Sampling temperature.
    pub temperature: f64,
    /// Models tried in order when the main model fails.
    #[serde(alias = "fallback_models", deserialize_with = "string_list")]
    pub fallback_models: Vec<String>,
    /// Maximum LLM ⇄ tool round trips in one turn.
    #[serde(alias = "max_tool_iterations")]
    pub max_tool_iterations: u32,
    /// Maximum subagents running at once.
    #[serde(alias = "max_concurrent_subagents")]
    pub max_concurrent_subagents: u32,
    /// Tool results longer than this many characters are truncated.
    #[serde(alias = "max_tool_result_chars")]
    pub max_tool_result_chars: u32,
    /// Retry behaviour of provider calls.
    #[serde(alias = "provider_retry_mode")]
    pub provider_retry_mode: ProviderRetryMode,
    /// Maximum length of a tool hint shown to the user.
    #[serde(alias = "tool_hint_max_length")]
    pub tool_hint_max_length: u32,
    /// Reasoning effort passed to models that support it (`low`, `medium`, `high`).
    #[serde(alias = "reasoning_effort")]
    pub reasoning_effort: Option<String>,
    /// IANA time zone of the user (`"UTC"`, `"Europe/Berlin"`).
    pub timezone: String,
    /// How the time zone is chosen (`"auto"` or `"fixed"`).
    #[serde(alias = "timezone_mode")]
    pub timezone_mode: String,
    /// The agent's name.
    #[serde(alias = "bot_name")]
    pub bot_name: String,
    /// The agent's icon.
    #[serde(alias = "bot_icon")]
    pub bot_icon: String,
    /// One session shared by every channel instead of one per chat.
    #[serde(alias = "unified_session")]
    pub unified_session: bool,
    /// How long-term memory is divided between chats and people (nanobot-rs; the Python nanobot has one memory
    /// and ignores the key). Written back only when not `shared`.
    #[serde(alias = "memory_scope", skip_serializing_if = "MemoryScopeSetting::is_shared")]
    pub memory_scope: MemoryScopeSetting,
    /// Skills that are never offered to the model.
    #[serde(alias = "disabled_skills", deserialize_with = "string_list")]
    pub disabled_skills: Vec<String>,
    /// Idle minutes after which a session is compacted (`0` = never; old key `sessionTtlMinutes` is migrated).
    #[serde(
        alias = "idle_compact_after_minutes",
        alias = "sessionTtlMinutes",
        alias = "session_ttl_minutes"
    )]
    pub idle_compact_after_minutes: u32,
    /// How often idle sessions are checked, in seconds.
    #[serde(alias = "idle_compact_check_interval_seconds")]
    pub idle_compact_check_interval_seconds: u32,
    /// The background memory consolidation ("Dream").
    pub dream: DreamConfig,
    /// Old configs (before consolidation by token budget): messages kept in the prompt. Written back only if set.
    #[serde(alias = "memory_window", skip_serializing_if = "Option::is_none")]
    pub memory_window: Option<u32>,
    /// Bounds of the waits of a turn and of each model call (nanobot-rs; the Python nanobot ignores the
    /// key). Written back only when changed.
    #[serde(skip_serializing_if = "TimeoutsConfig::is_default")]
    pub timeouts: TimeoutsConfig,
    /// Spending limits per person, per chat and overall (nanobot-rs; the Python nanobot ignores the key).
    /// Written back only when set.
    #[serde(skip_serializing_if = "BudgetConfig::is_unlimited")]
    pub budget: BudgetConfig,
    /// Prices per million tokens by model name, over the well-known defaults (nanobot-rs; the Python nanobot
    /// ignores the key).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub prices: BTreeMap<String, PriceConfig>,
    /// Keys this version does not model (kept on save).
    #[serde(flatten)]
    pub extra: Extra,
}

/// `agents.defaults.budget`: limits on what the assistant spends, each `{"daily": LIMIT, "monthly": LIMIT}` with
/// `LIMIT = {"tokens": N, "cost": X}` (either or both; cost in the prices' currency). A typo is refused, not
/// ignored: an ignored limit would not hold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct BudgetConfig {
    /// Everything the assistant spends.
    #[serde(skip_serializing_if = "LimitsConfig::is_unlimited")]
    pub overall: LimitsConfig,
    /// Each person's turns (`per_person` read too).
    #[serde(alias = "per_person", skip_serializing_if = "LimitsConfig::is_unlimited")]
    pub per_person: LimitsConfig,
    /// Each chat, its unattended work (cron jobs, heartbeat, subagents) included (`per_chat` read too).
    #[serde(alias = "per_chat", skip_serializing_if = "LimitsConfig::is_unlimited")]
    pub per_chat: LimitsConfig,
}

impl BudgetConfig {
    /// No limit anywhere (then it is not written back).
    pub fn is_unlimited(&self) -> bool {
        self.overall.is_unlimited() && self.per_person.is_unlimited() && self.per_chat.is_unlimited()
    }
}

/// The limits of one scope of [`BudgetConfig`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// From midnight to midnight in `agents.defaults.timezone`.
    #[serde(skip_serializing_if = "LimitConfig::is_unlimited")]
    pub daily: LimitConfig,
    /// A calendar month in `agents.defaults.timezone`.
    #[serde(skip_serializing_if = "LimitConfig::is_unlimited")]
    pub monthly: LimitConfig,
}

impl LimitsConfig {
    /// No limit.
    pub fn is_unlimited(&self) -> bool {
        self.daily.is_unlimited() && self.monthly.is_unlimited()
    }
}

/// One limit of [`LimitsConfig`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct LimitConfig {
    /// Tokens in and out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// Money, in the prices' currency (US dollars for the defaults).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
}

impl LimitConfig {
    /// No limit.
    pub fn is_unlimited(&self) -> bool {
        self.tokens.is_none() && self.cost.is_none()
    }
}

/// One model's price in `agents.defaults.prices`, per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PriceConfig {
    /// Input tokens.
    pub input: f64,
    /// Output tokens.
    pub output: f64,
    /// Input tokens served from the prompt cache (the input price when not given; `cached_input` read too).
    #[serde(default, alias = "cached_input", skip_serializing_if = "Option::is_none")]
    pub cached_input: Option<f64>,
}

/// `agents.defaults.timeouts`, in seconds. An unset model-call bound takes the default for where the server
/// is: a cloud API, or a server on this machine or a private network (which may load and think longer).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TimeoutsConfig {
    /// Connecting to the model server (default 10 s cloud, 5 s local).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connect: Option<f64>,
    /// From sending a request to the response head (default 120 s cloud, 600 s local).
    #[serde(alias = "first_byte", skip_serializing_if = "Option::is_none")]
    pub first_byte: Option<f64>,
    /// Longest silence within a streamed answer; keep-alive comments count as activity (default 90 s cloud,
    /// 300 s local).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle: Option<f64>,
    /// A whole model call, retries and their waits included (default 600 s cloud, 1800 s local).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call: Option<f64>,
    /// A whole turn: every model call and tool run until the answer (default 3600 s).
    pub turn: f64,
    /// Keys this version does not model (kept on save).
    #[serde(flatten)]
    pub extra: Extra,
}

impl Default for TimeoutsConfig {
    fn default() -> Self {
        Self {
            connect: None,
            first_byte: None,
            idle: None,
            call: None,
            turn: 3600.0,
            extra: Extra::default(),
        }
    }
}

impl TimeoutsConfig {
    /// Whether nothing differs from the defaults (then it is not written back).
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

impl Default for AgentDefaults {
    fn default() -> Self {
        Self {
            workspace: "~/.nanobot/workspace".into(),
            model_preset: None,
            model: "anthropic/claude-opus-4-5".into(),
            provider: "auto".into(),
            max_tokens: 8192,
            context_window_tokens: 200_000,
            temperature: 0.1,
            fallback_models: Vec::new(),
            max_tool_iterations: 200,
            max_concurrent_subagents: 4,
            max_tool_result_chars: 16_000,
            provider_retry_mode: ProviderRetryMode::Standard,
            tool_hint_max_length: 40,
            reasoning_effort: None,
            timezone: "UTC".into(),
            timezone_mode: "auto".into(),
            bot_name: "nanobot".into(),
            bot_icon: "🐈".into(),
            unified_session: false,
            memory_scope: MemoryScopeSetting::Shared,
            disabled_skills: Vec::new(),
            idle_compact_after_minutes: 15,
            idle_compact_check_interval_seconds: 60,
            dream: DreamConfig::default(),
            memory_window: None,
            timeouts: TimeoutsConfig::default(),
            budget: BudgetConfig::default(),
            prices: BTreeMap::new(),
            extra: Extra::default(),
        }
    }
}

/// `agents.defaults.dream`: periodic memory consolidation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DreamConfig {
    /// Whether Dream runs.
    pub enabled: bool,
    /// Hours between runs (at least 1).
    #[serde(alias = "interval_h")]
    pub interval_h: u32,
    /// Model used for Dream instead of the main one (the old key `model` is migrated here).
    #[serde(alias = "model_override")]
    pub model_override: Option<String>,
    /// Keys this version does not model (kept on save).
    #[serde(flatten)]
    pub extra: Extra,
}

impl Default for DreamConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            interval_h: 2,
            model_override: None,
            extra: Extra::default(),
        }
    }
}
