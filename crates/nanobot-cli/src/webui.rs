//! `nanobot webui`: turn the `websocket` channel on for this run, start the gateway unless one already serves the
//! WebUI on that address, and open the browser (`$BROWSER`, else `xdg-open` / `open`) unless `--no-open`.

use std::io::Write;
use std::time::Duration;

use nanobot_websocket::{Listen, WebSocketConfig, WebSocketSettings};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::args::WebuiArgs;
use crate::error::CliError;
use crate::setup::{self, CliEnv};

/// The page's URL for a browser on this machine.
fn browser_url(host: &str, port: u16) -> String {
    let host = match host.trim() {
        "" | "0.0.0.0" | "::" | "[::]" => "127.0.0.1".to_owned(),
        h if h.contains(':') && !h.starts_with('[') => format!("[{h}]"),
        h => h.to_owned(),
    };
    format!("http://{host}:{port}/")
}

/// True when a nanobot WebUI already answers at `host:port` (its bootstrap route replies with JSON naming
/// `ws_path`, or refuses with 401/403 when a secret is configured or we are not local).
async fn webui_running(host: &str, port: u16) -> bool {
    let target = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let probe = async {
        let mut s = tokio::net::TcpStream::connect(&target).await.ok()?;
        let req = format!("GET /webui/bootstrap HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.ok()?;
        let mut buf = Vec::new();
        s.take(64 * 1024).read_to_end(&mut buf).await.ok()?;
        let text = String::from_utf8_lossy(&buf);
        let status = text.split_whitespace().nth(1)?.to_owned();
        Some(match status.as_str() {
            "200" => text.contains("\"ws_path\""),
            "401" | "403" => text.contains("\"error\""),
            _ => false,
        })
    };
    tokio::time::timeout(Duration::from_secs(3), probe)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
}

/// Starts the user's browser on `url` without waiting for it.
pub(crate) fn open_browser(env: &CliEnv, url: &str) -> Result<(), String> {
    let program = env
        .vars
        .non_empty("BROWSER")
        .map(str::to_owned)
        .unwrap_or_else(|| {
            if cfg!(target_os = "macos") {
                "open"
            } else {
                "xdg-open"
            }
            .to_owned()
        });
    std::process::Command::new(&program)
        .arg(url)
        .env_remove(crate::launcher::LAUNCHER_PID_VAR)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map(drop)
        .map_err(|e| format!("cannot start {program}: {e}"))
}

/// `nanobot webui`.
pub(crate) fn webui(env: &CliEnv, a: &WebuiArgs, out: &mut dyn Write) -> Result<(), CliError> {
    if a.background {
        return Err(CliError::Usage(
            "`nanobot webui --background` is not supported: run `nanobot gateway` as a service, then `nanobot webui`"
                .into(),
        ));
    }
    if a.dev {
        return Err(CliError::Usage(
            "`--dev` starts 0.3.5's frontend dev server; this WebUI is built into the binary and has none"
                .into(),
        ));
    }
    let mut s = setup::load(env, &a.config, true)?;
    crate::onboard::write_templates(&s.workspace)?;
    let blocks = &mut s.loaded.config.channels.other.0;
    let block = blocks
        .entry(nanobot_websocket::NAME.to_owned())
        .or_insert_with(|| json!({}));
    if !block.is_object() {
        *block = json!({});
    }
    if let Value::Object(b) = block {
        b.insert("enabled".into(), json!(true));
        if let Some(p) = a.port {
            b.insert("port".into(), json!(p));
        }
    }
    let settings = WebSocketConfig::from_json(block)
        .and_then(|raw| WebSocketSettings::from_config(&raw))
        .map_err(|e| CliError::Usage(format!("invalid WebUI channel config: {e}")))?;
    let (host, port) = match &settings.listen {
        Listen::Tcp { host, port } => (host.clone(), *port),
        _ => {
            return Err(CliError::Usage(
                "channels.websocket.unixSocketPath is set: a browser cannot open a Unix socket; put a proxy in front"
                    .into(),
            ));
        }
    };
    let no_open = a.no_open;
    let mut opts = nanobot_gateway::GatewayOptions::gateway(s.loaded.config, env.core_env(&s.paths));
    opts.port = a.gateway_port;
    let rt = crate::runtime()?;
    let result = rt.block_on(async {
        if port != 0 && webui_running(&host, port).await {
            let url = browser_url(&host, port);
            let _ = writeln!(out, "WebUI: {url} (served by the gateway already running)");
            if !no_open && let Err(e) = open_browser(env, &url) {
                eprintln!("{e}; open {url} yourself");
            }
            return Ok(None);
        }
        let mut signals = nanobot_gateway::Signals::new();
        let gateway = nanobot_gateway::Gateway::start(opts)
            .await
            .map_err(CliError::Gateway)?;
        let Some(addr) = gateway.websocket_addr().await else {
            let _ = gateway.shutdown().await;
            return Err(CliError::Usage(format!(
                "the websocket channel did not start on {host}:{port} (is the port in use?)"
            )));
        };
        let url = browser_url(&host, addr.port());
        let _ = writeln!(out, "WebUI: {url}");
        if let Some(h) = gateway.http_addr() {
            let _ = writeln!(out, "Gateway health: http://{h}/health");
        }
        let _ = out.flush();
        if no_open {
            eprintln!("Browser opening disabled by --no-open.");
        } else if let Err(e) = open_browser(env, &url) {
            eprintln!("{e}; open {url} yourself");
        }
        signals.recv().await;
        eprintln!("nanobot webui: shutting down (press Ctrl-C again to exit at once)");
        tokio::select! {
            report = gateway.shutdown() => Ok(Some(report)),
            () = signals.recv() => Err(CliError::Interrupted),
        }
    });
    match result {
        Ok(report) => {
            if report.is_some_and(|r| !r.drained) {
                eprintln!("some turns did not finish before the shutdown deadline and were cancelled");
            }
            rt.shutdown_timeout(Duration::from_secs(5));
            Ok(())
        }
        Err(CliError::Interrupted) => {
            rt.shutdown_background();
            Err(CliError::Interrupted)
        }
        Err(e) => {
            rt.shutdown_timeout(Duration::from_secs(5));
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_browser_goes_to_a_loopback_url() {
        assert_eq!(browser_url("0.0.0.0", 8765), "http://127.0.0.1:8765/");
        assert_eq!(browser_url("::1", 80), "http://[::1]:80/");
        assert_eq!(browser_url("localhost", 9), "http://localhost:9/");
    }
}
