//! xAI Grok, as 0.3.5 reaches it (`xai_oauth.py`, `xai_grok_provider.py`): a browser sign-in to an X Premium /
//! Grok subscription (OpenID discovery, authorization code with PKCE, the answer arriving at a callback on
//! `127.0.0.1` or pasted), tokens refreshed five minutes before they expire (and once after the API refused
//! one), and xAI's Responses API behind its subscription proxy, streamed, with 0.3.5's Grok client headers.
//!
//! The login is kept in 0.3.5's file `<data dir>/auth/xai.json` (the data dir is the config file's directory,
//! `~/.nanobot`). The issuer can be moved with nanobot-rs's [`ISSUER_VAR`] (0.3.5 has none); discovered
//! endpoints must be on the issuer's origin. The API's base URL is `providers.xaiGrok.apiBase`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use nanobot_util::{EnvMap, Secret};
use serde_json::{Map, Value, json};

use crate::endpoint::{Endpoint, event_stream};
use crate::oauth::{self, BrowserSignIn, KeptLogin, OAuthError, OAuthToken, Redirect, TokenStore, Who};
use crate::registry::wire_model;
use crate::responses;
use crate::{ChatRequest, EventStream, Provider, ProviderError, StreamEvent};

/// Variable replacing the OAuth issuer (nanobot-rs's; for tests).
pub const ISSUER_VAR: &str = "NANOBOT_XAI_OAUTH_ISSUER";
/// The variables of this module (not config overrides, although they start with `NANOBOT_`).
pub const ENV_VARS: &[&str] = &[ISSUER_VAR];
/// xAI's OAuth issuer.
pub const DEFAULT_ISSUER: &str = "https://auth.x.ai";
/// The OAuth client id 0.3.5 signs in with (Grok Build's public client).
pub const CLIENT_ID: &str = "b1a00492-073a-47ea-816f-4c329264a828";
/// `x-grok-client-version` of the sign-in and the API calls.
pub const CLIENT_VERSION: &str = "0.2.109";
/// The scopes asked for.
pub const SCOPES: &str = "openid profile email offline_access grok-cli:access api:access conversations:read \
    conversations:write workspaces:read workspaces:write";
/// The page that may call the callback itself (answered with CORS headers, as 0.3.5).
pub const ALLOWED_ORIGIN: &str = "https://accounts.x.ai";
/// The API's default base URL; requests go to `<base>/responses`.
pub const DEFAULT_BASE_URL: &str = "https://cli-chat-proxy.grok.com/v1";
/// Tokens are refreshed when they expire within this (0.3.5's five minutes).
pub const REFRESH_MARGIN: Duration = Duration::from_secs(300);
/// The longest wait of one request to the sign-in server (0.3.5's 15 seconds).
const HTTP_TIMEOUT: Duration = Duration::from_secs(15);
const WHO: Who = Who {
    provider: "xAI Grok",
    login: "xai-grok",
};

/// The issuer: [`DEFAULT_ISSUER`], or [`ISSUER_VAR`] when set.
pub fn issuer(env: &EnvMap) -> String {
    env.get(ISSUER_VAR)
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .unwrap_or(DEFAULT_ISSUER)
        .trim_end_matches('/')
        .to_owned()
}

/// Where the xAI login is kept: `<data_dir>/auth/xai.json` (0.3.5's place; [`crate::oauth::TOKEN_PATH_VAR`] does
/// not apply, as in 0.3.5).
pub fn token_store(data_dir: &Path) -> TokenStore {
    TokenStore::at(data_dir.join("auth").join("xai.json"))
}

/// The data directory when no config path is known: the directory of `NANOBOT_CONFIG`, else `~/.nanobot`.
pub fn default_data_dir(env: &EnvMap) -> Option<PathBuf> {
    if let Some(parent) = env
        .non_empty("NANOBOT_CONFIG")
        .and_then(|c| Path::new(c).parent().map(Path::to_path_buf))
        .filter(|p| !p.as_os_str().is_empty())
    {
        return Some(parent);
    }
    env.non_empty("HOME").map(|h| Path::new(h).join(".nanobot"))
}

/// The endpoints the issuer announces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovery {
    /// Where the browser signs in.
    pub authorization: String,
    /// Code exchange and refresh.
    pub token: String,
    /// The account's name and e-mail, when announced.
    pub userinfo: Option<String>,
}

