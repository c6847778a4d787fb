//! How the WeCom channel plugs into nanobot: its [`DESCRIPTOR`].

use std::sync::Arc;

use nanobot_channels::descriptor::{enabled_block, nobody_allowed, ssrf_guard};
use nanobot_channels::{
    Block, Capabilities, Channel, ChannelDescriptor, ChannelError, Credentials, Finding, Places, Services,
};
use nanobot_config::Config;

use crate::settings::DEFAULT_WS_URL;
use crate::{NAME, WecomChannel, WecomSettings};

/// The WeCom channel's descriptor: `channels.wecom`, built when enabled; received media behind the SSRF guard.
pub const DESCRIPTOR: ChannelDescriptor = ChannelDescriptor {
    name: NAME,
    capabilities: Capabilities::TEXT.files(true).groups(true),
    block: Block::Raw,
    credentials: Credentials::Keys(&["botId", "secret"]),
    doctor,
    build,
};

fn build(config: &Config, services: &Services<'_>) -> Result<Arc<dyn Channel>, ChannelError> {
    let block = enabled_block(config, NAME).unwrap_or(&serde_json::Value::Null);
    let settings = WecomSettings::from_block(block)?;
    Ok(Arc::new(
        WecomChannel::new(settings, services.places.media_root)
            .with_ssrf_guard(ssrf_guard(config, NAME)?)
            .with_pairing((services.pairing)()?),
    ))
}

fn doctor(config: &Config, _: &Places<'_>) -> Vec<Finding> {
    let Some(block) = enabled_block(config, NAME) else {
        return Vec::new();
    };
    let s = match WecomSettings::from_block(block) {
        Ok(s) => s,
        Err(e) => {
            return vec![Finding::problem(
                e.to_string(),
                "in the WeCom admin console create an AI bot (智能机器人), set its API mode to the long connection, \
                 and put its Bot ID and Secret in `channels.wecom` (botId, secret)",
            )];
        }
    };
    let mut f = vec![Finding::ok(format!(
        "wecom: AI bot {} over {}",
        s.bot_id, s.ws_url
    ))];
    if s.ws_url.starts_with("ws://") {
        f.push(Finding::warn(
            format!(
                "wecom: {} is plain ws://: the bot's secret travels unencrypted",
                s.ws_url
            ),
            format!(
                "remove `channels.wecom.wsUrl` (WeCom's own is {DEFAULT_WS_URL}) or use a wss:// address"
            ),
        ));
    }
    if s.allow_from.is_empty() {
        f.push(nobody_allowed(
            NAME,
            "add WeCom userids to `channels.wecom.allowFrom` (or \"*\"); a stranger's first message gets a pairing \
             code that shows their userid",
        ));
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use nanobot_channels::descriptor::Level;

    fn config(block: serde_json::Value) -> Config {
        let text = serde_json::json!({"channels": {"wecom": block}}).to_string();
        nanobot_config::load_str(
            &text,
            std::path::Path::new("config.json"),
            &nanobot_util::EnvMap::default(),
        )
        .unwrap()
        .config
    }

    fn places<'a>(dir: &'a std::path::Path, vars: &'a nanobot_util::EnvMap) -> Places<'a> {
        Places {
            data_dir: dir,
            media_root: dir,
            workspace: dir,
            vars,
        }
    }

    #[test]
    fn doctor_names_the_fix_and_never_the_secret() {
        let dir = std::env::temp_dir();
        let vars = nanobot_util::EnvMap::default();
        let disabled = config(serde_json::json!({"enabled": false, "botId": "b", "secret": "s"}));
        assert!(!DESCRIPTOR.enabled(&disabled));
        assert!((DESCRIPTOR.doctor)(&disabled, &places(&dir, &vars)).is_empty());

        let missing = config(serde_json::json!({"enabled": true, "botId": "b"}));
        assert!(!DESCRIPTOR.credentials_set(&missing, &places(&dir, &vars)));
        let found = (DESCRIPTOR.doctor)(&missing, &places(&dir, &vars));
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].level, Level::Problem);
        assert!(
            found[0].what.contains("channels.wecom.secret is empty"),
            "{found:?}"
        );
        assert!(found[0].fix.contains("Bot ID and Secret"), "{found:?}");

        let open = config(
            serde_json::json!({"enabled": true, "botId": "aib-1", "secret": "SEKRIT-9",
            "wsUrl": "ws://127.0.0.1:1"}),
        );
        assert!(DESCRIPTOR.enabled(&open) && DESCRIPTOR.credentials_set(&open, &places(&dir, &vars)));
        let found = (DESCRIPTOR.doctor)(&open, &places(&dir, &vars));
        let levels: Vec<Level> = found.iter().map(|f| f.level).collect();
        assert_eq!(levels, [Level::Ok, Level::Warn, Level::Warn], "{found:?}");
        assert!(found[1].what.contains("plain ws://"), "{found:?}");
        assert!(found[2].fix.contains("channels.wecom.allowFrom"), "{found:?}");
        assert!(!format!("{found:?}").contains("SEKRIT"));
    }
}
