//! The one-time import of session files from the layouts older versions wrote.
//!
//! Earlier versions kept sessions in `<workspace>/sessions/` (named `<channel>_<chat_id>.jsonl`, or by the
//! current base64url rule) and, earlier still, directly in `<config dir>/sessions/`. The workspace is where the
//! model can write files, so these places are read exactly **once**, when a store first opens its namespace
//! (an upgrade), and never again: a file planted there later is never taken for anybody's history. The
//! namespace records that the import ran in [`IMPORT_MARKER`].
//!
//! A file is imported only when its name agrees with the key its first line records (or, without a recorded
//! key, when its name is the base64url of a key): a file named after one chat cannot become another chat's
//! session. An existing session is never overwritten.
//!
//! Nothing of a chat's history stays where other chats can read it. Every file of `<workspace>/sessions/` that
//! names a session (by the key its first line records, or by a name that decodes to one) leaves the workspace
//! for [`MOVED_OUT`] inside the namespace folder, out of every file tool's reach: an imported one as
//! `<file>.migrated-<time>`, one that was not imported (its name disagrees with its key, or the session already
//! exists) as `<file>.not-imported-<time>`. Kept, never deleted. The Python nanobot 0.3.5 deletes the files it
//! migrated and archives conflicts the same way. Files in `<config dir>/sessions/` are already out of reach and
//! are renamed in place. Files naming no session stay where they are and are logged.
//!
//! Homes upgraded by an earlier nanobot-rs (which left `<file>.migrated-<time>` in the workspace) have those
//! copies moved out once too: the marker's text says which of the two steps have run.

use std::fs;
use std::path::Path;

use crate::error::{Result, SessionError};
use crate::{fsio, keyname};

/// Marker file inside the namespace folder: the legacy import has run.
pub const IMPORT_MARKER: &str = ".legacy-import-done";

/// Folder inside the namespace folder holding the old-layout files taken out of the workspace.
pub const MOVED_OUT: &str = ".migrated-from-workspace";

/// What the import did, for logs and tests.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ImportReport {
    /// Keys imported.
    pub imported: Vec<String>,
    /// Files not imported, with the reason.
    pub skipped: Vec<(std::path::PathBuf, String)>,
    /// Files taken out of the workspace: where each was and where it is now.
    pub moved: Vec<(std::path::PathBuf, std::path::PathBuf)>,
}

/// Runs the import into `dir` (the namespace folder) unless it has run before.
pub(crate) fn import_once(config_dir: &Path, workspace: &Path, dir: &Path) -> Result<ImportReport> {
    let marker = dir.join(IMPORT_MARKER);
    let mut report = ImportReport::default();
    let done = match fs::read(&marker) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            import_dir(
                &workspace.join("sessions"),
                dir,
                Some(&dir.join(MOVED_OUT)),
                &mut report,
            )?;
            import_dir(&config_dir.join("sessions"), dir, None, &mut report)?;
            for (path, why) in &report.skipped {
                tracing::warn!(file = %path.display(), reason = %why, "old-layout session file not imported");
            }
            Vec::new()
        }
        Err(e) => return Err(SessionError::io("read", &marker, e)),
    };
    if done != MARKER_TEXT.as_bytes() {
        if !done.is_empty() {
            move_out_earlier_copies(workspace, dir, &mut report);
        }
        fsio::write_atomic(&marker, MARKER_TEXT.as_bytes())?;
    }
    Ok(report)
}

/// The marker's text once both steps ran (an earlier version wrote another text after the import alone).
const MARKER_TEXT: &str =
    "imported once; old-layout session files are not read again and are kept out of the workspace\n";

/// Moves the `<file>.migrated-<time>` copies an earlier nanobot-rs left in `<workspace>/sessions/` out of the
/// workspace.
fn move_out_earlier_copies(workspace: &Path, dir: &Path, report: &mut ImportReport) {
    let old_dir = workspace.join("sessions");
    if !fs::symlink_metadata(&old_dir).is_ok_and(|m| m.is_dir()) {
        return;
    }
    let Ok(entries) = fs::read_dir(&old_dir) else {
        tracing::warn!(dir = %old_dir.display(), "could not list the old sessions folder");
        return;
    };
    let mut copies: Vec<_> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.contains(".jsonl.migrated-"))
                && fs::symlink_metadata(p).is_ok_and(|m| m.is_file())
        })
        .collect();
    copies.sort();
    let out = dir.join(MOVED_OUT);
    for path in copies {
        let to = out.join(path.file_name().unwrap_or_default());
        match move_file(&path, &to) {
            Ok(()) => report.moved.push((path, to)),
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "could not move an old session copy out of the workspace")
            }
        }
    }
}

