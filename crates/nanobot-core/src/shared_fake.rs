//! A store of shared files in memory for unit tests, with the expected-sequence conflict and the deletions of the
//! real one (`nanobot-store-nats`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use nanobot_util::{SharedFile, SharedFiles, SharedFilesError, lock};

/// Each stored file's sequence and bytes (`None`: deleted).
type Stored = HashMap<String, (u64, Option<Vec<u8>>)>;

/// One replica's view of the store: [`FakeShared::sharing`] gives another replica's.
#[derive(Debug, Default)]
pub(crate) struct FakeShared {
    stored: Arc<Mutex<Stored>>,
    seen: Mutex<HashMap<String, u64>>,
}

impl FakeShared {
    /// Another replica of the same store.
    pub(crate) fn sharing(&self) -> Self {
        Self {
            stored: self.stored.clone(),
            seen: Mutex::default(),
        }
    }
}

impl SharedFiles for FakeShared {
    fn pull(&self, file: SharedFile<'_>) -> Result<bool, SharedFilesError> {
        let stored = lock(&self.stored).get(file.name).cloned();
        if let Some((seq, bytes)) = stored {
            match bytes {
                Some(bytes) => {
                    std::fs::create_dir_all(file.local.parent().expect("a file in a folder"))
                        .expect("a folder");
                    std::fs::write(file.local, bytes).expect("written");
                }
                None => {
                    let _ = std::fs::remove_file(file.local);
                }
            }
            lock(&self.seen).insert(file.name.to_owned(), seq);
        }
        Ok(true)
    }

    fn push(&self, file: SharedFile<'_>) -> Result<(), SharedFilesError> {
        let mut stored = lock(&self.stored);
        let seen = lock(&self.seen).get(file.name).copied().unwrap_or(0);
        let now = stored.get(file.name).map_or(0, |(seq, _)| *seq);
        if now != seen {
            return Err(SharedFilesError::Conflict {
                name: file.name.to_owned(),
            });
        }
        stored.insert(file.name.to_owned(), (now + 1, std::fs::read(file.local).ok()));
        lock(&self.seen).insert(file.name.to_owned(), now + 1);
        Ok(())
    }

    fn list(&self, prefix: &str) -> Result<Vec<String>, SharedFilesError> {
        Ok(lock(&self.stored)
            .keys()
            .filter(|k| k.starts_with(prefix))
            .cloned()
            .collect())
    }
}
