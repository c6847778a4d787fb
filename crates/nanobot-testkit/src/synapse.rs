//! A real Matrix homeserver for the tests: matrix-synapse from `.ci/.peers/synapse-venv` (pinned in
//! `.ci/peers/synapse-requirements.txt`, installed by `scripts/install-peers.sh`), on a free `127.0.0.1` port with
//! SQLite and its media store in a temp dir, and a small client-server API client to play users and bots with.
//!
//! Its configuration: `server_name` [`SERVER_NAME`], one plain-HTTP `client` listener on loopback, no federation
//! (no federation listener, `federation_domain_whitelist: []`, no trusted key servers), `enable_registration:
//! false` with a `registration_shared_secret`, presence and URL previews off, every rate limit raised out of the
//! way. Users are made through synapse's own `register_new_matrix_user` (the shared-secret registration API, with
//! its HMAC-SHA1 nonce; this crate has no SHA-1) for one admin at start, then through the admin API
//! (`PUT /_synapse/admin/v2/users/<user id>`) and a password login, which gives each [`MatrixUser`] its own
//! access token and device.
//!
//! Synapse starts in about 1.5 s on a fresh database; [`Synapse::shared`] starts one per test binary, reused by
//! every test in it (use distinct localparts there: [`Synapse::fresh_user`]). It runs under a small Python
//! wrapper that stops it and removes its directory once the test process is gone, so the shared instance, which
//! is never dropped, leaves nothing behind.
//!
//! ```no_run
//! use nanobot_testkit::{peers, synapse::{self, Synapse}};
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
//! if peers::require("matrix-synapse", synapse::python()).is_none() {
//!     return Ok(()); // skipped (not on CI)
//! }
//! let hs = Synapse::shared().await?;
//! let alice = hs.fresh_user("alice").await?;
//! let bot = hs.fresh_user("bot").await?;
//! let room = hs.create_room(&alice.access_token, "dm", &[bot.user_id.as_str()], true).await?;
//! hs.join(&bot.access_token, &room).await?;
//! let mut timeline = hs.timeline(&bot.access_token).await?;
//! hs.send_text(&alice.access_token, &room, "hello").await?;
//! let event = hs
//!     .wait_event(&bot.access_token, &mut timeline, &room, std::time::Duration::from_secs(20), |e| {
//!         e["content"]["body"] == "hello"
//!     })
//!     .await?;
//! assert_eq!(event["sender"], alice.user_id.as_str());
//! # Ok(()) }
//! ```

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};
use reqwest::{Method, Url};
use serde_json::{Value, json};

use crate::peers::{self, ChildGuard};

/// The homeserver's `server_name`: user ids are `@<localpart>:nanobot.test`.
pub const SERVER_NAME: &str = "nanobot.test";

/// How long [`Synapse::start`] waits for `/_matrix/client/versions` to answer.
pub const START_TIMEOUT: Duration = Duration::from_secs(90);

const SHARED_SECRET: &str = "nanobot-test-registration-secret";
const ADMIN_LOCALPART: &str = "nanobot-admin";
const ADMIN_PASSWORD: &str = "nanobot-admin-password";

/// The synapse venv's Python (`.ci/.peers/synapse-venv/bin/python`), when installed.
pub fn python() -> Option<PathBuf> {
    venv_exe("python")
}

fn venv_exe(name: &str) -> Option<PathBuf> {
    peers::peers_dir()
        .map(|d| d.join("synapse-venv").join("bin").join(name))
        .filter(|p| p.exists())
}

/// A registered Matrix account, logged in on a device of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatrixUser {
    /// `@localpart:nanobot.test`.
    pub user_id: String,
    /// Its localpart.
    pub localpart: String,
    /// The password it was registered with.
    pub password: String,
    /// The access token of this login.
    pub access_token: String,
    /// The device of this login.
    pub device_id: String,
}

