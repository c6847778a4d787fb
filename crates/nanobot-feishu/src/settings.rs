//! Resolved settings of the Feishu channel (from `channels.feishu`).

use std::time::Duration;

use nanobot_channels::{ChannelError, GroupPolicy, http_base_url};
use nanobot_config::{FeishuConfig, Secret};

use crate::NAME;

/// Open API base URL of Feishu (China).
pub const FEISHU_URL: &str = "https://open.feishu.cn";
/// Open API base URL of Lark (international).
pub const LARK_URL: &str = "https://open.larksuite.com";

/// Largest received file the channel downloads, in bytes.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 20 * 1024 * 1024;

/// Default shortest time between two updates of a streaming card (0.3.5's `_STREAM_EDIT_INTERVAL`).
pub const DEFAULT_STREAM_EDIT_INTERVAL: Duration = Duration::from_millis(500);

/// Everything the Feishu channel needs, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct FeishuSettings {
    /// `appId`.
    pub app_id: String,
    /// `appSecret`.
    pub app_secret: Secret,
    /// `allowFrom`: sender open_ids; empty denies everyone, `"*"` allows everyone.
    pub allow_from: Vec<String>,
    /// `groupPolicy`: `open` answers every group message, `mention` only those that @mention the bot.
    pub group_policy: GroupPolicy,
    /// `reactEmoji`: Feishu emoji type added to a received message (empty = none).
    pub react_emoji: String,
    /// `doneEmoji`: emoji type added when the reply is out (none by default).
    pub done_emoji: Option<String>,
    /// `replyToMessage`: quote the user's message in the first reply.
    pub reply_to_message: bool,
    /// `topicIsolation`: one session per topic in groups.
    pub topic_isolation: bool,
    /// Open API base URL (from `domain`, or `baseUrl` when set); discovery, tokens and the IM API go there.
    pub api_url: String,
    /// Largest received file downloaded, in bytes.
    pub max_file_bytes: u64,
    /// `streaming`: show a streamed answer as one card updated while it is written (CardKit).
    pub streaming: bool,
    /// Shortest time between two updates of a streaming card (the answer's end is always written).
    pub stream_edit_interval: Duration,
    /// `toolHintPrefix`: put before each tool-hint line shown inside a streaming card.
    pub tool_hint_prefix: String,
}

impl FeishuSettings {
    /// Settings for this app against Feishu, with an empty (deny-all) allow-list.
    pub fn new(app_id: impl Into<String>, app_secret: Secret) -> Self {
        Self {
            app_id: app_id.into(),
            app_secret,
            allow_from: Vec::new(),
            group_policy: GroupPolicy::Mention,
            react_emoji: "THUMBSUP".into(),
            done_emoji: None,
            reply_to_message: false,
            topic_isolation: true,
            api_url: FEISHU_URL.into(),
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            streaming: true,
            stream_edit_interval: DEFAULT_STREAM_EDIT_INTERVAL,
            tool_hint_prefix: "\u{1f527}".into(),
        }
    }

