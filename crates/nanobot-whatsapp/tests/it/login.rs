//! `login`: QR codes from the bridge rendered, the linked account reported, a logout reported.

use std::io::Write;
use std::sync::{Arc, Mutex};

use anyhow::Result;
use nanobot_whatsapp::{WhatsAppError, login, render_qr};
use serde_json::json;
use tokio::net::TcpListener;

use crate::{Control, ME, WAIT};

/// A writer the test can read while `login` writes to it.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .map_err(|_| std::io::Error::other("poisoned"))?
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Shared {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().map(|v| v.clone()).unwrap_or_default()).into_owned()
    }
}

#[tokio::test]
async fn qr_codes_are_shown_until_the_phone_links() -> Result<()> {
    let home = tempfile::tempdir()?;
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let Some(s) = crate::settings(json!({}), home.path(), &listener.local_addr()?.to_string()) else {
        return Ok(());
    };
    let auth_dir = s.auth_dir.clone();
    let out = Shared::default();
    let task = {
        let mut out = out.clone();
        tokio::spawn(async move { login(&s, &mut out, WAIT).await })
    };
    let mut control = Control::accept(&listener).await?;
    assert_eq!(control.hello["mode"], "login");
    assert_eq!(control.hello["authDir"], auth_dir.display().to_string());
    control.cmd(json!({"emit": "qr", "qr": "2@first-code"})).await?;
    control.cmd(json!({"emit": "qr", "qr": "2@second-code"})).await?;
    control.open().await?;
    let linked = tokio::time::timeout(WAIT, task).await???;
    assert_eq!(linked.phone, "4915550000001");
    let text = out.text();
    assert!(text.contains(&render_qr("2@first-code")?), "{text}");
    assert!(text.contains(&render_qr("2@second-code")?), "{text}");
    assert!(text.contains("Linked devices"), "{text}");
    // The credentials directory is private to its owner.
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&auth_dir)?.permissions().mode() & 0o777, 0o700);
    let _ = ME;
    Ok(())
}

#[tokio::test]
async fn a_logout_during_login_is_reported() -> Result<()> {
    let home = tempfile::tempdir()?;
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let Some(s) = crate::settings(json!({}), home.path(), &listener.local_addr()?.to_string()) else {
        return Ok(());
    };
    let task = tokio::spawn(async move { login(&s, &mut std::io::sink(), WAIT).await });
    let mut control = Control::accept(&listener).await?;
    control
        .cmd(json!({"emit": "closed", "loggedOut": true, "reason": "401"}))
        .await?;
    let err = tokio::time::timeout(WAIT, task).await??.unwrap_err();
    assert!(matches!(err, WhatsAppError::LoggedOut), "{err:?}");
    Ok(())
}

#[tokio::test]
async fn a_missing_npm_is_named_when_installing_the_bridge() -> Result<()> {
    let home = tempfile::tempdir()?;
    let bridge = nanobot_whatsapp::BridgeSettings::in_data_dir(home.path());
    assert!(!nanobot_whatsapp::bridge_installed(&bridge));
    let npm = home.path().join("no-such-npm");
    let mut out = Vec::new();
    let err = nanobot_whatsapp::install_bridge(&bridge, &npm, &[], &mut out)
        .await
        .unwrap_err();
    assert!(matches!(err, WhatsAppError::NotInstalled { .. }), "{err:?}");
    assert!(err.to_string().contains("no-such-npm"), "{err}");
    // The bridge's files were written where the packages are to go.
    assert_eq!(
        std::fs::read_to_string(bridge.dir.join("package.json"))?,
        nanobot_whatsapp::BRIDGE_PACKAGE_JSON
    );
    assert!(String::from_utf8_lossy(&out).contains("Installing the WhatsApp bridge"));
    Ok(())
}
