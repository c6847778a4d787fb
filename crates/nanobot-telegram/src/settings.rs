//! Resolved settings of the Telegram channel (from `channels.telegram`).

use std::time::Duration;

use nanobot_channels::{ChannelError, GroupPolicy};
use nanobot_config::{Secret, TelegramConfig, TelegramMode};
use url::Url;

const CHANNEL: &str = "telegram";

/// Webhook mode settings.
#[derive(Debug, Clone, PartialEq)]
pub struct WebhookSettings {
    /// Public HTTPS URL Telegram posts updates to (`webhookUrl`).
    pub url: Url,
    /// Address the local server listens on (`webhookListenHost`).
    pub listen_host: String,
    /// Port the local server listens on (`webhookListenPort`; 0 picks a free port).
    pub listen_port: u16,
    /// Path of the endpoint (`webhookPath`).
    pub path: String,
    /// Expected `X-Telegram-Bot-Api-Secret-Token` (`webhookSecretToken`; empty = not checked).
    pub secret_token: Secret,
    /// `max_connections` for `setWebhook`.
    pub max_connections: u8,
    /// Bound on each request head of the local server: slow-header clients are closed
    /// (`webhookHeaderReadTimeoutS`, 10 s).
    pub header_read_timeout: std::time::Duration,
    /// How long the local server keeps an idle connection (`webhookIdleTimeoutS`, 60 s).
    pub idle_timeout: std::time::Duration,
}

/// Everything the channel needs, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct TelegramSettings {
    /// Bot token.
    pub token: Secret,
    /// `allowFrom`.
    pub allow_from: Vec<String>,
    /// `groupPolicy`.
    pub group_policy: GroupPolicy,
    /// Bot API base URL (`baseUrl`); `None` = the public API.
    pub api_url: Option<Url>,
    /// HTTP(S)/SOCKS5 proxy for every Bot API request (`proxy`).
    pub proxy: Option<String>,
    /// Quote the user's message in the reply (`replyToMessage`).
    pub reply_to_message: bool,
    /// Show streamed answers by editing a message (`streaming`).
    pub streaming: bool,
    /// Minimum time between two edits of a streamed message (`streamEditInterval`).
    pub stream_edit_interval: Duration,
    /// Long-poll timeout of `getUpdates`.
    pub poll_timeout: Duration,
    /// `Some` in webhook mode.
    pub webhook: Option<WebhookSettings>,
}

impl TelegramSettings {
    /// Polling settings for `token` against the public Bot API, with an empty (deny-all) allow-list.
    pub fn new(token: Secret) -> Self {
        Self {
            token,
            allow_from: Vec::new(),
            group_policy: GroupPolicy::Mention,
            api_url: None,
            proxy: None,
            reply_to_message: false,
            streaming: true,
            stream_edit_interval: Duration::from_millis(600),
            poll_timeout: Duration::from_secs(30),
            webhook: None,
        }
    }

    /// Validates `channels.telegram`; errors name the offending key.
    pub fn from_config(config: &TelegramConfig) -> Result<Self, ChannelError> {
        let bad = |message: String| ChannelError::Config {
            channel: CHANNEL.into(),
            message,
        };
        if config.token.is_empty() {
            return Err(bad("channels.telegram.token is empty".into()));
        }
        let mut settings = Self::new(config.token.clone());
        settings.allow_from.clone_from(&config.allow_from);
        settings.group_policy = config.group_policy;
        if let Some(base) = config
            .base_url
            .as_deref()
            .map(str::trim)
            .filter(|b| !b.is_empty())
        {
            settings.api_url =
                Some(Url::parse(base).map_err(|e| bad(format!("channels.telegram.baseUrl {base:?}: {e}")))?);
        }
        settings.proxy = config
            .proxy
            .as_deref()
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(String::from);
        if let Some(proxy) = &settings.proxy {
            Url::parse(proxy).map_err(|e| bad(format!("channels.telegram.proxy: {e}")))?;
        }
        settings.reply_to_message = config.reply_to_message;
        settings.streaming = config.streaming;
        if config.stream_edit_interval.is_finite() && config.stream_edit_interval >= 0.0 {
            settings.stream_edit_interval = Duration::from_secs_f64(config.stream_edit_interval);
        }
        if config.mode == TelegramMode::Webhook {
            let url = Url::parse(config.webhook_url.trim()).map_err(|e| {
                bad(format!(
                    "channels.telegram.webhookUrl {:?} (required in webhook mode): {e}",
                    config.webhook_url
                ))
            })?;
            let path = if config.webhook_path.starts_with('/') {
                config.webhook_path.clone()
            } else {
                format!("/{}", config.webhook_path)
            };
            settings.webhook = Some(WebhookSettings {
                url,
                listen_host: config.webhook_listen_host.clone(),
                listen_port: config.webhook_listen_port,
                path,
                secret_token: config.webhook_secret_token.clone(),
                max_connections: u8::try_from(config.webhook_max_connections.clamp(1, 100)).unwrap_or(40),
                header_read_timeout: seconds(
                    "webhookHeaderReadTimeoutS",
                    config.webhook_header_read_timeout_s,
                    10.0,
                )
                .map_err(&bad)?,
                idle_timeout: seconds("webhookIdleTimeoutS", config.webhook_idle_timeout_s, 60.0)
                    .map_err(&bad)?,
            });
        }
        Ok(settings)
    }
}