    /// Validates `channels.feishu`; errors name the offending key.
    pub fn from_config(config: &FeishuConfig) -> Result<Self, ChannelError> {
        let bad = |message: String| ChannelError::Config {
            channel: NAME.into(),
            message,
        };
        let app_id = config.app_id.trim();
        if app_id.is_empty() {
            return Err(bad("channels.feishu.appId is empty (the app's cli_… id)".into()));
        }
        let secret = config.app_secret.expose().trim();
        if secret.is_empty() {
            return Err(bad("channels.feishu.appSecret is empty".into()));
        }
        let api_url = match config.domain.trim().to_ascii_lowercase().as_str() {
            "" | "feishu" => FEISHU_URL,
            "lark" => LARK_URL,
            other => {
                return Err(bad(format!(
                    "channels.feishu.domain {other:?} must be \"feishu\" or \"lark\""
                )));
            }
        };
        let mut s = Self::new(app_id, Secret::new(secret));
        s.allow_from.clone_from(&config.allow_from);
        s.group_policy = match config.group_policy {
            GroupPolicy::Allowlist => {
                return Err(bad(
                    "channels.feishu.groupPolicy \"allowlist\" is not supported; use \"open\" or \"mention\""
                        .into(),
                ));
            }
            other => other,
        };
        s.react_emoji = config.react_emoji.trim().to_string();
        s.done_emoji = config
            .done_emoji
            .as_deref()
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(str::to_string);
        s.reply_to_message = config.reply_to_message;
        s.topic_isolation = config.topic_isolation;
        s.streaming = config.streaming;
        s.tool_hint_prefix = config.tool_hint_prefix.trim().to_string();
        s.api_url = http_base_url(NAME, config.base_url.as_deref())?.unwrap_or_else(|| api_url.to_string());
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates_and_names_keys() {
        let err = FeishuSettings::from_config(&FeishuConfig::default()).unwrap_err();
        assert!(err.to_string().contains("channels.feishu.appId"), "{err}");
        let mut c = FeishuConfig {
            app_id: "cli_1".into(),
            ..FeishuConfig::default()
        };
        let err = FeishuSettings::from_config(&c).unwrap_err();
        assert!(err.to_string().contains("channels.feishu.appSecret"), "{err}");
        c.app_secret = Secret::new("SECRET9");
        assert_eq!(FeishuSettings::from_config(&c).unwrap().api_url, FEISHU_URL);
        c.domain = "lark".into();
        let s = FeishuSettings::from_config(&c).unwrap();
        assert_eq!(s.api_url, LARK_URL);
        assert!(!format!("{s:?}").contains("SECRET9"));
        c.domain = "larksuite".into();
        assert!(
            FeishuSettings::from_config(&c)
                .unwrap_err()
                .to_string()
                .contains("channels.feishu.domain")
        );
        c.domain = "feishu".into();
        c.base_url = Some("http://127.0.0.1:9/".into());
        assert_eq!(
            FeishuSettings::from_config(&c).unwrap().api_url,
            "http://127.0.0.1:9"
        );
        c.group_policy = GroupPolicy::Allowlist;
        assert!(
            FeishuSettings::from_config(&c)
                .unwrap_err()
                .to_string()
                .contains("groupPolicy")
        );
    }

    #[test]
    fn reads_the_python_keys() {
        let block = serde_json::json!({
            "enabled": true, "appId": "cli_a", "appSecret": "s", "allowFrom": ["ou_1"],
            "groupPolicy": "open", "reactEmoji": "OK", "doneEmoji": "DONE", "replyToMessage": true,
            "topicIsolation": false, "domain": "lark", "streaming": false, "toolHintPrefix": ">"
        });
        let s = FeishuSettings::from_config(&FeishuConfig::from_block(&block).unwrap()).unwrap();
        assert_eq!(s.allow_from, ["ou_1"]);
        assert_eq!(s.group_policy, GroupPolicy::Open);
        assert_eq!(
            (s.react_emoji.as_str(), s.done_emoji.as_deref()),
            ("OK", Some("DONE"))
        );
        assert!(s.reply_to_message && !s.topic_isolation);
        assert!(!s.streaming);
        assert_eq!(s.tool_hint_prefix, ">");
        let defaults = FeishuSettings::from_config(&FeishuConfig {
            app_id: "cli_a".into(),
            app_secret: Secret::new("s"),
            ..FeishuConfig::default()
        })
        .unwrap();
        assert!(defaults.streaming, "streaming is on by default, as in 0.3.5");
        assert_eq!(defaults.tool_hint_prefix, "\u{1f527}");
        let err = FeishuConfig::from_block(&serde_json::json!({"allowFrom": 5})).unwrap_err();
        assert!(err.contains("channels.feishu"), "{err}");
    }
}
