//! `channels.whatsapp` as written in `config.json` ([`WhatsAppConfig`]) and resolved ([`WhatsAppSettings`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use nanobot_channels::GroupPolicy;
use nanobot_util::EnvMap;
use serde::{Deserialize, Serialize};

use crate::WhatsAppError;

/// Largest received or sent file, in bytes (WhatsApp's own limit for documents is far above; this bounds memory).
pub const DEFAULT_MAX_MEDIA_BYTES: u64 = 32 * 1024 * 1024;

/// `channels.whatsapp`, with the keys of nanobot 0.3.5 (camelCase, snake_case accepted).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WhatsAppConfig {
    /// Whether the channel runs.
    pub enabled: bool,
    /// Phone numbers (digits, an optional leading `+`) or group JIDs that may talk to the agent; `"*"` allows
    /// everyone, an empty list no one.
    #[serde(alias = "allow_from", deserialize_with = "string_list")]
    pub allow_from: Vec<String>,
    /// `open` (every message of an allowed group) or `mention` (only messages that mention the linked account or
    /// reply to it). 0.3.5's default is `open`.
    #[serde(alias = "group_policy")]
    pub group_policy: Option<String>,
    /// Where the linked-device credentials are kept (default `<data dir>/whatsapp-auth/baileys`).
    #[serde(alias = "database_path")]
    pub database_path: String,
    /// HTTP proxy for the WhatsApp connection (`host:port` or a URL).
    pub proxy: String,
    /// Known LID → phone number pairs (WhatsApp's privacy ids), used to name senders by phone number.
    #[serde(alias = "lid_mappings")]
    pub lid_mappings: BTreeMap<String, String>,
    /// Keys this version does not read (`bridgeUrl`, `bridgeToken` of older releases …), kept on save.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

use nanobot_util::de::string_list;

impl WhatsAppConfig {
    /// Reads the raw `channels.whatsapp` block; the error names the block and the bad key.
    pub fn from_block(block: &serde_json::Value) -> Result<Self, WhatsAppError> {
        serde_json::from_value(block.clone())
            .map_err(|e| WhatsAppError::Config(format!("channels.whatsapp: {e}")))
    }
}

/// How the bridge process is run: the Node.js program and where the bridge's files and npm packages live.
#[derive(Debug, Clone, PartialEq)]
pub struct BridgeSettings {
    /// The `node` program (a bare name is looked up on `PATH`).
    pub node: PathBuf,
    /// The directory the bridge script and its `package.json` are written to; its `node_modules` holds `ws` and
    /// `@whiskeysockets/baileys` (installed by `nanobot channels login whatsapp`).
    pub dir: PathBuf,
    /// Where the bridge's npm packages are, when not in `<dir>/node_modules` (the tests' peer install).
    pub node_modules: Option<PathBuf>,
    /// Tests only: a module that replaces the WhatsApp connection inside the bridge (`NANOBOT_WA_SOCKET`).
    pub socket_module: Option<PathBuf>,
    /// Extra environment of the bridge process (the bridge otherwise starts with an empty environment but
    /// `PATH`, so no secret of nanobot's reaches it).
    pub env: Vec<(String, String)>,
}

/// Variables of nanobot's environment the bridge inherits (the rest, with API keys and tokens, is not passed):
/// what Node.js needs to run, locale and time zone, proxies and trusted certificates.
pub const BRIDGE_INHERITED_VARS: &[&str] = &[
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "TZ",
    "TMPDIR",
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "NO_PROXY",
    "no_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
];
/// `NANOBOT_WHATSAPP_NODE`: the Node.js program to run the bridge with (default `node` from `PATH`).
pub const NODE_VAR: &str = "NANOBOT_WHATSAPP_NODE";
/// `NANOBOT_WHATSAPP_NODE_MODULES`: where the bridge's npm packages are, instead of `<bridge dir>/node_modules`.
pub const NODE_MODULES_VAR: &str = "NANOBOT_WHATSAPP_NODE_MODULES";
/// `NANOBOT_WHATSAPP_SOCKET_MODULE`: tests only: a module replacing the WhatsApp connection inside the bridge.
pub const SOCKET_MODULE_VAR: &str = "NANOBOT_WHATSAPP_SOCKET_MODULE";
/// Passed to the bridge along with [`SOCKET_MODULE_VAR`]: where the tests' scripted socket reports.
pub const TEST_CONTROL_VAR: &str = "NANOBOT_WA_TEST_CONTROL";

