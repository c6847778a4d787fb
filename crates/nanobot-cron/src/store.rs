//! The job store: `<workspace>/cron/jobs.json`, shared safely between processes.
//!
//! * Reads are cached and re-read whenever the file's size, modification time or inode changed, so
//!   edits made by another process (the CLI while the gateway runs, or the Python nanobot) are seen
//!   without a restart.
//! * Every change is a read-modify-write under an advisory lock on `jobs.json.lock`: the file is
//!   re-read *after* taking the lock, the change is applied to that fresh copy, and the result is
//!   written atomically (temporary file + rename). Changes are expressed as operations on the current
//!   jobs (keyed by job id), never as "write my snapshot back", so two processes' edits both survive.
//! * A file that cannot be parsed is never overwritten; single jobs that cannot be parsed are kept
//!   verbatim and written back untouched.
//! * The store lives in the workspace, where the model's commands can write, so its files are opened
//!   beneath a handle of the workspace ([`nanobot_util::ConfinedDir`]; see [`JobStore::new`]): a
//!   `cron/` folder swapped for a symlink, or a hard-linked `jobs.json`, is refused, never followed out.
//! * Gateway replicas with separate homes share the store through [`JobStore::with_shared`] (the NATS
//!   server): `jobs.json` is brought up to date before each read and change, and each change is published
//!   before it returns, conditional on the version it was made on; a change another replica made first
//!   brings the local copy up to date and [`JobStore::update`] makes this change again on it (after
//!   [`SHARED_CHANGE_ATTEMPTS`] lost races it fails with [`CronError::Shared`] and nothing of it is stored).

use nanobot_util::lock;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use nanobot_util::{ConfinedDir, SharedFile, SharedFiles, SharedFilesError};
use serde_json::{Map, Value};

use crate::{CronError, CronJob};

/// The contents of jobs.json.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct StoreFile {
    /// Format version (1).
    pub version: u64,
    /// The jobs, in file order.
    pub jobs: Vec<CronJob>,
    /// Jobs this version could not read, kept as they were and written back after `jobs`.
    pub unparsed: Vec<Value>,
    /// Unknown top-level fields, kept.
    pub extra: Map<String, Value>,
}

impl Default for StoreFile {
    fn default() -> Self {
        StoreFile {
            version: 1,
            jobs: Vec::new(),
            unparsed: Vec::new(),
            extra: Map::new(),
        }
    }
}

impl StoreFile {
    /// Parses jobs.json text. `path` is used in messages.
    pub fn parse(text: &str, path: &Path) -> Result<Self, CronError> {
        if text.trim().is_empty() {
            return Ok(StoreFile::default());
        }
        let value: Value = serde_json::from_str(text).map_err(|source| CronError::Parse {
            path: path.to_path_buf(),
            source,
        })?;
        let Value::Object(mut top) = value else {
            let source = <serde_json::Error as serde::de::Error>::custom(
                "expected an object with `version` and `jobs`",
            );
            return Err(CronError::Parse {
                path: path.to_path_buf(),
                source,
            });
        };
        let version = top.remove("version").and_then(|v| v.as_u64()).unwrap_or(1);
        let raw_jobs = match top.remove("jobs") {
            Some(Value::Array(jobs)) => jobs,
            None | Some(Value::Null) => Vec::new(),
            Some(_) => {
                let source = <serde_json::Error as serde::de::Error>::custom("`jobs` must be a list");
                return Err(CronError::Parse {
                    path: path.to_path_buf(),
                    source,
                });
            }
        };
        let mut file = StoreFile {
            version,
            extra: top,
            ..StoreFile::default()
        };
        for (i, raw) in raw_jobs.into_iter().enumerate() {
            match serde_json::from_value::<CronJob>(raw.clone()) {
                Ok(job) => file.jobs.push(job),
                Err(e) => {
                    tracing::warn!(path = %path.display(), index = i, "cron job cannot be read and is kept as is: {e}");
                    file.unparsed.push(raw);
                }
            }
        }
        Ok(file)
    }

