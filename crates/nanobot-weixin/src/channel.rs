//! [`WeixinChannel`]: the login and `account.json`, the calls, the long poll and the [`Channel`] implementation.
//! Messages in are in `inbound`, answers out in `outbound`, "typing" in `typing`.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use md5::{Digest as _, Md5};
use nanobot_bus::{Bus, InboundMessage, OutboundKind, OutboundMessage};
use nanobot_channels::download::SsrfGuard;
use nanobot_channels::{
    AccessControl, AccessDecision, AllowList, Channel, ChannelError, GroupPolicy, InboundContext,
    PairingStore, RecentIds, Transcribe, read_attachment, safe_file_name,
};
use nanobot_util::lock;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::{Map, Value, json};
use sha2::Sha256;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::account::{ACCOUNT_FILE, Account, fingerprint};
use crate::api::{self, API_TIMEOUT, CONFIG_TIMEOUT, CallError, MAX_POLL_ANSWER_BYTES, Target, auth_error};
use crate::crypto::{self, to_hex};
use crate::text::{MAX_MESSAGE_CHARS, cut_index, leaves_fence_open, split_text};
use crate::{NAME, WeixinSettings};

mod inbound;
mod outbound;
mod typing;

use outbound::{BlockStream, Deferred, Delivery, SendFail, delivery_key};
use typing::{Typing, Typist};

/// Metadata key of the id of the message an inbound message came from (0.3.5's, a string).
pub const META_MESSAGE_ID: &str = "message_id";
/// The largest media file received (0.3.5 has no bound).
pub const MAX_MEDIA_BYTES: u64 = 100 * 1024 * 1024;
/// The largest file sent (0.3.5 has no bound).
pub const MAX_UPLOAD_BYTES: u64 = 100 * 1024 * 1024;

/// Message ids remembered against redelivery (0.3.5's 1,000).
const SEEN_CAPACITY: usize = 1000;
/// A context token older than this is refreshed through `getconfig` before a send (0.3.5's 60 s).
const CONTEXT_TOKEN_MAX_AGE: Duration = Duration::from_secs(60);
/// Replies kept per chat until the user writes again (0.3.5's 3; the oldest is dropped).
const MAX_DEFERRED_PER_CHAT: usize = 3;
/// How often "typing" is said again (0.3.5's 5 s).
const TYPING_KEEPALIVE: Duration = Duration::from_secs(5);
/// "Typing" is never kept up longer than this, even if no answer comes.
const TYPING_MAX: Duration = Duration::from_secs(600);
/// A typing ticket is kept for a random time up to this (0.3.5's 24 h).
const TICKET_TTL_SECS: f64 = 24.0 * 60.0 * 60.0;
/// After a failed `getconfig` a ticket is asked again after this, doubling up to [`TICKET_MAX_RETRY_SECS`].
const TICKET_RETRY_SECS: f64 = 2.0;
const TICKET_MAX_RETRY_SECS: f64 = 60.0 * 60.0;
/// The shortest long poll hold the server's `longpolling_timeout_ms` may set (0.3.5's 5 s).
const MIN_POLL_HOLD: Duration = Duration::from_secs(5);
/// The longest long poll hold the server's `longpolling_timeout_ms` may set.
const MAX_SERVER_POLL_HOLD: Duration = Duration::from_secs(300);
/// How much longer than its hold a long poll may take (0.3.5's 10 s).
const POLL_SLACK: Duration = Duration::from_secs(10);
/// Bound of one media download or upload.
const MEDIA_TIMEOUT: Duration = Duration::from_secs(300);
/// A partly sent delivery is resumed (its parts sent skipped) when sent again within this.
const DELIVERY_TTL: Duration = Duration::from_secs(300);
/// Partly sent deliveries remembered (0.3.5's 256).
const MAX_DELIVERIES: usize = 256;
/// Block-streamed answers followed at once, at most (the least recently grown is forgotten first).
const MAX_STREAMS: usize = 64;
/// A block-streamed answer that neither grew nor ended for this long is forgotten (its turn failed).
const STREAM_TTL: Duration = Duration::from_secs(30 * 60);
/// Bound of the `notifystop` at a stop.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// At a stop, how long the messages of a long poll already answered may take to be handled, so that the cursor
/// moves past them and they do not come again at the next start.
const BATCH_GRACE: Duration = Duration::from_secs(5);

