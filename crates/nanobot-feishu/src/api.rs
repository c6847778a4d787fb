//! The Open API calls the channel makes: endpoint discovery, the tenant access token (cached, refreshed before it
//! expires and when the API says it is no longer valid), messages, replies, reactions, resources and uploads.

use std::time::Duration;

use nanobot_channels::{ChannelError, TokenCache, api_client};
use nanobot_config::Secret;
use serde_json::{Value, json};

use crate::NAME;

/// Bound of every HTTP call.
const HTTP_TIMEOUT: Duration = Duration::from_secs(30);
/// A token is renewed this long before Feishu says it expires.
const TOKEN_MARGIN: Duration = Duration::from_secs(300);
/// API codes that mean "the tenant access token is invalid or expired".
const TOKEN_INVALID: [i64; 4] = [99_991_661, 99_991_663, 99_991_664, 99_991_665];

/// What endpoint discovery returned.
#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    /// `wss://…?device_id=…&service_id=…`.
    pub(crate) url: String,
    /// Seconds between pings (`ClientConfig.PingInterval`), when given.
    pub(crate) ping_interval: Option<u64>,
}

pub(crate) struct Api {
    http: reqwest::Client,
    base: String,
    app_id: String,
    app_secret: Secret,
    token: TokenCache,
}

/// `code` and `msg` of an Open API answer.
fn code_of(body: &Value) -> (i64, &str) {
    (
        body.get("code").and_then(Value::as_i64).unwrap_or(-1),
        body.get("msg").and_then(Value::as_str).unwrap_or(""),
    )
}

impl Api {
    pub(crate) fn new(base: String, app_id: String, app_secret: Secret) -> Result<Self, ChannelError> {
        let http = api_client(NAME, |b| b.timeout(HTTP_TIMEOUT))?;
        Ok(Self {
            http,
            base,
            app_id,
            app_secret,
            token: TokenCache::new(TOKEN_MARGIN),
        })
    }

    async fn post_plain(&self, path: &str, body: &Value) -> Result<Value, ChannelError> {
        let url = format!("{}{path}", self.base);
        let resp = self
            .http
            .post(&url)
            .json(body)
            .send()
            .await
            .map_err(|e| ChannelError::transient(NAME, e))?;
        let status = resp.status();
        let value = nanobot_channels::download::read_json(resp).await;
        if status.is_server_error() {
            return Err(ChannelError::transient(NAME, format!("{path}: HTTP {status}")));
        }
        Ok(value)
    }

    /// `POST /callback/ws/endpoint`: the long connection's URL for this app.
    pub(crate) async fn endpoint(&self) -> Result<Endpoint, ChannelError> {
        let path = "/callback/ws/endpoint";
        let body = self
            .post_plain(
                path,
                &json!({"AppID": self.app_id, "AppSecret": self.app_secret.expose()}),
            )
            .await?;
        let (code, msg) = code_of(&body);
        let msg = self.clean(msg, None);
        match code {
            0 => {}
            // System busy / internal error: try again later.
            1 | 1_000_040_343 => {
                return Err(ChannelError::transient(
                    NAME,
                    format!("{path}: code {code} {msg}"),
                ));
            }
            _ => return Err(ChannelError::auth(NAME, format!("{path}: code {code} {msg}"))),
        }
        let data = &body["data"];
        let url = data["URL"]
            .as_str()
            .filter(|u| u.starts_with("ws://") || u.starts_with("wss://"))
            .ok_or_else(|| ChannelError::transient(NAME, format!("{path}: no WebSocket URL in the answer")))?
            .to_string();
        let ping_interval = data["ClientConfig"]["PingInterval"].as_u64();
        Ok(Endpoint { url, ping_interval })
    }

    /// A server's message made fit for an error: the app secret and `token` removed, the length bounded.
    fn clean(&self, text: &str, token: Option<&str>) -> String {
        nanobot_channels::server_text(text, &[self.app_secret.expose(), token.unwrap_or_default()])
    }

    /// The tenant access token, from the cache while it is fresh.
    async fn token(&self) -> Result<String, ChannelError> {
        self.token.get(|| self.fetch_token()).await
    }

