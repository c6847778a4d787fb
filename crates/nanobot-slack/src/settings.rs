//! Resolved settings of the Slack channel (from `channels.slack`).

use nanobot_channels::{ChannelError, GroupPolicy, http_base_url};
use nanobot_config::{DmPolicy, Secret, SlackConfig};

use crate::NAME;

/// Slack's Web API base URL.
pub const DEFAULT_API_URL: &str = "https://slack.com/api";

/// Largest received file the channel downloads (bigger ones are mentioned by name only).
pub const DEFAULT_MAX_FILE_BYTES: u64 = 20 * 1024 * 1024;

/// Everything the Slack channel needs, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct SlackSettings {
    /// App-level token (`xapp-…`) that opens Socket Mode connections (`appToken`).
    pub app_token: Secret,
    /// Bot token (`xoxb-…`) for the Web API (`botToken`).
    pub bot_token: Secret,
    /// `allowFrom`: user ids; empty denies everyone, `"*"` allows everyone.
    pub allow_from: Vec<String>,
    /// `groupPolicy` for channels (`open` with `groupRequireMention` behaves as `mention`).
    pub group_policy: GroupPolicy,
    /// `groupAllowFrom`: channel ids answered under the `allowlist` policy.
    pub group_allow_from: Vec<String>,
    /// `dm.enabled`: whether direct messages are answered at all.
    pub dm_enabled: bool,
    /// `dm.policy` + `dm.allowFrom`: with `allowlist`, only these users may write directly (on top of
    /// `allowFrom`).
    pub dm_allow_from: Option<Vec<String>>,
    /// `replyInThread`: answer channel messages in a thread under them.
    pub reply_in_thread: bool,
    /// `reactEmoji`: reaction added to a received message while the agent works (empty = none).
    pub react_emoji: String,
    /// `doneEmoji`: reaction that replaces it when the reply was sent (empty = none).
    pub done_emoji: String,
    /// `includeThreadContext` + `threadContextLimit`: when the bot is first addressed inside an existing thread,
    /// give the model up to this many earlier messages of it (0 = never).
    pub thread_context_limit: u32,
    /// Web API base URL (`baseUrl`, default [`DEFAULT_API_URL`]); `apps.connections.open` goes there too.
    pub api_url: String,
    /// Socket Mode connections kept open at once (Slack delivers each event on one of them).
    pub socket_connections: u32,
    /// Largest received file downloaded, in bytes.
    pub max_file_bytes: u64,
}

impl SlackSettings {
    /// Settings for these tokens against the real Slack, with an empty (deny-all) allow-list.
    pub fn new(app_token: Secret, bot_token: Secret) -> Self {
        Self {
            app_token,
            bot_token,
            allow_from: Vec::new(),
            group_policy: GroupPolicy::Mention,
            group_allow_from: Vec::new(),
            dm_enabled: true,
            dm_allow_from: None,
            reply_in_thread: true,
            react_emoji: "eyes".into(),
            done_emoji: "white_check_mark".into(),
            thread_context_limit: 20,
            api_url: DEFAULT_API_URL.into(),
            socket_connections: 2,
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
        }
    }