const ITEM_TEXT: i64 = 1;
const ITEM_IMAGE: i64 = 2;
const ITEM_VOICE: i64 = 3;
const ITEM_FILE: i64 = 4;
const ITEM_VIDEO: i64 = 5;
const MEDIA_ITEMS: [i64; 4] = [ITEM_IMAGE, ITEM_VOICE, ITEM_FILE, ITEM_VIDEO];
/// `message_type` of the bot's own messages.
const MESSAGE_TYPE_BOT: i64 = 2;
/// `message_state` of a finished message.
const MESSAGE_STATE_FINISH: i64 = 2;
const TYPING_ON: i64 = 1;
const TYPING_OFF: i64 = 2;

/// What Python's `urllib.parse.quote` leaves alone: letters, digits, `_.-~` and `/`.
const QUOTE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'_')
    .remove(b'.')
    .remove(b'-')
    .remove(b'~')
    .remove(b'/');

fn quote(s: &str) -> String {
    utf8_percent_encode(s, QUOTE).to_string()
}

fn transient(message: impl Into<String>) -> ChannelError {
    ChannelError::transient(NAME, message.into())
}

fn rejected(message: impl Into<String>) -> ChannelError {
    ChannelError::rejected(NAME, message.into())
}

fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn str_at<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key].as_str().unwrap_or_default()
}

/// `nanobot-` and the first 20 hex digits of sha256(`<delivery>:<part>`) (0.3.5's client ids: a retried
/// delivery sends each part under the same id).
fn client_id(delivery: &str, part: &str) -> String {
    let digest = to_hex(&Sha256::digest(format!("{delivery}:{part}")));
    format!("nanobot-{}", &digest[..20])
}

fn new_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

fn text_item(text: &str) -> Value {
    json!({"type": ITEM_TEXT, "text_item": {"text": text}})
}

/// The login and the poll's position.
#[derive(Default)]
struct Session {
    /// `account.json` was read.
    loaded: bool,
    token: String,
    base_url: String,
    cursor: String,
    replaced_hash: String,
    /// The server answered -14 (what it said): nothing is sent until a new login.
    expired: Option<String>,
    /// The next long poll's hold.
    hold: Duration,
}

/// Each user's latest context token (replies must quote one) and the sends made on each token.
#[derive(Default)]
struct Contexts {
    tokens: Map<String, Value>,
    at: HashMap<String, Instant>,
    sends: HashMap<String, u32>,
}

/// The personal WeChat channel. See the [crate docs](crate).
pub struct WeixinChannel {
    settings: WeixinSettings,
    state_dir: PathBuf,
    media_dir: PathBuf,
    access: AccessControl,
    guard: SsrfGuard,
    transcriber: Option<Arc<dyn Transcribe>>,
    /// The API and CDN client (built on first use).
    http: OnceLock<reqwest::Client>,
    /// The client of server-given URLs (`full_url`, `upload_full_url`), behind the SSRF guard.
    guarded: OnceLock<reqwest::Client>,
    session: Mutex<Session>,
    contexts: Mutex<Contexts>,
    tickets: Arc<Mutex<Map<String, Value>>>,
    typing: Mutex<HashMap<String, Typing>>,
    seen: RecentIds,
    deliveries: Mutex<Vec<(String, Delivery)>>,
    deferred: Mutex<HashMap<String, Vec<Deferred>>>,
    hints: Mutex<HashMap<String, Vec<String>>>,
    streams: Mutex<HashMap<String, BlockStream>>,
    /// One `account.json` write at a time.
    saving: tokio::sync::Mutex<()>,
    runs: watch::Sender<u64>,
    polls: watch::Sender<u64>,
    /// Counts the login expiring and a newer login taken up, so that the long poll acts on them at once.
    logins: watch::Sender<u64>,
}

impl std::fmt::Debug for WeixinChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WeixinChannel")
            .field("settings", &self.settings)
            .field("state_dir", &self.state_dir)
            .field("media_dir", &self.media_dir)
            .finish_non_exhaustive()
    }
}

impl Drop for WeixinChannel {
    fn drop(&mut self) {
        for t in lock(&self.typing).values() {
            t.stop.cancel();
        }
    }
}

