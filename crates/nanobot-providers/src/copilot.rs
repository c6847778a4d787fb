//! GitHub Copilot, as 0.3.5 reaches it: a GitHub OAuth login by the device flow (`nanobot provider login
//! github-copilot`), exchanged for short-lived Copilot API tokens that are renewed before they expire, and the
//! OpenAI-compatible chat API of Copilot with the editor headers Copilot expects.
//!
//! Every URL can be changed by 0.3.5's variables (GitHub Enterprise, tests): [`CLIENT_ID_VAR`],
//! [`DEVICE_CODE_URL_VAR`], [`ACCESS_TOKEN_URL_VAR`], [`USER_URL_VAR`], [`TOKEN_URL_VAR`], [`BASE_URL_VAR`].

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use nanobot_util::{EnvMap, Secret};
use serde_json::Value;
use tokio::time::Instant;

use crate::capabilities::Capabilities;
use crate::endpoint::{Endpoint, event_stream};
use crate::oauth::{self, HTTP_TIMEOUT, OAuthError, OAuthToken, TokenStore};
use crate::{ChatRequest, ChatResponse, EventStream, OpenAiCompatClient, Provider, ProviderError};

/// Variable replacing the OAuth client id of the device flow.
pub const CLIENT_ID_VAR: &str = "NANOBOT_GITHUB_COPILOT_CLIENT_ID";
/// Variable replacing GitHub's device-code URL.
pub const DEVICE_CODE_URL_VAR: &str = "NANOBOT_GITHUB_DEVICE_CODE_URL";
/// Variable replacing GitHub's access-token URL (polled during the device flow).
pub const ACCESS_TOKEN_URL_VAR: &str = "NANOBOT_GITHUB_ACCESS_TOKEN_URL";
/// Variable replacing GitHub's user URL (the account name shown after login).
pub const USER_URL_VAR: &str = "NANOBOT_GITHUB_USER_URL";
/// Variable replacing the URL that exchanges the GitHub token for a Copilot API token.
pub const TOKEN_URL_VAR: &str = "NANOBOT_COPILOT_TOKEN_URL";
/// Variable replacing the Copilot API base URL (before `providers.githubCopilot.apiBase`).
pub const BASE_URL_VAR: &str = "NANOBOT_COPILOT_BASE_URL";

/// The variables of this module (not config overrides, although they start with `NANOBOT_`).
pub const ENV_VARS: &[&str] = &[
    CLIENT_ID_VAR,
    DEVICE_CODE_URL_VAR,
    ACCESS_TOKEN_URL_VAR,
    USER_URL_VAR,
    TOKEN_URL_VAR,
    BASE_URL_VAR,
];

/// GitHub's device-code URL.
pub const DEFAULT_DEVICE_CODE_URL: &str = "https://github.com/login/device/code";
/// GitHub's access-token URL.
pub const DEFAULT_ACCESS_TOKEN_URL: &str = "https://github.com/login/oauth/access_token";
/// GitHub's user URL.
pub const DEFAULT_USER_URL: &str = "https://api.github.com/user";
/// The Copilot token exchange.
pub const DEFAULT_TOKEN_URL: &str = "https://api.github.com/copilot_internal/v2/token";
/// The Copilot chat API.
pub const DEFAULT_BASE_URL: &str = "https://api.githubcopilot.com";
/// The OAuth client id 0.3.5 signs in with.
pub const DEFAULT_CLIENT_ID: &str = "Iv1.b507a08c87ecfe98";
/// The scope asked for.
pub const SCOPE: &str = "read:user";
/// The token file's name (under `<data dir>/nanobot/auth/`, as 0.3.5).
pub const TOKEN_FILE: &str = "github-copilot.json";
/// `User-Agent` of every Copilot request (0.3.5's).
pub const USER_AGENT: &str = "nanobot/0.1";
/// `Editor-Version` of every Copilot request.
pub const EDITOR_VERSION: &str = "vscode/1.99.0";
/// `Editor-Plugin-Version` of every Copilot request.
pub const EDITOR_PLUGIN_VERSION: &str = "copilot-chat/0.26.0";
/// A Copilot API token is renewed this long before it expires.
pub const EXPIRY_MARGIN: Duration = Duration::from_secs(60);
/// How long a GitHub token without `expires_in` is taken to last (0.3.5's ten years).
const LONG_LIVED: Duration = Duration::from_secs(315_360_000);
/// The provider's name for people.
const DISPLAY: &str = "GitHub Copilot";
/// The name `nanobot provider login` takes.
const LOGIN: &str = "github-copilot";

