//! A fake of the Microsoft services a Teams bot talks to, on one HTTPS port of `127.0.0.1` (a certificate for
//! `127.0.0.1` and `localhost` from a fresh CA of its own, see [`FakeTeams::ca_file`]):
//!
//! - **Bot Framework OpenID metadata** (what `https://login.botframework.com` serves):
//!   `GET /v1/.well-known/openidconfiguration` (issuer `https://api.botframework.com`, `jwks_uri`, …) and the
//!   JWKS `GET /v1/.well-known/keys` (one RSA key: `kty`, `use`, `kid`, `x5t`, `n`, `e`, `endorsements`
//!   `["msteams"]`).
//! - **Azure AD** (what `https://login.microsoftonline.com` serves), for any tenant segment:
//!   `POST /{tenant}/oauth2/v2.0/token` (client credentials, form-encoded or HTTP Basic; the app's id and secret
//!   give `{"token_type":"Bearer","expires_in":3599,"ext_expires_in":3599,"access_token":<JWT>}`; errors are
//!   AAD's `{"error","error_description":"AADSTS…","error_codes",…}`: a wrong secret 401 `invalid_client`
//!   (AADSTS7000215, naming the app id, never the secret), an unknown client id 400 `unauthorized_client`
//!   (AADSTS700016), a missing parameter 400 `invalid_request`, another grant 400 `unsupported_grant_type`, a
//!   scope without `/.default` 400 `invalid_scope`), plus the tenant discovery msal reads first,
//!   `GET /{tenant}/v2.0/.well-known/openid-configuration`, and `GET /{tenant}/discovery/v2.0/keys`.
//! - **The Bot Connector** (what a Teams `serviceUrl` such as `https://smba.trafficmanager.net/amer/` serves),
//!   under [`FakeTeams::service_url`] (`https://127.0.0.1:<port>/amer/`): `POST
//!   /amer/v3/conversations/{conversationId}/activities` (send), `POST …/activities/{activityId}` (reply), `PUT
//!   …/activities/{activityId}` (update), `DELETE …/activities/{activityId}`. Path segments are percent-decoded
//!   (`a%3A1xyz` is `a:1xyz`). Each needs `Authorization: Bearer <an access token this fake issued for the scope
//!   https://api.botframework.com/.default>` (else 401 `{"message":"Authorization has been denied for this
//!   request."}`, counted in [`FakeTeams::refused_auth`]), and a JSON object with a string `type` (else 400
//!   `{"error":{"code":"BadArgument","message":..}}`). Send and reply answer 201 `{"id":"<new activity id>"}`,
//!   update 200 `{"id":"<the activity id>"}`, delete 200 with an empty body. Accepted ones are recorded
//!   ([`FakeTeams::sent`], [`FakeTeams::wait_sent`]); [`FakeTeams::fail_connector`] makes the connector answer an
//!   error status instead (an outage; `Retry-After: 1` with a 429).
//!
//! The inbound side plays the Bot Framework service: [`FakeTeams::token`] mints the RS256 JWT the service puts
//! in `Authorization` (`iss` `https://api.botframework.com`, `aud` the app id, `serviceurl`, `nbf`, `exp`; header
//! `kid`/`x5t` of the published key), or broken ones ([`InboundToken`]: forged, expired, another audience or
//! issuer, an unknown `kid`); [`FakeTeams::message`] builds a Teams `message` activity and
//! [`FakeTeams::deliver`] posts it to a bot's webhook.
//!
//! Microsoft's Bot Framework SDK for Python (`botframework-connector`: its token validation, and `ConnectorClient`
//! with msal's client credentials) and the Python nanobot 0.3.5's Teams channel run against it (see the testkit's
//! `fake_sdks` tests). Every other path is 404, every other method on a known path 405, bodies over 1 MiB 413.
//! The RSA keys it signs with are test-only files in `src/keys/` (generated once; they protect nothing).
//!
//! # Example
//!
//! A channel under test is configured with [`FakeTeams::openid_config_url`] as its OpenID metadata URL,
//! [`FakeTeams::token_url`] as its token endpoint, `127.0.0.1` as a trusted service URL host, and
//! [`FakeTeams::ca_pem`] as an extra root; then:
//!
//! ```no_run
//! use nanobot_testkit::fake_msteams::{APP_ID, APP_PASSWORD, FakeTeams, TeamsUser};
//! # async fn demo(webhook: &str) -> anyhow::Result<()> {
//! let fake = FakeTeams::start(APP_ID, APP_PASSWORD).await?;
//! let alice = TeamsUser::new("Alice");
//! let activity = fake.message(&alice, &alice.personal_conversation_id(), "personal", "hi");
//! assert_eq!(fake.deliver(webhook, &activity, Some(&fake.valid_token())).await?, 200);
//! let sent = fake.wait_sent(1, std::time::Duration::from_secs(10)).await?;
//! assert_eq!(sent[0].conversation_id, alice.personal_conversation_id());
//! assert_eq!(sent[0].body["replyToId"], activity["id"]);
//! # Ok(()) }
//! ```

