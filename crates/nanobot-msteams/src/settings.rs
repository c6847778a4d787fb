//! Resolved settings of the Microsoft Teams channel, read from the raw `channels.msteams` block (0.3.5's keys, in
//! camelCase or snake_case).

use std::path::PathBuf;

use nanobot_channels::ChannelError;
use nanobot_config::Secret;
use serde::Deserialize;

use crate::NAME;

/// The service URL hosts 0.3.5 trusts by default: Teams' commercial, GCC, GCC High and DoD connectors, and the
/// Bot Framework's own (`*.` matches subdomains only).
pub const DEFAULT_TRUSTED_SERVICE_URL_HOSTS: &[&str] = &[
    "smba.trafficmanager.net",
    "smba.infra.gcc.teams.microsoft.com",
    "smba.infra.gov.teams.microsoft.us",
    "smba.infra.dod.teams.microsoft.us",
    "*.botframework.com",
];
/// Where the Bot Framework publishes the keys its tokens are signed with.
pub const DEFAULT_OPEN_ID_METADATA: &str =
    "https://login.botframework.com/v1/.well-known/openidconfiguration";
/// Where the bot's own tokens come from (`<loginEndpoint>/<tenant>/oauth2/v2.0/token`).
pub const DEFAULT_LOGIN_ENDPOINT: &str = "https://login.microsoftonline.com";
/// The issuer of the tokens the Bot Framework sends.
pub const BOT_FRAMEWORK_ISSUER: &str = "https://api.botframework.com";
/// The scope of the bot's own tokens.
pub const BOT_FRAMEWORK_SCOPE: &str = "https://api.botframework.com/.default";

/// The `channels.msteams` block as written (unknown keys are ignored, like 0.3.5 does).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct Raw {
    #[serde(alias = "app_id")]
    app_id: String,
    #[serde(alias = "app_password")]
    app_password: Secret,
    #[serde(alias = "tenant_id")]
    tenant_id: String,
    host: String,
    port: u16,
    path: String,
    #[serde(alias = "allow_from")]
    allow_from: Vec<String>,
    #[serde(alias = "reply_in_thread")]
    reply_in_thread: bool,
    #[serde(alias = "mention_only_response")]
    mention_only_response: String,
    #[serde(alias = "validate_inbound_auth")]
    validate_inbound_auth: bool,
    #[serde(alias = "ref_ttl_days")]
    ref_ttl_days: u32,
    #[serde(alias = "prune_web_chat_refs")]
    prune_web_chat_refs: bool,
    #[serde(alias = "prune_non_personal_refs")]
    prune_non_personal_refs: bool,
    #[serde(alias = "ref_touch_interval_s")]
    ref_touch_interval_s: u64,
    #[serde(alias = "trusted_service_url_hosts")]
    trusted_service_url_hosts: Option<Vec<String>>,
    #[serde(alias = "open_id_metadata")]
    open_id_metadata: String,
    #[serde(alias = "login_endpoint")]
    login_endpoint: String,
}

impl Default for Raw {
    fn default() -> Self {
        Self {
            app_id: String::new(),
            app_password: Secret::default(),
            tenant_id: String::new(),
            host: "0.0.0.0".into(),
            port: 3978,
            path: "/api/messages".into(),
            allow_from: Vec::new(),
            reply_in_thread: true,
            mention_only_response: "Hi — what can I help with?".into(),
            validate_inbound_auth: true,
            ref_ttl_days: 30,
            prune_web_chat_refs: true,
            prune_non_personal_refs: true,
            ref_touch_interval_s: 300,
            trusted_service_url_hosts: None,
            open_id_metadata: DEFAULT_OPEN_ID_METADATA.into(),
            login_endpoint: DEFAULT_LOGIN_ENDPOINT.into(),
        }
    }
}

/// Everything the Teams channel needs, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct MsTeamsSettings {
    /// `appId`: the bot's Microsoft App ID (the audience of the tokens it accepts).
    pub app_id: String,
    /// `appPassword`: the app's client secret.
    pub app_password: Secret,
    /// `tenantId`: the app's tenant (single-tenant bots); empty: `botframework.com` (multi-tenant).
    pub tenant_id: String,
    /// `host`: the address the webhook listens on.
    pub host: String,
    /// `port`: the webhook's port.
    pub port: u16,
    /// `path`: the webhook's path (the bot's messaging endpoint).
    pub path: String,
    /// `allowFrom`: who may talk to the bot (AAD object ids or Teams user ids; `"*"`: everyone).
    pub allow_from: Vec<String>,
    /// `replyInThread`: answers reply to the message they answer (`replyToId`).
    pub reply_in_thread: bool,
    /// `mentionOnlyResponse`: what the agent is told when a message was only a mention (empty: ignored).
    pub mention_only_response: String,
    /// `validateInboundAuth`: the Bot Framework's token is checked on every request (off: anyone who knows
    /// the URL can write as anyone).
    pub validate_inbound_auth: bool,
    /// `refTtlDays`: conversation references unused this long are forgotten.
    pub ref_ttl_days: u32,
    /// `pruneWebChatRefs`: references to the Bot Framework's Web Chat are forgotten.
    pub prune_web_chat_refs: bool,
    /// `pruneNonPersonalRefs`: references to group chats and channels are forgotten.
    pub prune_non_personal_refs: bool,
    /// `refTouchIntervalS`: a used reference's time is written at most this often.
    pub ref_touch_interval_s: u64,
    /// `trustedServiceUrlHosts`: the only hosts answers (and the bot's token) are sent to, over HTTPS.
    pub trusted_service_url_hosts: Vec<String>,
    /// `openIdMetadata` (not in 0.3.5; national clouds): the Bot Framework's OpenID configuration.
    pub open_id_metadata: String,
    /// `loginEndpoint` (not in 0.3.5; national clouds): the Azure AD login host the bot's tokens come from.
    pub login_endpoint: String,
    /// More CA certificates (PEM files) to trust besides the system's, such as the one `SSL_CERT_FILE` names in
    /// the environment the gateway was given.
    pub extra_roots: Vec<PathBuf>,
}