impl BridgeSettings {
    /// Applies nanobot's environment (passed in): the inherited variables ([`BRIDGE_INHERITED_VARS`]) and the
    /// overrides [`NODE_VAR`], [`NODE_MODULES_VAR`] and [`SOCKET_MODULE_VAR`].
    #[must_use]
    pub fn with_environment(mut self, vars: &EnvMap) -> Self {
        let set = |k: &str| vars.get(k).filter(|v| !v.is_empty());
        for k in BRIDGE_INHERITED_VARS {
            if let Some(v) = set(k) {
                self.env.push(((*k).to_string(), v.to_owned()));
            }
        }
        if let Some(node) = set(NODE_VAR) {
            self.node = PathBuf::from(node);
        }
        if let Some(m) = set(NODE_MODULES_VAR) {
            self.node_modules = Some(PathBuf::from(m));
        }
        if let Some(m) = set(SOCKET_MODULE_VAR) {
            self.socket_module = Some(PathBuf::from(m));
            if let Some(c) = set(TEST_CONTROL_VAR) {
                self.env.push((TEST_CONTROL_VAR.to_string(), c.to_owned()));
            }
        }
        self
    }

    /// The bridge of a data directory: files in `<data_dir>/whatsapp/bridge`, `node` from `PATH`.
    pub fn in_data_dir(data_dir: &Path) -> Self {
        Self {
            node: PathBuf::from("node"),
            dir: data_dir.join("whatsapp").join("bridge"),
            node_modules: None,
            socket_module: None,
            env: Vec::new(),
        }
    }

    /// Where the bridge's npm packages are looked up.
    pub fn node_modules(&self) -> PathBuf {
        self.node_modules
            .clone()
            .unwrap_or_else(|| self.dir.join("node_modules"))
    }
}

/// Everything the WhatsApp channel needs, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct WhatsAppSettings {
    /// `allowFrom`, normalised (a leading `+` and spaces dropped from phone numbers).
    pub allow_from: Vec<String>,
    /// `groupPolicy` (`open` or `mention`).
    pub group_policy: GroupPolicy,
    /// The directory of the linked-device credentials.
    pub auth_dir: PathBuf,
    /// `proxy`, as a URL (`http://` added to a bare `host:port`), or `None`.
    pub proxy: Option<String>,
    /// `lidMappings`: LID user → phone number.
    pub lid_mappings: BTreeMap<String, String>,
    /// Where received files are saved (`<media>/whatsapp`).
    pub media_dir: PathBuf,
    /// Largest file received or sent, in bytes.
    pub max_media_bytes: u64,
    /// The bridge process.
    pub bridge: BridgeSettings,
}

/// `+49 170 1234567` → `491701234567`; other entries (`*`, group JIDs) unchanged.
fn normalize_allow_entry(entry: &str) -> String {
    let t = entry.trim();
    let digits: String = t
        .chars()
        .filter(|c| !matches!(c, ' ' | '-' | '(' | ')'))
        .collect();
    match digits.strip_prefix('+') {
        Some(rest) if !rest.is_empty() && rest.chars().all(|c| c.is_ascii_digit()) => rest.to_string(),
        _ if !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit()) => digits,
        _ => t.to_string(),
    }
}