use nanobot_util::lock;
use std::collections::HashSet;
use std::convert::Infallible;
use std::io::{Read as _, Write as _};
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, Result, anyhow};
use axum::body::Body;
use axum::http::{HeaderMap, Request, Response, StatusCode, header};
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use hyper_util::rt::TokioIo;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// The bot's Microsoft App ID (a made-up GUID).
pub const APP_ID: &str = "5f2c8a4e-93b1-4d6a-8c07-2e1f4b9d6a35";
/// The bot's client secret (the shape of an Azure AD secret; test-only).
pub const APP_PASSWORD: &str = "Xq8~fAkE.teams-test_s3cret-0123456789abc";
/// The tenant the users and the single-tenant bot live in (a made-up GUID).
pub const TENANT_ID: &str = "9b1d4c2a-6e3f-4a8b-b5c7-1d2e3f4a5b6c";
/// The bot's id in activities (`recipient.id`): `28:` and [`APP_ID`].
pub const BOT_ID: &str = "28:5f2c8a4e-93b1-4d6a-8c07-2e1f4b9d6a35";
/// The bot's display name in activities (`recipient.name`).
pub const BOT_NAME: &str = "nanobot";
/// The issuer of the Bot Framework's tokens to bots (`iss`), also the OpenID config's `issuer`.
pub const BOT_FRAMEWORK_ISSUER: &str = "https://api.botframework.com";
/// The scope a bot asks Azure AD for to call the Bot Connector.
pub const BOT_FRAMEWORK_SCOPE: &str = "https://api.botframework.com/.default";
/// The path of [`FakeTeams::service_url`] (Teams' service URLs have one, like
/// `https://smba.trafficmanager.net/amer/`).
pub const SERVICE_PATH: &str = "/amer/";
/// How long issued access tokens say they live (`expires_in`), as Azure AD answers.
pub const TOKEN_LIFETIME_SECS: i64 = 3599;

/// The botframework.com tenant's id (the `tid` of tokens asked for from the `botframework.com` tenant).
const BOTFRAMEWORK_TENANT_GUID: &str = "d6d49420-f39b-4df7-a1dc-d59a935871db";
/// The largest request body read.
const MAX_BODY: usize = 1 << 20;
/// The plaintext pipe between the TLS pump and the HTTP server of one connection.
const PIPE: usize = 2 << 20;

/// The signing key (test-only, see the file's header): published in the JWKS.
const SIGNING_KEY_PEM: &str = include_str!("keys/bot_framework_signing.pem");
/// The forger's key (test-only): never published; "forged" tokens are signed with it.
const FORGER_KEY_PEM: &str = include_str!("keys/forger.pem");

/// A Teams user (`from` of activities). [`TeamsUser::new`] derives Teams-looking ids from the name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TeamsUser {
    /// The Teams user id (`29:1…`), `from.id`.
    pub id: String,
    /// The display name, `from.name`.
    pub name: String,
    /// The user's Entra ID object id (a GUID), `from.aadObjectId`; what allow-lists usually name.
    pub aad_object_id: String,
}

impl TeamsUser {
    /// A user named `name`, its ids derived from the name (the same name gives the same ids).
    pub fn new(name: &str) -> Self {
        let id = format!(
            "29:1{}",
            URL_SAFE_NO_PAD.encode(Sha256::digest(format!("user:{name}")))
        );
        Self {
            id,
            name: name.to_string(),
            aad_object_id: guid(&format!("aad:{name}")),
        }
    }

    /// The id of the user's personal (1:1) conversation with the bot: `a:1…`, like Teams'.
    pub fn personal_conversation_id(&self) -> String {
        let digest = Sha256::digest(format!("personal:{}", self.aad_object_id));
        format!(
            "a:1{}",
            URL_SAFE_NO_PAD.encode([digest.as_slice(), digest.as_slice()].concat())
        )
    }
}

/// A GUID-looking string (version 4 bits) derived from `seed`.
fn guid(seed: &str) -> String {
    let d = Sha256::digest(seed);
    let hex: String = d.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-4{}-a{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[13..16],
        &hex[17..20],
        &hex[20..32]
    )
}

/// What a Bot Framework token to a bot says; [`InboundToken::for_app`] is a valid one, change fields to break
/// it. Signed by [`FakeTeams::token`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboundToken {
    /// `aud`: the bot's app id.
    pub audience: String,
    /// `iss`: [`BOT_FRAMEWORK_ISSUER`].
    pub issuer: String,
    /// `serviceurl`: the activity's `serviceUrl`; `None` leaves the claim out.
    pub service_url: Option<String>,
    /// Seconds from now to `exp` (negative: expired that long ago). `nbf` is 5 minutes before the earlier of now
    /// and `exp`.
    pub lifetime_secs: i64,
    /// Signed with a key the JWKS does not have (under the published key's `kid`): a forgery.
    pub forged: bool,
    /// A `kid` (and `x5t`) other than the published key's.
    pub kid: Option<String>,
}

impl InboundToken {
    /// A valid token for `app_id` whose `serviceurl` is `service_url`, living an hour.
    pub fn for_app(app_id: &str, service_url: &str) -> Self {
        Self {
            audience: app_id.to_string(),
            issuer: BOT_FRAMEWORK_ISSUER.to_string(),
            service_url: Some(service_url.to_string()),
            lifetime_secs: 3600,
            forged: false,
            kid: None,
        }
    }
}

/// An activity a bot sent to the connector (accepted: it carried a token this fake issued).
#[derive(Debug, Clone, PartialEq)]
pub struct SentActivity {
    /// `POST`, `PUT` or `DELETE`.
    pub method: String,
    /// The conversation id from the path, percent-decoded.
    pub conversation_id: String,
    /// The activity id from the path (`POST …/activities/{id}` is a reply, `PUT` an update), percent-decoded.
    pub reply_to: Option<String>,
    /// The id the fake answered (the new activity's, or the updated one's).
    pub id: String,
    /// The access token the request carried.
    pub token: String,
    /// The JSON body (`Null` for `DELETE`).
    pub body: Value,
}

/// A client-credentials request to the token endpoint (the secret is never kept).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRequest {
    /// The tenant path segment (`botframework.com`, a tenant id, …).
    pub tenant: String,
    /// `client_id` (from the form or HTTP Basic).
    pub client_id: String,
    /// `grant_type`.
    pub grant_type: String,
    /// `scope`.
    pub scope: String,
    /// Whether a token was issued.
    pub granted: bool,
}

