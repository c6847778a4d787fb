//! `channels`: global delivery settings and one block per chat app.

use serde::{Deserialize, Serialize};

use super::extra::{ChannelBlocks, Extra, string_list};
use crate::Secret;

/// Who may talk to the bot in a group chat.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GroupPolicy {
    /// Answer every message in the group.
    Open,
    /// Answer only when mentioned (or replied to).
    #[default]
    Mention,
    /// Answer only senders on the allow-list.
    Allowlist,
}

/// Who may talk to the bot in direct messages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DmPolicy {
    /// Everybody who passes the channel's `allowFrom`.
    #[default]
    Open,
    /// Only senders on the DM allow-list.
    Allowlist,
}

/// `channels`.
///
/// Telegram, Discord and Slack are typed; every other block (email, feishu, matrix, dingtalk, plugins …) is kept
/// as raw JSON in [`ChannelsConfig::other`] so it survives a round trip.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ChannelsConfig {
    /// Send progress messages (partial text while tools run) to channels.
    #[serde(alias = "send_progress")]
    pub send_progress: bool,
    /// Send tool-call hints ("🔧 read_file …") to channels.
    #[serde(alias = "send_tool_hints")]
    pub send_tool_hints: bool,
    /// Show model reasoning to users where the channel supports it.
    #[serde(alias = "show_reasoning")]
    pub show_reasoning: bool,
    /// Extract the text of received documents (PDF, DOCX …) for the model.
    #[serde(alias = "extract_document_text")]
    pub extract_document_text: bool,
    /// Retries of a failed outbound send (0–10).
    #[serde(alias = "send_max_retries")]
    pub send_max_retries: u32,
    /// Provider used to transcribe voice messages (`"groq"`, `"openai"` …).
    #[serde(alias = "transcription_provider")]
    pub transcription_provider: Option<String>,
    /// Language hint for transcription.
    #[serde(alias = "transcription_language")]
    pub transcription_language: Option<String>,
    /// Telegram.
    pub telegram: TelegramConfig,
    /// Discord.
    pub discord: DiscordConfig,
    /// Slack.
    pub slack: SlackConfig,
    /// Every other channel block, as raw JSON, in file order.
    #[serde(flatten)]
    pub other: ChannelBlocks,
}

impl Default for ChannelsConfig {
    fn default() -> Self {
        Self {
            send_progress: true,
            send_tool_hints: true,
            show_reasoning: true,
            extract_document_text: true,
            send_max_retries: 3,
            transcription_provider: Some("groq".into()),
            transcription_language: None,
            telegram: TelegramConfig::default(),
            discord: DiscordConfig::default(),
            slack: SlackConfig::default(),
            other: ChannelBlocks::default(),
        }
    }
}

/// How Telegram updates are received.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TelegramMode {
    /// Long polling with `getUpdates`.
    #[default]
    Polling,
    /// A webhook served on `webhookListenHost:webhookListenPort`.
    Webhook,
}

/// `channels.telegram`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TelegramConfig {
    /// Whether the channel runs.
    pub enabled: bool,
    /// Bot token from @BotFather.
    pub token: Secret,
    /// HTTP or SOCKS5 proxy URL (`""`/`null` = none).
    pub proxy: Option<String>,
    /// Allowed user ids or usernames. Empty denies everybody; `"*"` allows everybody.
    #[serde(alias = "allow_from", deserialize_with = "string_list")]
    pub allow_from: Vec<String>,
    /// Group chat policy.
    #[serde(alias = "group_policy")]
    pub group_policy: GroupPolicy,
    /// Polling or webhook.
    pub mode: TelegramMode,
    /// Quote the user's message in replies.
    #[serde(alias = "reply_to_message")]
    pub reply_to_message: bool,
    /// Reaction set on a received message while the agent works (`""` = none).
    #[serde(alias = "react_emoji")]
    pub react_emoji: String,
    /// HTTP connection pool size.
    #[serde(alias = "connection_pool_size")]
    pub connection_pool_size: u32,
    /// Seconds to wait for a pooled connection.
    #[serde(alias = "pool_timeout")]
    pub pool_timeout: f64,
    /// Stream replies by editing a message as text arrives.
    pub streaming: bool,
    /// Offer inline keyboards for choices.
    #[serde(alias = "inline_keyboards")]
    pub inline_keyboards: bool,
    /// Use rich (HTML) messages.
    #[serde(alias = "rich_messages")]
    pub rich_messages: bool,
    /// Minimum seconds between two edits of a streamed message.
    #[serde(alias = "stream_edit_interval")]
    pub stream_edit_interval: f64,
    /// Public URL Telegram posts updates to (webhook mode).
    #[serde(alias = "webhook_url")]
    pub webhook_url: String,
    /// Listen address of the webhook server.
    #[serde(alias = "webhook_listen_host")]
    pub webhook_listen_host: String,
    /// Listen port of the webhook server.
    #[serde(alias = "webhook_listen_port")]
    pub webhook_listen_port: u16,
    /// Path of the webhook endpoint.
    #[serde(alias = "webhook_path")]
    pub webhook_path: String,
    /// Secret token Telegram sends in `X-Telegram-Bot-Api-Secret-Token`.
    #[serde(alias = "webhook_secret_token")]
    pub webhook_secret_token: Secret,
    /// Maximum simultaneous webhook connections.
    #[serde(alias = "webhook_max_connections")]
    pub webhook_max_connections: u32,
    /// Bound on each request head the webhook server reads, in seconds (nanobot-rs; default 10). Not written
    /// when unset.
    #[serde(
        alias = "webhook_header_read_timeout_s",
        skip_serializing_if = "Option::is_none"
    )]
    pub webhook_header_read_timeout_s: Option<f64>,
    /// How long the webhook server keeps an idle connection, in seconds (nanobot-rs; default 60). Not written
    /// when unset.
    #[serde(alias = "webhook_idle_timeout_s", skip_serializing_if = "Option::is_none")]
    pub webhook_idle_timeout_s: Option<f64>,
    /// Bot API base URL (nanobot-rs only; for a local Bot API server or an emulator). Not written when unset.
    #[serde(alias = "base_url", skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// Keys this version does not model (kept on save).
    #[serde(flatten)]
    pub extra: Extra,
}

