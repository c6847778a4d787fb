//! Local triggers (0.3.5's `/trigger` and `nanobot trigger`): a named trigger bound to one chat session, fired from
//! outside (a script, another program) with a message that the agent then answers in that chat.
//!
//! **Where things live.** The triggers themselves are kept where 0.3.5 keeps them, `<workspace>/triggers/triggers.json`
//! (same format and camelCase keys, the same `triggers/.lock` advisory lock, so the Python nanobot and nanobot-rs can
//! share a home and a user can switch back). The files are opened beneath a handle of the workspace
//! ([`ConfinedDir`]): a `triggers` folder replaced by a link that leads out is refused, never followed.
//!
//! **What is trusted.** The workspace is writable by the model, so a trigger planted or re-bound there by a file
//! write (to send messages into another chat's session) must not fire. As with cron jobs ([`crate::trust`]), the
//! fingerprints (SHA-256 of id, channel, chat, session, sender and origin metadata) of the triggers created through
//! `/trigger` are kept outside the workspace (`<data dir>/triggers/trusted.json`); any other trigger is refused with
//! the reason recorded on it. On the first start with triggers already in the workspace (created by the Python
//! nanobot), those are trusted once.
//!
//! **Deliveries.** `nanobot trigger <id> <message>` queues a delivery in `<data dir>/triggers/inbox/` (outside the
//! workspace, out of every tool's reach), where the gateway's [`TriggerQueue`] claims it (moving it to
//! `processing/`), runs it, and removes it. A delivery cut short by a crash is found in `processing/` on the next start
//! and queued again; one that keeps failing is moved to `failed/` after [`MAX_DELIVERY_ATTEMPTS`]. Deliveries that
//! appear in the workspace's `triggers/inbox/` (where 0.3.5's command line writes them, and where the model could
//! write too) are never run: they are moved to `triggers/failed/` with the reason.

use std::collections::BTreeSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use nanobot_util::{ConfinedDir, EntryKind};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use crate::service::BoxError;

/// Metadata key of the trigger a turn came from (0.3.5's `_local_trigger`).
pub const LOCAL_TRIGGER_META: &str = "_local_trigger";
/// A delivery that failed this many times is moved to `failed/`.
pub const MAX_DELIVERY_ATTEMPTS: u32 = 10;
/// How many run records a trigger keeps.
pub const MAX_RUN_HISTORY: usize = 20;
/// How often the queue looks for deliveries (0.3.5 looks every half second).
pub const POLL_INTERVAL: Duration = Duration::from_millis(500);
/// The longest message a delivery may carry.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024;

const STORE: &str = "triggers/triggers.json";
const LOCK: &str = "triggers/.lock";
const WORKSPACE_INBOX: &str = "triggers/inbox";
const WORKSPACE_FAILED: &str = "triggers/failed";
const INBOX: &str = "inbox";
const PROCESSING: &str = "processing";
const FAILED: &str = "failed";
const TRUSTED: &str = "trusted.json";
/// Letters of trigger ids (0.3.5's alphabet: no 0/O, 1/I).
const ID_ALPHABET: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZ23456789";
/// Longest trigger name kept (0.3.5's).
const MAX_NAME_CHARS: usize = 120;
/// Most deliveries claimed at once.
const CLAIM_BATCH: usize = 20;
/// Longest delivery or store file read.
const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// What can go wrong with triggers.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TriggerError {
    /// No trigger has this id.
    #[error("trigger not found: {0}")]
    NotFound(String),
    /// The trigger is disabled.
    #[error("trigger is disabled: {0}")]
    Disabled(String),
    /// Bad input (empty name or message, missing binding, message too long).
    #[error("{0}")]
    Invalid(String),
    /// Reading, writing or locking a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file involved.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A file is not what it should be.
    #[error("{}: {message}", path.display())]
    Corrupt {
        /// The file involved.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// One run of a trigger, newest last in [`LocalTrigger::run_history`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TriggerRun {
    /// When the delivery was queued (ms since the epoch).
    #[serde(default, alias = "run_at_ms")]
    pub run_at_ms: i64,
    /// `ok` or `error`.
    #[serde(default)]
    pub status: String,
    /// Why it failed.
    #[serde(default)]
    pub error: Option<String>,
}