/// One HTTP request the fake answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TeamsCall {
    /// HTTP method.
    pub method: String,
    /// The raw path (still percent-encoded).
    pub path: String,
    /// The status answered.
    pub status: u16,
}

/// An RSA key: its PKCS#1 DER for signing and its public numbers for the JWKS.
struct RsaKey {
    signing: EncodingKey,
    n: Vec<u8>,
    e: Vec<u8>,
}

struct State {
    app_id: String,
    app_password: String,
    base: String,
    key: RsaKey,
    forger: RsaKey,
    kid: String,
    /// Access tokens good for the connector.
    valid_tokens: Mutex<HashSet<String>>,
    tokens_issued: AtomicUsize,
    token_requests: Mutex<Vec<TokenRequest>>,
    refused: AtomicUsize,
    sent: Mutex<Vec<SentActivity>>,
    calls: Mutex<Vec<TeamsCall>>,
    fail: Mutex<Option<u16>>,
    clock: AtomicI64,
    changed: Notify,
}

impl State {
    /// Milliseconds since the epoch, strictly increasing across calls (activity ids are made of them).
    fn now_ms(&self) -> i64 {
        let wall = wall_ms();
        let mut last = self.clock.load(Ordering::SeqCst);
        loop {
            let next = wall.max(last + 1);
            match self
                .clock
                .compare_exchange(last, next, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => return next,
                Err(seen) => last = seen,
            }
        }
    }

    fn sign(&self, key: &RsaKey, kid: &str, claims: &Value) -> String {
        let mut head = Header::new(Algorithm::RS256);
        head.typ = Some("JWT".into());
        head.kid = Some(kid.into());
        head.x5t = Some(kid.into());
        jsonwebtoken::encode(&head, claims, &key.signing)
            .unwrap_or_else(|e| panic!("fake teams: cannot sign a token with the embedded test key: {e}"))
    }

    fn jwk(&self, endorsements: bool) -> Value {
        let mut key = json!({
            "kty": "RSA", "use": "sig", "kid": self.kid, "x5t": self.kid,
            "n": URL_SAFE_NO_PAD.encode(&self.key.n), "e": URL_SAFE_NO_PAD.encode(&self.key.e),
        });
        if endorsements {
            key["endorsements"] = json!(["msteams"]);
        }
        key
    }
}

fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(0))
}

struct Inner {
    state: Arc<State>,
    ca_pem: String,
    ca_file: tempfile::NamedTempFile,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The fake services; clones share them. Dropping the last clone stops accepting connections and removes the
/// CA file.
#[derive(Clone)]
pub struct FakeTeams {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for FakeTeams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.state();
        f.debug_struct("FakeTeams")
            .field("base", &s.base)
            .field("app_id", &s.app_id)
            .field("tokens_issued", &s.tokens_issued.load(Ordering::SeqCst))
            .field("refused", &s.refused.load(Ordering::SeqCst))
            .finish_non_exhaustive()
    }
}

