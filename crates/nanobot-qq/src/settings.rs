//! Resolved settings of the QQ channel, read from the raw `channels.qq` block (0.3.5's keys).

use std::path::PathBuf;

use nanobot_channels::{ChannelError, http_base_url};
use nanobot_config::Secret;
use serde::Deserialize;

use crate::NAME;

/// The QQ Bot OpenAPI base URL.
pub const DEFAULT_API_URL: &str = "https://api.sgroup.qq.com";
/// Where app access tokens come from.
pub const DEFAULT_TOKEN_URL: &str = "https://bots.qq.com/app/getAppAccessToken";
/// 0.3.5's default `ackMessage`.
pub const DEFAULT_ACK_MESSAGE: &str = "⏳ Processing...";
/// 0.3.5's default `downloadMaxBytes` (200 MiB).
pub const DEFAULT_DOWNLOAD_MAX_BYTES: u64 = 200 * 1024 * 1024;

/// How replies are sent (`msgFormat`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MsgFormat {
    /// `msg_type` 0, the text as is.
    #[default]
    Plain,
    /// `msg_type` 2, the text as QQ Markdown.
    Markdown,
}

/// The `channels.qq` block as written in `config.json` (unknown keys are ignored, like 0.3.5 does).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct QqConfig {
    app_id: String,
    secret: Secret,
    allow_from: Vec<String>,
    msg_format: Option<String>,
    ack_message: Option<String>,
    media_dir: String,
    download_max_bytes: Option<u64>,
    /// nanobot-rs only: another OpenAPI server (a fake in tests); the token then comes from
    /// `<baseUrl>/app/getAppAccessToken`.
    base_url: Option<String>,
}

/// Everything the QQ channel needs, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct QqSettings {
    /// `appId`.
    pub app_id: String,
    /// `secret` (the app's client secret).
    pub secret: Secret,
    /// `allowFrom`: user openids; empty denies everyone, `"*"` allows everyone.
    pub allow_from: Vec<String>,
    /// `msgFormat`.
    pub msg_format: MsgFormat,
    /// `ackMessage`: sent as a passive reply before the agent answers; empty sends none.
    pub ack_message: String,
    /// `mediaDir`: where received files go (`None`: `<media>/qq`).
    pub media_dir: Option<PathBuf>,
    /// `downloadMaxBytes`: larger received files are not kept (at least 1 MiB, as 0.3.5).
    pub download_max_bytes: u64,
    /// OpenAPI base URL (`baseUrl`, default [`DEFAULT_API_URL`]).
    pub api_url: String,
    /// Token endpoint (default [`DEFAULT_TOKEN_URL`]; `<baseUrl>/app/getAppAccessToken` with `baseUrl`).
    pub token_url: String,
}

impl QqSettings {
    /// Settings for this app against QQ, with an empty (deny-all) allow-list.
    pub fn new(app_id: impl Into<String>, secret: Secret) -> Self {
        Self {
            app_id: app_id.into(),
            secret,
            allow_from: Vec::new(),
            msg_format: MsgFormat::Plain,
            ack_message: DEFAULT_ACK_MESSAGE.into(),
            media_dir: None,
            download_max_bytes: DEFAULT_DOWNLOAD_MAX_BYTES,
            api_url: DEFAULT_API_URL.into(),
            token_url: DEFAULT_TOKEN_URL.into(),
        }
    }

    /// Validates the raw `channels.qq` block; errors name the offending key, never a secret's value.
    pub fn from_block(block: &serde_json::Value) -> Result<Self, ChannelError> {
        let bad = |message: String| ChannelError::Config {
            channel: NAME.into(),
            message,
        };
        let config: QqConfig =
            serde_json::from_value(block.clone()).map_err(|e| bad(format!("channels.qq: {e}")))?;
        let id = config.app_id.trim();
        if id.is_empty() {
            return Err(bad("channels.qq.appId is empty (the bot's AppID)".into()));
        }
        let secret = config.secret.expose().trim();
        if secret.is_empty() {
            return Err(bad("channels.qq.secret is empty (the bot's AppSecret)".into()));
        }
        let mut s = Self::new(id, Secret::new(secret));
        s.allow_from = config.allow_from;
        s.msg_format = match config.msg_format.as_deref().map(str::trim) {
            None | Some("" | "plain") => MsgFormat::Plain,
            Some("markdown") => MsgFormat::Markdown,
            Some(other) => {
                return Err(bad(format!(
                    "channels.qq.msgFormat is {other:?}; expected \"plain\" or \"markdown\""
                )));
            }
        };
        if let Some(ack) = config.ack_message {
            s.ack_message = ack;
        }
        let dir = config.media_dir.trim();
        if !dir.is_empty() {
            s.media_dir = Some(PathBuf::from(dir));
        }
        if let Some(max) = config.download_max_bytes.filter(|n| *n > 0) {
            s.download_max_bytes = max.max(1024 * 1024);
        }
        if let Some(base) = http_base_url(NAME, config.base_url.as_deref())? {
            s.token_url = format!("{base}/app/getAppAccessToken");
            s.api_url = base;
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn validates_and_reads_the_python_keys() {
        let err = QqSettings::from_block(&json!({"enabled": true})).unwrap_err();
        assert!(err.to_string().contains("channels.qq.appId"), "{err}");
        let err = QqSettings::from_block(&json!({"appId": "1"})).unwrap_err();
        assert!(err.to_string().contains("channels.qq.secret"), "{err}");
        let err = QqSettings::from_block(&json!({"appId": "1", "secret": "S3CRET", "msgFormat": "html"}))
            .unwrap_err();
        assert!(err.to_string().contains("channels.qq.msgFormat"), "{err}");
        assert!(!err.to_string().contains("S3CRET"));
        let err = QqSettings::from_block(&json!({"appId": "1", "secret": 5})).unwrap_err();
        assert!(err.to_string().contains("channels.qq"), "{err}");
        let s = QqSettings::from_block(&json!({"enabled": true, "appId": "102", "secret": "S3CRET",
            "allowFrom": ["u1"], "msgFormat": "markdown", "ackMessage": "", "mediaDir": "/tmp/qqm",
            "downloadMaxBytes": 10, "downloadChunkSize": 4096, "baseUrl": "http://127.0.0.1:9/"}))
        .unwrap();
        assert_eq!(s.allow_from, ["u1"]);
        assert_eq!(s.msg_format, MsgFormat::Markdown);
        assert_eq!(s.ack_message, "");
        assert_eq!(s.media_dir.as_deref(), Some(std::path::Path::new("/tmp/qqm")));
        assert_eq!(s.download_max_bytes, 1024 * 1024, "raised to 1 MiB like 0.3.5");
        assert_eq!(s.api_url, "http://127.0.0.1:9");
        assert_eq!(s.token_url, "http://127.0.0.1:9/app/getAppAccessToken");
        assert!(!format!("{s:?}").contains("S3CRET"));
        let s = QqSettings::from_block(&json!({"appId": "102", "secret": "x"})).unwrap();
        assert_eq!(s.ack_message, DEFAULT_ACK_MESSAGE);
        assert_eq!(s.token_url, DEFAULT_TOKEN_URL);
    }
}
