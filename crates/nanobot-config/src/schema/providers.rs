//! `providers`: credentials and endpoints per LLM provider.

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::extra::Extra;
use crate::{Secret, SecretMap};

/// `providers`: provider name → settings, in file order.
///
/// Names the provider registry does not know are custom OpenAI-compatible endpoints. The order matters: "the
/// first provider with a key" is the first one in the file. Names are stored as written; [`ProvidersConfig::get`]
/// matches `azureOpenai`, `azure_openai` and `azure-openai` alike.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ProvidersConfig(pub IndexMap<String, ProviderConfig>);

impl ProvidersConfig {
    /// The settings of provider `name` (camelCase, snake_case or kebab-case).
    pub fn get(&self, name: &str) -> Option<&ProviderConfig> {
        self.0.get(name).or_else(|| {
            let wanted = normalize_name(name);
            self.0
                .iter()
                .find(|(k, _)| normalize_name(k) == wanted)
                .map(|(_, v)| v)
        })
    }

    /// Mutable access to provider `name`, matched like [`ProvidersConfig::get`].
    pub fn get_mut(&mut self, name: &str) -> Option<&mut ProviderConfig> {
        let wanted = normalize_name(name);
        let key = self
            .0
            .keys()
            .find(|k| k.as_str() == name || normalize_name(k) == wanted)?
            .clone();
        self.0.get_mut(&key)
    }

    /// Adds or replaces provider `name`.
    pub fn insert(&mut self, name: impl Into<String>, config: ProviderConfig) {
        self.0.insert(name.into(), config);
    }

    /// `(name, settings)` pairs in file order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &ProviderConfig)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// The first provider (in file order) that has a non-empty API key.
    pub fn first_with_key(&self) -> Option<(&str, &ProviderConfig)> {
        self.iter().find(|(_, p)| p.has_api_key())
    }

    /// Number of provider blocks.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are no provider blocks.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Lowercase, without `_` and `-`: the spelling-insensitive form of a provider name.
pub fn normalize_name(name: &str) -> String {
    name.chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect()
}

/// `providers.<name>`.
///
/// Provider-specific keys (Bedrock's `region` and `profile`) stay in [`ProviderConfig::extra`] and are read
/// with [`ProviderConfig::extra_str`]; they do not produce unknown-key warnings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ProviderConfig {
    /// API key (`null` or `""` = not set).
    #[serde(alias = "api_key")]
    pub api_key: Option<Secret>,
    /// Base URL overriding the provider's default endpoint.
    #[serde(alias = "api_base")]
    pub api_base: Option<String>,
    /// Wire format: `"auto"`, `"openai"`, `"anthropic"`, ….
    #[serde(alias = "api_type")]
    pub api_type: String,
    /// Extra HTTP headers sent with every request (values redacted in `Debug`).
    #[serde(alias = "extra_headers")]
    pub extra_headers: Option<SecretMap>,
    /// Extra JSON merged into every request body.
    #[serde(alias = "extra_body")]
    pub extra_body: Option<Map<String, Value>>,
    /// Extra URL query parameters.
    #[serde(alias = "extra_query")]
    pub extra_query: Option<Map<String, Value>>,
    /// HTTP proxy for this provider.
    pub proxy: Option<String>,
    /// How reasoning is requested from this provider.
    #[serde(alias = "thinking_style")]
    pub thinking_style: Option<String>,
    /// Provider-specific keys (`region`, `profile`) and keys this version does not model (kept on save).
    #[serde(flatten)]
    pub extra: Extra,
}

impl Default for ProviderConfig {
    fn default() -> Self {
        Self {
            api_key: None,
            api_base: None,
            api_type: "auto".into(),
            extra_headers: None,
            extra_body: None,
            extra_query: None,
            proxy: None,
            thinking_style: None,
            extra: Extra::default(),
        }
    }
}

/// Provider-specific keys that are kept in `extra` without an unknown-key warning.
pub(crate) const PROVIDER_SPECIFIC_KEYS: &[&str] = &["region", "profile"];

impl ProviderConfig {
    /// Whether an API key is set and not empty.
    pub fn has_api_key(&self) -> bool {
        self.api_key.as_ref().is_some_and(|k| !k.is_empty())
    }

    /// The extra headers in file order (empty when unset).
    pub fn headers(&self) -> impl Iterator<Item = (&str, &str)> {
        self.extra_headers.iter().flat_map(SecretMap::iter)
    }

    /// A provider-specific string key kept in `extra` (`"region"`, `"profile"`), if set and not empty.
    pub fn extra_str(&self, key: &str) -> Option<&str> {
        self.extra
            .get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    }
}