impl FakeTeams {
    /// Starts the services on a free port of 127.0.0.1 for a bot whose Microsoft App ID is `app_id` and client
    /// secret `app_password` (usually [`APP_ID`] and [`APP_PASSWORD`]).
    pub async fn start(app_id: &str, app_password: &str) -> Result<Self> {
        let key = load_key(SIGNING_KEY_PEM).context("the embedded signing key")?;
        let forger = load_key(FORGER_KEY_PEM).context("the embedded forger key")?;
        let kid = URL_SAFE_NO_PAD.encode(&Sha256::digest(&key.n)[..20]);
        let (tls, ca_pem) = tls_config()?;
        let mut ca_file = tempfile::Builder::new()
            .prefix("fake-teams-ca-")
            .suffix(".pem")
            .tempfile()?;
        ca_file.write_all(ca_pem.as_bytes())?;
        ca_file.flush()?;
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let state = Arc::new(State {
            app_id: app_id.to_string(),
            app_password: app_password.to_string(),
            base: format!("https://127.0.0.1:{port}"),
            key,
            forger,
            kid,
            valid_tokens: Mutex::default(),
            tokens_issued: AtomicUsize::new(0),
            token_requests: Mutex::default(),
            refused: AtomicUsize::new(0),
            sent: Mutex::default(),
            calls: Mutex::default(),
            fail: Mutex::default(),
            clock: AtomicI64::new(0),
            changed: Notify::new(),
        });
        // Fail now, not in the first `token()`, if the embedded key cannot sign.
        jsonwebtoken::encode(&Header::new(Algorithm::RS256), &json!({}), &state.key.signing)
            .context("signing with the embedded test key")?;
        let s = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let (s, tls) = (s.clone(), tls.clone());
                tokio::spawn(serve_tls(tcp, tls, s));
            }
        });
        Ok(Self {
            inner: Arc::new(Inner {
                state,
                ca_pem,
                ca_file,
                task,
            }),
        })
    }

    fn state(&self) -> &State {
        &self.inner.state
    }

    /// The app id it was started for.
    pub fn app_id(&self) -> &str {
        &self.state().app_id
    }

    /// The bot's id in activities: `28:<app id>`.
    pub fn bot_id(&self) -> String {
        format!("28:{}", self.state().app_id)
    }

    /// `https://127.0.0.1:<port>`: plays `https://login.microsoftonline.com` (the token URL is
    /// `<base>/<tenant>/oauth2/v2.0/token`) and `https://login.botframework.com`.
    pub fn base_url(&self) -> String {
        self.state().base.clone()
    }

    /// The token endpoint for `tenant` (a tenant id, or `botframework.com` for multi-tenant bots).
    pub fn token_url(&self, tenant: &str) -> String {
        format!("{}/{tenant}/oauth2/v2.0/token", self.state().base)
    }

    /// The Bot Connector's URL put into activities as `serviceUrl`: `https://127.0.0.1:<port>/amer/` (with a path
    /// and a trailing slash, like Teams' `https://smba.trafficmanager.net/amer/`). A bot sends to
    /// `<serviceUrl without the trailing slash>/v3/conversations/…`; `/v3/…` at the root is 404.
    pub fn service_url(&self) -> String {
        format!("{}{SERVICE_PATH}", self.state().base)
    }

    /// The Bot Framework OpenID configuration's URL (plays
    /// `https://login.botframework.com/v1/.well-known/openidconfiguration`).
    pub fn openid_config_url(&self) -> String {
        format!("{}/v1/.well-known/openidconfiguration", self.state().base)
    }

    /// The JWKS URL the OpenID configuration names (`jwks_uri`).
    pub fn jwks_url(&self) -> String {
        format!("{}/v1/.well-known/keys", self.state().base)
    }

    /// The `kid` of the published signing key.
    pub fn kid(&self) -> &str {
        &self.state().kid
    }

    /// A PEM file with the CA the fake's certificate is signed by (for `SSL_CERT_FILE`, `REQUESTS_CA_BUNDLE`);
    /// removed when the fake is dropped.
    pub fn ca_file(&self) -> &std::path::Path {
        self.inner.ca_file.path()
    }

    /// The same CA as PEM text.
    pub fn ca_pem(&self) -> &str {
        &self.inner.ca_pem
    }

    /// A reqwest client trusting the fake's CA (besides the usual roots), no proxy, 30 s timeout. Installs ring
    /// as rustls' provider.
    pub fn client(&self) -> Result<reqwest::Client> {
        crate::install_ring();
        Ok(reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(self.ca_pem().as_bytes())?)
            .no_proxy()
            .timeout(Duration::from_secs(30))
            .build()?)
    }

    /// A signed RS256 JWT as the Bot Framework service sends to bots (`Authorization: Bearer <it>`): header
    /// `{"alg":"RS256","typ":"JWT","kid","x5t"}`, claims `serviceurl` (when given), `nbf`, `exp`, `iss`, `aud`.
    pub fn token(&self, t: &InboundToken) -> String {
        let s = self.state();
        let now = wall_ms() / 1000;
        let exp = now + t.lifetime_secs;
        let mut claims = json!({"nbf": exp.min(now) - 300, "exp": exp, "iss": t.issuer, "aud": t.audience});
        if let Some(url) = &t.service_url {
            claims["serviceurl"] = json!(url);
        }
        let key = if t.forged { &s.forger } else { &s.key };
        s.sign(key, t.kid.as_deref().unwrap_or(&s.kid), &claims)
    }

    /// A valid token for the fake's app and [`FakeTeams::service_url`].
    pub fn valid_token(&self) -> String {
        self.token(&InboundToken::for_app(self.app_id(), &self.service_url()))
    }

    /// A Teams `message` activity from `from` in `conversation_id` of `conversation_type` (`personal`,
    /// `groupChat` or `channel`), as Teams posts it: a fresh `id` (epoch milliseconds, like Teams'),
    /// `timestamp`/`localTimestamp`, `serviceUrl` ([`FakeTeams::service_url`]), `channelId` `msteams`, `from {id,
    /// name, aadObjectId}`, `recipient {id: 28:<app id>, name}`, `conversation {conversationType, tenantId, id}`
    /// (`isGroup` for group chats and channels), `channelData {tenant: {id}}` (and `teamsChannelId`,
    /// `teamsTeamId`, `channel`, `team` for channels), `text`, `textFormat: plain`, a `clientInfo` entity,
    /// `locale`, empty `attachments`. Change the JSON for anything else (`replyToId`, mentions, …).
    pub fn message(
        &self,
        from: &TeamsUser,
        conversation_id: &str,
        conversation_type: &str,
        text: &str,
    ) -> Value {
        let ms = self.state().now_ms();
        let mut conversation =
            json!({"conversationType": conversation_type, "tenantId": TENANT_ID, "id": conversation_id});
        let mut channel_data = json!({"tenant": {"id": TENANT_ID}});
        if conversation_type != "personal" {
            conversation["isGroup"] = json!(true);
        }
        if conversation_type == "channel" {
            let channel = conversation_id.split(';').next().unwrap_or(conversation_id);
            channel_data["teamsChannelId"] = json!(channel);
            channel_data["teamsTeamId"] = json!(channel);
            channel_data["channel"] = json!({"id": channel});
            channel_data["team"] = json!({"id": channel});
        }
        json!({
            "text": text,
            "textFormat": "plain",
            "type": "message",
            "timestamp": iso8601(ms, "Z"),
            "localTimestamp": iso8601(ms, "+00:00"),
            "id": ms.to_string(),
            "channelId": "msteams",
            "serviceUrl": self.service_url(),
            "from": {"id": from.id, "name": from.name, "aadObjectId": from.aad_object_id},
            "conversation": conversation,
            "recipient": {"id": self.bot_id(), "name": BOT_NAME},
            "entities": [{"locale": "en-US", "country": "US", "platform": "Web", "timezone": "Etc/UTC",
                          "type": "clientInfo"}],
            "channelData": channel_data,
            "locale": "en-US",
            "localTimezone": "Etc/UTC",
            "attachments": [],
        })
    }

    /// POSTs `activity` to a bot's webhook as the Bot Framework service does (`Content-Type: application/json;
    /// charset=utf-8`, its `User-Agent`, `Authorization: Bearer <bearer>` when given; no proxy, 30 s at most);
    /// returns the HTTP status.
    pub async fn deliver(&self, webhook_url: &str, activity: &Value, bearer: Option<&str>) -> Result<u16> {
        let mut req = self
            .client()?
            .post(webhook_url)
            .header(header::CONTENT_TYPE, "application/json; charset=utf-8")
            .header(
                header::USER_AGENT,
                "Microsoft-SkypeBotApi (Microsoft-BotFramework/3.0)",
            )
            .body(activity.to_string());
        if let Some(token) = bearer {
            req = req.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let resp = req
            .send()
            .await
            .with_context(|| format!("delivering to {webhook_url}"))?;
        Ok(resp.status().as_u16())
    }

    /// Every activity bots sent (accepted by the connector), in order.
    pub fn sent(&self) -> Vec<SentActivity> {
        lock(&self.state().sent).clone()
    }

    /// Waits (at most `within`, an error then) until at least `n` activities were sent; returns all so far.
    pub async fn wait_sent(&self, n: usize, within: Duration) -> Result<Vec<SentActivity>> {
        let s = self.state();
        crate::wait::until(
            &s.changed,
            within,
            "fake teams",
            &format!("{n} sent activities"),
            || {
                let sent = lock(&s.sent);
                (sent.len() >= n).then(|| sent.clone())
            },
        )
        .await
    }

    /// How many access tokens the token endpoint issued.
    pub fn tokens_issued(&self) -> usize {
        self.state().tokens_issued.load(Ordering::SeqCst)
    }

    /// Every client-credentials request so far, in order (without the secrets).
    pub fn token_requests(&self) -> Vec<TokenRequest> {
        lock(&self.state().token_requests).clone()
    }

    /// How many requests were refused for their credentials: connector calls without a valid token, token
    /// requests with a wrong or missing client id or secret.
    pub fn refused_auth(&self) -> usize {
        self.state().refused.load(Ordering::SeqCst)
    }

    /// Every request so far, in order.
    pub fn calls(&self) -> Vec<TeamsCall> {
        lock(&self.state().calls).clone()
    }

    /// Makes every connector call answer `status` (e.g. 503, or 429 with `Retry-After: 1`) with a Bot Connector
    /// error body, recording nothing, until called with `None`.
    pub fn fail_connector(&self, status: Option<u16>) {
        *lock(&self.state().fail) = status;
    }

    /// Forgets every issued access token: the connector refuses them (401) from now on, as it does expired ones;
    /// a bot must get a new one.
    pub fn expire_tokens(&self) {
        lock(&self.state().valid_tokens).clear();
    }
}

