//! `tools`: built-in tool settings, the workspace restriction and MCP servers.

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

use super::extra::{Extra, string_list};
use crate::{Secret, SecretMap};
pub use nanobot_types::ApprovalPolicy;

/// `tools`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ToolsConfig {
    /// Which tools are offered to the model: `"full"` (or `""`, the default: every enabled tool), `"local"` (the
    /// few a small local model uses well: files, `exec`, `web_fetch`, `cron`, plus MCP servers' tools) or
    /// `"chat"` (none). A nanobot-rs key; the Python nanobot ignores it. See [`ToolsConfig::tool_profile`].
    #[serde(skip_serializing_if = "String::is_empty")]
    pub profile: String,
    /// The tools offered, by name (a trailing `*` matches every name with that start, as in `mcp_github_*`); when
    /// set, it replaces `profile`. A nanobot-rs key.
    #[serde(skip_serializing_if = "Vec::is_empty", deserialize_with = "string_list")]
    pub only: Vec<String>,
    /// `web_search` and `web_fetch`.
    pub web: WebToolsConfig,
    /// `exec` (shell commands).
    pub exec: ExecToolConfig,
    /// What the programs nanobot runs may reach on the network (see [`NetworkConfig`]). A nanobot-rs key, written
    /// only when set.
    #[serde(skip_serializing_if = "NetworkConfig::is_default")]
    pub network: NetworkConfig,
    /// Credentials the programs nanobot runs may use without seeing them, by the environment variable they read
    /// (see [`SecretGrantConfig`]). A nanobot-rs key, written only when set.
    #[serde(skip_serializing_if = "IndexMap::is_empty")]
    pub secrets: IndexMap<String, SecretGrantConfig>,
    /// When a tool call waits for the user's yes (see [`ApprovalConfig`]).
    #[serde(skip_serializing_if = "ApprovalConfig::is_default")]
    pub approval: ApprovalConfig,
    /// File tools (`read_file`, `write_file`, `edit_file`, `list_dir`, `glob`, `grep`).
    pub file: FileToolConfig,
    /// CLI app catalog tools.
    #[serde(alias = "cli_apps")]
    pub cli_apps: CliAppsConfig,
    /// The `my` tool (the agent inspecting / changing its own settings).
    pub my: MyToolConfig,
    /// Image generation.
    #[serde(alias = "image_generation")]
    pub image_generation: ImageGenerationConfig,
    /// Rate limit of messages the agent sends per session and minute.
    #[serde(alias = "max_session_messages_per_minute")]
    pub max_session_messages_per_minute: u32,
    /// Confine file tools and `exec` to the workspace.
    #[serde(alias = "restrict_to_workspace")]
    pub restrict_to_workspace: bool,
    /// Web UI: allow tools to reach services on localhost.
    #[serde(alias = "webui_allow_local_service_access")]
    pub webui_allow_local_service_access: bool,
    /// Web UI: allow installing packages from remote sources.
    #[serde(alias = "webui_allow_remote_package_install")]
    pub webui_allow_remote_package_install: bool,
    /// MCP servers by name, in file order.
    #[serde(alias = "mcp_servers")]
    pub mcp_servers: IndexMap<String, McpServerConfig>,
    /// Hosts or CIDRs the SSRF guard lets through although they are private.
    #[serde(alias = "ssrf_whitelist", deserialize_with = "string_list")]
    pub ssrf_whitelist: Vec<String>,
    /// Keys this version does not model (kept on save).
    #[serde(flatten)]
    pub extra: Extra,
}

impl Default for ToolsConfig {
    fn default() -> Self {
        Self {
            profile: String::new(),
            only: Vec::new(),
            web: WebToolsConfig::default(),
            exec: ExecToolConfig::default(),
            network: NetworkConfig::default(),
            secrets: IndexMap::new(),
            approval: ApprovalConfig::default(),
            file: FileToolConfig::default(),
            cli_apps: CliAppsConfig::default(),
            my: MyToolConfig::default(),
            image_generation: ImageGenerationConfig::default(),
            max_session_messages_per_minute: 6,
            restrict_to_workspace: false,
            webui_allow_local_service_access: true,
            webui_allow_remote_package_install: false,
            mcp_servers: IndexMap::new(),
            ssrf_whitelist: Vec::new(),
            extra: Extra::default(),
        }
    }
}

impl ToolsConfig {
    /// The parsed `profile` value; `None` if it is unknown ([`crate::Config::validate`] reports it).
    pub fn tool_profile(&self) -> Option<ToolProfile> {
        ToolProfile::parse(&self.profile)
    }
}

