//! `nanobot channels login CHANNEL`: interactive linking (WhatsApp's and personal WeChat's QR codes).

use std::io::Write;
#[cfg(feature = "whatsapp")]
use std::path::PathBuf;
#[cfg(feature = "whatsapp")]
use std::time::Duration;

#[cfg(feature = "whatsapp")]
use nanobot_whatsapp::{WhatsAppConfig, WhatsAppSettings};

#[cfg(any(feature = "whatsapp", feature = "weixin"))]
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
    match name.as_str() {
        "whatsapp" => login_whatsapp(env, args, out),
        "weixin" => login_weixin(env, args, out),
        _ => Err(CliError::Usage(if TOKEN_CHANNELS.contains(&name.as_str()) {
            format!(
                "`{name}` has no interactive login: put its credentials in `channels.{name}` of the config"
            )
        } else {
            format!(
                "unknown channel {:?}: `nanobot channels login` supports whatsapp and weixin",
                args.channel
            )
        })),
    }
}

/// Without the `weixin` cargo feature there is nothing to log in to.
#[cfg(not(feature = "weixin"))]
fn login_weixin(_env: &CliEnv, _args: &ChannelLoginArgs, _out: &mut dyn Write) -> Result<(), CliError> {
    Err(CliError::Usage(
        "this nanobot was built without the personal WeChat channel (cargo feature `weixin`)".to_owned(),
    ))
}

/// `nanobot channels login weixin [--force]`: 0.3.5's QR login. The QR code is printed, the number WeChat may
/// show on the phone is read from the terminal, and the token goes to `<stateDir>/account.json` and into
/// `channels.weixin` of the config file (as 0.3.5 writes them). Exits 1 when the login fails.
#[cfg(feature = "weixin")]
fn login_weixin(env: &CliEnv, args: &ChannelLoginArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let s = setup::load(env, &args.config, false)?;
    let block = s
        .loaded
        .config
        .channels
        .other
        .get(nanobot_weixin::NAME)
        .cloned()
        .unwrap_or_else(|| serde_json::json!({}));
    let settings =
        nanobot_weixin::WeixinSettings::from_block(&block).map_err(|e| CliError::Usage(e.to_string()))?;
    let state_dir = settings.state_dir(&s.paths.data_dir(), Some(s.paths.home()));
    let config_path = s.paths.config_path().to_path_buf();
    out.write_all("🐈 WeChat login\n".as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| CliError::io("write", "stdout", e))?;
    // The number the phone shows, typed in the terminal (a closed stdin ends the login).
    let read_code = || {
        read_line_detached(|| {
            let mut line = String::new();
            match std::io::stdin().read_line(&mut line) {
                Ok(0) => Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the terminal's input is closed",
                )),
                Ok(_) => Ok(line),
                Err(e) => Err(e),
            }
        })
    };
    let rt = crate::runtime()?;
    let logged = rt
        .block_on(nanobot_weixin::login(
            &settings,
            &state_dir,
            Some(&config_path),
            args.force,
            out,
            read_code,
        ))
        .map_err(|e| CliError::Failed(e.to_string()))?;
    if logged.already {
        return Ok(());
    }
    let who = if logged.user_id.is_empty() {
        "<your WeChat id>".to_owned()
    } else {
        logged.user_id.clone()
    };
    writeln!(
        out,
        "✓ WeChat logged in as {who}. Saved in {} and `channels.weixin` of {}.\nEnable it with \"weixin\": \
         {{\"enabled\": true, \"allowFrom\": [\"{who}\"]}} under `channels`, then run `nanobot gateway`.",
        logged.state_file.display(),
        config_path.display()
    )
    .map_err(|e| CliError::io("write", "stdout", e))
}

