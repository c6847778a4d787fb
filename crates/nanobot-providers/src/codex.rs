//! OpenAI Codex, as 0.3.5 reaches it (`oauth_cli_kit` and `openai_codex_provider.py`): a ChatGPT sign-in in the
//! browser (OAuth authorization code with PKCE, the answer arriving at a callback on this machine, or pasted),
//! access tokens refreshed before they expire, and the Codex Responses API, streamed.
//!
//! The login is kept in 0.3.5's file `<data dir>/oauth-cli-kit/auth/codex.json` (a login of the Codex CLI in
//! `~/.codex/auth.json` is taken over when there is none, as 0.3.5 does). The endpoints can be moved with
//! nanobot-rs's variables [`AUTHORIZE_URL_VAR`], [`TOKEN_URL_VAR`], [`REDIRECT_URI_VAR`], [`CLIENT_ID_VAR`]
//! (0.3.5 has none); the API's base URL is `providers.openaiCodex.apiBase`.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use nanobot_util::{EnvMap, Secret};
use serde_json::{Map, Value, json};

use crate::endpoint::{Endpoint, event_stream, merge_extra};
use crate::oauth::{
    self, BrowserSignIn, HTTP_TIMEOUT, KeptLogin, OAuthError, OAuthToken, Redirect, TokenStore, Who,
};
use crate::registry::wire_model;
use crate::responses;
use crate::{ChatRequest, EventStream, Provider, ProviderError};

/// Variable replacing the authorisation URL (nanobot-rs's; for tests and proxies).
pub const AUTHORIZE_URL_VAR: &str = "NANOBOT_OPENAI_CODEX_AUTHORIZE_URL";
/// Variable replacing the token URL (code exchange and refresh).
pub const TOKEN_URL_VAR: &str = "NANOBOT_OPENAI_CODEX_TOKEN_URL";
/// Variable replacing the redirect URI, whose host and port the callback listens on.
pub const REDIRECT_URI_VAR: &str = "NANOBOT_OPENAI_CODEX_REDIRECT_URI";
/// Variable replacing the OAuth client id.
pub const CLIENT_ID_VAR: &str = "NANOBOT_OPENAI_CODEX_CLIENT_ID";
/// The variables of this module (not config overrides, although they start with `NANOBOT_`).
pub const ENV_VARS: &[&str] = &[AUTHORIZE_URL_VAR, TOKEN_URL_VAR, REDIRECT_URI_VAR, CLIENT_ID_VAR];

/// OpenAI's authorisation URL.
pub const DEFAULT_AUTHORIZE_URL: &str = "https://auth.openai.com/oauth/authorize";
/// OpenAI's token URL.
pub const DEFAULT_TOKEN_URL: &str = "https://auth.openai.com/oauth/token";
/// The redirect URI registered for the client (the callback listens on its port).
pub const DEFAULT_REDIRECT_URI: &str = "http://localhost:1455/auth/callback";
/// The Codex CLI's OAuth client id, which 0.3.5 signs in with.
pub const DEFAULT_CLIENT_ID: &str = "app_EMoamEEZ73f0CkXaXp7hrann";
/// The scopes asked for.
pub const SCOPE: &str = "openid profile email offline_access";
/// `originator` of the sign-in and of every API call (0.3.5's).
pub const ORIGINATOR: &str = "nanobot";
/// The API's default base URL; requests go to `<base>/codex/responses`.
pub const DEFAULT_BASE_URL: &str = "https://chatgpt.com/backend-api";
/// The token file's name (under `<data dir>/oauth-cli-kit/auth/`, as 0.3.5).
pub const TOKEN_FILE: &str = "codex.json";
/// Access tokens are refreshed when they expire within this.
pub const REFRESH_MARGIN: Duration = Duration::from_secs(60);
/// The JWT claim holding the ChatGPT account.
const AUTH_CLAIM: &str = "https://api.openai.com/auth";
const WHO: Who = Who {
    provider: "OpenAI Codex",
    login: "openai-codex",
};

