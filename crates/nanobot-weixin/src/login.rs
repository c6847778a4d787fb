//! The QR login (`nanobot channels login weixin`), as 0.3.5's `WeixinChannel.login`: a QR code shown in the
//! terminal, scanned and confirmed on the phone, the bot token written to `<stateDir>/account.json` and into
//! `channels.weixin` of `config.json`.

use std::future::Future;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nanobot_config::Secret;
use qrcode::QrCode;
use qrcode::render::unicode::Dense1x2;
use serde_json::{Value, json};

use crate::account::{ACCOUNT_FILE, Account, fingerprint};
use crate::api::{self, API_TIMEOUT, CallError, ERR_INVALID, QR_POLL_TIMEOUT, Target};
use crate::{NAME, WeixinSettings};

/// How long a login may wait for the phone, in all (0.3.5's WebUI flow gives up after 10 minutes too).
pub const LOGIN_BOUND: Duration = Duration::from_secs(600);
/// New QR codes fetched after one expired (or was blocked) before giving up (0.3.5's 3).
pub const MAX_QR_REFRESHES: u32 = 3;
/// Pause between two status polls (0.3.5's 1 s; the server holds each poll too).
const POLL_PAUSE: Duration = Duration::from_secs(1);

/// A finished login.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LoggedIn {
    /// The bot token (never printed).
    pub token: Secret,
    /// The API base to use from now on (the `baseurl` the login answered, else `baseUrl`).
    pub base_url: String,
    /// `ilink_bot_id` (empty when already logged in).
    pub bot_id: String,
    /// `ilink_user_id`: who scanned (empty when already logged in).
    pub user_id: String,
    /// `<stateDir>/account.json`.
    pub state_file: PathBuf,
    /// `config.json` when the token was written there.
    pub config_file: Option<PathBuf>,
    /// Nothing was changed: the login that is there was kept (no `force`, or WeChat answered that this bot is
    /// already bound to a token this machine holds).
    pub already: bool,
}

/// Why a login failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoginError {
    /// WeChat refused or failed a step; the message says which.
    #[error("WeChat QR login failed: {0}")]
    Failed(String),
    /// Reading or writing a file.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        #[source]
        source: io::Error,
    },
    /// No login was confirmed within [`LOGIN_BOUND`].
    #[error("WeChat QR login failed: no scan was confirmed within {} minutes", .0.as_secs() / 60)]
    Timeout(Duration),
}

fn failed(why: impl Into<String>) -> LoginError {
    LoginError::Failed(why.into())
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> LoginError + '_ {
    move |source| LoginError::Io {
        path: path.to_owned(),
        source,
    }
}

/// The QR code for `data` as text for a terminal: two modules per character cell, light on dark (it scans on
/// dark and light themes), with its quiet zone (the renderer the WhatsApp login uses).
pub fn render_qr(data: &str) -> Option<String> {
    let code = QrCode::new(data.as_bytes()).ok()?;
    Some(
        code.render::<Dense1x2>()
            .dark_color(Dense1x2::Light)
            .light_color(Dense1x2::Dark)
            .quiet_zone(true)
            .build(),
    )
}

fn show<W: Write + ?Sized>(out: &mut W, url: &str) {
    let _ = match render_qr(url) {
        Some(qr) => writeln!(out, "\n{qr}\nScan with WeChat, or open: {url}\n"),
        None => writeln!(out, "\nLogin URL: {url}\n"),
    };
    let _ = out.flush();
}

/// `https://` before a redirect host without a scheme (0.3.5's rule).
fn redirect_base(host: &str) -> String {
    let host = host.trim().trim_end_matches('/');
    if host.starts_with("http://") || host.starts_with("https://") {
        host.to_owned()
    } else {
        format!("https://{host}")
    }
}

/// Fetches a QR code: `(qrcode id, what the QR encodes)`. A list of local tokens the server refuses (`-3`) is
/// dropped and the code fetched again without it, as 0.3.5 does.
async fn fetch_qr(
    client: &reqwest::Client,
    settings: &WeixinSettings,
    tokens: &[String],
) -> Result<(String, String), LoginError> {
    let target = Target {
        base: &settings.base_url,
        token: None,
        route_tag: settings.route_tag.as_deref(),
    };
    let secrets: Vec<&str> = tokens.iter().map(String::as_str).collect();
    let fetch = |list: Vec<String>| async move {
        api::post(
            client,
            &target,
            "ilink/bot/get_bot_qrcode?bot_type=3",
            json!({"local_token_list": list}),
            false,
            API_TIMEOUT,
        )
        .await
    };
    let step = |e: CallError| failed(format!("fetching the QR code: {e}"));
    let mut data = fetch(tokens.to_vec()).await.map_err(step)?;
    if !tokens.is_empty()
        && (api::int_at(&data, "ret") == ERR_INVALID || api::int_at(&data, "errcode") == ERR_INVALID)
    {
        tracing::info!(
            "weixin: WeChat refused the saved login credentials; fetching the QR code without them"
        );
        data = fetch(Vec::new()).await.map_err(step)?;
    }
    api::check("get_bot_qrcode", &data, &secrets).map_err(step)?;
    let qrcode = data["qrcode"].as_str().unwrap_or_default().trim().to_owned();
    if qrcode.is_empty() {
        return Err(failed("WeChat answered no QR code"));
    }
    let img = data["qrcode_img_content"]
        .as_str()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .unwrap_or(&qrcode)
        .to_owned();
    Ok((qrcode, img))
}