impl WhatsAppSettings {
    /// Validates `channels.whatsapp`. `data_dir` is nanobot's data directory (credentials, the bridge), received
    /// files go to `<media_root>/whatsapp`. Errors name the offending key.
    pub fn from_config(
        config: &WhatsAppConfig,
        data_dir: &Path,
        media_root: &Path,
    ) -> Result<Self, WhatsAppError> {
        let group_policy = match config.group_policy.as_deref().map(str::trim).unwrap_or("open") {
            "" | "open" => GroupPolicy::Open,
            "mention" => GroupPolicy::Mention,
            other => {
                return Err(WhatsAppError::Config(format!(
                    "channels.whatsapp.groupPolicy {other:?} must be \"open\" or \"mention\""
                )));
            }
        };
        let proxy = match config.proxy.trim() {
            "" => None,
            p if p.contains("://") => {
                if !(p.starts_with("http://") || p.starts_with("https://")) {
                    return Err(WhatsAppError::Config(format!(
                        "channels.whatsapp.proxy {p:?} must be an http:// or https:// proxy (or host:port)"
                    )));
                }
                Some(p.to_string())
            }
            p => Some(format!("http://{p}")),
        };
        Ok(Self {
            allow_from: config
                .allow_from
                .iter()
                .map(|e| normalize_allow_entry(e))
                .collect(),
            group_policy,
            auth_dir: auth_dir(&config.database_path, data_dir),
            proxy,
            lid_mappings: config
                .lid_mappings
                .iter()
                .map(|(k, v)| (bare_user(k).to_string(), normalize_allow_entry(v)))
                .filter(|(_, v)| !v.is_empty())
                .collect(),
            media_dir: media_root.join(crate::NAME),
            max_media_bytes: DEFAULT_MAX_MEDIA_BYTES,
            bridge: BridgeSettings::in_data_dir(data_dir),
        })
    }
}

/// The credentials directory for `databasePath`.
///
/// Empty: `<data_dir>/whatsapp-auth/baileys`. A path that is an existing file (0.3.5's neonize SQLite database,
/// which this implementation cannot read) is left alone and a sibling directory `<name>-baileys` is used. Any
/// other path is the directory itself. `~/` is expanded against the data directory's home when it can be found.
pub fn auth_dir(database_path: &str, data_dir: &Path) -> PathBuf {
    let Some(path) = configured_path(database_path, data_dir) else {
        return data_dir.join("whatsapp-auth").join("baileys");
    };
    if path.is_file() {
        let stem = path
            .file_stem()
            .map_or_else(|| "whatsapp".into(), |s| s.to_string_lossy().into_owned());
        return path.with_file_name(format!("{stem}-baileys"));
    }
    path
}

/// `databasePath` as a path (`~/` expanded against the data directory's home when it can be found); `None` when
/// it is empty.
fn configured_path(database_path: &str, data_dir: &Path) -> Option<PathBuf> {
    let configured = database_path.trim();
    if configured.is_empty() {
        return None;
    }
    Some(match configured.strip_prefix("~/") {
        // The data dir is `~/.nanobot` in the default layout; its parent is the home.
        Some(rest) => data_dir
            .parent()
            .map_or_else(|| PathBuf::from(configured), |home| home.join(rest)),
        None => PathBuf::from(configured),
    })
}

/// The Python nanobot 0.3.5's WhatsApp login on this machine, if there is one: its neonize database (`databasePath`
/// when that names a file, else `<data_dir>/whatsapp-auth/neonize.db`, 0.3.5's default). This implementation cannot
/// use it (a user switching links nanobot-rs as another device) and never touches it, so 0.3.5 keeps working when
/// the user switches back.
pub fn python_login(database_path: &str, data_dir: &Path) -> Option<PathBuf> {
    let path = configured_path(database_path, data_dir)
        .unwrap_or_else(|| data_dir.join("whatsapp-auth").join("neonize.db"));
    path.is_file().then_some(path)
}

