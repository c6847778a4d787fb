//! The REST calls: the app access token (cached, renewed before it expires and when the API answers 401), the
//! gateway address, messages and attachment downloads. Every call is bounded by [`HTTP_TIMEOUT`].

use std::time::Duration;

use nanobot_channels::{ChannelError, TokenCache, api_client};
use nanobot_config::Secret;
use serde_json::{Value, json};

use crate::NAME;

/// Bound of every HTTP call (downloads included).
const HTTP_TIMEOUT: Duration = Duration::from_secs(60);
/// A token is renewed this long before QQ says it expires.
const TOKEN_MARGIN: Duration = Duration::from_secs(60);

pub(crate) struct Api {
    http: reqwest::Client,
    base: String,
    token_url: String,
    app_id: String,
    secret: Secret,
    token: TokenCache,
}

pub(crate) fn transient(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> ChannelError {
    ChannelError::Transient {
        channel: NAME.into(),
        source: e.into(),
    }
}

pub(crate) fn rejected(what: String) -> ChannelError {
    ChannelError::Rejected {
        channel: NAME.into(),
        source: what.into(),
    }
}

fn auth(what: String) -> ChannelError {
    ChannelError::Auth {
        channel: NAME.into(),
        source: what.into(),
    }
}

/// Classifies a non-success answer of `endpoint` (QQ's error body carries `code` and `message`; both are cleaned of
/// `secrets`, see [`nanobot_channels::server_text`]).
fn failure(endpoint: &str, status: reqwest::StatusCode, body: &Value, secrets: &[&str]) -> ChannelError {
    let code = nanobot_channels::server_text(
        &body.get("code").map(Value::to_string).unwrap_or_default(),
        secrets,
    );
    let message = nanobot_channels::server_text(
        body.get("message").and_then(Value::as_str).unwrap_or_default(),
        secrets,
    );
    let what = format!("{endpoint}: HTTP {status} {code} {message}");
    match status.as_u16() {
        401 | 403 => auth(what),
        429 => ChannelError::RateLimited {
            channel: NAME.into(),
            retry_after: None,
        },
        500..=599 => transient(what),
        _ => rejected(what),
    }
}

impl Api {
    pub(crate) fn new(
        base: String,
        token_url: String,
        app_id: String,
        secret: Secret,
    ) -> Result<Self, ChannelError> {
        let http = api_client(NAME, |b| {
            b.timeout(HTTP_TIMEOUT)
                .redirect(reqwest::redirect::Policy::none())
        })?;
        Ok(Self {
            http,
            base,
            token_url,
            app_id,
            secret,
            token: TokenCache::new(TOKEN_MARGIN),
        })
    }

    /// The cached access token, fetched (`POST getAppAccessToken`) when missing or about to expire.
    pub(crate) async fn token(&self) -> Result<String, ChannelError> {
        self.token.get(|| self.fetch_token()).await
    }

    async fn fetch_token(&self) -> Result<(String, Duration), ChannelError> {
        let endpoint = "getAppAccessToken";
        let resp = self
            .http
            .post(&self.token_url)
            .json(&json!({"appId": self.app_id, "clientSecret": self.secret.expose()}))
            .send()
            .await
            .map_err(|e| transient(format!("{endpoint}: {e}")))?;
        let status = resp.status();
        let value = nanobot_channels::download::read_json(resp).await;
        if !status.is_success() {
            return Err(failure(endpoint, status, &value, &[self.secret.expose()]));
        }
        let Some(token) = value["access_token"].as_str().filter(|t| !t.is_empty()) else {
            // A wrong appId/secret is answered with 200 and an error code.
            return Err(auth(format!(
                "{endpoint}: no access_token in the answer (code {}): check channels.qq.appId and secret",
                value.get("code").map(Value::to_string).unwrap_or_default()
            )));
        };
        // QQ sends `expires_in` as a string of seconds.
        let secs = match &value["expires_in"] {
            Value::String(s) => s.trim().parse().unwrap_or(7200),
            v => v.as_u64().unwrap_or(7200),
        };
        Ok((token.to_string(), Duration::from_secs(secs)))
    }

    async fn forget(&self, token: &str) {
        self.token.forget(token).await;
    }

    /// An authorised call; when the API answers 401 the token is renewed and the call made once more.
    pub(crate) async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, ChannelError> {
        let mut retried = false;
        loop {
            let token = self.token().await?;
            let mut req = self
                .http
                .request(method.clone(), format!("{}{path}", self.base))
                .header("Authorization", format!("QQBot {token}"))
                .header("X-Union-Appid", &self.app_id);
            if let Some(body) = body {
                req = req.json(body);
            }
            let resp = req.send().await.map_err(|e| transient(format!("{path}: {e}")))?;
            let status = resp.status();
            let value = nanobot_channels::download::read_json(resp).await;
            if status.as_u16() == 401 && !retried {
                tracing::debug!("qq: access token rejected; renewing it");
                self.forget(&token).await;
                retried = true;
                continue;
            }
            if !status.is_success() {
                return Err(failure(path, status, &value, &[self.secret.expose(), &token]));
            }
            return Ok(value);
        }
    }

    /// `GET /gateway/bot`: the WebSocket address.
    pub(crate) async fn gateway_url(&self) -> Result<String, ChannelError> {
        let value = self.call(reqwest::Method::GET, "/gateway/bot", None).await?;
        value["url"]
            .as_str()
            .filter(|u| u.starts_with("ws://") || u.starts_with("wss://"))
            .map(str::to_string)
            .ok_or_else(|| transient("/gateway/bot: no ws:// or wss:// url in the answer"))
    }
}