/// Where the sign-in happens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodexUrls {
    /// The OAuth client id.
    pub client_id: String,
    /// Authorisation URL (opened in the browser).
    pub authorize: String,
    /// Token URL.
    pub token: String,
    /// Redirect URI (the callback).
    pub redirect_uri: String,
}

impl Default for CodexUrls {
    fn default() -> Self {
        Self {
            client_id: DEFAULT_CLIENT_ID.into(),
            authorize: DEFAULT_AUTHORIZE_URL.into(),
            token: DEFAULT_TOKEN_URL.into(),
            redirect_uri: DEFAULT_REDIRECT_URI.into(),
        }
    }
}

impl CodexUrls {
    /// The defaults with the variables applied (a blank value is ignored).
    pub fn from_env(env: &EnvMap) -> Self {
        let pick = |var: &str, default: String| crate::oauth::env_or(env, var, default);
        let d = Self::default();
        Self {
            client_id: pick(CLIENT_ID_VAR, d.client_id),
            authorize: pick(AUTHORIZE_URL_VAR, d.authorize),
            token: pick(TOKEN_URL_VAR, d.token),
            redirect_uri: pick(REDIRECT_URI_VAR, d.redirect_uri),
        }
    }
}

/// Where the ChatGPT login is kept: `<data dir>/oauth-cli-kit/auth/codex.json` (0.3.5's place).
pub fn token_store(env: &EnvMap) -> Result<TokenStore, OAuthError> {
    TokenStore::for_app(env, "oauth-cli-kit", TOKEN_FILE).ok_or(OAuthError::NoHome)
}