/// The set of tools offered to the model, parsed from `tools.profile`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ToolProfile {
    /// `"full"` (or `""`): every enabled tool (the Python nanobot's behaviour).
    #[default]
    Full,
    /// `"local"`: the file tools, `exec`, `web_fetch` and `cron`, plus the tools of configured MCP servers: a short
    /// prompt a small model on a small machine reads quickly and uses well.
    Local,
    /// `"chat"`: no tools at all.
    Chat,
}

impl ToolProfile {
    /// Parses the `profile` value; `None` for an unknown value.
    pub fn parse(value: &str) -> Option<Self> {
        match value.trim().to_ascii_lowercase().as_str() {
            "" | "full" => Some(Self::Full),
            "local" => Some(Self::Local),
            "chat" | "none" => Some(Self::Chat),
            _ => Option::None,
        }
    }
}

/// `tools.web`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WebToolsConfig {
    /// Whether the web tools are offered.
    pub enable: bool,
    /// HTTP proxy for web tools.
    pub proxy: Option<String>,
    /// User-Agent header (`null` = built-in).
    #[serde(alias = "user_agent")]
    pub user_agent: Option<String>,
    /// `web_search`.
    pub search: WebSearchConfig,
    /// `web_fetch`.
    pub fetch: WebFetchConfig,
    /// Egress allow-list (nanobot-rs; not in 0.3.5): when set, `web_fetch` reaches only these domains and
    /// their subdomains (every redirect hop included) and `web_search` only a backend on them. Absent or
    /// `null` = any domain (0.3.5's behaviour); `[]` = none.
    #[serde(alias = "allowed_domains", default, skip_serializing_if = "Option::is_none")]
    pub allowed_domains: Option<Vec<String>>,
    /// Keys this version does not model (kept on save).
    #[serde(flatten)]
    pub extra: Extra,
}

impl Default for WebToolsConfig {
    fn default() -> Self {
        Self {
            enable: true,
            proxy: None,
            user_agent: None,
            search: WebSearchConfig::default(),
            fetch: WebFetchConfig::default(),
            allowed_domains: None,
            extra: Extra::default(),
        }
    }
}

/// `tools.web.search`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WebSearchConfig {
    /// Search backend: `"duckduckgo"`, `"brave"`, `"tavily"`, `"searxng"`, `"jina"`, ….
    pub provider: String,
    /// API key of the backend (`""` = none).
    #[serde(alias = "api_key")]
    pub api_key: Secret,
    /// Base URL of the backend (SearXNG instance, proxy …; `""` = default).
    #[serde(alias = "base_url")]
    pub base_url: String,
    /// Default number of results.
    #[serde(alias = "max_results")]
    pub max_results: u32,
    /// Request timeout in seconds.
    pub timeout: u64,
    /// Keys this version does not model (kept on save).
    #[serde(flatten)]
    pub extra: Extra,
}

impl Default for WebSearchConfig {
    fn default() -> Self {
        Self {
            provider: "duckduckgo".into(),
            api_key: Secret::default(),
            base_url: String::new(),
            max_results: 5,
            timeout: 30,
            extra: Extra::default(),
        }
    }
}

/// `tools.web.fetch`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WebFetchConfig {
    /// Fetch through the Jina reader first.
    #[serde(alias = "use_jina_reader")]
    pub use_jina_reader: bool,
    /// Keys this version does not model (kept on save).
    #[serde(flatten)]
    pub extra: Extra,
}

impl Default for WebFetchConfig {
    fn default() -> Self {
        Self {
            use_jina_reader: true,
            extra: Extra::default(),
        }
    }
}

/// The process sandbox used by `exec`, parsed from `tools.exec.sandbox`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SandboxMode {
    /// `""` or `"auto"`: Landlock where the kernel supports it, otherwise none.
    Auto,
    /// `"none"`: no process sandbox (the exec guard still runs).
    None,
    /// `"landlock"`: require Landlock.
    Landlock,
    /// `"bwrap"`: bubblewrap (the Python nanobot's sandbox).
    Bwrap,
}

impl SandboxMode {
    /// Parses the `sandbox` value; `None` for an unknown value.
    pub fn parse(value: &str) -> Option<Self> {
        match value.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Some(Self::Auto),
            "none" | "off" => Some(Self::None),
            "landlock" => Some(Self::Landlock),
            "bwrap" | "bubblewrap" => Some(Self::Bwrap),
            _ => Option::None,
        }
    }
}

