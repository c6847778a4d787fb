//! Resolved settings of the Signal channel, read from the raw `channels.signal` block (0.3.5's keys, in camelCase
//! or snake_case).

use std::path::PathBuf;

use nanobot_channels::ChannelError;
use serde::Deserialize;

use crate::NAME;

/// Who may write in direct messages (`dm.policy`) or which groups are answered (`group.policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Anyone (any group).
    Open,
    /// Those on the block's `allowFrom`.
    Allowlist,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct Raw {
    #[serde(alias = "phone_number")]
    phone_number: String,
    #[serde(alias = "daemon_host")]
    daemon_host: String,
    #[serde(alias = "daemon_port")]
    daemon_port: u16,
    #[serde(alias = "group_message_buffer_size")]
    group_message_buffer_size: i64,
    #[serde(alias = "attachments_dir")]
    attachments_dir: Option<String>,
    dm: RawDm,
    group: RawGroup,
}

impl Default for Raw {
    fn default() -> Self {
        Self {
            phone_number: String::new(),
            daemon_host: "localhost".into(),
            daemon_port: 8080,
            group_message_buffer_size: 20,
            attachments_dir: None,
            dm: RawDm::default(),
            group: RawGroup::default(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct RawDm {
    enabled: bool,
    policy: String,
    #[serde(alias = "allow_from")]
    allow_from: Vec<String>,
}

impl Default for RawDm {
    fn default() -> Self {
        Self {
            enabled: true,
            policy: "allowlist".into(),
            allow_from: Vec::new(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct RawGroup {
    enabled: bool,
    policy: String,
    #[serde(alias = "allow_from")]
    allow_from: Vec<String>,
    #[serde(alias = "require_mention")]
    require_mention: bool,
}

impl Default for RawGroup {
    fn default() -> Self {
        Self {
            enabled: false,
            policy: "allowlist".into(),
            allow_from: Vec::new(),
            require_mention: true,
        }
    }
}

/// Everything the Signal channel needs, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct SignalSettings {
    /// `phoneNumber`: the bot's Signal account (`+<country><number>`), the one signal-cli runs with `-a`.
    pub phone_number: String,
    /// `daemonHost`: where signal-cli's HTTP daemon listens.
    pub daemon_host: String,
    /// `daemonPort`.
    pub daemon_port: u16,
    /// `groupMessageBufferSize`: how many recent messages of a group are kept as context.
    pub group_message_buffer_size: usize,
    /// `attachmentsDir`: where signal-cli stores received attachments (`None`: its default,
    /// `~/.local/share/signal-cli/attachments`, resolved by the caller).
    pub attachments_dir: Option<PathBuf>,
    /// `dm.enabled`.
    pub dm_enabled: bool,
    /// `dm.policy`.
    pub dm_policy: Policy,
    /// `dm.allowFrom`: numbers or UUIDs (with or without `+`).
    pub dm_allow_from: Vec<String>,
    /// `group.enabled`.
    pub group_enabled: bool,
    /// `group.policy`.
    pub group_policy: Policy,
    /// `group.allowFrom`: group ids (`"*"`: every group).
    pub group_allow_from: Vec<String>,
    /// `group.requireMention`: a group message is answered only when it mentions the bot (commands always).
    pub group_require_mention: bool,
}

fn config(message: String) -> ChannelError {
    ChannelError::Config {
        channel: NAME.to_owned(),
        message,
    }
}

fn policy(value: &str, key: &str) -> Result<Policy, ChannelError> {
    match value.trim() {
        "" | "allowlist" => Ok(Policy::Allowlist),
        "open" => Ok(Policy::Open),
        other => Err(config(format!(
            "channels.{NAME}.{key} is {other:?}; expected \"open\" or \"allowlist\""
        ))),
    }
}

impl SignalSettings {
    /// Reads the raw `channels.signal` block; an error names the key.
    pub fn from_block(block: &serde_json::Value) -> Result<Self, ChannelError> {
        let raw: Raw =
            serde_json::from_value(block.clone()).map_err(|e| config(format!("channels.{NAME}: {e}")))?;
        let phone_number = raw.phone_number.trim().to_owned();
        if phone_number.is_empty() {
            return Err(config(format!(
                "channels.{NAME}.phoneNumber is empty: put the bot's Signal number there (the account signal-cli \
                 runs with `-a`, e.g. \"+15551234567\")"
            )));
        }
        let host = raw.daemon_host.trim().to_owned();
        if host.is_empty() || host.contains(['/', ' ', '@']) {
            return Err(config(format!(
                "channels.{NAME}.daemonHost must be a host name or address (got {host:?})"
            )));
        }
        if raw.daemon_port == 0 {
            return Err(config(format!("channels.{NAME}.daemonPort must not be 0")));
        }
        let buffer = usize::try_from(raw.group_message_buffer_size)
            .ok()
            .filter(|n| (1..=10_000).contains(n))
            .ok_or_else(|| {
                config(format!(
                    "channels.{NAME}.groupMessageBufferSize must be between 1 and 10000 (got {})",
                    raw.group_message_buffer_size
                ))
            })?;
        let trimmed = |list: Vec<String>| -> Vec<String> {
            list.into_iter()
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect()
        };
        Ok(Self {
            phone_number,
            daemon_host: host,
            daemon_port: raw.daemon_port,
            group_message_buffer_size: buffer,
            attachments_dir: raw
                .attachments_dir
                .map(|d| d.trim().to_owned())
                .filter(|d| !d.is_empty())
                .map(PathBuf::from),
            dm_enabled: raw.dm.enabled,
            dm_policy: policy(&raw.dm.policy, "dm.policy")?,
            dm_allow_from: trimmed(raw.dm.allow_from),
            group_enabled: raw.group.enabled,
            group_policy: policy(&raw.group.policy, "group.policy")?,
            group_allow_from: trimmed(raw.group.allow_from),
            group_require_mention: raw.group.require_mention,
        })
    }

    /// The daemon's base URL.
    pub fn base_url(&self) -> String {
        let host = if self.daemon_host.contains(':') && !self.daemon_host.starts_with('[') {
            format!("[{}]", self.daemon_host)
        } else {
            self.daemon_host.clone()
        };
        format!("http://{host}:{}", self.daemon_port)
    }
}

/// The forms a Signal id is matched in: as written, lower-cased, and a number with and without its `+`.
pub(crate) fn id_variants(value: &str) -> Vec<String> {
    let raw = value.trim();
    if raw.is_empty() {
        return Vec::new();
    }
    let mut out = vec![raw.to_owned(), raw.to_lowercase()];
    if let Some(digits) = raw.strip_prefix('+').filter(|d| !d.is_empty()) {
        out.push(digits.to_owned());
    } else if raw.chars().all(|c| c.is_ascii_digit()) {
        out.push(format!("+{raw}"));
    }
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_0_3_5_block_is_read_with_its_defaults() {
        let s = SignalSettings::from_block(&json!({"enabled": true, "phoneNumber": "+15550001111"})).unwrap();
        assert_eq!(s.base_url(), "http://localhost:8080");
        assert_eq!(s.group_message_buffer_size, 20);
        assert!(s.dm_enabled && s.dm_policy == Policy::Allowlist && s.dm_allow_from.is_empty());
        assert!(!s.group_enabled && s.group_policy == Policy::Allowlist && s.group_require_mention);
        assert_eq!(s.attachments_dir, None);
        let s = SignalSettings::from_block(&json!({
            "phone_number": "+1", "daemon_host": "::1", "daemon_port": 9000, "attachments_dir": "/srv/att",
            "dm": {"policy": "open"}, "group": {"enabled": true, "policy": "open", "require_mention": false}
        }))
        .unwrap();
        assert_eq!(s.base_url(), "http://[::1]:9000");
        assert_eq!(
            s.attachments_dir.as_deref(),
            Some(std::path::Path::new("/srv/att"))
        );
        assert!(s.dm_policy == Policy::Open && s.group_enabled && !s.group_require_mention);
    }

    #[test]
    fn bad_values_name_the_key() {
        for (block, says) in [
            (json!({}), "channels.signal.phoneNumber is empty"),
            (
                json!({"phoneNumber": "+1", "daemonHost": "http://x"}),
                "channels.signal.daemonHost",
            ),
            (
                json!({"phoneNumber": "+1", "groupMessageBufferSize": 0}),
                "groupMessageBufferSize",
            ),
            (
                json!({"phoneNumber": "+1", "dm": {"policy": "friends"}}),
                "channels.signal.dm.policy",
            ),
            (
                json!({"phoneNumber": "+1", "group": {"policy": "x"}}),
                "channels.signal.group.policy",
            ),
            (
                json!({"phoneNumber": "+1", "daemonPort": "80"}),
                "channels.signal",
            ),
        ] {
            let e = SignalSettings::from_block(&block).unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
        }
    }

    #[test]
    fn ids_match_with_or_without_plus_and_case() {
        assert_eq!(id_variants("+4915"), ["+4915", "4915"]);
        assert_eq!(id_variants("4915"), ["4915", "+4915"]);
        assert_eq!(id_variants("ABC-def"), ["ABC-def", "abc-def"]);
        assert!(id_variants("  ").is_empty());
    }
}