/// Where the device flow, the token exchange and the chat API are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopilotUrls {
    /// The OAuth client id.
    pub client_id: String,
    /// Device-code URL.
    pub device_code: String,
    /// Access-token URL.
    pub access_token: String,
    /// User URL.
    pub user: String,
    /// Copilot token exchange URL.
    pub copilot_token: String,
    /// Chat API base URL.
    pub api_base: String,
}

impl Default for CopilotUrls {
    fn default() -> Self {
        Self {
            client_id: DEFAULT_CLIENT_ID.into(),
            device_code: DEFAULT_DEVICE_CODE_URL.into(),
            access_token: DEFAULT_ACCESS_TOKEN_URL.into(),
            user: DEFAULT_USER_URL.into(),
            copilot_token: DEFAULT_TOKEN_URL.into(),
            api_base: DEFAULT_BASE_URL.into(),
        }
    }
}

impl CopilotUrls {
    /// The defaults with 0.3.5's variables applied (a blank value is ignored).
    pub fn from_env(env: &EnvMap) -> Self {
        let pick = |var: &str, default: String| crate::oauth::env_or(env, var, default);
        let d = Self::default();
        Self {
            client_id: pick(CLIENT_ID_VAR, d.client_id),
            device_code: pick(DEVICE_CODE_URL_VAR, d.device_code),
            access_token: pick(ACCESS_TOKEN_URL_VAR, d.access_token),
            user: pick(USER_URL_VAR, d.user),
            copilot_token: pick(TOKEN_URL_VAR, d.copilot_token),
            api_base: pick(BASE_URL_VAR, d.api_base),
        }
    }
}

/// Where the GitHub login is kept: `<data dir>/nanobot/auth/github-copilot.json` (0.3.5's place).
pub fn token_store(env: &EnvMap) -> Result<TokenStore, OAuthError> {
    TokenStore::for_app(env, "nanobot", TOKEN_FILE).ok_or(OAuthError::NoHome)
}

/// What the user needs to approve the sign-in: a code to type at a URL.
#[derive(Clone)]
pub struct DeviceCode {
    /// The code the user types.
    pub user_code: String,
    /// Where to type it.
    pub verification_uri: String,
    /// A URL with the code filled in, when the server gives one.
    pub verification_uri_complete: Option<String>,
    /// How long the code is valid.
    pub expires_in: Duration,
    /// How long to wait between two polls, as the server asked.
    pub interval: Duration,
    device_code: Secret,
}

impl std::fmt::Debug for DeviceCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceCode")
            .field("user_code", &self.user_code)
            .field("verification_uri", &self.verification_uri)
            .field("expires_in", &self.expires_in)
            .field("interval", &self.interval)
            .finish_non_exhaustive()
    }
}

/// How the device flow polls: the server's interval (at least `min_interval`), `slow_down_step` more after each
/// `slow_down`, and never longer than `max_wait` in all nor past the code's expiry. The server's numbers are in
/// seconds of `unit` length (one second; tests shorten it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DevicePacing {
    /// The shortest wait between two polls (0.3.5: one second).
    pub min_interval: Duration,
    /// Added to the interval when the server says `slow_down` (RFC 8628: five seconds).
    pub slow_down_step: Duration,
    /// The longest the whole sign-in may take, whatever the server says.
    pub max_wait: Duration,
    /// How long one of the server's seconds (`interval`, `expires_in`) lasts.
    pub unit: Duration,
}

impl Default for DevicePacing {
    fn default() -> Self {
        Self {
            min_interval: Duration::from_secs(1),
            slow_down_step: Duration::from_secs(5),
            max_wait: Duration::from_secs(3600),
            unit: Duration::from_secs(1),
        }
    }
}

