//! Resolved settings of the NapCat channel, read from the raw `channels.napcat` block (0.3.5's keys).

use std::collections::BTreeMap;

use nanobot_channels::ChannelError;
use nanobot_config::Secret;
use serde_json::Value;

use crate::NAME;

/// 0.3.5's default `wsUrl`: NapCat's forward WebSocket on this machine.
pub const DEFAULT_WS_URL: &str = "ws://127.0.0.1:3001";
/// 0.3.5's default `maxImageBytes` (20 MiB).
pub const DEFAULT_MAX_IMAGE_BYTES: u64 = 20 * 1024 * 1024;

/// When the bot answers a group message (`groupPolicy`, `groupPolicyOverrides`). A message that mentions the bot or
/// replies to one of its messages is always answered.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum GroupMode {
    /// Only mentions and replies (0.3.5's default).
    Mention,
    /// Every message.
    Open,
    /// Other messages with this chance (0.0 is `Mention`, 1.0 is `Open`).
    Chance(f64),
}

impl GroupMode {
    /// Reads `"mention"`, `"open"` or a number from 0 to 1; `key` names the setting in the error.
    fn parse(value: &Value, key: &str) -> Result<Self, ChannelError> {
        match value {
            Value::String(s) if s.eq_ignore_ascii_case("mention") => Ok(Self::Mention),
            Value::String(s) if s.eq_ignore_ascii_case("open") => Ok(Self::Open),
            Value::Number(n) => match n.as_f64() {
                Some(p) if (0.0..=1.0).contains(&p) => Ok(Self::Chance(p)),
                _ => Err(config(format!("{key} is {n}; a chance must be from 0 to 1"))),
            },
            other => Err(config(format!(
                "{key} is {other}; expected \"mention\", \"open\" or a chance from 0 to 1"
            ))),
        }
    }

    /// Whether a message that neither mentions the bot nor replies to it is answered (`draw`: a number from 0 to
    /// 1, drawn at random by the caller).
    pub fn takes_unaddressed(self, draw: f64) -> bool {
        match self {
            Self::Mention => false,
            Self::Open => true,
            Self::Chance(p) => draw < p,
        }
    }
}

/// Everything the NapCat channel needs, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct NapcatSettings {
    /// `wsUrl`: NapCat's forward WebSocket (`ws://` or `wss://`).
    pub ws_url: String,
    /// `accessToken`: sent as `Authorization: Bearer …` when not empty.
    pub access_token: Secret,
    /// `allowFrom`: QQ numbers that may talk to the bot (in private chats and groups); `"*"` allows everyone.
    pub allow_from: Vec<String>,
    /// `groupPolicy`.
    pub group_policy: GroupMode,
    /// `groupPolicyOverrides`: per group number.
    pub group_policy_overrides: BTreeMap<String, GroupMode>,
    /// `welcomeNewMembers`: a member joining a group reaches the agent as a `[group event]` message.
    pub welcome_new_members: bool,
    /// `maxImageBytes`: larger received images are not kept.
    pub max_image_bytes: u64,
}

impl Default for NapcatSettings {
    fn default() -> Self {
        Self {
            ws_url: DEFAULT_WS_URL.to_owned(),
            access_token: Secret::default(),
            allow_from: Vec::new(),
            group_policy: GroupMode::Mention,
            group_policy_overrides: BTreeMap::new(),
            welcome_new_members: true,
            max_image_bytes: DEFAULT_MAX_IMAGE_BYTES,
        }
    }
}

fn config(message: String) -> ChannelError {
    ChannelError::Config {
        channel: NAME.to_owned(),
        message,
    }
}

