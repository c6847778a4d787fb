//! [`SharedFiles`]: files of the home kept in a store several processes (gateway replicas on other machines)
//! share, with each process's local file as its materialised copy.
//!
//! The storage crates (sessions, cron, memory) call [`SharedFiles::pull`] before they read or change a file and
//! [`SharedFiles::push`] after they changed it, with the key's own lock held. `None` in their options is the
//! default: local files only, no call made, nothing changed. The implementation on NATS JetStream is
//! `nanobot-store-nats`; this trait lets the storage crates use it without depending on NATS.
//!
//! The calls block (the storage crates run their file work on tokio's blocking pool); an implementation bounds
//! every wait.

use std::path::Path;

/// One file as both sides know it.
#[derive(Clone, Copy, Debug)]
pub struct SharedFile<'a> {
    /// Its name in the shared store: a relative path with `/` separators, the same on every replica
    /// (`sessions/<stem>.jsonl`, `cron/jobs.json`…), independent of where the local home is.
    pub name: &'a str,
    /// The local copy.
    pub local: &'a Path,
}

impl<'a> SharedFile<'a> {
    /// The file called `name` in the store, kept locally at `local`.
    pub fn new(name: &'a str, local: &'a Path) -> Self {
        Self { name, local }
    }
}

/// Why a shared file could not be brought up to date or published.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SharedFilesError {
    /// Another replica changed the file after this one last read it: this replica's change was not stored,
    /// and its local copy has been brought back to the shared one (the caller may retry the whole operation).
    #[error(
        "shared file {name}: another replica changed it first; this change was not stored and the local copy \
         was brought up to date"
    )]
    Conflict {
        /// The file's name in the store.
        name: String,
    },
    /// Reading or writing the local copy failed.
    #[error("shared file {name}: cannot {op} {}", path.display())]
    Io {
        /// The file's name in the store.
        name: String,
        /// What was being done.
        op: &'static str,
        /// The local file.
        path: std::path::PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The store could not be reached or answered with an error (the message names the server).
    #[error("shared file {name}: {what}: {reason}")]
    Unavailable {
        /// The file's name in the store.
        name: String,
        /// What was being done.
        what: String,
        /// What failed.
        reason: String,
    },
    /// The name cannot be stored, or what the store holds is not what this version writes.
    #[error("shared file {name}: {reason}")]
    Invalid {
        /// The file's name in the store.
        name: String,
        /// What is wrong.
        reason: String,
    },
}

/// A store of files shared between processes. See the [module docs](self).
pub trait SharedFiles: Send + Sync + std::fmt::Debug {
    /// Brings the local copy of `file` up to what the store holds: appends what other replicas appended,
    /// replaces it when they rewrote it, deletes it when they deleted it. A local copy changed since the last
    /// [`SharedFiles::pull`]/[`SharedFiles::push`] without being pushed is replaced by the stored one (the store
    /// is the source of truth); a file the store has never held is left as it is. Returns whether the local copy
    /// changed.
    fn pull(&self, file: SharedFile<'_>) -> Result<bool, SharedFilesError>;

    /// Publishes what changed in the local copy since the last pull or push: the appended bytes, the whole
    /// file, or its deletion. Fails with [`SharedFilesError::Conflict`] when another replica changed the file
    /// first (the local copy is then brought back to the stored one). Nothing changed: nothing sent.
    fn push(&self, file: SharedFile<'_>) -> Result<(), SharedFilesError>;

    /// The names of the files the store holds whose name starts with `prefix` (deleted ones may be listed;
    /// pulling them removes the local copy).
    fn list(&self, prefix: &str) -> Result<Vec<String>, SharedFilesError>;
}

/// Each stored file's sequence and bytes (`None`: deleted).
type Stored = std::collections::HashMap<String, (u64, Option<Vec<u8>>)>;

/// A [`SharedFiles`] store held in memory, with the real store's rules (a push conflicts when another replica
/// pushed the file since this one last pulled it; deletions are kept): for tests of code that shares files, and
/// for processes of one program sharing files without a server. [`MemorySharedFiles::sharing`] gives another
/// replica's view of the same store.
#[derive(Debug, Default)]
pub struct MemorySharedFiles {
    stored: std::sync::Arc<std::sync::Mutex<Stored>>,
    seen: std::sync::Mutex<std::collections::HashMap<String, u64>>,
}

impl MemorySharedFiles {
    /// An empty store, seen by its first replica.
    pub fn new() -> Self {
        Self::default()
    }

    /// Another replica of the same store.
    pub fn sharing(&self) -> Self {
        Self {
            stored: self.stored.clone(),
            seen: std::sync::Mutex::default(),
        }
    }
}

impl SharedFiles for MemorySharedFiles {
    fn pull(&self, file: SharedFile<'_>) -> Result<bool, SharedFilesError> {
        let stored = crate::lock(&self.stored).get(file.name).cloned();
        let Some((seq, bytes)) = stored else {
            return Ok(false);
        };
        let io = |op, source| SharedFilesError::Io {
            name: file.name.to_owned(),
            op,
            path: file.local.to_owned(),
            source,
        };
        match bytes {
            Some(bytes) => {
                if let Some(dir) = file.local.parent() {
                    std::fs::create_dir_all(dir).map_err(|e| io("create the folder of", e))?;
                }
                std::fs::write(file.local, bytes).map_err(|e| io("write", e))?;
            }
            None => match std::fs::remove_file(file.local) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io("remove", e)),
                _ => {}
            },
        }
        crate::lock(&self.seen).insert(file.name.to_owned(), seq);
        Ok(true)
    }

    fn push(&self, file: SharedFile<'_>) -> Result<(), SharedFilesError> {
        let mut stored = crate::lock(&self.stored);
        let seen = crate::lock(&self.seen).get(file.name).copied().unwrap_or(0);
        let now = stored.get(file.name).map_or(0, |(seq, _)| *seq);
        if now != seen {
            // As the real store does: the local copy is brought back to the stored one.
            let bytes = stored.get(file.name).and_then(|(_, b)| b.clone());
            drop(stored);
            if let Some(bytes) = bytes {
                let _ = std::fs::write(file.local, bytes);
                crate::lock(&self.seen).insert(file.name.to_owned(), now);
            }
            return Err(SharedFilesError::Conflict {
                name: file.name.to_owned(),
            });
        }
        let bytes = match std::fs::read(file.local) {
            Ok(b) => Some(b),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(source) => {
                return Err(SharedFilesError::Io {
                    name: file.name.to_owned(),
                    op: "read",
                    path: file.local.to_owned(),
                    source,
                });
            }
        };
        stored.insert(file.name.to_owned(), (now + 1, bytes));
        crate::lock(&self.seen).insert(file.name.to_owned(), now + 1);
        Ok(())
    }

    fn list(&self, prefix: &str) -> Result<Vec<String>, SharedFilesError> {
        Ok(crate::lock(&self.stored)
            .keys()
            .filter(|k| k.starts_with(prefix))
            .cloned()
            .collect())
    }
}
