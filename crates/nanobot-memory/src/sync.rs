//! [`MemorySync`]: the memory files of a workspace kept in a [`SharedFiles`] store (gateway replicas with separate
//! homes, `gateway.bus.nats.store: jetstream`).
//!
//! The memory files have several writers in one process: the consolidator and Dream (through
//! [`crate::MemoryStore`]), the agent core's raw archives, and the model itself with its file tools (it may edit
//! `memory/MEMORY.md` like any workspace file); the system prompt reads `MEMORY.md` directly. Hooking only the
//! store would let the next pull replace what the others wrote. So the files are synchronised at the boundaries
//! of the work that reads or writes them, in one place: the agent loop calls [`MemorySync::sync`] before a turn
//! builds its prompt and after it is saved, and around every consolidation and Dream run.
//!
//! One sync covers a memory folder (`memory/` or `memory/scopes/<name>/`: `MEMORY.md`, `history.jsonl`,
//! `.dream_cursor`) and the profile files at the workspace's top that are in every prompt and that Dream keeps
//! too ([`PROFILE_FILES`]: `SOUL.md`, `USER.md`, stored as `profile/<file>`). File by file, with the in-process
//! syncs serialised:
//!
//! - the first time this process syncs a file, it pulls it: the store is the truth (a local copy the store never
//!   held is published at its next sync; one that differs from the stored version is kept as `<file>.replaced`
//!   by the store);
//! - then every sync publishes what changed locally since the last one, then pulls what other replicas
//!   published. A local change is never pulled over before it was published.
//!
//! `history.jsonl` is synced holding its lock (`flock`), the one the memory store takes to append, and the store
//! appends to the file that is there once it holds the lock: no append is lost to a sync that replaces the file.
//!
//! When another replica published the file first (the store refuses the publish and brings the local copy back
//! to the stored version), nothing of this replica's change is dropped:
//!
//! - `history.jsonl` is append-only: the lines this replica appended since its last sync are appended again on
//!   top of the stored file, their cursors renumbered after the stored last one (cursors stay unique and
//!   increasing), and published again (up to [`MAX_ATTEMPTS`] times);
//! - `.dream_cursor` keeps the larger of the two cursors;
//! - `MEMORY.md`, `SOUL.md` and `USER.md` (whole-file rewrites: there is no safe merge of two rewrites) keep the
//!   stored version, and this replica's version is written beside it as `<file>.conflict-<unix ms>`, published
//!   too (so every replica and `nanobot store export` see it), and named in a warning and in
//!   [`SyncReport::conflicts`]. Dream or the user folds it back in.
//!
//! Dream's change records (`<folder>/.dream/<n>.json`) are synchronised only by
//! [`MemorySync::sync_with_records`] and [`MemorySync::sync_all_with_records`] (around Dream runs, restores and
//! `/dream-log`). Each is written once, so it is fetched or published once per process; a record of this
//! replica's whose number another replica stored first takes the next free number (its `version` changed to
//! match), and [`SyncReport::renumbered_records`] counts it.

use std::collections::{BTreeSet, HashMap};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use nanobot_util::{SharedFile, SharedFiles, SharedFilesError};
use serde_json::Value;

use crate::dream::DREAM_RECORDS_DIR;
use crate::error::{MemoryError, Result};
use crate::scope::{SCOPES_DIR, ScopeKey};
use crate::store::{DREAM_CURSOR_FILE, HISTORY_FILE, MEMORY_DIR, MEMORY_FILE};

/// How many times a conflicting publish of an append-only file is tried again on top of the stored version.
pub const MAX_ATTEMPTS: usize = 5;

/// The files of one memory folder that are shared.
const FILES: [&str; 3] = [MEMORY_FILE, HISTORY_FILE, DREAM_CURSOR_FILE];

/// The profile files at the workspace's top that are in every prompt and that Dream keeps beside `MEMORY.md`:
/// shared whole, as `MEMORY.md` is (a conflict keeps this replica's version beside the file), on every sync.
pub const PROFILE_FILES: [&str; 2] = ["SOUL.md", "USER.md"];

/// The folder of the profile files in the store: `SOUL.md` is stored as `profile/SOUL.md`.
pub const SHARED_PROFILE_DIR: &str = "profile";