/// A trigger bound to one chat session (0.3.5's `LocalTrigger`, same keys).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalTrigger {
    /// `trg_…`: the id the command line names.
    pub id: String,
    /// The name given to `/trigger`.
    #[serde(default)]
    pub name: String,
    /// Disabled triggers refuse deliveries.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Channel of the bound chat.
    #[serde(default)]
    pub channel: String,
    /// The bound chat.
    #[serde(default, alias = "chat_id")]
    pub chat_id: String,
    /// The bound session.
    #[serde(default, alias = "session_key")]
    pub session_key: String,
    /// Sender id of trigger turns (`trigger`).
    #[serde(default = "trigger_sender", alias = "sender_id")]
    pub sender_id: String,
    /// The metadata of the message that created the trigger (thread ids and the like), given to its turns.
    #[serde(default, alias = "origin_metadata")]
    pub origin_metadata: Map<String, Value>,
    /// Creation time (ms).
    #[serde(default, alias = "created_at_ms")]
    pub created_at_ms: i64,
    /// Last change (ms).
    #[serde(default, alias = "updated_at_ms")]
    pub updated_at_ms: i64,
    /// The last message queued (cut to 4000 characters).
    #[serde(default, alias = "last_message")]
    pub last_message: String,
    /// When the last delivery ran.
    #[serde(default, alias = "last_run_at_ms")]
    pub last_run_at_ms: Option<i64>,
    /// `ok` or `error`.
    #[serde(default, alias = "last_status")]
    pub last_status: Option<String>,
    /// Why the last delivery failed.
    #[serde(default, alias = "last_error")]
    pub last_error: Option<String>,
    /// The last [`MAX_RUN_HISTORY`] runs.
    #[serde(default, alias = "run_history")]
    pub run_history: Vec<TriggerRun>,
}

fn yes() -> bool {
    true
}

fn trigger_sender() -> String {
    "trigger".into()
}

impl LocalTrigger {
    /// The fingerprint of what the trigger does (where its messages go), not of its run state.
    pub fn fingerprint(&self) -> String {
        let mut h = Sha256::new();
        for part in [
            &self.id,
            &self.channel,
            &self.chat_id,
            &self.session_key,
            &self.sender_id,
        ] {
            h.update(part.as_bytes());
            h.update([0]);
        }
        h.update(serde_json::to_vec(&self.origin_metadata).unwrap_or_default());
        h.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The text a delivery is given to the agent as (0.3.5's history text).
    pub fn turn_text(&self, content: &str) -> String {
        let label = if self.name.trim().is_empty() {
            &self.id
        } else {
            self.name.trim()
        };
        format!("Local trigger received: {label}\n\n{content}")
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct StoreFile {
    #[serde(default = "version")]
    version: u32,
    #[serde(default)]
    triggers: Vec<LocalTrigger>,
}

fn version() -> u32 {
    1
}

impl Default for StoreFile {
    fn default() -> Self {
        Self {
            version: version(),
            triggers: Vec::new(),
        }
    }
}

/// One queued message for a trigger (0.3.5's `TriggerDelivery`, same keys).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TriggerDelivery {
    /// `tdl_…`.
    pub id: String,
    /// The trigger it is for.
    #[serde(alias = "trigger_id")]
    pub trigger_id: String,
    /// The message.
    pub content: String,
    /// When it was queued (ms).
    #[serde(default, alias = "created_at_ms")]
    pub created_at_ms: i64,
    /// Failed runs so far.
    #[serde(default)]
    pub attempts: u32,
    /// Why the last run failed.
    #[serde(default, alias = "last_error")]
    pub last_error: Option<String>,
    #[serde(skip)]
    file: String,
}

#[derive(Serialize)]
struct DeliveryFile<'a> {
    version: u32,
    delivery: &'a TriggerDelivery,
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// The time of a new delivery, in ms, strictly increasing within this process: the inbox runs in file-name order
/// (`<ms>-<id>.json`), so two deliveries made in the same millisecond keep the order they were made in rather than
/// their random ids'.
fn delivery_ms() -> i64 {
    use std::sync::atomic::{AtomicI64, Ordering};
    static LAST: AtomicI64 = AtomicI64::new(0);
    let now = now_ms();
    let prev = LAST
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |last| Some(now.max(last + 1)))
        .unwrap_or(0);
    now.max(prev + 1)
}

/// Cuts `text` to `max` characters (0.3.5 keeps 4000 of a last message).
fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_owned(),
    }
}

