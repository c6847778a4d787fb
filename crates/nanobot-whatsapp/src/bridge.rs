//! The bridge process: writing its files, starting it, connecting to it, stopping it.

use nanobot_util::lock;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::RngCore;
use serde::Deserialize;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::{BridgeSettings, WhatsAppError};

/// The bridge script, shipped inside the binary and written to the bridge directory before each start.
pub const BRIDGE_SCRIPT: &str = include_str!("../bridge/bridge.cjs");
/// The bridge's `package.json` (pinned `ws` and `@whiskeysockets/baileys`).
pub const BRIDGE_PACKAGE_JSON: &str = include_str!("../bridge/package.json");

/// Bound of the bridge's start (until it listens).
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a stopping bridge may take to close WhatsApp and save its credentials before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// Largest frame between nanobot and the bridge (media travel base64-encoded inside).
const MAX_FRAME: usize = 64 * 1024 * 1024;
/// Lines of the bridge's stderr kept for error messages.
const STDERR_TAIL: usize = 20;

/// Exit code: WhatsApp logged the device out.
pub(crate) const EXIT_LOGGED_OUT: i32 = 3;
/// Exit code: a setup problem (missing package, bad token).
pub(crate) const EXIT_SETUP: i32 = 4;

/// What the bridge is started for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Serve chats.
    Run,
    /// Link a device (QR codes), then stop.
    Login,
}

pub(crate) type Ws = WebSocketStream<MaybeTlsStream<tokio::net::TcpStream>>;

/// A running bridge. Dropping it kills the process (`kill_on_drop`); [`Bridge::stop`] stops it gracefully.
#[derive(Debug)]
pub(crate) struct Bridge {
    child: Child,
    stdin: Option<ChildStdin>,
    port: u16,
    token: String,
    stderr: Arc<Mutex<VecDeque<String>>>,
    modules: PathBuf,
}

#[derive(Deserialize)]
struct Listening {
    #[serde(rename = "type")]
    kind: String,
    port: u16,
}

/// Writes `contents` to `path` unless it already holds exactly that (an atomic rename, so a running bridge never
/// reads half a file).
fn write_if_changed(path: &Path, contents: &str) -> Result<(), WhatsAppError> {
    if std::fs::read(path).is_ok_and(|old| old == contents.as_bytes()) {
        return Ok(());
    }
    nanobot_util::write_atomic(path, contents.as_bytes()).map_err(|e| WhatsAppError::io(path)(e.into()))
}

/// Creates the bridge directory with the current script and `package.json`.
pub(crate) fn write_files(settings: &BridgeSettings) -> Result<PathBuf, WhatsAppError> {
    std::fs::create_dir_all(&settings.dir).map_err(WhatsAppError::io(&settings.dir))?;
    write_if_changed(&settings.dir.join("package.json"), BRIDGE_PACKAGE_JSON)?;
    let script = settings.dir.join("bridge.cjs");
    write_if_changed(&script, BRIDGE_SCRIPT)?;
    Ok(script)
}

/// Creates the credentials directory, readable by its owner only.
fn private_dir(dir: &Path) -> Result<(), WhatsAppError> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(WhatsAppError::io(dir))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(WhatsAppError::io(dir))
}

fn random_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

