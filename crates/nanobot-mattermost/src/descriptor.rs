//! How the Mattermost channel plugs into nanobot: its [`DESCRIPTOR`].

use std::sync::Arc;

use nanobot_channels::descriptor::{enabled_block, nobody_allowed};
use nanobot_channels::{
    Block, Capabilities, Channel, ChannelDescriptor, ChannelError, Credentials, Finding, Places, Services,
};
use nanobot_config::Config;

use crate::{MattermostChannel, MattermostSettings, NAME};

/// The Mattermost channel's descriptor: `channels.mattermost`, built when enabled.
pub const DESCRIPTOR: ChannelDescriptor = ChannelDescriptor {
    name: NAME,
    capabilities: Capabilities::TEXT.files(true).groups(true).threads(true),
    block: Block::Raw,
    credentials: Credentials::Keys(&["serverUrl", "token"]),
    doctor,
    build,
};

fn build(config: &Config, services: &Services<'_>) -> Result<Arc<dyn Channel>, ChannelError> {
    let block = enabled_block(config, NAME).unwrap_or(&serde_json::Value::Null);
    let settings = MattermostSettings::from_block(block)?;
    Ok(Arc::new(
        MattermostChannel::new(settings, services.places.media_root).with_pairing((services.pairing)()?),
    ))
}

fn doctor(config: &Config, _: &Places<'_>) -> Vec<Finding> {
    let Some(block) = enabled_block(config, NAME) else {
        return Vec::new();
    };
    let s = match MattermostSettings::from_block(block) {
        Ok(s) => s,
        Err(e) => {
            return vec![Finding::problem(
                e.to_string(),
                "create a bot account (System Console → Bot Accounts) and put the server's address and the bot's \
                 access token in `channels.mattermost` (serverUrl, token)",
            )];
        }
    };
    let mut f = vec![Finding::ok(format!("mattermost: server {}", s.server_url))];
    if s.server_url.starts_with("http://") {
        f.push(Finding::warn(
            format!(
                "mattermost: {} is plain http: the token travels unencrypted",
                s.server_url
            ),
            "use the server's https:// address in `channels.mattermost.serverUrl`",
        ));
    }
    if s.allow_from.is_empty() && s.dm_allow_from.is_empty() {
        f.push(nobody_allowed(
            NAME,
            "add user ids (or usernames with `allowFromMatchMode: \"username\"`) to \
             `channels.mattermost.allowFrom` (or \"*\")",
        ));
    }
    f
}