/// The name in the store of a workspace file [`MemorySync`] shares (`memory/MEMORY.md`, `profile/SOUL.md`…);
/// `None` for the files it does not (`rel` is workspace-relative with `/` separators).
pub fn shared_name_of(rel: &str) -> Option<String> {
    if PROFILE_FILES.contains(&rel) {
        return Some(format!("{SHARED_PROFILE_DIR}/{rel}"));
    }
    let (dir, file) = rel.rsplit_once('/')?;
    let scoped = dir
        .strip_prefix(MEMORY_DIR)
        .and_then(|d| d.strip_prefix(&format!("/{SCOPES_DIR}/")))
        .is_some_and(|scope| !scope.is_empty() && !scope.contains('/'));
    (FILES.contains(&file) && (dir == MEMORY_DIR || scoped)).then(|| rel.to_owned())
}

/// What a [`MemorySync::sync`] did beyond the ordinary.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SyncReport {
    /// Conflict copies written (local paths): this replica's version of a file another replica rewrote first.
    pub conflicts: Vec<PathBuf>,
    /// History lines appended again on top of another replica's (renumbered).
    pub reapplied_lines: usize,
    /// Dream change records given a new number because another replica stored one with theirs first.
    pub renumbered_records: usize,
}

impl SyncReport {
    fn add(&mut self, other: SyncReport) {
        self.conflicts.extend(other.conflicts);
        self.reapplied_lines += other.reapplied_lines;
        self.renumbered_records += other.renumbered_records;
    }
}

/// A file as of the last sync: its length, and its bytes for the small files rewritten whole (a conflict on them
/// is a real one only when the stored version differs from this too).
#[derive(Debug, Default)]
struct Base {
    len: u64,
    bytes: Option<Vec<u8>>,
}

/// The memory files of one workspace kept in a shared store (when, and what a conflict does: `src/sync.rs`). Cheap
/// to clone.
///
/// The methods block (file I/O and store requests, each bounded by the store): call them from
/// `tokio::task::spawn_blocking` in async code.
#[derive(Clone, Debug)]
pub struct MemorySync {
    files: Arc<dyn SharedFiles>,
    workspace: PathBuf,
    /// Each local file (by shared name) as of this process's last sync of it; absent: not synced yet.
    synced: Arc<Mutex<HashMap<String, Base>>>,
}