    /// Serialises in the Python layout (2-space indent, camelCase).
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        let mut top = Map::new();
        top.insert("version".into(), Value::from(self.version));
        let mut jobs = Vec::with_capacity(self.jobs.len() + self.unparsed.len());
        for job in &self.jobs {
            jobs.push(serde_json::to_value(job)?);
        }
        jobs.extend(self.unparsed.iter().cloned());
        top.insert("jobs".into(), Value::Array(jobs));
        for (k, v) in &self.extra {
            top.insert(k.clone(), v.clone());
        }
        serde_json::to_string_pretty(&Value::Object(top))
    }

    /// The job with this id.
    pub fn job(&self, id: &str) -> Option<&CronJob> {
        self.jobs.iter().find(|j| j.id == id)
    }

    /// The job with this id, mutably.
    pub fn job_mut(&mut self, id: &str) -> Option<&mut CronJob> {
        self.jobs.iter_mut().find(|j| j.id == id)
    }

    /// Removes and returns the job with this id.
    pub fn remove(&mut self, id: &str) -> Option<CronJob> {
        let i = self.jobs.iter().position(|j| j.id == id)?;
        Some(self.jobs.remove(i))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Fingerprint {
    len: u64,
    modified: Option<SystemTime>,
    inode: u64,
}

fn fingerprint(files: &ConfinedDir, rel: &Path) -> Option<Fingerprint> {
    let meta = files.open_read(rel).ok()??.metadata().ok()?;
    let inode = std::os::unix::fs::MetadataExt::ino(&meta);
    Some(Fingerprint {
        len: meta.len(),
        modified: meta.modified().ok(),
        inode,
    })
}

/// The jobs.json store (see the module docs for the concurrency rules).
#[derive(Debug)]
pub struct JobStore {
    files: ConfinedDir,
    rel: PathBuf,
    path: PathBuf,
    lock_rel: PathBuf,
    lock_path: PathBuf,
    cache: Mutex<Option<(Option<Fingerprint>, StoreFile)>>,
    shared: Option<Arc<dyn SharedFiles>>,
}

/// The name of `jobs.json` in the shared store.
pub const SHARED_JOBS_NAME: &str = "cron/jobs.json";

/// How many times [`JobStore::update`] applies a change another replica beat to the shared store (each time to
/// what that replica stored) before it gives up and returns the conflict.
pub const SHARED_CHANGE_ATTEMPTS: u32 = 8;

impl JobStore {
    /// A store at `path` (normally `<workspace>/cron/jobs.json`). Its files (`jobs.json`, its lock, the
    /// Python nanobot's queue and queue lock) are opened beneath a handle of the directory above the one holding
    /// `jobs.json` (the workspace), so a `cron` folder replaced by a symlink that leads out, a hard-linked
    /// `jobs.json` or a FIFO is refused, never followed. Nothing is read or created yet.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        let name = path.file_name().map_or_else(|| "jobs.json".into(), PathBuf::from);
        let dir = path.parent().unwrap_or(Path::new(""));
        let (root, rel) = match (dir.parent(), dir.file_name()) {
            (Some(root), Some(cron)) => (root, Path::new(cron).join(name)),
            _ => (dir, name),
        };
        let root = if root.as_os_str().is_empty() {
            Path::new(".")
        } else {
            root
        };
        Self::beneath(ConfinedDir::new(root), rel)
    }

    fn beneath(files: ConfinedDir, rel: PathBuf) -> Self {
        let mut lock_name = rel
            .file_name()
            .map(|n| n.to_os_string())
            .unwrap_or_else(|| "jobs.json".into());
        lock_name.push(".lock");
        let lock_rel = rel.with_file_name(lock_name);
        JobStore {
            path: files.display_path(&rel),
            lock_path: files.display_path(&lock_rel),
            files,
            rel,
            lock_rel,
            cache: Mutex::new(None),
            shared: None,
        }
    }

    /// Keeps `jobs.json` in `files` too (gateway replicas with separate homes; stored as [`SHARED_JOBS_NAME`]): see
    /// the module docs.
    #[must_use]
    pub fn with_shared(mut self, files: Arc<dyn SharedFiles>) -> Self {
        self.shared = Some(files);
        self
    }

    /// The local `jobs.json`, for the shared store: refused when it or its folder is a symbolic link (the
    /// shared store writes with plain paths, which would follow it).
    fn shared_local(&self) -> Result<Option<(&dyn SharedFiles, &Path)>, CronError> {
        let Some(shared) = &self.shared else {
            return Ok(None);
        };
        for p in [Some(self.path.as_path()), self.path.parent()]
            .into_iter()
            .flatten()
        {
            if fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink()) {
                return Err(CronError::Io {
                    path: p.to_owned(),
                    source: std::io::Error::other("a symbolic link: refused for the shared cron store"),
                });
            }
        }
        Ok(Some((shared.as_ref(), self.path.as_path())))
    }

    /// Brings `jobs.json` up to date from the shared store (nothing without one).
    fn pull(&self) -> Result<(), CronError> {
        if let Some((shared, local)) = self.shared_local()? {
            shared.pull(SharedFile::new(SHARED_JOBS_NAME, local))?;
        }
        Ok(())
    }

    /// Publishes what changed in `jobs.json` (nothing without a shared store).
    fn push(&self) -> Result<(), CronError> {
        if let Some((shared, local)) = self.shared_local()? {
            shared.push(SharedFile::new(SHARED_JOBS_NAME, local))?;
        }
        Ok(())
    }

    /// The directory the store's files are confined to and `jobs.json` relative to it.
    pub(crate) fn confined(&self) -> (&ConfinedDir, &Path) {
        (&self.files, &self.rel)
    }

    /// The jobs.json path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The current contents; re-read only when the file changed since the last read. Changes queued by
    /// the Python nanobot in `action.jsonl` are merged first ([`crate::actions`]).
    pub fn load(&self) -> Result<StoreFile, CronError> {
        if let Err(e) = crate::actions::merge(self) {
            tracing::warn!(
                "cannot merge the cron queue (jobs queued by the Python nanobot stay queued): {e}"
            );
        }
        {
            let _lock = self.shared.as_ref().map(|_| self.lock()).transpose()?;
            self.pull()?;
        }
        let fp = fingerprint(&self.files, &self.rel);
        let mut cache = lock(&self.cache);
        if let Some((cached_fp, file)) = cache.as_ref()
            && *cached_fp == fp
        {
            return Ok(file.clone());
        }
        let file = self.read_fresh()?;
        *cache = Some((fp, file.clone()));
        Ok(file)
    }

    /// The job with this id, from the current contents.
    pub fn job(&self, id: &str) -> Result<Option<CronJob>, CronError> {
        Ok(self.load()?.job(id).cloned())
    }

    /// Applies `change` to the freshest contents under the file lock and writes the result atomically
    /// (only if something changed). If `change` fails nothing is written.
    ///
    /// With a shared store ([`JobStore::with_shared`]) a change another replica beat to the store is applied
    /// again to what that replica stored, up to [`SHARED_CHANGE_ATTEMPTS`] times in all (`change` may therefore
    /// run more than once, each time on fresh contents); past that the conflict is returned and nothing of this
    /// change is stored.
    pub fn update<R>(
        &self,
        mut change: impl FnMut(&mut StoreFile) -> Result<R, CronError>,
    ) -> Result<R, CronError> {
        let _lock = self.lock()?;
        let mut attempt = 1;
        loop {
            self.pull()?;
            let before = self.read_fresh()?;
            let mut file = before.clone();
            let out = change(&mut file)?;
            if file != before {
                self.write_atomic(&file)?;
                if let Err(e) = self.push() {
                    *lock(&self.cache) = None;
                    if matches!(&e, CronError::Shared(SharedFilesError::Conflict { .. }))
                        && attempt < SHARED_CHANGE_ATTEMPTS
                    {
                        tracing::debug!(
                            attempt,
                            "cron store changed by another replica first: applying the change again"
                        );
                        attempt += 1;
                        continue;
                    }
                    return Err(e);
                }
            }
            let fp = fingerprint(&self.files, &self.rel);
            *lock(&self.cache) = Some((fp, file));
            return Ok(out);
        }
    }

    /// Moves jobs from an old store (e.g. `~/.nanobot/cron/jobs.json`, written by older nanobot
    /// versions) to this one, when this one does not exist yet. The old file is validated first and
    /// then renamed to `jobs.json.migrated` (kept as a backup). Returns whether it migrated.
    pub fn migrate_from(&self, legacy: &Path) -> Result<bool, CronError> {
        if legacy == self.path {
            return Ok(false);
        }
        let _lock = self.lock()?;
        self.pull()?;
        let exists = self
            .files
            .symlink_metadata(&self.rel)
            .map_err(|source| CronError::Io {
                path: self.path.clone(),
                source,
            })?
            .is_some();
        if exists || !legacy.is_file() {
            return Ok(false);
        }
        let text = fs::read_to_string(legacy).map_err(|source| CronError::Io {
            path: legacy.to_path_buf(),
            source,
        })?;
        let file = StoreFile::parse(&text, legacy)?;
        self.write_atomic(&file)?;
        match self.push() {
            // Another replica stored its jobs first: its store stands (as when this one exists) and the old
            // file stays where it is.
            Err(CronError::Shared(SharedFilesError::Conflict { .. })) => {
                *lock(&self.cache) = None;
                tracing::warn!(legacy = %legacy.display(), "not migrating cron jobs: another replica stored its jobs first");
                return Ok(false);
            }
            other => other?,
        }
        let mut backup = legacy.as_os_str().to_owned();
        backup.push(".migrated");
        fs::rename(legacy, &backup).map_err(|source| CronError::Io {
            path: legacy.to_path_buf(),
            source,
        })?;
        tracing::info!(from = %legacy.display(), to = %self.path.display(), jobs = file.jobs.len(), "migrated cron jobs");
        Ok(true)
    }

    fn read_fresh(&self) -> Result<StoreFile, CronError> {
        match self.files.read_to_string(&self.rel) {
            Ok(Some(text)) => StoreFile::parse(&text, &self.path),
            Ok(None) => Ok(StoreFile::default()),
            Err(source) => Err(CronError::Io {
                path: self.path.clone(),
                source,
            }),
        }
    }

    fn lock(&self) -> Result<File, CronError> {
        let io = |source| CronError::Io {
            path: self.lock_path.clone(),
            source,
        };
        let file = self.files.open_lock(&self.lock_rel).map_err(io)?;
        file.lock().map_err(io)?;
        Ok(file) // unlocked when dropped
    }

    fn write_atomic(&self, file: &StoreFile) -> Result<(), CronError> {
        let json = file.to_json().map_err(|source| CronError::Parse {
            path: self.path.clone(),
            source,
        })?;
        self.files
            .write_atomic(&self.rel, json.as_bytes())
            .map_err(|source| CronError::Io {
                path: self.path.clone(),
                source,
            })?;
        Ok(())
    }
}
