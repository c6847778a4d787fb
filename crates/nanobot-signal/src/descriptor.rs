//! How the Signal channel plugs into nanobot: its [`DESCRIPTOR`].

use std::path::PathBuf;
use std::sync::Arc;

use nanobot_channels::descriptor::enabled_block;
use nanobot_channels::{
    Block, Capabilities, Channel, ChannelDescriptor, ChannelError, Credentials, Finding, Places, Services,
};
use nanobot_config::Config;

use crate::settings::Policy;
use crate::{NAME, SignalChannel, SignalSettings};

/// The Signal channel's descriptor: `channels.signal`, built when enabled. Without `attachmentsDir`, received
/// attachments are read from signal-cli's default, `$HOME/.local/share/signal-cli/attachments` (`HOME` of the
/// environment the gateway was given).
pub const DESCRIPTOR: ChannelDescriptor = ChannelDescriptor {
    name: NAME,
    capabilities: Capabilities::TEXT.files(true).groups(true),
    block: Block::Raw,
    credentials: Credentials::Keys(&["phoneNumber"]),
    doctor,
    build,
};

/// Where signal-cli keeps received attachments (`~` is `HOME`, or the home the data directory is in).
fn attachments_dir(settings: &SignalSettings, places: &Places<'_>) -> PathBuf {
    let home = || {
        places
            .vars
            .get("HOME")
            .map(PathBuf::from)
            .or_else(|| places.data_dir.parent().map(Into::into))
            .unwrap_or_default()
    };
    match &settings.attachments_dir {
        Some(dir) => match dir.strip_prefix("~") {
            Ok(rest) => home().join(rest),
            Err(_) => dir.clone(),
        },
        None => home().join(".local/share/signal-cli/attachments"),
    }
}

fn build(config: &Config, services: &Services<'_>) -> Result<Arc<dyn Channel>, ChannelError> {
    let block = enabled_block(config, NAME).unwrap_or(&serde_json::Value::Null);
    let settings = SignalSettings::from_block(block)?;
    let attachments = attachments_dir(&settings, &services.places);
    Ok(Arc::new(
        SignalChannel::new(settings, attachments, services.places.media_root)
            .with_pairing((services.pairing)()?),
    ))
}

fn doctor(config: &Config, places: &Places<'_>) -> Vec<Finding> {
    let Some(block) = enabled_block(config, NAME) else {
        return Vec::new();
    };
    let s = match SignalSettings::from_block(block) {
        Ok(s) => s,
        Err(e) => {
            return vec![Finding::problem(
                e.to_string(),
                "register the bot's number with signal-cli, run `signal-cli -a <number> daemon --http \
                 localhost:8080`, and put the number in `channels.signal.phoneNumber`",
            )];
        }
    };
    let mut f = vec![Finding::ok(format!(
        "signal: {} through signal-cli at {}",
        s.phone_number,
        s.base_url()
    ))];
    if s.dm_enabled && s.dm_policy == Policy::Allowlist && s.dm_allow_from.is_empty() {
        f.push(Finding::warn(
            "signal `dm.allowFrom` is empty: nobody can talk to the bot (strangers get a pairing code)",
            "add phone numbers (\"+4915512345678\") or UUIDs to `channels.signal.dm.allowFrom`",
        ));
    }
    if s.group_enabled && s.group_policy == Policy::Allowlist && s.group_allow_from.is_empty() {
        f.push(Finding::warn(
            "signal groups are enabled but `group.allowFrom` is empty: no group is answered",
            "add group ids to `channels.signal.group.allowFrom` (or \"*\")",
        ));
    }
    let dir = attachments_dir(&s, places);
    if !dir.is_dir() {
        f.push(Finding::warn(
            format!("signal: signal-cli's attachments directory {} does not exist (yet)", dir.display()),
            "set `channels.signal.attachmentsDir` to where signal-cli stores attachments, if received files are \
             not found",
        ));
    }
    f
}