/// A running synapse (killed, with its temp dir removed, on drop; see [`Synapse::shared`] for one per process).
pub struct Synapse {
    guard: Mutex<ChildGuard>,
    port: u16,
    log: PathBuf,
    admin_token: String,
    // Last: removed after the process is killed.
    dir: tempfile::TempDir,
}

impl std::fmt::Debug for Synapse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Synapse")
            .field("url", &self.url())
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

/// Runs synapse as its child, polling its own parent: once the test process is gone (a shared instance is never
/// dropped), it kills synapse and removes the directory. Killed as a group by [`ChildGuard`] otherwise.
const WRAPPER: &str = r#"
import os, shutil, signal, subprocess, sys, time
config, home, parent = sys.argv[1], sys.argv[2], int(sys.argv[3])
if os.getppid() != parent:
    sys.exit(3)
child = subprocess.Popen([sys.executable, "-m", "synapse.app.homeserver", "-c", config], cwd=home)
signal.signal(signal.SIGTERM, lambda *_: child.terminate())
while child.poll() is None and os.getppid() == parent:
    time.sleep(0.2)
if child.poll() is None:
    child.kill()
    child.wait()
    shutil.rmtree(home, ignore_errors=True)
sys.exit(child.returncode or 0)
"#;

fn homeserver_yaml(dir: &Path, port: u16) -> String {
    let d = dir.display();
    let open = "{per_second: 100000, burst_count: 100000}";
    format!(
        r#"server_name: "{SERVER_NAME}"
public_baseurl: "http://127.0.0.1:{port}/"
pid_file: "{d}/homeserver.pid"
listeners:
  - port: {port}
    bind_addresses: ['127.0.0.1']
    type: http
    tls: false
    x_forwarded: false
    resources:
      - names: [client]
        compress: false
database:
  name: sqlite3
  args:
    database: "{d}/homeserver.db"
media_store_path: "{d}/media_store"
signing_key_path: "{d}/signing.key"
registration_shared_secret: "{SHARED_SECRET}"
macaroon_secret_key: "nanobot-test-macaroon"
form_secret: "nanobot-test-form"
enable_registration: false
report_stats: false
trusted_key_servers: []
suppress_key_server_warning: true
federation_domain_whitelist: []
presence:
  enabled: false
url_preview_enabled: false
enable_metrics: false
max_upload_size: 50M
rc_message: {open}
rc_registration: {open}
rc_login:
  address: {open}
  account: {open}
  failed_attempts: {open}
rc_joins:
  local: {open}
  remote: {open}
rc_joins_per_room: {open}
rc_invites:
  per_room: {open}
  per_user: {open}
  per_issuer: {open}
rc_admin_redaction: {open}
rc_3pid_validation: {open}
rc_media_create: {open}
rc_room_creation: {open}
rc_delayed_event_mgmt: {open}
rc_reports: {open}
"#
    )
}

/// A fixed test key in synapse's format (`ed25519 <key id> <unpadded base64 seed>`): nothing federates with it.
const SIGNING_KEY: &str = "ed25519 a_test bmFub2JvdC10ZXN0LXNpZ25pbmcta2V5LXNlZWQtMzI";

fn http() -> Result<reqwest::Client> {
    crate::install_ring();
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(60))
        .build()
        .context("building the Matrix client")
}

fn txn_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "nanobot-testkit-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    )
}

fn log_tail(path: &Path, bytes: usize) -> String {
    let data = std::fs::read(path).unwrap_or_default();
    let start = data.len().saturating_sub(bytes);
    String::from_utf8_lossy(&data[start..]).into_owned()
}