impl WeixinChannel {
    /// A channel with these settings that keeps its login and state in `<state_dir>/account.json` (as 0.3.5;
    /// see [`WeixinSettings::state_dir`]) and received files in `<media_root>/weixin/`. Without
    /// [`with_pairing`](Self::with_pairing), strangers are ignored; without
    /// [`with_ssrf_guard`](Self::with_ssrf_guard), server-given media URLs on internal addresses are refused (the
    /// CDN's own `cdnBaseUrl` is used instead).
    pub fn new(settings: WeixinSettings, state_dir: impl AsRef<Path>, media_root: impl AsRef<Path>) -> Self {
        Self {
            access: Self::access(&settings, None),
            state_dir: state_dir.as_ref().to_owned(),
            media_dir: media_root.as_ref().join(NAME),
            guard: SsrfGuard::default(),
            transcriber: None,
            http: OnceLock::new(),
            guarded: OnceLock::new(),
            session: Mutex::default(),
            contexts: Mutex::default(),
            tickets: Arc::default(),
            typing: Mutex::default(),
            seen: RecentIds::new(SEEN_CAPACITY),
            deliveries: Mutex::default(),
            deferred: Mutex::default(),
            hints: Mutex::default(),
            streams: Mutex::default(),
            saving: tokio::sync::Mutex::new(()),
            runs: watch::Sender::new(0),
            polls: watch::Sender::new(0),
            logins: watch::Sender::new(0),
            settings,
        }
    }

    fn access(settings: &WeixinSettings, pairing: Option<Arc<PairingStore>>) -> AccessControl {
        AccessControl::new(
            NAME,
            AllowList::new(&settings.allow_from),
            GroupPolicy::Open,
            pairing,
        )
    }

    /// Answers strangers (who write with a context token) with a pairing code from `store`, as 0.3.5 does.
    #[must_use]
    pub fn with_pairing(mut self, store: Arc<PairingStore>) -> Self {
        self.access = Self::access(&self.settings, Some(store));
        self
    }

    /// Checks the media URLs the server gives (`full_url`, `upload_full_url`) with `guard` (the gateway passes
    /// the one of `tools.ssrfWhitelist`); a refused one falls back to `cdnBaseUrl`.
    #[must_use]
    pub fn with_ssrf_guard(mut self, guard: SsrfGuard) -> Self {
        self.guard = guard;
        self.guarded = OnceLock::new();
        self
    }

    /// Turns voices WeChat did not transcribe into text with `transcriber` (`[voice] <text>`).
    #[must_use]
    pub fn with_transcriber(mut self, transcriber: Arc<dyn Transcribe>) -> Self {
        self.transcriber = Some(transcriber);
        self
    }

    /// `<stateDir>/account.json`.
    pub fn state_file(&self) -> PathBuf {
        self.state_dir.join(ACCOUNT_FILE)
    }

    /// Where received files are saved (`<media>/weixin`).
    pub fn media_dir(&self) -> &Path {
        &self.media_dir
    }

    /// Counts the times the manager started the channel (a test waits for a restart).
    pub fn runs(&self) -> watch::Receiver<u64> {
        self.runs.subscribe()
    }

    /// Counts the long polls answered and handled (their messages published, the cursor saved).
    pub fn polls(&self) -> watch::Receiver<u64> {
        self.polls.subscribe()
    }

    fn http(&self) -> Result<&reqwest::Client, ChannelError> {
        if let Some(c) = self.http.get() {
            return Ok(c);
        }
        let built = api::client()?;
        Ok(self.http.get_or_init(|| built))
    }

    fn guarded(&self) -> Result<&reqwest::Client, ChannelError> {
        if let Some(c) = self.guarded.get() {
            return Ok(c);
        }
        let built = nanobot_channels::api_client(NAME, |_| {
            self.guard.client_builder().connect_timeout(api::CONNECT_TIMEOUT)
        })?;
        Ok(self.guarded.get_or_init(|| built))
    }

    // ----- the login and the state file -----

