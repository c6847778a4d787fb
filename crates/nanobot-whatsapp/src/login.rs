//! Linking a device: `nanobot channels login whatsapp` (QR codes in the terminal), and installing the bridge.

use std::io::Write;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use futures::StreamExt;
use qrcode::QrCode;
use qrcode::render::unicode::Dense1x2;
use tokio_tungstenite::tungstenite::Message as WsMessage;

use crate::bridge::{Bridge, EXIT_LOGGED_OUT, Mode, write_files};
use crate::proto::Event;
use crate::settings::bare_user;
use crate::{BridgeSettings, WhatsAppError, WhatsAppSettings};

/// Bound of `npm install` of the bridge's packages.
const INSTALL_TIMEOUT: Duration = Duration::from_secs(600);

/// A linked device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Linked {
    /// The account's phone number (digits), as WhatsApp reported it.
    pub phone: String,
}

/// True when the bridge's npm packages (`ws`, `@whiskeysockets/baileys`) are installed.
pub fn bridge_installed(bridge: &BridgeSettings) -> bool {
    let modules = bridge.node_modules();
    ["ws", "@whiskeysockets/baileys"]
        .iter()
        .all(|p| modules.join(p).join("package.json").is_file())
}

/// True when linked-device credentials exist in `auth_dir` (they may still have been revoked from the phone).
pub fn credentials_present(auth_dir: &Path) -> bool {
    std::fs::metadata(auth_dir.join("creds.json")).is_ok_and(|m| m.is_file() && m.len() > 0)
}

/// Installs the bridge's npm packages into its directory with `npm` (from the npm registry; bounded), writing
/// progress to `out`. npm runs with `env` only (pass [`BridgeSettings::env`]).
pub async fn install_bridge<W: Write + ?Sized>(
    bridge: &BridgeSettings,
    npm: &Path,
    env: &[(String, String)],
    out: &mut W,
) -> Result<(), WhatsAppError> {
    write_files(bridge)?;
    let _ = writeln!(
        out,
        "Installing the WhatsApp bridge (npm packages ws and @whiskeysockets/baileys) into {} …",
        bridge.dir.display()
    );
    let mut cmd = tokio::process::Command::new(npm);
    cmd.args([
        "install",
        "--omit=dev",
        "--no-audit",
        "--no-fund",
        "--loglevel=error",
    ])
    .current_dir(&bridge.dir)
    // Only what npm needs (PATH, HOME, proxies, certificates): package install scripts never see API keys.
    .env_clear()
    .envs(env.iter().map(|(k, v)| (k, v)))
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .kill_on_drop(true);
    let child = cmd.spawn().map_err(|e| WhatsAppError::NotInstalled {
        dir: bridge.dir.clone(),
        detail: format!(
            "cannot run {}: {e} (install Node.js 20 or later with npm)",
            npm.display()
        ),
    })?;
    let output = tokio::time::timeout(INSTALL_TIMEOUT, child.wait_with_output())
        .await
        .map_err(|_| WhatsAppError::Timeout("installing the bridge's npm packages"))?
        .map_err(WhatsAppError::io(&bridge.dir))?;
    if !output.status.success() || !bridge_installed(bridge) {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(8).collect();
        return Err(WhatsAppError::NotInstalled {
            dir: bridge.dir.clone(),
            detail: format!(
                "`npm install` did not install @whiskeysockets/baileys (exit {:?}); it fetches parts of it from \
                 github.com, so that must be reachable. npm said: {}",
                output.status.code(),
                tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
            ),
        });
    }
    let _ = writeln!(out, "Installed.");
    Ok(())
}

/// The QR code for `data` as text for a terminal: two modules per character cell, light on dark so it scans on
/// both dark and light terminal themes, with its quiet zone.
pub fn render_qr(data: &str) -> Result<String, WhatsAppError> {
    let code = QrCode::new(data.as_bytes()).map_err(|e| WhatsAppError::Qr(e.to_string()))?;
    Ok(code
        .render::<Dense1x2>()
        .dark_color(Dense1x2::Light)
        .light_color(Dense1x2::Dark)
        .quiet_zone(true)
        .build())
}

/// Links this nanobot to a WhatsApp account: starts the bridge in login mode, prints each QR code it gets to
/// `out` until the phone scans one, then stops the bridge (which saves the credentials in the settings'
/// credentials directory). Already linked: returns at once. The whole is bounded by `bound`.
pub async fn login<W: Write + ?Sized>(
    settings: &WhatsAppSettings,
    out: &mut W,
    bound: Duration,
) -> Result<Linked, WhatsAppError> {
    let bridge = Bridge::start(
        &settings.bridge,
        &settings.auth_dir,
        settings.proxy.as_deref(),
        Mode::Login,
    )
    .await?;
    let result = tokio::time::timeout(bound, follow(&bridge, out))
        .await
        .unwrap_or(Err(WhatsAppError::Timeout(
            "waiting for the QR code to be scanned",
        )));
    let code = bridge.stop().await;
    match result {
        Err(_) if code == Some(EXIT_LOGGED_OUT) => Err(WhatsAppError::LoggedOut),
        other => other,
    }
}

async fn follow<W: Write + ?Sized>(bridge: &Bridge, out: &mut W) -> Result<Linked, WhatsAppError> {
    let mut ws = bridge.connect().await?;
    let mut shown = 0usize;
    while let Some(frame) = ws.next().await {
        let text = match frame {
            Ok(WsMessage::Text(t)) => t,
            Ok(WsMessage::Close(_)) => break,
            Ok(_) => continue,
            Err(e) => {
                return Err(WhatsAppError::Bridge(format!(
                    "reading from the bridge failed: {e}"
                )));
            }
        };
        match serde_json::from_str::<Event>(text.as_str()) {
            Ok(Event::Qr { qr }) => {
                shown += 1;
                let heading = if shown == 1 {
                    "Scan this QR code with WhatsApp on your phone (Settings → Linked devices → Link a device):"
                } else {
                    "The previous code expired; scan this one:"
                };
                let _ = writeln!(out, "\n{heading}\n\n{}\n", render_qr(&qr)?);
                let _ = out.flush();
            }
            Ok(Event::Open { me, .. }) => {
                let phone = bare_user(me.as_deref().unwrap_or_default()).to_string();
                return Ok(Linked { phone });
            }
            Ok(Event::Closed { logged_out: true, .. }) => return Err(WhatsAppError::LoggedOut),
            Ok(Event::Closed { reason, .. }) => return Err(WhatsAppError::Closed(reason)),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "whatsapp: unreadable frame from the bridge"),
        }
    }
    Err(WhatsAppError::Closed(format!(
        "the bridge ended before a device was linked: {}",
        bridge.stderr_tail()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qr_codes_render_as_a_square_block() {
        let qr = render_qr("2@abcdefghijklmnopqrstuvwxyz0123456789,KEY=,ID=,1").unwrap();
        let lines: Vec<&str> = qr.lines().collect();
        let width = lines[0].chars().count();
        assert!(width >= 29, "{qr}");
        assert!(lines.iter().all(|l| l.chars().count() == width), "{qr}");
        // Two modules per cell vertically: about half as many lines as columns.
        assert!(lines.len() * 2 >= width && lines.len() * 2 <= width + 2, "{qr}");
        assert!(qr.contains('▀') || qr.contains('▄'), "{qr}");
    }
}