// ---- keys --------------------------------------------------------------------------------------------------

/// Reads an embedded `RSA PRIVATE KEY` PEM (text before the armour is a comment).
fn load_key(pem: &str) -> Result<RsaKey> {
    let b64: String = pem
        .lines()
        .skip_while(|l| !l.starts_with("-----BEGIN RSA PRIVATE KEY-----"))
        .skip(1)
        .take_while(|l| !l.starts_with("-----END"))
        .collect();
    let der = STANDARD.decode(b64.trim())?;
    let (n, e) = rsa_public_numbers(&der).ok_or_else(|| anyhow!("not a PKCS#1 RSA private key"))?;
    Ok(RsaKey {
        signing: EncodingKey::from_rsa_der(&der),
        n,
        e,
    })
}

/// One DER item: (tag, contents, the rest).
fn der_item(buf: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = buf.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let k = usize::from(first & 0x7f);
        if k == 0 || k > 4 || rest.len() < k {
            return None;
        }
        let len = rest[..k]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, &rest[k..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// The modulus and public exponent of a PKCS#1 `RSAPrivateKey` (big-endian, no leading zeros).
fn rsa_public_numbers(der: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let (0x30, seq, _) = der_item(der)? else {
        return None;
    };
    let (0x02, _version, rest) = der_item(seq)? else {
        return None;
    };
    let (0x02, n, rest) = der_item(rest)? else {
        return None;
    };
    let (0x02, e, _) = der_item(rest)? else {
        return None;
    };
    let unsigned = |v: &[u8]| {
        let start = v.iter().position(|b| *b != 0).unwrap_or(v.len());
        v[start..].to_vec()
    };
    Some((unsigned(n), unsigned(e)))
}

// ---- TLS -----------------------------------------------------------------------------------------------

/// A server TLS set-up (HTTP/1.1) for `127.0.0.1` and `localhost`, signed by a fresh CA; and the CA's PEM.
fn tls_config() -> Result<(Arc<rustls::ServerConfig>, String)> {
    use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
    let ca_key = rcgen::KeyPair::generate()?;
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "nanobot fake Teams test CA");
    let ca = ca_params.self_signed(&ca_key)?;
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = rcgen::KeyPair::generate()?;
    let params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])?;
    let cert = params.signed_by(&key, &issuer)?;
    let mut config =
        rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            )?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok((Arc::new(config), ca.pem()))
}

/// Serves one connection: rustls decrypts into an in-memory pipe that hyper serves (no async TLS crate needed).
async fn serve_tls(tcp: TcpStream, config: Arc<rustls::ServerConfig>, state: Arc<State>) {
    let Ok(mut tls) = rustls::ServerConnection::new(config) else {
        return;
    };
    let (mine, theirs) = tokio::io::duplex(PIPE);
    tokio::spawn(async move {
        let service = hyper::service::service_fn(move |req| {
            let s = state.clone();
            async move { Ok::<_, Infallible>(handle(&s, req).await) }
        });
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(theirs), service)
            .await;
    });
    let _ = pump(tcp, &mut tls, mine).await;
}

