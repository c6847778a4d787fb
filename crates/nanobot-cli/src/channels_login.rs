//! `nanobot channels login CHANNEL`: interactive linking (WhatsApp's QR code).

use std::io::Write;
#[cfg(feature = "whatsapp")]
use std::path::PathBuf;
#[cfg(feature = "whatsapp")]
use std::time::Duration;

#[cfg(feature = "whatsapp")]
use nanobot_whatsapp::{WhatsAppConfig, WhatsAppSettings};

#[cfg(feature = "whatsapp")]
use crate::setup;
use crate::setup::CliEnv;
use crate::{ChannelLoginArgs, CliError};

#[cfg(feature = "whatsapp")]
/// How long the QR codes are shown before giving up (WhatsApp itself stops offering codes after a few minutes).
const LOGIN_BOUND: Duration = Duration::from_secs(300);

#[cfg(feature = "whatsapp")]
/// `NANOBOT_WHATSAPP_NPM`: the npm program used to install the bridge (default `npm` from `PATH`).
const NPM_VAR: &str = "NANOBOT_WHATSAPP_NPM";

/// Channels configured with keys or tokens only (nothing to log in to interactively).
const TOKEN_CHANNELS: &[&str] = &[
    "telegram",
    "discord",
    "slack",
    "feishu",
    "dingtalk",
    "email",
    "websocket",
];

pub(crate) fn login(env: &CliEnv, args: &ChannelLoginArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let name = args.channel.trim().to_ascii_lowercase();
    if name != "whatsapp" {
        return Err(CliError::Usage(if TOKEN_CHANNELS.contains(&name.as_str()) {
            format!(
                "`{name}` has no interactive login: put its credentials in `channels.{name}` of the config"
            )
        } else {
            format!(
                "unknown channel {:?}: `nanobot channels login` supports whatsapp",
                args.channel
            )
        }));
    }
    login_whatsapp(env, args, out)
}

/// Without the `whatsapp` cargo feature there is nothing to log in to.
#[cfg(not(feature = "whatsapp"))]
fn login_whatsapp(_env: &CliEnv, _args: &ChannelLoginArgs, _out: &mut dyn Write) -> Result<(), CliError> {
    Err(CliError::Usage(
        "this nanobot was built without the WhatsApp channel (cargo feature `whatsapp`)".to_owned(),
    ))
}

#[cfg(feature = "whatsapp")]
fn login_whatsapp(env: &CliEnv, args: &ChannelLoginArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let s = setup::load(env, &args.config, false)?;
    let block = s
        .loaded
        .config
        .channels
        .other
        .get(nanobot_whatsapp::NAME)
        .cloned()
        .unwrap_or_else(|| serde_json::json!({}));
    let config = WhatsAppConfig::from_block(&block).map_err(CliError::WhatsApp)?;
    let data_dir = s.paths.data_dir();
    let mut settings = WhatsAppSettings::from_config(&config, &data_dir, &s.paths.media_dir(None))
        .map_err(CliError::WhatsApp)?;
    let vars = env.vars.clone();
    settings.bridge = settings.bridge.with_environment(&vars);
    let text = |out: &mut dyn Write, t: &str| {
        out.write_all(t.as_bytes())
            .and_then(|()| out.flush())
            .map_err(|e| CliError::io("write", "stdout", e))
    };
    text(out, "🐈 WhatsApp login\n")?;
    if args.force && nanobot_whatsapp::credentials_present(&settings.auth_dir) {
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let aside = PathBuf::from(format!("{}.replaced-{stamp}", settings.auth_dir.display()));
        std::fs::rename(&settings.auth_dir, &aside)
            .map_err(|e| CliError::io("move", &settings.auth_dir, e))?;
        text(
            out,
            &format!(
                "The previous credentials were moved to {} (delete them when the new link works).\n",
                aside.display()
            ),
        )?;
    }
    let rt = crate::runtime()?;
    let result = rt.block_on(async {
        if settings.bridge.socket_module.is_none() && !nanobot_whatsapp::bridge_installed(&settings.bridge) {
            let npm = vars
                .get(NPM_VAR)
                .filter(|v| !v.is_empty())
                .map_or_else(|| PathBuf::from("npm"), PathBuf::from);
            nanobot_whatsapp::install_bridge(&settings.bridge, &npm, &settings.bridge.env, out).await?;
        }
        nanobot_whatsapp::login(&settings, out, LOGIN_BOUND).await
    });
    let linked = result.map_err(CliError::WhatsApp)?;
    text(
        out,
        &format!(
            "✓ WhatsApp linked as +{}. Credentials: {}\nEnable it with \"whatsapp\": {{\"enabled\": true, \"allowFrom\": [\"<your number>\"]}} under `channels`, then run `nanobot gateway`.\n",
            linked.phone,
            settings.auth_dir.display()
        ),
    )
}
