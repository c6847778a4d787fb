//! The bridge process on its own: the token, loopback only, exit when nanobot goes away.

use std::process::Stdio;

use anyhow::{Context, Result, anyhow};
use nanobot_whatsapp::testing::try_connect;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

use crate::{Control, WAIT, alive, peers, scripted_socket};

#[tokio::test]
async fn a_client_without_the_token_is_refused() -> Result<()> {
    let Some((node, modules)) = peers() else {
        return Ok(());
    };
    let home = tempfile::tempdir()?;
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("bridge/bridge.cjs");
    let mut child = tokio::process::Command::new(node)
        .arg(script)
        .env_clear()
        .env("NODE_PATH", modules)
        .env("NANOBOT_WA_AUTH_DIR", home.path())
        .env("NANOBOT_WA_SOCKET", scripted_socket())
        .env("NANOBOT_WA_TEST_CONTROL", listener.local_addr()?.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()?;
    let token = "0123456789abcdef0123456789abcdef0123456789abcdef";
    let mut stdin = child.stdin.take().context("stdin")?;
    stdin.write_all(format!("{token}\n").as_bytes()).await?;
    let mut lines = BufReader::new(child.stdout.take().context("stdout")?).lines();
    let line = tokio::time::timeout(WAIT, lines.next_line())
        .await??
        .ok_or_else(|| anyhow!("bridge ended"))?;
    let listening: serde_json::Value = serde_json::from_str(&line)?;
    let port = listening["port"].as_u64().context("port")? as u16;
    let _control = Control::accept(&listener).await?;

    let no_token = try_connect(port, None).await.unwrap_err();
    assert!(no_token.contains("401"), "{no_token}");
    let wrong = try_connect(port, Some("0123456789abcdef0123456789abcdef0123456789abcdeX"))
        .await
        .unwrap_err();
    assert!(wrong.contains("401"), "{wrong}");
    let short = try_connect(port, Some("0123")).await.unwrap_err();
    assert!(short.contains("401"), "{short}");
    // It listens on loopback only.
    let lan = std::net::TcpStream::connect(("0.0.0.0", port)).is_ok()
        && std::net::UdpSocket::bind("0.0.0.0:0")
            .and_then(|s| s.connect("192.0.2.1:9").and_then(|()| s.local_addr()))
            .is_ok_and(|a| std::net::TcpStream::connect((a.ip(), port)).is_ok() && !a.ip().is_loopback());
    assert!(!lan, "the bridge must not be reachable from other interfaces");
    try_connect(port, Some(token)).await.map_err(|e| anyhow!(e))?;

    // Closing its stdin (nanobot stopped or died) ends the bridge.
    let pid = child.id().context("pid")?;
    drop(stdin);
    let status = tokio::time::timeout(WAIT, child.wait()).await??;
    assert_eq!(status.code(), Some(0));
    assert!(!alive(pid));
    Ok(())
}

#[tokio::test]
async fn a_too_short_token_is_refused_at_start() -> Result<()> {
    let Some((node, modules)) = peers() else {
        return Ok(());
    };
    let home = tempfile::tempdir()?;
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("bridge/bridge.cjs");
    let mut child = tokio::process::Command::new(node)
        .arg(script)
        .env_clear()
        .env("NODE_PATH", modules)
        .env("NANOBOT_WA_AUTH_DIR", home.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let mut stdin = child.stdin.take().context("stdin")?;
    stdin.write_all(b"short\n").await?;
    let status = tokio::time::timeout(WAIT, child.wait()).await??;
    assert_eq!(status.code(), Some(4));
    Ok(())
}

#[tokio::test]
async fn a_missing_package_is_named() -> Result<()> {
    let Some((node, _)) = peers() else { return Ok(()) };
    let home = tempfile::tempdir()?;
    let mut s = crate::settings(serde_json::json!({}), home.path(), "127.0.0.1:9").context("settings")?;
    s.bridge.node = node;
    s.bridge.node_modules = Some(home.path().join("empty"));
    let channel = nanobot_whatsapp::WhatsAppChannel::new(s);
    let bus = std::sync::Arc::new(nanobot_bus::InProcessBus::new(8));
    let err = tokio::time::timeout(
        WAIT,
        nanobot_channels::Channel::run(&channel, bus, tokio_util::sync::CancellationToken::new()),
    )
    .await?
    .unwrap_err();
    assert!(
        matches!(err, nanobot_channels::ChannelError::Config { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("\"ws\" is missing"), "{err}");
    Ok(())
}
