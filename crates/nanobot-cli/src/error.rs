//! [`CliError`] and the exit codes: 0 ok, 1 runtime error, 2 usage or configuration error.

use std::path::PathBuf;

/// Exit code for success.
pub const EXIT_OK: u8 = 0;
/// Exit code for a runtime failure (a model call failed, a file could not be written, an eval failed …).
pub const EXIT_RUNTIME: u8 = 1;
/// Exit code for a usage or configuration error (bad flags, no config, no API key, an invalid value).
pub const EXIT_USAGE: u8 = 2;
/// Exit code after a second interrupt during a shutdown (128 + SIGINT).
pub const EXIT_INTERRUPTED: u8 = 130;

/// Why a command failed. The `Display` text is what the user sees (after `Error: `); it never holds a secret.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CliError {
    /// There is no config file where one was expected.
    #[error("no config found at {}: run `nanobot onboard` to create one{}", path.display(), hint_flag(.explicit))]
    NoConfig {
        /// Where it was looked for.
        path: PathBuf,
        /// Whether the path came from `-c/--config` (then the hint repeats it).
        explicit: bool,
    },
    /// The config file is broken: the message names the file, the line when known, and the field.
    #[error("{message}")]
    Config {
        /// The full message (file, line, field, what is wrong).
        message: String,
        /// The loader's error.
        #[source]
        source: nanobot_config::ConfigError,
    },
    /// No API key for the model's provider: names the provider, the config key and the variable.
    #[error(
        "no API key for provider `{provider}` (model `{model}`): set `providers.{config_key}.apiKey` in {}{}",
        config_path.display(),
        env_var.as_ref().map(|v| format!(" or the environment variable {v}")).unwrap_or_default()
    )]
    MissingApiKey {
        /// Registry name of the provider.
        provider: String,
        /// The model being resolved.
        model: String,
        /// camelCase key under `providers`.
        config_key: String,
        /// The environment variable that also works.
        env_var: Option<String>,
        /// The config file to edit.
        config_path: PathBuf,
    },
    /// A provider could not be set up from the config (no endpoint, a bad proxy …).
    #[error("{0}")]
    ProviderSetup(#[source] nanobot_providers::ProviderError),
    /// A flag or argument combination that cannot work; the message says which.
    #[error("{0}")]
    Usage(String),
    /// A cron operation failed.
    #[error("{0}")]
    Cron(#[from] nanobot_cron::CronError),
    /// The agent could not be built or failed.
    #[error("{0}")]
    Core(#[from] nanobot_core::CoreError),
    /// The agent could not be composed from the config.
    #[error("{0}")]
    Runtime(#[from] nanobot_runtime::RuntimeError),
    /// A file operation failed.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        /// What was being done (`write`, `read`, `create`).
        action: &'static str,
        /// The path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// An eval trace could not be read or is malformed; the message names file and field.
    #[error("{0}")]
    Trace(String),
    /// Some eval expectations failed.
    #[error("{failed} of {total} expectations failed")]
    EvalFailed {
        /// Failed expectations.
        failed: usize,
        /// All expectations.
        total: usize,
    },
    /// `nanobot doctor` found problems.
    #[error("{0} problem(s) found")]
    DoctorFailed(usize),
    /// The turn failed; the message is the agent's.
    #[error("{0}")]
    Turn(String),
    /// The gateway could not start or failed.
    #[error("{0}")]
    Gateway(#[source] nanobot_gateway::GatewayError),
    /// A second Ctrl-C/SIGTERM during a shutdown: exit at once.
    #[error("interrupted")]
    Interrupted,
    /// An operation could not be done (a background gateway start or stop, a restore); the message says why.
    #[error("{0}")]
    Failed(String),
    /// `nanobot channels login whatsapp` failed (not linked, logged out, bridge not installed …).
    #[cfg(feature = "whatsapp")]
    #[error("{0}")]
    WhatsApp(#[source] nanobot_whatsapp::WhatsAppError),
}

fn hint_flag(explicit: &bool) -> &'static str {
    if *explicit {
        " (`nanobot onboard -c <the same path>`)"
    } else {
        ""
    }
}

impl CliError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::NoConfig { .. }
            | CliError::Config { .. }
            | CliError::MissingApiKey { .. }
            | CliError::ProviderSetup(_)
            | CliError::Usage(_)
            | CliError::Trace(_) => EXIT_USAGE,
            CliError::Cron(
                nanobot_cron::CronError::InvalidExpr { .. }
                | nanobot_cron::CronError::UnknownTimezone { .. }
                | nanobot_cron::CronError::InvalidSchedule { .. }
                | nanobot_cron::CronError::NotFound { .. }
                | nanobot_cron::CronError::Protected { .. }
                | nanobot_cron::CronError::Disabled { .. },
            ) => EXIT_USAGE,
            CliError::Core(nanobot_core::CoreError::Config(_)) => EXIT_USAGE,
            #[cfg(feature = "whatsapp")]
            CliError::WhatsApp(nanobot_whatsapp::WhatsAppError::Config(_)) => EXIT_USAGE,
            CliError::Interrupted => EXIT_INTERRUPTED,
            CliError::Gateway(
                nanobot_gateway::GatewayError::UnprotectedApi { .. }
                | nanobot_gateway::GatewayError::BadAddress { .. },
            ) => EXIT_USAGE,
            CliError::Gateway(nanobot_gateway::GatewayError::Core(nanobot_core::CoreError::Config(_))) => {
                EXIT_USAGE
            }
            CliError::Gateway(nanobot_gateway::GatewayError::Provider(p)) => provider_exit(p),
            CliError::Core(nanobot_core::CoreError::Provider(p)) => provider_exit(p),
            CliError::Runtime(r) | CliError::Gateway(nanobot_gateway::GatewayError::Runtime(r)) => {
                runtime_exit(r)
            }
            _ => EXIT_RUNTIME,
        }
    }

    /// An I/O error.
    pub(crate) fn io(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        CliError::Io {
            action,
            path: path.into(),
            source,
        }
    }

    /// A provider error met while resolving the model: a missing key becomes [`CliError::MissingApiKey`].
    pub(crate) fn from_provider(e: nanobot_providers::ProviderError, config_path: &std::path::Path) -> Self {
        match e {
            nanobot_providers::ProviderError::MissingApiKey {
                provider,
                model,
                config_key,
                env_var,
            } => CliError::MissingApiKey {
                provider,
                model,
                config_key,
                env_var,
                config_path: config_path.to_path_buf(),
            },
            other => CliError::ProviderSetup(other),
        }
    }

    /// A config error, with the line of the field looked up in `text` when the loader did not give one.
    pub(crate) fn from_config(e: nanobot_config::ConfigError, text: Option<&str>) -> Self {
        Self::from_config_in(e, text, None)
    }

    /// [`CliError::from_config`] naming the config file `path` in range errors too.
    pub(crate) fn from_config_in(
        e: nanobot_config::ConfigError,
        text: Option<&str>,
        path: Option<&std::path::Path>,
    ) -> Self {
        use nanobot_config::ConfigError as E;
        let message = match &e {
            E::InvalidValue {
                field,
                origin,
                message,
                ..
            } => {
                let line = text.and_then(|t| locate_field(t, field));
                match line {
                    Some(l) => format!("invalid value for `{field}` in {origin}, line {l}: {message}"),
                    None => e.to_string(),
                }
            }
            E::Validation { field, message } => {
                let line = text.and_then(|t| locate_field(t, field));
                match (line, path) {
                    (Some(l), Some(p)) => {
                        format!("invalid config in {}, line {l}: `{field}` {message}", p.display())
                    }
                    (Some(l), None) => format!("invalid config: `{field}` (line {l}) {message}"),
                    (None, Some(p)) => format!("invalid config in {}: `{field}` {message}", p.display()),
                    (None, None) => e.to_string(),
                }
            }
            _ => e.to_string(),
        };
        CliError::Config { message, source: e }
    }
}

fn runtime_exit(e: &nanobot_runtime::RuntimeError) -> u8 {
    match e {
        nanobot_runtime::RuntimeError::Config(_)
        | nanobot_runtime::RuntimeError::Core(nanobot_core::CoreError::Config(_)) => EXIT_USAGE,
        nanobot_runtime::RuntimeError::Provider(p)
        | nanobot_runtime::RuntimeError::Core(nanobot_core::CoreError::Provider(p)) => provider_exit(p),
        _ => EXIT_RUNTIME,
    }
}

fn provider_exit(e: &nanobot_providers::ProviderError) -> u8 {
    match e {
        nanobot_providers::ProviderError::MissingApiKey { .. }
        | nanobot_providers::ProviderError::Config(_) => EXIT_USAGE,
        _ => EXIT_RUNTIME,
    }
}

/// The 1-based line where the dotted `field` (`agents.defaults.maxTokens`, `tools.mcpServers.fs.args[0]`) is
/// written in the JSON `text`: each key is searched (camelCase or snake_case) after the previous one.
pub(crate) fn locate_field(text: &str, field: &str) -> Option<usize> {
    let mut pos = 0usize;
    let mut found_any = false;
    for seg in field.split('.') {
        let key = seg.split('[').next().unwrap_or(seg);
        if key.is_empty() {
            continue;
        }
        let snake = to_snake(key);
        let candidates = [format!("\"{key}\""), format!("\"{snake}\"")];
        let next = candidates
            .iter()
            .filter_map(|c| {
                text.get(pos..)
                    .and_then(|rest| rest.find(c.as_str()))
                    .map(|i| pos + i)
            })
            .min()?;
        pos = next + 1;
        found_any = true;
    }
    found_any.then(|| text[..pos].matches('\n').count() + 1)
}

fn to_snake(camel: &str) -> String {
    let mut out = String::with_capacity(camel.len() + 4);
    for c in camel.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locates_nested_fields_in_either_spelling() {
        let text = "{\n  \"agents\": {\n    \"defaults\": {\n      \"max_tokens\": \"lots\"\n    }\n  }\n}";
        assert_eq!(locate_field(text, "agents.defaults.maxTokens"), Some(4));
        assert_eq!(locate_field(text, "agents.defaults.temperature"), None);
        assert_eq!(locate_field(text, ""), None);
    }

    #[test]
    fn exit_codes_follow_the_contract() {
        assert_eq!(CliError::Usage("x".into()).exit_code(), EXIT_USAGE);
        assert_eq!(
            CliError::NoConfig {
                path: "/h/.nanobot/config.json".into(),
                explicit: false
            }
            .exit_code(),
            EXIT_USAGE
        );
        assert_eq!(CliError::Turn("boom".into()).exit_code(), EXIT_RUNTIME);
        assert_eq!(
            CliError::EvalFailed { failed: 1, total: 3 }.exit_code(),
            EXIT_RUNTIME
        );
    }

    #[test]
    fn missing_key_names_provider_key_and_variable() {
        let e = CliError::from_provider(
            nanobot_providers::ProviderError::MissingApiKey {
                provider: "openrouter".into(),
                model: "anthropic/claude-opus-4-5".into(),
                config_key: "openrouter".into(),
                env_var: Some("OPENROUTER_API_KEY".into()),
            },
            std::path::Path::new("/h/.nanobot/config.json"),
        );
        let text = e.to_string();
        assert!(text.contains("`openrouter`"), "{text}");
        assert!(text.contains("providers.openrouter.apiKey"), "{text}");
        assert!(text.contains("OPENROUTER_API_KEY"), "{text}");
        assert_eq!(e.exit_code(), EXIT_USAGE);
    }
}