/// Moves bytes: TLS records from the socket → plaintext into the pipe; plaintext from the pipe → TLS records
/// to the socket. Ends when both sides have ended.
async fn pump(
    tcp: TcpStream,
    tls: &mut rustls::ServerConnection,
    plain: tokio::io::DuplexStream,
) -> std::io::Result<()> {
    let (mut net_r, mut net_w) = tcp.into_split();
    let (mut app_r, mut app_w) = tokio::io::split(plain);
    let mut net_buf = vec![0u8; 16 << 10];
    let mut app_buf = vec![0u8; 16 << 10];
    let mut plain_buf = vec![0u8; 16 << 10];
    let (mut from_net, mut from_app) = (true, true);
    loop {
        flush_tls(tls, &mut net_w).await?;
        if !from_net && !from_app {
            break;
        }
        tokio::select! {
            read = net_r.read(&mut net_buf), if from_net => {
                let n = read?;
                if n == 0 {
                    from_net = false;
                    let _ = app_w.shutdown().await;
                    continue;
                }
                let mut rest = &net_buf[..n];
                while !rest.is_empty() {
                    tls.read_tls(&mut rest)?;
                    let status = match tls.process_new_packets() {
                        Ok(status) => status,
                        Err(e) => {
                            let _ = flush_tls(tls, &mut net_w).await;
                            return Err(std::io::Error::other(e));
                        }
                    };
                    loop {
                        match tls.reader().read(&mut plain_buf) {
                            Ok(0) => break,
                            Ok(m) => app_w.write_all(&plain_buf[..m]).await?,
                            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                            Err(e) => return Err(e),
                        }
                    }
                    if status.peer_has_closed() && from_net {
                        from_net = false;
                        let _ = app_w.shutdown().await;
                    }
                }
            }
            read = app_r.read(&mut app_buf), if from_app => {
                match read? {
                    0 => {
                        from_app = false;
                        tls.send_close_notify();
                    }
                    m => tls.writer().write_all(&app_buf[..m])?,
                }
            }
        }
    }
    net_w.shutdown().await
}

async fn flush_tls(
    tls: &mut rustls::ServerConnection,
    net: &mut tokio::net::tcp::OwnedWriteHalf,
) -> std::io::Result<()> {
    let mut out = Vec::new();
    while tls.wants_write() {
        tls.write_tls(&mut out)?;
    }
    if !out.is_empty() {
        net.write_all(&out).await?;
    }
    Ok(())
}

// ---- HTTP ----------------------------------------------------------------------------------------------

