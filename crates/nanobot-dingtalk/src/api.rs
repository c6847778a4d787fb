//! The Open API calls: opening a Stream connection, the access token (cached, renewed before it expires and when
//! the API answers 401), robot messages, file downloads, and media uploads through the legacy API (`oapi`).

use std::time::Duration;

use nanobot_channels::{ChannelError, TokenCache, api_client};
use nanobot_config::Secret;
use serde_json::{Value, json};

use crate::NAME;

/// Bound of every HTTP call.
const HTTP_TIMEOUT: Duration = Duration::from_secs(30);
/// A token is renewed this long before DingTalk says it expires.
const TOKEN_MARGIN: Duration = Duration::from_secs(60);
/// The callback topic of robot messages.
pub(crate) const BOT_TOPIC: &str = "/v1.0/im/bot/messages/get";

/// Legacy API error codes of a bad or expired access token (the legacy API answers them with HTTP 200):
/// `40001` invalid credential, `40014` invalid access token, `42001` access token expired.
const TOKEN_ERRCODES: [i64; 3] = [40001, 40014, 42001];

pub(crate) struct Api {
    http: reqwest::Client,
    base: String,
    oapi: String,
    client_id: String,
    client_secret: Secret,
    token: TokenCache,
}

/// Classifies a non-success answer of `path` (its `code` cleaned of `secrets`, see
/// [`nanobot_channels::server_text`]).
fn failure(path: &str, status: reqwest::StatusCode, body: &Value, secrets: &[&str]) -> ChannelError {
    let code = body.get("code").and_then(Value::as_str).unwrap_or_default();
    let code = nanobot_channels::server_text(code, secrets);
    let what = format!("{path}: HTTP {status} {code}");
    match status.as_u16() {
        401 | 403 => ChannelError::auth(NAME, what),
        429 => ChannelError::RateLimited {
            channel: NAME.into(),
            retry_after: None,
        },
        500..=599 => ChannelError::transient(NAME, what),
        _ => ChannelError::rejected(NAME, what),
    }
}

impl Api {
    pub(crate) fn new(
        base: String,
        oapi: String,
        client_id: String,
        client_secret: Secret,
    ) -> Result<Self, ChannelError> {
        let http = api_client(NAME, |b| b.timeout(HTTP_TIMEOUT))?;
        Ok(Self {
            http,
            base,
            oapi,
            client_id,
            client_secret,
            token: TokenCache::new(TOKEN_MARGIN),
        })
    }

    pub(crate) fn robot_code(&self) -> &str {
        &self.client_id
    }

    async fn post(
        &self,
        path: &str,
        body: &Value,
        token: Option<&str>,
    ) -> Result<(reqwest::StatusCode, Value), ChannelError> {
        let mut req = self.http.post(format!("{}{path}", self.base)).json(body);
        if let Some(token) = token {
            req = req.header("x-acs-dingtalk-access-token", token);
        }
        let resp = req.send().await.map_err(|e| ChannelError::transient(NAME, e))?;
        let status = resp.status();
        let value = nanobot_channels::download::read_json(resp).await;
        Ok((status, value))
    }

    /// `POST /v1.0/gateway/connections/open`: the Stream endpoint and its one-time ticket, as a URL.
    pub(crate) async fn open_connection(&self) -> Result<String, ChannelError> {
        let path = "/v1.0/gateway/connections/open";
        let body = json!({
            "clientId": self.client_id,
            "clientSecret": self.client_secret.expose(),
            "subscriptions": [{"type": "CALLBACK", "topic": BOT_TOPIC}],
            "ua": concat!("nanobot-rs/", env!("CARGO_PKG_VERSION")),
            "localIp": "",
        });
        let (status, value) = self.post(path, &body, None).await?;
        if !status.is_success() {
            return Err(failure(path, status, &value, &[self.client_secret.expose()]));
        }
        let endpoint = value["endpoint"]
            .as_str()
            .filter(|u| u.starts_with("ws://") || u.starts_with("wss://"))
            .ok_or_else(|| ChannelError::transient(NAME, format!("{path}: no endpoint in the answer")))?;
        let ticket = value["ticket"]
            .as_str()
            .filter(|t| !t.is_empty())
            .ok_or_else(|| ChannelError::transient(NAME, format!("{path}: no ticket in the answer")))?;
        let mut url = url::Url::parse(endpoint)
            .map_err(|e| ChannelError::transient(NAME, format!("{path}: bad endpoint: {e}")))?;
        url.query_pairs_mut().append_pair("ticket", ticket);
        Ok(url.into())
    }

    async fn token(&self) -> Result<String, ChannelError> {
        self.token.get(|| self.fetch_token()).await
    }

    async fn fetch_token(&self) -> Result<(String, Duration), ChannelError> {
        let path = "/v1.0/oauth2/accessToken";
        let body = json!({"appKey": self.client_id, "appSecret": self.client_secret.expose()});
        let (status, value) = self.post(path, &body, None).await?;
        if !status.is_success() {
            return Err(failure(path, status, &value, &[self.client_secret.expose()]));
        }
        let token = value["accessToken"]
            .as_str()
            .filter(|t| !t.is_empty())
            .ok_or_else(|| ChannelError::auth(NAME, format!("{path}: no accessToken in the answer")))?
            .to_string();
        Ok((
            token,
            Duration::from_secs(value["expireIn"].as_u64().unwrap_or(7200)),
        ))
    }

