//! Real peer programs (MCP servers, the Telegram emulator, …) installed by `scripts/install-peers.sh`.
//!
//! Layout under the repository root: npm packages in `.ci/.peers/node/node_modules/<pkg>`, a Python venv in
//! `.ci/.peers/venv`. The rule for a missing peer: when the `CI` environment variable is set the test fails
//! (panics); otherwise it prints `skipped: <peer> not installed (run scripts/install-peers.sh)` and the test
//! returns early.
//!
//! ```no_run
//! use nanobot_testkit::peers::{self, ChildGuard};
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
//! let Some(pkg) = peers::require_node_package("@modelcontextprotocol/server-everything") else {
//!     return Ok(()); // skipped (not on CI)
//! };
//! let Some(node) = peers::require("node", peers::node()) else { return Ok(()) };
//! // Listening on a free port, counted only while it runs; killed (whole group) when `server` is dropped, and
//! // `server.report()` tells a failing test whether it still ran and what it last wrote to stderr.
//! let (server, port): (ChildGuard, u16) =
//!     peers::spawn_listening("server-everything", std::time::Duration::from_secs(30), |port| {
//!         let mut cmd = std::process::Command::new(&node);
//!         cmd.arg(pkg.join("dist/index.js")).arg("streamableHttp").env("PORT", port.to_string());
//!         cmd
//!     })
//!     .await?;
//! # drop((server, port));
//! # Ok(()) }
//! ```

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

/// Environment variable that makes a missing peer a test failure.
pub const CI_ENV: &str = "CI";

/// The workspace root: the nearest ancestor of `CARGO_MANIFEST_DIR` (the crate under test, else this crate)
/// whose `Cargo.toml` has a `[workspace]` table.
pub fn repo_root() -> Option<PathBuf> {
    let start = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    workspace_root_from(&start)
}

/// The nearest ancestor of `start` (itself included) whose `Cargo.toml` declares `[workspace]`.
pub fn workspace_root_from(start: &Path) -> Option<PathBuf> {
    start.ancestors().find_map(|dir| {
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).ok()?;
        manifest
            .lines()
            .any(|l| l.trim() == "[workspace]")
            .then(|| dir.to_path_buf())
    })
}

/// `<repo root>/.ci/.peers`, whether or not it exists.
pub fn peers_dir() -> Option<PathBuf> {
    repo_root().map(|root| root.join(".ci").join(".peers"))
}

fn existing(path: PathBuf) -> Option<PathBuf> {
    path.exists().then_some(path)
}

/// The installed npm package directory `.ci/.peers/node/node_modules/<name>` (scoped names work).
pub fn node_package(name: &str) -> Option<PathBuf> {
    existing(peers_dir()?.join("node").join("node_modules").join(name))
}

/// An npm-installed executable `.ci/.peers/node/node_modules/.bin/<name>`.
pub fn node_bin(name: &str) -> Option<PathBuf> {
    existing(
        peers_dir()?
            .join("node")
            .join("node_modules")
            .join(".bin")
            .join(name),
    )
}

/// An executable of the peers' Python venv: `.ci/.peers/venv/bin/<name>`.
pub fn venv_exe(name: &str) -> Option<PathBuf> {
    existing(peers_dir()?.join("venv").join("bin").join(name))
}

/// The venv's Python interpreter.
pub fn python() -> Option<PathBuf> {
    venv_exe("python")
}

/// The Python nanobot 0.3.5's own interpreter, `.ci/.peers/nanobot-venv/bin/python` (`import nanobot` works; it
/// also has the `mcp` SDK), under the missing-peer rule ([`require`]).
#[track_caller]
pub fn require_nanobot_python() -> Option<PathBuf> {
    let found = peers_dir()
        .map(|d| d.join("nanobot-venv").join("bin").join("python"))
        .filter(|p| p.exists());
    require("the Python nanobot 0.3.5's venv", found)
}

/// The `node` executable: `.ci/.peers/node/bin/node` if present, else `node` on `PATH`.
pub fn node() -> Option<PathBuf> {
    peers_dir()
        .and_then(|d| existing(d.join("node").join("bin").join("node")))
        .or_else(|| which("node"))
}

