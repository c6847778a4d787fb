//! A real `nats-server` with JetStream on loopback (Debian's `nats-server`, installed by
//! `scripts/install-peers.sh`), with a store directory that survives a [`NatsServer::restart`], for the durable
//! bus's tests and the gateway replica tests. It asks its clients for a user and password unless a test asks for
//! an open server ([`NatsServer::start_open`]): the bus refuses a server anyone may publish on.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};

use crate::peers::{self, ChildGuard};

/// A running server. Dropping it kills the server and removes its store.
pub struct NatsServer {
    exe: PathBuf,
    port: u16,
    store: tempfile::TempDir,
    child: Option<ChildGuard>,
    auth: Auth,
}

/// Who the server lets in.
enum Auth {
    /// Anyone.
    Open,
    /// Clients presenting the token (`--auth`).
    Token(String),
    /// The one user (`--user`, `--pass`).
    User { name: String, password: String },
    /// What a configuration file says (the listen address and JetStream's store are added).
    Config(String),
}

impl NatsServer {
    /// Starts a server on a free port that lets in one user, whose name and password [`url`](Self::url) carries;
    /// `None` (test skipped, or a failure under `CI`) when `nats-server` is not installed.
    pub async fn start() -> Result<Option<Self>> {
        use std::hash::{BuildHasher as _, Hasher as _};
        let password = format!(
            "{:016x}",
            std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish()
        );
        Self::start_inner(Auth::User {
            name: "nanobot".into(),
            password,
        })
        .await
    }

    /// A server that lets in any client, with no credentials (Debian's `nats-server` as installed).
    pub async fn start_open() -> Result<Option<Self>> {
        Self::start_inner(Auth::Open).await
    }

    /// A server that lets in only clients presenting `token` (`--auth`).
    pub async fn start_with_token(token: &str) -> Result<Option<Self>> {
        Self::start_inner(Auth::Token(token.to_owned())).await
    }

    /// A server run from a configuration file made of `config` (`authorization { … }`, `tls { … }`, …) and the
    /// listen address and JetStream store this kit gives it. [`url`](Self::url) then carries no credentials.
    pub async fn start_with_config(config: &str) -> Result<Option<Self>> {
        Self::start_inner(Auth::Config(config.to_owned())).await
    }

    async fn start_inner(auth: Auth) -> Result<Option<Self>> {
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
            auth,
        };
        server.spawn().await?;
        Ok(Some(server))
    }

    /// `nats://127.0.0.1:<port>`, with the user and password in it when the server has its one user.
    pub fn url(&self) -> String {
        match &self.auth {
            Auth::User { name, password } => format!("nats://{name}:{password}@127.0.0.1:{}", self.port),
            _ => self.url_without_credentials(),
        }
    }

    /// A plain NATS client with the server's credentials (what an operator's tool, or an intruder who has them,
    /// would hold), bounded by 10 s.
    pub async fn client(&self) -> Result<async_nats::Client> {
        let mut options = async_nats::ConnectOptions::new().connection_timeout(Duration::from_secs(10));
        match &self.auth {
            Auth::User { name, password } => {
                options = options.user_and_password(name.clone(), password.clone())
            }
            Auth::Token(token) => options = options.token(token.clone()),
            Auth::Open | Auth::Config(_) => {}
        }
        options
            .connect(self.url_without_credentials())
            .await
            .context("connecting a NATS client")
    }

    /// `nats://127.0.0.1:<port>`: where a client with no credentials would connect.
    pub fn url_without_credentials(&self) -> String {
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
        match &self.auth {
            Auth::Config(config) => {
                let file = self.store.path().join("nats-server.conf");
                let text = format!(
                    "listen: \"127.0.0.1:{}\"\njetstream {{ store_dir: {:?} }}\n{config}\n",
                    self.port,
                    self.store.path().join("js")
                );
                std::fs::write(&file, text).context("writing nats-server.conf")?;
                cmd.arg("-c").arg(file);
            }
            auth => {
                cmd.args(["-a", "127.0.0.1", "-p", &self.port.to_string(), "-js", "-sd"])
                    .arg(self.store.path());
                match auth {
                    Auth::Token(token) => {
                        cmd.args(["--auth", token]);
                    }
                    Auth::User { name, password } => {
                        cmd.args(["--user", name, "--pass", password]);
                    }
                    Auth::Open | Auth::Config(_) => {}
                }
            }
        }
        cmd.stdout(std::process::Stdio::null());
        let mut child =
            ChildGuard::spawn_keeping_stderr("nats-server", &mut cmd).context("starting nats-server")?;
        let ready = peers::wait_for_port(&format!("127.0.0.1:{}", self.port), Duration::from_secs(30)).await;
        // A connection counts only while our server runs (another program may hold the port).
        if let Err(e) = ready {
            bail!("{e}; {}", child.report());
        }
        if child.has_exited() {
            bail!(
                "nats-server did not stay up on port {}: {}",
                self.port,
                child.report()
            );
        }
        self.child = Some(child);
        Ok(())
    }
}
