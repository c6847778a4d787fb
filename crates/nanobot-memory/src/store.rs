//! [`MemoryStore`]: the memory files of a workspace.

use nanobot_util::lock;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use nanobot_util::ConfinedDir;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{MemoryError, Result};
use crate::fsio;
use crate::scope::ScopeKey;

/// Directory of the memory files, relative to the workspace.
pub const MEMORY_DIR: &str = "memory";
/// Long-term facts, always in the system prompt (`memory/MEMORY.md`).
pub const MEMORY_FILE: &str = "MEMORY.md";
/// The append-only history log (`memory/history.jsonl`).
pub const HISTORY_FILE: &str = "history.jsonl";
/// The last history cursor Dream has processed (`memory/.dream_cursor`).
pub const DREAM_CURSOR_FILE: &str = ".dream_cursor";
/// The history log of old Python versions (`memory/HISTORY.md`), migrated once.
pub const LEGACY_HISTORY_FILE: &str = "HISTORY.md";

/// How many bytes at the end of `history.jsonl` are read to find the last cursor before falling back to a
/// whole-file scan.
const TAIL_BYTES: u64 = 64 * 1024;

/// One entry of `memory/history.jsonl`.
///
/// `cursor` is unique and strictly increasing down the file. `timestamp` is local time, `YYYY-MM-DD HH:MM`, as
/// the Python nanobot writes it. `session_key` says which conversation the entry summarises (absent for
/// migrated and Python-written entries). Unknown fields survive a read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryEntry {
    /// Position in the log (1, 2, 3, …).
    pub cursor: u64,
    /// When the entry was written (`YYYY-MM-DD HH:MM`, local time).
    #[serde(default)]
    pub timestamp: String,
    /// The summary (or raw archive) text.
    #[serde(default)]
    pub content: String,
    /// The session the entry came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    /// Fields this version does not model.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The memory files of one workspace: `memory/MEMORY.md`, `memory/history.jsonl`, `memory/.dream_cursor` (and
/// the legacy `memory/HISTORY.md`, migrated once by [`MemoryStore::migrate_legacy_history`]).
///
/// Cheap to clone (clones share the in-process lock). The methods do short, blocking file I/O: call them from
/// `tokio::task::spawn_blocking` in async code (the [`crate::Consolidator`] and [`crate::Dream`] do).
///
/// Every file is opened beneath a handle of the workspace ([`ConfinedDir`]): a symlink, hard link or FIFO that a
/// command planted in the workspace (say `memory/` → `~/.ssh`) is refused, never followed out of it.
///
/// **History appends** are safe under concurrent writers: an in-process mutex serialises this process's
/// writers, and an advisory lock (`flock`) on `history.jsonl` serialises other processes. Under the lock the
/// last cursor is read back from the file and the new line is written in one `write(2)` on an `O_APPEND`
/// descriptor, then synced; so cursors stay unique and increasing whoever writes.
///
/// ```
/// use nanobot_memory::MemoryStore;
///
/// let ws = tempfile::tempdir().unwrap();
/// let store = MemoryStore::new(ws.path());
/// let a = store.append_history("[2026-01-01 10:00] Alice likes tea.", Some("cli:direct")).unwrap();
/// let b = store.append_history("[2026-01-02 11:00] Bob visited.", None).unwrap();
/// assert_eq!((a.cursor, b.cursor), (1, 2));
/// assert_eq!(store.read_history_after(1).unwrap(), vec![b]);
/// store.write_memory("# Facts\n- Alice likes tea\n").unwrap();
/// assert!(store.read_memory().unwrap().contains("tea"));
/// ```
#[derive(Clone, Debug)]
pub struct MemoryStore {
    workspace: PathBuf,
    /// The memory folder, relative to the workspace (`memory`, or a scope's folder).
    rel_dir: PathBuf,
    dir: PathBuf,
    files: ConfinedDir,
    append_lock: Arc<Mutex<()>>,
}

impl MemoryStore {
    /// The memory of `workspace` (nothing is read or created yet).
    pub fn new(workspace: impl Into<PathBuf>) -> Self {
        let workspace = workspace.into();
        let dir = workspace.join(MEMORY_DIR);
        Self {
            files: ConfinedDir::new(&workspace),
            workspace,
            rel_dir: PathBuf::from(MEMORY_DIR),
            dir,
            append_lock: Arc::new(Mutex::new(())),
        }
    }

