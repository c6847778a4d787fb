//! Every environment variable nanobot-rs gives a meaning to, in one place.
//!
//! The library never reads the process environment: binaries collect it (for example
//! `std::env::vars().collect::<BTreeMap<_, _>>()`) and pass the map to [`crate::load`].

/// Prefix of variables that override config keys: `NANOBOT_AGENTS__DEFAULTS__MODEL=openai/gpt-4o`.
///
/// Matched case-insensitively, like the Python nanobot (pydantic-settings).
pub const PREFIX: &str = "NANOBOT_";

/// Separator between nesting levels in an override name: `NANOBOT_TOOLS__EXEC__TIMEOUT` is `tools.exec.timeout`.
/// Each level is written in SCREAMING_SNAKE_CASE and matched against camelCase keys
/// (`MAX_TOKENS` → `maxTokens`, `AZURE_OPENAI` → `azureOpenai`).
pub const NESTED_DELIMITER: &str = "__";

/// Path of the config file to use instead of `~/.nanobot/config.json` (read by the binaries, not a config key).
pub const NANOBOT_CONFIG: &str = "NANOBOT_CONFIG";

/// Log filter of the binaries, in `tracing-subscriber` `EnvFilter` syntax (not a config key).
pub const NANOBOT_LOG: &str = "NANOBOT_LOG";

/// The user's home directory on Unix (binaries resolve `~` and `~/.nanobot` from it).
pub const HOME: &str = "HOME";

/// The user's home directory on Windows.
pub const USERPROFILE: &str = "USERPROFILE";

/// Start the gateway without the enabled channels this build cannot run (they are named in a warning).
pub const NANOBOT_GATEWAY_SKIP_UNSUPPORTED_CHANNELS: &str = "NANOBOT_GATEWAY_SKIP_UNSUPPORTED_CHANNELS";

/// Most concurrent model requests (the Python nanobot 0.3.5's runtime variable; unset or ≤ 0: no limit).
pub const NANOBOT_MAX_CONCURRENT_REQUESTS: &str = "NANOBOT_MAX_CONCURRENT_REQUESTS";

/// `NANOBOT_` variables that are not config overrides; the loader skips them. After nanobot-rs's own come the
/// Python nanobot 0.3.5's runtime variables, which are not config keys there either.
pub const RESERVED: &[&str] = &[
    NANOBOT_CONFIG,
    NANOBOT_LOG,
    NANOBOT_GATEWAY_SKIP_UNSUPPORTED_CHANNELS,
    NANOBOT_MAX_CONCURRENT_REQUESTS,
    "NANOBOT_STREAM_IDLE_TIMEOUT_S",
    "NANOBOT_OPENAI_COMPAT_TIMEOUT_S",
    "NANOBOT_PATH_APPEND",
    "NANOBOT_PATH_PREPEND",
    "NANOBOT_SANDBOX_ENFORCED",
    "NANOBOT_RESTART_NOTIFY_CHANNEL",
    "NANOBOT_RESTART_NOTIFY_CHAT_ID",
    "NANOBOT_RESTART_NOTIFY_METADATA",
    "NANOBOT_RESTART_STARTED_AT",
    "NANOBOT_API_URL",
    "NANOBOT_COMPLETE",
    // The GitHub Copilot provider's URLs and OAuth client (0.3.5's; `nanobot_providers::copilot`).
    "NANOBOT_GITHUB_COPILOT_CLIENT_ID",
    "NANOBOT_GITHUB_DEVICE_CODE_URL",
    "NANOBOT_GITHUB_ACCESS_TOKEN_URL",
    "NANOBOT_GITHUB_USER_URL",
    "NANOBOT_COPILOT_TOKEN_URL",
    "NANOBOT_COPILOT_BASE_URL",
    // nanobot-rs's variables moving the OpenAI Codex sign-in (`nanobot_providers::codex`).
    "NANOBOT_OPENAI_CODEX_AUTHORIZE_URL",
    "NANOBOT_OPENAI_CODEX_TOKEN_URL",
    "NANOBOT_OPENAI_CODEX_REDIRECT_URI",
    "NANOBOT_OPENAI_CODEX_CLIENT_ID",
    // nanobot-rs's variable moving the xAI sign-in (`nanobot_providers::grok`).
    "NANOBOT_XAI_OAUTH_ISSUER",
];