impl Synapse {
    /// Starts a synapse of its own (see the module docs), ready when `GET /_matrix/client/versions` answers, with a
    /// bootstrap admin registered. Fails with synapse's log tail when it does not come up within
    /// [`START_TIMEOUT`] (a port taken under it: tried again on another, three times).
    pub async fn start() -> Result<Self> {
        let python = python().ok_or_else(|| {
            anyhow!(
                "matrix-synapse is not installed in .ci/.peers/synapse-venv (run scripts/install-peers.sh)"
            )
        })?;
        let mut failures = Vec::new();
        for _ in 0..3 {
            let dir = tempfile::Builder::new()
                .prefix("nanobot-synapse-")
                .tempdir()
                .context("creating synapse's directory")?;
            let port = peers::free_port()?;
            let config = dir.path().join("homeserver.yaml");
            std::fs::write(&config, homeserver_yaml(dir.path(), port)).context("writing homeserver.yaml")?;
            std::fs::write(dir.path().join("signing.key"), SIGNING_KEY).context("writing the signing key")?;
            let log = dir.path().join("synapse.log");
            let log_file = std::fs::File::create(&log).context("creating synapse's log")?;
            let mut cmd = std::process::Command::new(&python);
            cmd.arg("-c")
                .arg(WRAPPER)
                .arg(&config)
                .arg(dir.path())
                .arg(std::process::id().to_string())
                .current_dir(dir.path())
                .env("PYTHONUNBUFFERED", "1")
                .stdin(std::process::Stdio::null())
                .stdout(log_file.try_clone().context("opening synapse's log")?)
                .stderr(log_file);
            let started = Instant::now();
            let guard = ChildGuard::spawn("synapse", &mut cmd)?;
            let mut hs = Self {
                guard: Mutex::new(guard),
                port,
                log,
                admin_token: String::new(),
                dir,
            };
            match hs.wait_ready(started).await {
                Ok(()) => {}
                Err(err) if hs.has_exited() => {
                    failures.push(format!("on port {port}: {err:#}"));
                    continue;
                }
                Err(err) => return Err(err),
            }
            hs.admin_token = hs.bootstrap_admin().await?;
            tracing::debug!(url = %hs.url(), elapsed = ?started.elapsed(), "synapse ready");
            return Ok(hs);
        }
        bail!("synapse did not start (3 attempts): {}", failures.join("; "))
    }

