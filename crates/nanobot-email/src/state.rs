//! The state file: per mailbox, its UIDVALIDITY and the last UID handled, so mail is handled once across
//! restarts and reconnects.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::EmailError;

/// Where one mailbox stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MailboxState {
    /// The mailbox's UIDVALIDITY when `last_uid` was recorded (UIDs of another validity mean nothing).
    pub uid_validity: u32,
    /// The highest UID handled (answered or skipped).
    pub last_uid: u32,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct OnDisk {
    version: u32,
    mailboxes: BTreeMap<String, MailboxState>,
}

/// The state file (`<data>/email/state.json`), written atomically (temporary file, fsync, rename).
#[derive(Debug)]
pub struct StateFile {
    path: PathBuf,
    data: OnDisk,
}

impl StateFile {
    /// Loads the file; a missing file is an empty state. A file that is not valid is an error naming it (it is
    /// never overwritten silently).
    pub fn load(path: impl Into<PathBuf>) -> Result<Self, EmailError> {
        let path = path.into();
        let data = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| EmailError::State {
                path: path.display().to_string(),
                message: e.to_string(),
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => OnDisk {
                version: 1,
                ..OnDisk::default()
            },
            Err(e) => return Err(EmailError::io(&path, e)),
        };
        Ok(Self { path, data })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The recorded state of mailbox `key` (`user@host:port/mailbox`).
    pub fn get(&self, key: &str) -> Option<MailboxState> {
        self.data.mailboxes.get(key).copied()
    }

    /// Records `state` for `key` and writes the file durably.
    pub fn set(&mut self, key: &str, state: MailboxState) -> Result<(), EmailError> {
        if self.get(key) == Some(state) {
            return Ok(());
        }
        self.data.version = 1;
        self.data.mailboxes.insert(key.to_string(), state);
        self.save()
    }

    fn save(&self) -> Result<(), EmailError> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(|e| EmailError::io(dir, e))?;
        let bytes = serde_json::to_vec_pretty(&self.data).map_err(|e| EmailError::State {
            path: self.path.display().to_string(),
            message: e.to_string(),
        })?;
        nanobot_util::write_atomic(&self.path, &bytes).map_err(|e| EmailError::io(&e.path, e.source))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("email").join("state.json");
        let mut s = StateFile::load(&path).unwrap();
        assert_eq!(s.get("a"), None);
        let st = MailboxState {
            uid_validity: 7,
            last_uid: 42,
        };
        s.set("a", st).unwrap();
        assert_eq!(StateFile::load(&path).unwrap().get("a"), Some(st));
        std::fs::write(&path, "{not json").unwrap();
        let err = StateFile::load(&path).unwrap_err().to_string();
        assert!(err.contains("state.json"), "{err}");
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "{not json",
            "a broken file is left alone"
        );
    }
}