impl DevicePacing {
    fn secs(&self, d: Duration) -> Duration {
        self.unit
            .saturating_mul(u32::try_from(d.as_secs()).unwrap_or(u32::MAX))
    }
}

/// GitHub's device flow (RFC 8628) for Copilot: [`GithubDeviceLogin::start`] gets the code to show,
/// [`GithubDeviceLogin::finish`] polls until the user approved it and returns the login to save.
#[derive(Debug, Clone)]
pub struct GithubDeviceLogin {
    urls: CopilotUrls,
    http: reqwest::Client,
    pacing: DevicePacing,
}

impl GithubDeviceLogin {
    /// A login against `urls` with its own HTTP client (the shared TLS set-up).
    pub fn new(urls: CopilotUrls) -> Result<Self, OAuthError> {
        Ok(Self {
            urls,
            http: oauth::oauth_http_client()?,
            pacing: DevicePacing::default(),
        })
    }

    /// Polls with this pacing.
    pub fn with_pacing(mut self, pacing: DevicePacing) -> Self {
        self.pacing = pacing;
        self
    }

    fn post(&self, url: &str, pairs: &[(&str, &str)]) -> reqwest::RequestBuilder {
        oauth::form_post(&self.http, url, pairs).header("user-agent", USER_AGENT)
    }

    /// Asks GitHub for a device code.
    pub async fn start(&self) -> Result<DeviceCode, OAuthError> {
        let url = &self.urls.device_code;
        let req = self.post(url, &[("client_id", &self.urls.client_id), ("scope", SCOPE)]);
        let answer = oauth::send_json(req, url, HTTP_TIMEOUT, false).await?;
        let device_code = Secret::new(oauth::required_str(&answer, "device_code", url)?);
        let user_code = oauth::required_str(&answer, "user_code", url)?;
        let text = |k: &str| {
            answer
                .get(k)
                .and_then(Value::as_str)
                .filter(|s| !s.trim().is_empty())
                .map(str::to_owned)
        };
        let complete = text("verification_uri_complete");
        let Some(verification_uri) = text("verification_uri").or_else(|| complete.clone()) else {
            return Err(OAuthError::BadAnswer {
                endpoint: crate::display_endpoint(url),
                problem: "`verification_uri` is missing".into(),
            });
        };
        let interval = oauth::seconds_field(&answer, "interval")
            .filter(|s| *s > 0)
            .unwrap_or(5);
        let expires_in = oauth::seconds_field(&answer, "expires_in")
            .filter(|s| *s > 0)
            .unwrap_or(900);
        Ok(DeviceCode {
            user_code,
            verification_uri,
            verification_uri_complete: complete,
            expires_in: Duration::from_secs(expires_in),
            interval: Duration::from_secs(interval),
            device_code,
        })
    }

