//! How the Feishu / Lark channel plugs into nanobot: its [`DESCRIPTOR`].

use std::sync::Arc;

use nanobot_channels::descriptor::{enabled_block, nobody_allowed, ssrf_guard};
use nanobot_channels::{
    Block, Capabilities, Channel, ChannelDescriptor, ChannelError, Credentials, Finding, Places, Services,
};
use nanobot_config::{Config, FeishuConfig};

use crate::{FeishuChannel, FeishuSettings, NAME};

/// The Feishu channel's descriptor: `channels.feishu` (raw in the config, read as 0.3.5 reads it), built when
/// enabled; remote files behind the SSRF guard, voice notes through the shared transcriber.
pub const DESCRIPTOR: ChannelDescriptor = ChannelDescriptor {
    name: NAME,
    capabilities: Capabilities::TEXT
        .streaming(true)
        .files(true)
        .groups(true)
        .threads(true),
    block: Block::Raw,
    credentials: Credentials::Keys(&["appId", "appSecret"]),
    doctor,
    build,
};

fn build(config: &Config, services: &Services<'_>) -> Result<Arc<dyn Channel>, ChannelError> {
    let block = enabled_block(config, NAME).unwrap_or(&serde_json::Value::Null);
    let raw = FeishuConfig::from_block(block).map_err(|message| ChannelError::Config {
        channel: NAME.to_owned(),
        message,
    })?;
    let settings = FeishuSettings::from_config(&raw)?;
    let mut channel = FeishuChannel::new(settings, services.places.media_root)?
        .with_ssrf_guard(ssrf_guard(config, NAME)?)
        .with_pairing((services.pairing)()?);
    if let Some(t) = (services.transcriber)() {
        channel = channel.with_transcriber(t);
    }
    Ok(Arc::new(channel))
}

fn doctor(config: &Config, _: &Places<'_>) -> Vec<Finding> {
    let Some(block) = enabled_block(config, NAME) else {
        return Vec::new();
    };
    match FeishuConfig::from_block(block) {
        Err(e) => vec![Finding::problem(&e, "fix the value named in `channels.feishu`")],
        Ok(cfg) if cfg.app_id.trim().is_empty() || cfg.app_secret.is_empty() => vec![Finding::problem(
            "feishu is enabled but `appId` or `appSecret` is empty",
            "copy the App ID (cli_…) and App Secret from the app's Credentials page in the Feishu/Lark console",
        )],
        Ok(cfg) if !matches!(cfg.domain.as_str(), "feishu" | "lark") => vec![Finding::problem(
            "feishu `domain` must be \"feishu\" or \"lark\"",
            "set `channels.feishu.domain` to \"feishu\" (China) or \"lark\" (international)",
        )],
        Ok(cfg) => {
            let mut f = vec![Finding::ok("feishu credentials set")];
            if cfg.allow_from.is_empty() {
                f.push(nobody_allowed(
                    NAME,
                    "add open_ids (ou_…) to `channels.feishu.allowFrom` (or \"*\")",
                ));
            }
            f
        }
    }
}