fn reply(status: StatusCode, value: &Value) -> Response<Body> {
    let mut resp = Response::new(Body::from(value.to_string()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json; charset=utf-8"),
    );
    resp
}

/// The Bot Connector's error shape.
fn connector_error(status: StatusCode, code: &str, message: &str) -> Response<Body> {
    reply(status, &json!({"error": {"code": code, "message": message}}))
}

async fn handle(s: &State, req: Request<hyper::body::Incoming>) -> Response<Body> {
    let method = req.method().as_str().to_string();
    let path = req.uri().path().to_string();
    let headers = req.headers().clone();
    let resp = match axum::body::to_bytes(Body::new(req.into_body()), MAX_BODY).await {
        Ok(body) => route(s, &method, &path, &headers, &body),
        Err(_) => reply(
            StatusCode::PAYLOAD_TOO_LARGE,
            &json!({"error": "request body over 1 MiB, or unreadable"}),
        ),
    };
    lock(&s.calls).push(TeamsCall {
        method,
        path,
        status: resp.status().as_u16(),
    });
    s.changed.notify_waiters();
    resp
}

fn route(s: &State, method: &str, path: &str, headers: &HeaderMap, body: &[u8]) -> Response<Body> {
    let Some(segs) = path
        .strip_prefix('/')
        .unwrap_or(path)
        .split('/')
        .map(|seg| percent_decode(seg, false))
        .collect::<Option<Vec<String>>>()
    else {
        return reply(
            StatusCode::BAD_REQUEST,
            &json!({"error": format!("bad percent-encoding in the path {path:?}")}),
        );
    };
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    let service = SERVICE_PATH.trim_matches('/');
    let (allowed, resp) = match segs.as_slice() {
        ["v1", ".well-known", "openidconfiguration"] => ("GET", get(method, || openid_config(s))),
        ["v1", ".well-known", "keys"] => ("GET", get(method, || json!({"keys": [s.jwk(true)]}))),
        [tenant, "v2.0", ".well-known", "openid-configuration"] => {
            ("GET", get(method, || tenant_config(s, tenant)))
        }
        [_, "discovery", "v2.0", "keys"] => ("GET", get(method, || json!({"keys": [s.jwk(false)]}))),
        [tenant, "oauth2", "v2.0", "token"] => (
            "POST",
            (method == "POST").then(|| token_endpoint(s, tenant, headers, body)),
        ),
        [svc, "v3", "conversations", conversation, "activities"] if *svc == service => (
            "POST",
            (method == "POST").then(|| connector(s, method, conversation, None, headers, body)),
        ),
        [svc, "v3", "conversations", conversation, "activities", activity] if *svc == service => (
            "POST, PUT, DELETE",
            matches!(method, "POST" | "PUT" | "DELETE")
                .then(|| connector(s, method, conversation, Some(activity), headers, body)),
        ),
        _ => {
            return reply(
                StatusCode::NOT_FOUND,
                &json!({"error": format!("no such endpoint: {path}")}),
            );
        }
    };
    resp.unwrap_or_else(|| {
        let mut resp = reply(
            StatusCode::METHOD_NOT_ALLOWED,
            &json!({"error": format!("{method} is not allowed on {path}")}),
        );
        if let Ok(v) = header::HeaderValue::from_str(allowed) {
            resp.headers_mut().insert(header::ALLOW, v);
        }
        resp
    })
}

fn get(method: &str, body: impl FnOnce() -> Value) -> Option<Response<Body>> {
    (method == "GET").then(|| reply(StatusCode::OK, &body()))
}

fn openid_config(s: &State) -> Value {
    json!({
        "issuer": BOT_FRAMEWORK_ISSUER,
        "authorization_endpoint": "https://invalid.botframework.com",
        "jwks_uri": format!("{}/v1/.well-known/keys", s.base),
        "id_token_signing_alg_values_supported": ["RS256"],
        "token_endpoint_auth_methods_supported": ["private_key_jwt"],
    })
}

/// Azure AD's v2.0 OpenID configuration of a tenant (what msal's tenant discovery reads).
fn tenant_config(s: &State, tenant: &str) -> Value {
    let at = format!("{}/{tenant}", s.base);
    json!({
        "token_endpoint": format!("{at}/oauth2/v2.0/token"),
        "token_endpoint_auth_methods_supported": ["client_secret_post", "private_key_jwt", "client_secret_basic"],
        "jwks_uri": format!("{at}/discovery/v2.0/keys"),
        "response_modes_supported": ["query", "fragment", "form_post"],
        "subject_types_supported": ["pairwise"],
        "id_token_signing_alg_values_supported": ["RS256"],
        "response_types_supported": ["code", "id_token", "code id_token", "id_token token"],
        "scopes_supported": ["openid", "profile", "email", "offline_access"],
        "issuer": format!("{at}/v2.0"),
        "request_uri_parameter_supported": false,
        "authorization_endpoint": format!("{at}/oauth2/v2.0/authorize"),
        "device_authorization_endpoint": format!("{at}/oauth2/v2.0/devicecode"),
        "end_session_endpoint": format!("{at}/oauth2/v2.0/logout"),
        "tenant_region_scope": "NA",
        "cloud_instance_name": "microsoftonline.com",
        "cloud_graph_host_name": "graph.windows.net",
        "msgraph_host": "graph.microsoft.com",
    })
}

/// Azure AD's error answer.
fn aad_error(status: StatusCode, error: &str, code: u32, message: &str) -> Response<Body> {
    let trace = guid(&format!("trace:{}", wall_ms()));
    let correlation = guid(&format!("correlation:{}", wall_ms()));
    let stamp = iso8601(wall_ms(), "Z");
    reply(
        status,
        &json!({
            "error": error,
            "error_description": format!("AADSTS{code}: {message} Trace ID: {trace} Correlation ID: {correlation} Timestamp: {stamp}"),
            "error_codes": [code],
            "timestamp": stamp,
            "trace_id": trace,
            "correlation_id": correlation,
            "error_uri": format!("https://login.microsoftonline.com/error?code={code}"),
        }),
    )
}

fn token_endpoint(s: &State, tenant: &str, headers: &HeaderMap, body: &[u8]) -> Response<Body> {
    let form = std::str::from_utf8(body).ok().and_then(parse_form);
    let Some(mut form) = form else {
        return aad_error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            900144,
            "The request body must contain the following parameter: 'grant_type'.",
        );
    };
    // client_secret_basic: `Authorization: Basic base64(urlencoded id ":" urlencoded secret)`.
    if let Some((id, secret)) = basic_credentials(headers) {
        form.entry("client_id".into()).or_insert(id);
        form.entry("client_secret".into()).or_insert(secret);
    }
    let field = |name: &str| form.get(name).cloned().unwrap_or_default();
    let mut request = TokenRequest {
        tenant: tenant.to_string(),
        client_id: field("client_id"),
        grant_type: field("grant_type"),
        scope: field("scope"),
        granted: false,
    };
    let refused = |s: &State| {
        s.refused.fetch_add(1, Ordering::SeqCst);
    };
    let resp = if let Some(missing) = ["grant_type", "client_id", "scope"]
        .into_iter()
        .find(|p| form.get(*p).is_none_or(String::is_empty))
    {
        aad_error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            900144,
            &format!("The request body must contain the following parameter: '{missing}'."),
        )
    } else if request.grant_type != "client_credentials" {
        aad_error(
            StatusCode::BAD_REQUEST,
            "unsupported_grant_type",
            70003,
            "The app requested an unsupported grant type.",
        )
    } else if request.client_id != s.app_id {
        refused(s);
        aad_error(
            StatusCode::BAD_REQUEST,
            "unauthorized_client",
            700016,
            &format!(
                "Application with identifier '{}' was not found in the directory '{tenant}'. This can happen if the application has not been installed by the administrator of the tenant or consented to by any user in the tenant. You may have sent your authentication request to the wrong tenant.",
                request.client_id
            ),
        )
    } else if form.get("client_secret").is_none_or(String::is_empty) {
        refused(s);
        aad_error(
            StatusCode::UNAUTHORIZED,
            "invalid_client",
            7000216,
            "'client_assertion', 'client_secret' or 'request' is required for the 'client_credentials' grant type.",
        )
    } else if field("client_secret") != s.app_password {
        refused(s);
        aad_error(
            StatusCode::UNAUTHORIZED,
            "invalid_client",
            7000215,
            &format!(
                "Invalid client secret provided. Ensure the secret being sent in the request is the client secret value, not the client secret ID, for a secret added to app '{}'.",
                request.client_id
            ),
        )
    } else if !request.scope.ends_with("/.default") {
        aad_error(
            StatusCode::BAD_REQUEST,
            "invalid_scope",
            1002012,
            &format!(
                "The provided value for scope {} is not valid. Client credential flows must have a scope value with /.default suffixed to the resource identifier (application ID URI).",
                request.scope
            ),
        )
    } else {
        request.granted = true;
        let token = issue_token(s, tenant, &request);
        reply(
            StatusCode::OK,
            &json!({"token_type": "Bearer", "expires_in": TOKEN_LIFETIME_SECS,
                    "ext_expires_in": TOKEN_LIFETIME_SECS, "access_token": token}),
        )
    };
    lock(&s.token_requests).push(request);
    resp
}

