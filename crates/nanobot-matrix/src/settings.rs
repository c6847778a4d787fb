//! Resolved settings of the Matrix channel, read from the raw `channels.matrix` block (0.3.5's keys, in camelCase
//! or snake_case).

use std::time::Duration;

use nanobot_channels::ChannelError;
use nanobot_config::Secret;
use serde::Deserialize;

use crate::NAME;

/// 0.3.5's default homeserver.
pub const DEFAULT_HOMESERVER: &str = "https://matrix.org";
/// The most `maxConcurrentMediaDownloads` is raised to.
pub const MAX_CONCURRENT_DOWNLOADS: usize = 16;
/// 0.3.5's default `maxMediaBytes`: 20 MiB.
pub const DEFAULT_MAX_MEDIA_BYTES: u64 = 20 * 1024 * 1024;

/// Which room messages are taken (`groupPolicy`); direct chats (at most two members) always are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoomPolicy {
    /// Every message of an allowed sender.
    Open,
    /// Messages whose `m.mentions` name the bot (or `@room`, with `allowRoomMentions`).
    Mention,
    /// Messages in the rooms of `groupAllowFrom`.
    Allowlist,
}

/// How the bot logs in.
#[derive(Debug, Clone, PartialEq)]
pub enum Login {
    /// `password`: a session saved in `<data dir>/matrix-store/session.json` is reused, else a new device logs in
    /// and the session is saved there.
    Password(Secret),
    /// `accessToken` + `deviceId`: used as given.
    Token {
        /// The access token.
        access_token: Secret,
        /// Its device.
        device_id: String,
    },
}

/// The `channels.matrix` block as written (unknown keys are ignored, like 0.3.5 does).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct Raw {
    homeserver: Option<String>,
    #[serde(alias = "user_id")]
    user_id: String,
    password: Secret,
    #[serde(alias = "access_token")]
    access_token: Secret,
    #[serde(alias = "device_id")]
    device_id: String,
    #[serde(alias = "allow_from")]
    allow_from: Vec<String>,
    #[serde(alias = "group_policy")]
    group_policy: Option<String>,
    #[serde(alias = "group_allow_from")]
    group_allow_from: Vec<String>,
    #[serde(alias = "allow_room_mentions")]
    allow_room_mentions: bool,
    streaming: bool,
    #[serde(alias = "e2ee_enabled")]
    e2ee_enabled: Option<bool>,
    #[serde(alias = "sas_verification")]
    sas_verification: bool,
    #[serde(alias = "sync_stop_grace_seconds")]
    sync_stop_grace_seconds: Option<u64>,
    #[serde(alias = "max_media_bytes")]
    max_media_bytes: Option<u64>,
    #[serde(alias = "max_concurrent_media_downloads")]
    max_concurrent_media_downloads: Option<usize>,
    proxy: Option<String>,
}

/// Everything the Matrix channel needs, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct MatrixSettings {
    /// `homeserver`, without a trailing `/`.
    pub homeserver: String,
    /// `userId`: the bot's full user id (`@bot:example.org`).
    pub user_id: String,
    /// `password`, or `accessToken` + `deviceId`.
    pub login: Login,
    /// `allowFrom`: user ids that may talk to the bot (`"*"`: everyone).
    pub allow_from: Vec<String>,
    /// `groupPolicy`.
    pub group_policy: RoomPolicy,
    /// `groupAllowFrom`: the room ids of `groupPolicy: "allowlist"`.
    pub group_allow_from: Vec<String>,
    /// `allowRoomMentions`: `@room` counts as a mention.
    pub allow_room_mentions: bool,
    /// `streaming`: answers grow in one message, edited as they stream.
    pub streaming: bool,
    /// `e2eeEnabled` as written or 0.3.5's default (`true`): nanobot-rs has no end-to-end encryption, so this
    /// only decides how loudly that is said.
    pub e2ee_enabled: bool,
    /// `e2eeEnabled` was written in the block (not 0.3.5's default).
    pub e2ee_explicit: bool,
    /// `sasVerification` (needs end-to-end encryption; read, not acted on).
    pub sas_verification: bool,
    /// `syncStopGraceSeconds`: how long a sync in flight may take to end on a stop.
    pub sync_stop_grace: Duration,
    /// `maxMediaBytes`: the largest file received or sent (also bounded by the server's upload limit; `0` refuses
    /// every file).
    pub max_media_bytes: u64,
    /// `maxConcurrentMediaDownloads`: messages of one sync made ready (files fetched) at once, 1 to
    /// [`MAX_CONCURRENT_DOWNLOADS`].
    pub max_concurrent_media_downloads: usize,
    /// `proxy`: an HTTP(S) proxy for every request (`http://` added when no scheme is given); kept as a secret,
    /// since its URL may carry a password.
    pub proxy: Option<Secret>,
}