/// A bound in seconds from `channels.telegram.<key>` (`default` when unset), between 0.1 and 600.
fn seconds(key: &str, value: Option<f64>, default: f64) -> Result<std::time::Duration, String> {
    let v = value.unwrap_or(default);
    if !(0.1..=600.0).contains(&v) {
        return Err(format!(
            "channels.telegram.{key} {v} must be between 0.1 and 600 seconds"
        ));
    }
    Ok(std::time::Duration::from_secs_f64(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_token_is_a_config_error_naming_the_key() {
        let err = TelegramSettings::from_config(&TelegramConfig::default()).unwrap_err();
        assert!(err.to_string().contains("channels.telegram.token"), "{err}");
    }

    #[test]
    fn reads_base_url_proxy_and_webhook() {
        let mut c = TelegramConfig {
            token: Secret::new("1:A"),
            ..TelegramConfig::default()
        };
        c.base_url = Some("http://127.0.0.1:8081".into());
        c.proxy = Some("socks5://127.0.0.1:1080".into());
        c.stream_edit_interval = 1.5;
        let s = TelegramSettings::from_config(&c).unwrap();
        assert_eq!(s.api_url.unwrap().as_str(), "http://127.0.0.1:8081/");
        assert_eq!(s.proxy.as_deref(), Some("socks5://127.0.0.1:1080"));
        assert_eq!(s.stream_edit_interval, Duration::from_millis(1500));
        assert!(s.webhook.is_none());

        c.mode = TelegramMode::Webhook;
        let err = TelegramSettings::from_config(&c).unwrap_err();
        assert!(err.to_string().contains("webhookUrl"), "{err}");
        c.webhook_url = "https://bot.example.com/telegram".into();
        c.webhook_path = "hook".into();
        let w = TelegramSettings::from_config(&c).unwrap().webhook.unwrap();
        assert_eq!(w.path, "/hook");
        assert_eq!(w.max_connections, 4);
    }

    #[test]
    fn debug_hides_the_token() {
        let s = TelegramSettings::new(Secret::new("123:SUPERSECRET"));
        assert!(!format!("{s:?}").contains("SUPERSECRET"));
    }

    #[test]
    fn webhook_bounds_are_read_and_checked() {
        let mut c = TelegramConfig {
            token: Secret::new("123:abc"),
            mode: TelegramMode::Webhook,
            webhook_url: "https://example.org/hook".into(),
            webhook_header_read_timeout_s: Some(2.5),
            ..TelegramConfig::default()
        };
        let hook = TelegramSettings::from_config(&c).unwrap().webhook.unwrap();
        assert_eq!(hook.header_read_timeout, Duration::from_millis(2500));
        assert_eq!(hook.idle_timeout, Duration::from_secs(60));
        c.webhook_idle_timeout_s = Some(0.0);
        let err = TelegramSettings::from_config(&c).unwrap_err().to_string();
        assert!(err.contains("channels.telegram.webhookIdleTimeoutS"), "{err}");
    }
}
