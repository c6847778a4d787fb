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
use rand::RngCore as _;
use serde_json::{Map, Value, json};
use sha2::Digest as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;

use crate::endpoint::{Endpoint, event_stream, merge_extra};
use crate::oauth::{self, HTTP_TIMEOUT, OAuthError, OAuthToken, TokenStore};
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
const DISPLAY: &str = "OpenAI Codex";
const LOGIN: &str = "openai-codex";
const SUCCESS_HTML: &str = "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\" /><title>Authentication \
    successful</title></head><body><p>Authentication successful. Return to your terminal to continue.</p></body></html>";

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

pub(crate) fn random_b64(n: usize) -> String {
    let mut bytes = vec![0u8; n];
    rand::rng().fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
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

/// One browser sign-in: [`CodexLogin::start`] makes the URL and listens for the callback,
/// [`CodexLogin::wait_for_callback`] (or [`CodexLogin::code_from_pasted`]) gives the code,
/// [`CodexLogin::exchange`] turns it into the login to save.
#[derive(Debug)]
pub struct CodexLogin {
    urls: CodexUrls,
    http: reqwest::Client,
    verifier: Secret,
    state: String,
    authorize_url: String,
    listener: Option<TcpListener>,
    listen_problem: Option<String>,
}

impl CodexLogin {
    /// Makes the PKCE pair and the state, and starts listening at the redirect URI's host and port (when that
    /// fails, [`CodexLogin::callback_problem`] says why and the code has to be pasted).
    pub async fn start(urls: CodexUrls) -> Result<Self, OAuthError> {
        let verifier = random_b64(32);
        let challenge = URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(verifier.as_bytes()));
        let state = random_b64(16);
        let mut url = reqwest::Url::parse(&urls.authorize).map_err(|e| {
            OAuthError::Flow(format!(
                "the authorisation URL {:?} is not a URL: {e}",
                urls.authorize
            ))
        })?;
        url.query_pairs_mut().extend_pairs([
            ("response_type", "code"),
            ("client_id", urls.client_id.as_str()),
            ("redirect_uri", urls.redirect_uri.as_str()),
            ("scope", SCOPE),
            ("code_challenge", challenge.as_str()),
            ("code_challenge_method", "S256"),
            ("state", state.as_str()),
            ("id_token_add_organizations", "true"),
            ("codex_cli_simplified_flow", "true"),
            ("originator", ORIGINATOR),
        ]);
        let (listener, listen_problem) = match listen(&urls.redirect_uri).await {
            Ok(l) => (Some(l), None),
            Err(why) => (None, Some(why)),
        };
        Ok(Self {
            http: oauth::oauth_http_client()?,
            urls,
            verifier: Secret::new(verifier),
            state,
            authorize_url: url.to_string(),
            listener,
            listen_problem,
        })
    }

    /// The URL to open in a browser.
    pub fn authorize_url(&self) -> &str {
        &self.authorize_url
    }

    /// Why the callback is not listened for (then [`CodexLogin::code_from_pasted`] is the only way).
    pub fn callback_problem(&self) -> Option<&str> {
        self.listen_problem.as_deref()
    }

    /// Waits at most `bound` for the browser to come back with the code (requests with another state are
    /// refused and waited past).
    pub async fn wait_for_callback(&self, bound: Duration) -> Result<String, OAuthError> {
        let Some(listener) = &self.listener else {
            return Err(OAuthError::Flow(format!(
                "the callback cannot be received: {}",
                self.listen_problem.as_deref().unwrap_or("not listening")
            )));
        };
        let path = reqwest::Url::parse(&self.urls.redirect_uri)
            .map(|u| u.path().to_owned())
            .unwrap_or_else(|_| "/auth/callback".into());
        let work = async {
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    // Out of descriptors, say: do not spin.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                match tokio::time::timeout(
                    Duration::from_secs(10),
                    callback(socket, &path, &self.state, DISPLAY, None),
                )
                .await
                {
                    Ok(Some(Ok(code))) => return Ok(code),
                    Ok(Some(Err(e))) => return Err(e),
                    _ => {}
                }
            }
        };
        tokio::time::timeout(bound, work)
            .await
            .map_err(|_| OAuthError::Expired {
                provider: DISPLAY,
                login: LOGIN,
            })?
    }

    /// The code from what the user pasted: the whole callback URL (its state is checked), `code#state`, a
    /// query string, or the bare code.
    pub fn code_from_pasted(&self, raw: &str) -> Result<String, OAuthError> {
        let value = raw.trim();
        let (code, state) = if let Ok(url) = reqwest::Url::parse(value)
            && url.query_pairs().any(|(k, _)| k == "code")
        {
            pairs_code(url.query_pairs())
        } else if let Some((c, s)) = value.split_once('#') {
            (Some(c.to_owned()), Some(s.to_owned()))
        } else if value.contains("code=") {
            pairs_code(url::form_urlencoded::parse(
                value.trim_start_matches('?').as_bytes(),
            ))
        } else {
            (Some(value.to_owned()), None)
        };
        if state.as_deref().is_some_and(|s| s != self.state) {
            return Err(OAuthError::Flow(
                "the pasted URL belongs to another sign-in (its state does not match)".into(),
            ));
        }
        code.filter(|c| !c.is_empty())
            .ok_or_else(|| OAuthError::Flow("no authorization code was given".into()))
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
                ("code_verifier", self.verifier.expose()),
                ("redirect_uri", &self.urls.redirect_uri),
            ],
        );
        let answer = oauth::send_json(req, url, Duration::from_secs(30), false).await?;
        token_from(&answer, url)
    }
}

