//! How the Mochat channel plugs into nanobot: its [`DESCRIPTOR`].

use std::sync::Arc;

use nanobot_channels::descriptor::enabled_block;
use nanobot_channels::{
    Block, Capabilities, Channel, ChannelDescriptor, ChannelError, Credentials, Finding, Places, Services,
};
use nanobot_config::Config;

use crate::{MochatChannel, MochatSettings, NAME};

/// The Mochat channel's descriptor: `channels.mochat`, built when enabled; its cursors live in the data directory.
pub const DESCRIPTOR: ChannelDescriptor = ChannelDescriptor {
    name: NAME,
    capabilities: Capabilities::TEXT.groups(true),
    block: Block::Raw,
    credentials: Credentials::Keys(&["clawToken"]),
    doctor,
    build,
};

fn build(config: &Config, services: &Services<'_>) -> Result<Arc<dyn Channel>, ChannelError> {
    let block = enabled_block(config, NAME).unwrap_or(&serde_json::Value::Null);
    let settings = MochatSettings::from_block(block)?;
    Ok(Arc::new(MochatChannel::new(settings, services.places.data_dir)?))
}

fn doctor(config: &Config, _: &Places<'_>) -> Vec<Finding> {
    let Some(block) = enabled_block(config, NAME) else {
        return Vec::new();
    };
    match MochatSettings::from_block(block) {
        Err(e) => vec![Finding::problem(
            e.to_string(),
            "set the agent's claw token and fix the value named in `channels.mochat`",
        )],
        Ok(s) => {
            let mut f = vec![Finding::ok("mochat claw token set")];
            if s.allow_from.is_empty() {
                f.push(Finding::warn(
                    "mochat `allowFrom` is empty: nobody can talk to the agent",
                    "add user ids to `channels.mochat.allowFrom` (or \"*\")",
                ));
            }
            if s.sessions.is_empty() && s.panels.is_empty() {
                f.push(Finding::warn(
                    "mochat has no `sessions` or `panels`: nothing is watched",
                    "list session / panel ids in `channels.mochat.sessions` / `panels` (or \"*\")",
                ));
            }
            f
        }
    }
}
