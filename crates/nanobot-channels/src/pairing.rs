//! Pairing: how someone not on a channel's allow-list asks the owner for access.
//!
//! A denied direct message gets a code (`XXXX-XXXX`, valid for [`PAIRING_TTL`]); the owner approves it with
//! `/pairing approve CODE` from an allowed account (or through the CLI calling [`PairingStore::approve`]).
//! Approved senders are remembered per channel in one JSON file under the config directory, `pairing.json`, in
//! 0.3.5's format, so that either program reads what the other wrote:
//!
//! ```json
//! {
//!   "approved": {"telegram": ["42|alice"]},
//!   "pending": {"K7QM-3XPA": {"channel": "slack", "sender_id": "U1", "created_at": 1764543000.5,
//!                             "expires_at": 1764543600.5, "chat_id": "D1"}}
//! }
//! ```
//!
//! (`chat_id` is nanobot-rs's; 0.3.5 ignores it.) The file is read again for every operation, as 0.3.5 does, so a
//! code approved by another process (the terminal's `/pairing`, the Python nanobot) counts at once, and written
//! atomically (mode 0600) after every change. Files written by earlier nanobot-rs (`pending` as a list) are read too.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use chrono::{DateTime, Utc};
use rand::Rng;
use serde::{Deserialize, Serialize};

/// How long a pairing code stays valid.
pub const PAIRING_TTL: Duration = Duration::from_secs(10 * 60);

/// Letters and digits that cannot be mistaken for one another (no `0/O`, `1/I/L`).
const CODE_ALPHABET: &[u8] = b"ABCDEFGHJKMNPQRSTUVWXYZ23456789";

/// Errors from the pairing store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PairingError {
    /// Reading or writing the store failed.
    #[error("pairing store {path}: {source}")]
    Io {
        /// The store file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The store file is not valid JSON of the expected shape.
    #[error("pairing store {path}: invalid JSON at line {line}, column {column}: {source}")]
    Parse {
        /// The store file.
        path: PathBuf,
        /// Line of the error.
        line: usize,
        /// Column of the error.
        column: usize,
        /// The parser's error.
        #[source]
        source: serde_json::Error,
    },
    /// The file is JSON but not a pairing store.
    #[error("pairing store {path}: {what}")]
    Invalid {
        /// The store file.
        path: PathBuf,
        /// What is wrong.
        what: &'static str,
    },
    /// No pending request has this code.
    #[error("no pending pairing request with code {0}")]
    UnknownCode(String),
    /// The code existed but is older than [`PAIRING_TTL`].
    #[error("pairing code {0} has expired; ask for a new one")]
    Expired(String),
}

/// A pending (or just approved) request for access.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PairingRequest {
    /// The code, `XXXX-XXXX`.
    pub code: String,
    /// Channel the request came from.
    pub channel: String,
    /// The sender as the channel identifies it (`12345|alice`).
    pub sender_id: String,
    /// The chat the request came from.
    pub chat_id: String,
    /// When the code was issued.
    pub created_at: DateTime<Utc>,
    /// When the code stops being valid.
    pub expires_at: DateTime<Utc>,
}

/// The store's contents.
#[derive(Debug, Default)]
struct PairingFile {
    /// channel → approved sender ids, as the channel gave them (`12345|alice`; 0.3.5 compares them whole).
    approved: BTreeMap<String, Vec<String>>,
    pending: Vec<PairingRequest>,
}

/// One pending request as 0.3.5 keeps it under its code (times in seconds since the epoch).
#[derive(Debug, Serialize, Deserialize)]
struct PendingEntry {
    channel: String,
    sender_id: serde_json::Value,
    #[serde(default)]
    created_at: Option<serde_json::Value>,
    expires_at: serde_json::Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    chat_id: Option<String>,
}

/// Approved senders and pending pairing codes, persisted as JSON (module docs).
#[derive(Debug)]
pub struct PairingStore {
    path: PathBuf,
    /// Held for each read-change-write, so that this process's changes never interleave.
    busy: Mutex<()>,
}

/// The stable part of a sender id: `12345|alice` → `12345`.
fn id_part(sender_id: &str) -> &str {
    sender_id.split('|').next().unwrap_or(sender_id)
}