    /// Reads `account.json` once: the token as 0.3.5 chooses it (a configured `token` wins unless the file says
    /// a login replaced exactly that one), and the state saved with that token (cursor, context tokens, typing
    /// tickets).
    fn ensure_loaded(&self) {
        if lock(&self.session).loaded {
            return;
        }
        let file = match Account::read(&self.state_dir) {
            Ok(f) => f.unwrap_or_default(),
            Err(e) => {
                tracing::warn!(file = %self.state_file().display(), error = %e, "weixin: the saved state is unreadable");
                Account::default()
            }
        };
        let configured = self.settings.token.expose();
        let mut session = lock(&self.session);
        if session.loaded {
            return;
        }
        session.loaded = true;
        session.hold = self.settings.poll_timeout;
        session.base_url = self.settings.base_url.clone();
        let from_file = !file.token.is_empty()
            && (configured.is_empty() || file.replaced_hash == fingerprint(configured));
        let same_login;
        if from_file {
            session.token = file.token.clone();
            session.replaced_hash = file.replaced_hash.clone();
            if !file.base_url.is_empty() {
                session.base_url = file.base_url.clone();
            }
            same_login = true;
        } else {
            session.token = configured.to_owned();
            // 0.3.5 drops the saved state here; it is kept when it was saved with this very token.
            same_login = !configured.is_empty() && file.token == configured;
        }
        if same_login {
            session.cursor = file.cursor.clone();
            drop(session);
            lock(&self.contexts).tokens = file.context_tokens;
            *lock(&self.tickets) = file.typing_tickets;
        }
    }

    fn snapshot(&self) -> Option<Account> {
        let (token, cursor, base_url, replaced_hash) = {
            let s = lock(&self.session);
            (
                s.token.clone(),
                s.cursor.clone(),
                s.base_url.clone(),
                s.replaced_hash.clone(),
            )
        };
        if token.is_empty() {
            return None;
        }
        Some(Account {
            token,
            cursor,
            context_tokens: lock(&self.contexts).tokens.clone(),
            typing_tickets: lock(&self.tickets).clone(),
            base_url,
            replaced_hash,
        })
    }