impl MemorySync {
    /// The memory of `workspace`, kept in `files`.
    pub fn new(files: Arc<dyn SharedFiles>, workspace: impl Into<PathBuf>) -> Self {
        Self {
            files,
            workspace: workspace.into(),
            synced: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// Synchronises the memory of `scope` and the profile files (publishes local changes, then pulls the
    /// others').
    pub fn sync(&self, scope: &ScopeKey) -> Result<SyncReport> {
        self.sync_dirs(&[scope.dir()], false)
    }

    /// Synchronises every memory folder (the shared one and each scope's, whether this home or the store has it)
    /// and the profile files.
    pub fn sync_all(&self) -> Result<SyncReport> {
        self.sync_dirs(&self.all_dirs()?, false)
    }

    /// [`MemorySync::sync`], and Dream's change records of the scope's folder too (around Dream runs, restores and
    /// `/dream-log`): each record another replica wrote is fetched once, each one this replica wrote is
    /// published; one whose number another replica took first is renumbered after the stored ones.
    pub fn sync_with_records(&self, scope: &ScopeKey) -> Result<SyncReport> {
        self.sync_dirs(&[scope.dir()], true)
    }

    /// [`MemorySync::sync_all`] with every folder's Dream change records ([`MemorySync::sync_with_records`]).
    pub fn sync_all_with_records(&self) -> Result<SyncReport> {
        self.sync_dirs(&self.all_dirs()?, true)
    }

    /// Every memory folder, this home's and the store's.
    fn all_dirs(&self) -> Result<Vec<PathBuf>> {
        let mut dirs: BTreeSet<PathBuf> = local_dirs(&self.workspace).into_iter().collect();
        let scopes = Path::new(MEMORY_DIR).join(SCOPES_DIR);
        let prefix = format!("{MEMORY_DIR}/{SCOPES_DIR}/");
        for name in self.files.list(&prefix)? {
            if let Some((scope, _)) = name.strip_prefix(&prefix).and_then(|r| r.split_once('/')) {
                dirs.insert(scopes.join(scope));
            }
        }
        Ok(dirs.into_iter().collect())
    }

    fn sync_dirs(&self, dirs: &[PathBuf], records: bool) -> Result<SyncReport> {
        let mut synced = nanobot_util::lock(&self.synced);
        let mut report = SyncReport::default();
        for dir in dirs {
            report.add(self.sync_dir(&mut synced, dir)?);
            if records {
                report.add(self.sync_records(&mut synced, dir)?);
            }
        }
        report.add(self.sync_profile(&mut synced)?);
        Ok(report)
    }

    /// Dream's change records of a memory folder (`<dir>/.dream/<n>.json`): written once and never changed, so
    /// each is fetched or published once per process. A record of this replica's whose number another replica
    /// stored first (two Dream runs or restores at once) takes the next free number, its `version` changed to
    /// match; nothing of either is lost.
    fn sync_records(&self, synced: &mut HashMap<String, Base>, rel_dir: &Path) -> Result<SyncReport> {
        let mut report = SyncReport::default();
        let rel = rel_dir.join(DREAM_RECORDS_DIR);
        let Some(prefix) = shared_name(&rel).map(|p| format!("{p}/")) else {
            return Ok(report);
        };
        let dir = Records {
            prefix,
            local: self.workspace.join(&rel),
        };
        let stored: BTreeSet<u64> = self
            .files
            .list(&dir.prefix)?
            .iter()
            .filter_map(|n| record_version(n.strip_prefix(&dir.prefix)?))
            .collect();
        let local = local_records(&dir.local);
        let mut taken: BTreeSet<u64> = stored.union(&local).copied().collect();
        for &v in &local {
            if synced.contains_key(&dir.name(v)) {
                continue;
            }
            let path = dir.path(v);
            let Some(mine) = read_optional(&path)? else {
                continue;
            };
            if serde_json::from_slice::<Value>(&mine).map_or(true, |r| !r.is_object()) {
                // Not a record Dream could read (nor renumber): left as it is, here only.
                tracing::warn!(file = %path.display(), "not a Dream record: not shared");
                synced.insert(dir.name(v), Base::default());
                continue;
            }
            if !stored.contains(&v) {
                self.publish_record(synced, &dir, &mine, v, &mut taken, &mut report)?;
                continue;
            }
            // The store has a record with this number: fetched in place of the local copy (held in `mine`); the
            // same record (a home imported, or synced before this process) needs nothing more.
            remove_optional(&path)?;
            if let Err(e) = self.files.pull(SharedFile::new(&dir.name(v), &path)) {
                // Not fetched: this replica's record goes back where it was.
                write_file(&path, &mine)?;
                return Err(e.into());
            }
            synced.insert(dir.name(v), Base::default());
            if read_optional(&path)?.as_deref() == Some(mine.as_slice()) {
                continue;
            }
            let next = next_free(&taken);
            write_file(&dir.path(next), &renumbered(&mine, next, &path)?)?;
            taken.insert(next);
            report.renumbered_records += 1;
            self.publish_record(synced, &dir, &mine, next, &mut taken, &mut report)?;
        }
        for v in stored {
            if let std::collections::hash_map::Entry::Vacant(slot) = synced.entry(dir.name(v)) {
                self.files.pull(SharedFile::new(slot.key(), &dir.path(v)))?;
                slot.insert(Base::default());
            }
        }
        Ok(report)
    }

    /// Publishes this replica's record (`mine`, numbered `version` locally); on a conflict (another replica stored
    /// that number first) it takes the next free number, up to [`MAX_ATTEMPTS`] times, then is kept beside.
    fn publish_record(
        &self,
        synced: &mut HashMap<String, Base>,
        dir: &Records,
        mine: &[u8],
        mut version: u64,
        taken: &mut BTreeSet<u64>,
        report: &mut SyncReport,
    ) -> Result<()> {
        for attempt in 1..=MAX_ATTEMPTS {
            let (name, path) = (dir.name(version), dir.path(version));
            match self.files.push(SharedFile::new(&name, &path)) {
                Ok(()) => {
                    synced.insert(name, Base::default());
                    return Ok(());
                }
                Err(SharedFilesError::Conflict { .. }) if attempt < MAX_ATTEMPTS => {
                    // The local file is now the other replica's record.
                    synced.insert(name, Base::default());
                    version = next_free(taken);
                    write_file(&dir.path(version), &renumbered(mine, version, &path)?)?;
                    taken.insert(version);
                    report.renumbered_records += 1;
                }
                Err(e @ SharedFilesError::Conflict { .. }) => {
                    synced.insert(name.clone(), Base::default());
                    report
                        .conflicts
                        .push(self.keep_copy(SharedFile::new(&name, &path), mine, &e)?);
                    return Ok(());
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    fn sync_dir(&self, synced: &mut HashMap<String, Base>, rel_dir: &Path) -> Result<SyncReport> {
        let mut report = SyncReport::default();
        for file in FILES {
            let rel = rel_dir.join(file);
            if let Some(name) = shared_name(&rel) {
                report.add(self.sync_file(synced, name, &rel, file)?);
            }
        }
        Ok(report)
    }

    /// `SOUL.md` and `USER.md` of the workspace, stored as `profile/<file>`.
    fn sync_profile(&self, synced: &mut HashMap<String, Base>) -> Result<SyncReport> {
        let mut report = SyncReport::default();
        for file in PROFILE_FILES {
            let name = format!("{SHARED_PROFILE_DIR}/{file}");
            report.add(self.sync_file(synced, name, Path::new(file), file)?);
        }
        Ok(report)
    }

    /// One file: `name` in the store, `rel` in the workspace, `file` its kind (its file name).
    fn sync_file(
        &self,
        synced: &mut HashMap<String, Base>,
        name: String,
        rel: &Path,
        file: &str,
    ) -> Result<SyncReport> {
        let mut report = SyncReport::default();
        let local = self.workspace.join(rel);
        let f = SharedFile::new(&name, &local);
        // The history's writers (the memory store) take this lock to append: none appends between this sync's
        // read of the file and its publish, nor into a copy this sync replaces (they check, once they hold it).
        let _appends = if file == HISTORY_FILE {
            lock_existing(&local)?
        } else {
            None
        };
        if let Some(base) = synced.get(&name)
            && let Some(before) = changed_copy(base, &local)?
        {
            match self.files.push(f) {
                Ok(()) => {}
                Err(SharedFilesError::Conflict { .. }) => {
                    report.add(self.resolve(f, file, before, base)?);
                }
                Err(e) => return Err(e.into()),
            }
        }
        self.files.pull(f)?;
        let base = if file == HISTORY_FILE {
            Base {
                len: file_len(&local)?,
                bytes: None,
            }
        } else {
            let bytes = read_optional(&local)?.unwrap_or_default();
            Base {
                len: bytes.len() as u64,
                bytes: Some(bytes),
            }
        };
        synced.insert(name, base);
        Ok(report)
    }

    /// Another replica published `f` first; the local copy is now the stored version. Keeps this replica's change
    /// (`before`, whose first `base` bytes were the version last synced) as the file's policy says.
    fn resolve(
        &self,
        f: SharedFile<'_>,
        file: &str,
        before: Option<Vec<u8>>,
        base: &Base,
    ) -> Result<SyncReport> {
        let mut report = SyncReport::default();
        let Some(before) = before else {
            // Deleted here, changed there: the change wins (nothing of this replica's is lost).
            return Ok(report);
        };
        if let Some(base_bytes) = &base.bytes
            && read_optional(f.local)?.unwrap_or_default() == *base_bytes
        {
            // The other replica published the version this one started from (two homes with the same file the
            // store never held, such as the MEMORY.md template): only this replica changed it.
            write_file(f.local, &before)?;
            return match self.files.push(f) {
                Ok(()) => Ok(report),
                Err(e) => {
                    report.conflicts.push(self.keep_copy(f, &before, &e)?);
                    Ok(report)
                }
            };
        }
        let base = usize::try_from(base.len).unwrap_or(usize::MAX);
        if file == HISTORY_FILE && before.len() >= base {
            let added = &before[base..];
            for attempt in 1..=MAX_ATTEMPTS {
                let n = append_renumbered(f.local, added)?;
                match self.files.push(f) {
                    Ok(()) => {
                        report.reapplied_lines = n;
                        tracing::warn!(
                            file = f.name,
                            lines = n,
                            "memory history: another replica appended first; this replica's lines were appended \
                             again after them"
                        );
                        return Ok(report);
                    }
                    Err(SharedFilesError::Conflict { .. }) if attempt < MAX_ATTEMPTS => {}
                    Err(e) => {
                        // Not stored: kept beside the file rather than lost.
                        report.conflicts.push(self.keep_copy(f, added, &e)?);
                        return Ok(report);
                    }
                }
            }
            return Ok(report);
        }
        if file == DREAM_CURSOR_FILE {
            let mine = parse_cursor(&before);
            for attempt in 1..=MAX_ATTEMPTS {
                let stored = read_optional(f.local)?.map_or(0, |b| parse_cursor(&b));
                if mine <= stored {
                    return Ok(report);
                }
                write_file(f.local, mine.to_string().as_bytes())?;
                match self.files.push(f) {
                    Ok(()) => return Ok(report),
                    Err(SharedFilesError::Conflict { .. }) if attempt < MAX_ATTEMPTS => {}
                    Err(e) => return Err(e.into()),
                }
            }
            return Ok(report);
        }
        if read_optional(f.local)?.as_deref() == Some(before.as_slice()) {
            return Ok(report);
        }
        let conflict = SharedFilesError::Conflict {
            name: f.name.to_owned(),
        };
        report.conflicts.push(self.keep_copy(f, &before, &conflict)?);
        Ok(report)
    }

    /// Writes `bytes` beside `f` as `<file>.conflict-<unix ms>`, publishes it (best effort) and warns naming it.
    fn keep_copy(&self, f: SharedFile<'_>, bytes: &[u8], why: &SharedFilesError) -> Result<PathBuf> {
        let stamp = chrono::Utc::now().timestamp_millis();
        let suffix = format!(".conflict-{stamp}");
        let mut local = f.local.as_os_str().to_owned();
        local.push(&suffix);
        let local = PathBuf::from(local);
        write_file(&local, bytes)?;
        let name = format!("{}{suffix}", f.name);
        let published = self.files.push(SharedFile::new(&name, &local));
        tracing::warn!(
            file = f.name,
            kept = %local.display(),
            published = published.is_ok(),
            reason = %why,
            "memory: another replica changed this file first; the stored version is kept and this replica's \
             version is saved beside it"
        );
        Ok(local)
    }
}

/// `path` opened and locked (`flock`, exclusive) when it exists.
fn lock_existing(path: &Path) -> Result<Option<std::fs::File>> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(MemoryError::io("opening", path, e)),
    };
    file.lock().map_err(|e| MemoryError::io("locking", path, e))?;
    Ok(Some(file))
}

/// The local copy when it differs from the version of the last sync (`Some(None)`: it was deleted); `None` when
/// it is unchanged (and so not published: a copy the store never held, such as a template, does not contend
/// with another replica's). An append-only file is compared by length, so an unchanged history is not read.
fn changed_copy(base: &Base, local: &Path) -> Result<Option<Option<Vec<u8>>>> {
    if base.bytes.is_none() && file_len(local)? == base.len {
        return Ok(None);
    }
    let now = read_optional(local)?;
    let changed = match (&base.bytes, &now) {
        (Some(b), Some(n)) => b != n,
        (Some(b), None) => !b.is_empty(),
        (None, Some(n)) => n.len() as u64 != base.len,
        (None, None) => base.len != 0,
    };
    Ok(changed.then_some(now))
}

/// The memory folders this home has (workspace-relative): `memory` and each scope's.
fn local_dirs(workspace: &Path) -> Vec<PathBuf> {
    let mut dirs = vec![PathBuf::from(MEMORY_DIR)];
    let scopes = Path::new(MEMORY_DIR).join(SCOPES_DIR);
    if let Ok(entries) = std::fs::read_dir(workspace.join(&scopes)) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                dirs.push(scopes.join(e.file_name()));
            }
        }
    }
    dirs
}

/// The Dream record files (`<n>.json`) in the local folder `dir`, by version.
fn local_records(dir: &Path) -> BTreeSet<u64> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| record_version(e.file_name().to_str()?))
                .collect()
        })
        .unwrap_or_default()
}

