//! Resolved settings of the personal WeChat channel, read from the raw `channels.weixin` block (0.3.5's keys, in
//! camelCase or snake_case, validated as 0.3.5's `WeixinConfig` validates them).

use std::path::{Path, PathBuf};
use std::time::Duration;

use nanobot_channels::ChannelError;
use nanobot_config::Secret;
use serde::Deserialize;

use crate::NAME;

/// Where the iLink bot API lives (0.3.5's default `baseUrl`; a login may answer another).
pub const DEFAULT_BASE_URL: &str = "https://ilinkai.weixin.qq.com";
/// Where media are kept (0.3.5's default `cdnBaseUrl`).
pub const DEFAULT_CDN_BASE_URL: &str = "https://novac2c.cdn.weixin.qq.com/c2c";
/// 0.3.5's default long-poll hold, in seconds (`pollTimeout`).
pub const DEFAULT_POLL_TIMEOUT_SECS: u64 = 35;
/// The range `pollTimeout` is brought within, in seconds (0.3.5 bounds it not; a value outside is not refused, so
/// that its configs load).
const POLL_TIMEOUT_RANGE_SECS: std::ops::RangeInclusive<u64> = 1..=600;

/// The `channels.weixin` block as written (unknown keys are ignored, as 0.3.5 does).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct Raw {
    token: Secret,
    #[serde(alias = "allow_from")]
    allow_from: Vec<String>,
    #[serde(alias = "base_url")]
    base_url: Option<String>,
    #[serde(alias = "cdn_base_url")]
    cdn_base_url: Option<String>,
    /// A string or a number (0.3.5: `str | int | None`).
    #[serde(alias = "route_tag")]
    route_tag: Option<serde_json::Value>,
    #[serde(alias = "state_dir")]
    state_dir: Option<String>,
    #[serde(alias = "poll_timeout")]
    poll_timeout: Option<u64>,
    #[serde(alias = "send_progress")]
    send_progress: bool,
    #[serde(alias = "send_tool_hints")]
    send_tool_hints: bool,
    #[serde(alias = "reply_progress_messages")]
    reply_progress_messages: bool,
    #[serde(alias = "reply_progress_max_messages")]
    reply_progress_max_messages: Option<i64>,
    #[serde(alias = "context_message_budget")]
    context_message_budget: Option<i64>,
    streaming: Option<bool>,
    #[serde(alias = "block_streaming")]
    block_streaming: bool,
    #[serde(alias = "block_streaming_min_chars")]
    block_streaming_min_chars: Option<i64>,
    #[serde(alias = "block_streaming_max_messages")]
    block_streaming_max_messages: Option<i64>,
}

/// Everything the personal WeChat channel needs, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct WeixinSettings {
    /// `token`: the bot token the QR login wrote (empty: the one in `<stateDir>/account.json` is used). Never
    /// shown.
    pub token: Secret,
    /// `allowFrom`: user ids (`…@im.wechat`) who may talk to the bot, matched exactly (`"*"`: everyone; empty: no
    /// one).
    pub allow_from: Vec<String>,
    /// `baseUrl`: the iLink bot API, without a trailing `/` ([`DEFAULT_BASE_URL`] unless given; a login writes
    /// the one it was answered).
    pub base_url: String,
    /// `cdnBaseUrl`: the media CDN, without a trailing `/` ([`DEFAULT_CDN_BASE_URL`] unless given).
    pub cdn_base_url: String,
    /// `routeTag`: sent as the `SKRouteTag` header when set.
    pub route_tag: Option<String>,
    /// `stateDir` as written (`~` not yet expanded; empty: `<data dir>/weixin`). See [`WeixinSettings::state_dir`].
    pub state_dir: Option<String>,
    /// `pollTimeout`: how long a long poll is held, until the server says otherwise (`longpolling_timeout_ms`);
    /// brought within 1 to 600 s.
    pub poll_timeout: Duration,
    /// `sendProgress` (on with `replyProgressMessages`): progress text is sent.
    pub send_progress: bool,
    /// `sendToolHints` (on with `replyProgressMessages`): tool hints are sent, gathered into one message before the
    /// next visible one.
    pub send_tool_hints: bool,
    /// `replyProgressMessages`: 0.3.5 sends tool events as items; here it turns on `sendProgress` and
    /// `sendToolHints` (the agent publishes no structured tool events).
    pub reply_progress_messages: bool,
    /// `replyProgressMaxMessages` (0 to 4; read and checked, see [`WeixinSettings::reply_progress_messages`]).
    pub reply_progress_max_messages: u32,
    /// `contextMessageBudget` (1 to 10): sends allowed per context token, counted here (the server allows about
    /// ten).
    pub context_message_budget: u32,
    /// `streaming` (default on): the model's answer is streamed, and sent whole when it ends.
    pub streaming: bool,
    /// `blockStreaming`: a long streamed answer goes out in blocks as it grows.
    pub block_streaming: bool,
    /// `blockStreamingMinChars` (200 to 1800): the size of a block.
    pub block_streaming_min_chars: usize,
    /// `blockStreamingMaxMessages` (1 to 4): blocks plus the end, per answer.
    pub block_streaming_max_messages: u32,
}