/// Writes `token` (and `base_url`, when the login answered one) into `channels.weixin` of the config file at
/// `path`, as 0.3.5 does after a login; every other key stays as it is (the file is rewritten as indented JSON,
/// like `nanobot plugins enable`). A key already written in snake_case (`base_url`) is updated under that name. A
/// missing file is created.
pub fn write_config_credentials(path: &Path, token: &str, base_url: Option<&str>) -> io::Result<()> {
    let invalid = |why: String| io::Error::new(io::ErrorKind::InvalidData, why);
    let text = match nanobot_util::read_to_string_bounded(path, nanobot_util::MAX_READ_BYTES) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => "{}".to_owned(),
        Err(e) => return Err(e),
    };
    let mut doc: Value = serde_json::from_str(text.strip_prefix('\u{feff}').unwrap_or(&text))
        .map_err(|e| invalid(format!("not valid JSON: {e}")))?;
    let root = doc
        .as_object_mut()
        .ok_or_else(|| invalid("not a JSON object".into()))?;
    let channels = root
        .entry("channels")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .ok_or_else(|| invalid("`channels` is not an object".into()))?;
    let block = channels
        .entry(NAME)
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .ok_or_else(|| invalid(format!("`channels.{NAME}` is not an object")))?;
    block.insert("token".into(), json!(token));
    if let Some(base) = base_url.filter(|b| !b.is_empty()) {
        let key = if block.contains_key("base_url") && !block.contains_key("baseUrl") {
            "base_url"
        } else {
            "baseUrl"
        };
        block.insert(key.into(), json!(base));
    }
    let new_text = format!(
        "{}\n",
        serde_json::to_string_pretty(&doc).map_err(|e| invalid(e.to_string()))?
    );
    nanobot_util::write_atomic(path, new_text.as_bytes())?;
    Ok(())
}

/// Logs the bot in with a QR code, as `nanobot channels login weixin [--force]` (0.3.5's flow):
///
/// - Without `force`, a token already in `<state_dir>/account.json` is kept (nothing is asked).
/// - The QR code is fetched (`get_bot_qrcode`, with the tokens this machine holds unless `force`) and printed to
///   `out` as a terminal QR code with its URL; its status is polled: `wait` / `scaned` go on, `need_verifycode`
///   prints a prompt and calls `read_code` for the number shown on the phone (a wrong one is asked again),
///   `expired` / `verify_code_blocked` fetch a new code (at most [`MAX_QR_REFRESHES`] times),
///   `scaned_but_redirect` polls the redirect host, `binded_redirect` keeps the login this machine has (a
///   failure with `force`), `confirmed` gives the token.
/// - Confirmed: `account.json` is written as 0.3.5 writes it (the new token, an empty cursor, the answered
///   `baseurl`, and the sha256 of a different configured token it replaces), and the token and `baseUrl` go into
///   `config_path` ([`write_config_credentials`]).
///
/// All of it is bounded by [`LOGIN_BOUND`]. The token is never printed.
pub async fn login<W, F, Fut>(
    settings: &WeixinSettings,
    state_dir: &Path,
    config_path: Option<&Path>,
    force: bool,
    out: &mut W,
    read_code: F,
) -> Result<LoggedIn, LoginError>
where
    W: Write + ?Sized,
    F: FnMut() -> Fut,
    Fut: Future<Output = io::Result<String>>,
{
    let state_file = state_dir.join(ACCOUNT_FILE);
    let saved = Account::read(state_dir).map_err(io_error(&state_file))?;
    let saved_token = saved.as_ref().map(|a| a.token.clone()).unwrap_or_default();
    if !force && !saved_token.is_empty() {
        let _ = writeln!(
            out,
            "WeChat is already logged in ({}). Run with --force to log in again.",
            state_file.display()
        );
        let base_url = saved
            .map(|a| a.base_url)
            .filter(|b| !b.is_empty())
            .unwrap_or_else(|| settings.base_url.clone());
        return Ok(LoggedIn {
            token: Secret::new(saved_token),
            base_url,
            bot_id: String::new(),
            user_id: String::new(),
            state_file,
            config_file: None,
            already: true,
        });
    }
    let mut tokens: Vec<String> = Vec::new();
    if !force {
        for t in [settings.token.expose(), saved_token.as_str()] {
            if !t.is_empty() && !tokens.iter().any(|k| k == t) {
                tokens.push(t.to_owned());
            }
        }
    }
    let client = api::client().map_err(|e| failed(e.to_string()))?;
    let flow = Flow {
        settings,
        client: &client,
        state_dir,
        state_file: &state_file,
        config_path,
        force,
        tokens: &tokens,
    };
    tokio::time::timeout(LOGIN_BOUND, flow.run(out, read_code))
        .await
        .unwrap_or(Err(LoginError::Timeout(LOGIN_BOUND)))
}

