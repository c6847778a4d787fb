//! How the WhatsApp channel plugs into nanobot: its [`DESCRIPTOR`].

use std::sync::Arc;

use nanobot_channels::descriptor::{enabled_block, nobody_allowed};
use nanobot_channels::{
    Block, Capabilities, Channel, ChannelDescriptor, ChannelError, Credentials, Finding, Places, Services,
};
use nanobot_config::Config;

use crate::{
    NAME, WhatsAppChannel, WhatsAppConfig, WhatsAppError, WhatsAppSettings, bridge_installed,
    credentials_present, python_login,
};

/// The WhatsApp channel's descriptor: `channels.whatsapp`, built when enabled; its linked device and bridge live
/// in the data directory, and voice notes go through the shared transcriber. Its credentials are the linked
/// device's.
pub const DESCRIPTOR: ChannelDescriptor = ChannelDescriptor {
    name: NAME,
    capabilities: Capabilities::TEXT.files(true).groups(true),
    block: Block::Raw,
    credentials: Credentials::Check(credentials_set),
    doctor,
    build,
};

/// The settings as the gateway builds them (the block may be disabled), or the problem that stops the channel.
fn settings(config: &Config, places: &Places<'_>) -> Option<Result<WhatsAppSettings, WhatsAppError>> {
    let block = config.channels.other.get(NAME)?;
    Some(
        WhatsAppConfig::from_block(block)
            .and_then(|c| WhatsAppSettings::from_config(&c, places.data_dir, places.media_root))
            .map(|mut s| {
                s.bridge = s.bridge.with_environment(places.vars);
                s
            }),
    )
}

fn credentials_set(config: &Config, places: &Places<'_>) -> bool {
    matches!(settings(config, places), Some(Ok(w)) if credentials_present(&w.auth_dir))
}

fn build(config: &Config, services: &Services<'_>) -> Result<Arc<dyn Channel>, ChannelError> {
    let settings = settings(config, &services.places)
        .unwrap_or_else(|| Err(WhatsAppError::Config("channels.whatsapp is missing".into())))?;
    let mut channel = WhatsAppChannel::new(settings).with_pairing((services.pairing)()?);
    if let Some(t) = (services.transcriber)() {
        channel = channel.with_transcriber(t);
    }
    Ok(Arc::new(channel))
}

/// The block, the bridge's npm packages, a linked device (or 0.3.5's login, which cannot be used), `allowFrom`.
fn doctor(config: &Config, places: &Places<'_>) -> Vec<Finding> {
    let mut f = Vec::new();
    if enabled_block(config, NAME).is_none() {
        return f;
    }
    let s = match settings(config, places) {
        Some(Ok(s)) => s,
        Some(Err(e)) => {
            f.push(Finding::problem(
                e.to_string(),
                "fix the value named in `channels.whatsapp`",
            ));
            return f;
        }
        None => return f,
    };
    if s.bridge.socket_module.is_none() && !bridge_installed(&s.bridge) {
        f.push(Finding::problem(
            format!(
                "whatsapp bridge not installed (no ws / @whiskeysockets/baileys in {})",
                s.bridge.node_modules().display()
            ),
            "run `nanobot channels login whatsapp` (installs the bridge with npm, then shows the QR code to scan)",
        ));
    }
    // A user switching from the Python nanobot 0.3.5: its login (a neonize database) cannot be used here.
    let python = config
        .channels
        .other
        .get(NAME)
        .and_then(|b| WhatsAppConfig::from_block(b).ok())
        .and_then(|c| python_login(&c.database_path, places.data_dir));
    if credentials_present(&s.auth_dir) {
        f.push(Finding::ok(format!(
            "whatsapp device linked (credentials in {})",
            s.auth_dir.display()
        )));
    } else if let Some(db) = python {
        f.push(Finding::problem(
            format!(
                "whatsapp is enabled but no device is linked for nanobot-rs: the Python nanobot 0.3.5's login ({}) is \
                 a neonize database, which nanobot-rs cannot use",
                db.display()
            ),
            format!(
                "run `nanobot channels login whatsapp` and scan the QR code with WhatsApp → Linked devices: nanobot-rs \
                 becomes another linked device; {} is left as it is, so 0.3.5 still works when you switch back",
                db.display()
            ),
        ));
    } else {
        f.push(Finding::problem(
            format!(
                "whatsapp is enabled but no device is linked (no credentials in {})",
                s.auth_dir.display()
            ),
            "run `nanobot channels login whatsapp` and scan the QR code with WhatsApp → Linked devices",
        ));
    }
    if s.allow_from.is_empty() {
        f.push(nobody_allowed(
            NAME,
            "add phone numbers with country code (e.g. \"+4915512345678\") to `channels.whatsapp.allowFrom`",
        ));
    }
    f
}