/// The default of `tools.exec.hidePaths`: credential stores a command has no business reading.
pub const DEFAULT_HIDE_PATHS: &[&str] = &[
    "~/.ssh",
    "~/.gnupg",
    "~/.aws",
    "~/.azure",
    "~/.kube",
    "~/.docker",
    "~/.netrc",
    "~/.git-credentials",
    "~/.config/gh",
    "~/.config/gcloud",
];

// The exec confinement keys are ours (the Python nanobot ignores them): written only when changed,
// so a config saved by either program stays the same file.
fn is_default_hide(v: &[String]) -> bool {
    v.len() == DEFAULT_HIDE_PATHS.len() && v.iter().zip(DEFAULT_HIDE_PATHS).all(|(a, b)| a == b)
}
fn is_true(v: &bool) -> bool {
    *v
}
fn is_256(v: &u64) -> bool {
    *v == 256
}
fn is_600(v: &u64) -> bool {
    *v == 600
}
fn is_8192(v: &u64) -> bool {
    *v == 8192
}
fn is_1024(v: &u64) -> bool {
    *v == 1024
}

/// `tools.exec`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ExecToolConfig {
    /// Whether `exec` is offered.
    pub enable: bool,
    /// Default command timeout in seconds.
    pub timeout: u64,
    /// Directories put before `PATH` (`:`-separated).
    #[serde(alias = "path_prepend")]
    pub path_prepend: String,
    /// Directories put after `PATH` (`:`-separated).
    #[serde(alias = "path_append")]
    pub path_append: String,
    /// Process sandbox: `""`/`"auto"` (bubblewrap namespaces, else Landlock), `"none"`,
    /// `"landlock"`, `"bwrap"` (see [`ExecToolConfig::sandbox_mode`] and `docs/security.md`).
    pub sandbox: String,
    /// Extra paths commands may read under `restrictToWorkspace` (absolute or `~/…`).
    #[serde(alias = "sandbox_ro_binds", deserialize_with = "string_list")]
    pub sandbox_ro_binds: Vec<String>,
    /// Extra paths commands may read and write in every mode (absolute or `~/…`).
    #[serde(alias = "sandbox_rw_binds", deserialize_with = "string_list")]
    pub sandbox_rw_binds: Vec<String>,
    /// Paths hidden from commands in every mode, on top of nanobot's data directory (which is
    /// always hidden). Default: the usual credential stores under the home directory.
    #[serde(
        alias = "hide_paths",
        deserialize_with = "string_list",
        skip_serializing_if = "is_default_hide"
    )]
    pub hide_paths: Vec<String>,
    /// Whether commands may use the network (`false` cuts them off).
    #[serde(skip_serializing_if = "is_true")]
    pub network: bool,
    /// Most processes one command may run at once (`0` = no limit).
    #[serde(alias = "max_processes", skip_serializing_if = "is_256")]
    pub max_processes: u64,
    /// CPU seconds per process (`0` = no limit).
    #[serde(alias = "max_cpu_seconds", skip_serializing_if = "is_600")]
    pub max_cpu_seconds: u64,
    /// Address space per process in MiB (`0` = no limit).
    #[serde(alias = "max_memory_mb", skip_serializing_if = "is_8192")]
    pub max_memory_mb: u64,
    /// Largest file a command may write, in MiB (`0` = no limit).
    #[serde(alias = "max_file_size_mb", skip_serializing_if = "is_1024")]
    pub max_file_size_mb: u64,
    /// Environment variables passed through to commands (the rest is scrubbed).
    #[serde(alias = "allowed_env_keys", deserialize_with = "string_list")]
    pub allowed_env_keys: Vec<String>,
    /// Regexes of commands allowed even if a deny rule matches.
    #[serde(alias = "allow_patterns", deserialize_with = "string_list")]
    pub allow_patterns: Vec<String>,
    /// Extra regexes of commands refused by the exec guard.
    #[serde(alias = "deny_patterns", deserialize_with = "string_list")]
    pub deny_patterns: Vec<String>,
    /// Keys this version does not model (kept on save).
    #[serde(flatten)]
    pub extra: Extra,
}

