//! How the personal WeChat channel plugs into nanobot: its [`DESCRIPTOR`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use nanobot_channels::descriptor::{enabled_block, nobody_allowed, ssrf_guard};
use nanobot_channels::{
    Block, Capabilities, Channel, ChannelDescriptor, ChannelError, Credentials, Finding, Places, Services,
};
use nanobot_config::Config;

use crate::account::{ACCOUNT_FILE, Account};
use crate::{NAME, WeixinChannel, WeixinSettings};

/// The personal WeChat channel's descriptor: `channels.weixin`, built when enabled, with the gateway's pairing
/// store, transcriber and SSRF guard. Its credentials are the token in the block or in
/// `<stateDir>/account.json` (where the QR login writes it).
pub const DESCRIPTOR: ChannelDescriptor = ChannelDescriptor {
    name: NAME,
    capabilities: Capabilities::TEXT.files(true),
    block: Block::Raw,
    credentials: Credentials::Check(credentials_set),
    doctor,
    build,
};

/// The home directory the gateway was given (to expand `~` in `stateDir`).
fn home(places: &Places<'_>) -> Option<PathBuf> {
    places.vars.non_empty("HOME").map(PathBuf::from)
}

fn state_dir(settings: &WeixinSettings, places: &Places<'_>) -> PathBuf {
    settings.state_dir(places.data_dir, home(places).as_deref())
}

/// Where the token comes from: `Some("config")`, `Some(<account.json>)`, or `None`.
fn token_source(settings: &WeixinSettings, dir: &Path) -> Option<String> {
    if !settings.token.expose().is_empty() {
        return Some(format!("channels.{NAME}.token"));
    }
    match Account::read(dir) {
        Ok(Some(a)) if !a.token.is_empty() => Some(dir.join(ACCOUNT_FILE).display().to_string()),
        _ => None,
    }
}

fn credentials_set(config: &Config, places: &Places<'_>) -> bool {
    let block = config
        .channels
        .other
        .get(NAME)
        .unwrap_or(&serde_json::Value::Null);
    WeixinSettings::from_block(block)
        .ok()
        .is_some_and(|s| token_source(&s, &state_dir(&s, places)).is_some())
}

fn build(config: &Config, services: &Services<'_>) -> Result<Arc<dyn Channel>, ChannelError> {
    let block = enabled_block(config, NAME).unwrap_or(&serde_json::Value::Null);
    let settings = WeixinSettings::from_block(block)?;
    let dir = state_dir(&settings, &services.places);
    let mut channel = WeixinChannel::new(settings, dir, services.places.media_root)
        .with_ssrf_guard(ssrf_guard(config, NAME)?)
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
    let s = match WeixinSettings::from_block(block) {
        Ok(s) => s,
        Err(e) => {
            return vec![Finding::problem(
                e.to_string(),
                "fix the key in `channels.weixin` (0.3.5's keys and ranges; see docs/channels.md, \"Personal \
                 WeChat\")",
            )];
        }
    };
    let dir = state_dir(&s, places);
    let mut f = Vec::new();
    match token_source(&s, &dir) {
        Some(from) => f.push(Finding::ok(format!(
            "weixin: logged in (the token in {from}) on {}",
            s.base_url
        ))),
        None => f.push(Finding::problem(
            format!(
                "weixin is enabled but has no login: neither channels.weixin.token nor {} holds a bot token",
                dir.join(ACCOUNT_FILE).display()
            ),
            "run `nanobot channels login weixin` and scan the QR code with WeChat",
        )),
    }
    if s.base_url.starts_with("http://") || s.cdn_base_url.starts_with("http://") {
        f.push(Finding::warn(
            "weixin: baseUrl or cdnBaseUrl is plain http: the bot token and media travel unencrypted",
            "remove `channels.weixin.baseUrl` / `cdnBaseUrl` (WeChat's own are https) or use https:// addresses",
        ));
    }
    if s.reply_progress_messages {
        f.push(Finding::warn(
            "weixin: replyProgressMessages sends progress and tool hints as text here (nanobot-rs publishes no \
             structured tool events for 0.3.5's tool-call items)",
            "keep it if text progress is what you want; otherwise remove `channels.weixin.replyProgressMessages`",
        ));
    }
    if s.allow_from.is_empty() {
        f.push(nobody_allowed(
            NAME,
            "add WeChat user ids (\"…@im.wechat\") to `channels.weixin.allowFrom` (or \"*\"); a stranger's first \
             message gets a pairing code that shows their id",
        ));
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use nanobot_channels::descriptor::Level;

    fn config(block: serde_json::Value) -> Config {
        let text = serde_json::json!({"channels": {"weixin": block}}).to_string();
        nanobot_config::load_str(
            &text,
            std::path::Path::new("config.json"),
            &nanobot_util::EnvMap::default(),
        )
        .unwrap()
        .config
    }

    fn places<'a>(dir: &'a Path, vars: &'a nanobot_util::EnvMap) -> Places<'a> {
        Places {
            data_dir: dir,
            media_root: dir,
            workspace: dir,
            vars,
        }
    }

    #[test]
    fn doctor_names_the_login_and_never_the_token() {
        let dir = tempfile::tempdir().unwrap();
        let vars = nanobot_util::EnvMap::default();
        let p = places(dir.path(), &vars);
        let disabled = config(serde_json::json!({"enabled": false, "token": "t"}));
        assert!(!DESCRIPTOR.enabled(&disabled));
        assert!((DESCRIPTOR.doctor)(&disabled, &p).is_empty());

        let missing = config(serde_json::json!({"enabled": true, "allowFrom": ["a@im.wechat"]}));
        assert!(DESCRIPTOR.enabled(&missing));
        assert!(!DESCRIPTOR.credentials_set(&missing, &p));
        let found = (DESCRIPTOR.doctor)(&missing, &p);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].level, Level::Problem);
        assert!(found[0].what.contains("no login"), "{found:?}");
        assert!(
            found[0].fix.contains("nanobot channels login weixin"),
            "{found:?}"
        );

        // The QR login's account.json is a login.
        let account = Account {
            token: "SEKRIT-wx-1".into(),
            base_url: "https://ilinkai.weixin.qq.com".into(),
            ..Account::default()
        };
        account.save(&dir.path().join("weixin"), "", true).unwrap();
        assert!(DESCRIPTOR.credentials_set(&missing, &p));
        let found = (DESCRIPTOR.doctor)(&missing, &p);
        assert_eq!(found[0].level, Level::Ok, "{found:?}");
        assert!(found[0].what.contains("account.json"), "{found:?}");

        let open = config(
            serde_json::json!({"enabled": true, "token": "SEKRIT-wx-2", "baseUrl": "http://127.0.0.1:1",
            "replyProgressMessages": true}),
        );
        let found = (DESCRIPTOR.doctor)(&open, &p);
        let levels: Vec<Level> = found.iter().map(|f| f.level).collect();
        assert_eq!(
            levels,
            [Level::Ok, Level::Warn, Level::Warn, Level::Warn],
            "{found:?}"
        );
        assert!(found[0].what.contains("channels.weixin.token"), "{found:?}");
        assert!(found[3].fix.contains("channels.weixin.allowFrom"), "{found:?}");
        assert!(!format!("{found:?}").contains("SEKRIT"));

        let bad = config(serde_json::json!({"enabled": true, "contextMessageBudget": 0}));
        let found = (DESCRIPTOR.doctor)(&bad, &p);
        assert_eq!(found[0].level, Level::Problem);
        assert!(
            found[0].what.contains("channels.weixin.contextMessageBudget"),
            "{found:?}"
        );
    }
}