    /// Polls until the user approved `code` (or denied it, or it expired), then looks the account up. The
    /// result is the login to save ([`TokenStore::save`]).
    pub async fn finish(&self, code: &DeviceCode) -> Result<OAuthToken, OAuthError> {
        let url = &self.urls.access_token;
        let p = self.pacing;
        let deadline = Instant::now() + p.secs(code.expires_in).min(p.max_wait);
        let mut interval = p.secs(code.interval).max(p.min_interval);
        let (access, expires_in) = loop {
            if Instant::now() >= deadline {
                return Err(OAuthError::Expired {
                    provider: DISPLAY,
                    login: LOGIN,
                });
            }
            let req = self.post(
                url,
                &[
                    ("client_id", &self.urls.client_id),
                    ("device_code", code.device_code.expose()),
                    ("grant_type", "urn:ietf:params:oauth:grant-type:device_code"),
                ],
            );
            let answer = tokio::time::timeout_at(deadline, oauth::send_json(req, url, HTTP_TIMEOUT, true))
                .await
                .map_err(|_| OAuthError::Expired {
                    provider: DISPLAY,
                    login: LOGIN,
                })??;
            if let Some(token) = answer
                .get("access_token")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
            {
                let expires = oauth::seconds_field(&answer, "expires_in")
                    .filter(|s| *s > 0)
                    .map_or(LONG_LIVED, Duration::from_secs);
                break (Secret::new(token), expires);
            }
            match answer.get("error").and_then(Value::as_str).unwrap_or_default() {
                "authorization_pending" => {}
                "slow_down" => {
                    let asked =
                        oauth::seconds_field(&answer, "interval").map(|s| p.secs(Duration::from_secs(s)));
                    interval = (interval + p.slow_down_step).max(asked.unwrap_or_default());
                }
                "expired_token" => {
                    return Err(OAuthError::Expired {
                        provider: DISPLAY,
                        login: LOGIN,
                    });
                }
                "access_denied" => {
                    return Err(OAuthError::Denied {
                        provider: DISPLAY,
                        detail: String::new(),
                    });
                }
                "" => {
                    return Err(OAuthError::BadAnswer {
                        endpoint: crate::display_endpoint(url),
                        problem: "neither `access_token` nor `error` in the answer".into(),
                    });
                }
                _ => {
                    return Err(OAuthError::Status {
                        endpoint: crate::display_endpoint(url),
                        status: 200,
                        detail: oauth::error_detail(&Value::Object(answer)),
                    });
                }
            }
            tokio::time::sleep_until((Instant::now() + interval).min(deadline)).await;
        };
        let account_id = self.account(&access).await?;
        let lifetime = i64::try_from(expires_in.as_millis()).unwrap_or(i64::MAX);
        Ok(OAuthToken {
            access,
            refresh: Secret::new(""),
            expires: oauth::now_ms().saturating_add(lifetime),
            account_id,
        })
    }

    /// The GitHub login (else the numeric id) of the account `access` belongs to.
    async fn account(&self, access: &Secret) -> Result<Option<String>, OAuthError> {
        let url = &self.urls.user;
        let req = self
            .http
            .get(url)
            .header("authorization", format!("Bearer {}", access.expose()))
            .header("accept", "application/vnd.github+json")
            .header("user-agent", USER_AGENT);
        let user = oauth::send_json(req, url, HTTP_TIMEOUT, false).await?;
        let login = user
            .get("login")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned);
        Ok(login.or_else(|| {
            user.get("id")
                .filter(|v| !v.is_null())
                .map(|v| v.to_string().trim_matches('"').to_owned())
        }))
    }
}

/// A Copilot API token and when it expires (milliseconds since the Unix epoch).
struct Cached {
    token: Secret,
    expires: i64,
}

/// Copilot API tokens from the stored GitHub login: exchanged on first use, kept, and exchanged again
/// [`EXPIRY_MARGIN`] before they expire (or after the API refused one). Calls that need a token at the same time
/// wait for one exchange.
pub struct CopilotTokens {
    urls: CopilotUrls,
    store: TokenStore,
    http: reqwest::Client,
    cached: tokio::sync::Mutex<Option<Cached>>,
}

impl std::fmt::Debug for CopilotTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CopilotTokens")
            .field("token_url", &self.urls.copilot_token)
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

impl CopilotTokens {
    /// Tokens exchanged at `urls.copilot_token` for the login in `store`, over `http`.
    pub fn new(urls: CopilotUrls, store: TokenStore, http: reqwest::Client) -> Self {
        Self {
            urls,
            store,
            http,
            cached: tokio::sync::Mutex::new(None),
        }
    }

    /// A Copilot API token valid for at least [`EXPIRY_MARGIN`].
    pub async fn token(&self) -> Result<Secret, OAuthError> {
        let mut cached = self.cached.lock().await;
        if let Some(c) = cached.as_ref() {
            let margin = i64::try_from(EXPIRY_MARGIN.as_millis()).unwrap_or(i64::MAX);
            if c.expires.saturating_sub(oauth::now_ms()) > margin {
                return Ok(c.token.clone());
            }
        }
        let fresh = self.exchange().await?;
        let token = fresh.token.clone();
        *cached = Some(fresh);
        Ok(token)
    }

    /// Drops the kept token (the API refused it): the next call exchanges again.
    pub async fn forget(&self) {
        *self.cached.lock().await = None;
    }