/// `abcd efgh`, `ABCDEFGH`, `abcd-efgh` → `ABCD-EFGH`.
fn normalize_code(code: &str) -> String {
    let raw: String = code
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_uppercase())
        .collect();
    if raw.len() == 8 {
        format!("{}-{}", &raw[..4], &raw[4..])
    } else {
        raw
    }
}

impl PairingStore {
    /// Opens (or prepares to create) the store at `path`; a file that cannot be read or is not a pairing store
    /// is an error now, rather than at the first message.
    pub fn open(path: impl Into<PathBuf>) -> Result<Self, PairingError> {
        let store = Self {
            path: path.into(),
            busy: Mutex::new(()),
        };
        store.load()?;
        Ok(store)
    }

    /// Opens `<config_dir>/pairing.json`.
    pub fn in_config_dir(config_dir: &Path) -> Result<Self, PairingError> {
        Self::open(config_dir.join("pairing.json"))
    }

    /// The file the store lives in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn lock(&self) -> MutexGuard<'_, ()> {
        nanobot_util::lock(&self.busy)
    }

    /// The file's contents now (empty when it does not exist).
    fn load(&self) -> Result<PairingFile, PairingError> {
        let invalid = |what| PairingError::Invalid {
            path: self.path.clone(),
            what,
        };
        let bytes = match nanobot_util::read_bounded(&self.path, STORE_MAX_BYTES) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(PairingFile::default()),
            // the only data error of a bounded read
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                return Err(invalid("the file is larger than a pairing store can be (4 MiB)"));
            }
            Err(source) => {
                return Err(PairingError::Io {
                    path: self.path.clone(),
                    source,
                });
            }
        };
        let text = String::from_utf8(bytes).map_err(|_| invalid("the file is not UTF-8 text"))?;
        if text.trim().is_empty() {
            return Ok(PairingFile::default());
        }
        PairingFile::parse(&text).map_err(|e| match e {
            FileError::Json(source) => PairingError::Parse {
                line: source.line(),
                column: source.column(),
                path: self.path.clone(),
                source,
            },
            FileError::Shape(what) => invalid(what),
        })
    }

    /// True when `sender_id` was approved on `channel`: the same id, or the same id part (`12345` of
    /// `12345|alice`, so that a new username keeps the approval). An unreadable store approves no one.
    pub fn is_approved(&self, channel: &str, sender_id: &str) -> bool {
        let _busy = self.lock();
        match self.load() {
            Ok(state) => state
                .approved
                .get(channel)
                .is_some_and(|ids| ids.iter().any(|a| same_sender(a, sender_id))),
            Err(e) => {
                tracing::warn!(error = %e, "pairing store unreadable: sender not approved");
                false
            }
        }
    }

    /// Issues a code for `sender_id` on `channel`, or returns the pending one it already has.
    pub fn request(
        &self,
        channel: &str,
        sender_id: &str,
        chat_id: &str,
    ) -> Result<PairingRequest, PairingError> {
        self.request_at(channel, sender_id, chat_id, Utc::now())
    }

    /// [`PairingStore::request`] at a given time (for tests and replay).
    pub fn request_at(
        &self,
        channel: &str,
        sender_id: &str,
        chat_id: &str,
        now: DateTime<Utc>,
    ) -> Result<PairingRequest, PairingError> {
        let _busy = self.lock();
        let mut state = self.load()?;
        state.pending.retain(|r| r.expires_at > now);
        let id = id_part(sender_id);
        if let Some(existing) = state
            .pending
            .iter()
            .find(|r| r.channel == channel && id_part(&r.sender_id) == id)
        {
            return Ok(existing.clone());
        }
        let code = loop {
            let code = random_code();
            if !state.pending.iter().any(|r| r.code == code) {
                break code;
            }
        };
        let ttl = chrono::Duration::from_std(PAIRING_TTL).unwrap_or(chrono::Duration::minutes(10));
        let request = PairingRequest {
            code,
            channel: channel.to_string(),
            sender_id: sender_id.to_string(),
            chat_id: chat_id.to_string(),
            created_at: now,
            expires_at: now + ttl,
        };
        state.pending.push(request.clone());
        self.save(&state)?;
        Ok(request)
    }

    /// Approves the request with `code` (any case, dash optional) and returns it.
    pub fn approve(&self, code: &str) -> Result<PairingRequest, PairingError> {
        self.approve_at(code, Utc::now())
    }

    /// [`PairingStore::approve`] at a given time.
    pub fn approve_at(&self, code: &str, now: DateTime<Utc>) -> Result<PairingRequest, PairingError> {
        let code = normalize_code(code);
        let _busy = self.lock();
        let mut state = self.load()?;
        let request = take_pending(&mut state.pending, &code)?;
        if request.expires_at <= now {
            state.pending.retain(|r| r.expires_at > now);
            self.save(&state)?;
            return Err(PairingError::Expired(code));
        }
        let ids = state.approved.entry(request.channel.clone()).or_default();
        if !ids.contains(&request.sender_id) {
            ids.push(request.sender_id.clone());
        }
        self.save(&state)?;
        Ok(request)
    }

    /// Refuses the pending request with `code` (any case, dash optional): it is dropped without approving its
    /// sender, and returned.
    pub fn deny(&self, code: &str) -> Result<PairingRequest, PairingError> {
        let code = normalize_code(code);
        let _busy = self.lock();
        let mut state = self.load()?;
        let request = take_pending(&mut state.pending, &code)?;
        self.save(&state)?;
        Ok(request)
    }

    /// Withdraws `sender_id`'s approval on `channel` (every entry with its id part); true if it was approved.
    pub fn revoke(&self, channel: &str, sender_id: &str) -> Result<bool, PairingError> {
        let _busy = self.lock();
        let mut state = self.load()?;
        let Some(ids) = state.approved.get_mut(channel) else {
            return Ok(false);
        };
        let before = ids.len();
        ids.retain(|a| !same_sender(a, sender_id));
        let removed = ids.len() != before;
        if removed {
            self.save(&state)?;
        }
        Ok(removed)
    }

    /// Requests still waiting for approval at `now` (none when the store cannot be read).
    pub fn pending_at(&self, now: DateTime<Utc>) -> Vec<PairingRequest> {
        let _busy = self.lock();
        let state = self.load().unwrap_or_else(|e| {
            tracing::warn!(error = %e, "pairing store unreadable");
            PairingFile::default()
        });
        state.pending.into_iter().filter(|r| r.expires_at > now).collect()
    }

    /// Approved sender ids per channel (none when the store cannot be read).
    pub fn approved(&self) -> BTreeMap<String, Vec<String>> {
        let _busy = self.lock();
        self.load().map(|s| s.approved).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "pairing store unreadable");
            BTreeMap::new()
        })
    }

    fn save(&self, state: &PairingFile) -> Result<(), PairingError> {
        let io = |source| PairingError::Io {
            path: self.path.clone(),
            source,
        };
        let json = serde_json::to_vec_pretty(&state.to_json()).map_err(|e| io(std::io::Error::other(e)))?;
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        nanobot_util::write_atomic(&self.path, &json).map_err(|e| io(e.into()))
    }
}

