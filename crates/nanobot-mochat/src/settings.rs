//! Resolved settings of the Mochat channel, read from the raw `channels.mochat` block (0.3.5's keys).

use std::collections::BTreeMap;
use std::time::Duration;

use nanobot_channels::{ChannelError, http_base_url};
use nanobot_config::Secret;
use serde::Deserialize;

use crate::NAME;

/// Mochat's default server.
pub const DEFAULT_BASE_URL: &str = "https://mochat.io";

/// When messages of a panel are answered (`replyDelayMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyDelayMode {
    /// `"non-mention"` (0.3.5's default): in panels, messages that do not mention the agent are buffered and
    /// handed over together after `replyDelayMs`, or at once with the next message that mentions it.
    NonMention,
    /// `"off"` (any other value in 0.3.5): every message is handed over at once.
    Off,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct Mention {
    require_in_groups: bool,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct GroupRule {
    require_mention: bool,
}

/// The `channels.mochat` block as written in `config.json`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct MochatConfig {
    base_url: String,
    socket_url: String,
    socket_path: String,
    socket_disable_msgpack: bool,
    socket_reconnect_delay_ms: u64,
    socket_max_reconnect_delay_ms: u64,
    socket_connect_timeout_ms: u64,
    refresh_interval_ms: u64,
    watch_timeout_ms: u64,
    watch_limit: u64,
    retry_delay_ms: u64,
    max_retry_attempts: u64,
    claw_token: Secret,
    agent_user_id: String,
    sessions: Vec<String>,
    panels: Vec<String>,
    allow_from: Vec<String>,
    mention: Mention,
    groups: BTreeMap<String, GroupRule>,
    reply_delay_mode: String,
    reply_delay_ms: u64,
}

impl Default for MochatConfig {
    fn default() -> Self {
        Self {
            base_url: DEFAULT_BASE_URL.into(),
            socket_url: String::new(),
            socket_path: "/socket.io".into(),
            socket_disable_msgpack: false,
            socket_reconnect_delay_ms: 1000,
            socket_max_reconnect_delay_ms: 10_000,
            socket_connect_timeout_ms: 10_000,
            refresh_interval_ms: 30_000,
            watch_timeout_ms: 25_000,
            watch_limit: 100,
            retry_delay_ms: 500,
            max_retry_attempts: 0,
            claw_token: Secret::default(),
            agent_user_id: String::new(),
            sessions: Vec::new(),
            panels: Vec::new(),
            allow_from: Vec::new(),
            mention: Mention::default(),
            groups: BTreeMap::new(),
            reply_delay_mode: "non-mention".into(),
            reply_delay_ms: 120_000,
        }
    }
}

/// Everything the Mochat channel needs, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct MochatSettings {
    /// `baseUrl`: the HTTP API.
    pub base_url: String,
    /// The Socket.IO server (`socketUrl`, else `baseUrl`).
    pub socket_url: String,
    /// `socketPath` (default `/socket.io`), with a leading `/` and no trailing one.
    pub socket_path: String,
    /// `socketReconnectDelayMs`: first wait before reconnecting the socket.
    pub reconnect_delay: Duration,
    /// `socketMaxReconnectDelayMs`: longest wait between socket reconnections.
    pub max_reconnect_delay: Duration,
    /// `socketConnectTimeoutMs`: bound of connecting and joining the socket.
    pub connect_timeout: Duration,
    /// `refreshIntervalMs`: how often `"*"` sessions / panels are rediscovered and panels polled in fallback.
    pub refresh_interval: Duration,
    /// `watchTimeoutMs`: the long-poll time asked of `/api/claw/sessions/watch`.
    pub watch_timeout: Duration,
    /// `watchLimit`.
    pub watch_limit: u64,
    /// `retryDelayMs`: wait after a failed fallback poll.
    pub retry_delay: Duration,
    /// `maxRetryAttempts`: socket reconnections before giving up on the socket (0: never); polling goes on.
    pub max_retry_attempts: u64,
    /// `clawToken`.
    pub claw_token: Secret,
    /// `agentUserId`: the agent's own user id (its messages are skipped; mentions of it are detected).
    pub agent_user_id: String,
    /// `sessions` (`"*"`: every session of the agent).
    pub sessions: Vec<String>,
    /// `panels` (`"*"`: every panel of the agent's group).
    pub panels: Vec<String>,
    /// `allowFrom`: author user ids; empty denies everyone, `"*"` allows everyone.
    pub allow_from: Vec<String>,
    /// `mention.requireInGroups`.
    pub require_mention_in_groups: bool,
    /// `groups`: per group or panel id (or `"*"`), whether a mention is required.
    pub group_rules: BTreeMap<String, bool>,
    /// `replyDelayMode`.
    pub reply_delay_mode: ReplyDelayMode,
    /// `replyDelayMs`.
    pub reply_delay: Duration,
}

