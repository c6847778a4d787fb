//! How the NapCat channel plugs into nanobot: its [`DESCRIPTOR`].

use std::sync::Arc;

use nanobot_channels::descriptor::{enabled_block, nobody_allowed, ssrf_guard};
use nanobot_channels::{
    Block, Capabilities, Channel, ChannelDescriptor, ChannelError, Credentials, Finding, Places, Services,
};
use nanobot_config::Config;

use crate::{NAME, NapcatChannel, NapcatSettings};

/// The NapCat channel's descriptor: `channels.napcat`, built when enabled; images behind the SSRF guard.
pub const DESCRIPTOR: ChannelDescriptor = ChannelDescriptor {
    name: NAME,
    capabilities: Capabilities::TEXT.files(true).groups(true),
    block: Block::Raw,
    credentials: Credentials::None,
    doctor,
    build,
};

fn build(config: &Config, services: &Services<'_>) -> Result<Arc<dyn Channel>, ChannelError> {
    let block = enabled_block(config, NAME).unwrap_or(&serde_json::Value::Null);
    let settings = NapcatSettings::from_block(block)?;
    Ok(Arc::new(
        NapcatChannel::new(settings, services.places.media_root)
            .with_ssrf_guard(ssrf_guard(config, NAME)?)
            .with_pairing((services.pairing)()?),
    ))
}

fn doctor(config: &Config, _: &Places<'_>) -> Vec<Finding> {
    let Some(block) = enabled_block(config, NAME) else {
        return Vec::new();
    };
    let s = match NapcatSettings::from_block(block) {
        Ok(s) => s,
        Err(e) => {
            return vec![Finding::problem(
                e.to_string(),
                "fix the value named in `channels.napcat` (see docs/channels.md, NapCat)",
            )];
        }
    };
    let shown = s.shown_url();
    let mut f = vec![Finding::ok(format!("napcat: NapCat's WebSocket at {shown}"))];
    if s.access_token.is_empty() && !s.on_this_machine() {
        f.push(Finding::warn(
            format!(
                "napcat: {shown} is reached without `accessToken`: whoever reaches it can act as the bot"
            ),
            "set the same token in NapCat's WebSocket server and in `channels.napcat.accessToken`",
        ));
    }
    if s.allow_from.is_empty() {
        f.push(nobody_allowed(
            NAME,
            "add QQ numbers to `channels.napcat.allowFrom` (or \"*\")",
        ));
    }
    f
}
