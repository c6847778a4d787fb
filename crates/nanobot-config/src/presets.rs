//! Model presets (`modelPresets`, 0.3.5's `ModelPresetConfig`): named sets of model and generation settings.
//! `agents.defaults.modelPreset` picks the one the agent starts with; a chat can switch its own session to
//! another with `/model <name>`. The name `default` is reserved: it means the settings in `agents.defaults`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{AgentDefaults, Config, ConfigError};

/// The reserved preset name meaning `agents.defaults` itself.
pub const DEFAULT_PRESET: &str = "default";

/// One entry of `modelPresets`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ModelPreset {
    /// Model id, optionally prefixed by a provider.
    pub model: String,
    /// Provider name, or `"auto"`.
    #[serde(default = "auto")]
    pub provider: String,
    /// Maximum tokens of one completion.
    #[serde(default = "default_max_tokens", alias = "max_tokens")]
    pub max_tokens: u32,
    /// Size of the model's context window.
    #[serde(default = "default_context_window", alias = "context_window_tokens")]
    pub context_window_tokens: u32,
    /// Sampling temperature.
    #[serde(default = "default_temperature")]
    pub temperature: f64,
    /// Reasoning effort for models that have it.
    #[serde(default, alias = "reasoning_effort")]
    pub reasoning_effort: Option<String>,
}

fn auto() -> String {
    "auto".to_owned()
}
fn default_max_tokens() -> u32 {
    8192
}
fn default_context_window() -> u32 {
    200_000
}
fn default_temperature() -> f64 {
    0.1
}

impl ModelPreset {
    /// The preset `agents.defaults` itself describes.
    pub fn from_defaults(d: &AgentDefaults) -> Self {
        Self {
            model: d.model.clone(),
            provider: d.provider.clone(),
            max_tokens: d.max_tokens,
            context_window_tokens: d.context_window_tokens,
            temperature: d.temperature,
            reasoning_effort: d.reasoning_effort.clone(),
        }
    }

    /// `defaults` with this preset's model and generation settings.
    pub fn apply_to(&self, defaults: &AgentDefaults) -> AgentDefaults {
        let mut d = defaults.clone();
        d.model = self.model.clone();
        d.provider = self.provider.clone();
        d.max_tokens = self.max_tokens;
        d.context_window_tokens = self.context_window_tokens;
        d.temperature = self.temperature;
        d.reasoning_effort = self.reasoning_effort.clone();
        d
    }

    fn parse(name: &str, raw: &Value) -> Result<Self, ConfigError> {
        let field = format!("modelPresets.{name}");
        let preset: Self = serde_json::from_value(raw.clone()).map_err(|e| ConfigError::Validation {
            field: field.clone(),
            message: e.to_string(),
        })?;
        let bad = |what: &str, message: &str| ConfigError::Validation {
            field: format!("{field}.{what}"),
            message: message.to_owned(),
        };
        if preset.model.trim().is_empty() {
            return Err(bad("model", "must name a model"));
        }
        if preset.max_tokens == 0 {
            return Err(bad("maxTokens", "must be at least 1"));
        }
        if preset.context_window_tokens == 0 {
            return Err(bad("contextWindowTokens", "must be at least 1"));
        }
        if !(0.0..=2.0).contains(&preset.temperature) {
            return Err(bad("temperature", "must be between 0 and 2"));
        }
        Ok(preset)
    }
}

impl Config {
    /// The names of the presets in `modelPresets`, sorted (without `default`).
    pub fn model_preset_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.model_presets.keys().cloned().collect();
        names.sort();
        names
    }

    /// The preset called `name`: `default` is `agents.defaults`; an unknown name or an entry that does not parse
    /// is an error naming it.
    pub fn model_preset(&self, name: &str) -> Result<ModelPreset, ConfigError> {
        if name == DEFAULT_PRESET {
            return Ok(ModelPreset::from_defaults(&self.agents.defaults));
        }
        match self.model_presets.get(name) {
            Some(raw) => ModelPreset::parse(name, raw),
            None => Err(ConfigError::Validation {
                field: "modelPresets".into(),
                message: format!("has no preset named {name:?}"),
            }),
        }
    }

    /// `agents.defaults` with the preset `agents.defaults.modelPreset` names applied (as 0.3.5 resolves it: the
    /// preset's model, provider and generation settings win). What the agent runs with; the file keeps both.
    pub fn resolved_defaults(&self) -> AgentDefaults {
        let d = &self.agents.defaults;
        match d.model_preset.as_deref().map(str::trim) {
            Some(name) if !name.is_empty() && name != DEFAULT_PRESET => match self.model_preset(name) {
                Ok(p) => p.apply_to(d),
                // `validate` refuses this config; a caller that skipped it runs on the defaults.
                Err(_) => d.clone(),
            },
            _ => d.clone(),
        }
    }

    pub(crate) fn validate_presets(&self) -> Result<(), ConfigError> {
        if self.model_presets.contains_key(DEFAULT_PRESET) {
            return Err(ConfigError::Validation {
                field: "modelPresets.default".into(),
                message: "the name \"default\" is reserved for agents.defaults".into(),
            });
        }
        for (name, raw) in &self.model_presets {
            ModelPreset::parse(name, raw)?;
        }
        if let Some(name) = self.agents.defaults.model_preset.as_deref().map(str::trim)
            && !name.is_empty()
            && name != DEFAULT_PRESET
            && !self.model_presets.contains_key(name)
        {
            return Err(ConfigError::Validation {
                field: "agents.defaults.modelPreset".into(),
                message: format!("names {name:?}, which is not in modelPresets"),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn config(presets: Value, active: Option<&str>) -> Config {
        let mut c = Config {
            model_presets: presets.as_object().unwrap().clone(),
            ..Config::default()
        };
        c.agents.defaults.model_preset = active.map(str::to_owned);
        c
    }

    #[test]
    fn the_active_preset_wins_over_the_defaults() {
        let c = config(
            json!({"fast": {"model": "openai/gpt-4.1-mini", "max_tokens": 1024, "reasoningEffort": "low"}}),
            Some("fast"),
        );
        c.validate().unwrap();
        let d = c.resolved_defaults();
        assert_eq!(d.model, "openai/gpt-4.1-mini");
        assert_eq!(d.max_tokens, 1024);
        assert_eq!(d.context_window_tokens, 200_000);
        assert_eq!(d.reasoning_effort.as_deref(), Some("low"));
        assert_eq!(d.provider, "auto");
        assert_eq!(c.model_preset_names(), ["fast"]);
        assert_eq!(c.model_preset("default").unwrap().model, c.agents.defaults.model);
        let plain = config(json!({}), Some("default"));
        plain.validate().unwrap();
        assert_eq!(
            plain.resolved_defaults().model,
            Config::default().agents.defaults.model
        );
    }

    #[test]
    fn bad_presets_are_refused_by_name() {
        for (presets, active, field) in [
            (
                json!({"x": {"model": "m", "temperature": 3}}),
                None,
                "modelPresets.x.temperature",
            ),
            (json!({"x": {"maxTokens": 5}}), None, "modelPresets.x"),
            (json!({"default": {"model": "m"}}), None, "modelPresets.default"),
            (
                json!({"x": {"model": "m"}}),
                Some("y"),
                "agents.defaults.modelPreset",
            ),
        ] {
            let err = config(presets, active).validate().unwrap_err();
            assert!(
                matches!(&err, ConfigError::Validation { field: f, .. } if f == field),
                "{err}"
            );
        }
    }
}