struct Flow<'a> {
    settings: &'a WeixinSettings,
    client: &'a reqwest::Client,
    state_dir: &'a Path,
    state_file: &'a Path,
    config_path: Option<&'a Path>,
    force: bool,
    tokens: &'a [String],
}

impl Flow<'_> {
    async fn run<W, F, Fut>(&self, out: &mut W, mut read_code: F) -> Result<LoggedIn, LoginError>
    where
        W: Write + ?Sized,
        F: FnMut() -> Fut,
        Fut: Future<Output = io::Result<String>>,
    {
        let (mut qrcode, url) = fetch_qr(self.client, self.settings, self.tokens).await?;
        show(out, &url);
        let mut base = self.settings.base_url.clone();
        let mut verify = String::new();
        let mut refreshes = 0u32;
        let mut told_scanned = false;
        loop {
            let mut query = vec![("qrcode", qrcode.as_str())];
            if !verify.is_empty() {
                query.push(("verify_code", verify.as_str()));
            }
            let target = Target {
                base: &base,
                token: None,
                route_tag: self.settings.route_tag.as_deref(),
            };
            let status = match api::get(
                self.client,
                &target,
                "ilink/bot/get_qrcode_status",
                &query,
                QR_POLL_TIMEOUT,
            )
            .await
            {
                Ok(v) => v,
                Err(e) if e.retryable() => {
                    tracing::debug!(error = %e, "weixin: QR status poll failed; polling again");
                    tokio::time::sleep(POLL_PAUSE).await;
                    continue;
                }
                Err(e) => return Err(failed(format!("polling the QR code's status: {e}"))),
            };
            match status["status"].as_str().unwrap_or_default() {
                "confirmed" => return self.confirmed(&status, out),
                "scaned" if !told_scanned => {
                    told_scanned = true;
                    let _ = writeln!(out, "Scanned. Confirm the login on the phone.");
                }
                "scaned_but_redirect" => {
                    if let Some(host) = status["redirect_host"].as_str().filter(|h| !h.trim().is_empty()) {
                        base = redirect_base(host);
                        tracing::info!(%base, "weixin: the QR login continues on another host");
                    }
                }
                "need_verifycode" => {
                    let _ = write!(
                        out,
                        "{}",
                        if verify.is_empty() {
                            "Enter the number shown in WeChat to continue: "
                        } else {
                            "The previous code did not match. Enter the number shown in WeChat: "
                        }
                    );
                    let _ = out.flush();
                    verify = read_code()
                        .await
                        .map_err(|e| failed(format!("no verification number was entered: {e}")))?
                        .trim()
                        .to_owned();
                    continue;
                }
                what @ ("expired" | "verify_code_blocked") => {
                    refreshes += 1;
                    if refreshes > MAX_QR_REFRESHES {
                        return Err(failed(if what == "expired" {
                            format!(
                                "the QR code expired {MAX_QR_REFRESHES} times; run `nanobot channels login weixin` \
                                 again"
                            )
                        } else {
                            "too many wrong verification numbers; try again later".to_owned()
                        }));
                    }
                    let _ = writeln!(
                        out,
                        "{}",
                        if what == "expired" {
                            "The QR code expired; here is a new one."
                        } else {
                            "Verification was blocked; scan the new QR code to try again."
                        }
                    );
                    let (id, url) = fetch_qr(self.client, self.settings, self.tokens).await?;
                    qrcode = id;
                    base = self.settings.base_url.clone();
                    verify.clear();
                    told_scanned = false;
                    show(out, &url);
                    continue;
                }
                "binded_redirect" => return self.already_bound(out),
                _ => {}
            }
            tokio::time::sleep(POLL_PAUSE).await;
        }
    }

    /// `binded_redirect`: the bot is bound to a token this machine sent; kept unless a new one was asked for.
    fn already_bound<W: Write + ?Sized>(&self, out: &mut W) -> Result<LoggedIn, LoginError> {
        if self.force {
            return Err(failed(
                "WeChat answered that this bot is already bound, without new credentials: start again and scan \
                 with the account you want to connect",
            ));
        }
        let Some(token) = self.tokens.first() else {
            return Err(failed(
                "WeChat reports an existing binding, but no local credentials were found",
            ));
        };
        let _ = writeln!(out, "WeChat is already connected to this nanobot.");
        Ok(LoggedIn {
            token: Secret::new(token.as_str()),
            base_url: self.settings.base_url.clone(),
            bot_id: String::new(),
            user_id: String::new(),
            state_file: self.state_file.to_owned(),
            config_file: None,
            already: true,
        })
    }

    /// `confirmed`: the token is committed to `account.json` and `config.json`.
    fn confirmed<W: Write + ?Sized>(&self, status: &Value, out: &mut W) -> Result<LoggedIn, LoginError> {
        let text = |k: &str| status[k].as_str().unwrap_or_default().trim().to_owned();
        let token = text("bot_token");
        if token.is_empty() {
            return Err(failed("WeChat confirmed the scan but returned no token"));
        }
        let answered_base = text("baseurl").trim_end_matches('/').to_owned();
        let base_url = if answered_base.is_empty() {
            self.settings.base_url.clone()
        } else {
            answered_base.clone()
        };
        let configured = self.settings.token.expose();
        let account = Account {
            token: token.clone(),
            base_url: base_url.clone(),
            replaced_hash: if !configured.is_empty() && configured != token {
                fingerprint(configured)
            } else {
                String::new()
            },
            ..Account::default()
        };
        account
            .save(self.state_dir, configured, true)
            .map_err(io_error(self.state_file))?;
        if let Some(path) = self.config_path {
            let base = (!answered_base.is_empty()).then_some(answered_base.as_str());
            write_config_credentials(path, &token, base).map_err(io_error(path))?;
        }
        let (bot_id, user_id) = (text("ilink_bot_id"), text("ilink_user_id"));
        tracing::info!(bot = %bot_id, user = %user_id, "weixin: logged in");
        let _ = writeln!(out, "Login confirmed.");
        Ok(LoggedIn {
            token: Secret::new(token),
            base_url,
            bot_id,
            user_id,
            state_file: self.state_file.to_owned(),
            config_file: self.config_path.map(Path::to_owned),
            already: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirect_hosts_get_https_unless_they_have_a_scheme() {
        assert_eq!(
            redirect_base("sz.ilinkai.weixin.qq.com"),
            "https://sz.ilinkai.weixin.qq.com"
        );
        assert_eq!(redirect_base(" http://127.0.0.1:9/ "), "http://127.0.0.1:9");
    }

    #[test]
    fn the_qr_renders_for_a_terminal() {
        let qr = render_qr("https://liteapp.weixin.qq.com/q/abc?qrcode=1&bot_type=3").unwrap();
        assert!(qr.lines().count() > 10);
        assert!(qr.contains('█') || qr.contains('▀') || qr.contains('▄'));
    }

    #[test]
    fn credentials_go_into_the_config_keeping_everything_else() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        std::fs::write(
            &path,
            "\u{feff}{\"agents\": {\"x\": 1}, \"channels\": {\"sendProgress\": false, \"weixin\": {\"enabled\": true, \
             \"allowFrom\": [\"a@im.wechat\"], \"base_url\": \"http://old\"}}}",
        )
        .unwrap();
        write_config_credentials(&path, "tok-2", Some("http://new")).unwrap();
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(
            v,
            json!({"agents": {"x": 1}, "channels": {"sendProgress": false, "weixin": {"enabled": true,
                "allowFrom": ["a@im.wechat"], "base_url": "http://new", "token": "tok-2"}}})
        );
        // A missing file is created; a file that is not an object is refused.
        let fresh = dir.path().join("new.json");
        write_config_credentials(&fresh, "t", None).unwrap();
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&fresh).unwrap()).unwrap();
        assert_eq!(v, json!({"channels": {"weixin": {"token": "t"}}}));
        std::fs::write(&fresh, "[]").unwrap();
        assert!(write_config_credentials(&fresh, "t", None).is_err());
        std::fs::write(&fresh, r#"{"channels": {"weixin": 1}}"#).unwrap();
        assert!(write_config_credentials(&fresh, "t", None).is_err());
    }
}
