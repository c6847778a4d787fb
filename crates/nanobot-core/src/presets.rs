//! Model presets a session can switch to with `/model <name>` (0.3.5's `modelPresets`). The host (the runtime
//! crate, from `config.json`) supplies them through [`ModelPresets`]; the session's choice is kept in its
//! metadata under [`SESSION_PRESET_KEY`] (0.3.5's key), and its turns then run on that preset's provider, model
//! and generation settings. `default` is the agent's own settings.

use std::sync::Arc;

use nanobot_providers::Provider;
use serde_json::{Map, Value};

/// The session metadata key of the session's preset (0.3.5's).
pub const SESSION_PRESET_KEY: &str = "_nanobot_model_preset";
/// The name of the agent's own settings.
pub const DEFAULT_PRESET: &str = "default";

/// A model a turn can run on: its provider and generation settings.
#[derive(Clone)]
#[non_exhaustive]
pub struct ModelChoice {
    /// The preset's name (`default` for the agent's own settings).
    pub name: String,
    /// The model id sent to the provider.
    pub model: String,
    /// Where requests go.
    pub provider: Arc<dyn Provider>,
    /// Maximum tokens of one completion.
    pub max_tokens: u32,
    /// The model's context window, for the context budget.
    pub context_window_tokens: u32,
    /// Sampling temperature.
    pub temperature: Option<f64>,
    /// Reasoning effort.
    pub reasoning_effort: Option<String>,
}

impl ModelChoice {
    /// A choice named `name` of `model` on `provider` with these limits (no temperature or effort set).
    pub fn new(
        name: impl Into<String>,
        model: impl Into<String>,
        provider: Arc<dyn Provider>,
        max_tokens: u32,
        context_window_tokens: u32,
    ) -> Self {
        Self {
            name: name.into(),
            model: model.into(),
            provider,
            max_tokens,
            context_window_tokens,
            temperature: None,
            reasoning_effort: None,
        }
    }

    /// Sets the temperature.
    #[must_use]
    pub fn with_temperature(mut self, t: Option<f64>) -> Self {
        self.temperature = t;
        self
    }

    /// Sets the reasoning effort.
    #[must_use]
    pub fn with_reasoning_effort(mut self, effort: Option<String>) -> Self {
        self.reasoning_effort = effort;
        self
    }
}

impl std::fmt::Debug for ModelChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelChoice")
            .field("name", &self.name)
            .field("model", &self.model)
            .field("max_tokens", &self.max_tokens)
            .field("context_window_tokens", &self.context_window_tokens)
            .finish_non_exhaustive()
    }
}

/// The named presets a host offers (besides `default`).
pub trait ModelPresets: Send + Sync {
    /// Their names, sorted.
    fn names(&self) -> Vec<String>;
    /// The preset called `name`, its provider built; `Err` says why not (unknown name, no key for its provider).
    fn choose(&self, name: &str) -> Result<ModelChoice, String>;
}

/// The preset a session's metadata names, if any (a blank or non-string value is none).
pub(crate) fn session_preset(metadata: &Map<String, Value>) -> Option<&str> {
    metadata
        .get(SESSION_PRESET_KEY)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|n| !n.is_empty())
}

/// `` `a`, `b` `` as 0.3.5 lists preset names, `default` first.
pub(crate) fn format_names(names: &[String]) -> String {
    std::iter::once(DEFAULT_PRESET.to_owned())
        .chain(names.iter().filter(|n| *n != DEFAULT_PRESET).cloned())
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}