impl Default for ExecToolConfig {
    fn default() -> Self {
        Self {
            enable: true,
            timeout: 60,
            path_prepend: String::new(),
            path_append: String::new(),
            sandbox: String::new(),
            sandbox_ro_binds: Vec::new(),
            sandbox_rw_binds: Vec::new(),
            hide_paths: DEFAULT_HIDE_PATHS.iter().map(|p| (*p).to_owned()).collect(),
            network: true,
            max_processes: 256,
            max_cpu_seconds: 600,
            max_memory_mb: 8192,
            max_file_size_mb: 1024,
            allowed_env_keys: Vec::new(),
            allow_patterns: Vec::new(),
            deny_patterns: Vec::new(),
            extra: Extra::default(),
        }
    }
}

impl ExecToolConfig {
    /// The parsed sandbox mode; `None` if the value is unknown ([`crate::Config::validate`] reports it).
    pub fn sandbox_mode(&self) -> Option<SandboxMode> {
        SandboxMode::parse(&self.sandbox)
    }
}

/// `tools.approval` (nanobot-rs; the Python nanobot ignores it): when the user is asked before a tool call runs,
/// for how long, and who else may answer. It governs commands, code run by other tools (exec sessions, CLI apps,
/// MCP servers), file writes outside the workspace and cron jobs added for later. Older nanobot-rs files set it in
/// `tools.exec` (`approval`, `approvalTimeout`, `approvers`): those keys are moved here when read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ApprovalConfig {
    /// `"off"` (the default: never ask, as the Python nanobot), `"risky"` (calls that delete, reach the network,
    /// install, change permissions or run code the guard cannot read, and file writes outside the workspace) or
    /// `"always"` (every command and every call that runs code too).
    pub mode: ApprovalPolicy,
    /// How long a question waits for the user's answer, in seconds (then the call is not run), 1 to 86400.
    #[serde(alias = "timeout_s")]
    pub timeout_s: u64,
    /// People who may also answer approval questions and `/approve ID` requests in a chat they share with the
    /// asker, each as `"<channel>:<sender id>"` (for example `"telegram:123456"`). Empty (the default): only the
    /// person who started the turn decides.
    #[serde(deserialize_with = "string_list")]
    pub approvers: Vec<String>,
    /// Keys this version does not model (kept on save).
    #[serde(flatten)]
    pub extra: Extra,
}

impl Default for ApprovalConfig {
    fn default() -> Self {
        Self {
            mode: ApprovalPolicy::Off,
            timeout_s: 120,
            approvers: Vec::new(),
            extra: Extra::default(),
        }
    }
}

impl ApprovalConfig {
    /// Whether every key is at its default (then a save leaves the block out).
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// `tools.network` (nanobot-rs; docs/security.md, "Egress by domain").
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct NetworkConfig {
    /// The domains (each with its subdomains) that `exec`, exec sessions, `run_cli_app` and confined MCP servers
    /// may reach, through nanobot's proxy only, and that the web tools may fetch. Absent or `null`: the network
    /// is as `tools.exec.network` says (and `tools.web.allowedDomains` for the web tools); `[]`: nowhere.
    #[serde(alias = "allowed_domains", skip_serializing_if = "Option::is_none")]
    pub allowed_domains: Option<Vec<String>>,
    /// Names the proxy resolves to the given address instead of asking DNS (`{"db.internal": "10.0.0.5"}`): the
    /// proxy's own `/etc/hosts`. An address given here passes the SSRF guard for that name.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub hosts: std::collections::BTreeMap<String, String>,
    /// Keys this version does not model (kept on save).
    #[serde(flatten)]
    pub extra: Extra,
}

impl NetworkConfig {
    /// Whether every key is at its default (then a save leaves the block out).
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// One credential of `tools.secrets` (nanobot-rs; docs/security.md, "Credentials used, never seen"): programs
/// see a placeholder under its name, and nanobot's egress proxy puts the value into their requests to `domains`.
/// Needs `tools.network.allowedDomains` (the proxy), with each of `domains` allowed there.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SecretGrantConfig {
    /// The value; `"${GITHUB_TOKEN}"` reads it from the environment when the config is loaded.
    pub value: Secret,
    /// The domains (each with its subdomains) whose requests it is put into.
    #[serde(deserialize_with = "string_list")]
    pub domains: Vec<String>,
    /// Keys this version does not model (kept on save).
    #[serde(flatten)]
    pub extra: Extra,
}

/// `tools.file`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FileToolConfig {
    /// Whether the file tools are offered.
    pub enable: bool,
    /// Keys this version does not model (kept on save).
    #[serde(flatten)]
    pub extra: Extra,
}

impl Default for FileToolConfig {
    fn default() -> Self {
        Self {
            enable: true,
            extra: Extra::default(),
        }
    }
}

