//! Both directions of the Bot Framework's authentication: the token on every request the Bot Framework sends
//! (RS256, signed by a key of its published set, for this app, from its issuer, in date, for this service URL)
//! and the bot's own token for answering (client credentials, kept until a minute before it expires).

use std::time::{Duration, Instant};

use nanobot_channels::{ChannelError, server_text};
use nanobot_config::Secret;
use serde_json::Value;
use tokio::sync::Mutex;

use crate::NAME;
use crate::settings::{BOT_FRAMEWORK_ISSUER, BOT_FRAMEWORK_SCOPE, MsTeamsSettings};

/// How long the published keys are used before they are fetched again (0.3.5: an hour).
const KEYS_FOR: Duration = Duration::from_secs(3600);
/// A token signed by a key not in the set fetches the set again, at most this often (keys roll over).
const REFETCH_AFTER: Duration = Duration::from_secs(300);
/// Clock skew allowed on `exp` and `nbf` (the Bot Framework SDKs allow five minutes).
const LEEWAY_SECS: u64 = 300;
/// The bot's token is fetched again this long before it expires.
const TOKEN_MARGIN: Duration = Duration::from_secs(60);

/// Why a request was not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The token is missing, malformed, forged, expired or for someone else (HTTP 401).
    Unauthorized(String),
    /// The keys to check it could not be fetched (HTTP 503: the Bot Framework tries again).
    Unavailable(String),
}

struct Keys {
    set: Vec<Value>,
    fetched: Instant,
}

/// The bot's side of the Bot Framework's authentication.
pub(crate) struct Auth {
    app_id: String,
    app_password: Secret,
    token_url: String,
    open_id_metadata: String,
    keys: Mutex<Option<Keys>>,
    token: Mutex<Option<(String, Instant)>>,
}

fn unauthorized(why: impl Into<String>) -> Refusal {
    Refusal::Unauthorized(why.into())
}

impl Auth {
    pub(crate) fn new(settings: &MsTeamsSettings) -> Self {
        Self {
            app_id: settings.app_id.clone(),
            app_password: settings.app_password.clone(),
            token_url: settings.token_url(),
            open_id_metadata: settings.open_id_metadata.clone(),
            keys: Mutex::new(None),
            token: Mutex::new(None),
        }
    }