    async fn exchange(&self) -> Result<Cached, OAuthError> {
        let login = self.store.load().ok_or(OAuthError::NotLoggedIn {
            provider: DISPLAY,
            login: LOGIN,
        })?;
        let url = &self.urls.copilot_token;
        let req = self
            .http
            .get(url)
            .header("authorization", format!("token {}", login.access.expose()))
            .header("accept", "application/json")
            .header("user-agent", USER_AGENT)
            .header("editor-version", EDITOR_VERSION)
            .header("editor-plugin-version", EDITOR_PLUGIN_VERSION);
        let answer = oauth::send_json(req, url, HTTP_TIMEOUT, false).await?;
        let token = oauth::required_str(&answer, "token", url)?;
        let expires = match answer.get("expires_at").and_then(Value::as_f64) {
            Some(at) if at.is_finite() && at > 0.0 => (at * 1000.0) as i64,
            _ => {
                let refresh_in = oauth::seconds_field(&answer, "refresh_in")
                    .filter(|s| *s > 0)
                    .unwrap_or(1500);
                oauth::now_ms().saturating_add(i64::try_from(refresh_in).unwrap_or(1500).saturating_mul(1000))
            }
        };
        tracing::debug!(url = %crate::display_endpoint(url), "Copilot API token exchanged");
        Ok(Cached {
            token: Secret::new(token),
            expires,
        })
    }
}

/// The Copilot chat API: OpenAI chat completions with a Copilot API token from [`CopilotTokens`] and the editor
/// headers (`Editor-Version`, `Editor-Plugin-Version`, `User-Agent`) 0.3.5 sends.
#[derive(Debug, Clone)]
pub struct CopilotClient {
    endpoint: Endpoint,
    tokens: Arc<CopilotTokens>,
    caps: Arc<Capabilities>,
}

impl CopilotClient {
    /// A client for `endpoint` (its key is ignored) taking tokens from `tokens`.
    pub fn new(mut endpoint: Endpoint, tokens: Arc<CopilotTokens>) -> Self {
        endpoint.api_key = None;
        for (name, value) in [
            ("Editor-Version", EDITOR_VERSION),
            ("Editor-Plugin-Version", EDITOR_PLUGIN_VERSION),
            ("User-Agent", USER_AGENT),
        ] {
            if !endpoint.headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(name)) {
                endpoint.headers.push((name.to_owned(), value.to_owned()));
            }
        }
        Self {
            endpoint,
            tokens,
            caps: Arc::default(),
        }
    }

    /// The OpenAI-compatible client for one call, with a current token.
    async fn client(&self) -> Result<OpenAiCompatClient, ProviderError> {
        let token = self
            .tokens
            .token()
            .await
            .map_err(|e| e.into_provider_error(&self.endpoint.provider))?;
        let mut endpoint = self.endpoint.clone();
        endpoint.api_key = Some(token.expose().to_owned());
        Ok(OpenAiCompatClient::new(endpoint).with_capabilities(self.caps.clone()))
    }
}

/// Whether 0.3.5 sends `model` to Copilot's Responses API (GPT-5 and o-series models, or any model with a
/// reasoning effort): Copilot serves those models only there.
pub fn uses_responses(model: &str, reasoning_effort: Option<&str>) -> bool {
    let m = model.to_ascii_lowercase();
    reasoning_effort.is_some_and(|e| !e.eq_ignore_ascii_case("none"))
        || ["gpt-5", "o1", "o3", "o4"].iter().any(|t| m.contains(t))
}

impl CopilotClient {
    /// Whether `request` goes to the Responses API ([`uses_responses`] of the model name sent).
    fn responses_for(&self, request: &ChatRequest) -> bool {
        let model = crate::registry::wire_model(self.endpoint.spec, &self.endpoint.provider, &request.model);
        uses_responses(&model, request.reasoning_effort.as_deref())
    }