/// `tools.cliApps`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct CliAppsConfig {
    /// Whether the CLI app tools are offered.
    pub enable: bool,
    /// Install timeout in seconds.
    #[serde(alias = "install_timeout")]
    pub install_timeout: u64,
    /// Run timeout in seconds.
    #[serde(alias = "run_timeout")]
    pub run_timeout: u64,
    /// Catalog cache lifetime in seconds.
    #[serde(alias = "catalog_ttl_seconds")]
    pub catalog_ttl_seconds: u64,
    /// Keys this version does not model (kept on save).
    #[serde(flatten)]
    pub extra: Extra,
}

impl Default for CliAppsConfig {
    fn default() -> Self {
        Self {
            enable: true,
            install_timeout: 300,
            run_timeout: 60,
            catalog_ttl_seconds: 3600,
            extra: Extra::default(),
        }
    }
}

/// `tools.my`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct MyToolConfig {
    /// Whether the `my` tool is offered.
    pub enable: bool,
    /// Whether it may change settings (not only read them).
    #[serde(alias = "allow_set")]
    pub allow_set: bool,
    /// Keys this version does not model (kept on save).
    #[serde(flatten)]
    pub extra: Extra,
}

impl Default for MyToolConfig {
    fn default() -> Self {
        Self {
            enable: true,
            allow_set: false,
            extra: Extra::default(),
        }
    }
}

/// `tools.imageGeneration`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ImageGenerationConfig {
    /// Whether image generation is offered.
    pub enabled: bool,
    /// Provider name.
    pub provider: String,
    /// Model id.
    pub model: String,
    /// Default aspect ratio.
    #[serde(alias = "default_aspect_ratio")]
    pub default_aspect_ratio: String,
    /// Default image size.
    #[serde(alias = "default_image_size")]
    pub default_image_size: String,
    /// Maximum images per turn.
    #[serde(alias = "max_images_per_turn")]
    pub max_images_per_turn: u32,
    /// Directory (relative to the workspace) images are saved in.
    #[serde(alias = "save_dir")]
    pub save_dir: String,
    /// Keys this version does not model (kept on save).
    #[serde(flatten)]
    pub extra: Extra,
}

impl Default for ImageGenerationConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            provider: "openrouter".into(),
            model: "openai/gpt-5.4-image-2".into(),
            default_aspect_ratio: "1:1".into(),
            default_image_size: "1K".into(),
            max_images_per_turn: 4,
            save_dir: "generated".into(),
            extra: Extra::default(),
        }
    }
}

/// How an MCP server is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum McpTransportKind {
    /// A child process speaking JSON-RPC over stdin/stdout.
    #[serde(rename = "stdio")]
    Stdio,
    /// The legacy HTTP + Server-Sent Events transport.
    #[serde(rename = "sse")]
    Sse,
    /// The streamable HTTP transport.
    #[serde(
        rename = "streamableHttp",
        alias = "streamable_http",
        alias = "streamable-http",
        alias = "http"
    )]
    StreamableHttp,
}

/// `tools.mcpServers.<name>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct McpServerConfig {
    /// Transport; `null` = inferred (`command` → stdio, a URL ending in `/sse` → SSE, other URL → streamable HTTP).
    pub r#type: Option<McpTransportKind>,
    /// Program to start (stdio).
    pub command: String,
    /// Its arguments.
    #[serde(deserialize_with = "string_list")]
    pub args: Vec<String>,
    /// Extra environment of the child process (values redacted in `Debug`).
    pub env: SecretMap,
    /// Working directory of the child process. Not written when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Server URL (SSE / streamable HTTP).
    pub url: String,
    /// HTTP headers (values redacted in `Debug`).
    pub headers: SecretMap,
    /// Seconds a tool call may take.
    #[serde(alias = "tool_timeout")]
    pub tool_timeout: u64,
    /// Tools to expose (`"*"` = all), by the server's tool name or the wrapped `mcp_<server>_<tool>` name.
    #[serde(alias = "enabled_tools", deserialize_with = "string_list")]
    pub enabled_tools: Vec<String>,
    /// nanobot-rs: the user declares that this server's tools only read (no code runs, nothing changes). Without
    /// it every call of its tools counts as running code for `tools.approval.mode`, whatever the server claims.
    /// Not written when false (0.3.5 has no such key).
    #[serde(alias = "read_only", skip_serializing_if = "std::ops::Not::not")]
    pub read_only: bool,
    /// nanobot-rs: run this stdio server without confinement, with nanobot's own rights (its data directory
    /// visible, writes anywhere the user may write). Shown by `doctor`. Not written when false (0.3.5 has no such
    /// key and ignores it).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub trusted: bool,
    /// nanobot-rs: more paths (absolute) a confined stdio server may write, beyond its `cwd`, the existing
    /// directories its `args` name and a directory of its own. Not written when empty.
    #[serde(
        alias = "writable_paths",
        deserialize_with = "string_list",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub writable_paths: Vec<String>,
    /// Keys this version does not model (kept on save).
    #[serde(flatten)]
    pub extra: Extra,
}