fn ms(n: u64, floor: u64) -> Duration {
    Duration::from_millis(n.max(floor))
}

impl MochatSettings {
    /// Validates the raw `channels.mochat` block; errors name the offending key, never the token.
    pub fn from_block(block: &serde_json::Value) -> Result<Self, ChannelError> {
        let bad = |message: String| ChannelError::Config {
            channel: NAME.into(),
            message,
        };
        let c: MochatConfig =
            serde_json::from_value(block.clone()).map_err(|e| bad(format!("channels.mochat: {e}")))?;
        if c.claw_token.expose().trim().is_empty() {
            return Err(bad(
                "channels.mochat.clawToken is empty (the agent's claw token)".into()
            ));
        }
        let base_url = http_base_url(NAME, Some(&c.base_url))?
            .ok_or_else(|| bad("channels.mochat.baseUrl is empty".into()))?;
        let socket_url = match http_base_url(NAME, Some(&c.socket_url)) {
            Ok(Some(u)) => u,
            Ok(None) => base_url.clone(),
            Err(_) => {
                return Err(bad(
                    "channels.mochat.socketUrl must start with http:// or https://".into(),
                ));
            }
        };
        let path = c.socket_path.trim().trim_matches('/');
        let socket_path = format!("/{}", if path.is_empty() { "socket.io" } else { path });
        if c.socket_disable_msgpack {
            tracing::debug!("mochat: socketDisableMsgpack is set; the socket always uses JSON here");
        }
        Ok(Self {
            base_url,
            socket_url,
            socket_path,
            reconnect_delay: ms(c.socket_reconnect_delay_ms, 100),
            max_reconnect_delay: ms(c.socket_max_reconnect_delay_ms, 100),
            connect_timeout: ms(c.socket_connect_timeout_ms, 1000),
            refresh_interval: ms(c.refresh_interval_ms, 1000),
            watch_timeout: ms(c.watch_timeout_ms, 0),
            watch_limit: c.watch_limit.max(1),
            retry_delay: ms(c.retry_delay_ms, 100),
            max_retry_attempts: c.max_retry_attempts,
            claw_token: Secret::new(c.claw_token.expose().trim()),
            agent_user_id: c.agent_user_id.trim().to_string(),
            sessions: clean(c.sessions),
            panels: clean(c.panels),
            allow_from: c.allow_from,
            require_mention_in_groups: c.mention.require_in_groups,
            group_rules: c
                .groups
                .into_iter()
                .map(|(k, v)| (k, v.require_mention))
                .collect(),
            reply_delay_mode: if c.reply_delay_mode == "non-mention" {
                ReplyDelayMode::NonMention
            } else {
                ReplyDelayMode::Off
            },
            reply_delay: Duration::from_millis(c.reply_delay_ms),
        })
    }

    /// Whether a message in panel `panel_id` of group `group_id` must mention the agent.
    pub fn requires_mention(&self, panel_id: &str, group_id: &str) -> bool {
        [group_id, panel_id, "*"]
            .into_iter()
            .filter(|k| !k.is_empty())
            .find_map(|k| self.group_rules.get(k).copied())
            .unwrap_or(self.require_mention_in_groups)
    }
}

fn clean(ids: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = ids
        .into_iter()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_the_python_keys() {
        let err = MochatSettings::from_block(&json!({"enabled": true})).unwrap_err();
        assert!(err.to_string().contains("channels.mochat.clawToken"), "{err}");
        let err = MochatSettings::from_block(&json!({"clawToken": "TOK3N", "watchLimit": "x"})).unwrap_err();
        assert!(err.to_string().contains("channels.mochat"), "{err}");
        assert!(!err.to_string().contains("TOK3N"));
        let s = MochatSettings::from_block(&json!({"clawToken": "TOK3N", "baseUrl": "http://127.0.0.1:5/",
            "socketPath": "sio/", "sessions": ["s2", " s1 ", "s1", "*"], "mention": {"requireInGroups": true},
            "groups": {"g1": {"requireMention": false}}, "replyDelayMode": "off", "replyDelayMs": 5}))
        .unwrap();
        assert_eq!(s.base_url, "http://127.0.0.1:5");
        assert_eq!(s.socket_url, "http://127.0.0.1:5");
        assert_eq!(s.socket_path, "/sio");
        assert_eq!(s.sessions, ["*", "s1", "s2"]);
        assert_eq!(s.reply_delay_mode, ReplyDelayMode::Off);
        assert!(s.requires_mention("p1", "g2"));
        assert!(!s.requires_mention("p1", "g1"));
        assert!(!format!("{s:?}").contains("TOK3N"));
        let s = MochatSettings::from_block(&json!({"clawToken": "t"})).unwrap();
        assert_eq!(s.base_url, DEFAULT_BASE_URL);
        assert_eq!(s.reply_delay_mode, ReplyDelayMode::NonMention);
        assert_eq!(s.reply_delay, Duration::from_secs(120));
    }
}