    /// Saves the state in `account.json` (never over a newer login's token).
    async fn save(&self) {
        let _one = self.saving.lock().await;
        let Some(account) = self.snapshot() else {
            return;
        };
        let dir = self.state_dir.clone();
        let configured = self.settings.token.expose().to_owned();
        let written = tokio::task::spawn_blocking(move || account.save(&dir, &configured, false)).await;
        match written {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::warn!(file = %self.state_file().display(), error = %e, "weixin: the state was not saved")
            }
            Err(e) => tracing::warn!(error = %e, "weixin: the state was not saved"),
        }
    }

    /// A newer token a login elsewhere put in `account.json` (for the configured token, only one that says it
    /// replaced it), taken instead of the expired one, as 0.3.5 does after a `-14`. The state saved with it
    /// (cursor, context tokens, typing tickets) is taken with it, as at the start: the old session's belong to
    /// the old token.
    fn reload_replacement(&self) -> bool {
        let Ok(Some(file)) = Account::read(&self.state_dir) else {
            return false;
        };
        let configured = self.settings.token.expose();
        if !configured.is_empty() && file.replaced_hash != fingerprint(configured) {
            return false;
        }
        {
            let mut s = lock(&self.session);
            if file.token.is_empty() || file.token == s.token {
                return false;
            }
            s.token = file.token;
            s.replaced_hash = file.replaced_hash;
            if !file.base_url.is_empty() {
                s.base_url = file.base_url;
            }
            s.cursor = file.cursor;
            s.expired = None;
        }
        {
            let mut c = lock(&self.contexts);
            c.tokens = file.context_tokens;
            c.at.clear();
            c.sends.clear();
        }
        *lock(&self.tickets) = file.typing_tickets;
        self.logins.send_modify(|n| *n += 1);
        tracing::info!("weixin: a new login was found in the saved state; using it");
        true
    }

    fn no_login(&self) -> ChannelError {
        ChannelError::auth(
            NAME,
            format!(
                "no WeChat login: neither channels.{NAME}.token nor {} holds a bot token. Run `nanobot channels \
                 login weixin` and scan the QR code with WeChat",
                self.state_file().display()
            ),
        )
    }

    /// Whether sending can work: logged in, and the login not expired (or a newer login found in `account.json`,
    /// which is then used).
    fn active(&self) -> Result<(), ChannelError> {
        let (expired, no_token) = {
            let s = lock(&self.session);
            (s.expired.is_some(), s.token.is_empty())
        };
        if expired && !self.reload_replacement() {
            return Err(auth_error(
                "an earlier call was refused; nothing is sent until a new login",
            ));
        }
        if no_token {
            return Err(self.no_login());
        }
        Ok(())
    }

    /// The server answered `-14` (`why`): nothing is sent until a new login, and the long poll ends with the
    /// error (unless a newer login is found).
    fn expire(&self, why: &str) {
        lock(&self.session).expired = Some(why.to_owned());
        self.logins.send_modify(|n| *n += 1);
    }

    // ----- calls -----

    fn typist(&self) -> Option<Typist> {
        let client = self.http().ok()?.clone();
        let s = lock(&self.session);
        Some(Typist {
            client,
            base: s.base_url.clone(),
            token: s.token.clone(),
            route_tag: self.settings.route_tag.clone(),
            tickets: self.tickets.clone(),
        })
    }

    /// `POST <base>/<path>` with the bot token, `base_info` added; the answer unchecked.
    async fn post(&self, path: &str, body: Value, timeout: Duration) -> Result<Value, CallError> {
        self.post_bounded(path, body, timeout, None).await
    }

    /// [`post`](Self::post), the answer read up to `max` bytes (`None`: 2 MiB).
    async fn post_bounded(
        &self,
        path: &str,
        body: Value,
        timeout: Duration,
        max: Option<u64>,
    ) -> Result<Value, CallError> {
        let client = self
            .http()
            .map_err(|e| CallError::Network(e.to_string()))?
            .clone();
        let (token, base) = {
            let s = lock(&self.session);
            (s.token.clone(), s.base_url.clone())
        };
        let target = Target {
            base: &base,
            token: Some(&token),
            route_tag: self.settings.route_tag.as_deref(),
        };
        api::post_bounded(&client, &target, path, body, true, timeout, max).await
    }

    /// [`post`](Self::post), with the answer's `ret` / `errcode` checked.
    async fn call(&self, path: &str, body: Value, timeout: Duration) -> Result<Value, CallError> {
        let answer = self.post(path, body, timeout).await?;
        let token = lock(&self.session).token.clone();
        api::check(path.trim_start_matches("ilink/bot/"), &answer, &[&token])?;
        Ok(answer)
    }

    /// `msg/notifystart` / `msg/notifystop` (failures ignored, as 0.3.5).
    async fn notify(&self, what: &str) {
        if let Err(e) = self
            .call(&format!("ilink/bot/msg/notify{what}"), json!({}), CONFIG_TIMEOUT)
            .await
        {
            tracing::warn!(error = %e, "weixin: notify{what} failed (ignored)");
        }
    }

    // ----- the long poll -----

    async fn poll_loop(&self, bus: &Arc<dyn Bus>, cancel: &CancellationToken) -> Result<(), ChannelError> {
        const WHAT: &str = "the long poll (getupdates)";
        let mut logins = self.logins.subscribe();
        let mut polling_as = lock(&self.session).token.clone();
        loop {
            logins.borrow_and_update();
            let (cursor, hold, token, expired) = {
                let s = lock(&self.session);
                (s.cursor.clone(), s.hold, s.token.clone(), s.expired.clone())
            };
            if let Some(why) = expired {
                // A send was answered -14: the poll ends with the error, unless a newer login is there.
                if self.reload_replacement() {
                    continue;
                }
                self.save().await;
                return Err(auth_error(&why));
            }
            if token != polling_as {
                // A newer login was taken up (here or by a send): said on this connection.
                polling_as = token;
                tokio::select! {
                    () = cancel.cancelled() => return Ok(()),
                    () = self.notify("start") => {}
                }
                continue;
            }
            let answer = tokio::select! {
                () = cancel.cancelled() => return Ok(()),
                Ok(()) = logins.changed() => continue,
                r = self.post_bounded(
                    "ilink/bot/getupdates",
                    json!({"get_updates_buf": cursor}),
                    hold.saturating_add(POLL_SLACK),
                    Some(MAX_POLL_ANSWER_BYTES),
                ) => r,
            };
            let data = match answer {
                Ok(v) => v,
                // Normal for a long poll: poll again at once.
                Err(CallError::Timeout) => continue,
                Err(e) => return Err(e.into_channel(WHAT)),
            };
            match api::check("getupdates", &data, &[&token]) {
                Ok(()) => {}
                Err(CallError::Auth(why)) => {
                    if self.reload_replacement() {
                        continue;
                    }
                    self.expire(&why);
                    self.save().await;
                    return Err(auth_error(&why));
                }
                Err(e) => return Err(e.into_channel(WHAT)),
            }
            let ms = api::int_at(&data, "longpolling_timeout_ms");
            if ms > 0 {
                lock(&self.session).hold = server_hold(ms);
            }
            let msgs = data["msgs"].as_array().cloned().unwrap_or_default();
            let handled = async {
                for msg in &msgs {
                    if let Err(e) = self.on_message(bus, msg).await {
                        if matches!(e, ChannelError::Bus(_)) {
                            return Err(e);
                        }
                        tracing::warn!(error = %nanobot_util::error_chain(&e), "weixin: a message was not handled");
                    }
                }
                Ok(())
            };
            tokio::pin!(handled);
            let stopping = tokio::select! {
                () = cancel.cancelled() => true,
                r = &mut handled => {
                    r?;
                    false
                }
            };
            if stopping {
                // The batch is finished (within a bound) and the cursor saved, so that what was published does
                // not come again at the next start.
                match tokio::time::timeout(BATCH_GRACE, &mut handled).await {
                    Ok(r) => r?,
                    Err(_) => {
                        tracing::warn!(
                            "weixin: the stop cut a batch of messages short; it comes again at the next start"
                        );
                        return Ok(());
                    }
                }
            }
            // The cursor moves once its messages are handled: a batch cut short is polled again (repeats are
            // dropped by message id).
            if let Some(next) = data["get_updates_buf"].as_str().filter(|b| !b.is_empty()) {
                lock(&self.session).cursor = next.to_owned();
                self.save().await;
            }
            self.polls.send_modify(|n| *n += 1);
            if stopping {
                return Ok(());
            }
        }
    }
}

