//! How the Microsoft Teams channel plugs into nanobot: its [`DESCRIPTOR`].

use std::sync::Arc;

use nanobot_channels::descriptor::{enabled_block, nobody_allowed, ssrf_guard};
use nanobot_channels::{
    Block, Capabilities, Channel, ChannelDescriptor, ChannelError, Credentials, Finding, Places, Services,
};
use nanobot_config::Config;

use crate::{MsTeamsChannel, MsTeamsSettings, NAME};

/// The Teams channel's descriptor: `channels.msteams`, built when enabled. Its conversation references live in
/// the workspace's `state/` (where 0.3.5 keeps them); a CA file named by `SSL_CERT_FILE` in the environment the
/// gateway was given is trusted besides the system's.
pub const DESCRIPTOR: ChannelDescriptor = ChannelDescriptor {
    name: NAME,
    capabilities: Capabilities::TEXT.files(true),
    block: Block::Raw,
    credentials: Credentials::Keys(&["appId", "appPassword"]),
    doctor,
    build,
};

fn build(config: &Config, services: &Services<'_>) -> Result<Arc<dyn Channel>, ChannelError> {
    let block = enabled_block(config, NAME).unwrap_or(&serde_json::Value::Null);
    let mut settings = MsTeamsSettings::from_block(block)?;
    let places = &services.places;
    settings.extra_roots.extend(
        places
            .vars
            .get("SSL_CERT_FILE")
            .map(std::path::PathBuf::from)
            .filter(|f| f.is_file()),
    );
    let channel = MsTeamsChannel::new(settings, places.workspace.join("state"), places.media_root)
        .with_ssrf_guard(ssrf_guard(config, NAME)?)
        .with_pairing((services.pairing)()?);
    Ok(Arc::new(channel))
}

fn doctor(config: &Config, _: &Places<'_>) -> Vec<Finding> {
    let Some(block) = enabled_block(config, NAME) else {
        return Vec::new();
    };
    let s = match MsTeamsSettings::from_block(block) {
        Ok(s) => s,
        Err(e) => {
            return vec![Finding::problem(
                e.to_string(),
                "register a bot (Azure Bot, or the Teams Developer Portal) and put its Microsoft App ID and a \
                 client secret in `channels.msteams` (appId, appPassword; tenantId for a single-tenant bot)",
            )];
        }
    };
    let mut f = vec![Finding::ok(format!(
        "msteams: app {} answers on http://{}:{}{} (the bot's messaging endpoint must reach it over HTTPS)",
        s.app_id, s.host, s.port, s.path
    ))];
    if !s.validate_inbound_auth {
        f.push(Finding::warn(
            "msteams: validateInboundAuth is off: anyone who reaches the webhook can write as any user",
            "remove `channels.msteams.validateInboundAuth` (it is on by default)",
        ));
    }
    if s.allow_from.is_empty() {
        f.push(nobody_allowed(NAME, "add users' AAD object ids to `channels.msteams.allowFrom` (or \"*\"); a stranger's message gets a \
             pairing code"));
    }
    f
}