pub(crate) fn pairs_code<'a>(
    pairs: impl Iterator<Item = (std::borrow::Cow<'a, str>, std::borrow::Cow<'a, str>)>,
) -> (Option<String>, Option<String>) {
    let (mut code, mut state) = (None, None);
    for (k, v) in pairs {
        match &*k {
            "code" => code = Some(v.into_owned()),
            "state" => state = Some(v.into_owned()),
            _ => {}
        }
    }
    (code, state)
}

pub(crate) async fn listen(redirect_uri: &str) -> Result<TcpListener, String> {
    let url = reqwest::Url::parse(redirect_uri).map_err(|e| format!("the redirect URI is not a URL: {e}"))?;
    let host = url
        .host_str()
        .unwrap_or("localhost")
        .trim_matches(['[', ']'])
        .to_owned();
    let port = url.port_or_known_default().unwrap_or(80);
    TcpListener::bind((host.as_str(), port))
        .await
        .map_err(|e| format!("cannot listen on {host}:{port}: {e}"))
}

/// Answers one request to the callback listener: `Some(Ok(code))` for the callback of this sign-in,
/// `Some(Err(_))` when the provider refused it, `None` for anything else (answered 400/404 and waited past).
pub(crate) async fn callback(
    mut socket: tokio::net::TcpStream,
    path: &str,
    state: &str,
    provider: &'static str,
    cors_origin: Option<&str>,
) -> Option<Result<String, OAuthError>> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
        let n = socket.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let head = String::from_utf8_lossy(&head);
    let mut words = head.split_whitespace();
    let method = words.next().unwrap_or("GET").to_owned();
    let target = words.next().unwrap_or("/");
    let url = reqwest::Url::parse(&format!("http://callback{target}")).ok()?;
    // A sign-in page that calls the callback itself (xAI's) is let read the answer, and through the browser's
    // private-network check.
    let origin = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case("origin")
            .then(|| v.trim().to_owned())
    });
    let mut cors = String::from("Access-Control-Allow-Private-Network: true\r\n");
    if let (Some(allowed), Some(origin)) = (cors_origin, origin.as_deref())
        && allowed == origin
    {
        cors.push_str(&format!(
            "Access-Control-Allow-Origin: {origin}\r\nVary: Origin\r\n"
        ));
    }
    let reply = |status: &str, body: &str, kind: &str| {
        format!(
            "HTTP/1.1 {status}\r\n{cors}Content-Type: {kind}\r\nContent-Length: {}\r\nCache-Control: no-store\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        )
    };
    let q = |k: &str| {
        url.query_pairs()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.into_owned())
    };
    let (answer, result) = if url.path() != path {
        (reply("404 Not Found", "Not found", "text/plain"), None)
    } else if method.eq_ignore_ascii_case("OPTIONS") {
        let preflight = format!(
            "HTTP/1.1 204 No Content\r\n{cors}Access-Control-Allow-Methods: GET, OPTIONS\r\n\
             Access-Control-Allow-Headers: Content-Type\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        );
        (preflight, None)
    } else if q("state").as_deref() != Some(state) {
        (reply("400 Bad Request", "State mismatch", "text/plain"), None)
    } else if let Some(code) = q("code").filter(|c| !c.is_empty()) {
        (
            reply("200 OK", SUCCESS_HTML, "text/html; charset=utf-8"),
            Some(Ok(code)),
        )
    } else if let Some(error) = q("error") {
        let detail = q("error_description").unwrap_or(error);
        (
            reply("400 Bad Request", "Sign-in was not completed", "text/plain"),
            Some(Err(OAuthError::Denied { provider, detail })),
        )
    } else {
        (reply("400 Bad Request", "Missing code", "text/plain"), None)
    };
    let _ = socket.write_all(answer.as_bytes()).await;
    let _ = socket.shutdown().await;
    result
}

