//! Pairing: how someone not on a channel's allow-list asks the owner for access.
//!
//! A denied direct message gets a code (`XXXX-XXXX`, valid for [`PAIRING_TTL`]); the owner approves it with
//! `/pairing approve CODE` from an allowed account (or through the CLI calling [`PairingStore::approve`]).
//! Approved senders are remembered per channel in one JSON file under the config directory.

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

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct PairingFile {
    /// channel → approved sender ids (the id part of `id|username`).
    approved: BTreeMap<String, Vec<String>>,
    pending: Vec<PairingRequest>,
}

/// Approved senders and pending pairing codes, persisted as JSON (written atomically, mode 0600).
#[derive(Debug)]
pub struct PairingStore {
    path: PathBuf,
    state: Mutex<PairingFile>,
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
    /// Opens (or prepares to create) the store at `path`.
    pub fn open(path: impl Into<PathBuf>) -> Result<Self, PairingError> {
        let path = path.into();
        let state = match std::fs::read_to_string(&path) {
            Ok(text) if text.trim().is_empty() => PairingFile::default(),
            Ok(text) => serde_json::from_str(&text).map_err(|source| PairingError::Parse {
                line: source.line(),
                column: source.column(),
                path: path.clone(),
                source,
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => PairingFile::default(),
            Err(source) => return Err(PairingError::Io { path, source }),
        };
        Ok(Self {
            path,
            state: Mutex::new(state),
        })
    }

    /// Opens `<config_dir>/pairing.json`.
    pub fn in_config_dir(config_dir: &Path) -> Result<Self, PairingError> {
        Self::open(config_dir.join("pairing.json"))
    }

    /// The file the store lives in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn lock(&self) -> MutexGuard<'_, PairingFile> {
        // The state is plain data, valid after any panic elsewhere.
        nanobot_util::lock(&self.state)
    }

    /// True when `sender_id`'s id part was approved on `channel`.
    pub fn is_approved(&self, channel: &str, sender_id: &str) -> bool {
        let id = id_part(sender_id);
        self.lock()
            .approved
            .get(channel)
            .is_some_and(|ids| ids.iter().any(|a| a == id))
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
        let mut state = self.lock();
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
        let mut state = self.lock();
        let request = take_pending(&mut state.pending, &code)?;
        if request.expires_at <= now {
            state.pending.retain(|r| r.expires_at > now);
            self.save(&state)?;
            return Err(PairingError::Expired(code));
        }
        let ids = state.approved.entry(request.channel.clone()).or_default();
        let id = id_part(&request.sender_id).to_string();
        if !ids.contains(&id) {
            ids.push(id);
        }
        self.save(&state)?;
        Ok(request)
    }

    /// Refuses the pending request with `code` (any case, dash optional): it is dropped without approving its
    /// sender, and returned.
    pub fn deny(&self, code: &str) -> Result<PairingRequest, PairingError> {
        let code = normalize_code(code);
        let mut state = self.lock();
        let request = take_pending(&mut state.pending, &code)?;
        self.save(&state)?;
        Ok(request)
    }

    /// Withdraws `sender_id`'s approval on `channel`; true if it was approved.
    pub fn revoke(&self, channel: &str, sender_id: &str) -> Result<bool, PairingError> {
        let id = id_part(sender_id);
        let mut state = self.lock();
        let Some(ids) = state.approved.get_mut(channel) else {
            return Ok(false);
        };
        let before = ids.len();
        ids.retain(|a| a != id);
        let removed = ids.len() != before;
        if removed {
            self.save(&state)?;
        }
        Ok(removed)
    }

    /// Requests still waiting for approval at `now`.
    pub fn pending_at(&self, now: DateTime<Utc>) -> Vec<PairingRequest> {
        self.lock()
            .pending
            .iter()
            .filter(|r| r.expires_at > now)
            .cloned()
            .collect()
    }

    /// Approved sender ids per channel.
    pub fn approved(&self) -> BTreeMap<String, Vec<String>> {
        self.lock().approved.clone()
    }

    fn save(&self, state: &PairingFile) -> Result<(), PairingError> {
        let io = |source| PairingError::Io {
            path: self.path.clone(),
            source,
        };
        let json = serde_json::to_vec_pretty(state).map_err(|e| io(std::io::Error::other(e)))?;
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        nanobot_util::write_atomic(&self.path, &json).map_err(|e| io(e.into()))
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
}
