//! Resolved settings of the Mattermost channel, read from the raw `channels.mattermost` block (0.3.5's keys, in
//! camelCase or snake_case).

use nanobot_channels::ChannelError;
use nanobot_config::Secret;
use serde::Deserialize;

use crate::NAME;

/// Mattermost's longest post, in characters: longer answers are split.
pub const MAX_POST_CHARS: usize = 16383;
/// Largest file received or sent.
pub const MAX_FILE_BYTES: u64 = 50 * 1024 * 1024;

/// Which channel posts are taken (`groupPolicy`, `groupPolicyInThread`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelPolicy {
    /// Every post.
    Open,
    /// Posts that @mention the bot.
    Mention,
    /// Posts in the channels of `groupAllowFrom`.
    Allowlist,
}

/// What a sender is matched by against `allowFrom` (`allowFromMatchMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchMode {
    /// The user id.
    Id,
    /// The username (looked up once per user).
    Username,
    /// The e-mail address (looked up once per user, compared without case).
    Email,
}

/// The `channels.mattermost` block as written (unknown keys are ignored, like 0.3.5 does).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct Raw {
    #[serde(alias = "server_url")]
    server_url: String,
    token: Secret,
    #[serde(alias = "team_id")]
    team_id: String,
    #[serde(alias = "group_policy")]
    group_policy: Option<String>,
    #[serde(alias = "group_policy_in_thread")]
    group_policy_in_thread: Option<String>,
    #[serde(alias = "allow_from")]
    allow_from: Vec<String>,
    #[serde(alias = "allow_from_match_mode")]
    allow_from_match_mode: Option<String>,
    #[serde(alias = "group_allow_from")]
    group_allow_from: Vec<String>,
    #[serde(alias = "reply_in_thread")]
    reply_in_thread: Option<bool>,
    #[serde(alias = "include_thread_context")]
    include_thread_context: Option<bool>,
    #[serde(alias = "thread_context_limit")]
    thread_context_limit: Option<u32>,
    #[serde(alias = "react_emoji")]
    react_emoji: Option<String>,
    #[serde(alias = "done_emoji")]
    done_emoji: Option<String>,
    dm: RawDm,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct RawDm {
    enabled: Option<bool>,
    policy: Option<String>,
    #[serde(alias = "allow_from")]
    allow_from: Vec<String>,
}

/// Everything the Mattermost channel needs, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct MattermostSettings {
    /// `serverUrl`, without a trailing `/`.
    pub server_url: String,
    /// `token`: the bot account's access token.
    pub token: Secret,
    /// `teamId`: when set, channel posts of other teams are ignored.
    pub team_id: String,
    /// `groupPolicy`.
    pub group_policy: ChannelPolicy,
    /// `groupPolicyInThread` (default: `groupPolicy`).
    pub group_policy_in_thread: ChannelPolicy,
    /// `allowFrom`: who may talk to the bot (`"*"`: everyone).
    pub allow_from: Vec<String>,
    /// `allowFromMatchMode`.
    pub match_mode: MatchMode,
    /// `groupAllowFrom`: the channel ids of `groupPolicy: "allowlist"`.
    pub group_allow_from: Vec<String>,
    /// `replyInThread`: answers go into the post's thread (a new one under a channel post).
    pub reply_in_thread: bool,
    /// `includeThreadContext`: a post in a thread brings the thread's earlier posts, once per thread.
    pub include_thread_context: bool,
    /// `threadContextLimit`: how many posts of the thread are asked for.
    pub thread_context_limit: u32,
    /// `reactEmoji`: put on a post while it is answered (empty: none).
    pub react_emoji: String,
    /// `doneEmoji`: put on it once answered (empty: none).
    pub done_emoji: String,
    /// `dm.enabled`: direct messages are read.
    pub dm_enabled: bool,
    /// `dm.policy` is `allowlist`: direct messages only from `dm.allowFrom` (else from `allowFrom` and
    /// `dm.allowFrom`).
    pub dm_allowlist_only: bool,
    /// `dm.allowFrom`.
    pub dm_allow_from: Vec<String>,
}

fn config(message: String) -> ChannelError {
    ChannelError::Config {
        channel: NAME.to_owned(),
        message,
    }
}

fn policy(value: Option<&str>, key: &str, default: ChannelPolicy) -> Result<ChannelPolicy, ChannelError> {
    match value.map(str::trim) {
        None | Some("") => Ok(default),
        Some("open") => Ok(ChannelPolicy::Open),
        Some("mention") => Ok(ChannelPolicy::Mention),
        Some("allowlist") => Ok(ChannelPolicy::Allowlist),
        Some(other) => Err(config(format!(
            "channels.{NAME}.{key} is {other:?}; expected \"open\", \"mention\" or \"allowlist\""
        ))),
    }
}