fn config(message: String) -> ChannelError {
    ChannelError::Config {
        channel: NAME.to_owned(),
        message,
    }
}

fn policy(value: Option<&str>) -> Result<RoomPolicy, ChannelError> {
    match value.map(str::trim) {
        None | Some("" | "open") => Ok(RoomPolicy::Open),
        Some("mention") => Ok(RoomPolicy::Mention),
        Some("allowlist") => Ok(RoomPolicy::Allowlist),
        Some(other) => Err(config(format!(
            "channels.{NAME}.groupPolicy is {other:?}; expected \"open\", \"mention\" or \"allowlist\""
        ))),
    }
}

/// Whether `id` has the shape of a Matrix user id: `@localpart:server`.
fn is_user_id(id: &str) -> bool {
    id.strip_prefix('@')
        .and_then(|rest| rest.split_once(':'))
        .is_some_and(|(local, server)| {
            !local.is_empty() && !server.is_empty() && !id.chars().any(char::is_whitespace)
        })
}

impl MatrixSettings {
    /// Reads the raw `channels.matrix` block; an error names the key and never shows a password or token.
    ///
    /// ```
    /// use nanobot_matrix::{Login, MatrixSettings};
    ///
    /// let s = MatrixSettings::from_block(&serde_json::json!({
    ///     "homeserver": "https://matrix.example.org/", "userId": "@bot:example.org", "password": "pw"
    /// })).unwrap();
    /// assert_eq!(s.homeserver, "https://matrix.example.org");
    /// assert!(matches!(s.login, Login::Password(_)));
    ///
    /// let err = MatrixSettings::from_block(&serde_json::json!({
    ///     "userId": "@bot:example.org", "accessToken": "syt_secret"
    /// })).unwrap_err();
    /// assert!(err.to_string().contains("channels.matrix.deviceId"));
    /// assert!(!err.to_string().contains("syt_secret"));
    /// ```
    pub fn from_block(block: &serde_json::Value) -> Result<Self, ChannelError> {
        let raw: Raw =
            serde_json::from_value(block.clone()).map_err(|e| config(format!("channels.{NAME}: {e}")))?;
        let homeserver = raw
            .homeserver
            .as_deref()
            .map(str::trim)
            .filter(|h| !h.is_empty())
            .unwrap_or(DEFAULT_HOMESERVER)
            .trim_end_matches('/')
            .to_owned();
        if !(homeserver.starts_with("http://") || homeserver.starts_with("https://")) {
            return Err(config(format!(
                "channels.{NAME}.homeserver {homeserver:?} must be the server's http(s) address (e.g. \
                 https://matrix.example.org)"
            )));
        }
        let user_id = raw.user_id.trim().to_owned();
        if user_id.is_empty() {
            return Err(config(format!(
                "channels.{NAME}.userId is empty: put the bot account's full id there (e.g. @nanobot:example.org)"
            )));
        }
        if !is_user_id(&user_id) {
            return Err(config(format!(
                "channels.{NAME}.userId {user_id:?} is not a Matrix user id (@name:server)"
            )));
        }
        let device_id = raw.device_id.trim().to_owned();
        let login = if !raw.password.expose().is_empty() {
            Login::Password(raw.password)
        } else if raw.access_token.expose().trim().is_empty() {
            return Err(config(format!(
                "channels.{NAME} has no login: set `password`, or `accessToken` with its `deviceId`"
            )));
        } else if device_id.is_empty() {
            return Err(config(format!(
                "channels.{NAME}.deviceId is empty: an accessToken needs the device id it was issued for"
            )));
        } else {
            Login::Token {
                access_token: Secret::new(raw.access_token.expose().trim()),
                device_id,
            }
        };
        let proxy = raw
            .proxy
            .as_deref()
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|p| {
                Secret::new(if p.contains("://") {
                    p.to_owned()
                } else {
                    format!("http://{p}")
                })
            });
        Ok(Self {
            homeserver,
            user_id,
            login,
            allow_from: raw.allow_from,
            group_policy: policy(raw.group_policy.as_deref())?,
            group_allow_from: raw.group_allow_from.iter().map(|r| r.trim().to_owned()).collect(),
            allow_room_mentions: raw.allow_room_mentions,
            streaming: raw.streaming,
            e2ee_enabled: raw.e2ee_enabled.unwrap_or(true),
            e2ee_explicit: raw.e2ee_enabled.is_some(),
            sas_verification: raw.sas_verification,
            sync_stop_grace: Duration::from_secs(raw.sync_stop_grace_seconds.unwrap_or(2)),
            max_media_bytes: raw.max_media_bytes.unwrap_or(DEFAULT_MAX_MEDIA_BYTES),
            max_concurrent_media_downloads: raw
                .max_concurrent_media_downloads
                .unwrap_or(2)
                .clamp(1, MAX_CONCURRENT_DOWNLOADS),
            proxy,
        })
    }

    /// The name of nio's store file 0.3.5 keeps for this account (`<userId with ':' as '_'>_<deviceId>.db`).
    pub fn nio_store_name(&self, device_id: &str) -> String {
        format!("{}_{device_id}.db", self.user_id.replace(':', "_"))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn ok(block: serde_json::Value) -> MatrixSettings {
        MatrixSettings::from_block(&block).unwrap()
    }

    fn err(block: serde_json::Value) -> String {
        MatrixSettings::from_block(&block).unwrap_err().to_string()
    }

    #[test]
    fn defaults_are_0_3_5s() {
        let s = ok(json!({"userId": "@bot:example.org", "password": "pw"}));
        assert_eq!(s.homeserver, DEFAULT_HOMESERVER);
        assert_eq!(s.group_policy, RoomPolicy::Open);
        assert!(
            s.e2ee_enabled && !s.e2ee_explicit,
            "0.3.5's runtime default is on"
        );
        assert!(!s.streaming && !s.allow_room_mentions && !s.sas_verification);
        assert_eq!(s.max_media_bytes, DEFAULT_MAX_MEDIA_BYTES);
        assert_eq!(s.max_concurrent_media_downloads, 2);
        assert_eq!(s.sync_stop_grace, Duration::from_secs(2));
        assert!(s.allow_from.is_empty());
    }

    #[test]
    fn snake_case_keys_and_every_value_are_read() {
        let s = ok(json!({
            "homeserver": " http://127.0.0.1:8008/ ", "user_id": "@b:h", "access_token": " t ",
            "device_id": "DEV", "allow_from": ["@a:h"], "group_policy": "allowlist",
            "group_allow_from": ["!r:h"], "allow_room_mentions": true, "streaming": true,
            "e2ee_enabled": false, "max_media_bytes": 0, "max_concurrent_media_downloads": 0,
            "sync_stop_grace_seconds": 5, "proxy": "proxy.local:3128"
        }));
        assert_eq!(s.homeserver, "http://127.0.0.1:8008");
        assert_eq!(
            s.login,
            Login::Token {
                access_token: Secret::new("t"),
                device_id: "DEV".into()
            }
        );
        assert_eq!(s.group_policy, RoomPolicy::Allowlist);
        assert_eq!(s.group_allow_from, ["!r:h"]);
        assert!(s.allow_room_mentions && s.streaming && !s.e2ee_enabled && s.e2ee_explicit);
        assert_eq!(s.max_media_bytes, 0);
        assert_eq!(s.max_concurrent_media_downloads, 1, "at least one download");
        assert_eq!(s.sync_stop_grace, Duration::from_secs(5));
        assert_eq!(
            s.proxy.as_ref().map(Secret::expose),
            Some("http://proxy.local:3128")
        );
        assert_eq!(s.nio_store_name("DEV"), "@b_h_DEV.db");
    }

    #[test]
    fn a_password_wins_over_a_token() {
        let s = ok(json!({"userId": "@b:h", "password": "pw", "accessToken": "t", "deviceId": "D"}));
        assert!(matches!(s.login, Login::Password(_)));
    }

    #[test]
    fn bad_blocks_name_the_key_and_hide_secrets() {
        assert!(err(json!({"password": "pw"})).contains("channels.matrix.userId is empty"));
        assert!(err(json!({"userId": "bot", "password": "pw"})).contains("not a Matrix user id"));
        assert!(err(json!({"userId": "@bot:h"})).contains("has no login"));
        let e = err(json!({"userId": "@bot:h", "accessToken": "syt_TOPSECRET"}));
        assert!(e.contains("deviceId") && !e.contains("TOPSECRET"), "{e}");
        let e = err(json!({"userId": "@bot:h", "password": "pw", "homeserver": "matrix.org"}));
        assert!(e.contains("channels.matrix.homeserver"), "{e}");
        let e = err(json!({"userId": "@bot:h", "password": "pw", "groupPolicy": "everyone"}));
        assert!(e.contains("channels.matrix.groupPolicy"), "{e}");
        let s = ok(
            json!({"userId": "@bot:h", "password": "pw", "proxy": "http://u:PROXYPASS@p:1",
            "maxConcurrentMediaDownloads": 1_000_000_000u64}),
        );
        assert!(
            !format!("{s:?}").contains("PROXYPASS"),
            "the proxy's password is not shown"
        );
        assert_eq!(s.max_concurrent_media_downloads, MAX_CONCURRENT_DOWNLOADS);
        let e = err(json!({"userId": "@bot:h", "password": "hunter2", "allowFrom": "x"}));
        assert!(e.contains("channels.matrix") && !e.contains("hunter2"), "{e}");
    }
}