fn config(message: String) -> ChannelError {
    ChannelError::Config {
        channel: NAME.to_owned(),
        message,
    }
}

/// An `https://` URL (or `http://` on this machine's loopback, for a local stand-in) without its trailing `/`, or
/// the error naming `key`.
fn https_url(value: &str, key: &str) -> Result<String, ChannelError> {
    let value = value.trim().trim_end_matches('/');
    let loopback = |u: &url::Url| match u.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    };
    match url::Url::parse(value) {
        Ok(u)
            if u.host_str().is_some()
                && (u.scheme() == "https" || (u.scheme() == "http" && loopback(&u))) =>
        {
            Ok(value.to_owned())
        }
        _ => Err(config(format!(
            "channels.{NAME}.{key} must be an https:// address (got {value:?})"
        ))),
    }
}

impl MsTeamsSettings {
    /// Reads the raw `channels.msteams` block; an error names the key and never shows the password.
    pub fn from_block(block: &serde_json::Value) -> Result<Self, ChannelError> {
        let raw: Raw =
            serde_json::from_value(block.clone()).map_err(|e| config(format!("channels.{NAME}: {e}")))?;
        let app_id = raw.app_id.trim().to_owned();
        if app_id.is_empty() {
            return Err(config(format!(
                "channels.{NAME}.appId is empty: register a bot (Azure Bot or the Teams Developer Portal) and put \
                 its Microsoft App ID there"
            )));
        }
        if raw.app_password.expose().trim().is_empty() {
            return Err(config(format!(
                "channels.{NAME}.appPassword is empty: create a client secret for the bot's app and put it there"
            )));
        }
        let path = raw.path.trim().to_owned();
        if !path.starts_with('/') || path.contains(['?', '#', ' ']) {
            return Err(config(format!(
                "channels.{NAME}.path must be a URL path starting with / (got {path:?})"
            )));
        }
        if raw.host.trim().is_empty() {
            return Err(config(format!("channels.{NAME}.host is empty")));
        }
        if raw.ref_ttl_days == 0 {
            return Err(config(format!("channels.{NAME}.refTtlDays must be at least 1")));
        }
        let trimmed = |list: Vec<String>| -> Vec<String> {
            list.into_iter()
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect()
        };
        let trusted = match raw.trusted_service_url_hosts {
            Some(list) => trimmed(list)
                .into_iter()
                .map(|h| h.to_ascii_lowercase().trim_end_matches('.').to_owned())
                .collect(),
            None => DEFAULT_TRUSTED_SERVICE_URL_HOSTS
                .iter()
                .map(|h| (*h).to_owned())
                .collect(),
        };
        Ok(Self {
            app_id,
            app_password: raw.app_password,
            tenant_id: raw.tenant_id.trim().to_owned(),
            host: raw.host.trim().to_owned(),
            port: raw.port,
            path,
            allow_from: trimmed(raw.allow_from),
            reply_in_thread: raw.reply_in_thread,
            mention_only_response: raw.mention_only_response.trim().to_owned(),
            validate_inbound_auth: raw.validate_inbound_auth,
            ref_ttl_days: raw.ref_ttl_days,
            prune_web_chat_refs: raw.prune_web_chat_refs,
            prune_non_personal_refs: raw.prune_non_personal_refs,
            ref_touch_interval_s: raw.ref_touch_interval_s,
            trusted_service_url_hosts: trusted,
            open_id_metadata: https_url(&raw.open_id_metadata, "openIdMetadata")?,
            login_endpoint: https_url(&raw.login_endpoint, "loginEndpoint")?,
            extra_roots: Vec::new(),
        })
    }

    /// The tenant the bot's tokens are asked of: `tenantId`, or `botframework.com` for a multi-tenant bot.
    pub fn token_tenant(&self) -> &str {
        if self.tenant_id.is_empty() {
            "botframework.com"
        } else {
            &self.tenant_id
        }
    }

    /// Where the bot's tokens are asked for.
    pub fn token_url(&self) -> String {
        format!(
            "{}/{}/oauth2/v2.0/token",
            self.login_endpoint,
            self.token_tenant()
        )
    }

