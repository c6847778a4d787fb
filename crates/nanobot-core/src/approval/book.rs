//! Where parked requests and one-time grants are kept: a small file per session in the data directory
//! (`approvals/<hash of the session key>.json`), changed under a file lock so replicas sharing a home agree, and
//! published to the shared store when replicas have homes of their own ([`nanobot_util::SharedFiles`], under the
//! same name). A request parked by one replica is decided with `/approve ID` on any other, and the grant is spent
//! by whichever replica runs the next turn; both outlive a restart within their ten minutes.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// How long an unanswered request can still be approved with `/approve ID`, and how long such an approval
/// waits for the call to come again.
pub(crate) const PARKED_FOR: Duration = Duration::from_secs(600);

/// At most this many parked requests and grants are kept per session (the oldest go first).
const MAX_PER_SESSION: usize = 32;

/// The folder of the books, in the data directory and in a shared store.
pub(crate) const BOOKS_DIR: &str = "approvals";

/// How long a change waits for another process's change of the books.
const LOCK_BOUND: std::time::Duration = std::time::Duration::from_secs(10);

/// How many times a change is made again on top of another replica's.
const ATTEMPTS: usize = 5;

/// A request nobody could answer when it was made; decided later with `/approve ID` or `/deny ID`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Parked {
    pub(crate) id: String,
    /// Who may decide it (with the configured approvers): the person who started the turn; `None` when an
    /// unattended run made the call (then any person in that chat decides, as the run acts in that chat's name).
    pub(crate) asker: Option<String>,
    /// The exact call: tool name and arguments.
    pub(crate) call: String,
    pub(crate) action: String,
    /// When it was parked (milliseconds since the Unix epoch).
    pub(crate) at_ms: i64,
}

/// A one-time approval of one exact call.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Grant {
    pub(crate) call: String,
    /// The turns that may spend it: the asker's (a person, or `None`: an unattended run) or the approver's own.
    pub(crate) asker: Option<String>,
    pub(crate) approver: String,
    /// When it was granted (milliseconds since the Unix epoch).
    pub(crate) at_ms: i64,
}

impl Grant {
    pub(crate) fn usable_by(&self, asker: Option<&str>) -> bool {
        asker == self.asker.as_deref() || asker == Some(self.approver.as_str())
    }
}

/// One session's parked requests and grants.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Entries {
    /// The session, for a reader of the file (its name is a hash).
    #[serde(default)]
    session: String,
    #[serde(default)]
    pub(crate) parked: Vec<Parked>,
    #[serde(default)]
    pub(crate) grants: Vec<Grant>,
}

impl Entries {
    /// Drops what is older than [`PARKED_FOR`] and the oldest beyond [`MAX_PER_SESSION`].
    fn prune(&mut self, now: i64) {
        let max_age = i64::try_from(PARKED_FOR.as_millis()).unwrap_or(i64::MAX);
        let young = |at: i64| now.saturating_sub(at) < max_age;
        self.parked.retain(|p| young(p.at_ms));
        self.grants.retain(|g| young(g.at_ms));
        keep_last(&mut self.parked);
        keep_last(&mut self.grants);
    }

    fn is_empty(&self) -> bool {
        self.parked.is_empty() && self.grants.is_empty()
    }
}

fn keep_last<T>(list: &mut Vec<T>) {
    if list.len() > MAX_PER_SESSION {
        let extra = list.len() - MAX_PER_SESSION;
        list.drain(..extra);
    }
}

/// Now, in milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The books of every session of an agent (see the [module docs](self)).
#[derive(Debug)]
pub(crate) struct Books {
    dir: PathBuf,
    shared: Option<Arc<dyn nanobot_util::SharedFiles>>,
    /// One change at a time in this process (the file lock orders processes).
    local: Mutex<()>,
}

impl Books {
    /// The books kept in `<data_dir>/approvals/`.
    pub(crate) fn new(data_dir: &Path) -> Self {
        Self {
            dir: data_dir.join(BOOKS_DIR),
            shared: None,
            local: Mutex::new(()),
        }
    }

    /// Publishes them to `files` too, shared with replicas that have homes of their own.
    pub(crate) fn with_shared(mut self, files: Arc<dyn nanobot_util::SharedFiles>) -> Self {
        self.shared = Some(files);
        self
    }

    /// The file name of `session`'s book (a hash: session keys hold characters no file name may).
    fn name(session: &str) -> String {
        use sha2::Digest as _;
        let hash = sha2::Sha256::digest(session.as_bytes());
        let hex: String = hash.iter().take(12).map(|b| format!("{b:02x}")).collect();
        format!("{hex}.json")
    }

    /// Reads `session`'s book, lets `change` change it (returning whether it did, and its result) and saves it
    /// (published to the shared store; on a conflict with another replica the change is made again on top of
    /// theirs). A book left empty is deleted.
    pub(crate) fn update<R>(
        &self,
        session: &str,
        mut change: impl FnMut(&mut Entries) -> (bool, R),
    ) -> std::io::Result<R> {
        let _here = nanobot_util::lock(&self.local);
        let _lock = self.lock()?;
        let file_name = Self::name(session);
        let path = self.dir.join(&file_name);
        let shared_name = format!("{BOOKS_DIR}/{file_name}");
        for _ in 0..ATTEMPTS {
            if let Some(files) = &self.shared {
                files
                    .pull(nanobot_util::SharedFile::new(&shared_name, &path))
                    .map_err(std::io::Error::other)?;
            }
            let mut entries = load(&path);
            let now = now_ms();
            let before = entries.parked.len() + entries.grants.len();
            entries.prune(now);
            let (changed, out) = change(&mut entries);
            let pruned = entries.parked.len() + entries.grants.len() != before;
            if !changed && !pruned {
                return Ok(out);
            }
            entries.session = session.to_owned();
            save(&path, &entries)?;
            let Some(files) = &self.shared else {
                return Ok(out);
            };
            match files.push(nanobot_util::SharedFile::new(&shared_name, &path)) {
                Ok(()) => return Ok(out),
                Err(nanobot_util::SharedFilesError::Conflict { .. }) => {}
                Err(e) => return Err(std::io::Error::other(e)),
            }
        }
        Err(std::io::Error::other(format!(
            "{shared_name}: other replicas kept changing it first ({ATTEMPTS} tries)"
        )))
    }

    /// The lock every process changing these books takes (released when dropped).
    fn lock(&self) -> std::io::Result<File> {
        std::fs::create_dir_all(&self.dir)?;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.dir.join(".lock"))?;
        let deadline = std::time::Instant::now() + LOCK_BOUND;
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(file),
                Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(std::io::Error::other(format!(
                        "{}: another process has held the lock for {} s",
                        self.dir.join(".lock").display(),
                        LOCK_BOUND.as_secs()
                    )));
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(e),
            }
        }
    }
}

fn load(path: &Path) -> Entries {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
            // Nanobot's own file: an unreadable one is started again (what it held expires in minutes anyway).
            tracing::warn!(file = %path.display(), error = %e, "an approvals file cannot be read; starting it again");
            Entries::default()
        }),
        Err(_) => Entries::default(),
    }
}

fn save(path: &Path, entries: &Entries) -> std::io::Result<()> {
    if entries.is_empty() {
        return match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        };
    }
    let json = serde_json::to_vec_pretty(entries).map_err(std::io::Error::other)?;
    nanobot_util::write_atomic(path, &json).map_err(std::io::Error::other)
}