/// An access token (a JWT like Azure AD's v1 tokens for `https://api.botframework.com`); only those for
/// [`BOT_FRAMEWORK_SCOPE`] open the connector.
fn issue_token(s: &State, tenant: &str, request: &TokenRequest) -> String {
    let n = s.tokens_issued.fetch_add(1, Ordering::SeqCst) + 1;
    let now = wall_ms() / 1000;
    let tid = if tenant.eq_ignore_ascii_case("botframework.com") {
        BOTFRAMEWORK_TENANT_GUID
    } else {
        tenant
    };
    let sts = format!("https://sts.windows.net/{tid}/");
    let audience = request.scope.trim_end_matches("/.default");
    let claims = json!({
        "aud": audience, "iss": sts, "iat": now, "nbf": now, "exp": now + TOKEN_LIFETIME_SECS,
        "aio": URL_SAFE_NO_PAD.encode(Sha256::digest(format!("aio:{n}:{}", wall_ms()))),
        "appid": request.client_id, "appidacr": "1", "idp": sts, "tid": tid,
        "uti": URL_SAFE_NO_PAD.encode(&Sha256::digest(format!("uti:{n}:{}", wall_ms()))[..16]), "ver": "1.0",
    });
    let token = s.sign(&s.key, &s.kid, &claims);
    if request.scope == BOT_FRAMEWORK_SCOPE {
        lock(&s.valid_tokens).insert(token.clone());
    }
    token
}

fn connector(
    s: &State,
    method: &str,
    conversation: &str,
    activity: Option<&str>,
    headers: &HeaderMap,
    body: &[u8],
) -> Response<Body> {
    if let Some(code) = *lock(&s.fail) {
        let status = StatusCode::from_u16(code).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
        let mut resp = connector_error(
            status,
            "ServiceError",
            &format!("The service is unavailable (fake outage, HTTP {code})."),
        );
        if status == StatusCode::TOO_MANY_REQUESTS {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
        }
        return resp;
    }
    let token = bearer(headers).filter(|t| lock(&s.valid_tokens).contains(*t));
    let Some(token) = token else {
        s.refused.fetch_add(1, Ordering::SeqCst);
        return reply(
            StatusCode::UNAUTHORIZED,
            &json!({"message": "Authorization has been denied for this request."}),
        );
    };
    if conversation.is_empty() || activity.is_some_and(str::is_empty) {
        return connector_error(
            StatusCode::BAD_REQUEST,
            "BadArgument",
            "The conversation or activity id is empty.",
        );
    }
    let parsed = if method == "DELETE" {
        Value::Null
    } else {
        match serde_json::from_slice::<Value>(body) {
            Ok(v) if v.is_object() && v["type"].is_string() => v,
            Ok(v) if v.is_object() => {
                return connector_error(
                    StatusCode::BAD_REQUEST,
                    "BadArgument",
                    "Activity type is required.",
                );
            }
            Ok(_) => {
                return connector_error(
                    StatusCode::BAD_REQUEST,
                    "BadArgument",
                    "The body must be a JSON object (an Activity).",
                );
            }
            Err(e) => {
                return connector_error(
                    StatusCode::BAD_REQUEST,
                    "BadArgument",
                    &format!("The body is not valid JSON: {e}"),
                );
            }
        }
    };
    let (status, id) = match (method, activity) {
        ("POST", _) => (StatusCode::CREATED, s.now_ms().to_string()),
        (_, Some(activity)) => (StatusCode::OK, activity.to_string()),
        // POST is the only method on `…/activities`: the router sends nothing else here.
        _ => {
            return connector_error(
                StatusCode::METHOD_NOT_ALLOWED,
                "BadArgument",
                "Method not allowed.",
            );
        }
    };
    lock(&s.sent).push(SentActivity {
        method: method.to_string(),
        conversation_id: conversation.to_string(),
        reply_to: activity.map(str::to_string),
        id: id.clone(),
        token: token.to_string(),
        body: parsed,
    });
    if method == "DELETE" {
        let mut resp = Response::new(Body::empty());
        *resp.status_mut() = StatusCode::OK;
        return resp;
    }
    reply(status, &json!({"id": id}))
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then_some(token.trim())
}

fn basic_credentials(headers: &HeaderMap) -> Option<(String, String)> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, encoded) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = String::from_utf8(STANDARD.decode(encoded.trim()).ok()?).ok()?;
    let (id, secret) = decoded.split_once(':')?;
    Some((percent_decode(id, true)?, percent_decode(secret, true)?))
}

/// `application/x-www-form-urlencoded` fields (`None` when badly encoded).
fn parse_form(body: &str) -> Option<std::collections::HashMap<String, String>> {
    body.split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            Some((percent_decode(k, true)?, percent_decode(v, true)?))
        })
        .collect()
}

/// Percent-decodes `s` (and `+` as a space in forms); `None` for a bad escape or bytes that are not UTF-8.
fn percent_decode(s: &str, plus_as_space: bool) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = bytes.get(i + 1..i + 3)?;
                if !hex.iter().all(u8::is_ascii_hexdigit) {
                    return None;
                }
                out.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?);
                i += 3;
            }
            b'+' if plus_as_space => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// `ms` since the epoch as `2024-05-01T12:00:00.1230000` and `zone` (7 fraction digits, like Teams').
fn iso8601(ms: i64, zone: &str) -> String {
    let secs = ms.div_euclid(1000);
    let frac = ms.rem_euclid(1000) * 10_000;
    let (days, day_secs) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{frac:07}{zone}",
        day_secs / 3600,
        day_secs % 3600 / 60,
        day_secs % 60
    )
}
