//! A real `nats-server` with JetStream on loopback (Debian's `nats-server`, installed by
//! `scripts/install-peers.sh`), with a store directory that survives a [`NatsServer::restart`], for the durable
//! bus's tests and the gateway replica tests.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, Result};

use crate::peers::{self, ChildGuard};

/// A running server. Dropping it kills the server and removes its store.
pub struct NatsServer {
    exe: PathBuf,
    port: u16,
    store: tempfile::TempDir,
    child: Option<ChildGuard>,
    /// The token clients must present (`--auth`), if any.
    token: Option<String>,
}

impl NatsServer {
    /// Starts a server on a free port; `None` (test skipped, or a failure under `CI`) when `nats-server` is not
    /// installed.
    pub async fn start() -> Result<Option<Self>> {
        Self::start_inner(None).await
    }

    /// [`NatsServer::start`] for a server that lets in only clients presenting `token` (`--auth`).
    pub async fn start_with_token(token: &str) -> Result<Option<Self>> {
        Self::start_inner(Some(token.to_owned())).await
    }

    async fn start_inner(token: Option<String>) -> Result<Option<Self>> {
        let found = peers::which("nats-server").or_else(|| {
            ["/usr/sbin/nats-server", "/usr/bin/nats-server"]
                .into_iter()
                .map(PathBuf::from)
                .find(|p| p.is_file())
        });
        let Some(exe) = peers::require("nats-server", found) else {
            return Ok(None);
        };
        let mut server = Self {
            exe,
            port: peers::free_port()?,
            store: tempfile::tempdir()?,
            child: None,
            token,
        };
        server.spawn().await?;
        Ok(Some(server))
    }

    /// `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Kills the server (`SIGKILL`: nothing is flushed that JetStream has not already synced).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill();
        }
    }

    /// Starts the server again on the same port and store (after [`kill`](Self::kill)).
    pub async fn restart(&mut self) -> Result<()> {
        self.kill();
        self.spawn().await
    }

    async fn spawn(&mut self) -> Result<()> {
        let mut cmd = std::process::Command::new(&self.exe);
        cmd.args(["-a", "127.0.0.1", "-p", &self.port.to_string(), "-js", "-sd"])
            .arg(self.store.path());
        if let Some(token) = &self.token {
            cmd.args(["--auth", token]);
        }
        cmd.stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        let child = ChildGuard::spawn("nats-server", &mut cmd).context("starting nats-server")?;
        self.child = Some(child);
        peers::wait_for_port(&format!("127.0.0.1:{}", self.port), Duration::from_secs(30)).await
    }
}
