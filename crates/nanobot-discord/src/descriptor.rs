//! How the Discord channel plugs into nanobot: its [`DESCRIPTOR`].

use std::sync::Arc;

use nanobot_channels::descriptor::{nobody_allowed, token_finding};
use nanobot_channels::{
    Block, Capabilities, Channel, ChannelDescriptor, ChannelError, Credentials, Finding, Places, Services,
};
use nanobot_config::Config;

use crate::{DiscordChannel, DiscordSettings, NAME};

/// The Discord channel's descriptor: `channels.discord` (typed in the config), built when enabled; it keeps its
/// downloads in `<media>/discord/` itself.
pub const DESCRIPTOR: ChannelDescriptor = ChannelDescriptor {
    name: NAME,
    capabilities: Capabilities::TEXT.files(true).groups(true).threads(true),
    block: Block::Typed(|c| c.channels.discord.enabled),
    credentials: Credentials::Check(|c, _| !c.channels.discord.token.is_empty()),
    doctor,
    build,
};

/// Whether `token` looks like a bot token: three dot-separated base64url parts, 50 characters or more.
pub fn token_looks_valid(token: &str) -> bool {
    let parts: Vec<&str> = token.split('.').collect();
    parts.len() == 3
        && parts.iter().all(|p| {
            !p.is_empty()
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        })
        && token.len() >= 50
}

fn build(config: &Config, services: &Services<'_>) -> Result<Arc<dyn Channel>, ChannelError> {
    let settings = DiscordSettings::from_config(&config.channels.discord)?;
    Ok(Arc::new(
        DiscordChannel::new(settings, services.places.media_root)?.with_pairing((services.pairing)()?),
    ))
}

fn doctor(config: &Config, _: &Places<'_>) -> Vec<Finding> {
    let c = &config.channels.discord;
    let mut f = Vec::new();
    if !c.enabled {
        return f;
    }
    f.push(token_finding(
        NAME,
        c.token.expose(),
        token_looks_valid,
        "set `channels.discord.token` to the bot token from the Discord developer portal",
        "three dot-separated parts",
        "copy the bot token (not the client secret) into `channels.discord.token`",
    ));
    if c.allow_from.is_empty() {
        f.push(nobody_allowed(
            NAME,
            "add user ids to `channels.discord.allowFrom` (or \"*\")",
        ));
    }
    f
}

#[cfg(test)]
mod tests {
    #[test]
    fn bot_tokens_are_recognised() {
        assert!(super::token_looks_valid(
            "MTA1NjQ4ODk1NzQ5NjQ2OTU2OA.GkNwYm.abcdefghijklmnopqrstuvwxyz0123456789AB"
        ));
        assert!(!super::token_looks_valid("not-a-token"));
    }
}