/// The ChatGPT account id in an access token (a JWT), when it carries one.
pub fn account_id(access: &str) -> Option<String> {
    let payload = access.split('.').nth(1)?;
    let bytes = URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')).ok()?;
    let claims: Value = serde_json::from_slice(&bytes).ok()?;
    claims
        .get(AUTH_CLAIM)?
        .get("chatgpt_account_id")?
        .as_str()
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// A login from a token endpoint's answer (`access_token`, `refresh_token`, `expires_in` are required).
fn token_from(answer: &Map<String, Value>, url: &str) -> Result<OAuthToken, OAuthError> {
    let access = oauth::required_str(answer, "access_token", url)?;
    let refresh = oauth::required_str(answer, "refresh_token", url)?;
    let Some(expires_in) = answer.get("expires_in").and_then(Value::as_i64) else {
        return Err(OAuthError::BadAnswer {
            endpoint: crate::display_endpoint(url),
            problem: "`expires_in` is missing or not a whole number".into(),
        });
    };
    Ok(OAuthToken {
        account_id: account_id(&access),
        access: Secret::new(access),
        refresh: Secret::new(refresh),
        expires: oauth::now_ms().saturating_add(expires_in.saturating_mul(1000)),
    })
}

/// One ChatGPT sign-in in the browser ([`CodexLogin::browser`]), whose code [`CodexLogin::exchange`] turns into
/// the login to save.
#[derive(Debug)]
pub struct CodexLogin {
    urls: CodexUrls,
    http: reqwest::Client,
    browser: BrowserSignIn,
}

impl CodexLogin {
    /// Starts the sign-in; the callback listens at the redirect URI's host and port (when it cannot,
    /// [`BrowserSignIn::callback_problem`] says why and the code has to be pasted).
    pub async fn start(urls: CodexUrls) -> Result<Self, OAuthError> {
        let browser = BrowserSignIn::start(
            WHO,
            &urls.authorize,
            &urls.client_id,
            SCOPE,
            Redirect::Registered(&urls.redirect_uri),
            &[
                ("id_token_add_organizations", "true"),
                ("codex_cli_simplified_flow", "true"),
                ("originator", ORIGINATOR),
            ],
            None,
        )
        .await?;
        Ok(Self {
            http: oauth::oauth_http_client()?,
            urls,
            browser,
        })
    }

    /// The browser's part: the URL to open, the callback, a pasted answer.
    pub fn browser(&self) -> &BrowserSignIn {
        &self.browser
    }

    /// Exchanges `code` for the login to save.
    pub async fn exchange(&self, code: &str) -> Result<OAuthToken, OAuthError> {
        let url = &self.urls.token;
        let req = oauth::form_post(
            &self.http,
            url,
            &[
                ("grant_type", "authorization_code"),
                ("client_id", &self.urls.client_id),
                ("code", code),
                ("code_verifier", self.browser.verifier()),
                ("redirect_uri", self.browser.redirect_uri()),
            ],
        );
        let answer = oauth::send_json(req, url, Duration::from_secs(30), false).await?;
        token_from(&answer, url)
    }
}

/// The stored ChatGPT login, refreshed [`REFRESH_MARGIN`] before it expires (calls at the same time wait for
/// one refresh). A login of the Codex CLI (`~/.codex/auth.json`) is taken over when there is none.
#[derive(Debug)]
pub struct CodexTokens {
    urls: CodexUrls,
    login: KeptLogin,
    http: reqwest::Client,
    codex_cli: Option<std::path::PathBuf>,
}

impl CodexTokens {
    /// Logins from `store`, refreshed at `urls.token` over `http`; `home` is where `.codex/auth.json` is looked
    /// for.
    pub fn new(
        urls: CodexUrls,
        store: TokenStore,
        http: reqwest::Client,
        home: Option<&std::path::Path>,
    ) -> Self {
        Self {
            urls,
            login: KeptLogin::new(WHO, store, REFRESH_MARGIN),
            http,
            codex_cli: home.map(|h| h.join(".codex").join("auth.json")),
        }
    }

    fn load(&self) -> Option<OAuthToken> {
        self.login.store().load().or_else(|| self.import_codex_cli())
    }

    /// 0.3.5's import of the Codex CLI's login: its tokens, valid for an hour after the file was written.
    fn import_codex_cli(&self) -> Option<OAuthToken> {
        let path = self.codex_cli.as_ref()?;
        let text = nanobot_util::read_to_string_bounded(path, 1 << 20).ok()?;
        let v: Value = serde_json::from_str(&text).ok()?;
        let t = v.get("tokens")?;
        let s = |k: &str| {
            t.get(k)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        let (access, refresh, account) = (s("access_token")?, s("refresh_token")?, s("account_id")?);
        let written = std::fs::metadata(path)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|m| m.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or_else(oauth::now_ms, |d| i64::try_from(d.as_millis()).unwrap_or(0));
        let token = OAuthToken {
            access: Secret::new(access),
            refresh: Secret::new(refresh),
            expires: written.saturating_add(3_600_000),
            account_id: Some(account),
        };
        if let Err(e) = self.login.store().save(&token) {
            tracing::warn!(error = %e, "cannot keep the login taken over from the Codex CLI");
        }
        Some(token)
    }

    /// A login valid for at least [`REFRESH_MARGIN`], refreshed (and saved) when needed.
    pub async fn token(&self) -> Result<OAuthToken, OAuthError> {
        self.login
            .token(false, || self.load(), |old| self.refresh(old))
            .await
    }

    async fn refresh(&self, token: OAuthToken) -> Result<OAuthToken, OAuthError> {
        let url = &self.urls.token;
        let req = oauth::form_post(
            &self.http,
            url,
            &[
                ("grant_type", "refresh_token"),
                ("refresh_token", token.refresh.expose()),
                ("client_id", &self.urls.client_id),
            ],
        );
        let answer = oauth::send_json(req, url, HTTP_TIMEOUT, false).await?;
        token_from(&answer, url)
    }
}

/// The Codex Responses API (`<apiBase>/codex/responses`), streamed, with the ChatGPT login of [`CodexTokens`]
/// and 0.3.5's headers.
#[derive(Debug, Clone)]
pub struct CodexClient {
    endpoint: Endpoint,
    tokens: Arc<CodexTokens>,
}

impl CodexClient {
    /// A client for `endpoint` (its key is ignored) signing in with `tokens`.
    pub fn new(mut endpoint: Endpoint, tokens: Arc<CodexTokens>) -> Self {
        endpoint.api_key = None;
        Self { endpoint, tokens }
    }

    /// The JSON body sent for `request`.
    pub fn request_body(&self, request: &ChatRequest) -> Value {
        let (instructions, input) = responses::input(&request.messages);
        let model = wire_model(self.endpoint.spec, &self.endpoint.provider, &request.model);
        let mut reasoning = Map::new();
        match request.reasoning_effort.as_deref() {
            Some(e) if e.eq_ignore_ascii_case("none") => {
                reasoning.insert("effort".into(), json!("none"));
            }
            Some(e) => {
                reasoning.insert("summary".into(), json!("auto"));
                reasoning.insert("effort".into(), json!(e));
            }
            None => {
                reasoning.insert("summary".into(), json!("auto"));
            }
        }
        let mut body = json!({
            "model": model,
            "store": false,
            "stream": true,
            "instructions": instructions,
            "input": input,
            "text": {"verbosity": "medium"},
            "tool_choice": responses::tool_choice(request.tool_choice.as_ref()),
            "parallel_tool_calls": true,
            "include": ["reasoning.encrypted_content"],
            "reasoning": reasoning,
        });
        if !request.tools.is_empty() {
            body["tools"] = Value::Array(responses::tools(&request.tools));
        }
        merge_extra(&mut body, self.endpoint.extra_body.as_ref());
        body
    }

    async fn run(
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
        let Some(account) = token.account_id.clone() else {
            let _ = tx
                .send(Err(ProviderError::Config(format!(
                    "{provider}: the stored login has no ChatGPT account id; run `nanobot provider login {}` \
                     again",
                    WHO.login
                ))))
                .await;
            return;
        };
        let mut endpoint = self.endpoint.clone();
        endpoint.api_key = Some(token.access.expose().to_owned());
        let auth = [
            ("authorization", format!("Bearer {}", token.access.expose())),
            ("chatgpt-account-id", account),
            ("OpenAI-Beta", "responses=experimental".to_owned()),
            ("originator", ORIGINATOR.to_owned()),
            ("accept", "text/event-stream".to_owned()),
        ];
        let body = self.request_body(&request);
        let url = format!("{}/codex/responses", endpoint.base_url);
        let events = match endpoint
            .post_sse(&url, &auth, &crate::endpoint::JsonBody::from_value(&body))
            .await
        {
            Ok(s) => s,
            Err(e) => {
                let _ = tx.send(Err(usage_limit(e))).await;
                return;
            }
        };
        responses::forward(events, &provider, tx).await;
    }
}

/// ChatGPT's "usage limit reached" (HTTP 429) waits for the plan's reset, not for a retry: quota, not a rate
/// limit (0.3.5 does not retry it either).
fn usage_limit(e: ProviderError) -> ProviderError {
    match e {
        ProviderError::RateLimited {
            provider, message, ..
        } if message.to_ascii_lowercase().contains("usage limit")
            || message.to_ascii_lowercase().contains("usage_limit") =>
        {
            ProviderError::QuotaExceeded { provider, message }
        }
        other => other,
    }
}

#[async_trait]
impl Provider for CodexClient {
    fn name(&self) -> &str {
        &self.endpoint.provider
    }

    fn stream(&self, request: ChatRequest) -> EventStream {
        let this = self.clone();
        event_stream(move |tx| this.run(request, tx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jwt(claims: &Value) -> String {
        format!("e30.{}.sig", URL_SAFE_NO_PAD.encode(claims.to_string()))
    }

    #[test]
    fn the_account_id_comes_from_the_jwt_claim() {
        let t = jwt(&json!({AUTH_CLAIM: {"chatgpt_account_id": "acct-1"}}));
        assert_eq!(account_id(&t).as_deref(), Some("acct-1"));
        assert_eq!(account_id("not-a-jwt"), None);
        assert_eq!(account_id(&jwt(&json!({"sub": "x"}))), None);
    }

    #[test]
    fn the_variables_are_not_config_overrides() {
        for var in ENV_VARS {
            assert!(nanobot_config::env_vars::RESERVED.contains(var), "{var}");
        }
    }
}