impl Bridge {
    /// Starts the bridge and waits (bounded) until it listens.
    pub(crate) async fn start(
        settings: &BridgeSettings,
        auth_dir: &Path,
        proxy: Option<&str>,
        mode: Mode,
    ) -> Result<Self, WhatsAppError> {
        let script = write_files(settings)?;
        private_dir(auth_dir)?;
        let mut cmd = Command::new(&settings.node);
        cmd.arg(&script)
            .current_dir(&settings.dir)
            .env_clear()
            .env("NODE_PATH", settings.node_modules())
            .env("NANOBOT_WA_AUTH_DIR", auth_dir)
            .env(
                "NANOBOT_WA_MODE",
                match mode {
                    Mode::Run => "run",
                    Mode::Login => "login",
                },
            )
            .envs(settings.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            // Its own process group: a Ctrl-C at the terminal reaches nanobot, which then stops the bridge.
            .process_group(0);
        if let Some(proxy) = proxy {
            cmd.env("NANOBOT_WA_PROXY", proxy);
        }
        if let Some(module) = &settings.socket_module {
            cmd.env("NANOBOT_WA_SOCKET", module);
        }
        let mut child = cmd.spawn().map_err(|source| WhatsAppError::NodeMissing {
            node: settings.node.clone(),
            source,
        })?;
        let stderr = Arc::new(Mutex::new(VecDeque::new()));
        if let Some(err) = child.stderr.take() {
            let tail = stderr.clone();
            tokio::spawn(async move {
                let mut lines = BufReader::new(err).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    tracing::info!(target: "nanobot_whatsapp::bridge", "{line}");
                    let mut t = lock(&tail);
                    if t.len() == STDERR_TAIL {
                        t.pop_front();
                    }
                    t.push_back(line);
                }
            });
        }
        let token = random_token();
        let mut stdin = child
            .stdin
            .take()
            .ok_or_else(|| WhatsAppError::Bridge("no stdin".into()))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| WhatsAppError::Bridge("no stdout".into()))?;
        let mut bridge = Self {
            child,
            stdin: None,
            port: 0,
            token,
            stderr,
            modules: settings.node_modules(),
        };
        let line = format!("{}\n", bridge.token);
        if let Err(e) = stdin.write_all(line.as_bytes()).await {
            return Err(bridge.failure(&format!("cannot pass the token: {e}")).await);
        }
        bridge.stdin = Some(stdin);
        let mut lines = BufReader::new(stdout).lines();
        let listening = tokio::time::timeout(START_TIMEOUT, async {
            while let Ok(Some(line)) = lines.next_line().await {
                if let Ok(l) = serde_json::from_str::<Listening>(&line)
                    && l.kind == "listening"
                {
                    return Some(l.port);
                }
            }
            None
        })
        .await;
        match listening {
            Ok(Some(port)) => bridge.port = port,
            Ok(None) => return Err(bridge.failure("exited before it listened").await),
            Err(_) => {
                let _ = bridge.child.start_kill();
                return Err(WhatsAppError::Timeout("waiting for the bridge to listen"));
            }
        }
        // The rest of stdout is not used; keep draining it so the bridge never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(bridge)
    }

    /// The process id (tests check it is gone after a stop).
    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Connects to the bridge with the token.
    pub(crate) async fn connect(&self) -> Result<Ws, WhatsAppError> {
        connect(self.port, Some(&self.token)).await
    }

    /// Waits for the process to end and describes how it ended.
    pub(crate) async fn wait(&mut self) -> Option<i32> {
        match tokio::time::timeout(STOP_GRACE, self.child.wait()).await {
            Ok(Ok(status)) => status.code(),
            _ => {
                let _ = self.child.kill().await;
                None
            }
        }
    }

    /// The last lines the bridge wrote to stderr.
    pub(crate) fn stderr_tail(&self) -> String {
        let t = lock(&self.stderr);
        t.iter().cloned().collect::<Vec<_>>().join("\n")
    }

    async fn failure(&mut self, what: &str) -> WhatsAppError {
        let code = self.wait().await;
        // Give the stderr reader a moment to collect the last lines it already has in the pipe.
        tokio::task::yield_now().await;
        let tail = self.stderr_tail();
        if code == Some(EXIT_SETUP) && tail.contains("is missing") {
            return WhatsAppError::NotInstalled {
                dir: self.modules.clone(),
                detail: tail,
            };
        }
        WhatsAppError::Bridge(format!("{what} (exit code {code:?}): {tail}"))
    }

    /// Stops the bridge: closes its stdin (it then closes WhatsApp, saves its credentials and exits), and kills it
    /// when it does not exit within the grace period. Returns the exit code.
    pub(crate) async fn stop(mut self) -> Option<i32> {
        drop(self.stdin.take());
        self.wait().await
    }
}

/// Connects to a bridge on `127.0.0.1:port`, with the token when given (tests try without).
pub(crate) async fn connect(port: u16, token: Option<&str>) -> Result<Ws, WhatsAppError> {
    let mut request = format!("ws://127.0.0.1:{port}/")
        .into_client_request()
        .map_err(|e| WhatsAppError::Bridge(e.to_string()))?;
    if let Some(token) = token {
        let value = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|e| WhatsAppError::Bridge(e.to_string()))?;
        request.headers_mut().insert("authorization", value);
    }
    let config = WebSocketConfig::default()
        .max_message_size(Some(MAX_FRAME))
        .max_frame_size(Some(MAX_FRAME));
    let (ws, _) = tokio::time::timeout(
        START_TIMEOUT,
        tokio_tungstenite::connect_async_with_config(request, Some(config), false),
    )
    .await
    .map_err(|_| WhatsAppError::Timeout("connecting to the bridge"))?
    .map_err(|e| WhatsAppError::Bridge(format!("connecting to 127.0.0.1:{port}: {e}")))?;
    Ok(ws)
}