    /// The synapse shared by every test of this process, started on first use (on a thread and runtime of its own,
    /// so it outlives the test that started it) and never stopped by the tests: it ends with the process. A failed
    /// start is remembered and reported to every later caller.
    pub async fn shared() -> Result<&'static Self> {
        static SHARED: OnceLock<std::result::Result<Synapse, String>> = OnceLock::new();
        let cell = tokio::task::spawn_blocking(|| SHARED.get_or_init(start_on_own_thread))
            .await
            .context("waiting for the shared synapse")?;
        cell.as_ref().map_err(|e| anyhow!("{e}"))
    }

    fn has_exited(&self) -> bool {
        self.guard.lock().map(|mut g| g.has_exited()).unwrap_or(true)
    }

    async fn wait_ready(&self, started: Instant) -> Result<()> {
        let client = http()?;
        let url = format!("{}/_matrix/client/versions", self.url());
        loop {
            if self.has_exited() {
                bail!("synapse exited before it answered: {}", self.report());
            }
            if let Ok(resp) = client.get(&url).timeout(Duration::from_secs(5)).send().await
                && resp.status().is_success()
            {
                return Ok(());
            }
            if started.elapsed() > START_TIMEOUT {
                bail!(
                    "synapse did not answer {url} within {START_TIMEOUT:?}: {}",
                    self.report()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn bootstrap_admin(&self) -> Result<String> {
        let script = venv_exe("register_new_matrix_user")
            .ok_or_else(|| anyhow!("register_new_matrix_user missing from .ci/.peers/synapse-venv"))?;
        let out = tokio::process::Command::new(script)
            .args([
                "-u",
                ADMIN_LOCALPART,
                "-p",
                ADMIN_PASSWORD,
                "--admin",
                "-k",
                SHARED_SECRET,
            ])
            .arg(self.url())
            .env("NO_PROXY", "127.0.0.1,localhost")
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .context("running register_new_matrix_user")?;
        if !out.status.success() {
            bail!(
                "register_new_matrix_user failed ({}): {}{}; {}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                self.report()
            );
        }
        Ok(self.login(ADMIN_LOCALPART, ADMIN_PASSWORD).await?.access_token)
    }

    /// `http://127.0.0.1:<port>`, the homeserver URL for clients.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// [`SERVER_NAME`].
    pub fn server_name(&self) -> &str {
        SERVER_NAME
    }

    /// `@<localpart>:nanobot.test`.
    pub fn user_id(&self, localpart: &str) -> String {
        format!("@{localpart}:{SERVER_NAME}")
    }

    /// The bootstrap admin's access token (for the admin API).
    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// Synapse's directory (config, SQLite database, media store, log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Everything synapse logged so far (its access log included: one `Processed request` line per request).
    pub fn log(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.log).unwrap_or_default()).into_owned()
    }

    /// The requests synapse answered so far, as `(method, path with query, user id or "-")`, from its access log.
    pub fn requests(&self) -> Vec<(String, String, String)> {
        self.log()
            .lines()
            .filter(|l| l.contains("Processed request:"))
            .filter_map(|l| {
                // ... - 127.0.0.1 - 28448 - {@bot:nanobot.test} Processed request: ... "PUT /path HTTP/1.1" ...
                let user = l
                    .split_once(" - {")
                    .and_then(|(_, rest)| rest.split_once('}'))
                    .map_or("-", |(u, _)| u);
                let quoted = l.split('"').nth(1)?;
                let mut parts = quoted.split(' ');
                let method = parts.next()?;
                let path = parts.next()?;
                Some((
                    method.to_string(),
                    path.to_string(),
                    if user == "None" { "-" } else { user }.to_string(),
                ))
            })
            .collect()
    }

    /// Whether synapse still runs, and the end of its log: for a failing test's message.
    pub fn report(&self) -> String {
        let state = match self.guard.lock() {
            Ok(mut g) => g.report(),
            Err(_) => "synapse (state unknown)".to_string(),
        };
        format!("{state}; its log ends with:\n{}", log_tail(&self.log, 4096))
    }

    fn endpoint(&self, segments: &[&str]) -> Result<Url> {
        let mut url = Url::parse(&self.url()).context("synapse url")?;
        url.path_segments_mut()
            .map_err(|()| anyhow!("synapse url cannot have a path"))?
            .extend(segments);
        Ok(url)
    }

    /// One client-server API call: `segments` are the path's segments (each percent-encoded as needed, so room ids
    /// and user ids go in as they are), `query` its parameters, `token` the Bearer token. Fails on any status but
    /// 2xx, with Matrix's `errcode`/`error`.
    pub async fn call(
        &self,
        method: Method,
        segments: &[&str],
        query: &[(&str, &str)],
        token: Option<&str>,
        body: Option<&Value>,
    ) -> Result<Value> {
        let mut url = self.endpoint(segments)?;
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query);
        }
        let mut req = http()?.request(method.clone(), url.clone());
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        if let Some(body) = body {
            req = req.json(body);
        }
        let resp = req
            .send()
            .await
            .with_context(|| format!("{method} {}", url.path()))?;
        let status = resp.status();
        let text = resp.text().await.unwrap_or_default();
        if !status.is_success() {
            bail!("{method} {} answered {status}: {text}", url.path());
        }
        if text.trim().is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_str(&text).with_context(|| format!("{method} {}: not JSON: {text}", url.path()))
    }

    /// Logs `localpart` in with its password on a new device.
    pub async fn login(&self, localpart: &str, password: &str) -> Result<MatrixUser> {
        let body = json!({
            "type": "m.login.password",
            "identifier": {"type": "m.id.user", "user": localpart},
            "password": password,
        });
        let resp = self
            .call(
                Method::POST,
                &["_matrix", "client", "v3", "login"],
                &[],
                None,
                Some(&body),
            )
            .await?;
        let field = |k: &str| {
            resp[k]
                .as_str()
                .map(str::to_string)
                .ok_or_else(|| anyhow!("login answered without {k}: {resp}"))
        };
        Ok(MatrixUser {
            user_id: field("user_id")?,
            localpart: localpart.to_string(),
            password: password.to_string(),
            access_token: field("access_token")?,
            device_id: field("device_id")?,
        })
    }

    /// Registers `@localpart:nanobot.test` (an admin when `admin`) and logs it in on a device of its own.
    pub async fn register(&self, localpart: &str, password: &str, admin: bool) -> Result<MatrixUser> {
        let user_id = self.user_id(localpart);
        let body = json!({"password": password, "admin": admin, "displayname": localpart});
        self.call(
            Method::PUT,
            &["_synapse", "admin", "v2", "users", &user_id],
            &[],
            Some(&self.admin_token),
            Some(&body),
        )
        .await?;
        self.login(localpart, password).await
    }

    /// [`Synapse::register`] of a localpart unique in this process (`<prefix>-<n>`), not an admin, password
    /// `password-<localpart>`: for tests sharing [`Synapse::shared`].
    pub async fn fresh_user(&self, prefix: &str) -> Result<MatrixUser> {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let localpart = format!("{prefix}-{}", NEXT.fetch_add(1, Ordering::SeqCst));
        let password = format!("password-{localpart}");
        self.register(&localpart, &password, false).await
    }

    /// Creates a room named `name` inviting `invite` (a DM when `is_direct`: `is_direct` and the
    /// `trusted_private_chat` preset, else `private_chat`); its room id.
    pub async fn create_room(
        &self,
        token: &str,
        name: &str,
        invite: &[&str],
        is_direct: bool,
    ) -> Result<String> {
        let body = json!({
            "name": name,
            "invite": invite,
            "is_direct": is_direct,
            "preset": if is_direct { "trusted_private_chat" } else { "private_chat" },
        });
        let resp = self
            .call(
                Method::POST,
                &["_matrix", "client", "v3", "createRoom"],
                &[],
                Some(token),
                Some(&body),
            )
            .await?;
        resp["room_id"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| anyhow!("createRoom answered without room_id: {resp}"))
    }

    /// Invites `user_id` into `room`.
    pub async fn invite(&self, token: &str, room: &str, user_id: &str) -> Result<()> {
        let body = json!({"user_id": user_id});
        self.call(
            Method::POST,
            &["_matrix", "client", "v3", "rooms", room, "invite"],
            &[],
            Some(token),
            Some(&body),
        )
        .await
        .map(drop)
    }

    /// Joins `room` (an id or alias); the room id.
    pub async fn join(&self, token: &str, room: &str) -> Result<String> {
        let resp = self
            .call(
                Method::POST,
                &["_matrix", "client", "v3", "join", room],
                &[],
                Some(token),
                Some(&json!({})),
            )
            .await?;
        resp["room_id"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| anyhow!("join answered without room_id: {resp}"))
    }

    /// Sends an event of `event_type` with `content` into `room`; its event id.
    pub async fn send_event(
        &self,
        token: &str,
        room: &str,
        event_type: &str,
        content: &Value,
    ) -> Result<String> {
        let txn = txn_id();
        let resp = self
            .call(
                Method::PUT,
                &["_matrix", "client", "v3", "rooms", room, "send", event_type, &txn],
                &[],
                Some(token),
                Some(content),
            )
            .await?;
        resp["event_id"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| anyhow!("send answered without event_id: {resp}"))
    }

    /// Sends a plain `m.text` message; its event id.
    pub async fn send_text(&self, token: &str, room: &str, body: &str) -> Result<String> {
        self.send_event(
            token,
            room,
            "m.room.message",
            &json!({"msgtype": "m.text", "body": body}),
        )
        .await
    }

    /// The room's events, oldest first (the newest 200 at most, every type).
    pub async fn messages(&self, token: &str, room: &str) -> Result<Vec<Value>> {
        let resp = self
            .call(
                Method::GET,
                &["_matrix", "client", "v3", "rooms", room, "messages"],
                &[("dir", "b"), ("limit", "200")],
                Some(token),
                None,
            )
            .await?;
        let mut events = resp["chunk"].as_array().cloned().unwrap_or_default();
        events.reverse();
        Ok(events)
    }

    /// The user ids joined to `room`.
    pub async fn joined_members(&self, token: &str, room: &str) -> Result<Vec<String>> {
        let resp = self
            .call(
                Method::GET,
                &["_matrix", "client", "v3", "rooms", room, "joined_members"],
                &[],
                Some(token),
                None,
            )
            .await?;
        Ok(resp["joined"]
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default())
    }

    /// Polls until `user_id` is joined to `room` (seen with `token`, a member's), at most `timeout`.
    pub async fn wait_joined(&self, token: &str, room: &str, user_id: &str, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if self
                .joined_members(token, room)
                .await?
                .iter()
                .any(|u| u == user_id)
            {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!("{user_id} did not join {room} within {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `user_id`'s membership in `room` (`join`, `invite`, `leave`, …), `None` when it has none.
    pub async fn membership(&self, token: &str, room: &str, user_id: &str) -> Result<Option<String>> {
        match self
            .call(
                Method::GET,
                &[
                    "_matrix",
                    "client",
                    "v3",
                    "rooms",
                    room,
                    "state",
                    "m.room.member",
                    user_id,
                ],
                &[],
                Some(token),
                None,
            )
            .await
        {
            Ok(content) => Ok(content["membership"].as_str().map(str::to_string)),
            Err(err) if err.to_string().contains("M_NOT_FOUND") => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// Uploads `bytes` to the media repository; the `mxc://` URI.
    pub async fn upload(
        &self,
        token: &str,
        bytes: Vec<u8>,
        content_type: &str,
        filename: &str,
    ) -> Result<String> {
        let mut url = self.endpoint(&["_matrix", "media", "v3", "upload"])?;
        url.query_pairs_mut().append_pair("filename", filename);
        let resp = http()?
            .post(url)
            .bearer_auth(token)
            .header(reqwest::header::CONTENT_TYPE, content_type)
            .body(bytes)
            .send()
            .await
            .context("uploading media")?;
        let status = resp.status();
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        if !status.is_success() {
            bail!("upload answered {status}: {body}");
        }
        body["content_uri"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| anyhow!("upload answered without content_uri: {body}"))
    }

    /// Downloads `mxc://server/id` through the authenticated media API (`/_matrix/client/v1/media/download`).
    pub async fn download(&self, token: &str, mxc: &str) -> Result<Vec<u8>> {
        let (server, id) = mxc
            .strip_prefix("mxc://")
            .and_then(|rest| rest.split_once('/'))
            .ok_or_else(|| anyhow!("not an mxc URI: {mxc}"))?;
        let url = self.endpoint(&["_matrix", "client", "v1", "media", "download", server, id])?;
        let resp = http()?
            .get(url)
            .bearer_auth(token)
            .send()
            .await
            .context("downloading media")?;
        let status = resp.status();
        let bytes = resp.bytes().await.context("reading media")?;
        if !status.is_success() {
            bail!(
                "download of {mxc} answered {status}: {}",
                String::from_utf8_lossy(&bytes)
            );
        }
        Ok(bytes.to_vec())
    }

    /// One `/sync` (timeline of at most 50 events a room), from `since` when given, long-polling `timeout_ms`.
    pub async fn sync(&self, token: &str, since: Option<&str>, timeout_ms: u64) -> Result<Value> {
        let timeout = timeout_ms.to_string();
        let filter = r#"{"room":{"timeline":{"limit":50}}}"#;
        let mut query = vec![("timeout", timeout.as_str()), ("filter", filter)];
        if let Some(since) = since {
            query.push(("since", since));
        }
        self.call(
            Method::GET,
            &["_matrix", "client", "v3", "sync"],
            &query,
            Some(token),
            None,
        )
        .await
    }

    /// A sync position for `token` now: events after it are what [`Synapse::wait_sync`] sees.
    pub async fn sync_token(&self, token: &str) -> Result<String> {
        let resp = self.sync(token, None, 0).await?;
        resp["next_batch"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| anyhow!("sync answered without next_batch: {resp}"))
    }

    /// Syncs from `since` (advanced past every response seen) until `pick` finds something in a sync response, at
    /// most `timeout`.
    pub async fn wait_sync<T>(
        &self,
        token: &str,
        since: &mut String,
        timeout: Duration,
        mut pick: impl FnMut(&Value) -> Option<T>,
    ) -> Result<T> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let poll = u64::try_from(left.min(Duration::from_secs(5)).as_millis()).unwrap_or(5000);
            let resp = self.sync(token, Some(since), poll).await?;
            if let Some(next) = resp["next_batch"].as_str() {
                *since = next.to_string();
            }
            if let Some(found) = pick(&resp) {
                return Ok(found);
            }
            if Instant::now() >= deadline {
                bail!("nothing awaited arrived by sync within {timeout:?}");
            }
        }
    }

    /// A [`Timeline`] for `token` from now on: what [`Synapse::wait_event`] reads.
    pub async fn timeline(&self, token: &str) -> Result<Timeline> {
        Ok(Timeline::new(self.sync_token(token).await?))
    }

    /// The next timeline event of `room` (after the ones taken before) that satisfies `pred`, synced as needed, at
    /// most `timeout`; with `room_id` added. The room's events before it are passed over; other rooms' are kept.
    pub async fn wait_event(
        &self,
        token: &str,
        timeline: &mut Timeline,
        room: &str,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Result<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(found) = timeline.take(room, &pred) {
                return Ok(found);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                bail!("no awaited event arrived in {room} within {timeout:?}");
            }
            let poll = u64::try_from(left.min(Duration::from_secs(5)).as_millis()).unwrap_or(5000);
            let resp = self.sync(token, Some(&timeline.since), poll).await?;
            if let Some(next) = resp["next_batch"].as_str() {
                timeline.since = next.to_string();
            }
            if let Some(rooms) = resp["rooms"]["join"].as_object() {
                for (room_id, joined) in rooms {
                    for event in joined["timeline"]["events"].as_array().into_iter().flatten() {
                        let mut event = event.clone();
                        event["room_id"] = json!(room_id);
                        timeline.pending.push_back(event);
                    }
                }
            }
        }
    }
}

/// A reader's position in its joined rooms' timelines for [`Synapse::wait_event`]: the sync token and the events
/// synced but not taken yet (a sync brings several at once).
#[derive(Debug, Clone)]
pub struct Timeline {
    /// The `next_batch` of the last sync.
    pub since: String,
    pending: std::collections::VecDeque<Value>,
}

impl Timeline {
    /// A timeline from the sync position `since` (a `next_batch`, e.g. from [`Synapse::wait_sync`]).
    pub fn new(since: String) -> Self {
        Self {
            since,
            pending: std::collections::VecDeque::new(),
        }
    }

    fn take(&mut self, room: &str, pred: &impl Fn(&Value) -> bool) -> Option<Value> {
        let at = self
            .pending
            .iter()
            .position(|e| e["room_id"] == room && pred(e))?;
        let mut found = None;
        // The room's earlier events are passed over; other rooms' stay.
        self.pending = std::mem::take(&mut self.pending)
            .into_iter()
            .enumerate()
            .filter_map(|(i, e)| {
                if i == at {
                    found = Some(e);
                    None
                } else if i < at && e["room_id"] == room {
                    None
                } else {
                    Some(e)
                }
            })
            .collect();
        found
    }
}

fn start_on_own_thread() -> std::result::Result<Synapse, String> {
    let (tx, rx) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("synapse-start".into())
        .spawn(move || {
            let result = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("building a runtime for synapse: {e}"))
                .and_then(|rt| rt.block_on(Synapse::start()).map_err(|e| format!("{e:#}")));
            let _ = tx.send(result);
        });
    if let Err(e) = spawned {
        return Err(format!("spawning the thread that starts synapse: {e}"));
    }
    rx.recv()
        .unwrap_or_else(|_| Err("the thread starting synapse ended without an answer".into()))
}