    /// Whether answers may go to `service_url`: HTTPS on one of `trustedServiceUrlHosts` (`*.example.com`
    /// matches the subdomains of `example.com`, not itself), as 0.3.5 decides.
    pub fn is_trusted_service_url(&self, service_url: &str) -> bool {
        let Ok(url) = url::Url::parse(service_url.trim()) else {
            return false;
        };
        if url.scheme() != "https" {
            return false;
        }
        let Some(host) = url.host_str() else {
            return false;
        };
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        let host = host.trim_end_matches('.');
        self.trusted_service_url_hosts
            .iter()
            .any(|pattern| match pattern.strip_prefix("*.") {
                Some(parent) => host
                    .strip_suffix(parent)
                    .is_some_and(|rest| rest.len() > 1 && rest.ends_with('.')),
                None => host == pattern,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_0_3_5_block_is_read_with_its_defaults() {
        let s = MsTeamsSettings::from_block(&json!({
            "enabled": true, "appId": "app-1", "appPassword": "pw-123456", "allowFrom": ["u1"]
        }))
        .unwrap();
        assert_eq!(
            (s.host.as_str(), s.port, s.path.as_str()),
            ("0.0.0.0", 3978, "/api/messages")
        );
        assert!(
            s.reply_in_thread
                && s.validate_inbound_auth
                && s.prune_web_chat_refs
                && s.prune_non_personal_refs
        );
        assert_eq!((s.ref_ttl_days, s.ref_touch_interval_s), (30, 300));
        assert_eq!(s.mention_only_response, "Hi — what can I help with?");
        assert_eq!(
            s.token_url(),
            "https://login.microsoftonline.com/botframework.com/oauth2/v2.0/token"
        );
        assert_eq!(
            s.trusted_service_url_hosts.len(),
            DEFAULT_TRUSTED_SERVICE_URL_HOSTS.len()
        );
        let s = MsTeamsSettings::from_block(&json!({
            "app_id": "app-1", "app_password": "pw", "tenant_id": "t-1", "reply_in_thread": false,
            "trustedServiceUrlHosts": ["Teams.Example.COM."], "loginEndpoint": "https://login.microsoftonline.us/"
        }))
        .unwrap();
        assert!(!s.reply_in_thread);
        assert_eq!(
            s.token_url(),
            "https://login.microsoftonline.us/t-1/oauth2/v2.0/token"
        );
        assert_eq!(s.trusted_service_url_hosts, ["teams.example.com"]);
        let local = json!({"appId": "a", "appPassword": "p", "loginEndpoint": "http://127.0.0.1:9/", "openIdMetadata": "http://localhost:9/oidc"});
        let s = MsTeamsSettings::from_block(&local).unwrap();
        assert_eq!(
            s.token_url(),
            "http://127.0.0.1:9/botframework.com/oauth2/v2.0/token"
        );
    }

    #[test]
    fn service_urls_are_trusted_as_0_3_5_trusts_them() {
        let s = MsTeamsSettings::from_block(&json!({"appId": "a", "appPassword": "p"})).unwrap();
        for (url, trusted) in [
            ("https://smba.trafficmanager.net/amer/", true),
            ("https://SMBA.trafficmanager.net./emea/", true),
            ("https://europe.botframework.com/", true),
            ("https://webchat.botframework.com/", true),
            ("https://botframework.com/", false),
            ("https://evilbotframework.com/", false),
            ("http://smba.trafficmanager.net/amer/", false),
            ("https://smba.trafficmanager.net.evil.example/", false),
            ("https://user@evil.example/smba.trafficmanager.net", false),
            ("not a url", false),
        ] {
            assert_eq!(s.is_trusted_service_url(url), trusted, "{url}");
        }
    }

    #[test]
    fn bad_values_name_the_key_and_never_the_password() {
        for (block, says) in [
            (
                json!({"appPassword": "SEKRIT-PW"}),
                "channels.msteams.appId is empty",
            ),
            (
                json!({"appId": "a", "appPassword": " "}),
                "channels.msteams.appPassword is empty",
            ),
            (
                json!({"appId": "a", "appPassword": "SEKRIT-PW", "path": "api"}),
                "channels.msteams.path",
            ),
            (
                json!({"appId": "a", "appPassword": "SEKRIT-PW", "refTtlDays": 0}),
                "refTtlDays",
            ),
            (
                json!({"appId": "a", "appPassword": "SEKRIT-PW", "port": 70000}),
                "channels.msteams",
            ),
            (
                json!({"appId": "a", "appPassword": "SEKRIT-PW", "loginEndpoint": "http://login.example"}),
                "channels.msteams.loginEndpoint",
            ),
            (
                json!({"appId": "a", "appPassword": "SEKRIT-PW", "openIdMetadata": "file:///etc/passwd"}),
                "channels.msteams.openIdMetadata",
            ),
        ] {
            let e = MsTeamsSettings::from_block(&block).unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
            assert!(!e.contains("SEKRIT-PW"), "{e}");
        }
    }
}