/// Finds `exe` on `PATH`.
pub fn which(exe: impl AsRef<OsStr>) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(exe.as_ref()))
        .find(|candidate| candidate.is_file())
}

/// Whether the `CI` environment variable is set (to anything but empty, `0` or `false`).
pub fn is_ci() -> bool {
    std::env::var(CI_ENV).is_ok_and(|v| !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false"))
}

/// Applies the missing-peer rule with the process's `CI` setting; see [`require_with`].
#[track_caller]
pub fn require<T>(peer: &str, found: Option<T>) -> Option<T> {
    require_with(peer, found, is_ci())
}

/// The missing-peer rule: `found` is passed through; when it is `None`, panics if `ci`, else prints
/// `skipped: <peer> not installed (run scripts/install-peers.sh)` and returns `None`.
///
/// ```
/// use nanobot_testkit::peers::require_with;
/// assert_eq!(require_with("x", Some(1), true), Some(1));
/// assert_eq!(require_with::<u8>("x", None, false), None);
/// ```
#[track_caller]
pub fn require_with<T>(peer: &str, found: Option<T>, ci: bool) -> Option<T> {
    if found.is_none() {
        if ci {
            panic!("{peer} not installed but CI is set: run scripts/install-peers.sh");
        }
        eprintln!("skipped: {peer} not installed (run scripts/install-peers.sh)");
    }
    found
}

/// [`node_package`] under the missing-peer rule.
#[track_caller]
pub fn require_node_package(name: &str) -> Option<PathBuf> {
    require(name, node_package(name))
}

/// [`venv_exe`] under the missing-peer rule.
#[track_caller]
pub fn require_venv_exe(name: &str) -> Option<PathBuf> {
    require(name, venv_exe(name))
}

/// The ports [`free_port`] hands out: below Linux's ephemeral range (32768-60999), so neither the kernel's
/// `bind(0)` nor an outgoing connection's local port can take one between our check and the peer's own bind
/// (nor while a peer is stopped and restarted on it).
const PEER_PORTS: std::ops::Range<u16> = 20_000..32_000;

/// A free TCP port on 127.0.0.1 for a peer to listen on (bound, then released for the peer to take). Never the
/// same port twice in one process, and outside the ephemeral range: two peers started at once, or a port
/// released while its server restarts, cannot collide. Processes start at different offsets.
pub fn free_port() -> anyhow::Result<u16> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let span = u32::from(PEER_PORTS.end - PEER_PORTS.start);
    // The first call picks this process's starting offset (spread by PID); later calls go on from there.
    let _ = NEXT.compare_exchange(
        u32::MAX,
        std::process::id().wrapping_mul(7919) % span,
        Ordering::SeqCst,
        Ordering::SeqCst,
    );
    for _ in 0..span {
        let offset = NEXT.fetch_add(1, Ordering::SeqCst) % span;
        let port = PEER_PORTS.start + u16::try_from(offset).unwrap_or(0);
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    bail!("no free TCP port on 127.0.0.1 in {PEER_PORTS:?}")
}

/// Polls until a TCP connection to `addr` (e.g. `"127.0.0.1:3001"`) succeeds, or fails after `timeout`
/// (wall clock). Readiness polling, not synchronisation.
pub async fn wait_for_port(addr: &str, timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        match tokio::net::TcpStream::connect(addr).await {
            Ok(_) => return Ok(()),
            Err(err) if Instant::now() >= deadline => {
                bail!("{addr} did not accept connections within {timeout:?}: {err}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// Starts a peer that listens on a port of [`free_port`] and waits until it accepts connections there, its
/// standard error kept for [`ChildGuard::report`]. `command_for(port)` builds the command for a port (stdout is
/// the caller's to set; stderr is taken). A connection only counts while the peer still runs: if the peer ends
/// first (the port taken by another program between the check and its bind, say), it is started again on another
/// port, three times at most; then, or after `timeout`, the error names the peer and ends with its stderr.
pub async fn spawn_listening(
    name: &str,
    timeout: Duration,
    mut command_for: impl FnMut(u16) -> std::process::Command,
) -> anyhow::Result<(ChildGuard, u16)> {
    const ATTEMPTS: usize = 3;
    let mut failures = Vec::new();
    for _ in 0..ATTEMPTS {
        let port = free_port()?;
        let mut guard = ChildGuard::spawn_keeping_stderr(name, &mut command_for(port))?;
        let addr = format!("127.0.0.1:{port}");
        let deadline = Instant::now() + timeout;
        loop {
            if guard.has_exited() {
                failures.push(format!("on port {port}: {}", guard.report()));
                break;
            }
            let connected = tokio::net::TcpStream::connect(&addr).await.is_ok();
            if connected && !guard.has_exited() {
                return Ok((guard, port));
            }
            if Instant::now() >= deadline {
                bail!(
                    "{name} did not listen on {addr} within {timeout:?}: {}",
                    guard.report()
                );
            }
            if !connected {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    bail!(
        "{name} did not start ({ATTEMPTS} attempts): {}",
        failures.join("; ")
    )
}

/// Polls `GET url` until it answers with a status below 500 (a 503 means "still loading"), and returns that
/// status; fails after `timeout` (wall clock).
pub async fn wait_for_http(url: &str, timeout: Duration) -> anyhow::Result<u16> {
    crate::install_ring();
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .no_proxy()
        .build()
        .context("building the readiness client")?;
    let deadline = Instant::now() + timeout;
    loop {
        let last = match client.get(url).send().await {
            Ok(resp) if resp.status().as_u16() < 500 => return Ok(resp.status().as_u16()),
            Ok(resp) => format!("HTTP {}", resp.status()),
            Err(err) => err.to_string(),
        };
        if Instant::now() >= deadline {
            bail!("{url} not ready within {timeout:?}: {last}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

enum Child {
    Std(std::process::Child),
    Tokio(tokio::process::Child),
}

/// Owns a spawned peer process and kills it (and, when spawned through the guard, its whole process group)
/// on drop, so a failing test leaves no server behind.
pub struct ChildGuard {
    name: String,
    child: Child,
    group: bool,
    /// How it ended, once seen (the process is reaped then, and its id may be reused).
    exit: Option<std::process::ExitStatus>,
    /// Where its standard error goes, when [`spawn_listening`] started it.
    stderr: Option<tempfile::NamedTempFile>,
}

impl std::fmt::Debug for ChildGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChildGuard")
            .field("name", &self.name)
            .field("pid", &self.id())
            .field("group", &self.group)
            .finish()
    }
}

impl ChildGuard {
    /// Spawns `cmd` in a new process group (`process_group(0)`) and guards it.
    pub fn spawn(name: impl Into<String>, cmd: &mut std::process::Command) -> anyhow::Result<Self> {
        use std::os::unix::process::CommandExt as _;
        let name = name.into();
        let child = cmd
            .process_group(0)
            .spawn()
            .with_context(|| format!("spawning {name}"))?;
        Ok(Self {
            name,
            child: Child::Std(child),
            group: true,
            exit: None,
            stderr: None,
        })
    }

    /// [`ChildGuard::spawn`] with the peer's standard error kept in a file, for [`ChildGuard::report`].
    pub fn spawn_keeping_stderr(
        name: impl Into<String>,
        cmd: &mut std::process::Command,
    ) -> anyhow::Result<Self> {
        let log = tempfile::NamedTempFile::new().context("creating the file for a peer's stderr")?;
        cmd.stderr(log.reopen().context("opening the file for a peer's stderr")?);
        let mut guard = Self::spawn(name, cmd)?;
        guard.stderr = Some(log);
        Ok(guard)
    }

    /// Spawns the tokio `cmd` in a new process group and guards it (pipe its stdio as you like).
    pub fn spawn_tokio(name: impl Into<String>, cmd: &mut tokio::process::Command) -> anyhow::Result<Self> {
        let name = name.into();
        let child = cmd
            .process_group(0)
            .spawn()
            .with_context(|| format!("spawning {name}"))?;
        Ok(Self {
            name,
            child: Child::Tokio(child),
            group: true,
            exit: None,
            stderr: None,
        })
    }

    /// Guards an already spawned child. `own_group` says whether it leads its own process group (then the
    /// group is killed too).
    pub fn from_std(name: impl Into<String>, child: std::process::Child, own_group: bool) -> Self {
        Self {
            name: name.into(),
            child: Child::Std(child),
            group: own_group,
            exit: None,
            stderr: None,
        }
    }

    /// Guards an already spawned tokio child; see [`ChildGuard::from_std`].
    pub fn from_tokio(name: impl Into<String>, child: tokio::process::Child, own_group: bool) -> Self {
        Self {
            name: name.into(),
            child: Child::Tokio(child),
            group: own_group,
            exit: None,
            stderr: None,
        }
    }

    /// The peer's name, as given.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The OS process id (`None` once a tokio child has been reaped).
    pub fn id(&self) -> Option<u32> {
        match &self.child {
            Child::Std(c) => Some(c.id()),
            Child::Tokio(c) => c.id(),
        }
    }

    /// The std child, if this guard holds one (to take its stdout, etc.).
    pub fn std_child_mut(&mut self) -> Option<&mut std::process::Child> {
        match &mut self.child {
            Child::Std(c) => Some(c),
            Child::Tokio(_) => None,
        }
    }

    /// The tokio child, if this guard holds one.
    pub fn tokio_child_mut(&mut self) -> Option<&mut tokio::process::Child> {
        match &mut self.child {
            Child::Tokio(c) => Some(c),
            Child::Std(_) => None,
        }
    }

    /// Whether the process has exited (reaps it if so).
    pub fn has_exited(&mut self) -> bool {
        self.exit_status().is_some()
    }

    /// How the process ended, or `None` while it runs (reaps it once ended). What it left in its group is
    /// killed at once: once reaped, its id is free for the kernel to give to another process (`pid_max` is 32768
    /// on the CI machines, and a test suite goes round it), so the group is not signalled later by that number.
    pub fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
        if self.exit.is_none() {
            let status = match &mut self.child {
                Child::Std(c) => c.try_wait(),
                Child::Tokio(c) => c.try_wait(),
            };
            match status {
                Ok(Some(status)) => {
                    self.kill_group();
                    self.group = false;
                    self.exit = Some(status);
                }
                Ok(None) => {}
                // The child cannot be waited for (already reaped elsewhere): it is not running.
                Err(_) => {
                    self.group = false;
                    self.exit = Some(std::os::unix::process::ExitStatusExt::from_raw(0));
                }
            }
        }
        self.exit
    }

    /// One line on the peer's state for a failing test: running, or how it ended, and the end of its standard
    /// error when [`spawn_listening`] captured it.
    pub fn report(&mut self) -> String {
        let state = match self.exit_status() {
            None => format!("{} (pid {}) is running", self.name, self.id().unwrap_or(0)),
            Some(status) => format!("{} has exited ({status})", self.name),
        };
        match self.stderr_tail() {
            Some(tail) if !tail.trim().is_empty() => {
                format!("{state}; its stderr ends with: {}", tail.trim())
            }
            Some(_) => format!("{state}; its stderr is empty"),
            None => state,
        }
    }

    /// The last 2 KiB of what the peer wrote to its standard error, when [`spawn_listening`] captured it.
    pub fn stderr_tail(&self) -> Option<String> {
        let bytes = std::fs::read(self.stderr.as_ref()?.path()).ok()?;
        let start = bytes.len().saturating_sub(2048);
        Some(String::from_utf8_lossy(&bytes[start..]).into_owned())
    }

    fn kill_group(&self) {
        if self.group
            && let Some(pid) = self
                .id()
                .and_then(|id| i32::try_from(id).ok())
                .and_then(rustix::process::Pid::from_raw)
        {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
    }

    /// Kills the process group (if any) and the process now; also done on drop.
    pub fn kill(&mut self) {
        if self.exit.is_some() {
            return;
        }
        self.kill_group();
        match &mut self.child {
            Child::Std(c) => {
                let _ = c.kill();
                if let Ok(status) = c.wait() {
                    self.exit = Some(status);
                }
            }
            Child::Tokio(c) => {
                let _ = c.start_kill();
                // tokio reaps the zombie in the background if it has not exited yet.
                if let Ok(Some(status)) = c.try_wait() {
                    self.exit = Some(status);
                }
            }
        }
        // Signalled once: its number may belong to another process group by the next call.
        self.group = false;
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.kill();
    }
}