/// The files of the home at `workspace` that [`MemorySync`] shares, each with its name in the store: in each memory
/// folder `MEMORY.md`, `history.jsonl`, `.dream_cursor` (listed whether or not they exist) and Dream's change
/// records, then the profile files. What `nanobot store import` publishes.
pub fn shared_files_of(workspace: &Path) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    for dir in local_dirs(workspace) {
        let records = dir.join(DREAM_RECORDS_DIR);
        let files = FILES.iter().map(|f| dir.join(f)).chain(
            local_records(&workspace.join(&records))
                .into_iter()
                .map(|v| records.join(format!("{v}.json"))),
        );
        for rel in files {
            if let Some(name) = shared_name(&rel) {
                out.push((name, workspace.join(rel)));
            }
        }
    }
    for file in PROFILE_FILES {
        out.push((format!("{SHARED_PROFILE_DIR}/{file}"), workspace.join(file)));
    }
    out
}

/// Where a memory folder's Dream records are: in the store and in this home.
struct Records {
    /// `<folder>/.dream/` in the store.
    prefix: String,
    /// `<workspace>/<folder>/.dream`.
    local: PathBuf,
}

impl Records {
    fn name(&self, version: u64) -> String {
        format!("{}{version}.json", self.prefix)
    }

    fn path(&self, version: u64) -> PathBuf {
        self.local.join(format!("{version}.json"))
    }
}

