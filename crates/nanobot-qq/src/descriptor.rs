//! How the QQ channel plugs into nanobot: its [`DESCRIPTOR`].

use std::sync::Arc;

use nanobot_channels::descriptor::{enabled_block, nobody_allowed, ssrf_guard};
use nanobot_channels::{
    Block, Capabilities, Channel, ChannelDescriptor, ChannelError, Credentials, Finding, Places, Services,
};
use nanobot_config::Config;

use crate::{NAME, QqChannel, QqSettings};

/// The QQ channel's descriptor: `channels.qq`, built when enabled; the files users send behind the SSRF guard.
pub const DESCRIPTOR: ChannelDescriptor = ChannelDescriptor {
    name: NAME,
    capabilities: Capabilities::TEXT.files(true).groups(true),
    block: Block::Raw,
    credentials: Credentials::Keys(&["appId", "secret"]),
    doctor,
    build,
};

fn build(config: &Config, services: &Services<'_>) -> Result<Arc<dyn Channel>, ChannelError> {
    let block = enabled_block(config, NAME).unwrap_or(&serde_json::Value::Null);
    let settings = QqSettings::from_block(block)?;
    Ok(Arc::new(
        QqChannel::new(settings, services.places.media_root)?
            .with_ssrf_guard(ssrf_guard(config, NAME)?)
            .with_pairing((services.pairing)()?),
    ))
}

fn doctor(config: &Config, _: &Places<'_>) -> Vec<Finding> {
    let Some(block) = enabled_block(config, NAME) else {
        return Vec::new();
    };
    match QqSettings::from_block(block) {
        Err(e) => vec![Finding::problem(
            e.to_string(),
            "copy the AppID and AppSecret from the bot's page on q.qq.com into `channels.qq`",
        )],
        Ok(s) => {
            let mut f = vec![Finding::ok("qq credentials set")];
            if s.allow_from.is_empty() {
                f.push(nobody_allowed(
                    NAME,
                    "add user openids to `channels.qq.allowFrom` (or \"*\")",
                ));
            }
            f
        }
    }
}
