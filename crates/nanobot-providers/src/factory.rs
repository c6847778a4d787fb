//! From configuration to a ready `Arc<dyn Provider>`: matching, keys (config or environment), base URLs,
//! wire format, retries and fallback models.

use nanobot_util::lock;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nanobot_config::{AgentDefaults, Config, ProviderRetryMode, ProvidersConfig, TimeoutsConfig};
use nanobot_util::EnvMap;

use crate::Provider;
use crate::ProviderError;
use crate::Timeouts;
use crate::anthropic::AnthropicClient;
use crate::endpoint::Endpoint;
use crate::openai::OpenAiCompatClient;
use crate::registry::{
    Backend, MatchInput, ProviderSpec, config_key, match_provider, missing_key, no_provider_error, wire_model,
};
use crate::resilience::{FallbackProvider, RetryPolicy, RetryingProvider};

/// A model resolved to a provider endpoint (what `/status` shows). `Debug` redacts the key.
#[derive(Clone)]
pub struct ResolvedProvider {
    /// Provider name (registry name or custom config key).
    pub name: String,
    /// The registry spec.
    pub spec: &'static ProviderSpec,
    /// Which matching rule decided.
    pub rule: &'static str,
    /// Wire format.
    pub backend: Backend,
    /// Base URL.
    pub base_url: String,
    /// The key (from config or environment), if any.
    pub api_key: Option<String>,
    /// The model id sent on the wire.
    pub wire_model: String,
    /// The endpoint, ready for a client.
    pub endpoint: Endpoint,
}

impl fmt::Debug for ResolvedProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResolvedProvider")
            .field("name", &self.name)
            .field("spec", &self.spec.name)
            .field("rule", &self.rule)
            .field("backend", &self.backend)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "[REDACTED]"))
            .field("wire_model", &self.wire_model)
            .finish()
    }
}

/// 0.3.5's runtime variable for the longest silence of a streamed answer, in seconds (at most 3600).
pub const STREAM_IDLE_TIMEOUT_VAR: &str = "NANOBOT_STREAM_IDLE_TIMEOUT_S";

/// 0.3.5's runtime variable for the request timeout of OpenAI-compatible providers, in seconds: here the longest
/// wait for the response head.
pub const OPENAI_COMPAT_TIMEOUT_VAR: &str = "NANOBOT_OPENAI_COMPAT_TIMEOUT_S";

const MAX_STREAM_IDLE_SECS: f64 = 3600.0;

/// HTTP clients by (proxy URL, connect timeout).
type ClientCache = HashMap<(Option<String>, Duration), reqwest::Client>;

/// Builds providers from the `providers` block, `agents.defaults` and an environment map.
#[derive(Debug, Clone)]
pub struct ProviderFactory {
    providers: ProvidersConfig,
    forced: String,
    fallback_models: Vec<String>,
    env: EnvMap,
    timeouts: Option<Timeouts>,
    configured: TimeoutsConfig,
    retry: RetryPolicy,
    http: Option<reqwest::Client>,
    /// The clients built so far, one per (proxy, connect timeout): providers with the same settings share one
    /// connection pool, and resolving a model again builds nothing.
    clients: Arc<Mutex<ClientCache>>,
    /// The Copilot API tokens, shared by every Copilot client of this factory (one exchange serves them all).
    copilot_tokens: Arc<Mutex<Option<Arc<crate::copilot::CopilotTokens>>>>,
    /// The ChatGPT login of every Codex client of this factory (one refresh serves them all).
    codex_tokens: Arc<Mutex<Option<Arc<crate::codex::CodexTokens>>>>,
    /// The xAI login of every Grok client of this factory.
    grok_tokens: Arc<Mutex<Option<Arc<crate::grok::GrokTokens>>>>,
    /// nanobot's data directory (where the xAI login is kept), when known.
    data_dir: Option<std::path::PathBuf>,
}

/// The value in `slot`, made by `make` the first time (a failure leaves the slot empty, to be tried again).
fn made_once<T>(
    slot: &Mutex<Option<Arc<T>>>,
    make: impl FnOnce() -> Result<T, ProviderError>,
) -> Result<Arc<T>, ProviderError> {
    let mut slot = lock(slot);
    if let Some(made) = slot.as_ref() {
        return Ok(made.clone());
    }
    let made = Arc::new(make()?);
    *slot = Some(made.clone());
    Ok(made)
}