    /// The memory of `scope` in the same workspace (`memory/` itself for [`ScopeKey::Shared`], else
    /// `memory/scopes/<name>/`; see [`crate::scope`]). Nothing is read or created yet.
    pub fn scoped(&self, scope: &ScopeKey) -> Self {
        self.in_dir(scope.dir())
    }

    /// The memory kept in `rel_dir` (relative to the workspace).
    pub(crate) fn in_dir(&self, rel_dir: PathBuf) -> Self {
        if rel_dir == self.rel_dir {
            return self.clone();
        }
        Self {
            workspace: self.workspace.clone(),
            dir: self.workspace.join(&rel_dir),
            rel_dir,
            files: self.files.clone(),
            append_lock: Arc::new(Mutex::new(())),
        }
    }

    /// The memory folder relative to the workspace (`memory`, or `memory/scopes/<name>`).
    pub fn rel_dir(&self) -> &Path {
        &self.rel_dir
    }

    /// The workspace root.
    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// `<workspace>/memory` (or the scope's folder).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The workspace, as a directory whose files are opened beneath its handle.
    pub(crate) fn files(&self) -> &ConfinedDir {
        &self.files
    }

    /// Creates `<workspace>/memory` (beneath the workspace handle).
    pub(crate) fn ensure_dir(&self) -> Result<()> {
        fsio::ensure_dir(&self.files, &self.rel_dir)
    }

    /// `<workspace>/memory/MEMORY.md`.
    pub fn memory_path(&self) -> PathBuf {
        self.dir.join(MEMORY_FILE)
    }

    /// `<workspace>/memory/history.jsonl`.
    pub fn history_path(&self) -> PathBuf {
        self.dir.join(HISTORY_FILE)
    }

    /// `<workspace>/memory/.dream_cursor`.
    pub fn dream_cursor_path(&self) -> PathBuf {
        self.dir.join(DREAM_CURSOR_FILE)
    }

    /// The long-term memory (`MEMORY.md`); empty when the file does not exist.
    pub fn read_memory(&self) -> Result<String> {
        Ok(fsio::read_optional(&self.files, &self.rel(MEMORY_FILE))?.unwrap_or_default())
    }

    /// Replaces `MEMORY.md` atomically.
    pub fn write_memory(&self, text: &str) -> Result<()> {
        fsio::write_atomic(&self.files, &self.rel(MEMORY_FILE), text.as_bytes())
    }

    /// Appends one entry to `history.jsonl` with the next cursor and the current local time; returns it.
    pub fn append_history(&self, content: &str, session_key: Option<&str>) -> Result<HistoryEntry> {
        let timestamp = now_stamp();
        let mut out = self.append_entries(vec![(
            timestamp,
            content.to_owned(),
            session_key.map(str::to_owned),
        )])?;
        out.pop().ok_or_else(|| MemoryError::Corrupt {
            path: self.history_path(),
            line: 0,
            message: "append wrote no entry".into(),
        })
    }

    /// Appends entries `(timestamp, content, session_key)` under one lock, numbering them consecutively.
    fn append_entries(&self, items: Vec<(String, String, Option<String>)>) -> Result<Vec<HistoryEntry>> {
        // A poisoned mutex only means another writer panicked; the file lock below still protects the file.
        let _guard = lock(&self.append_lock);
        let path = self.history_path();
        let mut file = self.open_history_locked(&path)?;
        let (last, ends_with_newline) = last_cursor(&mut file, &path)?;
        let mut buf = String::new();
        if !ends_with_newline {
            // A cut last line (crash mid-write by an old writer): start ours on a fresh line.
            buf.push('\n');
        }
        let mut written = Vec::with_capacity(items.len());
        for (i, (timestamp, content, session_key)) in items.into_iter().enumerate() {
            let entry = HistoryEntry {
                cursor: last + 1 + i as u64,
                timestamp,
                content,
                session_key,
                extra: Map::new(),
            };
            let line = serde_json::to_string(&entry).map_err(|source| MemoryError::Encode {
                what: "a history entry",
                source,
            })?;
            buf.push_str(&line);
            buf.push('\n');
            written.push(entry);
        }
        file.write_all(buf.as_bytes())
            .map_err(|e| MemoryError::io("appending to", &path, e))?;
        file.sync_data()
            .map_err(|e| MemoryError::io("syncing", &path, e))?;
        // The lock is released when `file` is closed.
        Ok(written)
    }

