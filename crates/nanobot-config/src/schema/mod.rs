//! The typed schema of `~/.nanobot/config.json`.
//!
//! Every struct is `#[serde(default)]` with the Python nanobot's defaults, reads camelCase and snake_case keys,
//! writes camelCase, and keeps keys it does not model in a flattened [`Extra`] so that a save writes them back.

mod agents;
mod channels;
pub(crate) mod extra;
mod gateway;
mod providers;
mod tools;
mod transcription;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use agents::{
    AgentDefaults, AgentsConfig, BudgetConfig, DreamConfig, LimitConfig, LimitsConfig, MemoryScopeSetting,
    PriceConfig, ProviderRetryMode, TimeoutsConfig,
};
pub use channels::{
    ChannelsConfig, DingTalkConfig, DiscordConfig, DmPolicy, FeishuConfig, GroupPolicy, SlackConfig,
    SlackDmConfig, TelegramConfig, TelegramMode,
};
pub use extra::{ChannelBlocks, Extra};
pub use gateway::{
    ApiConfig, BusConfig, BusKind, GatewayConfig, HeartbeatConfig, NatsBusConfig, ServerLimitsConfig,
    StoreKind, TracingConfig,
};
pub(crate) use providers::PROVIDER_SPECIFIC_KEYS;
pub use providers::{ProviderConfig, ProvidersConfig, normalize_name};
pub use tools::{
    ApprovalConfig, ApprovalPolicy, CliAppsConfig, DEFAULT_HIDE_PATHS, ExecToolConfig, FileToolConfig,
    ImageGenerationConfig, McpServerConfig, McpTransportKind, MyToolConfig, NetworkConfig, SandboxMode,
    SecretGrantConfig, ToolProfile, ToolsConfig, WebFetchConfig, WebSearchConfig, WebToolsConfig,
};
pub use transcription::TranscriptionConfig;

/// The whole `config.json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Config {
    /// `agents`: model, limits, identity.
    pub agents: AgentsConfig,
    /// `channels`: chat apps and delivery settings.
    pub channels: ChannelsConfig,
    /// `transcription`: speech-to-text.
    pub transcription: TranscriptionConfig,
    /// `providers`: LLM credentials and endpoints.
    pub providers: ProvidersConfig,
    /// `api`: the OpenAI-compatible HTTP API.
    pub api: ApiConfig,
    /// `gateway`: long-running mode.
    pub gateway: GatewayConfig,
    /// `tools`: tool settings and MCP servers.
    pub tools: ToolsConfig,
    /// `modelPresets`: named model settings (kept as JSON).
    #[serde(alias = "model_presets")]
    pub model_presets: Map<String, Value>,
    /// Keys this version does not model (kept on save).
    #[serde(flatten)]
    pub extra: Extra,
}

impl Config {
    /// The workspace directory (`agents.defaults.workspace` with `~` expanded against `home`).
    pub fn workspace_path(&self, home: &Path) -> PathBuf {
        crate::paths::NanobotPaths::new(home).workspace(&self.agents.defaults.workspace)
    }
}