impl ProviderFactory {
    /// A factory for this configuration. `env` supplies `OPENAI_API_KEY` and friends when the config has no
    /// key (an `EnvMap`: `std::env::vars().collect()` in a binary, a map in tests).
    pub fn new(providers: &ProvidersConfig, defaults: &AgentDefaults, env: impl Into<EnvMap>) -> Self {
        let mut retry = RetryPolicy::default();
        if defaults.provider_retry_mode == ProviderRetryMode::Persistent {
            retry.max_retries = 10;
        }
        Self {
            providers: providers.clone(),
            forced: defaults.provider.clone(),
            fallback_models: defaults.fallback_models.clone(),
            env: env.into(),
            timeouts: None,
            configured: defaults.timeouts.clone(),
            retry,
            http: None,
            clients: Arc::default(),
            copilot_tokens: Arc::default(),
            codex_tokens: Arc::default(),
            grok_tokens: Arc::default(),
            data_dir: None,
        }
    }

    /// Uses these timeouts for every endpoint (instead of the defaults for the endpoint's locality with
    /// `agents.defaults.timeouts` applied).
    pub fn with_timeouts(mut self, timeouts: Timeouts) -> Self {
        self.timeouts = Some(timeouts);
        self
    }

    /// The bounds of calls to `base_url`: [`Timeouts::for_base_url`], then 0.3.5's runtime variable
    /// [`STREAM_IDLE_TIMEOUT_VAR`] from the environment map, then what `agents.defaults.timeouts` sets (the more
    /// specific setting wins), unless [`ProviderFactory::with_timeouts`] fixed them.
    pub fn timeouts_for(&self, base_url: &str) -> Timeouts {
        if let Some(t) = &self.timeouts {
            return t.clone();
        }
        let mut t = Timeouts::for_base_url(base_url);
        if let Some(idle) = self.env_seconds(STREAM_IDLE_TIMEOUT_VAR, MAX_STREAM_IDLE_SECS) {
            t.stream_idle = idle;
        }
        let c = &self.configured;
        let secs = |v: Option<f64>, d: Duration| {
            v.filter(|s| s.is_finite() && *s > 0.0)
                .map_or(d, |s| Duration::from_secs_f64(s.min(604_800.0)))
        };
        t.connect = secs(c.connect, t.connect);
        t.request = secs(c.first_byte, t.request);
        t.stream_idle = secs(c.idle, t.stream_idle);
        t.total = secs(c.call, t.total);
        t
    }

    /// [`ProviderFactory::timeouts_for`] for an OpenAI-compatible endpoint: 0.3.5's
    /// [`OPENAI_COMPAT_TIMEOUT_VAR`] bounds the wait for the response head (unless
    /// `agents.defaults.timeouts.firstByte` is set).
    fn timeouts_for_openai_compat(&self, base_url: &str) -> Timeouts {
        let mut t = self.timeouts_for(base_url);
        if self.timeouts.is_none()
            && !self
                .configured
                .first_byte
                .is_some_and(|s| s.is_finite() && s > 0.0)
            && let Some(request) = self.env_seconds(OPENAI_COMPAT_TIMEOUT_VAR, 604_800.0)
        {
            t.request = request;
        }
        t
    }

    /// A positive number of seconds from variable `name` of the environment map, at most `max`; an unusable
    /// value is ignored with a warning naming the variable (as 0.3.5 does).
    fn env_seconds(&self, name: &str, max: f64) -> Option<Duration> {
        let raw = self.env.get(name)?.trim();
        if raw.is_empty() {
            return None;
        }
        match raw.parse::<f64>() {
            Ok(v) if v.is_finite() && v > 0.0 => {
                if v > max {
                    tracing::warn!("{name}={raw} is more than {max} seconds; {max} is used");
                }
                Some(Duration::from_secs_f64(v.min(max)))
            }
            _ => {
                tracing::warn!("{name}={raw:?} is not a positive number of seconds; it is ignored");
                None
            }
        }
    }