    /// The Responses API body for `request` (0.3.5's for Copilot: no temperature, encrypted reasoning kept).
    pub fn responses_body(&self, request: &ChatRequest) -> Value {
        let (instructions, input) = crate::responses::input(&request.messages);
        let model = crate::registry::wire_model(self.endpoint.spec, &self.endpoint.provider, &request.model);
        let mut body = serde_json::json!({
            "model": model,
            "input": input,
            "max_output_tokens": request.max_tokens.unwrap_or(4096).max(1),
            "store": false,
            "stream": true,
            "include": ["reasoning.encrypted_content"],
        });
        if !instructions.is_empty() {
            body["instructions"] = Value::String(instructions);
        }
        if let Some(e) = request
            .reasoning_effort
            .as_deref()
            .filter(|e| !e.eq_ignore_ascii_case("none"))
        {
            body["reasoning"] = serde_json::json!({"effort": e});
        }
        if !request.tools.is_empty() {
            body["tools"] = Value::Array(crate::responses::tools(&request.tools));
            body["tool_choice"] = crate::responses::tool_choice(request.tool_choice.as_ref());
        }
        crate::endpoint::merge_extra(&mut body, self.endpoint.extra_body.as_ref());
        body
    }

    async fn run_responses(
        self,
        request: ChatRequest,
        tx: tokio::sync::mpsc::Sender<Result<crate::StreamEvent, ProviderError>>,
    ) {
        let provider = self.endpoint.provider.clone();
        let token = match self.tokens.token().await {
            Ok(t) => t,
            Err(e) => {
                let _ = tx.send(Err(e.into_provider_error(&provider))).await;
                return;
            }
        };
        let mut endpoint = self.endpoint.clone();
        endpoint.api_key = Some(token.expose().to_owned());
        let auth = [
            ("authorization", format!("Bearer {}", token.expose())),
            ("accept", "text/event-stream".to_owned()),
        ];
        let body = self.responses_body(&request);
        let url = format!("{}/responses", endpoint.base_url);
        match endpoint
            .post_sse(&url, &auth, &crate::endpoint::JsonBody::from_value(&body))
            .await
        {
            Ok(events) => crate::responses::forward(events, &provider, tx).await,
            Err(e) => {
                if let ProviderError::Auth { .. } = &e {
                    self.tokens.forget().await;
                }
                let _ = tx.send(Err(e)).await;
            }
        }
    }
}

#[async_trait]
impl Provider for CopilotClient {
    fn name(&self) -> &str {
        &self.endpoint.provider
    }

    fn stream(&self, request: ChatRequest) -> EventStream {
        let this = self.clone();
        if self.responses_for(&request) {
            return event_stream(move |tx| this.run_responses(request, tx));
        }
        event_stream(move |tx| async move {
            let client = match this.client().await {
                Ok(c) => c,
                Err(e) => {
                    let _ = tx.send(Err(e)).await;
                    return;
                }
            };
            let mut events = client.stream(request);
            while let Some(event) = events.next().await {
                if let Err(ProviderError::Auth { .. }) = &event {
                    this.tokens.forget().await;
                }
                if tx.send(event).await.is_err() {
                    return;
                }
            }
        })
    }

    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, ProviderError> {
        if self.responses_for(&request) {
            return crate::collect(self.stream(request)).await;
        }
        let client = self.client().await?;
        let result = client.chat(request).await;
        if let Err(ProviderError::Auth { .. }) = &result {
            self.tokens.forget().await;
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variables_are_not_config_overrides_and_blank_ones_are_ignored() {
        for var in ENV_VARS {
            assert!(nanobot_config::env_vars::RESERVED.contains(var), "{var}");
        }
        let env = EnvMap::from_iter([(BASE_URL_VAR, "  "), (TOKEN_URL_VAR, "http://127.0.0.1:9/t")]);
        let urls = CopilotUrls::from_env(&env);
        assert_eq!(urls.api_base, DEFAULT_BASE_URL);
        assert_eq!(urls.copilot_token, "http://127.0.0.1:9/t");
    }

    #[test]
    fn gpt_5_and_o_series_models_go_to_the_responses_api() {
        assert!(uses_responses("github-copilot/gpt-5.4-mini", None));
        assert!(uses_responses("github-copilot/o3", None));
        assert!(uses_responses("github-copilot/gpt-4.1", Some("high")));
        assert!(!uses_responses("github-copilot/gpt-4.1", None));
        assert!(!uses_responses("github-copilot/gpt-4.1", Some("none")));
    }
}
