//! [`MatrixChannel`]: the login, the sync loop, access control, media and sending.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use futures::StreamExt as _;
use nanobot_bus::{Bus, InboundMessage, OutboundKind, OutboundMessage};
use nanobot_channels::{
    AccessControl, AccessDecision, AllowList, AttachmentError, Channel, ChannelError, GroupPolicy, Heartbeat,
    InboundContext, PairingStore, RecentIds, Transcribe, extension_for_mime, mime_for_name, read_attachment,
    safe_file_name, server_text, split_message,
};
use nanobot_config::Secret;
use nanobot_util::lock;
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::html::{MATRIX_HTML_FORMAT, render_html};
use crate::settings::{Login, RoomPolicy};
use crate::{MatrixSettings, NAME};

/// Bound of every API call but the sync.
const API_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the server may hold a sync open (0.3.5's `timeout=30000`).
const SYNC_TIMEOUT_MS: u64 = 30_000;
/// Bound of one sync request: the server's hold plus room for a slow answer.
const SYNC_BOUND: Duration = Duration::from_secs(75);
/// The typing notice lasts this long on the server; it is renewed every [`TYPING_KEEPALIVE`].
const TYPING_TIMEOUT_MS: u64 = 30_000;
const TYPING_KEEPALIVE: Duration = Duration::from_secs(20);
/// A typing notice is never kept up longer than this, even if no answer comes.
const TYPING_MAX: Duration = Duration::from_secs(600);
/// A streamed message is edited at most this often (0.3.5's interval).
const STREAM_EDIT_INTERVAL: Duration = Duration::from_secs(2);
/// Events remembered to drop a repeat (a sync replayed after a reconnect).
const REMEMBERED_EVENTS: usize = 2048;
/// Largest `session.json` read.
const MAX_SESSION_FILE: u64 = 64 * 1024;
/// A message's body is split at this many characters, so that the event (body and HTML) stays below Matrix's
/// 64 KiB limit.
pub const MAX_MESSAGE_CHARS: usize = 8000;
/// An event whose content serialises larger than this loses its `formatted_body` (the HTML) and goes as plain
/// text: Matrix refuses events over 65,536 bytes.
const MAX_CONTENT_BYTES: usize = 60_000;
/// How long a send that failed keeps its transaction id, so the manager's retry of it reuses the id and the
/// homeserver does not post it twice.
const FAILED_SEND_MEMORY: Duration = Duration::from_secs(600);
/// A streamed answer whose end never came (a cancelled turn) is forgotten after this long without a delta.
const STREAM_IDLE: Duration = Duration::from_secs(900);
/// At most this many direct chats a stranger invites the bot to are joined per hour (to ask for pairing).
const STRANGER_JOINS_PER_HOUR: usize = 10;
/// Pages of up to 100 events fetched back when a sync leaves a gap in a room's timeline.
const BACKFILL_PAGES: usize = 5;
/// The edit of a streamed message repeats its text as a fallback for old clients: cut to this many characters.
const EDIT_FALLBACK_CHARS: usize = 1000;
/// The sync filter: members loaded lazily (the server then counts them in the room summary), no presence.
const SYNC_FILTER: &str = r#"{"room":{"state":{"lazy_load_members":true},"timeline":{"lazy_load_members":true}},"presence":{"not_types":["*"]}}"#;

/// Metadata key of the room's display name, as 0.3.5 names it.
pub const META_ROOM: &str = "room";
/// Metadata key of the event an inbound message came from.
pub const META_EVENT_ID: &str = "event_id";
/// Metadata key of the thread root of a message in a thread.
pub const META_THREAD_ROOT: &str = "thread_root_event_id";
/// Metadata key of the event a threaded answer replies to.
pub const META_THREAD_REPLY_TO: &str = "thread_reply_to_event_id";
/// Metadata key of the attachments of an inbound message (0.3.5's list of `{type, mime, filename, path, …}`).
pub const META_ATTACHMENTS: &str = "attachments";

/// What 0.3.5 writes in place of an attachment.
fn marker(name: &str, problem: Option<&str>) -> String {
    match problem {
        None => format!("[attachment: {name}]"),
        Some(p) => format!("[attachment: {name} - {p}]"),
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn transient(message: impl Into<String>) -> ChannelError {
    ChannelError::transient(NAME, message.into())
}

fn enc(part: &str) -> String {
    utf8_percent_encode(part, NON_ALPHANUMERIC).to_string()
}

/// A logged-in device.
#[derive(Clone)]
struct Session {
    token: Secret,
    device_id: String,
    /// From `session.json` (a refused token is then replaced by a new password login).
    saved: bool,
}

/// What the sync said about a joined room.
#[derive(Debug, Default)]
struct Room {
    joined: Option<u64>,
    invited: Option<u64>,
    name: Option<String>,
    alias: Option<String>,
    encrypted: bool,
}

impl Room {
    /// Joined and invited members, as nio counts a room's members (`None`: the server has not said).
    fn member_count(&self) -> Option<u64> {
        self.joined
            .map(|joined| joined.saturating_add(self.invited.unwrap_or(0)))
    }

    fn apply_state(&mut self, event: &Value) {
        let content = &event["content"];
        match event["type"].as_str() {
            Some("m.room.name") => {
                self.name = content["name"]
                    .as_str()
                    .filter(|n| !n.is_empty())
                    .map(str::to_owned);
            }
            Some("m.room.canonical_alias") => {
                self.alias = content["alias"]
                    .as_str()
                    .filter(|a| !a.is_empty())
                    .map(str::to_owned);
            }
            Some("m.room.encryption") => self.encrypted = true,
            _ => {}
        }
    }
}

/// A streamed answer being shown as one message.
#[derive(Debug, Default)]
struct Stream {
    text: String,
    event_id: Option<String>,
    last_edit: Option<Instant>,
    last_delta: Option<Instant>,
}

/// What a failed API call said: Matrix's `errcode`, and the error the manager acts on.
#[derive(Debug)]
struct Refusal {
    errcode: String,
    error: ChannelError,
}

/// The transaction ids of one outbound message's events: `<base>.<n>` for its n-th event. A retry of a message
/// whose send failed gets the same base, so the homeserver returns the events it already has instead of posting
/// them twice.
#[derive(Debug)]
struct Txn {
    base: String,
    next: std::sync::atomic::AtomicU32,
}

impl Txn {
    fn new(base: String) -> Self {
        Self {
            base,
            next: std::sync::atomic::AtomicU32::new(0),
        }
    }

    fn next(&self) -> String {
        format!("{}.{}", self.base, self.next.fetch_add(1, Ordering::Relaxed))
    }
}

/// What identifies an outbound message across the manager's retries of it.
fn fingerprint(msg: &OutboundMessage) -> u64 {
    use std::hash::{Hash as _, Hasher as _};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    msg.chat_id.hash(&mut h);
    msg.content.hash(&mut h);
    msg.media.hash(&mut h);
    msg.kind.name().hash(&mut h);
    if let OutboundKind::StreamDelta { stream_id } | OutboundKind::StreamEnd { stream_id } = &msg.kind {
        stream_id.hash(&mut h);
    }
    serde_json::to_string(&msg.metadata)
        .unwrap_or_default()
        .hash(&mut h);
    h.finish()
}

/// The Matrix channel. See the [crate docs](crate).
pub struct MatrixChannel {
    settings: MatrixSettings,
    access: AccessControl,
    pairing: bool,
    media_dir: PathBuf,
    /// `<data dir>/matrix-store`: 0.3.5's `session.json`.
    store_dir: PathBuf,
    transcriber: Option<Arc<dyn Transcribe>>,
    http: Mutex<Option<reqwest::Client>>,
    session: Mutex<Option<Session>>,
    /// The sync position, kept across reconnections so nothing sent meanwhile is missed.
    since: Mutex<Option<String>>,
    /// When the channel first ran: older events are history, not messages to answer.
    started_ms: OnceLock<u64>,
    rooms: Mutex<HashMap<String, Room>>,
    seen: RecentIds,
    /// Rooms told that encrypted messages cannot be read (once each).
    told_encrypted: Mutex<HashSet<String>>,
    streams: tokio::sync::Mutex<HashMap<String, Stream>>,
    typing: Mutex<HashMap<String, tokio::task::AbortHandle>>,
    /// The server's upload limit (`m.upload.size`), asked once.
    upload_limit: tokio::sync::OnceCell<Option<u64>>,
    txn: AtomicU64,
    /// Transaction ids of sends that failed, by what was sent: a retry reuses them.
    failed_sends: Mutex<HashMap<u64, (String, Instant)>>,
    /// When the bot last joined a stranger's direct chat.
    stranger_joins: Mutex<std::collections::VecDeque<Instant>>,
    heartbeat: Heartbeat,
    syncs: watch::Sender<u64>,
    runs: watch::Sender<u64>,
}

impl std::fmt::Debug for MatrixChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MatrixChannel")
            .field("settings", &self.settings)
            .field("media_dir", &self.media_dir)
            .field("store_dir", &self.store_dir)
            .finish_non_exhaustive()
    }
}

impl MatrixChannel {
    /// A channel with these settings that keeps its session in `<data_dir>/matrix-store/` (as 0.3.5) and received
    /// files in `<media_root>/matrix/`. Without [`with_pairing`](Self::with_pairing), strangers are ignored.
    pub fn new(settings: MatrixSettings, data_dir: impl AsRef<Path>, media_root: impl AsRef<Path>) -> Self {
        let access = AccessControl::new(
            NAME,
            AllowList::new(&settings.allow_from),
            GroupPolicy::Open,
            None,
        );
        Self {
            access,
            pairing: false,
            media_dir: media_root.as_ref().join(NAME),
            store_dir: data_dir.as_ref().join("matrix-store"),
            transcriber: None,
            http: Mutex::default(),
            session: Mutex::default(),
            since: Mutex::default(),
            started_ms: OnceLock::new(),
            rooms: Mutex::default(),
            seen: RecentIds::new(REMEMBERED_EVENTS),
            told_encrypted: Mutex::default(),
            streams: tokio::sync::Mutex::default(),
            typing: Mutex::default(),
            upload_limit: tokio::sync::OnceCell::new(),
            txn: AtomicU64::new(0),
            failed_sends: Mutex::default(),
            stranger_joins: Mutex::default(),
            heartbeat: Heartbeat::new(),
            syncs: watch::Sender::new(0),
            runs: watch::Sender::new(0),
            settings,
        }
    }

    /// Issues pairing codes through `store` to strangers writing in a direct chat, and joins the direct chats
    /// strangers invite the bot to (so they can ask).
    #[must_use]
    pub fn with_pairing(mut self, store: Arc<PairingStore>) -> Self {
        self.access = AccessControl::new(
            NAME,
            AllowList::new(&self.settings.allow_from),
            GroupPolicy::Open,
            Some(store),
        );
        self.pairing = true;
        self
    }

    /// Turns received audio into text with `transcriber` (as `[transcription: …]`).
    #[must_use]
    pub fn with_transcriber(mut self, transcriber: Arc<dyn Transcribe>) -> Self {
        self.transcriber = Some(transcriber);
        self
    }

    /// Counts the syncs the channel finished: a test waits for the first before it writes.
    pub fn syncs(&self) -> watch::Receiver<u64> {
        self.syncs.subscribe()
    }

    /// Counts the times the manager started the channel (a test waits for a restart).
    pub fn runs(&self) -> watch::Receiver<u64> {
        self.runs.subscribe()
    }

    /// Where 0.3.5 keeps the password login's session (`<data dir>/matrix-store/session.json`).
    pub fn session_file(&self) -> PathBuf {
        self.store_dir.join("session.json")
    }

    fn client(&self) -> Result<reqwest::Client, ChannelError> {
        if let Some(c) = lock(&self.http).clone() {
            return Ok(c);
        }
        let proxy = match &self.settings.proxy {
            Some(url) => Some(
                reqwest::Proxy::all(url.expose()).map_err(|_| ChannelError::Config {
                    channel: NAME.into(),
                    message: format!("channels.{NAME}.proxy is not a proxy URL"),
                })?,
            ),
            None => None,
        };
        let built = nanobot_channels::api_client(NAME, |b| {
            let b = b.timeout(API_TIMEOUT).redirect(reqwest::redirect::Policy::none());
            match proxy {
                Some(p) => b.proxy(p),
                None => b,
            }
        })?;
        *lock(&self.http) = Some(built.clone());
        Ok(built)
    }

    fn secrets(&self) -> Vec<String> {
        let mut s = Vec::new();
        match &self.settings.login {
            Login::Password(p) => s.push(p.expose().to_owned()),
            Login::Token { access_token, .. } => s.push(access_token.expose().to_owned()),
        }
        if let Some(session) = lock(&self.session).as_ref() {
            s.push(session.token.expose().to_owned());
        }
        s
    }

    /// A failed answer as the error the manager acts on (the server's message cleaned of credentials).
    async fn refusal(&self, what: &str, resp: reqwest::Response) -> Refusal {
        let status = resp.status().as_u16();
        let retry_header = resp
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let body = nanobot_channels::download::read_json(resp).await;
        // Only a code of Matrix's shape is kept: a server's own text goes through `server_text`.
        let errcode = body["errcode"]
            .as_str()
            .filter(|c| {
                c.len() <= 64
                    && c.starts_with("M_")
                    && c.bytes()
                        .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
            })
            .unwrap_or_default()
            .to_owned();
        let secrets = self.secrets();
        let secrets: Vec<&str> = secrets.iter().map(String::as_str).collect();
        let said = server_text(body["error"].as_str().unwrap_or_default(), &secrets);
        let text = format!("{what}: HTTP {status} {errcode} {said}");
        let soft_logout = body["soft_logout"] == true;
        let error = match (status, errcode.as_str()) {
            (_, "M_UNKNOWN_TOKEN" | "M_MISSING_TOKEN") | (401, _) => ChannelError::auth(
                NAME,
                format!(
                    "{text}{} (check channels.matrix's password or accessToken)",
                    if soft_logout { " (soft logout)" } else { "" }
                ),
            ),
            (429, _) | (_, "M_LIMIT_EXCEEDED") => ChannelError::RateLimited {
                channel: NAME.into(),
                retry_after: body["retry_after_ms"]
                    .as_u64()
                    .map(Duration::from_millis)
                    .or(retry_header),
            },
            (500.., _) => transient(text),
            _ => ChannelError::rejected(NAME, text),
        };
        Refusal { errcode, error }
    }

    /// One client-server API call with the session's token; the JSON answer, or what the server refused.
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
        bound: Duration,
    ) -> Result<Value, Refusal> {
        let network = |e: reqwest::Error| Refusal {
            errcode: String::new(),
            error: transient(format!(
                "{}: {}",
                path.split('?').next().unwrap_or(path),
                e.without_url()
            )),
        };
        let client = self.client().map_err(|error| Refusal {
            errcode: String::new(),
            error,
        })?;
        let mut request = client
            .request(method, format!("{}{path}", self.settings.homeserver))
            .timeout(bound);
        if let Some(session) = lock(&self.session).as_ref() {
            request = request.bearer_auth(session.token.expose());
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let resp = request.send().await.map_err(network)?;
        if !resp.status().is_success() {
            let what = path.split('?').next().unwrap_or(path).to_owned();
            return Err(self.refusal(&what, resp).await);
        }
        Ok(nanobot_channels::download::read_json(resp).await)
    }

    async fn api(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, ChannelError> {
        self.call(method, path, body, API_TIMEOUT)
            .await
            .map_err(|r| r.error)
    }

    /// The session 0.3.5 saved for the password login, if it is there and readable.
    fn saved_session(&self) -> Option<Session> {
        let path = self.session_file();
        let text = match nanobot_util::read_to_string_bounded(&path, MAX_SESSION_FILE) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "matrix: the saved session is unreadable; logging in");
                return None;
            }
        };
        let v: Value = match serde_json::from_str(&text) {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "matrix: the saved session is not JSON; logging in");
                return None;
            }
        };
        match (v["access_token"].as_str(), v["device_id"].as_str()) {
            (Some(token), Some(device)) if !token.is_empty() && !device.is_empty() => Some(Session {
                token: Secret::new(token),
                device_id: device.to_owned(),
                saved: true,
            }),
            _ => {
                tracing::warn!(file = %path.display(), "matrix: the saved session has no access_token/device_id; logging in");
                None
            }
        }
    }

    /// A password login as a new device; the session is saved where 0.3.5 keeps it.
    async fn password_login(&self, password: &Secret) -> Result<Session, ChannelError> {
        *lock(&self.session) = None;
        let body = json!({
            "type": "m.login.password",
            "identifier": {"type": "m.id.user", "user": self.settings.user_id},
            "password": password.expose(),
            "initial_device_display_name": "nanobot",
        });
        let answer = self
            .call(
                reqwest::Method::POST,
                "/_matrix/client/v3/login",
                Some(&body),
                API_TIMEOUT,
            )
            .await
            .map_err(|r| match r.errcode.as_str() {
                "M_FORBIDDEN" | "M_USER_DEACTIVATED" => ChannelError::auth(
                    NAME,
                    format!(
                        "the homeserver refused the login of {} ({}): check channels.matrix.password",
                        self.settings.user_id, r.errcode
                    ),
                ),
                _ => r.error,
            })?;
        let (Some(token), Some(device)) = (answer["access_token"].as_str(), answer["device_id"].as_str())
        else {
            return Err(transient("the login answer has no access_token/device_id"));
        };
        let session = Session {
            token: Secret::new(token),
            device_id: device.to_owned(),
            saved: false,
        };
        let file = json!({"access_token": token, "device_id": device});
        let written = std::fs::create_dir_all(&self.store_dir).and_then(|()| {
            let text = serde_json::to_string_pretty(&file).unwrap_or_default();
            nanobot_util::write_atomic(&self.session_file(), text.as_bytes()).map_err(Into::into)
        });
        match written {
            Ok(()) => {
                tracing::info!(file = %self.session_file().display(), "matrix: logged in; session saved")
            }
            Err(e) => tracing::warn!(error = %e, "matrix: logged in, but the session could not be saved"),
        }
        Ok(session)
    }

    /// Checks the session's token with `whoami`: it must be the configured user's.
    async fn whoami(&self, session: &Session) -> Result<(), ChannelError> {
        *lock(&self.session) = Some(session.clone());
        let me = self
            .api(reqwest::Method::GET, "/_matrix/client/v3/account/whoami", None)
            .await;
        let me = match me {
            Ok(me) => me,
            Err(e) => {
                *lock(&self.session) = None;
                return Err(e);
            }
        };
        let user = me["user_id"].as_str().unwrap_or_default();
        if user != self.settings.user_id {
            *lock(&self.session) = None;
            return Err(ChannelError::Config {
                channel: NAME.into(),
                message: format!(
                    "the access token belongs to {user:?}, not to channels.matrix.userId {:?}",
                    self.settings.user_id
                ),
            });
        }
        Ok(())
    }

    /// The session to sync with: the one in use, the configured token, the saved one or a new password login.
    async fn ensure_session(&self) -> Result<(), ChannelError> {
        if lock(&self.session).is_some() {
            return Ok(());
        }
        match &self.settings.login {
            Login::Token {
                access_token,
                device_id,
            } => {
                let session = Session {
                    token: access_token.clone(),
                    device_id: device_id.clone(),
                    saved: false,
                };
                self.whoami(&session).await
            }
            Login::Password(password) => {
                if let Some(saved) = self.saved_session() {
                    match self.whoami(&saved).await {
                        Ok(()) => {
                            tracing::info!(device = %saved.device_id, "matrix: using the saved session");
                            return Ok(());
                        }
                        Err(ChannelError::Auth { .. }) => {
                            tracing::warn!("matrix: the saved session was refused; logging in again");
                        }
                        Err(ChannelError::Config { .. }) => {
                            tracing::warn!(
                                "matrix: the saved session is another account's; logging in again"
                            );
                        }
                        Err(e) => return Err(e),
                    }
                }
                let session = self.password_login(password).await?;
                self.whoami(&session).await
            }
        }
    }

    fn me(&self) -> &str {
        &self.settings.user_id
    }

    /// One sync: the answer, or what went wrong. A refused saved session is replaced by a password login.
    async fn sync(&self, since: Option<&str>) -> Result<Value, ChannelError> {
        let mut path = format!(
            "/_matrix/client/v3/sync?timeout={}&filter={}",
            if since.is_some() { SYNC_TIMEOUT_MS } else { 0 },
            enc(SYNC_FILTER)
        );
        match since {
            Some(s) => path.push_str(&format!("&since={}", enc(s))),
            None => path.push_str("&full_state=true"),
        }
        match self.call(reqwest::Method::GET, &path, None, SYNC_BOUND).await {
            Ok(v) => Ok(v),
            Err(r) if matches!(r.error, ChannelError::Auth { .. }) => {
                let saved = lock(&self.session)
                    .as_ref()
                    .is_some_and(|s| s.saved || !matches!(self.settings.login, Login::Token { .. }));
                *lock(&self.session) = None;
                if saved && let Login::Password(password) = &self.settings.login {
                    tracing::warn!(errcode = %r.errcode, "matrix: the session was logged out; logging in again");
                    let session = self.password_login(password).await?;
                    self.whoami(&session).await?;
                    return Err(transient("the session was replaced; syncing again"));
                }
                Err(r.error)
            }
            Err(r) => Err(r.error),
        }
    }

    /// The server's upload limit, asked once (`None`: it did not say).
    async fn server_upload_limit(&self) -> Option<u64> {
        *self
            .upload_limit
            .get_or_init(|| async {
                match self
                    .api(reqwest::Method::GET, "/_matrix/client/v1/media/config", None)
                    .await
                {
                    Ok(v) => v["m.upload.size"].as_u64().filter(|n| *n > 0),
                    Err(e) => {
                        tracing::debug!(error = %e, "matrix: the server's upload limit is unknown");
                        None
                    }
                }
            })
            .await
    }

    /// min(`maxMediaBytes`, the server's limit); `0` refuses every file.
    async fn media_limit(&self) -> u64 {
        let local = self.settings.max_media_bytes;
        match self.server_upload_limit().await {
            Some(server) if local > 0 => local.min(server),
            _ => local,
        }
    }

    /// A room with at most two members (joined and invited) is a direct chat, as 0.3.5 counts. Without the
    /// server's count (a homeserver that sends no room summary), the joined members are asked for once.
    async fn room_is_direct(&self, room: &str) -> bool {
        let known = lock(&self.rooms).get(room).and_then(Room::member_count);
        let count = match known {
            Some(n) => n,
            None => match self.joined_members(room).await {
                Some(n) => {
                    lock(&self.rooms).entry(room.to_owned()).or_default().joined = Some(n);
                    n
                }
                // Unknown: a room, so that its policy applies.
                None => u64::MAX,
            },
        };
        count <= 2
    }

    /// How many members have joined `room` (`None`: the server did not say).
    async fn joined_members(&self, room: &str) -> Option<u64> {
        let path = format!("/_matrix/client/v3/rooms/{}/joined_members", enc(room));
        match self.api(reqwest::Method::GET, &path, None).await {
            Ok(v) => v["joined"].as_object().map(|m| m.len() as u64),
            Err(e) => {
                tracing::warn!(%room, error = %e, "matrix: the room's members could not be counted");
                None
            }
        }
    }

    /// Whether `room` is encrypted: from the sync, or (a room the sync has not shown yet, as after a restart) asked
    /// of the server once.
    async fn room_is_encrypted(&self, room: &str) -> Result<bool, ChannelError> {
        if let Some(r) = lock(&self.rooms).get(room) {
            return Ok(r.encrypted);
        }
        let path = format!("/_matrix/client/v3/rooms/{}/state/m.room.encryption/", enc(room));
        let encrypted = match self.call(reqwest::Method::GET, &path, None, API_TIMEOUT).await {
            Ok(_) => true,
            Err(r) if r.errcode == "M_NOT_FOUND" => false,
            Err(r) => return Err(r.error),
        };
        lock(&self.rooms).entry(room.to_owned()).or_default().encrypted = encrypted;
        Ok(encrypted)
    }

    fn room_name(&self, room: &str) -> String {
        lock(&self.rooms)
            .get(room)
            .and_then(|r| r.name.clone().or_else(|| r.alias.clone()))
            .unwrap_or_else(|| room.to_owned())
    }

    /// Sends one event's content to a room; its event id.
    async fn put_event(
        &self,
        room: &str,
        kind: &str,
        content: &Value,
        txn: &Txn,
    ) -> Result<String, ChannelError> {
        let txn = enc(&txn.next());
        let path = format!("/_matrix/client/v3/rooms/{}/send/{kind}/{txn}", enc(room));
        let answer = self.api(reqwest::Method::PUT, &path, Some(content)).await?;
        Ok(answer["event_id"].as_str().unwrap_or_default().to_owned())
    }

    /// Sends a room message, as plain text when the HTML would make it too large.
    /// Transaction ids of their own for one message.
    fn fresh_txn(&self) -> Txn {
        Txn::new(format!(
            "nanobot.{}.{}",
            self.started_ms.get().copied().unwrap_or_else(now_ms),
            self.txn.fetch_add(1, Ordering::Relaxed)
        ))
    }

    /// The transaction ids for `msg`: those of its failed send when this is a retry of it.
    fn txn_for(&self, msg: &OutboundMessage) -> (u64, Txn) {
        let fp = fingerprint(msg);
        let mut failed = lock(&self.failed_sends);
        failed.retain(|_, (_, at)| at.elapsed() < FAILED_SEND_MEMORY);
        match failed.get(&fp) {
            Some((base, _)) => (fp, Txn::new(base.clone())),
            None => (fp, self.fresh_txn()),
        }
    }

    /// Remembers (failed) or forgets (sent) the transaction ids of `msg`.
    fn settle_txn(&self, fp: u64, txn: &Txn, sent: bool) {
        let mut failed = lock(&self.failed_sends);
        if sent {
            failed.remove(&fp);
        } else {
            failed.insert(fp, (txn.base.clone(), Instant::now()));
        }
    }

    async fn send_content(&self, room: &str, mut content: Value, txn: &Txn) -> Result<String, ChannelError> {
        if serde_json::to_vec(&content).map_or(0, |v| v.len()) > MAX_CONTENT_BYTES
            && let Some(map) = content.as_object_mut()
        {
            map.remove("format");
            map.remove("formatted_body");
            if let Some(new) = map.get_mut("m.new_content").and_then(Value::as_object_mut) {
                new.remove("format");
                new.remove("formatted_body");
            }
        }
        self.put_event(room, "m.room.message", &content, txn).await
    }

    fn typing_path(&self, room: &str) -> String {
        format!("/_matrix/client/v3/rooms/{}/typing/{}", enc(room), enc(self.me()))
    }

    async fn set_typing(&self, room: &str, on: bool) {
        let body = if on {
            json!({"typing": true, "timeout": TYPING_TIMEOUT_MS})
        } else {
            json!({"typing": false})
        };
        if let Err(e) = self
            .api(reqwest::Method::PUT, &self.typing_path(room), Some(&body))
            .await
        {
            tracing::debug!(error = %e, "matrix: typing notice not changed");
        }
    }

    /// Shows "typing…" in `room` until the answer is sent (renewed every 20 s, at most [`TYPING_MAX`]).
    async fn start_typing(&self, room: &str) {
        self.set_typing(room, true).await;
        let (Ok(client), Some(token)) = (
            self.client(),
            lock(&self.session).as_ref().map(|s| s.token.clone()),
        ) else {
            return;
        };
        let url = format!("{}{}", self.settings.homeserver, self.typing_path(room));
        let task = tokio::spawn(async move {
            let until = Instant::now() + TYPING_MAX;
            while Instant::now() + TYPING_KEEPALIVE < until {
                tokio::time::sleep(TYPING_KEEPALIVE).await;
                let renewed = client
                    .put(&url)
                    .bearer_auth(token.expose())
                    .json(&json!({"typing": true, "timeout": TYPING_TIMEOUT_MS}))
                    .send()
                    .await;
                if let Err(e) = renewed {
                    tracing::debug!(error = %e.without_url(), "matrix: typing notice not renewed");
                }
            }
        });
        if let Some(old) = lock(&self.typing).insert(room.to_owned(), task.abort_handle()) {
            old.abort();
        }
    }

    async fn stop_typing(&self, room: &str) {
        let task = lock(&self.typing).remove(room);
        if let Some(task) = task {
            task.abort();
            self.set_typing(room, false).await;
        }
    }

    /// Joins a room the bot was invited to (with the `{}` body some servers need); whether it did.
    async fn join(&self, room: &str) -> bool {
        let path = format!("/_matrix/client/v3/join/{}", enc(room));
        match self.api(reqwest::Method::POST, &path, Some(&json!({}))).await {
            Ok(_) => {
                tracing::info!(%room, "matrix: joined a room it was invited to");
                true
            }
            Err(e) => {
                tracing::warn!(%room, error = %e, "matrix: could not join a room it was invited to");
                false
            }
        }
    }

    async fn leave(&self, room: &str) {
        let path = format!("/_matrix/client/v3/rooms/{}/leave", enc(room));
        if let Err(e) = self.api(reqwest::Method::POST, &path, Some(&json!({}))).await {
            tracing::warn!(%room, error = %e, "matrix: could not leave a room");
        }
    }

    /// Whether another stranger's direct chat may be joined this hour ([`STRANGER_JOINS_PER_HOUR`]).
    fn stranger_may_join(&self) -> bool {
        let mut joins = lock(&self.stranger_joins);
        while joins
            .front()
            .is_some_and(|t| t.elapsed() > Duration::from_secs(3600))
        {
            joins.pop_front();
        }
        if joins.len() >= STRANGER_JOINS_PER_HOUR {
            tracing::warn!("matrix: too many strangers' invites this hour; not joining another");
            return false;
        }
        joins.push_back(Instant::now());
        true
    }

    /// Invites: joined when the inviter may talk to the bot, or (with pairing) when a stranger invites it to a
    /// direct chat.
    async fn handle_invites(&self, invites: &serde_json::Map<String, Value>) {
        for (room, invite) in invites {
            let events = invite["invite_state"]["events"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let Some(me) = events.iter().find(|e| {
                e["type"] == "m.room.member"
                    && e["state_key"].as_str() == Some(self.me())
                    && e["content"]["membership"] == "invite"
            }) else {
                continue;
            };
            let inviter = me["sender"].as_str().unwrap_or_default();
            let direct = me["content"]["is_direct"] == true;
            if self.access.is_allowed(inviter) {
                self.join(room).await;
            } else if direct && self.pairing && self.stranger_may_join() {
                // A stranger's "direct" chat (the inviter says so) is joined so they can ask for pairing, and left
                // at once when it has more than two members.
                if self.join(room).await {
                    let members = self.joined_members(room).await;
                    if members.is_none_or(|n| n > 2) {
                        tracing::info!(%room, %inviter, "matrix: a stranger's \"direct\" chat is a room; leaving it");
                        self.leave(room).await;
                    }
                }
            } else {
                tracing::info!(%room, %inviter, "matrix: an invite from a stranger was not accepted");
            }
        }
    }

    /// Tells an allowed sender, once per room, that encrypted messages cannot be read.
    async fn encrypted_message(&self, room: &str, sender: &str) {
        if !self.access.is_allowed(sender) || !lock(&self.told_encrypted).insert(room.to_owned()) {
            return;
        }
        tracing::warn!(%room, "matrix: an encrypted message was not read: nanobot-rs has no end-to-end encryption");
        let notice = json!({
            "msgtype": "m.notice",
            "body": "I cannot read encrypted messages: this bot has no end-to-end encryption. Talk to me in an \
                     unencrypted room.",
            "m.mentions": {},
        });
        if let Err(e) = self
            .put_event(room, "m.room.message", &notice, &self.fresh_txn())
            .await
        {
            tracing::warn!(error = %e, "matrix: could not say that encrypted messages are unreadable");
        }
    }

    /// Whether a room message passes `groupPolicy` (direct chats always do).
    fn room_takes(&self, room: &str, content: &Value) -> bool {
        match self.settings.group_policy {
            RoomPolicy::Open => true,
            RoomPolicy::Allowlist => self.settings.group_allow_from.iter().any(|r| r == room),
            RoomPolicy::Mention => {
                let mentions = &content["m.mentions"];
                mentions["user_ids"]
                    .as_array()
                    .is_some_and(|ids| ids.iter().any(|id| id.as_str() == Some(self.me())))
                    || (self.settings.allow_room_mentions && mentions["room"] == true)
            }
        }
    }

    /// Saves the file of a media message; `(attachment, marker)` as 0.3.5 has them.
    async fn fetch_media(&self, event_id: &str, content: &Value) -> (Option<Value>, String) {
        let msgtype = content["msgtype"].as_str().unwrap_or_default();
        let kind = match msgtype {
            "m.image" => "image",
            "m.audio" => "audio",
            "m.video" => "video",
            _ => "file",
        };
        let body_name = content["filename"]
            .as_str()
            .or(content["body"].as_str())
            .map(|b| {
                Path::new(b.trim())
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
            })
            .unwrap_or_default()
            .filter(|n| !n.is_empty())
            .map(|n| safe_file_name(&n));
        let filename =
            body_name.unwrap_or_else(|| if kind == "file" { "attachment" } else { kind }.to_owned());
        let mime = content["info"]["mimetype"].as_str().filter(|m| !m.is_empty());
        let Some(url) = content["url"].as_str().filter(|u| u.starts_with("mxc://")) else {
            // An encrypted file's key comes with an encrypted event, which is never read here.
            return (None, marker(&filename, Some("download failed")));
        };
        let limit = self.media_limit().await;
        let declared = content["info"]["size"].as_u64();
        if declared.is_none_or(|n| n > limit) || limit == 0 {
            return (None, marker(&filename, Some("too large")));
        }
        let Some((server, media_id)) = url["mxc://".len()..].split_once('/') else {
            return (None, marker(&filename, Some("download failed")));
        };
        let (mut stem, mut suffix) = match filename.rsplit_once('.') {
            Some((s, e)) if !s.is_empty() => (s.to_owned(), format!(".{e}")),
            _ => (filename.clone(), String::new()),
        };
        if suffix.is_empty()
            && let Some(ext) = mime.and_then(extension_for_mime)
        {
            suffix = format!(".{ext}");
        }
        stem = stem.chars().take(72).collect();
        suffix = suffix.chars().take(16).collect();
        let prefix: String = safe_file_name(event_id.trim_start_matches('$'))
            .chars()
            .take(24)
            .collect();
        let dest = self
            .media_dir
            .join(format!("{}_{stem}{suffix}", prefix.trim_matches('_')));
        let saved = async {
            tokio::fs::create_dir_all(&self.media_dir)
                .await
                .map_err(|source| ChannelError::Io {
                    path: self.media_dir.display().to_string(),
                    source,
                })?;
            let client = self.client()?;
            let token = lock(&self.session).as_ref().map(|s| s.token.clone());
            let mut last = None;
            for path in [
                format!(
                    "/_matrix/client/v1/media/download/{}/{}?allow_remote=true",
                    enc(server),
                    enc(media_id)
                ),
                format!(
                    "/_matrix/media/v3/download/{}/{}?allow_remote=true",
                    enc(server),
                    enc(media_id)
                ),
            ] {
                let mut request = client
                    .get(format!("{}{path}", self.settings.homeserver))
                    .timeout(Duration::from_secs(300));
                if let Some(token) = &token {
                    request = request.bearer_auth(token.expose());
                }
                let resp = request
                    .send()
                    .await
                    .map_err(|e| transient(format!("media download: {}", e.without_url())))?;
                // A server without authenticated media (Matrix 1.11) answers the new path with 404 or 405.
                if matches!(resp.status().as_u16(), 404 | 405) && last.is_none() {
                    last = Some(resp.status());
                    continue;
                }
                if !resp.status().is_success() {
                    return Err(self.refusal("media download", resp).await.error);
                }
                return nanobot_channels::download::save_body(NAME, "attachment", resp, &dest, limit).await;
            }
            Err(transient(format!(
                "media download: HTTP {}",
                last.map_or(0, |s| s.as_u16())
            )))
        }
        .await;
        match saved {
            Ok(size) => {
                let path = dest.display().to_string();
                let attachment = json!({
                    "type": kind, "mime": mime, "filename": filename, "event_id": event_id,
                    "encrypted": false, "size_bytes": size, "path": path, "mxc_url": url,
                });
                (Some(attachment), marker(&path, None))
            }
            Err(e) if e.is_too_large() => (None, marker(&filename, Some("too large"))),
            Err(e) => {
                tracing::warn!(error = %e, "matrix: an attachment was not downloaded");
                (None, marker(&filename, Some("download failed")))
            }
        }
    }

    /// One room message, checked (access, policy) and made ready for the bus (its file fetched); `None` when it
    /// is not for the agent (a stranger's pairing reply is sent here).
    async fn prepare_message(
        &self,
        room: &str,
        event: &Value,
    ) -> Result<Option<InboundMessage>, ChannelError> {
        let content = &event["content"];
        let sender = event["sender"].as_str().unwrap_or_default();
        let event_id = event["event_id"].as_str().unwrap_or_default();
        let msgtype = content["msgtype"].as_str().unwrap_or_default();
        let is_media = matches!(msgtype, "m.image" | "m.audio" | "m.video" | "m.file");
        if msgtype != "m.text" && !is_media {
            return Ok(None); // notices (other bots), emotes, locations…
        }
        if content["m.relates_to"]["rel_type"] == "m.replace" {
            return Ok(None); // an edit of an earlier message
        }
        let body = content["body"].as_str().unwrap_or_default();
        let direct = self.room_is_direct(room).await;
        let decision = self.access.check(&InboundContext {
            sender_id: sender,
            chat_id: room,
            is_group: !direct,
            mentioned: true,
            text: body,
        })?;
        match decision {
            AccessDecision::Allow => {}
            AccessDecision::PairingRequired(request) => {
                let text = AccessControl::pairing_message(&request);
                return self
                    .send_text(room, &text, None, &self.fresh_txn())
                    .await
                    .map(|_| None);
            }
            AccessDecision::Handled { reply } => {
                return self
                    .send_text(room, &reply, None, &self.fresh_txn())
                    .await
                    .map(|_| None);
            }
            _ => return Ok(None),
        }
        if !direct && !self.room_takes(room, content) {
            return Ok(None);
        }
        let mut metadata = serde_json::Map::new();
        metadata.insert(META_ROOM.into(), json!(self.room_name(room)));
        if !event_id.is_empty() {
            metadata.insert(META_EVENT_ID.into(), json!(event_id));
        }
        let relation = &content["m.relates_to"];
        let thread_root = (relation["rel_type"] == "m.thread")
            .then(|| relation["event_id"].as_str())
            .flatten()
            .filter(|r| !r.is_empty());
        if let Some(root) = thread_root {
            metadata.insert(META_THREAD_ROOT.into(), json!(root));
            if !event_id.is_empty() {
                metadata.insert(META_THREAD_REPLY_TO.into(), json!(event_id));
            }
        }
        let mut text = body.to_owned();
        let mut media = Vec::new();
        if is_media {
            let (attachment, marker) = self.fetch_media(event_id, content).await;
            let mut parts: Vec<String> = Vec::new();
            if !body.trim().is_empty() {
                parts.push(body.trim().to_owned());
            }
            let mut said = marker;
            if let Some(a) = &attachment {
                let path = a["path"].as_str().unwrap_or_default().to_owned();
                if a["type"] == "audio"
                    && let Some(t) = &self.transcriber
                {
                    match t.transcribe(Path::new(&path)).await {
                        Ok(words) if !words.trim().is_empty() => {
                            said = format!("[transcription: {}]", words.trim())
                        }
                        Ok(_) => {}
                        Err(e) => tracing::warn!(error = %e, "matrix: an audio message was not transcribed"),
                    }
                }
                media.push(path);
            }
            parts.push(said);
            text = parts.join("\n");
            metadata.insert(
                META_ATTACHMENTS.into(),
                json!(attachment.into_iter().collect::<Vec<_>>()),
            );
        }
        let mut inbound = InboundMessage::new(NAME, sender, room, text)
            .with_streaming(self.settings.streaming)
            .with_metadata(nanobot_bus::META_IS_GROUP, !direct);
        for (k, v) in metadata {
            inbound = inbound.with_metadata(k, v);
        }
        if let Some(root) = thread_root {
            inbound = inbound.with_session_key(format!("{NAME}:{room}:thread:{root}"));
        }
        inbound.media = media;
        Ok(Some(inbound))
    }

    /// One timeline event: a message made ready for the bus, or an encrypted one answered with the notice.
    async fn prepare(&self, room: &str, event: &Value) -> Result<Option<InboundMessage>, ChannelError> {
        match event["type"].as_str() {
            Some("m.room.message") => self.prepare_message(room, event).await,
            Some("m.room.encrypted") => {
                self.encrypted_message(room, event["sender"].as_str().unwrap_or_default())
                    .await;
                Ok(None)
            }
            _ => Ok(None),
        }
    }

    /// The events of `room` before a sync's timeline when the server left a gap (`limited`), oldest first: back
    /// from `from` until the channel's start or an event already handled, at most [`BACKFILL_PAGES`] pages.
    async fn backfill(&self, room: &str, from: &str) -> Vec<Value> {
        let started = self.started_ms.get().copied().unwrap_or(0);
        let mut older = Vec::new();
        let mut from = from.to_owned();
        'pages: for _ in 0..BACKFILL_PAGES {
            let path = format!(
                "/_matrix/client/v3/rooms/{}/messages?dir=b&limit=100&from={}",
                enc(room),
                enc(&from)
            );
            let page = match self.api(reqwest::Method::GET, &path, None).await {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!(%room, error = %e, "matrix: the messages missed in a gap could not be fetched");
                    break;
                }
            };
            let chunk = page["chunk"].as_array().cloned().unwrap_or_default();
            for event in chunk {
                let id = event["event_id"].as_str().unwrap_or_default();
                if event["origin_server_ts"].as_u64().unwrap_or(0) < started || self.seen.contains(id) {
                    break 'pages;
                }
                older.push(event);
            }
            match page["end"].as_str() {
                Some(end) if end != from => from = end.to_owned(),
                _ => break,
            }
        }
        older.reverse();
        older
    }

    /// What one sync said: room state, invites, and the messages to answer. Messages are made ready (access,
    /// files) up to `maxConcurrentMediaDownloads` at once and published in their order; each is remembered as
    /// handled once published, so one cut short is handled when the sync is replayed.
    async fn handle_sync(
        &self,
        bus: &Arc<dyn Bus>,
        sync: &Value,
        gap_check: bool,
    ) -> Result<(), ChannelError> {
        let rooms = &sync["rooms"];
        if let Some(invites) = rooms["invite"].as_object() {
            self.handle_invites(invites).await;
        }
        if let Some(left) = rooms["leave"].as_object() {
            let mut known = lock(&self.rooms);
            for room in left.keys() {
                known.remove(room);
            }
        }
        let started = self.started_ms.get().copied().unwrap_or(0);
        let Some(joined) = rooms["join"].as_object() else {
            return Ok(());
        };
        let mut todo: Vec<(&str, Value)> = Vec::new();
        for (room_id, room) in joined {
            let mut timeline: Vec<Value> = room["timeline"]["events"].as_array().cloned().unwrap_or_default();
            {
                let mut known = lock(&self.rooms);
                let entry = known.entry(room_id.clone()).or_default();
                let summary = &room["summary"];
                if let Some(n) = summary["m.joined_member_count"].as_u64() {
                    entry.joined = Some(n);
                }
                if let Some(n) = summary["m.invited_member_count"].as_u64() {
                    entry.invited = Some(n);
                }
                for event in room["state"]["events"].as_array().into_iter().flatten() {
                    entry.apply_state(event);
                }
                for event in timeline.iter().filter(|e| e.get("state_key").is_some()) {
                    entry.apply_state(event);
                }
            }
            if gap_check
                && room["timeline"]["limited"] == true
                && let Some(prev) = room["timeline"]["prev_batch"].as_str()
            {
                let mut older = self.backfill(room_id, prev).await;
                older.append(&mut timeline);
                timeline = older;
            }
            for event in timeline {
                let sender = event["sender"].as_str().unwrap_or_default();
                let ts = event["origin_server_ts"].as_u64().unwrap_or(0);
                let id = event["event_id"].as_str().unwrap_or_default();
                if sender != self.me() && ts >= started && !self.seen.contains(id) {
                    todo.push((room_id.as_str(), event));
                }
            }
        }
        type Ready<'a> = std::pin::Pin<
            Box<dyn std::future::Future<Output = Result<Option<InboundMessage>, ChannelError>> + Send + 'a>,
        >;
        let futures: Vec<Ready<'_>> = todo
            .iter()
            .map(|(room, event)| -> Ready<'_> { Box::pin(self.prepare(room, event)) })
            .collect();
        let mut ready = futures::stream::iter(futures)
            .buffered(self.settings.max_concurrent_media_downloads)
            .zip(futures::stream::iter(todo.iter()))
            .map(|(result, (room, event))| (*room, event, result));
        while let Some((room, event, result)) = ready.next().await {
            match result {
                Ok(Some(inbound)) => {
                    self.start_typing(room).await;
                    if let Err(e) = bus.publish_inbound(inbound).await {
                        self.stop_typing(room).await;
                        return Err(e.into());
                    }
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(error = %e, "matrix: a message was not handled"),
            }
            self.seen.insert(event["event_id"].as_str().unwrap_or_default());
        }
        Ok(())
    }

    /// Syncs until `cancel` fires or something fails.
    async fn sync_loop(&self, bus: &Arc<dyn Bus>, cancel: &CancellationToken) -> Result<(), ChannelError> {
        tokio::select! {
            () = cancel.cancelled() => return Ok(()),
            r = self.ensure_session() => r?,
        }
        if self.settings.e2ee_enabled {
            tracing::warn!(
                "matrix: e2eeEnabled is on, but nanobot-rs has no end-to-end encryption: messages in encrypted \
                 rooms are not read (set channels.matrix.e2eeEnabled to false to silence this)"
            );
        }
        loop {
            let since = lock(&self.since).clone();
            let sync = tokio::select! {
                () = cancel.cancelled() => return Ok(()),
                s = self.sync(since.as_deref()) => s?,
            };
            self.heartbeat.beat();
            // The watchdog hears from the loop while a sync's messages are handled (files may take minutes).
            let beating = async {
                let mut tick = tokio::time::interval(Duration::from_secs(20));
                loop {
                    tick.tick().await;
                    self.heartbeat.beat();
                }
            };
            tokio::select! {
                r = self.handle_sync(bus, &sync, since.is_some()) => r?,
                () = beating => {}
            }
            if let Some(next) = sync["next_batch"].as_str() {
                *lock(&self.since) = Some(next.to_owned());
            }
            self.syncs.send_modify(|n| *n += 1);
        }
    }

    /// The thread an answer goes into, from the inbound message's metadata.
    fn thread_relation(msg: &OutboundMessage) -> Option<Value> {
        let root = msg
            .metadata
            .get(META_THREAD_ROOT)?
            .as_str()
            .filter(|r| !r.is_empty())?;
        let reply_to = [META_THREAD_REPLY_TO, META_EVENT_ID].iter().find_map(|k| {
            msg.metadata
                .get(*k)
                .and_then(Value::as_str)
                .filter(|r| !r.is_empty())
        })?;
        Some(json!({
            "rel_type": "m.thread", "event_id": root,
            "m.in_reply_to": {"event_id": reply_to}, "is_falling_back": true,
        }))
    }

    /// A text message's content: the Markdown as the body, its HTML when it has markup.
    fn text_content(text: &str, thread: Option<&Value>) -> Value {
        let mut content = json!({"msgtype": "m.text", "body": text, "m.mentions": {}});
        if let Some(html) = render_html(text) {
            content["format"] = json!(MATRIX_HTML_FORMAT);
            content["formatted_body"] = json!(html);
        }
        if let Some(t) = thread {
            content["m.relates_to"] = t.clone();
        }
        content
    }

    /// An edit of `event_id` to `text`: the new content with its HTML, and a fallback for clients without edits
    /// (`* ` before it, as the specification asks), cut to [`EDIT_FALLBACK_CHARS`] so the event stays within
    /// Matrix's size limit.
    fn edit_content(text: &str, event_id: &str) -> Value {
        let new = Self::text_content(text, None);
        let mut fallback: String = text.chars().take(EDIT_FALLBACK_CHARS).collect();
        if fallback.len() < text.len() {
            fallback.push('…');
        }
        let mut content = json!({"msgtype": "m.text", "body": format!("* {fallback}"), "m.mentions": {}});
        content["m.new_content"] = new;
        content["m.relates_to"] = json!({"rel_type": "m.replace", "event_id": event_id});
        content
    }

    /// Sends `text` split at [`MAX_MESSAGE_CHARS`]; the first message's event id.
    async fn send_text(
        &self,
        room: &str,
        text: &str,
        thread: Option<&Value>,
        txn: &Txn,
    ) -> Result<Option<String>, ChannelError> {
        let mut first = None;
        for piece in split_message(text, MAX_MESSAGE_CHARS) {
            let id = self
                .send_content(room, Self::text_content(&piece, thread), txn)
                .await?;
            first.get_or_insert(id);
        }
        Ok(first)
    }

    /// Uploads a local file and sends it as a media message; a marker for the text when it could not be.
    async fn send_file(
        &self,
        room: &str,
        path: &str,
        limit: u64,
        thread: Option<&Value>,
        txn: &Txn,
    ) -> Result<(), String> {
        let filename = Path::new(path)
            .file_name()
            .map(|n| safe_file_name(&n.to_string_lossy()))
            .unwrap_or_else(|| "attachment".to_owned());
        if limit == 0 {
            return Err(marker(&filename, Some("too large")));
        }
        let bytes = match read_attachment(Path::new(path), limit).await {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(error = %e, "matrix: a file was not sent");
                let problem = if matches!(e, AttachmentError::TooLarge { .. }) {
                    "too large"
                } else {
                    "upload failed"
                };
                return Err(marker(&filename, Some(problem)));
            }
        };
        let mime = mime_for_name(&filename);
        let size = bytes.len();
        let uploaded = async {
            let client = self.client()?;
            let token = lock(&self.session).as_ref().map(|s| s.token.clone());
            let mut request = client
                .post(format!(
                    "{}/_matrix/media/v3/upload?filename={}",
                    self.settings.homeserver,
                    enc(&filename)
                ))
                .header(reqwest::header::CONTENT_TYPE, mime)
                .timeout(Duration::from_secs(300))
                .body(bytes);
            if let Some(token) = &token {
                request = request.bearer_auth(token.expose());
            }
            let resp = request
                .send()
                .await
                .map_err(|e| transient(format!("upload: {}", e.without_url())))?;
            if !resp.status().is_success() {
                return Err(self.refusal("upload", resp).await.error);
            }
            let answer = nanobot_channels::download::read_json(resp).await;
            answer["content_uri"]
                .as_str()
                .filter(|u| u.starts_with("mxc://"))
                .map(str::to_owned)
                .ok_or_else(|| transient("upload: no content_uri in the answer"))
        }
        .await;
        let url = uploaded.map_err(|e| {
            tracing::warn!(error = %e, "matrix: a file was not uploaded");
            marker(&filename, Some("upload failed"))
        })?;
        let msgtype = match mime.split('/').next() {
            Some("image") => "m.image",
            Some("audio") => "m.audio",
            Some("video") => "m.video",
            _ => "m.file",
        };
        let mut content = json!({
            "msgtype": msgtype, "body": filename, "filename": filename,
            "info": {"mimetype": mime, "size": size}, "url": url, "m.mentions": {},
        });
        if let Some(t) = thread {
            content["m.relates_to"] = t.clone();
        }
        self.send_content(room, content, txn)
            .await
            .map(|_| ())
            .map_err(|e| {
                tracing::warn!(error = %e, "matrix: a file message was not sent");
                marker(&filename, Some("upload failed"))
            })
    }

    /// A reply: its files first (as 0.3.5), then the text with what could not be sent.
    async fn send_reply(&self, room: &str, msg: &OutboundMessage, txn: &Txn) -> Result<(), ChannelError> {
        let thread = Self::thread_relation(msg);
        let mut failures = Vec::new();
        if !msg.media.is_empty() {
            let limit = self.media_limit().await;
            let mut seen = HashSet::new();
            for path in msg.media.iter().map(|p| p.trim()).filter(|p| !p.is_empty()) {
                if seen.insert(path)
                    && let Err(m) = self.send_file(room, path, limit, thread.as_ref(), txn).await
                {
                    failures.push(m);
                }
            }
        }
        let mut text = msg.content.trim_end().to_owned();
        if !failures.is_empty() {
            if !text.trim().is_empty() {
                text.push('\n');
            }
            text.push_str(&failures.join("\n"));
        }
        if text.trim().is_empty() {
            return Ok(());
        }
        self.send_text(room, &text, thread.as_ref(), txn)
            .await
            .map(|_| ())
    }

    /// Extends a streamed answer: the first delta sends a message, later ones edit it at most every two seconds.
    /// Failures are logged, never returned: a retried delta would repeat text, and the stream's end repairs it.
    async fn stream_delta(&self, room: &str, stream_id: &str, delta: &str, thread: Option<&Value>) {
        let mut streams = self.streams.lock().await;
        // Streams whose end never came (a cancelled turn) are forgotten.
        streams.retain(|_, s| s.last_delta.is_none_or(|t| t.elapsed() < STREAM_IDLE));
        let state = streams.entry(format!("{room}\0{stream_id}")).or_default();
        state.text.push_str(delta);
        state.last_delta = Some(Instant::now());
        if state.text.trim().is_empty() {
            return;
        }
        let preview: String = state.text.chars().take(MAX_MESSAGE_CHARS).collect();
        match state.event_id.clone() {
            None => match self
                .send_content(room, Self::text_content(&preview, thread), &self.fresh_txn())
                .await
            {
                Ok(id) => {
                    state.event_id = Some(id);
                    state.last_edit = Some(Instant::now());
                }
                Err(e) => tracing::warn!(error = %e, "matrix: could not start a streamed message"),
            },
            Some(id) => {
                if state
                    .last_edit
                    .is_some_and(|t| t.elapsed() < STREAM_EDIT_INTERVAL)
                {
                    return;
                }
                match self
                    .send_content(room, Self::edit_content(&preview, &id), &self.fresh_txn())
                    .await
                {
                    Ok(_) => state.last_edit = Some(Instant::now()),
                    Err(e) => tracing::warn!(error = %e, "matrix: could not edit a streamed message"),
                }
            }
        }
    }

    /// Ends a streamed answer: its message is edited to the whole text (the rest, past the limit, follows). The
    /// stream is forgotten once that is done, so a retry after a failure edits the same message again.
    async fn stream_end(
        &self,
        room: &str,
        stream_id: &str,
        msg: &OutboundMessage,
        txn: &Txn,
    ) -> Result<(), ChannelError> {
        let key = format!("{room}\0{stream_id}");
        let event_id = self
            .streams
            .lock()
            .await
            .get(&key)
            .and_then(|s| s.event_id.clone());
        let Some(event_id) = event_id else {
            self.streams.lock().await.remove(&key);
            return self.send_reply(room, msg, txn).await;
        };
        let pieces = split_message(&msg.content, MAX_MESSAGE_CHARS);
        let mut rest = pieces.iter();
        if let Some(first) = rest.next() {
            self.send_content(room, Self::edit_content(first, &event_id), txn)
                .await?;
        }
        let thread = Self::thread_relation(msg);
        for piece in rest {
            self.send_content(room, Self::text_content(piece, thread.as_ref()), txn)
                .await?;
        }
        self.streams.lock().await.remove(&key);
        Ok(())
    }
}