    /// Sets the retry policy.
    pub fn with_retry_policy(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Shares this HTTP client.
    pub fn with_http_client(mut self, http: reqwest::Client) -> Self {
        self.http = Some(http);
        self
    }

    /// The endpoint `model` would be sent to (its `apiBase` or the provider's default), without building a
    /// client; `None` when no provider matches or it has no endpoint.
    pub fn endpoint_url(&self, model: &str) -> Option<String> {
        let input = MatchInput {
            providers: &self.providers,
            forced: &self.forced,
            env: &self.env,
        };
        let m = match_provider(&input, model)?;
        let base = self
            .env_base(m.spec)
            .or_else(|| m.config.as_ref().and_then(|c| c.api_base.clone()))
            .filter(|b| !b.trim().is_empty())
            .unwrap_or_else(|| m.spec.default_api_base.to_owned());
        (!base.is_empty()).then_some(base)
    }

    /// A base URL the environment sets for `spec` (Copilot's `NANOBOT_COPILOT_BASE_URL`), before `apiBase`.
    fn env_base(&self, spec: &ProviderSpec) -> Option<String> {
        match spec.backend {
            Backend::GithubCopilot => self
                .env
                .non_empty(crate::copilot::BASE_URL_VAR)
                .map(|b| b.trim().to_owned()),
            _ => None,
        }
    }

    /// Whether `model` is served by a model server on this machine or the LAN ([`crate::is_local_url`] of
    /// [`ProviderFactory::endpoint_url`]): usually a small model, which gets lower caps.
    pub fn is_local_model(&self, model: &str) -> bool {
        self.endpoint_url(model).is_some_and(|u| crate::is_local_url(&u))
    }

    /// Matches `model` and works out endpoint, key and wire format. Errors name what to set.
    pub fn resolve(&self, model: &str) -> Result<ResolvedProvider, ProviderError> {
        let input = MatchInput {
            providers: &self.providers,
            forced: &self.forced,
            env: &self.env,
        };
        let Some(m) = match_provider(&input, model) else {
            return Err(no_provider_error(model));
        };
        let spec = m.spec;
        let key_spec = crate::registry::find_spec(&m.name);
        let api_key = input.api_key(&m.name, key_spec);
        let block = m.config.clone().unwrap_or_default();
        let base = self
            .env_base(spec)
            .or_else(|| block.api_base.clone().filter(|b| !b.trim().is_empty()))
            .unwrap_or_else(|| spec.default_api_base.to_owned());
        if base.is_empty() {
            return Err(ProviderError::Config(format!(
                "provider `{}` (model `{model}`) has no endpoint: set `providers.{}.apiBase` in config.json",
                m.name,
                config_key(&m.name)
            )));
        }
        let is_custom = key_spec.is_none() || spec.name == "custom";
        if api_key.is_none() && !spec.is_local && !is_custom && !spec.is_oauth {
            return Err(missing_key(spec, model));
        }
        let backend = match block.api_type.to_ascii_lowercase().as_str() {
            // An OAuth provider speaks its own API whatever `apiType` says.
            _ if spec.is_oauth => spec.backend,
            "anthropic" => Backend::Anthropic,
            "openai" | "openai_compat" | "openai-compat" | "chat_completions" => Backend::OpenAiCompat,
            _ => spec.backend,
        };
        let timeouts = if matches!(backend, Backend::OpenAiCompat | Backend::GithubCopilot) {
            self.timeouts_for_openai_compat(&base)
        } else {
            self.timeouts_for(&base)
        };
        let proxy = block.proxy.clone().filter(|p| !p.trim().is_empty());
        let http = match (&self.http, proxy) {
            (Some(h), None) => h.clone(),
            (_, proxy) => {
                let key = (proxy, timeouts.connect);
                let mut clients = lock(&self.clients);
                match clients.get(&key) {
                    Some(h) => h.clone(),
                    None => {
                        let mut b = crate::http::http_client_builder(timeouts.connect);
                        if let Some(p) = &key.0 {
                            let p = reqwest::Proxy::all(p).map_err(|e| {
                                ProviderError::Config(format!(
                                    "providers.{}.proxy is not a valid proxy URL: {e}",
                                    config_key(&m.name)
                                ))
                            })?;
                            b = b.proxy(p);
                        }
                        let h = b.build().map_err(|e| {
                            ProviderError::Config(format!("cannot build the HTTP client: {e}"))
                        })?;
                        clients.insert(key, h.clone());
                        h
                    }
                }
            }
        };
        let mut endpoint = Endpoint::with_client(m.name.clone(), spec, base.clone(), api_key.clone(), http)
            .with_timeouts(timeouts);
        endpoint.headers = block
            .headers()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        endpoint.extra_body = block.extra_body.clone();
        endpoint.query = block
            .extra_query
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.as_str().map_or_else(|| v.to_string(), str::to_owned)))
            .collect();
        Ok(ResolvedProvider {
            wire_model: wire_model(spec, &m.name, model),
            name: m.name,
            spec,
            rule: m.rule,
            backend,
            base_url: endpoint.base_url.clone(),
            api_key,
            endpoint,
        })
    }

    /// The client for `model`, without retries.
    pub fn client(&self, model: &str) -> Result<Arc<dyn Provider>, ProviderError> {
        let r = self.resolve(model)?;
        tracing::debug!(model, provider = %r.name, rule = r.rule, base = %r.base_url, "provider resolved");
        self.client_for(r)
    }

    /// The client speaking `r`'s wire format.
    fn client_for(&self, r: ResolvedProvider) -> Result<Arc<dyn Provider>, ProviderError> {
        Ok(match r.backend {
            Backend::Anthropic => Arc::new(AnthropicClient::new(r.endpoint)),
            Backend::OpenAiCompat => Arc::new(OpenAiCompatClient::new(r.endpoint)),
            Backend::GithubCopilot => {
                let tokens = self.copilot_tokens(&r.endpoint)?;
                Arc::new(crate::copilot::CopilotClient::new(r.endpoint, tokens))
            }
            Backend::OpenAiCodex => {
                let tokens = self.codex_tokens(&r.endpoint)?;
                Arc::new(crate::codex::CodexClient::new(r.endpoint, tokens))
            }
            Backend::XaiGrok => {
                let tokens = self.grok_tokens(&r.endpoint)?;
                Arc::new(crate::grok::GrokClient::new(r.endpoint, tokens))
            }
        })
    }

    /// Keeps nanobot's data directory (the config file's directory), where the xAI login is stored. Without it,
    /// the directory of `NANOBOT_CONFIG`, else `~/.nanobot`, is used.
    pub fn with_data_dir(mut self, dir: impl Into<std::path::PathBuf>) -> Self {
        self.data_dir = Some(dir.into());
        self
    }

    /// The xAI login of this factory's Grok clients, made on first use.
    fn grok_tokens(&self, endpoint: &Endpoint) -> Result<Arc<crate::grok::GrokTokens>, ProviderError> {
        made_once(&self.grok_tokens, || {
            let dir = self
                .data_dir
                .clone()
                .or_else(|| crate::grok::default_data_dir(&self.env))
                .ok_or_else(|| {
                    ProviderError::Config(format!(
                        "{}: cannot find the xAI login: neither HOME nor NANOBOT_CONFIG is set",
                        endpoint.provider
                    ))
                })?;
            Ok(crate::grok::GrokTokens::new(
                crate::grok::issuer(&self.env),
                crate::grok::token_store(&dir),
                endpoint.http.clone(),
            ))
        })
    }

    /// The ChatGPT logins of this factory's Codex clients, made on first use.
    fn codex_tokens(&self, endpoint: &Endpoint) -> Result<Arc<crate::codex::CodexTokens>, ProviderError> {
        made_once(&self.codex_tokens, || {
            let store = crate::codex::token_store(&self.env)
                .map_err(|e| ProviderError::Config(format!("{}: {e}", endpoint.provider)))?;
            let home = self.env.non_empty("HOME").map(std::path::PathBuf::from);
            Ok(crate::codex::CodexTokens::new(
                crate::codex::CodexUrls::from_env(&self.env),
                store,
                endpoint.http.clone(),
                home.as_deref(),
            ))
        })
    }

    /// The Copilot token source of this factory, made on first use (the GitHub login is read when a token is
    /// needed, so logging in after start-up works).
    fn copilot_tokens(
        &self,
        endpoint: &Endpoint,
    ) -> Result<Arc<crate::copilot::CopilotTokens>, ProviderError> {
        made_once(&self.copilot_tokens, || {
            let store = crate::copilot::token_store(&self.env)
                .map_err(|e| ProviderError::Config(format!("{}: {e}", endpoint.provider)))?;
            Ok(crate::copilot::CopilotTokens::new(
                crate::copilot::CopilotUrls::from_env(&self.env),
                store,
                endpoint.http.clone(),
            ))
        })
    }

    /// The client for `model`, with retries; the call's deadline (`Timeouts::total`) bounds all attempts
    /// together.
    pub fn build(&self, model: &str) -> Result<Arc<dyn Provider>, ProviderError> {
        let r = self.resolve(model)?;
        let total = r.endpoint.timeouts.total;
        let shown = r.endpoint.display_url();
        let client = self.client_for(r)?;
        Ok(Arc::new(
            RetryingProvider::new(client, self.retry.clone()).with_deadline(total, shown),
        ))
    }

    /// The client for `model` with retries, falling back to `agents.defaults.fallbackModels` in order.
    /// Fallback models that cannot be resolved are skipped with a warning; the primary must resolve.
    pub fn build_with_fallbacks(&self, model: &str) -> Result<Arc<dyn Provider>, ProviderError> {
        let primary = self.build(model)?;
        if self.fallback_models.is_empty() {
            return Ok(primary);
        }
        let mut chain = vec![(primary, model.to_owned())];
        for fb in &self.fallback_models {
            match self.build(fb) {
                Ok(p) => chain.push((p, fb.clone())),
                Err(e) => tracing::warn!(model = %fb, error = %e, "fallback model skipped"),
            }
        }
        Ok(Arc::new(FallbackProvider::new(chain)))
    }
}

/// The provider for `model` (or `agents.defaults.model` when empty) from a whole config: retries and fallback
/// models included. This is what the CLI and the gateway call.
pub fn resolve_provider(
    config: &Config,
    model: &str,
    env: &EnvMap,
) -> Result<Arc<dyn Provider>, ProviderError> {
    let defaults = &config.resolved_defaults();
    let model = if model.is_empty() {
        defaults.model.as_str()
    } else {
        model
    };
    ProviderFactory::new(&config.providers, defaults, env.clone()).build_with_fallbacks(model)
}