impl Default for McpServerConfig {
    fn default() -> Self {
        Self {
            r#type: None,
            command: String::new(),
            args: Vec::new(),
            env: SecretMap::default(),
            cwd: None,
            url: String::new(),
            headers: SecretMap::default(),
            tool_timeout: 30,
            enabled_tools: vec!["*".into()],
            read_only: false,
            trusted: false,
            writable_paths: Vec::new(),
            extra: Extra::default(),
        }
    }
}

impl McpServerConfig {
    /// The transport: the explicit `type`, else inferred from `command` / `url`; `None` if neither is set.
    pub fn transport(&self) -> Option<McpTransportKind> {
        if let Some(kind) = self.r#type {
            return Some(kind);
        }
        if !self.command.is_empty() {
            Some(McpTransportKind::Stdio)
        } else if self.url.is_empty() {
            None
        } else if self.url.trim_end_matches('/').ends_with("/sse") {
            Some(McpTransportKind::Sse)
        } else {
            Some(McpTransportKind::StreamableHttp)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mcp_confinement_keys_read_both_spellings_and_are_written_only_when_set() {
        let camel: McpServerConfig = serde_json::from_value(serde_json::json!({
            "command": "srv", "trusted": true, "writablePaths": ["/srv/data"]
        }))
        .unwrap();
        let snake: McpServerConfig = serde_json::from_value(serde_json::json!({
            "command": "srv", "trusted": true, "writable_paths": ["/srv/data"]
        }))
        .unwrap();
        assert_eq!(camel, snake);
        assert!(camel.trusted);
        assert_eq!(camel.writable_paths, ["/srv/data"]);
        let saved = serde_json::to_value(&camel).unwrap();
        assert_eq!(saved["trusted"], true);
        assert_eq!(saved["writablePaths"], serde_json::json!(["/srv/data"]));
        // A 0.3.5 block gains no key on save.
        let plain: McpServerConfig = serde_json::from_value(serde_json::json!({"command": "srv"})).unwrap();
        let saved = serde_json::to_value(&plain).unwrap();
        assert!(
            saved.get("trusted").is_none() && saved.get("writablePaths").is_none(),
            "{saved}"
        );
    }

    #[test]
    fn exec_confinement_keys_read_both_spellings_and_save_only_when_changed() {
        let camel: ExecToolConfig = serde_json::from_value(serde_json::json!({
            "network": false, "hidePaths": ["~/.secret"], "maxProcesses": 9,
            "maxCpuSeconds": 8, "maxMemoryMb": 7, "maxFileSizeMb": 6
        }))
        .unwrap();
        let snake: ExecToolConfig = serde_json::from_value(serde_json::json!({
            "network": false, "hide_paths": ["~/.secret"], "max_processes": 9,
            "max_cpu_seconds": 8, "max_memory_mb": 7, "max_file_size_mb": 6
        }))
        .unwrap();
        assert_eq!(camel, snake);
        assert!(!camel.network);
        assert_eq!((camel.max_processes, camel.max_cpu_seconds), (9, 8));
        assert_eq!((camel.max_memory_mb, camel.max_file_size_mb), (7, 6));
        let saved = serde_json::to_value(&camel).unwrap();
        assert_eq!(saved["hidePaths"], serde_json::json!(["~/.secret"]));
        assert_eq!(saved["maxProcesses"], 9);
        let default = serde_json::to_value(ExecToolConfig::default()).unwrap();
        for key in [
            "network",
            "hidePaths",
            "maxProcesses",
            "maxCpuSeconds",
            "maxMemoryMb",
            "maxFileSizeMb",
        ] {
            assert!(default.get(key).is_none(), "{key} written at its default");
        }
        assert!(ExecToolConfig::default().hide_paths.iter().any(|p| p == "~/.ssh"));
    }
}