    /// `history.jsonl` opened for appending and locked. The file may have been replaced whole while this waited
    /// for the lock (a replica's sync, [`crate::MemorySync`], writes the shared version with a rename under the
    /// same lock): then the new file is opened and locked instead, so an append never lands in a replaced file.
    fn open_history_locked(&self, path: &Path) -> Result<File> {
        use std::os::unix::fs::MetadataExt as _;
        const TRIES: usize = 8;
        for _ in 0..TRIES {
            let file = self
                .files
                .open_append(&self.rel(HISTORY_FILE))
                .map_err(|e| MemoryError::io("opening", path, e))?;
            file.lock().map_err(|e| MemoryError::io("locking", path, e))?;
            let held = file
                .metadata()
                .map_err(|e| MemoryError::io("reading the metadata of", path, e))?;
            match std::fs::symlink_metadata(path) {
                Ok(now) if (now.dev(), now.ino()) == (held.dev(), held.ino()) => return Ok(file),
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(MemoryError::io("reading the metadata of", path, e)),
            }
        }
        Err(MemoryError::io(
            "appending to",
            path,
            std::io::Error::other(format!(
                "the file was replaced {TRIES} times while waiting for its lock"
            )),
        ))
    }

    /// Every history entry with a cursor greater than `after`, oldest first. Lines that cannot be parsed are
    /// skipped with a warning naming the file and line (they stay in the file).
    pub fn read_history_after(&self, after: u64) -> Result<Vec<HistoryEntry>> {
        let path = self.history_path();
        let Some(text) = fsio::read_optional(&self.files, &self.rel(HISTORY_FILE))? else {
            return Ok(Vec::new());
        };
        Ok(parse_history(&text, &path)
            .into_iter()
            .filter(|e| e.cursor > after)
            .collect())
    }

    /// The cursor of the newest history entry (0 when there is none).
    pub fn last_history_cursor(&self) -> Result<u64> {
        let path = self.history_path();
        match self.files.open_read(&self.rel(HISTORY_FILE)) {
            Ok(Some(mut f)) => Ok(last_cursor(&mut f, &path)?.0),
            Ok(None) => Ok(0),
            Err(e) => Err(MemoryError::io("opening", &path, e)),
        }
    }

    /// The last cursor Dream processed (0 when `.dream_cursor` does not exist).
    pub fn dream_cursor(&self) -> Result<u64> {
        let path = self.dream_cursor_path();
        let Some(text) = fsio::read_optional(&self.files, &self.rel(DREAM_CURSOR_FILE))? else {
            return Ok(0);
        };
        let t = text.trim();
        if t.is_empty() {
            return Ok(0);
        }
        t.parse().map_err(|_| MemoryError::Corrupt {
            path,
            line: 1,
            message: format!("expected a cursor number, found {t:?}"),
        })
    }

    /// Stores the last cursor Dream processed (atomically).
    pub fn set_dream_cursor(&self, cursor: u64) -> Result<()> {
        fsio::write_atomic(
            &self.files,
            &self.rel(DREAM_CURSOR_FILE),
            cursor.to_string().as_bytes(),
        )
    }

    /// Migrates the Python nanobot's `memory/HISTORY.md` (entries separated by blank lines, each starting with
    /// `[YYYY-MM-DD HH:MM]`) into `history.jsonl`, once: the old file is renamed to `HISTORY.md.bak` (or
    /// `HISTORY.md.bak.1`, … if that exists) and never deleted. Dream's cursor moves past the migrated entries when
    /// it had seen all before them (0.3.5 migrates only into an empty `history.jsonl`, and so always). Returns how
    /// many entries were migrated (`None` when there was nothing to migrate).
    pub fn migrate_legacy_history(&self) -> Result<Option<usize>> {
        let legacy = self.dir.join(LEGACY_HISTORY_FILE);
        // Held across the whole migration so two writers (threads or processes) never migrate the same file
        // twice.
        let lock_rel = self.rel(".history.migrate.lock");
        let lock_path = self.files.display_path(&lock_rel);
        let lock_file = self
            .files
            .open_lock(&lock_rel)
            .map_err(|e| MemoryError::io("opening", &lock_path, e))?;
        lock_file
            .lock()
            .map_err(|e| MemoryError::io("locking", &lock_path, e))?;
        let Some(text) = fsio::read_optional(&self.files, &self.rel(LEGACY_HISTORY_FILE))? else {
            return Ok(None);
        };
        let entries = parse_legacy_history(&text);
        let n = entries.len();
        if !entries.is_empty() {
            let dreamed = self.dream_cursor()?;
            let written = self.append_entries(entries.into_iter().map(|(ts, c)| (ts, c, None)).collect())?;
            // As 0.3.5: the archive counts as already seen by Dream (it would otherwise replay the user's whole
            // past on its next run), unless Dream had not yet seen everything before it.
            if let (Some(first), Some(last)) = (written.first(), written.last())
                && dreamed + 1 >= first.cursor
            {
                self.set_dream_cursor(last.cursor)?;
            }
        }
        let backup = self.free_backup_name()?;
        self.files
            .rename(&self.rel(LEGACY_HISTORY_FILE), &self.rel(&backup))
            .map_err(|e| MemoryError::io("renaming", &legacy, e))?;
        let backup = self.dir.join(backup);
        tracing::info!(entries = n, backup = %backup.display(), "migrated memory/HISTORY.md to history.jsonl");
        Ok(Some(n))
    }
}

