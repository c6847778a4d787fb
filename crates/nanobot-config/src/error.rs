//! [`ConfigError`]: everything that can go wrong loading, validating or saving a config.

use std::path::PathBuf;

/// A config could not be loaded, validated or saved. Every variant says what and where; none carries a secret.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read, or written.
    #[error("{action} {}: {source}", path.display())]
    Io {
        /// What was being done (`"cannot read"`, `"cannot write"` …).
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid JSON.
    #[error("invalid JSON in {}, line {line}, column {column}: {source}", path.display())]
    Json {
        /// The config file.
        path: PathBuf,
        /// 1-based line of the error.
        line: usize,
        /// 1-based column of the error.
        column: usize,
        /// The parser's error.
        #[source]
        source: serde_json::Error,
    },
    /// A value has the wrong type or an invalid value (for example a string where a number belongs).
    #[error("invalid value for `{field}` in {}: {message}", origin)]
    InvalidValue {
        /// Dotted path of the field (`agents.defaults.maxTokens`, `tools.mcpServers.fs.args[0]`).
        field: String,
        /// Where the value came from: the file path, or an environment variable.
        origin: String,
        /// What is wrong.
        message: String,
        /// The deserializer's error, when there is one.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
    },
    /// A `${VAR}` reference names a variable that is not set.
    #[error("`{field}` in {} references ${{{var}}}, but the environment variable {var} is not set", path.display())]
    MissingEnvVar {
        /// Dotted path of the field holding the reference.
        field: String,
        /// The variable name.
        var: String,
        /// The config file.
        path: PathBuf,
    },
    /// A `${…}` reference is malformed (unclosed or with an invalid variable name).
    #[error("`{field}` in {} has a malformed ${{…}} reference: {reason}", path.display())]
    BadReference {
        /// Dotted path of the field.
        field: String,
        /// What is wrong with it.
        reason: String,
        /// The config file.
        path: PathBuf,
    },
    /// The values parsed but break a rule (a range, a required pair of keys …).
    #[error("invalid config: `{field}` {message}")]
    Validation {
        /// Dotted path of the field.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// The file has a top-level key that is not a setting (nanobot 0.3.5 refuses such a file too, so a home
    /// used by both programs stays loadable by both).
    #[error(
        "unknown setting `{key}` at the top level of {}: remove or rename it (the top-level settings are \
         agents, channels, transcription, providers, api, gateway, tools, modelPresets; nanobot 0.3.5 refuses \
         this file too)",
        path.display()
    )]
    UnknownSetting {
        /// The key as written.
        key: String,
        /// The config file.
        path: PathBuf,
    },
    /// The config could not be turned into JSON (should not happen).
    #[error("cannot serialise the config: {0}")]
    Serialize(#[source] serde_json::Error),
}