/// Reads the issuer's OpenID configuration; the issuer must be the one asked and every endpoint on its origin.
pub async fn discover(issuer: &str, http: &reqwest::Client) -> Result<Discovery, OAuthError> {
    let url = format!("{issuer}/.well-known/openid-configuration");
    let answer = oauth::send_json(http.get(&url), &url, HTTP_TIMEOUT, false).await?;
    let bad = |problem: String| OAuthError::BadAnswer {
        endpoint: crate::display_endpoint(&url),
        problem,
    };
    let said = answer.get("issuer").and_then(Value::as_str).unwrap_or_default();
    if said.trim_end_matches('/') != issuer {
        return Err(bad(format!("the issuer is {said:?}, not {issuer:?}")));
    }
    let origin = |u: &str| reqwest::Url::parse(u).ok().map(|u| u.origin());
    let expected = origin(issuer);
    let endpoint = |key: &str| -> Result<Option<String>, OAuthError> {
        match answer.get(key).and_then(Value::as_str) {
            None => Ok(None),
            Some(u) => {
                let ok =
                    reqwest::Url::parse(u).is_ok_and(|p| p.username().is_empty() && p.password().is_none());
                if ok && origin(u) == expected {
                    Ok(Some(u.to_owned()))
                } else {
                    Err(bad(format!("the {key} {u:?} is not on the issuer's origin")))
                }
            }
        }
    };
    let need = |key: &str| endpoint(key)?.ok_or_else(|| bad(format!("`{key}` is missing")));
    Ok(Discovery {
        authorization: need("authorization_endpoint")?,
        token: need("token_endpoint")?,
        userinfo: endpoint("userinfo_endpoint")?,
    })
}

/// One xAI sign-in in the browser ([`GrokLogin::browser`]; the callback listens on `127.0.0.1` at a port of the
/// system's choosing, `/callback`), whose code [`GrokLogin::exchange`] turns into the login to save.
#[derive(Debug)]
pub struct GrokLogin {
    discovery: Discovery,
    http: reqwest::Client,
    browser: BrowserSignIn,
}

impl GrokLogin {
    /// Discovers the endpoints of `issuer` and starts the sign-in (with a nonce, as 0.3.5).
    pub async fn start(issuer: &str) -> Result<Self, OAuthError> {
        let http = oauth::oauth_http_client()?;
        let discovery = discover(issuer, &http).await?;
        let nonce = oauth::random_b64(32);
        let browser = BrowserSignIn::start(
            WHO,
            &discovery.authorization,
            CLIENT_ID,
            SCOPES,
            Redirect::LoopbackAnyPort("/callback"),
            &[("nonce", nonce.as_str()), ("referrer", "nanobot")],
            Some(ALLOWED_ORIGIN),
        )
        .await?;
        Ok(Self {
            discovery,
            http,
            browser,
        })
    }

    /// The browser's part: the URL to open, the callback, a pasted answer.
    pub fn browser(&self) -> &BrowserSignIn {
        &self.browser
    }

    /// Exchanges `code` and looks the account up; the result is the login to save.
    pub async fn exchange(&self, code: &str) -> Result<OAuthToken, OAuthError> {
        let url = &self.discovery.token;
        let req = form_post(
            &self.http,
            url,
            &[
                ("grant_type", "authorization_code"),
                ("code", code),
                ("redirect_uri", self.browser.redirect_uri()),
                ("client_id", CLIENT_ID),
                ("code_verifier", self.browser.verifier()),
            ],
        );
        let answer = oauth::send_json(req, url, HTTP_TIMEOUT, false).await?;
        let mut token = token_from(&answer, url, None)?;
        token.account_id = self.account(&token.access).await;
        Ok(token)
    }

    /// The account's e-mail (else its name or subject), when the issuer tells.
    async fn account(&self, access: &Secret) -> Option<String> {
        let url = self.discovery.userinfo.as_ref()?;
        let req = self
            .http
            .get(url)
            .header("authorization", format!("Bearer {}", access.expose()));
        let answer = oauth::send_json(req, url, HTTP_TIMEOUT, false).await.ok()?;
        ["email", "preferred_username", "name", "sub"]
            .iter()
            .find_map(|k| {
                answer
                    .get(*k)
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
            })
    }
}