/// The number after every one in `taken`.
fn next_free(taken: &BTreeSet<u64>) -> u64 {
    taken.last().copied().unwrap_or(0) + 1
}

/// The version of a Dream record file name (`12.json` → 12).
fn record_version(file: &str) -> Option<u64> {
    file.strip_suffix(".json")?.parse().ok().filter(|v| *v > 0)
}

/// A Dream record's JSON with its `version` set to `version` (`path` names it in an error).
fn renumbered(bytes: &[u8], version: u64, path: &Path) -> Result<Vec<u8>> {
    let mut record: Value = serde_json::from_slice(bytes).map_err(|e| MemoryError::Corrupt {
        path: path.to_path_buf(),
        line: e.line(),
        message: e.to_string(),
    })?;
    if let Some(map) = record.as_object_mut() {
        map.insert("version".into(), Value::from(version));
    }
    serde_json::to_vec_pretty(&record).map_err(|source| MemoryError::Encode {
        what: "a Dream record",
        source,
    })
}

/// The store name of a workspace-relative path (`/`-separated); `None` for a path that is not plain UTF-8.
fn shared_name(rel: &Path) -> Option<String> {
    let parts: Option<Vec<&str>> = rel.components().map(|c| c.as_os_str().to_str()).collect();
    parts.map(|p| p.join("/"))
}