/// The long poll's hold the server asks for (`longpolling_timeout_ms`), within 5 s and 5 minutes.
fn server_hold(ms: i64) -> Duration {
    Duration::from_secs(u64::try_from(ms / 1000).unwrap_or(0)).clamp(MIN_POLL_HOLD, MAX_SERVER_POLL_HOLD)
}

#[async_trait]
impl Channel for WeixinChannel {
    fn name(&self) -> &str {
        NAME
    }

    /// Logs in with the saved token (never interactively: without one the channel stops with an error saying
    /// to run `nanobot channels login weixin`), sends `notifystart`, then long-polls until `cancel` fires. A
    /// network failure or a server error ends the run (`Transient`) and the manager polls again with its
    /// backoff, from the saved cursor; `-14` (the login expired, answered to the poll or to a send, and no newer
    /// login in `account.json`) stops the channel with 0.3.5's "WeChat login expired" error. At a stop, the
    /// messages of a poll already answered are handled first (for a few seconds at most) and the cursor saved.
    async fn run(&self, bus: Arc<dyn Bus>, cancel: CancellationToken) -> Result<(), ChannelError> {
        self.runs.send_modify(|n| *n += 1);
        self.ensure_loaded();
        let expired = lock(&self.session).expired.clone();
        if let Some(why) = expired
            && !self.reload_replacement()
        {
            return Err(auth_error(&why));
        }
        if lock(&self.session).token.is_empty() {
            return Err(self.no_login());
        }
        tokio::select! {
            () = cancel.cancelled() => return Ok(()),
            () = self.notify("start") => {}
        }
        tracing::info!("weixin: long-polling for messages");
        let result = self.poll_loop(&bus, &cancel).await;
        if cancel.is_cancelled() {
            let users: Vec<String> = lock(&self.typing).keys().cloned().collect();
            for user in users {
                self.stop_typing(&user, false);
            }
            let _ = tokio::time::timeout(STOP_GRACE, self.notify("stop")).await;
            self.save().await;
        }
        result
    }