/// `read` (a line of the terminal) on a thread of its own, its answer awaited. When the login gives up meanwhile
/// (its time bound), the wait is dropped and the command ends at once: the thread is left to the process's exit
/// (a read on the runtime's blocking pool would hold the runtime's shutdown until a line came).
#[cfg(feature = "weixin")]
fn read_line_detached<F>(read: F) -> impl std::future::Future<Output = std::io::Result<String>>
where
    F: FnOnce() -> std::io::Result<String> + Send + 'static,
{
    let (tx, rx) = tokio::sync::oneshot::channel();
    let spawned = std::thread::Builder::new()
        .name("weixin-login-input".into())
        .spawn(move || {
            let _ = tx.send(read());
        });
    async move {
        spawned?;
        rx.await
            .map_err(|_| std::io::Error::other("the terminal's input was not read"))?
    }
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

#[cfg(all(test, feature = "weixin"))]
mod tests {
    use super::*;
    use crate::ConfigArgs;
    use nanobot_testkit::fake_weixin::{BOT_ID, FakeWeixin};

    /// `nanobot channels login weixin` against the fake iLink API: the QR code printed, scanned and confirmed on
    /// the "phone", and the token written to `~/.nanobot/weixin/account.json` and into `config.json` (other keys
    /// kept), as 0.3.5 writes them.
    #[test]
    fn weixin_logs_in_with_a_qr_code_and_writes_both_files() {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let fake = rt.block_on(FakeWeixin::start()).unwrap();
        fake.set_qr_hold(std::time::Duration::from_millis(300));
        let home = tempfile::tempdir().unwrap();
        let dir = home.path().join(".nanobot");
        std::fs::create_dir_all(&dir).unwrap();
        let config = serde_json::json!({"channels": {"sendProgress": false, "weixin": {
            "enabled": true, "baseUrl": fake.base_url(), "cdnBaseUrl": fake.cdn_base_url(),
            "allowFrom": ["alice@im.wechat"]}}});
        std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
        let env = CliEnv::for_home(home.path(), nanobot_util::EnvMap::default());
        let args = ChannelLoginArgs {
            channel: " WeiXin ".into(),
            force: false,
            config: ConfigArgs {
                config: None,
                workspace: None,
            },
        };
        let cli = std::thread::spawn(move || {
            let mut out = Vec::new();
            let result = login(&env, &args, &mut out);
            (result, String::from_utf8(out).unwrap())
        });
        let within = std::time::Duration::from_secs(30);
        let token = rt
            .block_on(async {
                fake.wait_qr_status("wait", within).await?;
                fake.confirm("alice@im.wechat")
            })
            .unwrap()
            .unwrap();
        let (result, out) = cli.join().unwrap();
        result.unwrap();
        assert!(
            out.contains("WeChat login") && out.contains(&fake.qrs()[0].img_content),
            "{out}"
        );
        assert!(out.contains("✓ WeChat logged in as alice@im.wechat"), "{out}");
        assert!(!out.contains(&token), "the token is never printed");
        assert!(token.starts_with(BOT_ID));
        let account: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("weixin/account.json")).unwrap()).unwrap();
        assert_eq!(
            account,
            serde_json::json!({"token": token, "get_updates_buf": "", "context_tokens": {}, "typing_tickets": {},
                "base_url": fake.base_url()})
        );
        let written: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
        assert_eq!(written["channels"]["weixin"]["token"], token);
        assert_eq!(written["channels"]["weixin"]["baseUrl"], fake.base_url());
        assert_eq!(written["channels"]["sendProgress"], false, "other keys kept");

        // An unknown channel names the two that log in.
        let env = CliEnv::for_home(home.path(), nanobot_util::EnvMap::default());
        let args = ChannelLoginArgs {
            channel: "icq".into(),
            force: false,
            config: ConfigArgs {
                config: None,
                workspace: None,
            },
        };
        let err = login(&env, &args, &mut Vec::new()).unwrap_err();
        assert!(err.to_string().contains("supports whatsapp and weixin"), "{err}");
    }

    /// A login that gives up (its time bound) while the number is being typed ends the command at once: the
    /// terminal's read, still waiting, does not hold the runtime's end.
    #[test]
    fn weixin_giving_up_while_a_number_is_typed_does_not_wait_for_the_terminal() {
        let (release, held) = std::sync::mpsc::channel::<()>();
        let (ended_tx, ended) = std::sync::mpsc::channel();
        let cli = std::thread::spawn(move || {
            let rt = crate::runtime().unwrap();
            let read = read_line_detached(move || {
                let _ = held.recv();
                Ok("1234".to_owned())
            });
            let gave_up = rt
                .block_on(async { tokio::time::timeout(std::time::Duration::ZERO, read).await })
                .is_err();
            drop(rt);
            let _ = ended_tx.send(gave_up);
        });
        // (A bound only against a hang: the runtime's end does not wait for the read at all.)
        let result = ended.recv_timeout(std::time::Duration::from_secs(30));
        drop(release);
        cli.join().unwrap();
        assert_eq!(result, Ok(true), "the command waited for the terminal's input");

        // A line typed is the code.
        let rt = crate::runtime().unwrap();
        let code = rt.block_on(read_line_detached(|| Ok("7351\n".to_owned())));
        assert_eq!(code.unwrap(), "7351\n");
    }
}