    /// Validates `channels.slack`; errors name the offending key.
    pub fn from_config(config: &SlackConfig) -> Result<Self, ChannelError> {
        let bad = |message: String| ChannelError::Config {
            channel: NAME.into(),
            message,
        };
        if !config.mode.trim().eq_ignore_ascii_case("socket") {
            return Err(bad(format!(
                "channels.slack.mode {:?} is not supported; use \"socket\" (Socket Mode)",
                config.mode
            )));
        }
        let app_token = config.app_token.expose().trim();
        if app_token.is_empty() {
            return Err(bad(
                "channels.slack.appToken is empty (an xapp-… app-level token)".into(),
            ));
        }
        let bot_token = config.bot_token.expose().trim();
        if bot_token.is_empty() {
            return Err(bad(
                "channels.slack.botToken is empty (an xoxb-… bot token)".into()
            ));
        }
        let mut s = Self::new(Secret::new(app_token), Secret::new(bot_token));
        s.allow_from.clone_from(&config.allow_from);
        s.group_policy = match config.group_policy {
            GroupPolicy::Open if config.group_require_mention => GroupPolicy::Mention,
            other => other,
        };
        s.group_allow_from = trimmed(&config.group_allow_from);
        s.dm_enabled = config.dm.enabled;
        s.dm_allow_from = (config.dm.policy == DmPolicy::Allowlist).then(|| trimmed(&config.dm.allow_from));
        s.reply_in_thread = config.reply_in_thread;
        s.react_emoji = emoji_name(&config.react_emoji);
        s.done_emoji = emoji_name(&config.done_emoji);
        s.thread_context_limit = if config.include_thread_context {
            config.thread_context_limit.min(200)
        } else {
            0
        };
        if let Some(base) = http_base_url(NAME, config.base_url.as_deref())? {
            s.api_url = base;
        }
        if let Some(proxy) = config.proxy_url() {
            tracing::warn!(
                proxy,
                "slack: channels.slack.proxy is not supported by this version and is ignored"
            );
        }
        Ok(s)
    }
}

fn trimmed(list: &[String]) -> Vec<String> {
    list.iter()
        .map(|c| c.trim().to_string())
        .filter(|c| !c.is_empty())
        .collect()
}

/// `":eyes:"` → `"eyes"` (Slack's API takes reaction names without colons).
fn emoji_name(raw: &str) -> String {
    raw.trim().trim_matches(':').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> SlackConfig {
        SlackConfig {
            app_token: Secret::new("xapp-1"),
            bot_token: Secret::new("xoxb-1"),
            ..SlackConfig::default()
        }
    }

    #[test]
    fn missing_tokens_and_webhook_mode_name_the_key() {
        let err = SlackSettings::from_config(&SlackConfig::default()).unwrap_err();
        assert!(err.to_string().contains("channels.slack.appToken"), "{err}");
        let mut c = config();
        c.bot_token = Secret::default();
        let err = SlackSettings::from_config(&c).unwrap_err();
        assert!(err.to_string().contains("channels.slack.botToken"), "{err}");
        c = config();
        c.mode = "webhook".into();
        let err = SlackSettings::from_config(&c).unwrap_err();
        assert!(err.to_string().contains("channels.slack.mode"), "{err}");
    }

    #[test]
    fn reads_the_config() {
        let mut c = config();
        c.group_policy = GroupPolicy::Open;
        c.group_require_mention = true;
        c.react_emoji = ":eyes:".into();
        c.base_url = Some("http://127.0.0.1:4000/api/".into());
        c.dm.policy = DmPolicy::Allowlist;
        c.dm.allow_from = vec![" U1 ".into()];
        let s = SlackSettings::from_config(&c).unwrap();
        assert_eq!(
            s.group_policy,
            GroupPolicy::Mention,
            "groupRequireMention turns open into mention"
        );
        assert_eq!(s.react_emoji, "eyes");
        assert_eq!(s.done_emoji, "white_check_mark");
        assert_eq!(s.api_url, "http://127.0.0.1:4000/api");
        assert_eq!(s.dm_allow_from, Some(vec!["U1".to_string()]));
        assert!(s.reply_in_thread);
        assert_eq!(s.thread_context_limit, 20);
        c.include_thread_context = false;
        assert_eq!(SlackSettings::from_config(&c).unwrap().thread_context_limit, 0);

        c.base_url = Some("slack.local".into());
        assert!(
            SlackSettings::from_config(&c)
                .unwrap_err()
                .to_string()
                .contains("baseUrl")
        );
    }

    #[test]
    fn debug_hides_the_tokens() {
        let s = SlackSettings::new(Secret::new("xapp-SECRET1"), Secret::new("xoxb-SECRET2"));
        let shown = format!("{s:?}");
        assert!(
            !shown.contains("SECRET1") && !shown.contains("SECRET2"),
            "{shown}"
        );
    }
}
