//! How the Telegram channel plugs into nanobot: its [`DESCRIPTOR`].

use std::sync::Arc;

use nanobot_channels::descriptor::{nobody_allowed, token_finding};
use nanobot_channels::{
    Block, Capabilities, Channel, ChannelDescriptor, ChannelError, Credentials, Finding, Places, Services,
};
use nanobot_config::Config;

use crate::{NAME, TelegramChannel, TelegramSettings};

/// The Telegram channel's descriptor: `channels.telegram` (typed in the config), built when enabled; the
/// webhook's refusals go to the gateway's metrics, voice notes through the shared transcriber.
pub const DESCRIPTOR: ChannelDescriptor = ChannelDescriptor {
    name: NAME,
    capabilities: Capabilities::TEXT
        .streaming(true)
        .buttons(true)
        .files(true)
        .groups(true)
        .threads(true),
    block: Block::Typed(|c| c.channels.telegram.enabled),
    credentials: Credentials::Check(|c, _| !c.channels.telegram.token.is_empty()),
    doctor,
    build,
};

/// Whether `token` looks like a bot token: `<digits>:<30 or more of [A-Za-z0-9_-]>`.
pub fn token_looks_valid(token: &str) -> bool {
    match token.split_once(':') {
        Some((id, secret)) => {
            !id.is_empty()
                && id.chars().all(|c| c.is_ascii_digit())
                && secret.len() >= 30
                && secret
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        }
        None => false,
    }
}

/// The gateway's refusal sink as the webhook listener's observer.
struct Refusals(nanobot_channels::descriptor::RefusalSink);

impl nanobot_http::RefusalObserver for Refusals {
    fn refused(&self, server: &'static str, kind: &'static str) {
        (self.0)(server, kind);
    }
}

fn build(config: &Config, services: &Services<'_>) -> Result<Arc<dyn Channel>, ChannelError> {
    let settings = TelegramSettings::from_config(&config.channels.telegram)?;
    let mut channel = TelegramChannel::new(settings, services.places.media_root.join(NAME))?
        .with_pairing((services.pairing)()?);
    if let Some(sink) = &services.refusals {
        channel = channel.with_refusal_observer(Arc::new(Refusals(sink.clone())));
    }
    if let Some(t) = (services.transcriber)() {
        channel = channel.with_transcriber(t);
    }
    Ok(Arc::new(channel))
}

fn doctor(config: &Config, _: &Places<'_>) -> Vec<Finding> {
    let c = &config.channels.telegram;
    let mut f = Vec::new();
    if !c.enabled {
        return f;
    }
    f.push(token_finding(
        NAME,
        c.token.expose(),
        token_looks_valid,
        "set `channels.telegram.token` to the token from @BotFather",
        "`123456789:AA…`",
        "copy the whole token from @BotFather into `channels.telegram.token`",
    ));
    if c.allow_from.is_empty() {
        f.push(nobody_allowed(
            NAME,
            "add your user id or username to `channels.telegram.allowFrom` (or \"*\" for everyone)",
        ));
    }
    f
}

#[cfg(test)]
mod tests {
    #[test]
    fn bot_tokens_are_recognised() {
        assert!(super::token_looks_valid(
            "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"
        ));
        assert!(!super::token_looks_valid("AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"));
        assert!(!super::token_looks_valid(
            "12x:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"
        ));
    }
}
