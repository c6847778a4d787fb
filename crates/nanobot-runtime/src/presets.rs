//! The `modelPresets` of `config.json` offered to `/model` ([`nanobot_core::ModelPresets`]): each preset's
//! provider is built on first use (a preset whose key is missing fails only when chosen) and kept.

use std::collections::HashMap;
use std::sync::Mutex;

use nanobot_config::Config;
use nanobot_core::{ModelChoice, ModelPresets};
use nanobot_providers::ProviderFactory;
use nanobot_util::EnvMap;

/// The presets of one config.
pub struct ConfigPresets {
    config: Config,
    env: EnvMap,
    data_dir: Option<std::path::PathBuf>,
    built: Mutex<HashMap<String, ModelChoice>>,
}

impl std::fmt::Debug for ConfigPresets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigPresets")
            .field("names", &self.config.model_preset_names())
            .finish_non_exhaustive()
    }
}

impl ConfigPresets {
    /// The presets of `config`, their providers keyed from the config or `env`.
    pub fn new(config: &Config, env: EnvMap) -> Self {
        Self {
            config: config.clone(),
            env,
            data_dir: None,
            built: Mutex::default(),
        }
    }

    /// The config's data directory, where the OAuth providers' logins may be kept (the xAI login).
    #[must_use]
    pub fn with_data_dir(mut self, dir: impl Into<std::path::PathBuf>) -> Self {
        self.data_dir = Some(dir.into());
        self
    }
}

impl ModelPresets for ConfigPresets {
    fn names(&self) -> Vec<String> {
        self.config.model_preset_names()
    }

    fn choose(&self, name: &str) -> Result<ModelChoice, String> {
        if let Some(c) = nanobot_util::lock(&self.built).get(name) {
            return Ok(c.clone());
        }
        if !self.config.model_presets.contains_key(name) {
            return Err(format!("no preset named {name:?} in modelPresets"));
        }
        let preset = self.config.model_preset(name).map_err(|e| e.to_string())?;
        let d = preset.apply_to(&self.config.agents.defaults);
        nanobot_providers::install_ring();
        let mut factory = ProviderFactory::new(&self.config.providers, &d, self.env.clone());
        if let Some(dir) = &self.data_dir {
            factory = factory.with_data_dir(dir.clone());
        }
        let provider = factory
            .build_with_fallbacks(&d.model)
            .map_err(|e| format!("preset {name:?}: {e}"))?;
        let choice = ModelChoice::new(name, &d.model, provider, d.max_tokens, d.context_window_tokens)
            .with_temperature(Some(d.temperature))
            .with_reasoning_effort(d.reasoning_effort.clone());
        nanobot_util::lock(&self.built).insert(name.to_owned(), choice.clone());
        Ok(choice)
    }
}