/// Now, local time, as history timestamps are written (`YYYY-MM-DD HH:MM`).
pub(crate) fn now_stamp() -> String {
    chrono::Local::now().format("%Y-%m-%d %H:%M").to_string()
}

/// The greatest cursor in the file and whether the file ends with a newline (an empty file does).
fn last_cursor(file: &mut File, path: &Path) -> Result<(u64, bool)> {
    let len = file
        .metadata()
        .map_err(|e| MemoryError::io("reading metadata of", path, e))?
        .len();
    if len == 0 {
        return Ok((0, true));
    }
    let start = len.saturating_sub(TAIL_BYTES);
    let tail = read_from(file, start, path)?;
    let ends_with_newline = tail.ends_with('\n');
    // Entries are appended in cursor order, so the last parseable line holds the greatest cursor; a
    // whole-file scan is the fallback when the tail holds none.
    let from_tail = tail.lines().rev().filter_map(cursor_of).next();
    let last = match from_tail {
        Some(c) => c,
        None if start > 0 => {
            let all = read_from(file, 0, path)?;
            all.lines().filter_map(cursor_of).max().unwrap_or(0)
        }
        None => 0,
    };
    Ok((last, ends_with_newline))
}

fn read_from(file: &mut File, start: u64, path: &Path) -> Result<String> {
    file.seek(SeekFrom::Start(start))
        .map_err(|e| MemoryError::io("seeking in", path, e))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|e| MemoryError::io("reading", path, e))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

fn cursor_of(line: &str) -> Option<u64> {
    let v: Value = serde_json::from_str(line.trim()).ok()?;
    v.get("cursor")?.as_u64()
}

fn parse_history(text: &str, path: &Path) -> Vec<HistoryEntry> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<HistoryEntry>(line) {
            Ok(e) => out.push(e),
            Err(e) => tracing::warn!(
                file = %path.display(),
                line = i + 1,
                error = %e,
                "skipping a history entry that cannot be read"
            ),
        }
    }
    out
}

/// `[YYYY-MM-DD HH:MM…]` at the start of `line`: the 16-character stamp and the rest after `]`.
fn split_stamp(line: &str) -> Option<(String, &str)> {
    let rest = line.strip_prefix('[')?;
    let close = rest.find(']')?;
    let inside = &rest[..close];
    let b = inside.as_bytes();
    let digits = |r: std::ops::Range<usize>| r.into_iter().all(|i| b.get(i).is_some_and(u8::is_ascii_digit));
    let shape = b.len() >= 16
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && (b[10] == b' ' || b[10] == b'T')
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16);
    shape.then(|| {
        (
            format!("{} {}", &inside[..10], &inside[11..16]),
            rest[close + 1..].trim_start(),
        )
    })
}

/// Splits a legacy `HISTORY.md` into `(timestamp, content)` entries: a line starting with a timestamp after a
/// blank line (or at the top) starts an entry; other lines continue the current one.
fn parse_legacy_history(text: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut prev_blank = true;
    for line in text.lines() {
        let blank = line.trim().is_empty();
        match split_stamp(line) {
            Some((ts, rest)) if prev_blank => out.push((ts, rest.to_owned())),
            _ => {
                if let Some((_, content)) = out.last_mut() {
                    content.push('\n');
                    content.push_str(line);
                } else if !blank {
                    out.push((now_stamp(), line.to_owned()));
                }
            }
        }
        prev_blank = blank;
    }
    for (_, c) in &mut out {
        *c = c.trim().to_owned();
    }
    out.retain(|(_, c)| !c.is_empty());
    out
}

impl MemoryStore {
    /// `memory/<name>` (or `<scope folder>/<name>`), relative to the workspace.
    pub(crate) fn rel(&self, name: &str) -> PathBuf {
        self.rel_dir.join(name)
    }