impl NapcatSettings {
    /// Reads the raw `channels.napcat` block; an error names the key (`channels.napcat.wsUrl`) and never shows the
    /// token. Unknown keys are ignored, as 0.3.5 does.
    pub fn from_block(block: &Value) -> Result<Self, ChannelError> {
        let key = |k: &str| format!("channels.{NAME}.{k}");
        let get = |camel: &str, snake: &str| block.get(camel).or_else(|| block.get(snake));
        let string = |camel: &str, snake: &str| -> Result<Option<String>, ChannelError> {
            match get(camel, snake) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.trim().to_owned())),
                Some(_) => Err(config(format!("{} must be a string", key(camel)))),
            }
        };
        let mut s = Self::default();
        if let Some(url) = string("wsUrl", "ws_url")?.filter(|u| !u.is_empty()) {
            s.ws_url = url;
        }
        if !(s.ws_url.starts_with("ws://") || s.ws_url.starts_with("wss://")) {
            return Err(config(format!(
                "{} must be a ws:// or wss:// URL (NapCat's forward WebSocket, e.g. {DEFAULT_WS_URL})",
                key("wsUrl")
            )));
        }
        s.access_token = Secret::new(string("accessToken", "access_token")?.unwrap_or_default());
        s.allow_from = match get("allowFrom", "allow_from") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s.trim().to_owned()),
                    Value::Number(n) => Ok(n.to_string()),
                    _ => Err(config(format!(
                        "{} holds {v}; expected QQ numbers",
                        key("allowFrom")
                    ))),
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(config(format!("{} must be a list", key("allowFrom")))),
        };
        if let Some(v) = get("groupPolicy", "group_policy").filter(|v| !v.is_null()) {
            s.group_policy = GroupMode::parse(v, &key("groupPolicy"))?;
        }
        match get("groupPolicyOverrides", "group_policy_overrides") {
            None | Some(Value::Null) => {}
            Some(Value::Object(map)) => {
                for (group, v) in map {
                    let k = format!("{}.{group}", key("groupPolicyOverrides"));
                    s.group_policy_overrides
                        .insert(group.trim().to_owned(), GroupMode::parse(v, &k)?);
                }
            }
            Some(_) => {
                return Err(config(format!(
                    "{} must be an object of group numbers",
                    key("groupPolicyOverrides")
                )));
            }
        }
        match get("welcomeNewMembers", "welcome_new_members") {
            None | Some(Value::Null) => {}
            Some(Value::Bool(b)) => s.welcome_new_members = *b,
            Some(_) => {
                return Err(config(format!(
                    "{} must be true or false",
                    key("welcomeNewMembers")
                )));
            }
        }
        match get("maxImageBytes", "max_image_bytes") {
            None | Some(Value::Null) => {}
            Some(v) => match v.as_u64() {
                Some(n) if n >= 1 => s.max_image_bytes = n,
                _ => {
                    return Err(config(format!(
                        "{} must be a whole number of at least 1",
                        key("maxImageBytes")
                    )));
                }
            },
        }
        Ok(s)
    }

    /// `wsUrl` without its query and fragment (where a token may sit), as errors and `doctor` show it.
    pub fn shown_url(&self) -> &str {
        nanobot_channels::ws::shown_url(&self.ws_url)
    }

    /// Whether `wsUrl` is on this machine (`localhost` or a loopback address), where no token is needed.
    pub fn on_this_machine(&self) -> bool {
        let Some(host) = reqwest::Url::parse(&self.ws_url)
            .ok()
            .and_then(|u| u.host_str().map(str::to_owned))
        else {
            return false;
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        host.eq_ignore_ascii_case("localhost")
            || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
    }

    /// The policy of group `group_id`: its override, else `groupPolicy`.
    pub fn policy_of(&self, group_id: &str) -> GroupMode {
        self.group_policy_overrides
            .get(group_id)
            .copied()
            .unwrap_or(self.group_policy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_0_3_5_block_is_read_with_its_defaults() {
        let s = NapcatSettings::from_block(&json!({"enabled": true})).unwrap();
        assert_eq!(s, NapcatSettings::default());
        let s = NapcatSettings::from_block(&json!({
            "enabled": true, "wsUrl": "wss://napcat.example:3001", "accessToken": "tok-1",
            "allowFrom": ["10002", 10003], "groupPolicy": 0.25,
            "groupPolicyOverrides": {"555": "open", "666": "mention"},
            "welcomeNewMembers": false, "maxImageBytes": 1024, "someFutureKey": 1
        }))
        .unwrap();
        assert_eq!(s.ws_url, "wss://napcat.example:3001");
        assert_eq!(s.access_token.expose(), "tok-1");
        assert_eq!(s.allow_from, ["10002", "10003"]);
        assert_eq!(s.group_policy, GroupMode::Chance(0.25));
        assert_eq!(s.policy_of("555"), GroupMode::Open);
        assert_eq!(s.policy_of("666"), GroupMode::Mention);
        assert_eq!(s.policy_of("777"), GroupMode::Chance(0.25));
        assert!(!s.welcome_new_members);
        assert_eq!(s.max_image_bytes, 1024);
        assert!(!s.on_this_machine());
        for (url, local) in [
            ("ws://127.0.0.1:3001/?access_token=x", true),
            ("ws://[::1]:3001", true),
            ("ws://LOCALHOST:3001", true),
            ("ws://127.9.9.9:3001", true),
            ("ws://192.168.1.5:3001", false),
            ("wss://127.0.0.1.example:3001", false),
        ] {
            let s = NapcatSettings::from_block(&json!({"wsUrl": url})).unwrap();
            assert_eq!(s.on_this_machine(), local, "{url}");
        }
        let s = NapcatSettings::from_block(&json!({"wsUrl": "ws://h:1/?access_token=SEKRIT"})).unwrap();
        assert_eq!(s.shown_url(), "ws://h:1/");
    }

    #[test]
    fn bad_values_name_the_key_and_never_the_token() {
        for (block, says) in [
            (json!({"wsUrl": "http://127.0.0.1:3001"}), "channels.napcat.wsUrl"),
            (json!({"groupPolicy": "allowlist"}), "channels.napcat.groupPolicy"),
            (json!({"groupPolicy": 1.5}), "from 0 to 1"),
            (
                json!({"groupPolicyOverrides": {"1": "sometimes"}}),
                "channels.napcat.groupPolicyOverrides.1",
            ),
            (json!({"maxImageBytes": 0}), "channels.napcat.maxImageBytes"),
            (json!({"allowFrom": "10002"}), "channels.napcat.allowFrom"),
            (
                json!({"welcomeNewMembers": "yes"}),
                "channels.napcat.welcomeNewMembers",
            ),
        ] {
            let mut block = block;
            block["accessToken"] = json!("SEKRIT-TOKEN");
            let e = NapcatSettings::from_block(&block).unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
            assert!(!e.contains("SEKRIT-TOKEN"), "{e}");
        }
    }

    #[test]
    fn a_chance_takes_what_it_draws_below() {
        assert!(!GroupMode::Mention.takes_unaddressed(0.0));
        assert!(GroupMode::Open.takes_unaddressed(0.99));
        assert!(GroupMode::Chance(0.3).takes_unaddressed(0.29));
        assert!(!GroupMode::Chance(0.3).takes_unaddressed(0.3));
        assert!(!GroupMode::Chance(0.0).takes_unaddressed(0.0));
    }
}
