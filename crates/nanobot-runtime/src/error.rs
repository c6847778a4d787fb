//! [`RuntimeError`]: what can go wrong while composing the agent from a config.

/// Why the agent could not be composed or its system jobs installed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// A setting of `config.json` is invalid; the message names the key.
    #[error("configuration: {0}")]
    Config(String),
    /// The provider could not be resolved from the config and the environment.
    #[error("LLM provider: {0}")]
    Provider(#[from] nanobot_providers::ProviderError),
    /// The cron store refused a system job.
    #[error("cron: {0}")]
    Cron(#[from] nanobot_cron::CronError),
    /// Building the agent failed.
    #[error(transparent)]
    Core(#[from] nanobot_core::CoreError),
}