    /// The first free name of `HISTORY.md.bak`, `HISTORY.md.bak.1`, … in `memory/`.
    fn free_backup_name(&self) -> Result<String> {
        let base = format!("{LEGACY_HISTORY_FILE}.bak");
        let taken = |name: &str| {
            self.files
                .symlink_metadata(&self.rel(name))
                .map(|m| m.is_some())
                .map_err(|e| MemoryError::io("inspecting", self.dir.join(name), e))
        };
        if !taken(&base)? {
            return Ok(base);
        }
        for i in 1..10_000 {
            let name = format!("{base}.{i}");
            if !taken(&name)? {
                return Ok(name);
            }
        }
        Ok(base)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legacy_entries_split_on_stamped_paragraphs() {
        let text = "[2026-01-01 10:00] Alice said hi.\nShe likes tea.\n\n[2026-01-02 09:30] Bob left.\n\n\
                    Not stamped paragraph\n";
        let e = parse_legacy_history(text);
        assert_eq!(e.len(), 2);
        assert_eq!(
            e[0],
            ("2026-01-01 10:00".into(), "Alice said hi.\nShe likes tea.".into())
        );
        assert_eq!(e[1].0, "2026-01-02 09:30");
        assert!(e[1].1.starts_with("Bob left."));
        assert!(e[1].1.ends_with("Not stamped paragraph"));
    }

    #[test]
    fn stamp_shapes() {
        assert_eq!(
            split_stamp("[2026-01-01T10:00:33] x").map(|s| s.0),
            Some("2026-01-01 10:00".into())
        );
        assert!(split_stamp("[note] x").is_none());
        assert!(split_stamp("2026-01-01 10:00 x").is_none());
    }

    #[test]
    fn cursor_survives_a_cut_last_line() {
        let ws = tempfile::tempdir().unwrap();
        let store = MemoryStore::new(ws.path());
        store.append_history("one", None).unwrap();
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(store.history_path())
            .unwrap();
        f.write_all(br#"{"cursor": 7, "timestamp": "x", "cont"#).unwrap();
        let e = store.append_history("two", None).unwrap();
        assert_eq!(e.cursor, 2);
        let all = store.read_history_after(0).unwrap();
        assert_eq!(all.iter().map(|e| e.cursor).collect::<Vec<_>>(), vec![1, 2]);
    }

    #[test]
    fn an_append_waiting_for_the_lock_lands_in_the_file_that_replaced_the_locked_one() {
        use std::os::unix::fs::MetadataExt as _;
        let ws = tempfile::tempdir().unwrap();
        let store = MemoryStore::new(ws.path());
        store.append_history("old", None).unwrap();
        let path = store.history_path();
        // A replica's sync holds the lock and replaces the file whole (the shared version, with a rename).
        let holder = File::open(&path).unwrap();
        holder.lock().unwrap();
        let old_ino = holder.metadata().unwrap().ino();
        let writer = {
            let store = store.clone();
            std::thread::spawn(move || store.append_history("mine", None).unwrap())
        };
        // Bounded wait, without sleeping, until the writer is blocked on the old file's lock (/proc/locks marks
        // a waiter with `->`).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let waiting = format!(":{old_ino} ");
        while !std::fs::read_to_string("/proc/locks")
            .unwrap_or_default()
            .lines()
            .any(|l| l.contains("->") && l.contains(&waiting))
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the writer never waited for the lock"
            );
            std::thread::yield_now();
        }
        let shared = "{\"cursor\": 1, \"content\": \"old\"}\n{\"cursor\": 2, \"content\": \"theirs\"}\n";
        nanobot_util::write_atomic(&path, shared.as_bytes()).unwrap();
        drop(holder);
        let entry = writer.join().unwrap();
        assert_eq!(entry.cursor, 3, "numbered after the replacing file's last cursor");
        let texts: Vec<String> = store
            .read_history_after(0)
            .unwrap()
            .into_iter()
            .map(|e| e.content)
            .collect();
        assert_eq!(texts, ["old", "theirs", "mine"]);
    }

    #[test]
    fn bad_dream_cursor_names_the_file() {
        let ws = tempfile::tempdir().unwrap();
        let store = MemoryStore::new(ws.path());
        assert_eq!(store.dream_cursor().unwrap(), 0);
        std::fs::create_dir_all(store.dir()).unwrap();
        std::fs::write(store.dream_cursor_path(), "abc").unwrap();
        let err = store.dream_cursor().unwrap_err().to_string();
        assert!(err.contains(".dream_cursor") && err.contains("abc"), "{err}");
        store.set_dream_cursor(12).unwrap();
        assert_eq!(store.dream_cursor().unwrap(), 12);
    }
}
