//! How the Matrix channel plugs into nanobot: its [`DESCRIPTOR`].

use std::sync::Arc;

use nanobot_channels::descriptor::{enabled_block, nobody_allowed};
use nanobot_channels::{
    Block, Capabilities, Channel, ChannelDescriptor, ChannelError, Credentials, Finding, Places, Services,
};
use nanobot_config::Config;

use crate::settings::{Login, RoomPolicy};
use crate::{MatrixChannel, MatrixSettings, NAME};

/// The Matrix channel's descriptor: `channels.matrix`, built when enabled, with the gateway's pairing store and
/// transcriber.
pub const DESCRIPTOR: ChannelDescriptor = ChannelDescriptor {
    name: NAME,
    capabilities: Capabilities::TEXT
        .streaming(true)
        .files(true)
        .groups(true)
        .threads(true),
    block: Block::Raw,
    credentials: Credentials::Keys(&["userId"]),
    doctor,
    build,
};

fn build(config: &Config, services: &Services<'_>) -> Result<Arc<dyn Channel>, ChannelError> {
    let block = enabled_block(config, NAME).unwrap_or(&serde_json::Value::Null);
    let settings = MatrixSettings::from_block(block)?;
    let mut channel = MatrixChannel::new(settings, services.places.data_dir, services.places.media_root)
        .with_pairing((services.pairing)()?);
    if let Some(t) = (services.transcriber)() {
        channel = channel.with_transcriber(t);
    }
    Ok(Arc::new(channel))
}

fn doctor(config: &Config, places: &Places<'_>) -> Vec<Finding> {
    let Some(block) = enabled_block(config, NAME) else {
        return Vec::new();
    };
    let s = match MatrixSettings::from_block(block) {
        Ok(s) => s,
        Err(e) => {
            return vec![Finding::problem(
                e.to_string(),
                "create an account for the bot on your homeserver and put `homeserver`, `userId` and `password` \
                 (or `accessToken` with its `deviceId`) in `channels.matrix`",
            )];
        }
    };
    let login = match &s.login {
        Login::Password(_) => {
            let saved = places.data_dir.join("matrix-store/session.json");
            if saved.is_file() {
                "password (the saved session is reused)"
            } else {
                "password (a new device logs in)"
            }
        }
        Login::Token { .. } => "access token",
    };
    let mut f = vec![Finding::ok(format!(
        "matrix: {} on {} by {login}",
        s.user_id, s.homeserver
    ))];
    if s.homeserver.starts_with("http://") {
        f.push(Finding::warn(
            format!(
                "matrix: {} is plain http: the password and token travel unencrypted",
                s.homeserver
            ),
            "use the homeserver's https:// address in `channels.matrix.homeserver`",
        ));
    }
    if s.e2ee_enabled {
        f.push(Finding::warn(
            format!(
                "matrix: e2eeEnabled is {} but nanobot-rs has no end-to-end encryption: messages in encrypted \
                 rooms are not read, and nothing is sent into them",
                if s.e2ee_explicit { "on" } else { "on by 0.3.5's default" }
            ),
            "talk to the bot in unencrypted rooms (a new room with encryption off), then set \
             `channels.matrix.e2eeEnabled` to false",
        ));
    }
    if s.allow_from.is_empty() {
        f.push(nobody_allowed(
            NAME,
            "add user ids (\"@you:example.org\") to `channels.matrix.allowFrom` (or \"*\")",
        ));
    }
    if s.group_policy == RoomPolicy::Allowlist && s.group_allow_from.is_empty() {
        f.push(Finding::warn(
            "matrix: groupPolicy is allowlist but `groupAllowFrom` is empty: only direct chats are answered",
            "add room ids (\"!abc:example.org\") to `channels.matrix.groupAllowFrom`",
        ));
    }
    f
}