fn remove_optional(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(MemoryError::io("removing", path, e)),
    }
}

fn read_optional(path: &Path) -> Result<Option<Vec<u8>>> {
    match std::fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(MemoryError::io("reading", path, e)),
    }
}

fn file_len(path: &Path) -> Result<u64> {
    match std::fs::metadata(path) {
        Ok(m) => Ok(m.len()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(MemoryError::io("reading the size of", path, e)),
    }
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| MemoryError::io("creating", dir, e))?;
    }
    nanobot_util::write_atomic(path, bytes)
        .map_err(|e| MemoryError::io("writing", path, std::io::Error::from(e)))
}

fn parse_cursor(bytes: &[u8]) -> u64 {
    String::from_utf8_lossy(bytes).trim().parse().unwrap_or(0)
}

/// The last `cursor` in the history text `bytes` (0 when none).
fn last_cursor(bytes: &[u8]) -> u64 {
    String::from_utf8_lossy(bytes)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v.get("cursor").and_then(Value::as_u64))
        .max()
        .unwrap_or(0)
}

/// Appends the history lines `added` to `path`, their cursors renumbered after the file's last one; returns how
/// many lines. A line that is not a JSON object is appended as it is.
fn append_renumbered(path: &Path, added: &[u8]) -> Result<usize> {
    let existing = read_optional(path)?.unwrap_or_default();
    let mut next = last_cursor(&existing);
    let mut out = String::new();
    if !existing.is_empty() && !existing.ends_with(b"\n") {
        out.push('\n');
    }
    let mut n = 0;
    for line in String::from_utf8_lossy(added).lines() {
        if line.trim().is_empty() {
            continue;
        }
        n += 1;
        match serde_json::from_str::<Value>(line) {
            Ok(Value::Object(mut entry)) if entry.contains_key("cursor") => {
                next += 1;
                entry.insert("cursor".into(), Value::from(next));
                out.push_str(&Value::Object(entry).to_string());
            }
            _ => out.push_str(line),
        }
        out.push('\n');
    }
    if n == 0 {
        return Ok(0);
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| MemoryError::io("opening", path, e))?;
    f.write_all(out.as_bytes())
        .and_then(|()| f.sync_data())
        .map_err(|e| MemoryError::io("appending to", path, e))?;
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appended_lines_are_renumbered_after_the_stored_last_cursor() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.jsonl");
        std::fs::write(
            &path,
            "{\"cursor\":1,\"content\":\"a\"}\n{\"cursor\":2,\"content\":\"b\"}\n",
        )
        .unwrap();
        let added = b"{\"cursor\":2,\"content\":\"mine\"}\nnot json\n";
        assert_eq!(append_renumbered(&path, added).unwrap(), 2);
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        let mine: Value = serde_json::from_str(lines[2]).unwrap();
        assert_eq!(
            (mine["cursor"].as_u64(), mine["content"].as_str()),
            (Some(3), Some("mine"))
        );
        assert_eq!(lines[3], "not json");
    }

    #[test]
    fn names_are_slash_separated_and_workspace_relative() {
        assert_eq!(
            shared_name(&ScopeKey::Chat("telegram:42".into()).dir().join(MEMORY_FILE)).as_deref(),
            Some(
                format!(
                    "memory/scopes/{}/MEMORY.md",
                    nanobot_sessions::keyname::file_stem("chat:telegram:42")
                )
                .as_str()
            )
        );
        assert_eq!(
            shared_name(&ScopeKey::Shared.dir().join(HISTORY_FILE)).as_deref(),
            Some("memory/history.jsonl")
        );
    }

    #[test]
    fn only_the_memory_and_profile_files_have_shared_names() {
        for (rel, name) in [
            ("SOUL.md", Some("profile/SOUL.md")),
            ("USER.md", Some("profile/USER.md")),
            ("memory/MEMORY.md", Some("memory/MEMORY.md")),
            ("memory/history.jsonl", Some("memory/history.jsonl")),
            (
                "memory/scopes/telegram_1/MEMORY.md",
                Some("memory/scopes/telegram_1/MEMORY.md"),
            ),
            ("AGENTS.md", None),
            ("HEARTBEAT.md", None),
            ("notes/SOUL.md", None),
            ("memory/notes.md", None),
            ("memory/scopes/MEMORY.md", None),
            ("memory/scopes/a/b/MEMORY.md", None),
            ("memory/.dream/log.jsonl", None),
        ] {
            assert_eq!(shared_name_of(rel).as_deref(), name, "{rel}");
        }
    }

    #[test]
    fn the_shared_files_of_a_home_are_its_memory_files_records_and_profile() {
        let ws = tempfile::tempdir().unwrap();
        for dir in ["memory/.dream", "memory/scopes/telegram_1/.dream"] {
            std::fs::create_dir_all(ws.path().join(dir)).unwrap();
        }
        for file in [
            "memory/.dream/1.json",
            "memory/.dream/notes.txt",
            "memory/scopes/telegram_1/.dream/2.json",
        ] {
            std::fs::write(ws.path().join(file), "{}").unwrap();
        }
        let mut files: Vec<(String, String)> = shared_files_of(ws.path())
            .into_iter()
            .map(|(name, path)| {
                let local = path.strip_prefix(ws.path()).unwrap().to_str().unwrap().to_owned();
                (name, local)
            })
            .collect();
        files.sort();
        let same = |n: &str| (n.to_owned(), n.to_owned());
        assert_eq!(
            files,
            [
                same("memory/.dream/1.json"),
                same("memory/.dream_cursor"),
                same("memory/MEMORY.md"),
                same("memory/history.jsonl"),
                same("memory/scopes/telegram_1/.dream/2.json"),
                same("memory/scopes/telegram_1/.dream_cursor"),
                same("memory/scopes/telegram_1/MEMORY.md"),
                same("memory/scopes/telegram_1/history.jsonl"),
                ("profile/SOUL.md".to_owned(), "SOUL.md".to_owned()),
                ("profile/USER.md".to_owned(), "USER.md".to_owned()),
            ]
        );
    }
}