/// Moves `from` to the new file `to` (its folder created 0700): a rename, or on another file system a private
/// copy, synced, then the removal of `from`.
fn move_file(from: &Path, to: &Path) -> Result<()> {
    fsio::create_dir_private(to.parent().unwrap_or(Path::new(".")))?;
    if fs::symlink_metadata(to).is_ok() {
        return Err(SessionError::io(
            "move",
            to,
            std::io::Error::from(std::io::ErrorKind::AlreadyExists),
        ));
    }
    match fs::rename(from, to) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::CrossesDevices => {
            fsio::copy_private(from, to)?;
            fs::remove_file(from).map_err(|e| SessionError::io("remove", from, e))?;
        }
        Err(e) => return Err(SessionError::io("move", from, e)),
    }
    for d in [from.parent(), to.parent()].into_iter().flatten() {
        fs::File::open(d)
            .and_then(|f| f.sync_all())
            .map_err(|e| SessionError::io("fsync", d, e))?;
    }
    Ok(())
}

/// Imports the `.jsonl` files of `old_dir`; with `out`, every file naming a session is then moved there (out of
/// the workspace), else it is renamed in place.
fn import_dir(old_dir: &Path, dir: &Path, out: Option<&Path>, report: &mut ImportReport) -> Result<()> {
    match fs::symlink_metadata(old_dir) {
        Ok(m) if m.file_type().is_symlink() => {
            report
                .skipped
                .push((old_dir.to_owned(), "the folder is a symlink".into()));
            return Ok(());
        }
        Ok(m) if m.is_dir() => {}
        _ => return Ok(()),
    }
    let entries = fs::read_dir(old_dir).map_err(|e| SessionError::io("list", old_dir, e))?;
    let mut files: Vec<_> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    files.sort();
    for path in files {
        let (what, named) = match import_file(&path, dir) {
            Ok(key) => {
                report.imported.push(key);
                ("migrated", true)
            }
            Err(Skip { why, names_a_session }) => {
                report.skipped.push((path.clone(), why));
                ("not-imported", names_a_session)
            }
        };
        if !named {
            continue;
        }
        let kept = match out {
            Some(out) => fsio::backup_path(&out.join(path.file_name().unwrap_or_default()), what),
            None => fsio::backup_path(&path, what),
        };
        match move_file(&path, &kept) {
            Ok(()) => {
                tracing::info!(from = %path.display(), kept = %kept.display(), "old-layout session file kept out of the workspace");
                report.moved.push((path, kept));
            }
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "could not move an old-layout session file")
            }
        }
    }
    Ok(())
}

/// Why a file was not imported, and whether it names a session (a chat's history, to take out of reach).
struct Skip {
    why: String,
    names_a_session: bool,
}

impl Skip {
    fn anonymous(why: impl Into<String>) -> Self {
        Skip {
            why: why.into(),
            names_a_session: false,
        }
    }
    fn session(why: impl Into<String>) -> Self {
        Skip {
            why: why.into(),
            names_a_session: true,
        }
    }
}

/// Imports one file (the caller moves it away); `Err` carries why it was not imported.
fn import_file(path: &Path, dir: &Path) -> std::result::Result<String, Skip> {
    let meta = fs::symlink_metadata(path).map_err(|e| Skip::anonymous(e.to_string()))?;
    if !meta.is_file() {
        return Err(Skip::anonymous("not a regular file (symlinks are not followed)"));
    }
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut bytes = fs::read(path).map_err(|e| Skip::anonymous(e.to_string()))?;
    let first = bytes.split(|&b| b == b'\n').next().unwrap_or_default();
    let recorded = serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(first)
        .ok()
        .and_then(|m| m.get("key").and_then(|k| k.as_str()).map(str::to_owned));
    let key = match recorded {
        Some(k) if crate::store::legacy_safe_key(&k) == stem || keyname::file_stem(&k) == stem => k,
        Some(k) => {
            return Err(Skip::session(format!(
                "its name does not match the key {k:?} its first line records"
            )));
        }
        None => keyname::key_from_stem(&stem)
            .ok_or_else(|| Skip::anonymous("it records no key and its name is not the encoding of one"))?,
    };
    keyname::check_key(&key).map_err(|e| Skip::anonymous(e.to_string()))?;
    let new = dir.join(format!("{}.jsonl", keyname::file_stem(&key)));
    if fs::symlink_metadata(&new).is_ok() {
        return Err(Skip::session(format!(
            "session {key:?} already exists in the current layout"
        )));
    }
    if bytes.last().is_some_and(|&b| b != b'\n') {
        let cut = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        if serde_json::from_slice::<serde_json::Value>(&bytes[cut..]).is_ok() {
            bytes.push(b'\n');
        } else {
            tracing::warn!(file = %path.display(), "old-layout session ends with a cut line; the old file keeps it");
            bytes.truncate(cut);
        }
    }
    fsio::write_atomic(&new, &bytes).map_err(|e| Skip::session(e.to_string()))?;
    tracing::info!(from = %path.display(), to = %new.display(), "imported old-layout session file");
    Ok(key)
}
