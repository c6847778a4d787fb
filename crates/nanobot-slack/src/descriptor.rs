//! How the Slack channel plugs into nanobot: its [`DESCRIPTOR`].

use std::sync::Arc;

use nanobot_channels::{
    Block, Capabilities, Channel, ChannelDescriptor, ChannelError, Credentials, Finding, Places, Services,
};
use nanobot_config::Config;

use crate::{NAME, SlackChannel, SlackSettings};

/// The Slack channel's descriptor: `channels.slack` (typed in the config), built when enabled; it keeps its
/// downloads in `<media>/slack/` itself.
pub const DESCRIPTOR: ChannelDescriptor = ChannelDescriptor {
    name: NAME,
    capabilities: Capabilities::TEXT.files(true).groups(true).threads(true),
    block: Block::Typed(|c| c.channels.slack.enabled),
    credentials: Credentials::Check(|c, _| {
        !c.channels.slack.bot_token.is_empty() && !c.channels.slack.app_token.is_empty()
    }),
    doctor,
    build,
};

fn build(config: &Config, services: &Services<'_>) -> Result<Arc<dyn Channel>, ChannelError> {
    let settings = SlackSettings::from_config(&config.channels.slack)?;
    Ok(Arc::new(
        SlackChannel::new(settings, services.places.media_root)?.with_pairing((services.pairing)()?),
    ))
}

fn doctor(config: &Config, _: &Places<'_>) -> Vec<Finding> {
    let c = &config.channels.slack;
    let mut f = Vec::new();
    if !c.enabled {
        return f;
    }
    let bot = c.bot_token.expose();
    let app = c.app_token.expose();
    if !bot.starts_with("xoxb-") {
        f.push(Finding::problem(
            "slack bot token missing or not an `xoxb-…` token",
            "set `channels.slack.botToken` to the Bot User OAuth Token (xoxb-…)",
        ));
    }
    if c.mode == "socket" && !app.starts_with("xapp-") {
        f.push(Finding::problem(
            "slack app token missing or not an `xapp-…` token (needed for socket mode)",
            "set `channels.slack.appToken` to an app-level token with connections:write (xapp-…)",
        ));
    }
    if bot.starts_with("xoxb-") && (c.mode != "socket" || app.starts_with("xapp-")) {
        f.push(Finding::ok("slack token formats"));
    }
    f
}