fn config(message: String) -> ChannelError {
    ChannelError::Config {
        channel: NAME.to_owned(),
        message,
    }
}

/// `value` (or `default`) when within `lo..=hi`, else the error naming `key` as 0.3.5 bounds it.
fn ranged(key: &str, value: Option<i64>, default: i64, lo: i64, hi: i64) -> Result<i64, ChannelError> {
    let v = value.unwrap_or(default);
    if (lo..=hi).contains(&v) {
        Ok(v)
    } else {
        Err(config(format!(
            "channels.{NAME}.{key} is {v}; it must be from {lo} to {hi} (default {default})"
        )))
    }
}

/// An `http(s)` address without trailing slashes, or the error naming `key`.
fn address(key: &str, value: Option<&str>, default: &str) -> Result<String, ChannelError> {
    let v = value.map(str::trim).filter(|v| !v.is_empty()).unwrap_or(default);
    if !(v.starts_with("http://") || v.starts_with("https://")) || v.contains(char::is_whitespace) {
        return Err(config(format!(
            "channels.{NAME}.{key} {v:?} must be an http:// or https:// address (default {default})"
        )));
    }
    Ok(v.trim_end_matches('/').to_owned())
}

impl WeixinSettings {
    /// Reads the raw `channels.weixin` block; an error names the key and never shows the token. An empty token is
    /// allowed (the QR login's `account.json` provides it).
    ///
    /// ```
    /// use nanobot_weixin::WeixinSettings;
    ///
    /// let s = WeixinSettings::from_block(&serde_json::json!({"token": "t", "context_message_budget": 10})).unwrap();
    /// assert_eq!(s.context_message_budget, 10);
    /// let err = WeixinSettings::from_block(&serde_json::json!({"contextMessageBudget": 11})).unwrap_err();
    /// assert!(err.to_string().contains("channels.weixin.contextMessageBudget is 11"));
    /// ```
    pub fn from_block(block: &serde_json::Value) -> Result<Self, ChannelError> {
        let block = if block.is_null() {
            &serde_json::Value::Object(serde_json::Map::new())
        } else {
            block
        };
        let raw: Raw = serde_path_to_error::deserialize(block).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            if path == "." || path.is_empty() {
                config(format!("channels.{NAME}: {inner}"))
            } else {
                config(format!("channels.{NAME}.{path}: {inner}"))
            }
        })?;
        let route_tag = match raw.route_tag {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(s)) => Some(s.trim().to_owned()).filter(|s| !s.is_empty()),
            Some(serde_json::Value::Number(n)) => Some(n.to_string()),
            Some(_) => {
                return Err(config(format!(
                    "channels.{NAME}.routeTag must be a string or a number"
                )));
            }
        };
        if let Some(tag) = &route_tag
            && tag.chars().any(|c| c.is_control())
        {
            return Err(config(format!(
                "channels.{NAME}.routeTag must not hold control characters"
            )));
        }
        let reply_progress_max_messages = ranged(
            "replyProgressMaxMessages",
            raw.reply_progress_max_messages,
            2,
            0,
            4,
        )?;
        let context_message_budget = ranged("contextMessageBudget", raw.context_message_budget, 8, 1, 10)?;
        let block_streaming_min_chars = ranged(
            "blockStreamingMinChars",
            raw.block_streaming_min_chars,
            1200,
            200,
            1800,
        )?;
        let block_streaming_max_messages = ranged(
            "blockStreamingMaxMessages",
            raw.block_streaming_max_messages,
            3,
            1,
            4,
        )?;
        let token = Secret::new(raw.token.expose().trim());
        if token
            .expose()
            .chars()
            .any(|c| c.is_control() || c.is_whitespace())
        {
            return Err(config(format!(
                "channels.{NAME}.token holds spaces or control characters: run `nanobot channels login weixin` \
                 to write it again"
            )));
        }
        Ok(Self {
            token,
            allow_from: raw
                .allow_from
                .into_iter()
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect(),
            base_url: address("baseUrl", raw.base_url.as_deref(), DEFAULT_BASE_URL)?,
            cdn_base_url: address("cdnBaseUrl", raw.cdn_base_url.as_deref(), DEFAULT_CDN_BASE_URL)?,
            route_tag,
            state_dir: raw
                .state_dir
                .map(|d| d.trim().to_owned())
                .filter(|d| !d.is_empty()),
            poll_timeout: Duration::from_secs(
                raw.poll_timeout
                    .unwrap_or(DEFAULT_POLL_TIMEOUT_SECS)
                    .clamp(*POLL_TIMEOUT_RANGE_SECS.start(), *POLL_TIMEOUT_RANGE_SECS.end()),
            ),
            send_progress: raw.send_progress || raw.reply_progress_messages,
            send_tool_hints: raw.send_tool_hints || raw.reply_progress_messages,
            reply_progress_messages: raw.reply_progress_messages,
            reply_progress_max_messages: reply_progress_max_messages as u32,
            context_message_budget: context_message_budget as u32,
            streaming: raw.streaming.unwrap_or(true),
            block_streaming: raw.block_streaming,
            block_streaming_min_chars: block_streaming_min_chars as usize,
            block_streaming_max_messages: block_streaming_max_messages as u32,
        })
    }

    /// Where the channel keeps `account.json`: `stateDir` (`~` expanded against `home`), else
    /// `<data_dir>/weixin` (0.3.5's default, beside `config.json`).
    ///
    /// ```
    /// use std::path::Path;
    /// use nanobot_weixin::WeixinSettings;
    ///
    /// let s = WeixinSettings::from_block(&serde_json::json!({"stateDir": "~/wx"})).unwrap();
    /// assert_eq!(s.state_dir(Path::new("/d"), Some(Path::new("/home/ada"))), Path::new("/home/ada/wx"));
    /// let s = WeixinSettings::from_block(&serde_json::json!({})).unwrap();
    /// assert_eq!(s.state_dir(Path::new("/d"), None), Path::new("/d/weixin"));
    /// ```
    pub fn state_dir(&self, data_dir: &Path, home: Option<&Path>) -> PathBuf {
        match (&self.state_dir, home) {
            (Some(d), Some(home)) => nanobot_config::paths::expand_tilde(d, home),
            (Some(d), None) => PathBuf::from(d),
            (None, _) => data_dir.join(NAME),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn ok(block: serde_json::Value) -> WeixinSettings {
        WeixinSettings::from_block(&block).unwrap()
    }

    fn err(block: serde_json::Value) -> String {
        WeixinSettings::from_block(&block).unwrap_err().to_string()
    }

    #[test]
    fn defaults_are_0_3_5s() {
        let s = ok(json!({"enabled": true}));
        assert_eq!(s.token.expose(), "");
        assert!(s.allow_from.is_empty());
        assert_eq!(s.base_url, DEFAULT_BASE_URL);
        assert_eq!(s.cdn_base_url, DEFAULT_CDN_BASE_URL);
        assert_eq!(s.route_tag, None);
        assert_eq!(s.state_dir, None);
        assert_eq!(s.poll_timeout, Duration::from_secs(35));
        assert!(!s.send_progress && !s.send_tool_hints && !s.reply_progress_messages);
        assert_eq!(s.reply_progress_max_messages, 2);
        assert_eq!(s.context_message_budget, 8);
        assert!(s.streaming && !s.block_streaming);
        assert_eq!(s.block_streaming_min_chars, 1200);
        assert_eq!(s.block_streaming_max_messages, 3);
        assert_eq!(ok(serde_json::Value::Null), s, "no block reads as the defaults");
    }

    #[test]
    fn every_key_is_read_in_camel_and_snake_case() {
        let camel = ok(json!({
            "token": " tok ", "allowFrom": ["a@im.wechat", " ", "*"], "baseUrl": "http://127.0.0.1:1/",
            "cdnBaseUrl": "http://127.0.0.1:1/c2c/", "routeTag": 1001, "stateDir": " ~/wx ", "pollTimeout": 5,
            "sendProgress": true, "sendToolHints": false, "replyProgressMessages": false,
            "replyProgressMaxMessages": 0, "contextMessageBudget": 1, "streaming": false, "blockStreaming": true,
            "blockStreamingMinChars": 200, "blockStreamingMaxMessages": 4, "someFutureKey": {}
        }));
        let snake = ok(json!({
            "token": "tok", "allow_from": ["a@im.wechat", "*"], "base_url": "http://127.0.0.1:1",
            "cdn_base_url": "http://127.0.0.1:1/c2c", "route_tag": "1001", "state_dir": "~/wx", "poll_timeout": 5,
            "send_progress": true, "send_tool_hints": false, "reply_progress_messages": false,
            "reply_progress_max_messages": 0, "context_message_budget": 1, "streaming": false,
            "block_streaming": true, "block_streaming_min_chars": 200, "block_streaming_max_messages": 4
        }));
        assert_eq!(camel, snake);
        assert_eq!(camel.token.expose(), "tok");
        assert_eq!(camel.allow_from, ["a@im.wechat", "*"]);
        assert_eq!(camel.base_url, "http://127.0.0.1:1");
        assert_eq!(camel.cdn_base_url, "http://127.0.0.1:1/c2c");
        assert_eq!(
            camel.route_tag.as_deref(),
            Some("1001"),
            "a number is sent as its digits"
        );
        assert_eq!(camel.state_dir.as_deref(), Some("~/wx"));
        assert_eq!(camel.poll_timeout, Duration::from_secs(5));
        assert!(camel.send_progress && !camel.send_tool_hints && !camel.streaming && camel.block_streaming);
        assert_eq!(
            (
                camel.reply_progress_max_messages,
                camel.context_message_budget,
                camel.block_streaming_min_chars,
                camel.block_streaming_max_messages
            ),
            (0, 1, 200, 4)
        );
    }

    #[test]
    fn reply_progress_messages_turns_on_progress_and_hints_as_in_0_3_5() {
        let s = ok(json!({"replyProgressMessages": true}));
        assert!(s.send_progress && s.send_tool_hints && s.reply_progress_messages);
    }

    #[test]
    fn ranges_are_0_3_5s_and_errors_name_the_key() {
        for (block, says) in [
            (
                json!({"replyProgressMaxMessages": 5}),
                "channels.weixin.replyProgressMaxMessages is 5",
            ),
            (
                json!({"reply_progress_max_messages": -1}),
                "channels.weixin.replyProgressMaxMessages is -1",
            ),
            (
                json!({"contextMessageBudget": 0}),
                "channels.weixin.contextMessageBudget is 0",
            ),
            (json!({"contextMessageBudget": 11}), "from 1 to 10"),
            (
                json!({"blockStreamingMinChars": 199}),
                "channels.weixin.blockStreamingMinChars is 199",
            ),
            (json!({"blockStreamingMinChars": 1801}), "from 200 to 1800"),
            (
                json!({"blockStreamingMaxMessages": 0}),
                "channels.weixin.blockStreamingMaxMessages is 0",
            ),
            (json!({"blockStreamingMaxMessages": 5}), "from 1 to 4"),
            (json!({"pollTimeout": "soon"}), "channels.weixin.pollTimeout"),
            (json!({"pollTimeout": -1}), "channels.weixin.pollTimeout"),
            (json!({"allowFrom": "a@im.wechat"}), "channels.weixin.allowFrom"),
            (json!({"streaming": "yes"}), "channels.weixin.streaming"),
            (
                json!({"baseUrl": "ilinkai.weixin.qq.com"}),
                "channels.weixin.baseUrl",
            ),
            (json!({"cdnBaseUrl": "ftp://x"}), "channels.weixin.cdnBaseUrl"),
            (json!({"routeTag": [1]}), "channels.weixin.routeTag"),
        ] {
            let e = err(block.clone());
            assert!(e.contains(says), "{block}: {e}");
        }
        for (lo, hi) in [
            (
                json!({"replyProgressMaxMessages": 0}),
                json!({"replyProgressMaxMessages": 4}),
            ),
            (
                json!({"contextMessageBudget": 1}),
                json!({"contextMessageBudget": 10}),
            ),
            (
                json!({"blockStreamingMinChars": 200}),
                json!({"blockStreamingMinChars": 1800}),
            ),
            (
                json!({"blockStreamingMaxMessages": 1}),
                json!({"blockStreamingMaxMessages": 4}),
            ),
        ] {
            ok(lo);
            ok(hi);
        }
    }

    #[test]
    fn poll_timeout_is_brought_within_1_to_600_seconds() {
        let secs = |v: serde_json::Value| ok(json!({"pollTimeout": v})).poll_timeout.as_secs();
        assert_eq!(secs(json!(0)), 1);
        assert_eq!(secs(json!(1)), 1);
        assert_eq!(secs(json!(600)), 600);
        assert_eq!(secs(json!(601)), 600);
        assert_eq!(secs(json!(u64::MAX)), 600, "no overflow later");
    }

    #[test]
    fn the_token_never_shows() {
        let s = ok(json!({"token": "SEKRIT-weixin-1"}));
        assert!(!format!("{s:?}").contains("SEKRIT"));
        for block in [
            json!({"token": 12345, "allowFrom": []}),
            json!({"token": ["SEKRIT-weixin-2"]}),
            json!({"token": "SEKRIT weixin 3"}),
        ] {
            let e = err(block);
            assert!(e.contains("channels.weixin.token"), "{e}");
            assert!(!e.contains("SEKRIT") && !e.contains("12345"), "{e}");
        }
    }
}