/// Reads `rel` beneath `dir` when it is at most [`MAX_FILE_BYTES`] long; `None` when it does not exist.
fn read_small(dir: &ConfinedDir, rel: &str) -> Result<Option<Vec<u8>>, TriggerError> {
    use std::io::Read;
    let path = || dir.display_path(Path::new(rel));
    let io = |source| TriggerError::Io { path: path(), source };
    let Some(file) = dir.open_read(Path::new(rel)).map_err(io)? else {
        return Ok(None);
    };
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| TriggerError::Io { path: path(), source })?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(TriggerError::Corrupt {
            path: path(),
            message: format!("larger than {MAX_FILE_BYTES} bytes"),
        });
    }
    Ok(Some(bytes))
}

/// The triggers of one workspace and the delivery queue in the data directory. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct TriggerStore {
    ws: ConfinedDir,
    data: ConfinedDir,
}

impl TriggerStore {
    /// The triggers of `workspace`, with the queue and trust ledger in `data_dir` (normally
    /// `<data dir>/triggers`). Nothing is read or created yet.
    pub fn new(workspace: impl Into<PathBuf>, data_dir: impl Into<PathBuf>) -> Self {
        Self {
            ws: ConfinedDir::new(workspace),
            data: ConfinedDir::new(data_dir),
        }
    }

    /// `triggers.json`.
    pub fn store_path(&self) -> PathBuf {
        self.ws.display_path(Path::new(STORE))
    }