    /// An answer: the files first (each uploaded and sent as its own message), then the text split at
    /// [`MAX_MESSAGE_CHARS`], on the user's latest context token. Without a usable context token (none, the
    /// local budget spent, or `-2`) the reply is kept and sent when the user next writes (as 0.3.5; the send
    /// counts as done). Progress and tool hints only with `sendProgress` / `sendToolHints`; hints are gathered
    /// into one message sent before the next visible one.
    async fn send(&self, msg: &OutboundMessage) -> Result<(), ChannelError> {
        let chat = msg.chat_id.trim();
        if chat.is_empty() || chat.len() > 256 || chat.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(ChannelError::InvalidChatId {
                channel: NAME.into(),
                chat_id: msg.chat_id.clone(),
            });
        }
        self.ensure_loaded();
        self.active()?;
        match &msg.kind {
            OutboundKind::StreamDelta { stream_id } => {
                self.stream_delta(chat, stream_id, &msg.content).await;
                return Ok(());
            }
            OutboundKind::ToolHint => {
                if self.settings.send_tool_hints && !msg.content.trim().is_empty() {
                    lock(&self.hints)
                        .entry(chat.to_owned())
                        .or_default()
                        .push(msg.content.clone());
                }
                return Ok(());
            }
            OutboundKind::Progress
                if !self.settings.send_progress
                    || (msg.content.trim().is_empty() && msg.media.is_empty()) =>
            {
                return Ok(());
            }
            _ => {}
        }
        let progress = msg.is_progress();
        let stream = match &msg.kind {
            OutboundKind::StreamEnd { stream_id } => Some(stream_id.as_str()),
            _ => None,
        };
        let (content, run_id) = match stream {
            Some(id) => self.stream_end(chat, id, &msg.content),
            None => (msg.content.clone(), String::new()),
        };
        self.flush_hints(chat).await;
        if content.trim().is_empty() && msg.media.is_empty() {
            if let Some(id) = stream {
                self.forget_stream(chat, id);
            }
            if !progress {
                self.stop_typing(chat, true);
            }
            return Ok(());
        }
        // A stream's end is named by its stream (the manager's retry resumes it, and the blocks stay sent).
        let key = match stream {
            Some(id) => delivery_key(chat, &format!("stream_end\0{id}"), "", &msg.media),
            None => delivery_key(chat, msg.kind.name(), &content, &msg.media),
        };
        let mut delivery = self.take_delivery(&key);
        let ctx = self.context_for(chat).await;
        let result = self
            .send_parts(chat, ctx.as_deref(), &content, &msg.media, &mut delivery, &run_id)
            .await;
        let outcome = match result {
            Ok(()) => Ok(()),
            Err(SendFail::Quota(why)) if !progress => {
                tracing::warn!(chat, error = %why, "weixin: the reply is kept until the user writes again");
                self.defer(
                    chat,
                    Deferred {
                        key,
                        delivery,
                        content,
                        media: msg.media.clone(),
                    },
                    ctx.as_deref().unwrap_or_default(),
                )
                .await;
                Ok(())
            }
            Err(SendFail::Quota(why)) => {
                tracing::info!(chat, error = %why, "weixin: progress not sent");
                Ok(())
            }
            Err(SendFail::Auth(why)) => {
                self.expire(&why);
                Err(auth_error(&why))
            }
            Err(SendFail::Other(e)) => {
                self.keep_delivery(key, delivery);
                Err(e)
            }
        };
        // The stream is kept while the manager may send its end again.
        if let Some(id) = stream
            && !outcome.as_ref().is_err_and(ChannelError::is_retryable)
        {
            self.forget_stream(chat, id);
        }
        if !progress {
            self.stop_typing(chat, true);
        }
        outcome
    }

    fn supports_streaming(&self) -> bool {
        self.settings.streaming && self.settings.block_streaming
    }
}

#[cfg(test)]
mod tests {
    use nanobot_testkit::fake_weixin::{Answer, FakeWeixin};

    use super::*;

    const ALICE: &str = "alice@im.wechat";

    #[test]
    fn quote_leaves_what_python_leaves() {
        assert_eq!(quote("a+b/c=d e~f"), "a%2Bb/c%3Dd%20e~f");
    }

    #[test]
    fn the_servers_hold_is_kept_within_5_seconds_and_5_minutes() {
        assert_eq!(server_hold(35_000), Duration::from_secs(35));
        assert_eq!(server_hold(1), MIN_POLL_HOLD);
        assert_eq!(server_hold(i64::MAX), MAX_SERVER_POLL_HOLD);
        assert_eq!(
            Duration::MAX.saturating_add(POLL_SLACK),
            Duration::MAX,
            "the poll's bound saturates"
        );
    }