/// The largest store read: thousands of senders and codes take a few hundred KiB.
const STORE_MAX_BYTES: u64 = 4 << 20;

/// Whether the stored sender `approved` is `sender_id`: the same, or the same id part.
fn same_sender(approved: &str, sender_id: &str) -> bool {
    approved == sender_id || id_part(approved) == id_part(sender_id)
}

/// Why the file is not a pairing store.
enum FileError {
    Json(serde_json::Error),
    Shape(&'static str),
}

/// Seconds since the epoch (0.3.5's `time.time()`) as a time, to the microsecond.
fn from_epoch_seconds(seconds: f64) -> Option<DateTime<Utc>> {
    if !seconds.is_finite() {
        return None;
    }
    DateTime::from_timestamp_micros((seconds * 1e6).round() as i64)
}

fn to_epoch_seconds(t: DateTime<Utc>) -> f64 {
    t.timestamp_micros() as f64 / 1e6
}

/// A sender id as 0.3.5 keeps it (`str(sender_id)`): a string, or a number written as one.
fn sender_text(value: &serde_json::Value) -> Option<String> {
    match value {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

impl PairingFile {
    /// Reads the file as 0.3.5 does: entries of the wrong shape are left out (an approved list that is not a list,
    /// a pending request without a channel, sender or expiry), as 0.3.5 drops them; only a file that is not JSON,
    /// or not an object, is refused.
    fn parse(text: &str) -> Result<Self, FileError> {
        let root: serde_json::Value = serde_json::from_str(text).map_err(FileError::Json)?;
        let serde_json::Value::Object(mut root) = root else {
            return Err(FileError::Shape("the file is not a JSON object"));
        };
        let mut file = PairingFile::default();
        if let Some(serde_json::Value::Object(approved)) = root.remove("approved") {
            for (channel, ids) in approved {
                if let serde_json::Value::Array(ids) = ids {
                    let mut ids: Vec<String> = ids.iter().filter_map(sender_text).collect();
                    ids.sort();
                    ids.dedup();
                    file.approved.insert(channel, ids);
                }
            }
        }
        match root.remove("pending") {
            // 0.3.5: code → request.
            Some(serde_json::Value::Object(pending)) => {
                for (code, entry) in pending {
                    let Ok(entry) = serde_json::from_value::<PendingEntry>(entry) else {
                        continue;
                    };
                    let (Some(sender_id), Some(expires_at)) = (
                        sender_text(&entry.sender_id),
                        entry.expires_at.as_f64().and_then(from_epoch_seconds),
                    ) else {
                        continue;
                    };
                    if entry.channel.is_empty() {
                        continue;
                    }
                    let ttl =
                        chrono::Duration::from_std(PAIRING_TTL).unwrap_or(chrono::Duration::minutes(10));
                    file.pending.push(PairingRequest {
                        code,
                        channel: entry.channel,
                        chat_id: entry.chat_id.unwrap_or_else(|| id_part(&sender_id).to_owned()),
                        sender_id,
                        created_at: entry
                            .created_at
                            .and_then(|t| t.as_f64())
                            .and_then(from_epoch_seconds)
                            .unwrap_or(expires_at - ttl),
                        expires_at,
                    });
                }
            }
            // Earlier nanobot-rs: a list of requests.
            Some(serde_json::Value::Array(pending)) => {
                file.pending = pending
                    .into_iter()
                    .filter_map(|r| serde_json::from_value(r).ok())
                    .collect();
            }
            _ => {}
        }
        Ok(file)
    }

    /// 0.3.5's layout: approved ids sorted, channels without any left out, pending requests by code.
    fn to_json(&self) -> serde_json::Value {
        let approved: serde_json::Map<String, serde_json::Value> = self
            .approved
            .iter()
            .filter(|(_, ids)| !ids.is_empty())
            .map(|(channel, ids)| {
                let mut ids = ids.clone();
                ids.sort();
                ids.dedup();
                (channel.clone(), serde_json::json!(ids))
            })
            .collect();
        let pending: serde_json::Map<String, serde_json::Value> = self
            .pending
            .iter()
            .map(|r| {
                let entry = PendingEntry {
                    channel: r.channel.clone(),
                    sender_id: serde_json::Value::String(r.sender_id.clone()),
                    created_at: Some(serde_json::json!(to_epoch_seconds(r.created_at))),
                    expires_at: serde_json::json!(to_epoch_seconds(r.expires_at)),
                    chat_id: Some(r.chat_id.clone()),
                };
                (r.code.clone(), serde_json::to_value(entry).unwrap_or_default())
            })
            .collect();
        serde_json::json!({"approved": approved, "pending": pending})
    }
}

fn random_code() -> String {
    let mut rng = rand::rng();
    let mut pick = || char::from(CODE_ALPHABET[rng.random_range(0..CODE_ALPHABET.len())]);
    let a: String = (0..4).map(|_| pick()).collect();
    let b: String = (0..4).map(|_| pick()).collect();
    format!("{a}-{b}")
}

/// Removes and returns the pending request with the (normalised) `code`.
fn take_pending(pending: &mut Vec<PairingRequest>, code: &str) -> Result<PairingRequest, PairingError> {
    let index = pending
        .iter()
        .position(|r| r.code == code)
        .ok_or_else(|| PairingError::UnknownCode(code.to_owned()))?;
    Ok(pending.remove(index))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_code(code: &str) -> bool {
        code.len() == 9
            && code.chars().enumerate().all(|(i, c)| {
                if i == 4 {
                    c == '-'
                } else {
                    CODE_ALPHABET.contains(&(c as u8))
                }
            })
    }

    #[test]
    fn request_approve_persist() {
        let dir = tempfile::tempdir().unwrap();
        let store = PairingStore::in_config_dir(dir.path()).unwrap();
        let now = Utc::now();
        let req = store.request_at("telegram", "42|alice", "42", now).unwrap();
        assert!(is_code(&req.code), "{}", req.code);
        assert_eq!(req.expires_at - req.created_at, chrono::Duration::minutes(10));
        // Asking again while pending gives the same code.
        assert_eq!(
            store.request_at("telegram", "42|alice", "42", now).unwrap().code,
            req.code
        );
        assert!(!store.is_approved("telegram", "42|alice"));

        let lower = req.code.to_lowercase().replace('-', "");
        assert_eq!(store.approve_at(&lower, now).unwrap().sender_id, "42|alice");
        assert!(store.is_approved("telegram", "42|alice"));
        assert!(
            store.is_approved("telegram", "42|renamed"),
            "approval follows the id, not the username"
        );
        assert!(!store.is_approved("discord", "42"));
        assert!(matches!(
            store.approve_at(&req.code, now),
            Err(PairingError::UnknownCode(_))
        ));

        let reopened = PairingStore::in_config_dir(dir.path()).unwrap();
        assert!(reopened.is_approved("telegram", "42"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(reopened.path()).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert!(reopened.revoke("telegram", "42").unwrap());
        assert!(!reopened.is_approved("telegram", "42"));

        // A request the owner denies is gone, and its sender is not approved.
        let req = reopened.request_at("telegram", "77|eve", "77", now).unwrap();
        assert_eq!(
            reopened.deny(&req.code.to_lowercase()).unwrap().sender_id,
            "77|eve"
        );
        assert!(!reopened.is_approved("telegram", "77"));
        assert!(reopened.pending_at(now).is_empty());
        assert!(matches!(
            reopened.deny(&req.code),
            Err(PairingError::UnknownCode(_))
        ));
    }

    #[test]
    fn codes_expire_after_ten_minutes() {
        let dir = tempfile::tempdir().unwrap();
        let store = PairingStore::in_config_dir(dir.path()).unwrap();
        let now = Utc::now();
        let req = store.request_at("telegram", "7", "7", now).unwrap();
        let later = now + chrono::Duration::minutes(10) + chrono::Duration::seconds(1);
        assert!(matches!(
            store.approve_at(&req.code, later),
            Err(PairingError::Expired(_))
        ));
        assert!(!store.is_approved("telegram", "7"));
        // A new request after expiry gets a fresh code entry.
        assert!(store.pending_at(later).is_empty());
        let again = store.request_at("telegram", "7", "7", later).unwrap();
        assert!(store.approve_at(&again.code, later).is_ok());
    }

    #[test]
    fn corrupt_store_is_an_error_with_position() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("pairing.json"), "{\n  \"approved\": [").unwrap();
        let err = PairingStore::in_config_dir(dir.path()).unwrap_err();
        assert!(matches!(err, PairingError::Parse { line: 2, .. }), "{err}");
        assert!(err.to_string().contains("pairing.json"));
    }

    #[test]
    fn reads_and_writes_0_3_5_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pairing.json");
        let now = Utc::now();
        let soon = to_epoch_seconds(now) + 300.0;
        // As 0.3.5 writes it, with what 0.3.5 drops: a non-list, an entry without expiry, a boolean expiry.
        let written = serde_json::json!({
            "approved": {"telegram": ["42|alice"], "discord": [1234], "bad": "x"},
            "pending": {
                "ABCD-EFGH": {"channel": "slack", "sender_id": "U1", "created_at": soon - 300.0, "expires_at": soon},
                "JKLM-NPQR": {"channel": "slack", "sender_id": "U2"},
                "STUV-WXYZ": {"channel": "slack", "sender_id": "U3", "expires_at": true},
            },
            "extra": 1,
        });
        std::fs::write(&path, serde_json::to_vec(&written).unwrap()).unwrap();
        let store = PairingStore::open(&path).unwrap();
        assert!(store.is_approved("telegram", "42|alice"));
        assert!(store.is_approved("discord", "1234"));
        let pending = store.pending_at(now);
        assert_eq!(pending.len(), 1, "{pending:?}");
        assert_eq!(
            (pending[0].code.as_str(), pending[0].sender_id.as_str()),
            ("ABCD-EFGH", "U1")
        );
        assert_eq!(pending[0].chat_id, "U1", "0.3.5 keeps no chat: the sender's");
        assert_eq!(store.approve_at("abcd efgh", now).unwrap().channel, "slack");
        let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"approved": {"discord": ["1234"], "slack": ["U1"], "telegram": ["42|alice"]}, "pending": {}})
        );
        let req = store.request_at("matrix", "@bob:hs", "!room", now).unwrap();
        let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let entry = &json["pending"][&req.code];
        assert_eq!(entry["channel"], "matrix");
        assert_eq!(entry["sender_id"], "@bob:hs");
        assert_eq!(entry["chat_id"], "!room");
        let expires = entry["expires_at"].as_f64().unwrap();
        assert!(
            (expires - entry["created_at"].as_f64().unwrap() - 600.0).abs() < 1e-3,
            "{entry}"
        );
        assert!(
            (expires - to_epoch_seconds(req.expires_at)).abs() < 1e-3,
            "{entry}"
        );
    }

    #[test]
    fn reads_files_of_earlier_nanobot_rs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pairing.json");
        let later = Utc::now() + chrono::Duration::minutes(5);
        let old = serde_json::json!({
            "approved": {"telegram": ["42"]},
            "pending": [{"code": "ABCD-EFGH", "channel": "slack", "senderId": "U1", "chatId": "D1",
                         "createdAt": Utc::now(), "expiresAt": later}],
        });
        std::fs::write(&path, serde_json::to_vec(&old).unwrap()).unwrap();
        let store = PairingStore::open(&path).unwrap();
        assert!(store.is_approved("telegram", "42|alice"));
        assert_eq!(store.pending_at(Utc::now())[0].chat_id, "D1");
    }

    #[test]
    fn another_process_change_counts_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let gateway = PairingStore::in_config_dir(dir.path()).unwrap();
        let terminal = PairingStore::in_config_dir(dir.path()).unwrap();
        let req = gateway.request("telegram", "42|alice", "42").unwrap();
        terminal.approve(&req.code).unwrap();
        assert!(gateway.is_approved("telegram", "42|alice"));
        // The gateway's next change keeps the approval made elsewhere.
        gateway.request("telegram", "77|eve", "77").unwrap();
        assert!(terminal.is_approved("telegram", "42"));
    }

    #[test]
    fn a_file_that_is_not_a_store_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("pairing.json"), "[1, 2]").unwrap();
        let err = PairingStore::in_config_dir(dir.path()).unwrap_err();
        assert!(matches!(err, PairingError::Invalid { .. }), "{err}");
        assert!(
            err.to_string()
                .contains("pairing.json: the file is not a JSON object"),
            "{err}"
        );
        let huge = format!("{{\"approved\": {{}}, \"x\": \"{}\"}}", "a".repeat(5 << 20));
        std::fs::write(dir.path().join("pairing.json"), huge).unwrap();
        let err = PairingStore::in_config_dir(dir.path()).unwrap_err();
        assert!(
            err.to_string().contains("larger than a pairing store can be"),
            "{err}"
        );
        std::fs::write(
            dir.path().join("pairing.json"),
            b"{\"approved\": {\"x\": [\"\xff\"]}}",
        )
        .unwrap();
        let err = PairingStore::in_config_dir(dir.path()).unwrap_err();
        assert!(
            err.to_string()
                .contains("pairing.json: the file is not UTF-8 text"),
            "{err}"
        );
    }
}