/// `4917012345:3@s.whatsapp.net` → `4917012345`.
pub(crate) fn bare_user(jid: &str) -> &str {
    let user = jid.split('@').next().unwrap_or(jid);
    user.split(':').next().unwrap_or(user).trim()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_python_keys_and_validates() {
        let dir = tempfile::tempdir().unwrap();
        let block = serde_json::json!({"enabled": true, "allowFrom": ["+49 170 1234567", 4915, "*"],
            "groupPolicy": "mention", "proxy": "127.0.0.1:8080", "lidMappings": {"1234@lid": "+4915"},
            "bridgeUrl": "ws://localhost:3001"});
        let c = WhatsAppConfig::from_block(&block).unwrap();
        assert_eq!(
            c.extra["bridgeUrl"], "ws://localhost:3001",
            "unknown keys are kept"
        );
        let s = WhatsAppSettings::from_config(&c, dir.path(), &dir.path().join("media")).unwrap();
        assert_eq!(s.allow_from, ["491701234567", "4915", "*"]);
        assert_eq!(s.group_policy, GroupPolicy::Mention);
        assert_eq!(s.proxy.as_deref(), Some("http://127.0.0.1:8080"));
        assert_eq!(s.lid_mappings["1234"], "4915");
        assert_eq!(s.auth_dir, dir.path().join("whatsapp-auth/baileys"));
        assert_eq!(s.media_dir, dir.path().join("media/whatsapp"));

        let c = WhatsAppConfig::from_block(&serde_json::json!({})).unwrap();
        let s = WhatsAppSettings::from_config(&c, dir.path(), dir.path()).unwrap();
        assert_eq!(s.group_policy, GroupPolicy::Open, "0.3.5 defaults to open");

        let c = WhatsAppConfig::from_block(&serde_json::json!({"group_policy": "allowlist"})).unwrap();
        let err = WhatsAppSettings::from_config(&c, dir.path(), dir.path()).unwrap_err();
        assert!(
            err.to_string()
                .contains("channels.whatsapp.groupPolicy \"allowlist\""),
            "{err}"
        );
        let c = WhatsAppConfig::from_block(&serde_json::json!({"proxy": "socks5://x:1"})).unwrap();
        let err = WhatsAppSettings::from_config(&c, dir.path(), dir.path()).unwrap_err();
        assert!(err.to_string().contains("channels.whatsapp.proxy"), "{err}");
        let err = WhatsAppConfig::from_block(&serde_json::json!({"allowFrom": "123"})).unwrap_err();
        assert!(err.to_string().starts_with("channels.whatsapp:"), "{err}");
    }

    #[test]
    fn the_bridge_gets_only_the_environment_it_needs() {
        let vars = EnvMap::from_iter([
            ("PATH", "/usr/bin"),
            ("OPENAI_API_KEY", "sk-SECRET"),
            ("HTTPS_PROXY", "http://proxy:3128"),
            (NODE_VAR, "/opt/node/bin/node"),
            (TEST_CONTROL_VAR, "127.0.0.1:1"),
        ]);
        let b = BridgeSettings::in_data_dir(Path::new("/d")).with_environment(&vars);
        assert_eq!(b.node, Path::new("/opt/node/bin/node"));
        assert_eq!(b.dir, Path::new("/d/whatsapp/bridge"));
        assert_eq!(b.node_modules(), Path::new("/d/whatsapp/bridge/node_modules"));
        let names: Vec<&str> = b.env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            names,
            ["PATH", "HTTPS_PROXY"],
            "no API key, no test hook without the socket module"
        );
    }

    #[test]
    fn the_python_login_is_found_where_0_3_5_keeps_it() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join(".nanobot");
        assert_eq!(python_login("", &data), None);
        std::fs::create_dir_all(data.join("whatsapp-auth")).unwrap();
        std::fs::write(data.join("whatsapp-auth/neonize.db"), "SQLite format 3").unwrap();
        assert_eq!(
            python_login("", &data),
            Some(data.join("whatsapp-auth/neonize.db"))
        );
        std::fs::write(dir.path().join("wa.db"), "SQLite format 3").unwrap();
        assert_eq!(python_login("~/wa.db", &data), Some(dir.path().join("wa.db")));
        assert_eq!(python_login("~/missing.db", &data), None);
    }

    #[test]
    fn a_neonize_database_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("neonize.db");
        std::fs::write(&db, b"SQLite format 3\0").unwrap();
        assert_eq!(
            auth_dir(db.to_str().unwrap(), dir.path()),
            dir.path().join("neonize-baileys")
        );
        assert_eq!(std::fs::read(&db).unwrap(), b"SQLite format 3\0");
        let plain = dir.path().join("wa");
        assert_eq!(auth_dir(plain.to_str().unwrap(), dir.path()), plain);
        assert_eq!(
            auth_dir("~/wa-auth", &dir.path().join(".nanobot")),
            dir.path().join("wa-auth")
        );
    }
}