impl Default for TelegramConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            token: Secret::default(),
            proxy: Some(String::new()),
            allow_from: Vec::new(),
            group_policy: GroupPolicy::Mention,
            mode: TelegramMode::Polling,
            reply_to_message: false,
            react_emoji: "👀".into(),
            connection_pool_size: 32,
            pool_timeout: 5.0,
            streaming: true,
            inline_keyboards: false,
            rich_messages: false,
            stream_edit_interval: 0.6,
            webhook_url: String::new(),
            webhook_listen_host: "127.0.0.1".into(),
            webhook_listen_port: 8081,
            webhook_path: "/telegram".into(),
            webhook_secret_token: Secret::default(),
            webhook_max_connections: 4,
            webhook_header_read_timeout_s: None,
            webhook_idle_timeout_s: None,
            base_url: None,
            extra: Extra::default(),
        }
    }
}

/// `channels.discord`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DiscordConfig {
    /// Whether the channel runs.
    pub enabled: bool,
    /// Bot token.
    pub token: Secret,
    /// HTTP proxy URL (`""`/`null` = none).
    pub proxy: Option<String>,
    /// Proxy user name.
    #[serde(alias = "proxy_username")]
    pub proxy_username: String,
    /// Proxy password.
    #[serde(alias = "proxy_password")]
    pub proxy_password: Secret,
    /// Allowed user ids. Empty denies everybody; `"*"` allows everybody.
    #[serde(alias = "allow_from", deserialize_with = "string_list")]
    pub allow_from: Vec<String>,
    /// Channel ids the bot listens in (empty = all it can see).
    #[serde(alias = "allow_channels", deserialize_with = "string_list")]
    pub allow_channels: Vec<String>,
    /// Guild channel policy.
    #[serde(alias = "group_policy")]
    pub group_policy: GroupPolicy,
    /// Gateway intents bit mask.
    pub intents: u64,
    /// Reaction set when a message is received.
    #[serde(alias = "read_receipt_emoji")]
    pub read_receipt_emoji: String,
    /// Reaction set while the agent works.
    #[serde(alias = "working_emoji")]
    pub working_emoji: String,
    /// Seconds before the working reaction appears.
    #[serde(alias = "working_emoji_delay")]
    pub working_emoji_delay: f64,
    /// Stream replies by editing a message.
    pub streaming: bool,
    /// REST API base URL (nanobot-rs only; for fakes in tests). Not written when unset.
    #[serde(alias = "base_url", skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// Keys this version does not model (kept on save).
    #[serde(flatten)]
    pub extra: Extra,
}

impl Default for DiscordConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            token: Secret::default(),
            proxy: Some(String::new()),
            proxy_username: String::new(),
            proxy_password: Secret::default(),
            allow_from: Vec::new(),
            allow_channels: Vec::new(),
            group_policy: GroupPolicy::Mention,
            intents: 37377,
            read_receipt_emoji: "👀".into(),
            working_emoji: "🔧".into(),
            working_emoji_delay: 2.0,
            streaming: true,
            base_url: None,
            extra: Extra::default(),
        }
    }
}

