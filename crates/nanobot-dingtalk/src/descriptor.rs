//! How the DingTalk channel plugs into nanobot: its [`DESCRIPTOR`].

use std::sync::Arc;

use nanobot_channels::descriptor::{enabled_block, nobody_allowed, ssrf_guard};
use nanobot_channels::{
    Block, Capabilities, Channel, ChannelDescriptor, ChannelError, Credentials, Finding, Places, Services,
};
use nanobot_config::{Config, DingTalkConfig};

use crate::{DingTalkChannel, DingTalkSettings, NAME};

/// The DingTalk channel's descriptor: `channels.dingtalk` (raw in the config, read as 0.3.5 reads it), built
/// when enabled; remote files behind the SSRF guard.
pub const DESCRIPTOR: ChannelDescriptor = ChannelDescriptor {
    name: NAME,
    capabilities: Capabilities::TEXT.files(true).groups(true),
    block: Block::Raw,
    credentials: Credentials::Keys(&["clientId", "clientSecret"]),
    doctor,
    build,
};

fn build(config: &Config, services: &Services<'_>) -> Result<Arc<dyn Channel>, ChannelError> {
    let block = enabled_block(config, NAME).unwrap_or(&serde_json::Value::Null);
    let raw = DingTalkConfig::from_block(block).map_err(|message| ChannelError::Config {
        channel: NAME.to_owned(),
        message,
    })?;
    let settings = DingTalkSettings::from_config(&raw)?;
    Ok(Arc::new(
        DingTalkChannel::new(settings, services.places.media_root)?
            .with_ssrf_guard(ssrf_guard(config, NAME)?)
            .with_pairing((services.pairing)()?),
    ))
}

fn doctor(config: &Config, _: &Places<'_>) -> Vec<Finding> {
    let Some(block) = enabled_block(config, NAME) else {
        return Vec::new();
    };
    match DingTalkConfig::from_block(block) {
        Err(e) => vec![Finding::problem(&e, "fix the value named in `channels.dingtalk`")],
        Ok(cfg) if cfg.client_id.trim().is_empty() || cfg.client_secret.is_empty() => vec![Finding::problem(
            "dingtalk is enabled but `clientId` or `clientSecret` is empty",
            "copy the AppKey and AppSecret of the robot's app from the DingTalk developer console",
        )],
        Ok(cfg) => {
            let mut f = vec![Finding::ok("dingtalk credentials set")];
            if cfg.allow_from.is_empty() {
                f.push(nobody_allowed(
                    NAME,
                    "add staff ids to `channels.dingtalk.allowFrom` (or \"*\")",
                ));
            }
            f
        }
    }
}
