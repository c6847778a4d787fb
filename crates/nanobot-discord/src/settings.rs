//! Resolved settings of the Discord channel (from `channels.discord`).

use nanobot_channels::{ChannelError, GroupPolicy, http_base_url};
use nanobot_config::{DiscordConfig, Secret};
use serenity::all::GatewayIntents;

use crate::NAME;

/// The intents the channel cannot work without: guild messages, direct messages and their text.
pub const REQUIRED_INTENTS: GatewayIntents = GatewayIntents::GUILD_MESSAGES
    .union(GatewayIntents::DIRECT_MESSAGES)
    .union(GatewayIntents::MESSAGE_CONTENT);

/// Largest attachment the channel downloads (bigger ones are mentioned by name only).
pub const DEFAULT_MAX_ATTACHMENT_BYTES: u32 = 20 * 1024 * 1024;

/// Everything the Discord channel needs, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct DiscordSettings {
    /// Bot token.
    pub token: Secret,
    /// `allowFrom`: user ids or usernames; empty denies everyone, `"*"` allows everyone.
    pub allow_from: Vec<String>,
    /// `allowChannels`: guild channel ids the bot listens in (empty = every channel it can see). Direct messages
    /// are not affected.
    pub allow_channels: Vec<String>,
    /// `groupPolicy` for guild channels.
    pub group_policy: GroupPolicy,
    /// Gateway intents (`intents`, with [`REQUIRED_INTENTS`] always added).
    pub intents: GatewayIntents,
    /// Reaction added to a received message (`readReceiptEmoji`; empty = none).
    pub read_receipt_emoji: String,
    /// REST base URL replacing `https://discord.com` (`baseUrl`; for local fakes and proxies that rewrite URLs).
    /// The gateway URL is then asked from that server too (`GET /api/v10/gateway`).
    pub api_base: Option<String>,
    /// HTTP(S) proxy for REST requests (`proxy`, with `proxyUsername` / `proxyPassword`).
    pub proxy: Option<ProxySettings>,
    /// Largest attachment downloaded, in bytes.
    pub max_attachment_bytes: u32,
}

/// An HTTP proxy with optional basic authentication.
#[derive(Debug, Clone, PartialEq)]
pub struct ProxySettings {
    /// Proxy URL.
    pub url: String,
    /// User name (empty = no authentication).
    pub username: String,
    /// Password.
    pub password: Secret,
}

impl DiscordSettings {
    /// Settings for `token` against the real Discord, with an empty (deny-all) allow-list.
    pub fn new(token: Secret) -> Self {
        Self {
            token,
            allow_from: Vec::new(),
            allow_channels: Vec::new(),
            group_policy: GroupPolicy::Mention,
            intents: GatewayIntents::GUILDS | REQUIRED_INTENTS,
            read_receipt_emoji: String::new(),
            api_base: None,
            proxy: None,
            max_attachment_bytes: DEFAULT_MAX_ATTACHMENT_BYTES,
        }
    }

    /// Validates `channels.discord`; errors name the offending key.
    pub fn from_config(config: &DiscordConfig) -> Result<Self, ChannelError> {
        let bad = |message: String| ChannelError::Config {
            channel: NAME.into(),
            message,
        };
        let token = config.token.expose().trim();
        if token.is_empty() {
            return Err(bad("channels.discord.token is empty".into()));
        }
        let mut s = Self::new(Secret::new(token.trim_start_matches("Bot ").trim()));
        s.allow_from.clone_from(&config.allow_from);
        s.allow_channels = config
            .allow_channels
            .iter()
            .map(|c| c.trim().to_string())
            .filter(|c| !c.is_empty())
            .collect();
        s.group_policy = config.group_policy;
        s.intents = GatewayIntents::from_bits_truncate(config.intents) | REQUIRED_INTENTS;
        s.read_receipt_emoji = config.read_receipt_emoji.trim().to_string();
        if let Some(base) = http_base_url(NAME, config.base_url.as_deref())? {
            s.api_base = Some(base);
        }
        if let Some(url) = config.proxy_url() {
            let url = url.trim();
            if !url.contains("://") {
                return Err(bad(format!("channels.discord.proxy {url:?} is not a URL")));
            }
            s.proxy = Some(ProxySettings {
                url: url.to_string(),
                username: config.proxy_username.clone(),
                password: config.proxy_password.clone(),
            });
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_token_names_the_key() {
        let err = DiscordSettings::from_config(&DiscordConfig::default()).unwrap_err();
        assert!(err.to_string().contains("channels.discord.token"), "{err}");
    }

    #[test]
    fn reads_the_config_and_always_keeps_the_message_intents() {
        let mut c = DiscordConfig {
            token: Secret::new("Bot abc.def"),
            allow_from: vec!["42".into()],
            allow_channels: vec![" 7 ".into(), String::new()],
            intents: GatewayIntents::GUILDS.bits(),
            base_url: Some("http://127.0.0.1:9/".into()),
            ..DiscordConfig::default()
        };
        let s = DiscordSettings::from_config(&c).unwrap();
        assert_eq!(s.token.expose(), "abc.def");
        assert_eq!(s.allow_channels, ["7"]);
        assert!(s.intents.contains(REQUIRED_INTENTS | GatewayIntents::GUILDS));
        assert_eq!(s.api_base.as_deref(), Some("http://127.0.0.1:9"));
        assert_eq!(s.read_receipt_emoji, "👀");
        assert!(s.proxy.is_none());

        c.base_url = Some("discord.local".into());
        let err = DiscordSettings::from_config(&c).unwrap_err();
        assert!(err.to_string().contains("channels.discord.baseUrl"), "{err}");

        c.base_url = None;
        c.proxy = Some("http://proxy:3128".into());
        c.proxy_username = "u".into();
        let p = DiscordSettings::from_config(&c).unwrap().proxy.unwrap();
        assert_eq!((p.url.as_str(), p.username.as_str()), ("http://proxy:3128", "u"));
    }

    #[test]
    fn default_config_intents_are_the_python_default() {
        let c = DiscordConfig {
            token: Secret::new("t"),
            ..DiscordConfig::default()
        };
        let s = DiscordSettings::from_config(&c).unwrap();
        assert_eq!(s.intents.bits(), 37377);
    }

    #[test]
    fn debug_hides_the_token() {
        let s = DiscordSettings::new(Secret::new("SUPERSECRET"));
        assert!(!format!("{s:?}").contains("SUPERSECRET"));
    }
}