/// `channels.slack`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SlackConfig {
    /// Whether the channel runs.
    pub enabled: bool,
    /// App-level token (`xapp-…`) for Socket Mode.
    #[serde(alias = "app_token")]
    pub app_token: Secret,
    /// Bot token (`xoxb-…`).
    #[serde(alias = "bot_token")]
    pub bot_token: Secret,
    /// Channel policy.
    #[serde(alias = "group_policy")]
    pub group_policy: GroupPolicy,
    /// `"socket"` (Socket Mode) or `"webhook"` (Events API over HTTP).
    pub mode: String,
    /// Path of the Events API endpoint (webhook mode).
    #[serde(alias = "webhook_path")]
    pub webhook_path: String,
    /// Reply in a thread under the user's message.
    #[serde(alias = "reply_in_thread")]
    pub reply_in_thread: bool,
    /// Reaction set while the agent works.
    #[serde(alias = "react_emoji")]
    pub react_emoji: String,
    /// Reaction set when the reply is done.
    #[serde(alias = "done_emoji")]
    pub done_emoji: String,
    /// Give the model the thread's earlier messages.
    #[serde(alias = "include_thread_context")]
    pub include_thread_context: bool,
    /// How many thread messages to include.
    #[serde(alias = "thread_context_limit")]
    pub thread_context_limit: u32,
    /// Allowed user ids. Empty denies everybody; `"*"` allows everybody.
    #[serde(alias = "allow_from", deserialize_with = "string_list")]
    pub allow_from: Vec<String>,
    /// Channel ids allowed under the `allowlist` group policy.
    #[serde(alias = "group_allow_from", deserialize_with = "string_list")]
    pub group_allow_from: Vec<String>,
    /// Require a mention in channels even under the `open` policy.
    #[serde(alias = "group_require_mention")]
    pub group_require_mention: bool,
    /// Direct-message settings.
    pub dm: SlackDmConfig,
    /// HTTP proxy URL (`""`/`null` = none).
    pub proxy: Option<String>,
    /// Signing secret that verifies Events API requests (webhook mode). Not written when unset.
    #[serde(alias = "signing_secret", skip_serializing_if = "Option::is_none")]
    pub signing_secret: Option<Secret>,
    /// Web API base URL (nanobot-rs only; for fakes in tests). Not written when unset.
    #[serde(alias = "base_url", skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// Keys this version does not model (kept on save).
    #[serde(flatten)]
    pub extra: Extra,
}

impl Default for SlackConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            app_token: Secret::default(),
            bot_token: Secret::default(),
            group_policy: GroupPolicy::Mention,
            mode: "socket".into(),
            webhook_path: "/slack/events".into(),
            reply_in_thread: true,
            react_emoji: "eyes".into(),
            done_emoji: "white_check_mark".into(),
            include_thread_context: true,
            thread_context_limit: 20,
            allow_from: Vec::new(),
            group_allow_from: Vec::new(),
            group_require_mention: false,
            dm: SlackDmConfig::default(),
            proxy: Some(String::new()),
            signing_secret: None,
            base_url: None,
            extra: Extra::default(),
        }
    }
}

/// `channels.slack.dm`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SlackDmConfig {
    /// Whether the bot answers direct messages.
    pub enabled: bool,
    /// DM policy.
    pub policy: DmPolicy,
    /// Users allowed under the `allowlist` policy.
    #[serde(alias = "allow_from", deserialize_with = "string_list")]
    pub allow_from: Vec<String>,
    /// Keys this version does not model (kept on save).
    #[serde(flatten)]
    pub extra: Extra,
}

impl Default for SlackDmConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            policy: DmPolicy::Open,
            allow_from: Vec::new(),
            extra: Extra::default(),
        }
    }
}

/// A proxy setting where `""` means "none".
pub(crate) fn non_empty(s: &Option<String>) -> Option<&str> {
    s.as_deref().filter(|s| !s.is_empty())
}

impl TelegramConfig {
    /// The proxy URL, if one is set and not empty.
    pub fn proxy_url(&self) -> Option<&str> {
        non_empty(&self.proxy)
    }
}

impl DiscordConfig {
    /// The proxy URL, if one is set and not empty.
    pub fn proxy_url(&self) -> Option<&str> {
        non_empty(&self.proxy)
    }
}

impl SlackConfig {
    /// The proxy URL, if one is set and not empty.
    pub fn proxy_url(&self) -> Option<&str> {
        non_empty(&self.proxy)
    }
}

