//! Resolved settings of the WeCom channel, read from the raw `channels.wecom` block (0.3.5's keys, in camelCase or
//! snake_case, plus the Rust-only `wsUrl`).

use nanobot_channels::ChannelError;
use nanobot_config::Secret;
use serde::Deserialize;

use crate::NAME;

/// Where WeCom's AI-bot long connection lives (0.3.5 always connects here).
pub const DEFAULT_WS_URL: &str = "wss://openws.work.weixin.qq.com";

/// The `channels.wecom` block as written (unknown keys are ignored, as 0.3.5 does).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct Raw {
    #[serde(alias = "bot_id")]
    bot_id: String,
    secret: Secret,
    #[serde(alias = "allow_from")]
    allow_from: Vec<String>,
    #[serde(alias = "welcome_message")]
    welcome_message: String,
    #[serde(alias = "ws_url")]
    ws_url: Option<String>,
}

/// Everything the WeCom channel needs, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct WecomSettings {
    /// `botId`: the AI bot's Bot ID (WeCom admin console → the bot → API mode "long connection").
    pub bot_id: String,
    /// `secret`: the bot's Secret (sent in the subscription only; never shown).
    pub secret: Secret,
    /// `allowFrom`: userids who may talk to the bot, in single chats and groups (`"*"`: everyone; empty: no one).
    pub allow_from: Vec<String>,
    /// `welcomeMessage`: sent when an allowed user opens the bot's chat (empty: none).
    pub welcome_message: String,
    /// `wsUrl` (nanobot-rs only; 0.3.5 ignores the key): the long connection's address, [`DEFAULT_WS_URL`] unless
    /// given (a fake server in tests).
    pub ws_url: String,
}

fn config(message: String) -> ChannelError {
    ChannelError::Config {
        channel: NAME.to_owned(),
        message,
    }
}

impl WecomSettings {
    /// Reads the raw `channels.wecom` block; an error names the key and never shows the secret.
    pub fn from_block(block: &serde_json::Value) -> Result<Self, ChannelError> {
        let raw: Raw =
            serde_json::from_value(block.clone()).map_err(|e| config(format!("channels.{NAME}: {e}")))?;
        let bot_id = raw.bot_id.trim().to_owned();
        if bot_id.is_empty() {
            return Err(config(format!(
                "channels.{NAME}.botId is empty: create an AI bot in the WeCom admin console, choose the \
                 long-connection API mode and put its Bot ID there"
            )));
        }
        if raw.secret.expose().trim().is_empty() {
            return Err(config(format!(
                "channels.{NAME}.secret is empty: put the AI bot's Secret there (next to its Bot ID in the WeCom \
                 admin console)"
            )));
        }
        let ws_url = raw
            .ws_url
            .map(|u| u.trim().trim_end_matches('/').to_owned())
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| DEFAULT_WS_URL.to_owned());
        if !(ws_url.starts_with("wss://") || ws_url.starts_with("ws://"))
            || ws_url.contains(char::is_whitespace)
        {
            return Err(config(format!(
                "channels.{NAME}.wsUrl must be a ws:// or wss:// address (default {DEFAULT_WS_URL})"
            )));
        }
        Ok(Self {
            bot_id,
            secret: raw.secret,
            allow_from: raw
                .allow_from
                .into_iter()
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect(),
            welcome_message: raw.welcome_message.trim().to_owned(),
            ws_url,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_0_3_5_block_is_read_with_its_defaults() {
        let s = WecomSettings::from_block(&json!({
            "enabled": true, "botId": " aib-1 ", "secret": "s3cret", "someFutureKey": 1
        }))
        .unwrap();
        assert_eq!(s.bot_id, "aib-1");
        assert_eq!(s.secret.expose(), "s3cret");
        assert!(s.allow_from.is_empty(), "nobody by default");
        assert_eq!(s.welcome_message, "");
        assert_eq!(s.ws_url, DEFAULT_WS_URL);
        let s = WecomSettings::from_block(&json!({
            "bot_id": "aib-2", "secret": "x", "allow_from": ["alice", " ", "*"], "welcome_message": "Hi!",
            "ws_url": "ws://127.0.0.1:9000/"
        }))
        .unwrap();
        assert_eq!(s.allow_from, ["alice", "*"]);
        assert_eq!(s.welcome_message, "Hi!");
        assert_eq!(s.ws_url, "ws://127.0.0.1:9000");
        assert!(!format!("{s:?}").contains("\"x\""), "{s:?}");
    }

    #[test]
    fn bad_values_name_the_key_and_never_the_secret() {
        for (block, says) in [
            (json!({"secret": "SEKRIT-1"}), "channels.wecom.botId is empty"),
            (
                json!({"botId": "b", "secret": "  "}),
                "channels.wecom.secret is empty",
            ),
            (json!({"botId": "b"}), "channels.wecom.secret is empty"),
            (
                json!({"botId": "b", "secret": "SEKRIT-1", "wsUrl": "https://x"}),
                "channels.wecom.wsUrl",
            ),
            (
                json!({"botId": "b", "secret": "SEKRIT-1", "allowFrom": "alice"}),
                "channels.wecom",
            ),
            (json!({"botId": "b", "secret": 12345}), "channels.wecom"),
        ] {
            let e = WecomSettings::from_block(&block).unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
            assert!(!e.contains("SEKRIT") && !e.contains("12345"), "{e}");
        }
        let s = WecomSettings::from_block(&json!({"botId": "b", "secret": "SEKRIT-2"})).unwrap();
        assert!(!format!("{s:?}").contains("SEKRIT"));
    }
}