/// The stored ChatGPT login, refreshed [`REFRESH_MARGIN`] before it expires (calls at the same time wait for
/// one refresh). A login of the Codex CLI (`~/.codex/auth.json`) is taken over when there is none.
#[derive(Debug)]
pub struct CodexTokens {
    urls: CodexUrls,
    store: TokenStore,
    http: reqwest::Client,
    codex_cli: Option<std::path::PathBuf>,
    refreshing: tokio::sync::Mutex<()>,
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
            store,
            http,
            codex_cli: home.map(|h| h.join(".codex").join("auth.json")),
            refreshing: tokio::sync::Mutex::new(()),
        }
    }

    fn load(&self) -> Option<OAuthToken> {
        self.store.load().or_else(|| self.import_codex_cli())
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
        if let Err(e) = self.store.save(&token) {
            tracing::warn!(error = %e, "cannot keep the login taken over from the Codex CLI");
        }
        Some(token)
    }

    /// A login valid for at least [`REFRESH_MARGIN`], refreshed (and saved) when needed.
    pub async fn token(&self) -> Result<OAuthToken, OAuthError> {
        let not_logged_in = || OAuthError::NotLoggedIn {
            provider: DISPLAY,
            login: LOGIN,
        };
        let token = self.load().ok_or_else(not_logged_in)?;
        if token.fresh_for(REFRESH_MARGIN) {
            return Ok(token);
        }
        let _one = self.refreshing.lock().await;
        let _other_programs = self.store.lock_for_refresh(oauth::REFRESH_LOCK_WAIT).await?;
        // Another call (or program) may have refreshed it meanwhile.
        let token = self.load().ok_or_else(not_logged_in)?;
        if token.fresh_for(REFRESH_MARGIN) {
            return Ok(token);
        }
        match self.refresh(&token).await {
            Ok(fresh) => {
                self.store.save(&fresh)?;
                Ok(fresh)
            }
            Err(e) => match self.load() {
                // 0.3.5: a token another program refreshed, or one still valid, is used despite the failure.
                Some(latest) if latest.fresh_for(Duration::ZERO) => Ok(latest),
                _ => Err(e),
            },
        }
    }

    async fn refresh(&self, token: &OAuthToken) -> Result<OAuthToken, OAuthError> {
        if token.refresh.is_empty() {
            return Err(OAuthError::NotLoggedIn {
                provider: DISPLAY,
                login: LOGIN,
            });
        }
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
        let mut fresh = token_from(&answer, url)?;
        if fresh.account_id.is_none() {
            fresh.account_id = token.account_id.clone();
        }
        tracing::debug!(url = %crate::display_endpoint(url), "OpenAI Codex login refreshed");
        Ok(fresh)
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
                    "{provider}: the stored login has no ChatGPT account id; run `nanobot provider login {LOGIN}` \
                     again"
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
        let events = match endpoint.post_sse(&url, &auth, &body).await {
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

    #[tokio::test]
    async fn pasted_answers_give_the_code_and_check_the_state() {
        crate::install_ring();
        // The callback's port is taken: the code can only be pasted.
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let urls = CodexUrls {
            redirect_uri: format!(
                "http://127.0.0.1:{}/auth/callback",
                taken.local_addr().unwrap().port()
            ),
            ..CodexUrls::default()
        };
        let login = CodexLogin::start(urls).await.unwrap();
        assert!(login.callback_problem().is_some(), "the port is taken");
        let url = reqwest::Url::parse(login.authorize_url()).unwrap();
        let state = url
            .query_pairs()
            .find(|(k, _)| k == "state")
            .unwrap()
            .1
            .into_owned();
        assert_eq!(
            login
                .code_from_pasted(&format!(
                    "http://localhost:1455/auth/callback?code=abc&state={state}"
                ))
                .unwrap(),
            "abc"
        );
        assert_eq!(login.code_from_pasted("  abc  ").unwrap(), "abc");
        assert_eq!(login.code_from_pasted(&format!("abc#{state}")).unwrap(), "abc");
        assert!(
            login
                .code_from_pasted("http://localhost:1455/auth/callback?code=abc&state=other")
                .is_err()
        );
        assert!(login.code_from_pasted("").is_err());
    }
}