impl Drop for MatrixChannel {
    fn drop(&mut self) {
        for task in lock(&self.typing).values() {
            task.abort();
        }
    }
}

#[async_trait]
impl Channel for MatrixChannel {
    fn name(&self) -> &str {
        NAME
    }

    /// Logs in (or reuses the session), then syncs until `cancel` fires. A lost server is reported
    /// (`Transient`) and the manager connects again with its backoff, from where the last sync ended; refused
    /// credentials are an authentication error, which stops the channel.
    async fn run(&self, bus: Arc<dyn Bus>, cancel: CancellationToken) -> Result<(), ChannelError> {
        let channel = self;
        channel.started_ms.get_or_init(now_ms);
        channel.runs.send_modify(|n| *n += 1);
        let result = channel.sync_loop(&bus, &cancel).await;
        if cancel.is_cancelled() {
            let rooms: Vec<String> = lock(&channel.typing).keys().cloned().collect();
            let stop = async {
                for room in rooms {
                    channel.stop_typing(&room).await;
                }
            };
            let _ = tokio::time::timeout(channel.settings.sync_stop_grace, stop).await;
        }
        result
    }

    async fn send(&self, msg: &OutboundMessage) -> Result<(), ChannelError> {
        let channel = self;
        let room = msg.chat_id.trim();
        // `!opaque:server`, or `!hash` in room version 12 and later.
        if !room.starts_with('!')
            || room.len() < 2
            || room.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(ChannelError::InvalidChatId {
                channel: NAME.into(),
                chat_id: msg.chat_id.clone(),
            });
        }
        if lock(&channel.session).is_none() {
            return Err(transient(
                "not logged in yet (the channel is starting or logging in again)",
            ));
        }
        if channel.room_is_encrypted(room).await? {
            channel.stop_typing(room).await;
            return Err(ChannelError::rejected(
                NAME,
                format!(
                    "{room} is an encrypted room and nanobot-rs has no end-to-end encryption: nothing is sent \
                     there in the clear"
                ),
            ));
        }
        let resuming = msg
            .metadata
            .get(nanobot_bus::META_STREAM_RESUMING)
            .is_some_and(|v| v == true);
        let (fp, txn) = channel.txn_for(msg);
        let result = match &msg.kind {
            OutboundKind::StreamDelta { stream_id } => {
                let thread = MatrixChannel::thread_relation(msg);
                channel
                    .stream_delta(room, stream_id, &msg.content, thread.as_ref())
                    .await;
                return Ok(());
            }
            OutboundKind::StreamEnd { stream_id } => {
                let result = channel.stream_end(room, stream_id, msg, &txn).await;
                if !resuming {
                    channel.stop_typing(room).await;
                }
                result
            }
            OutboundKind::Reply => {
                let result = channel.send_reply(room, msg, &txn).await;
                channel.stop_typing(room).await;
                result
            }
            _ => channel.send_reply(room, msg, &txn).await,
        };
        channel.settle_txn(fp, &txn, result.is_ok());
        // A refused token on a password login: the sync loop logs in again; the manager's retry then goes out.
        match result {
            Err(ChannelError::Auth { source, .. })
                if matches!(channel.settings.login, Login::Password(_)) =>
            {
                Err(ChannelError::transient(NAME, source))
            }
            other => other,
        }
    }

    fn heartbeat(&self) -> Option<Heartbeat> {
        Some(self.heartbeat.clone())
    }

    fn supports_streaming(&self) -> bool {
        self.settings.streaming
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rooms_count_members_as_nio_does() {
        let mut room = Room::default();
        assert_eq!(room.member_count(), None, "unknown without the server's count");
        room.joined = Some(1);
        room.invited = Some(1);
        assert_eq!(room.member_count(), Some(2), "joined and invited");
        room.joined = Some(u64::MAX);
        assert_eq!(
            room.member_count(),
            Some(u64::MAX),
            "a hostile count does not overflow"
        );
        room.apply_state(&json!({"type": "m.room.encryption", "state_key": "", "content": {}}));
        room.apply_state(&json!({"type": "m.room.name", "state_key": "", "content": {"name": "Ops"}}));
        assert!(room.encrypted);
        assert_eq!(room.name.as_deref(), Some("Ops"));
    }

    #[test]
    fn threads_and_edits_are_built_as_0_3_5_and_the_spec_want() {
        let mut msg = OutboundMessage::reply(NAME, "!r:h", "hi");
        msg.metadata.insert(META_THREAD_ROOT.into(), json!("$root"));
        msg.metadata.insert(META_EVENT_ID.into(), json!("$ev"));
        let t = MatrixChannel::thread_relation(&msg).unwrap();
        assert_eq!(t["rel_type"], "m.thread");
        assert_eq!(t["event_id"], "$root");
        assert_eq!(t["m.in_reply_to"]["event_id"], "$ev");
        assert_eq!(t["is_falling_back"], true);
        assert!(MatrixChannel::thread_relation(&OutboundMessage::reply(NAME, "!r:h", "hi")).is_none());

        let plain = MatrixChannel::text_content("hello", None);
        assert!(plain.get("formatted_body").is_none());
        assert_eq!(plain["m.mentions"], json!({}));
        let edit = MatrixChannel::edit_content("**done**", "$1");
        assert_eq!(
            edit["m.relates_to"],
            json!({"rel_type": "m.replace", "event_id": "$1"})
        );
        assert_eq!(edit["m.new_content"]["body"], "**done**");
        assert_eq!(
            edit["m.new_content"]["formatted_body"],
            "<p><strong>done</strong></p>"
        );
        assert_eq!(edit["body"], "* **done**");
    }

    #[test]
    fn a_retry_of_a_failed_send_reuses_its_transaction_ids() {
        let settings = MatrixSettings::from_block(&json!({"userId": "@b:h", "password": "pw"})).unwrap();
        let channel = MatrixChannel::new(settings, std::env::temp_dir(), std::env::temp_dir());
        let msg = OutboundMessage::reply(NAME, "!r:h", "hello");
        let (fp, first) = channel.txn_for(&msg);
        let a = first.next();
        channel.settle_txn(fp, &first, false);
        let (fp2, retry) = channel.txn_for(&msg);
        assert_eq!(fp, fp2);
        assert_eq!(retry.next(), a, "the retry's first event has the failed one's id");
        channel.settle_txn(fp2, &retry, true);
        let (_, again) = channel.txn_for(&msg);
        assert_ne!(
            again.next(),
            a,
            "the same text sent again after a success is a new message"
        );
        let other = OutboundMessage::reply(NAME, "!r:h", "hello!");
        assert_ne!(fingerprint(&other), fp);
    }

    #[test]
    fn markers_read_as_0_3_5s() {
        assert_eq!(marker("a.png", None), "[attachment: a.png]");
        assert_eq!(
            marker("a.png", Some("too large")),
            "[attachment: a.png - too large]"
        );
    }
}