fn form_post(http: &reqwest::Client, url: &str, pairs: &[(&str, &str)]) -> reqwest::RequestBuilder {
    oauth::form_post(http, url, pairs).header("x-grok-client-version", CLIENT_VERSION)
}

/// A login from a token answer: `access_token` required, `expires_in` defaulting to an hour, the previous
/// refresh token kept when no new one is given.
fn token_from(
    answer: &Map<String, Value>,
    url: &str,
    previous_refresh: Option<&Secret>,
) -> Result<OAuthToken, OAuthError> {
    let access = oauth::required_str(answer, "access_token", url)?;
    let expires_in = oauth::seconds_field(answer, "expires_in")
        .filter(|s| *s > 0)
        .unwrap_or(3600);
    let refresh = answer
        .get("refresh_token")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(Secret::new)
        .or_else(|| previous_refresh.cloned())
        .unwrap_or_else(|| Secret::new(""));
    Ok(OAuthToken {
        access: Secret::new(access),
        refresh,
        expires: oauth::now_ms()
            .saturating_add(i64::try_from(expires_in).unwrap_or(3600).saturating_mul(1000)),
        account_id: None,
    })
}

/// The stored xAI login, refreshed [`REFRESH_MARGIN`] before it expires (at `<issuer>/oauth2/token`, as 0.3.5)
/// or on demand after the API refused it; calls at the same time wait for one refresh.
#[derive(Debug)]
pub struct GrokTokens {
    issuer: String,
    login: KeptLogin,
    http: reqwest::Client,
}

impl GrokTokens {
    /// Logins from `store`, refreshed at `issuer` over `http`.
    pub fn new(issuer: impl Into<String>, store: TokenStore, http: reqwest::Client) -> Self {
        Self {
            issuer: issuer.into(),
            login: KeptLogin::new(WHO, store, REFRESH_MARGIN),
            http,
        }
    }

    /// A usable login; with `force`, refreshed whatever its expiry.
    pub async fn token(&self, force: bool) -> Result<OAuthToken, OAuthError> {
        self.login
            .token(force, || self.login.store().load(), |old| self.refresh(old))
            .await
    }

    async fn refresh(&self, latest: OAuthToken) -> Result<OAuthToken, OAuthError> {
        let url = format!("{}/oauth2/token", self.issuer);
        let req = form_post(
            &self.http,
            &url,
            &[
                ("grant_type", "refresh_token"),
                ("refresh_token", latest.refresh.expose()),
                ("client_id", CLIENT_ID),
            ],
        );
        let answer = oauth::send_json(req, &url, HTTP_TIMEOUT, false).await?;
        token_from(&answer, &url, Some(&latest.refresh))
    }
}

/// xAI's Responses API (`<apiBase>/responses`), streamed, with the xAI login of [`GrokTokens`] and 0.3.5's Grok
/// client headers. A 401 refreshes the login and tries once more.
#[derive(Debug, Clone)]
pub struct GrokClient {
    endpoint: Endpoint,
    tokens: Arc<GrokTokens>,
}

type Tx = tokio::sync::mpsc::Sender<Result<StreamEvent, ProviderError>>;

impl GrokClient {
    /// A client for `endpoint` (its key is ignored) signing in with `tokens`.
    pub fn new(mut endpoint: Endpoint, tokens: Arc<GrokTokens>) -> Self {
        endpoint.api_key = None;
        Self { endpoint, tokens }
    }

    /// The JSON body sent for `request`. Tools in `extraBody.tools` (a hosted `{"type": "x_search"}`, say) are
    /// added to the offered ones, as 0.3.5 does; the other `extraBody` keys are merged last.
    pub fn request_body(&self, request: &ChatRequest) -> Value {
        let (instructions, input) = responses::input(&request.messages);
        let model = wire_model(self.endpoint.spec, &self.endpoint.provider, &request.model);
        let mut tools = responses::tools(&request.tools);
        let extra = self.endpoint.extra_body.clone().unwrap_or_default();
        if let Some(Value::Array(more)) = extra.get("tools") {
            tools.extend(more.iter().cloned());
        }
        let mut reasoning = json!({"summary": "concise"});
        if let Some(e) = request
            .reasoning_effort
            .as_deref()
            .filter(|e| !e.eq_ignore_ascii_case("none"))
        {
            reasoning["effort"] = json!(e);
        }
        let mut body = json!({
            "model": model,
            "store": false,
            "stream": true,
            "instructions": instructions,
            "input": input,
            "include": ["reasoning.encrypted_content"],
            "tools": tools,
            "tool_choice": responses::tool_choice(request.tool_choice.as_ref()),
            "parallel_tool_calls": true,
            "stream_tool_calls": true,
            "reasoning": reasoning,
        });
        if let Some(n) = request.max_tokens {
            body["max_output_tokens"] = json!(n.max(1));
        }
        if let Some(t) = request.temperature {
            body["temperature"] = json!(t);
        }
        if let Value::Object(b) = &mut body {
            for (k, v) in extra {
                if k == "tools" && v.is_array() {
                    continue;
                }
                b.insert(k, v);
            }
        }
        body
    }

