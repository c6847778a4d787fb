//! Resolved settings of the DingTalk channel (from `channels.dingtalk`).

use nanobot_channels::{ChannelError, http_base_url};
use nanobot_config::{DingTalkConfig, Secret};

use crate::NAME;

/// DingTalk's Open API base URL (Stream mode gateway, tokens, robot messages).
pub const DEFAULT_API_URL: &str = "https://api.dingtalk.com";

/// DingTalk's legacy API base URL (`oapi`): media uploads (`/media/upload`) live there, not on the Open API host.
pub const DEFAULT_OAPI_URL: &str = "https://oapi.dingtalk.com";

/// Largest received file the channel downloads, in bytes.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 20 * 1024 * 1024;

/// Everything the DingTalk channel needs, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct DingTalkSettings {
    /// `clientId` (AppKey); also the robot code of sends.
    pub client_id: String,
    /// `clientSecret` (AppSecret).
    pub client_secret: Secret,
    /// `allowFrom`: sender staff ids; empty denies everyone, `"*"` allows everyone.
    pub allow_from: Vec<String>,
    /// `groupUserIsolation`: one session per user in group chats.
    pub group_user_isolation: bool,
    /// `disablePrivateChat`: direct messages get a notice and are not answered.
    pub disable_private_chat: bool,
    /// Open API base URL (`baseUrl`, default [`DEFAULT_API_URL`]).
    pub api_url: String,
    /// Legacy API base URL of media uploads (default [`DEFAULT_OAPI_URL`]; `baseUrl` sets it too, so that one
    /// server, a fake in tests, answers both).
    pub oapi_url: String,
    /// `allowRemoteMediaRedirects`: follow redirects when fetching a remote attachment to send.
    pub allow_remote_media_redirects: bool,
    /// `remoteMediaRedirectAllowedHosts`: hosts such redirects may lead to besides the URL's own.
    pub remote_media_redirect_allowed_hosts: Vec<String>,
    /// Largest received file downloaded, in bytes.
    pub max_file_bytes: u64,
}

impl DingTalkSettings {
    /// Settings for this app against DingTalk, with an empty (deny-all) allow-list.
    pub fn new(client_id: impl Into<String>, client_secret: Secret) -> Self {
        Self {
            client_id: client_id.into(),
            client_secret,
            allow_from: Vec::new(),
            group_user_isolation: false,
            disable_private_chat: false,
            api_url: DEFAULT_API_URL.into(),
            oapi_url: DEFAULT_OAPI_URL.into(),
            allow_remote_media_redirects: false,
            remote_media_redirect_allowed_hosts: Vec::new(),
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
        }
    }

    /// Validates `channels.dingtalk`; errors name the offending key.
    pub fn from_config(config: &DingTalkConfig) -> Result<Self, ChannelError> {
        let bad = |message: &str| ChannelError::Config {
            channel: NAME.into(),
            message: message.into(),
        };
        let id = config.client_id.trim();
        if id.is_empty() {
            return Err(bad("channels.dingtalk.clientId is empty (the app's AppKey)"));
        }
        let secret = config.client_secret.expose().trim();
        if secret.is_empty() {
            return Err(bad(
                "channels.dingtalk.clientSecret is empty (the app's AppSecret)",
            ));
        }
        let mut s = Self::new(id, Secret::new(secret));
        s.allow_from.clone_from(&config.allow_from);
        s.group_user_isolation = config.group_user_isolation;
        s.disable_private_chat = config.disable_private_chat;
        s.allow_remote_media_redirects = config.allow_remote_media_redirects;
        s.remote_media_redirect_allowed_hosts
            .clone_from(&config.remote_media_redirect_allowed_hosts);
        if let Some(base) = http_base_url(NAME, config.base_url.as_deref())? {
            s.oapi_url.clone_from(&base);
            s.api_url = base;
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates_and_reads_the_python_keys() {
        let err = DingTalkSettings::from_config(&DingTalkConfig::default()).unwrap_err();
        assert!(err.to_string().contains("channels.dingtalk.clientId"), "{err}");
        let block = serde_json::json!({"enabled": true, "clientId": "ding1", "allowFrom": ["staff1"]});
        let err = DingTalkSettings::from_config(&DingTalkConfig::from_block(&block).unwrap()).unwrap_err();
        assert!(
            err.to_string().contains("channels.dingtalk.clientSecret"),
            "{err}"
        );
        let block = serde_json::json!({"clientId": "ding1", "clientSecret": "SECRET7", "allowFrom": ["staff1"],
            "groupUserIsolation": true, "disablePrivateChat": true, "baseUrl": "http://127.0.0.1:1/"});
        let s = DingTalkSettings::from_config(&DingTalkConfig::from_block(&block).unwrap()).unwrap();
        assert_eq!(s.allow_from, ["staff1"]);
        assert!(s.group_user_isolation && s.disable_private_chat);
        assert_eq!(s.api_url, "http://127.0.0.1:1");
        assert_eq!(
            s.oapi_url, "http://127.0.0.1:1",
            "baseUrl points both APIs at one server"
        );
        let s = DingTalkSettings::new("ding1", Secret::new("s"));
        assert_eq!(
            (s.api_url.as_str(), s.oapi_url.as_str()),
            (DEFAULT_API_URL, DEFAULT_OAPI_URL)
        );
        assert!(!format!("{s:?}").contains("SECRET7"));
    }
}