    fn ws_io(&self, rel: &str) -> impl FnOnce(std::io::Error) -> TriggerError + '_ {
        let path = self.ws.display_path(Path::new(rel));
        move |source| TriggerError::Io { path, source }
    }

    fn data_io(&self, rel: &str) -> impl FnOnce(std::io::Error) -> TriggerError + '_ {
        let path = self.data.display_path(Path::new(rel));
        move |source| TriggerError::Io { path, source }
    }

    /// Takes the store's advisory lock (the one 0.3.5 takes).
    fn lock(&self) -> Result<File, TriggerError> {
        self.ws
            .create_dir_all(Path::new("triggers"))
            .map_err(self.ws_io("triggers"))?;
        let file = self.ws.open_lock(Path::new(LOCK)).map_err(self.ws_io(LOCK))?;
        file.lock().map_err(self.ws_io(LOCK))?;
        Ok(file)
    }

    fn load_unlocked(&self) -> Result<StoreFile, TriggerError> {
        let Some(bytes) = read_small(&self.ws, STORE)? else {
            return Ok(StoreFile::default());
        };
        serde_json::from_slice(&bytes).map_err(|e| TriggerError::Corrupt {
            path: self.store_path(),
            message: format!(
                "not a trigger store: {e} (line {}, column {})",
                e.line(),
                e.column()
            ),
        })
    }

    fn save_unlocked(&self, file: &StoreFile) -> Result<(), TriggerError> {
        let json = serde_json::to_vec_pretty(file).map_err(|e| TriggerError::Invalid(e.to_string()))?;
        self.ws
            .write_atomic(Path::new(STORE), &json)
            .map_err(self.ws_io(STORE))
    }

    /// Applies `change` to the freshest store under the lock and saves it.
    fn update<T>(
        &self,
        change: impl FnOnce(&mut StoreFile) -> Result<T, TriggerError>,
    ) -> Result<T, TriggerError> {
        let _lock = self.lock()?;
        let mut file = self.load_unlocked()?;
        let out = change(&mut file)?;
        self.save_unlocked(&file)?;
        Ok(out)
    }

    /// Every trigger, newest change first.
    pub fn list(&self) -> Result<Vec<LocalTrigger>, TriggerError> {
        let _lock = self.lock()?;
        let mut all = self.load_unlocked()?.triggers;
        all.sort_by(|a, b| (b.updated_at_ms, &b.id).cmp(&(a.updated_at_ms, &a.id)));
        Ok(all)
    }

    /// The trigger with this id.
    pub fn get(&self, id: &str) -> Result<Option<LocalTrigger>, TriggerError> {
        let _lock = self.lock()?;
        Ok(self
            .load_unlocked()?
            .triggers
            .into_iter()
            .find(|t| t.id == id.trim()))
    }

    /// Creates a trigger bound to a chat session (and trusts it).
    pub fn create(
        &self,
        name: &str,
        channel: &str,
        chat_id: &str,
        session_key: &str,
        origin_metadata: Map<String, Value>,
    ) -> Result<LocalTrigger, TriggerError> {
        let name: String = name.split_whitespace().collect::<Vec<_>>().join(" ");
        let name: String = if name.is_empty() {
            "Local trigger".into()
        } else {
            name.chars().take(MAX_NAME_CHARS).collect()
        };
        let (channel, chat_id, session_key) = (channel.trim(), chat_id.trim(), session_key.trim());
        if channel.is_empty() || chat_id.is_empty() || session_key.is_empty() {
            return Err(TriggerError::Invalid(
                "channel, chat id and session key are required".into(),
            ));
        }
        let trigger = self.update(|file| {
            let taken: BTreeSet<&str> = file.triggers.iter().map(|t| t.id.as_str()).collect();
            let id = loop {
                let id: String = (0..8)
                    .map(|_| ID_ALPHABET[rand::random_range(0..ID_ALPHABET.len())] as char)
                    .collect();
                let id = format!("trg_{id}");
                if !taken.contains(id.as_str()) {
                    break id;
                }
            };
            let now = now_ms();
            let trigger = LocalTrigger {
                id,
                name,
                enabled: true,
                channel: channel.to_owned(),
                chat_id: chat_id.to_owned(),
                session_key: session_key.to_owned(),
                sender_id: trigger_sender(),
                origin_metadata,
                created_at_ms: now,
                updated_at_ms: now,
                last_message: String::new(),
                last_run_at_ms: None,
                last_status: None,
                last_error: None,
                run_history: Vec::new(),
            };
            // Trusted under the store's lock, with the creation: a first start's baseline (which takes the lock
            // too) either sees the trigger or is seen by this, never writes the ledger over this one's trust.
            self.trust_unlocked(&trigger)?;
            file.triggers.push(trigger.clone());
            Ok(trigger)
        })?;
        Ok(trigger)
    }

    /// Enables or disables a trigger.
    pub fn enable(&self, id: &str, enabled: bool) -> Result<LocalTrigger, TriggerError> {
        self.update(|file| {
            let t = file
                .triggers
                .iter_mut()
                .find(|t| t.id == id.trim())
                .ok_or_else(|| TriggerError::NotFound(id.to_owned()))?;
            t.enabled = enabled;
            t.updated_at_ms = now_ms();
            Ok(t.clone())
        })
    }

    /// Removes a trigger; false when there was none.
    pub fn delete(&self, id: &str) -> Result<bool, TriggerError> {
        self.update(|file| {
            let before = file.triggers.len();
            file.triggers.retain(|t| t.id != id.trim());
            Ok(file.triggers.len() != before)
        })
    }

    fn load_trusted(&self) -> Result<Option<BTreeSet<String>>, TriggerError> {
        match self
            .data
            .read(Path::new(TRUSTED))
            .map_err(self.data_io(TRUSTED))?
        {
            None => Ok(None),
            Some(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| TriggerError::Corrupt {
                    path: self.data.display_path(Path::new(TRUSTED)),
                    message: e.to_string(),
                }),
        }
    }

    fn save_trusted(&self, set: &BTreeSet<String>) -> Result<(), TriggerError> {
        self.data
            .create_dir_all(Path::new(""))
            .map_err(self.data_io(""))?;
        let json = serde_json::to_vec_pretty(set).map_err(|e| TriggerError::Invalid(e.to_string()))?;
        self.data
            .write_atomic(Path::new(TRUSTED), &json)
            .map_err(self.data_io(TRUSTED))
    }

    /// Trusts `trigger` as it is now.
    pub fn trust(&self, trigger: &LocalTrigger) -> Result<(), TriggerError> {
        let _lock = self.lock()?;
        self.trust_unlocked(trigger)
    }

    /// [`trust`](Self::trust) with the store's lock held by the caller (the ledger is read, changed and written
    /// under it, so no two writers lose each other's entries).
    fn trust_unlocked(&self, trigger: &LocalTrigger) -> Result<(), TriggerError> {
        let mut set = self.load_trusted()?.unwrap_or_default();
        if set.insert(trigger.fingerprint()) {
            self.save_trusted(&set)?;
        }
        Ok(())
    }

    /// Whether `trigger`, as it is now, was created through `/trigger` (or trusted once at the first start).
    pub fn is_trusted(&self, trigger: &LocalTrigger) -> Result<bool, TriggerError> {
        Ok(self
            .load_trusted()?
            .is_some_and(|set| set.contains(&trigger.fingerprint())))
    }

    /// Without a ledger yet, trusts the triggers already in the workspace once; returns how many.
    /// The check and the write are under the store's lock, as `/trigger`'s creation and trust are: a trigger
    /// created while the gateway starts is either in the baseline or trusted on top of it.
    pub fn baseline_if_missing(&self) -> Result<usize, TriggerError> {
        let _lock = self.lock()?;
        if self.load_trusted()?.is_some() {
            return Ok(0);
        }
        let set: BTreeSet<String> = self
            .load_unlocked()?
            .triggers
            .iter()
            .map(LocalTrigger::fingerprint)
            .collect();
        self.save_trusted(&set)?;
        Ok(set.len())
    }

    /// Queues `content` for trigger `id` (what `nanobot trigger` does).
    pub fn enqueue(&self, id: &str, content: &str) -> Result<TriggerDelivery, TriggerError> {
        if content.trim().is_empty() {
            return Err(TriggerError::Invalid("the trigger message is empty".into()));
        }
        if content.len() > MAX_MESSAGE_BYTES {
            return Err(TriggerError::Invalid(format!(
                "the trigger message is longer than {MAX_MESSAGE_BYTES} bytes"
            )));
        }
        let id = id.trim().to_owned();
        self.update(|file| {
            let t = file
                .triggers
                .iter_mut()
                .find(|t| t.id == id)
                .ok_or_else(|| TriggerError::NotFound(id.clone()))?;
            if !t.enabled {
                return Err(TriggerError::Disabled(id.clone()));
            }
            let now = delivery_ms();
            let mut delivery = TriggerDelivery {
                id: format!("tdl_{}", &uuid::Uuid::new_v4().simple().to_string()[..12]),
                trigger_id: id.clone(),
                content: content.to_owned(),
                created_at_ms: now,
                attempts: 0,
                last_error: None,
                file: String::new(),
            };
            delivery.file = format!("{now}-{}.json", delivery.id);
            self.write_delivery(INBOX, &delivery)?;
            t.last_message = cut(content, 4000);
            t.updated_at_ms = now;
            Ok(delivery)
        })
    }

    fn write_delivery(&self, dir: &str, d: &TriggerDelivery) -> Result<(), TriggerError> {
        self.data
            .create_dir_all(Path::new(dir))
            .map_err(self.data_io(dir))?;
        let rel = format!("{dir}/{}", d.file);
        let json = serde_json::to_vec_pretty(&DeliveryFile {
            version: 1,
            delivery: d,
        })
        .map_err(|e| TriggerError::Invalid(e.to_string()))?;
        self.data
            .write_atomic(Path::new(&rel), &json)
            .map_err(self.data_io(&rel))
    }

    /// The `*.json` files of a queue directory, oldest first (names start with the queue time).
    fn queued(dir: &ConfinedDir, rel: &str) -> Vec<String> {
        let mut names: Vec<String> = match dir.read_dir(Path::new(rel)) {
            Ok(Some(entries)) => entries
                .into_iter()
                .filter(|(_, kind)| matches!(kind, EntryKind::File))
                .filter_map(|(name, _)| name.into_string().ok())
                .filter(|n| n.ends_with(".json") && !n.starts_with('.'))
                .collect(),
            _ => Vec::new(),
        };
        names.sort();
        names
    }

    fn read_delivery(&self, dir: &str, name: &str) -> Result<TriggerDelivery, TriggerError> {
        let rel = format!("{dir}/{name}");
        let path = self.data.display_path(Path::new(&rel));
        let bytes = read_small(&self.data, &rel)?.ok_or_else(|| TriggerError::Corrupt {
            path: path.clone(),
            message: "gone".into(),
        })?;
        let value: Value = serde_json::from_slice(&bytes).map_err(|e| TriggerError::Corrupt {
            path: path.clone(),
            message: e.to_string(),
        })?;
        let inner = value.get("delivery").cloned().unwrap_or(value);
        let mut d: TriggerDelivery = serde_json::from_value(inner).map_err(|e| TriggerError::Corrupt {
            path,
            message: e.to_string(),
        })?;
        d.file = name.to_owned();
        Ok(d)
    }

    fn move_delivery(&self, from: &str, to: &str, name: &str) -> Result<(), TriggerError> {
        self.data
            .create_dir_all(Path::new(to))
            .map_err(self.data_io(to))?;
        let (a, b) = (format!("{from}/{name}"), format!("{to}/{name}"));
        self.data
            .rename(Path::new(&a), Path::new(&b))
            .map_err(self.data_io(&a))
    }

    /// Moves up to 20 queued deliveries to `processing/` and returns them; unreadable ones go to `failed/`.
    pub fn claim(&self) -> Vec<TriggerDelivery> {
        let mut out = Vec::new();
        for name in Self::queued(&self.data, INBOX).into_iter().take(CLAIM_BATCH) {
            match self.read_delivery(INBOX, &name) {
                Ok(d) => match self.move_delivery(INBOX, PROCESSING, &name) {
                    Ok(()) => out.push(d),
                    Err(e) => tracing::warn!(error = %e, "trigger: cannot claim a delivery"),
                },
                Err(e) => {
                    tracing::warn!(error = %e, "trigger: unreadable delivery moved to failed/");
                    let _ = self.move_delivery(INBOX, FAILED, &name);
                }
            }
        }
        out
    }

    /// Queues again what a crash left in `processing/` (counting an attempt); returns how many.
    pub fn recover(&self) -> usize {
        let mut n = 0;
        for name in Self::queued(&self.data, PROCESSING) {
            match self.read_delivery(PROCESSING, &name) {
                Ok(d) => {
                    if self.retry(&d, "the delivery was cut short (the gateway stopped)") {
                        n += 1;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "trigger: unreadable delivery moved to failed/");
                    let _ = self.move_delivery(PROCESSING, FAILED, &name);
                }
            }
        }
        n
    }

    /// Removes a claimed delivery that was handled.
    pub fn complete(&self, d: &TriggerDelivery) {
        let rel = format!("{PROCESSING}/{}", d.file);
        if let Err(e) = self.data.remove_file(Path::new(&rel)) {
            tracing::warn!(error = %e, delivery = %d.id, "trigger: cannot remove a handled delivery");
        }
    }

    /// Queues a claimed delivery again after a failure; after [`MAX_DELIVERY_ATTEMPTS`] it goes to `failed/`
    /// instead (returns false then).
    pub fn retry(&self, d: &TriggerDelivery, error: &str) -> bool {
        let mut d = d.clone();
        d.attempts += 1;
        d.last_error = Some(cut(error, 500));
        let again = d.attempts < MAX_DELIVERY_ATTEMPTS;
        let to = if again { INBOX } else { FAILED };
        let result = self
            .write_delivery(PROCESSING, &d)
            .and_then(|()| self.move_delivery(PROCESSING, to, &d.file));
        if let Err(e) = result {
            tracing::warn!(error = %e, delivery = %d.id, "trigger: cannot requeue a delivery");
            return false;
        }
        again
    }

    /// Records a run's outcome on its trigger (last status, history of [`MAX_RUN_HISTORY`]).
    pub fn record(&self, trigger_id: &str, run_at_ms: i64, error: Option<&str>) -> Result<(), TriggerError> {
        self.update(|file| {
            if let Some(t) = file.triggers.iter_mut().find(|t| t.id == trigger_id) {
                let status = if error.is_some() { "error" } else { "ok" };
                t.last_run_at_ms = Some(run_at_ms);
                t.last_status = Some(status.into());
                t.last_error = error.map(|e| cut(e, 500));
                t.updated_at_ms = now_ms();
                t.run_history.push(TriggerRun {
                    run_at_ms,
                    status: status.into(),
                    error: t.last_error.clone(),
                });
                let extra = t.run_history.len().saturating_sub(MAX_RUN_HISTORY);
                t.run_history.drain(..extra);
            }
            Ok(())
        })
    }

    /// Moves deliveries found in the workspace's `triggers/inbox/` (0.3.5's queue, which the model can write) to
    /// `triggers/failed/`, unrun; returns how many.
    pub fn refuse_workspace_deliveries(&self) -> usize {
        let names = Self::queued(&self.ws, WORKSPACE_INBOX);
        for name in &names {
            tracing::warn!(
                file = %name,
                "trigger: a delivery in the workspace's triggers/inbox was not run (deliveries are queued with \
                 nanobot-rs's `nanobot trigger`, outside the workspace); moved to triggers/failed"
            );
            let _ = self.ws.create_dir_all(Path::new(WORKSPACE_FAILED));
            let (a, b) = (
                format!("{WORKSPACE_INBOX}/{name}"),
                format!("{WORKSPACE_FAILED}/{name}"),
            );
            if let Err(e) = self.ws.rename(Path::new(&a), Path::new(&b)) {
                tracing::warn!(error = %e, "trigger: cannot move a workspace delivery");
            }
        }
        names.len()
    }
}