    async fn fetch_token(&self) -> Result<(String, Duration), ChannelError> {
        let path = "/open-apis/auth/v3/tenant_access_token/internal";
        let body = self
            .post_plain(
                path,
                &json!({"app_id": self.app_id, "app_secret": self.app_secret.expose()}),
            )
            .await?;
        let (code, msg) = code_of(&body);
        if code != 0 {
            let msg = self.clean(msg, None);
            return Err(ChannelError::auth(NAME, format!("{path}: code {code} {msg}")));
        }
        let token = body["tenant_access_token"]
            .as_str()
            .filter(|t| !t.is_empty())
            .ok_or_else(|| ChannelError::auth(NAME, format!("{path}: no tenant_access_token in the answer")))?
            .to_string();
        Ok((
            token,
            Duration::from_secs(body["expire"].as_u64().unwrap_or(7200)),
        ))
    }

    async fn forget_token(&self, stale: &str) {
        self.token.forget(stale).await;
    }

    /// An authorised JSON call; a token the API calls invalid is renewed and the call made once more.
    pub(crate) async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, ChannelError> {
        self.authorised(method, path, |req| match body {
            Some(body) => req.json(body),
            None => req,
        })
        .await
    }

    /// An authorised `multipart/form-data` upload (`POST`): the text `fields`, then the file as part `file_field`
    /// named `file_name`. Answers like [`Api::call`] (the form is built again when a stale token is renewed).
    pub(crate) async fn upload(
        &self,
        path: &str,
        fields: &[(&str, &str)],
        file_field: &str,
        file_name: &str,
        bytes: &bytes::Bytes,
    ) -> Result<Value, ChannelError> {
        self.authorised(reqwest::Method::POST, path, |req| {
            let mut form = reqwest::multipart::Form::new();
            for (name, value) in fields {
                form = form.text((*name).to_owned(), (*value).to_owned());
            }
            let part = reqwest::multipart::Part::stream_with_length(
                reqwest::Body::from(bytes.clone()),
                bytes.len() as u64,
            )
            .file_name(file_name.to_owned());
            req.multipart(form.part(file_field.to_owned(), part))
        })
        .await
    }

    /// One authorised request built by `build` (called again for the retry with a renewed token).
    async fn authorised(
        &self,
        method: reqwest::Method,
        path: &str,
        build: impl Fn(reqwest::RequestBuilder) -> reqwest::RequestBuilder,
    ) -> Result<Value, ChannelError> {
        let mut retried = false;
        loop {
            let token = self.token().await?;
            let req = self
                .http
                .request(method.clone(), format!("{}{path}", self.base))
                .bearer_auth(&token);
            let resp = build(req)
                .send()
                .await
                .map_err(|e| ChannelError::transient(NAME, e))?;
            let status = resp.status();
            let value = nanobot_channels::download::read_json(resp).await;
            let (code, msg) = code_of(&value);
            if TOKEN_INVALID.contains(&code) && !retried {
                tracing::debug!(code, "feishu: tenant access token rejected; renewing it");
                self.forget_token(&token).await;
                retried = true;
                continue;
            }
            if status.as_u16() == 429 || code == 99_991_400 {
                return Err(ChannelError::RateLimited {
                    channel: NAME.into(),
                    retry_after: None,
                });
            }
            if status.is_server_error() {
                return Err(ChannelError::transient(NAME, format!("{path}: HTTP {status}")));
            }
            if code != 0 {
                let msg = self.clean(msg, Some(&token));
                return Err(ChannelError::rejected(NAME, format!("{path}: code {code} {msg}")));
            }
            return Ok(value);
        }
    }

    /// Saves a message resource (`type` `image` or `file`) to `dest` (see
    /// [`nanobot_channels::download::save_body`]), refusing more than `max` bytes.
    pub(crate) async fn save_resource(
        &self,
        message_id: &str,
        key: &str,
        kind: &str,
        dest: &std::path::Path,
        max: u64,
    ) -> Result<u64, ChannelError> {
        let token = self.token().await?;
        let url = format!(
            "{}/open-apis/im/v1/messages/{}/resources/{}?type={}",
            self.base,
            enc(message_id),
            enc(key),
            enc(kind)
        );
        let resp = self
            .http
            .get(url)
            .bearer_auth(token)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(|e| ChannelError::transient(NAME, e))?;
        nanobot_channels::download::save_body(NAME, &format!("resource {key}"), resp, dest, max).await
    }
}

/// Percent-encodes one path segment.
pub(crate) fn enc(segment: &str) -> String {
    url::form_urlencoded::byte_serialize(segment.as_bytes()).collect()
}