/// `channels.feishu` (Feishu / Lark, long-connection mode). Not a field of [`ChannelsConfig`]: the block stays
/// raw in [`ChannelsConfig::other`] and the adapter reads it with [`FeishuConfig::from_block`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FeishuConfig {
    /// Whether the channel runs.
    pub enabled: bool,
    /// App ID (`cli_…`).
    #[serde(alias = "app_id")]
    pub app_id: String,
    /// App secret.
    #[serde(alias = "app_secret")]
    pub app_secret: Secret,
    /// Event encryption key (webhook mode only; unused by the long connection).
    #[serde(alias = "encrypt_key")]
    pub encrypt_key: Secret,
    /// Event verification token (webhook mode only; unused by the long connection).
    #[serde(alias = "verification_token")]
    pub verification_token: Secret,
    /// Allowed sender open_ids. Empty denies everybody; `"*"` allows everybody.
    #[serde(alias = "allow_from", deserialize_with = "string_list")]
    pub allow_from: Vec<String>,
    /// Reaction (Feishu emoji type) added to a received message.
    #[serde(alias = "react_emoji")]
    pub react_emoji: String,
    /// Reaction added when the reply is done (`null` = none).
    #[serde(alias = "done_emoji")]
    pub done_emoji: Option<String>,
    /// Prefix of tool-hint lines.
    #[serde(alias = "tool_hint_prefix")]
    pub tool_hint_prefix: String,
    /// Group policy: `open` or `mention`.
    #[serde(alias = "group_policy")]
    pub group_policy: GroupPolicy,
    /// Quote the user's message in the reply.
    #[serde(alias = "reply_to_message")]
    pub reply_to_message: bool,
    /// Stream replies as updatable cards.
    pub streaming: bool,
    /// `feishu` (open.feishu.cn) or `lark` (open.larksuite.com).
    pub domain: String,
    /// One session per topic (thread) in groups, rather than one per group.
    #[serde(alias = "topic_isolation")]
    pub topic_isolation: bool,
    /// Open API base URL (nanobot-rs only; for fakes in tests). Not written when unset.
    #[serde(alias = "base_url", skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// Keys this version does not model (kept on save).
    #[serde(flatten)]
    pub extra: Extra,
}

impl Default for FeishuConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            app_id: String::new(),
            app_secret: Secret::default(),
            encrypt_key: Secret::default(),
            verification_token: Secret::default(),
            allow_from: Vec::new(),
            react_emoji: "THUMBSUP".into(),
            done_emoji: None,
            tool_hint_prefix: "\u{1f527}".into(),
            group_policy: GroupPolicy::Mention,
            reply_to_message: false,
            streaming: true,
            domain: "feishu".into(),
            topic_isolation: true,
            base_url: None,
            extra: Extra::default(),
        }
    }
}

/// `channels.dingtalk` (DingTalk, Stream mode). Like [`FeishuConfig`], read from the raw block with
/// [`DingTalkConfig::from_block`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DingTalkConfig {
    /// Whether the channel runs.
    pub enabled: bool,
    /// Client ID (AppKey) of the robot's app; also the `robotCode`.
    #[serde(alias = "client_id")]
    pub client_id: String,
    /// Client secret (AppSecret).
    #[serde(alias = "client_secret")]
    pub client_secret: Secret,
    /// Allowed sender staff ids. Empty denies everybody; `"*"` allows everybody.
    #[serde(alias = "allow_from", deserialize_with = "string_list")]
    pub allow_from: Vec<String>,
    /// Follow redirects when fetching remote media to send.
    #[serde(alias = "allow_remote_media_redirects")]
    pub allow_remote_media_redirects: bool,
    /// Hosts redirects may lead to (empty = the original host only).
    #[serde(
        alias = "remote_media_redirect_allowed_hosts",
        deserialize_with = "string_list"
    )]
    pub remote_media_redirect_allowed_hosts: Vec<String>,
    /// One session per user in group chats, rather than one per group.
    #[serde(alias = "group_user_isolation")]
    pub group_user_isolation: bool,
    /// Answer group chats only; direct messages get a notice.
    #[serde(alias = "disable_private_chat")]
    pub disable_private_chat: bool,
    /// Open API base URL (nanobot-rs only; for fakes in tests). Not written when unset.
    #[serde(alias = "base_url", skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// Keys this version does not model (kept on save).
    #[serde(flatten)]
    pub extra: Extra,
}

impl FeishuConfig {
    /// Reads the raw `channels.feishu` block; the error names the block and the bad key.
    pub fn from_block(block: &serde_json::Value) -> Result<Self, String> {
        serde_json::from_value(block.clone()).map_err(|e| format!("channels.feishu: {e}"))
    }
}

impl DingTalkConfig {
    /// Reads the raw `channels.dingtalk` block; the error names the block and the bad key.
    pub fn from_block(block: &serde_json::Value) -> Result<Self, String> {
        serde_json::from_value(block.clone()).map_err(|e| format!("channels.dingtalk: {e}"))
    }
}