/// Why a delivery was not run: `retry` ones are queued again (up to [`MAX_DELIVERY_ATTEMPTS`]), others are recorded
/// and dropped.
#[derive(Debug)]
pub struct DeliveryFailure {
    /// Whether trying again later may help.
    pub retry: bool,
    /// What went wrong.
    pub error: BoxError,
}

/// Runs one delivery of a trusted, enabled trigger; returns the answer.
pub type TriggerHandler = Arc<
    dyn Fn(
            LocalTrigger,
            TriggerDelivery,
        ) -> futures::future::BoxFuture<'static, Result<String, DeliveryFailure>>
        + Send
        + Sync,
>;

/// The gateway's delivery loop: claims queued deliveries and runs them through the handler, one at a time.
pub struct TriggerQueue {
    store: TriggerStore,
    handler: TriggerHandler,
}

impl std::fmt::Debug for TriggerQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TriggerQueue")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

impl TriggerQueue {
    /// A queue over `store` that runs deliveries with `handler`.
    pub fn new(store: TriggerStore, handler: TriggerHandler) -> Self {
        Self { store, handler }
    }

    /// Prepares the queue: trusts the triggers already in the workspace on the first start, and queues again the
    /// deliveries a stop cut short. Returns how many were queued again.
    pub async fn recover(&self) -> usize {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || {
            if let Err(e) = store.baseline_if_missing() {
                tracing::warn!(error = %e, "trigger: cannot write the trust ledger");
            }
            store.recover()
        })
        .await
        .unwrap_or(0)
    }

    /// Claims what is queued now (setting aside deliveries found in the workspace) and runs it, one delivery at a
    /// time; once `stop` fires, what is left is queued again unrun. Returns how many deliveries ran.
    pub async fn deliver_pending(&self, stop: &CancellationToken) -> usize {
        let store = self.store.clone();
        let claimed = tokio::task::spawn_blocking(move || {
            store.refuse_workspace_deliveries();
            store.claim()
        })
        .await
        .unwrap_or_default();
        let mut ran = 0;
        for delivery in claimed {
            if stop.is_cancelled() {
                let store = self.store.clone();
                let _ =
                    tokio::task::spawn_blocking(move || store.retry(&delivery, "the gateway stopped")).await;
                continue;
            }
            self.deliver(delivery).await;
            ran += 1;
        }
        ran
    }

    /// Runs until `stop` fires: [`recover`](Self::recover), then [`deliver_pending`](Self::deliver_pending) every
    /// [`POLL_INTERVAL`].
    pub async fn run(&self, stop: CancellationToken) {
        let recovered = self.recover().await;
        if recovered > 0 {
            tracing::warn!(
                recovered,
                "trigger: deliveries cut short by a stop are queued again"
            );
        }
        loop {
            self.deliver_pending(&stop).await;
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(POLL_INTERVAL) => {}
            }
        }
    }

    /// Runs one claimed delivery and settles it.
    async fn deliver(&self, delivery: TriggerDelivery) {
        let store = self.store.clone();
        let id = delivery.trigger_id.clone();
        let checked = tokio::task::spawn_blocking(move || -> Result<LocalTrigger, String> {
            let trigger = store
                .get(&id)
                .map_err(|e| e.to_string())?
                .ok_or_else(|| "trigger not found".to_owned())?;
            if !trigger.enabled {
                return Err("trigger is disabled".into());
            }
            if !store.is_trusted(&trigger).map_err(|e| e.to_string())? {
                return Err(
                    "held: this trigger was created or changed outside /trigger (a file write in the \
                            workspace); create it again with /trigger in the chat it should answer"
                        .into(),
                );
            }
            Ok(trigger)
        })
        .await
        .unwrap_or_else(|e| Err(e.to_string()));
        let outcome = match checked {
            Err(why) => Err(DeliveryFailure {
                retry: false,
                error: why.into(),
            }),
            Ok(trigger) => (self.handler)(trigger, delivery.clone()).await,
        };
        let store = self.store.clone();
        let _ = tokio::task::spawn_blocking(move || {
            let error = outcome.as_ref().err().map(|f| f.error.to_string());
            match &outcome {
                Ok(_) => store.complete(&delivery),
                Err(f) if f.retry => {
                    store.retry(&delivery, error.as_deref().unwrap_or_default());
                }
                Err(_) => store.complete(&delivery),
            }
            if let Some(e) = &error {
                tracing::warn!(trigger = %delivery.trigger_id, delivery = %delivery.id, error = %e, "trigger: delivery failed");
            }
            if let Err(e) = store.record(&delivery.trigger_id, delivery.created_at_ms, error.as_deref()) {
                tracing::warn!(error = %e, "trigger: cannot record a run");
            }
        })
        .await;
    }
}