    fn headers(token: &OAuthToken, model: &str) -> Vec<(&'static str, String)> {
        let conversation = uuid::Uuid::new_v4().to_string();
        vec![
            ("authorization", format!("Bearer {}", token.access.expose())),
            ("X-XAI-Token-Auth", "xai-grok-cli".into()),
            ("x-authenticateresponse", "authenticate-response".into()),
            ("x-grok-client-version", CLIENT_VERSION.into()),
            ("x-grok-client-identifier", "nanobot".into()),
            ("x-grok-client-mode", "headless".into()),
            ("x-grok-conv-id", conversation.clone()),
            ("x-grok-req-id", uuid::Uuid::new_v4().to_string()),
            ("x-grok-model-override", model.to_owned()),
            ("x-grok-session-id", conversation),
            ("x-grok-agent-id", uuid::Uuid::new_v4().to_string()),
            ("accept", "text/event-stream".into()),
        ]
    }

    async fn run(self, request: ChatRequest, tx: Tx) {
        let provider = self.endpoint.provider.clone();
        let body = self.request_body(&request);
        let model = body["model"].as_str().unwrap_or_default().to_owned();
        let url = format!("{}/responses", self.endpoint.base_url);
        let mut force = false;
        let events = loop {
            let token = match self.tokens.token(force).await {
                Ok(t) => t,
                Err(e) => {
                    let _ = tx.send(Err(e.into_provider_error(&provider))).await;
                    return;
                }
            };
            let mut endpoint = self.endpoint.clone();
            endpoint.api_key = Some(token.access.expose().to_owned());
            match endpoint
                .post_sse(
                    &url,
                    &Self::headers(&token, &model),
                    &crate::endpoint::JsonBody::from_value(&body),
                )
                .await
            {
                Ok(s) => break s,
                Err(ProviderError::Auth { .. }) if !force => force = true,
                Err(e) => {
                    let _ = tx.send(Err(e)).await;
                    return;
                }
            }
        };
        responses::forward(events, &provider, tx).await;
    }
}

#[async_trait]
impl Provider for GrokClient {
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

    #[test]
    fn the_variables_are_not_config_overrides_and_the_store_is_0_3_5_s() {
        for var in ENV_VARS {
            assert!(nanobot_config::env_vars::RESERVED.contains(var), "{var}");
        }
        assert_eq!(
            token_store(Path::new("/h/.nanobot")).path(),
            Path::new("/h/.nanobot/auth/xai.json")
        );
        let env = EnvMap::from_iter([("HOME", "/h")]);
        assert_eq!(default_data_dir(&env), Some(PathBuf::from("/h/.nanobot")));
        let env = EnvMap::from_iter([("HOME", "/h"), ("NANOBOT_CONFIG", "/etc/nb/config.json")]);
        assert_eq!(default_data_dir(&env), Some(PathBuf::from("/etc/nb")));
        assert_eq!(issuer(&EnvMap::new()), DEFAULT_ISSUER);
    }

    #[test]
    fn a_0_3_5_login_without_refresh_token_reads() {
        let dir = tempfile::tempdir().unwrap();
        let store = token_store(dir.path());
        std::fs::create_dir_all(dir.path().join("auth")).unwrap();
        std::fs::write(
            store.path(),
            r#"{"access": "a", "refresh": null, "expires": 5, "account_id": null}"#,
        )
        .unwrap();
        let t = store.load().unwrap();
        assert!(t.refresh.is_empty());
        assert_eq!(t.account_id, None);
    }
}