    /// A channel logged in on the fake (nothing polled: the test plays the poll's part).
    fn logged_in(fake: &FakeWeixin, extra: &Value) -> (WeixinChannel, tempfile::TempDir) {
        let token = fake.issue_token(ALICE);
        let mut block = json!({"token": token, "baseUrl": fake.base_url(), "cdnBaseUrl": fake.cdn_base_url(),
            "allowFrom": [ALICE]});
        if let (Some(b), Some(e)) = (block.as_object_mut(), extra.as_object()) {
            b.extend(e.clone());
        }
        let dir = tempfile::tempdir().unwrap();
        let ch = WeixinChannel::new(
            WeixinSettings::from_block(&block).unwrap(),
            dir.path(),
            dir.path(),
        );
        ch.ensure_loaded();
        (ch, dir)
    }

    /// A message of `user` pushed on the fake, its context token kept as the poll keeps it.
    fn message_from(fake: &FakeWeixin, ch: &WeixinChannel, user: &str) -> String {
        let ctx = fake.push_text(user, "hi")["context_token"]
            .as_str()
            .unwrap()
            .to_owned();
        let mut c = lock(&ch.contexts);
        c.tokens.insert(user.to_owned(), json!(ctx));
        c.at.insert(user.to_owned(), Instant::now());
        c.sends.insert(ctx.clone(), 0);
        ctx
    }

    fn kept(content: &str) -> Deferred {
        Deferred {
            key: content.to_owned(),
            delivery: Delivery::new(),
            content: content.to_owned(),
            media: Vec::new(),
        }
    }

    #[tokio::test]
    async fn a_reply_refused_on_an_older_token_goes_at_once_on_the_newer_one() {
        let fake = FakeWeixin::start().await.unwrap();
        let (ch, _dir) = logged_in(&fake, &json!({}));
        let old = message_from(&fake, &ch, ALICE);
        // The user's next message came while a send on `old` was refused (its kept replies: none yet).
        let new = message_from(&fake, &ch, ALICE);
        ch.defer(ALICE, kept("refused on the old token"), &old).await;
        let sent = fake.sent();
        assert_eq!(sent.len(), 1, "sent at once");
        assert_eq!(sent[0].text(), Some("refused on the old token"));
        assert_eq!(sent[0].context_token, new);
        assert!(lock(&ch.deferred).get(ALICE).is_none_or(Vec::is_empty));
        // Refused on the latest token: kept for the next message.
        ch.defer(ALICE, kept("refused on the latest"), &new).await;
        assert_eq!(fake.sent().len(), 1);
        assert_eq!(lock(&ch.deferred)[ALICE].len(), 1);
        // No token when it was refused, one now: sent at once.
        ch.defer("bob@im.wechat", kept("cron push"), "").await;
        assert_eq!(fake.sent().len(), 1, "bob has no token yet");
        message_from(&fake, &ch, "bob@im.wechat");
        ch.defer("bob@im.wechat", kept("cron push"), "").await;
        assert_eq!(fake.sent()[1].text(), Some("cron push"));
    }

    #[tokio::test]
    async fn sends_on_one_token_together_never_pass_its_budget() {
        let fake = FakeWeixin::start().await.unwrap();
        let (ch, _dir) = logged_in(&fake, &json!({"contextMessageBudget": 1}));
        let ctx = message_from(&fake, &ch, ALICE);
        let (a, b) = tokio::join!(
            ch.send_item(ALICE, text_item("a"), &ctx, "nanobot-a", "", 0),
            ch.send_item(ALICE, text_item("b"), &ctx, "nanobot-b", "", 0),
        );
        assert_eq!(usize::from(a.is_ok()) + usize::from(b.is_ok()), 1, "{a:?} {b:?}");
        assert!(matches!(a.err().or(b.err()), Some(CallError::Quota(_))));
        assert_eq!(fake.sent().len(), 1);
        // A send that failed gives its count back.
        let ctx = message_from(&fake, &ch, ALICE);
        fake.answer_next("/ilink/bot/sendmessage", Answer::Status(503));
        let failed = ch
            .send_item(ALICE, text_item("c"), &ctx, "nanobot-c", "", 0)
            .await;
        assert_eq!(failed, Err(CallError::Status(503)));
        assert_eq!(lock(&ch.contexts).sends[&ctx], 0);
        ch.send_item(ALICE, text_item("c"), &ctx, "nanobot-c", "", 0)
            .await
            .unwrap();
        assert_eq!(lock(&ch.contexts).sends[&ctx], 1);
        assert_eq!(fake.sent().len(), 2);
    }
}