impl MattermostSettings {
    /// Reads the raw `channels.mattermost` block; an error names the key and never shows the token.
    pub fn from_block(block: &serde_json::Value) -> Result<Self, ChannelError> {
        let raw: Raw =
            serde_json::from_value(block.clone()).map_err(|e| config(format!("channels.{NAME}: {e}")))?;
        let server_url = raw.server_url.trim().trim_end_matches('/').to_owned();
        if !(server_url.starts_with("http://") || server_url.starts_with("https://")) {
            return Err(config(format!(
                "channels.{NAME}.serverUrl must be the server's http(s) address (e.g. https://chat.example.com)"
            )));
        }
        if raw.token.expose().trim().is_empty() {
            return Err(config(format!(
                "channels.{NAME}.token is empty: create a bot account and put its access token there"
            )));
        }
        let group_policy = policy(raw.group_policy.as_deref(), "groupPolicy", ChannelPolicy::Mention)?;
        let group_policy_in_thread = policy(
            raw.group_policy_in_thread.as_deref(),
            "groupPolicyInThread",
            group_policy,
        )?;
        let match_mode = match raw.allow_from_match_mode.as_deref().map(str::trim) {
            None | Some("" | "id") => MatchMode::Id,
            Some("username") => MatchMode::Username,
            Some("email") => MatchMode::Email,
            Some(other) => {
                return Err(config(format!(
                    "channels.{NAME}.allowFromMatchMode is {other:?}; expected \"id\", \"username\" or \"email\""
                )));
            }
        };
        let dm_allowlist_only = match raw.dm.policy.as_deref().map(str::trim) {
            None | Some("" | "open") => false,
            Some("allowlist") => true,
            Some(other) => {
                return Err(config(format!(
                    "channels.{NAME}.dm.policy is {other:?}; expected \"open\" or \"allowlist\""
                )));
            }
        };
        let trimmed = |list: Vec<String>| -> Vec<String> {
            list.into_iter()
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect()
        };
        Ok(Self {
            server_url,
            token: raw.token,
            team_id: raw.team_id.trim().to_owned(),
            group_policy,
            group_policy_in_thread,
            allow_from: trimmed(raw.allow_from),
            match_mode,
            group_allow_from: trimmed(raw.group_allow_from),
            reply_in_thread: raw.reply_in_thread.unwrap_or(true),
            include_thread_context: raw.include_thread_context.unwrap_or(true),
            thread_context_limit: raw.thread_context_limit.unwrap_or(20).max(1),
            react_emoji: raw.react_emoji.unwrap_or_else(|| "eyes".into()).trim().to_owned(),
            done_emoji: raw
                .done_emoji
                .unwrap_or_else(|| "white_check_mark".into())
                .trim()
                .to_owned(),
            dm_enabled: raw.dm.enabled.unwrap_or(true),
            dm_allowlist_only,
            dm_allow_from: trimmed(raw.dm.allow_from),
        })
    }

    /// The WebSocket address: the server's, `ws(s)://…/api/v4/websocket`.
    pub fn ws_url(&self) -> String {
        let rest = self
            .server_url
            .strip_prefix("https://")
            .map(|r| format!("wss://{r}"))
            .or_else(|| {
                self.server_url
                    .strip_prefix("http://")
                    .map(|r| format!("ws://{r}"))
            })
            .unwrap_or_else(|| self.server_url.clone());
        format!("{rest}/api/v4/websocket")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_0_3_5_block_is_read_with_its_defaults() {
        let s = MattermostSettings::from_block(&json!({
            "enabled": true, "serverUrl": "https://chat.example.com/", "token": "tok-1", "allowFrom": ["u1"]
        }))
        .unwrap();
        assert_eq!(s.server_url, "https://chat.example.com");
        assert_eq!(s.ws_url(), "wss://chat.example.com/api/v4/websocket");
        assert_eq!(s.group_policy, ChannelPolicy::Mention);
        assert_eq!(
            s.group_policy_in_thread,
            ChannelPolicy::Mention,
            "inherits groupPolicy"
        );
        assert_eq!(s.match_mode, MatchMode::Id);
        assert!(s.reply_in_thread && s.include_thread_context && s.dm_enabled && !s.dm_allowlist_only);
        assert_eq!(
            (s.react_emoji.as_str(), s.done_emoji.as_str()),
            ("eyes", "white_check_mark")
        );
        assert_eq!(s.thread_context_limit, 20);
        let s = MattermostSettings::from_block(&json!({
            "server_url": "http://127.0.0.1:8065", "token": "t", "group_policy": "open",
            "groupPolicyInThread": "mention", "allowFromMatchMode": "username",
            "dm": {"policy": "allowlist", "allowFrom": ["alice"]}, "replyInThread": false
        }))
        .unwrap();
        assert_eq!(s.ws_url(), "ws://127.0.0.1:8065/api/v4/websocket");
        assert_eq!(
            (s.group_policy, s.group_policy_in_thread),
            (ChannelPolicy::Open, ChannelPolicy::Mention)
        );
        assert_eq!(s.match_mode, MatchMode::Username);
        assert!(s.dm_allowlist_only && !s.reply_in_thread);
        assert_eq!(s.dm_allow_from, ["alice"]);
    }

    #[test]
    fn bad_values_name_the_key_and_never_the_token() {
        for (block, says) in [
            (json!({"token": "SEKRIT-TOKEN"}), "channels.mattermost.serverUrl"),
            (
                json!({"serverUrl": "https://x", "token": ""}),
                "channels.mattermost.token is empty",
            ),
            (
                json!({"serverUrl": "https://x", "token": "SEKRIT-TOKEN", "groupPolicy": "sometimes"}),
                "channels.mattermost.groupPolicy",
            ),
            (
                json!({"serverUrl": "https://x", "token": "SEKRIT-TOKEN", "allowFromMatchMode": "phone"}),
                "allowFromMatchMode",
            ),
            (
                json!({"serverUrl": "https://x", "token": "SEKRIT-TOKEN", "dm": {"policy": "closed"}}),
                "channels.mattermost.dm.policy",
            ),
            (
                json!({"serverUrl": "https://x", "token": "SEKRIT-TOKEN", "replyInThread": "yes"}),
                "channels.mattermost",
            ),
        ] {
            let e = MattermostSettings::from_block(&block).unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
            assert!(!e.contains("SEKRIT-TOKEN"), "{e}");
        }
    }
}