    /// Checks the `Authorization` header of a request carrying `activity`.
    pub(crate) async fn check(
        &self,
        client: &reqwest::Client,
        authorization: Option<&str>,
        activity: &Value,
    ) -> Result<(), Refusal> {
        let token = authorization
            .and_then(|h| h.strip_prefix("Bearer ").or_else(|| h.strip_prefix("bearer ")))
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| unauthorized("no bearer token"))?;
        let header =
            jsonwebtoken::decode_header(token).map_err(|e| unauthorized(format!("malformed token: {e}")))?;
        let kid = header
            .kid
            .filter(|k| !k.is_empty())
            .ok_or_else(|| unauthorized("the token names no key (kid)"))?;
        let jwk = self.key(client, &kid).await?;
        let channel_id = activity["channelId"].as_str().unwrap_or_default();
        if let Some(endorsements) = jwk["endorsements"].as_array()
            && !channel_id.is_empty()
            && !endorsements.iter().any(|e| e.as_str() == Some(channel_id))
        {
            return Err(unauthorized(format!(
                "key {kid} is not endorsed for channel {channel_id:?}"
            )));
        }
        let jwk: jsonwebtoken::jwk::Jwk = serde_json::from_value(jwk)
            .map_err(|e| Refusal::Unavailable(format!("published key {kid} unreadable: {e}")))?;
        let key = jsonwebtoken::DecodingKey::from_jwk(&jwk)
            .map_err(|e| Refusal::Unavailable(format!("published key {kid} unusable: {e}")))?;
        let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::RS256);
        validation.set_audience(&[&self.app_id]);
        validation.set_issuer(&[BOT_FRAMEWORK_ISSUER]);
        validation.set_required_spec_claims(&["exp", "nbf", "iss", "aud"]);
        validation.validate_nbf = true;
        validation.leeway = LEEWAY_SECS;
        let claims = jsonwebtoken::decode::<Value>(token, &key, &validation)
            .map_err(|e| unauthorized(format!("token refused: {e}")))?
            .claims;
        let claimed = claims["serviceurl"]
            .as_str()
            .or_else(|| claims["serviceUrl"].as_str())
            .unwrap_or_default()
            .trim();
        // As the Bot Framework's SDKs check it (0.3.5 only when the claim is there): a token names the connector
        // its activity may send the answers to.
        let sent = activity["serviceUrl"].as_str().unwrap_or_default().trim();
        if !sent.is_empty() && claimed != sent {
            return Err(unauthorized("the activity's serviceUrl is not the token's"));
        }
        Ok(())
    }

    /// The published key `kid` (the set fetched when it is old, or when `kid` is new and the set was not
    /// fetched in the last five minutes).
    async fn key(&self, client: &reqwest::Client, kid: &str) -> Result<Value, Refusal> {
        let mut cached = self.keys.lock().await;
        let find = |keys: &Keys| keys.set.iter().find(|k| k["kid"].as_str() == Some(kid)).cloned();
        if let Some(keys) = cached.as_ref() {
            let age = keys.fetched.elapsed();
            if age < KEYS_FOR
                && let Some(k) = find(keys)
            {
                return Ok(k);
            }
            if age < REFETCH_AFTER {
                return Err(unauthorized(format!("no published key {kid}")));
            }
        }
        let set = self.fetch_keys(client).await.map_err(Refusal::Unavailable)?;
        let keys = Keys {
            set,
            fetched: Instant::now(),
        };
        let found = find(&keys);
        *cached = Some(keys);
        found.ok_or_else(|| unauthorized(format!("no published key {kid}")))
    }

    async fn fetch_keys(&self, client: &reqwest::Client) -> Result<Vec<Value>, String> {
        let get = |url: String| async move {
            let resp = client
                .get(&url)
                .send()
                .await
                .map_err(|e| format!("{url}: {}", e.without_url()))?;
            if !resp.status().is_success() {
                return Err(format!("{url}: HTTP {}", resp.status().as_u16()));
            }
            match nanobot_channels::download::read_json(resp).await {
                Value::Object(o) => Ok(Value::Object(o)),
                _ => Err(format!("{url}: not a JSON object")),
            }
        };
        let metadata = get(self.open_id_metadata.clone()).await?;
        let jwks_uri = metadata["jwks_uri"]
            .as_str()
            .filter(|u| u.starts_with("https://"))
            .ok_or_else(|| format!("{}: no https jwks_uri", self.open_id_metadata))?
            .to_owned();
        let set = get(jwks_uri.clone()).await?;
        let keys = set["keys"].as_array().cloned().unwrap_or_default();
        if keys.is_empty() {
            return Err(format!("{jwks_uri}: no keys"));
        }
        Ok(keys)
    }

    /// The bot's token for the Bot Connector.
    pub(crate) async fn bearer(&self, client: &reqwest::Client) -> Result<String, ChannelError> {
        let mut cached = self.token.lock().await;
        if let Some((token, until)) = cached.as_ref()
            && Instant::now() < *until
        {
            return Ok(token.clone());
        }
        let form = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("grant_type", "client_credentials")
            .append_pair("client_id", &self.app_id)
            .append_pair("client_secret", self.app_password.expose())
            .append_pair("scope", BOT_FRAMEWORK_SCOPE)
            .finish();
        let resp = client
            .post(&self.token_url)
            .header(reqwest::header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(form)
            .send()
            .await
            .map_err(|e| ChannelError::transient(NAME, format!("token: {}", e.without_url())))?;
        let status = resp.status().as_u16();
        let body = nanobot_channels::download::read_json(resp).await;
        if !(200..300).contains(&status) {
            let said = server_text(
                body["error_description"]
                    .as_str()
                    .or_else(|| body["error"].as_str())
                    .unwrap_or_default(),
                &[self.app_password.expose()],
            );
            let text = format!("token from {}: HTTP {status} {said}", self.token_url);
            return Err(match status {
                400 | 401 | 403 => ChannelError::auth(
                    NAME,
                    format!("{text} (check channels.msteams.appId, appPassword and tenantId)"),
                ),
                429 => ChannelError::RateLimited {
                    channel: NAME.into(),
                    retry_after: None,
                },
                _ => ChannelError::transient(NAME, text),
            });
        }
        let token = body["access_token"]
            .as_str()
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                ChannelError::transient(NAME, format!("token from {}: no access_token", self.token_url))
            })?
            .to_owned();
        let lifetime = Duration::from_secs(body["expires_in"].as_u64().unwrap_or(3600));
        *cached = Some((
            token.clone(),
            Instant::now() + lifetime.saturating_sub(TOKEN_MARGIN),
        ));
        Ok(token)
    }

    /// Forgets the bot's token (the connector refused it).
    pub(crate) async fn forget_token(&self) {
        *self.token.lock().await = None;
    }
}