    /// Drops the cached token if it still is `rejected`, so that the next call fetches a new one.
    async fn forget(&self, rejected: &str) {
        tracing::debug!("dingtalk: access token rejected; renewing it");
        self.token.forget(rejected).await;
    }

    /// An authorised call; when the API answers 401 the token is renewed and the call made once more.
    pub(crate) async fn call(&self, path: &str, body: &Value) -> Result<Value, ChannelError> {
        let mut retried = false;
        loop {
            let token = self.token().await?;
            let (status, value) = self.post(path, body, Some(&token)).await?;
            if status.as_u16() == 401 && !retried {
                self.forget(&token).await;
                retried = true;
                continue;
            }
            if !status.is_success() {
                return Err(failure(
                    path,
                    status,
                    &value,
                    &[self.client_secret.expose(), &token],
                ));
            }
            if let Some(code) = value.get("errcode").and_then(Value::as_i64).filter(|c| *c != 0) {
                return Err(ChannelError::rejected(NAME, format!("{path}: errcode {code}")));
            }
            return Ok(value);
        }
    }

    /// Saves a received file, by its download code, to `dest` (see [`nanobot_channels::download::save_body`]),
    /// refusing more than `max` bytes.
    pub(crate) async fn download(
        &self,
        code: &str,
        dest: &std::path::Path,
        max: u64,
    ) -> Result<u64, ChannelError> {
        let answer = self
            .call(
                "/v1.0/robot/messageFiles/download",
                &json!({"downloadCode": code, "robotCode": self.client_id}),
            )
            .await?;
        let url = answer["downloadUrl"]
            .as_str()
            .filter(|u| u.starts_with("http://") || u.starts_with("https://"))
            .ok_or_else(|| ChannelError::rejected(NAME, "messageFiles/download: no downloadUrl"))?;
        let resp = self
            .http
            .get(url)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(|e| ChannelError::transient(NAME, e.without_url()))?;
        nanobot_channels::download::save_body(NAME, "file", resp, dest, max).await
    }

    /// Uploads a file through the legacy API (`POST {oapi}/media/upload?access_token=…&type=…`, a multipart body
    /// whose `media` part is the file) and returns its `media_id`. `kind` is `image`, `voice`, `video` or `file`.
    /// A token the API calls bad or expired (HTTP 401, or errcode 40001/40014/42001 with HTTP 200) is renewed and
    /// the upload made once more. The token travels in the URL, so errors never carry the URL and server text is
    /// cleaned of the token.
    pub(crate) async fn upload(
        &self,
        kind: &str,
        file_name: &str,
        mime: &str,
        data: bytes::Bytes,
    ) -> Result<String, ChannelError> {
        let path = "media/upload";
        let mut retried = false;
        loop {
            let token = self.token().await?;
            let secrets = [self.client_secret.expose(), token.as_str()];
            let mut url = url::Url::parse(&format!("{}/media/upload", self.oapi.trim_end_matches('/')))
                .map_err(|e| ChannelError::rejected(NAME, format!("{path}: bad legacy API URL: {e}")))?;
            url.query_pairs_mut()
                .append_pair("access_token", &token)
                .append_pair("type", kind);
            let len = data.len() as u64;
            let part = reqwest::multipart::Part::stream_with_length(data.clone(), len)
                .file_name(file_name.to_string())
                .mime_str(mime)
                .map_err(|e| {
                    ChannelError::rejected(NAME, format!("{path}: bad content type: {}", e.without_url()))
                })?;
            let form = reqwest::multipart::Form::new().part("media", part);
            let resp = self
                .http
                .post(url)
                .multipart(form)
                .send()
                .await
                .map_err(|e| ChannelError::transient(NAME, e.without_url()))?;
            let status = resp.status();
            let value = nanobot_channels::download::read_json(resp).await;
            let errcode = value.get("errcode").and_then(Value::as_i64).unwrap_or(0);
            let bad_token = status.as_u16() == 401 || TOKEN_ERRCODES.contains(&errcode);
            if bad_token && !retried {
                self.forget(&token).await;
                retried = true;
                continue;
            }
            let errmsg = value.get("errmsg").and_then(Value::as_str).unwrap_or_default();
            let errmsg = nanobot_channels::server_text(errmsg, &secrets);
            if bad_token {
                return Err(ChannelError::auth(
                    NAME,
                    format!("{path}: HTTP {status} errcode {errcode} {errmsg}"),
                ));
            }
            if !status.is_success() {
                return Err(failure(path, status, &value, &secrets));
            }
            if errcode != 0 {
                return Err(ChannelError::rejected(
                    NAME,
                    format!("{path}: errcode {errcode} {errmsg}"),
                ));
            }
            let result = &value["result"];
            return [
                &value["media_id"],
                &value["mediaId"],
                &result["media_id"],
                &result["mediaId"],
            ]
            .into_iter()
            .find_map(|v| v.as_str().filter(|id| !id.is_empty()))
            .map(str::to_string)
            .ok_or_else(|| ChannelError::rejected(NAME, format!("{path}: no media_id in the answer")));
        }
    }
}
