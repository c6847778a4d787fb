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
//! session. An existing session is never overwritten. Imported files are renamed `<file>.migrated-<time>`
//! (kept, never deleted); skipped files stay where they are and are logged.

use std::fs;
use std::path::Path;

use crate::error::{Result, SessionError};
use crate::{fsio, keyname};

/// Marker file inside the namespace folder: the legacy import has run.
pub const IMPORT_MARKER: &str = ".legacy-import-done";

/// What the import did, for logs and tests.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ImportReport {
    /// Keys imported.
    pub imported: Vec<String>,
    /// Files left alone, with the reason.
    pub skipped: Vec<(std::path::PathBuf, String)>,
}

/// Runs the import into `dir` (the namespace folder) unless it has run before.
pub(crate) fn import_once(config_dir: &Path, workspace: &Path, dir: &Path) -> Result<ImportReport> {
    let marker = dir.join(IMPORT_MARKER);
    if fs::symlink_metadata(&marker).is_ok() {
        return Ok(ImportReport::default());
    }
    let mut report = ImportReport::default();
    for old_dir in [workspace.join("sessions"), config_dir.join("sessions")] {
        import_dir(&old_dir, dir, &mut report)?;
    }
    fsio::write_atomic(
        &marker,
        b"imported once; old-layout session files are not read again\n",
    )?;
    for (path, why) in &report.skipped {
        tracing::warn!(file = %path.display(), reason = %why, "old-layout session file not imported");
    }
    Ok(report)
}

fn import_dir(old_dir: &Path, dir: &Path, report: &mut ImportReport) -> Result<()> {
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
        match import_file(&path, dir) {
            Ok(key) => report.imported.push(key),
            Err(why) => report.skipped.push((path, why)),
        }
    }
    Ok(())
}

/// Imports one file; `Err` carries why it was left alone.
fn import_file(path: &Path, dir: &Path) -> std::result::Result<String, String> {
    let meta = fs::symlink_metadata(path).map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file (symlinks are not followed)".into());
    }
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut bytes = fs::read(path).map_err(|e| e.to_string())?;
    let first = bytes.split(|&b| b == b'\n').next().unwrap_or_default();
    let recorded = serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(first)
        .ok()
        .and_then(|m| m.get("key").and_then(|k| k.as_str()).map(str::to_owned));
    let key = match recorded {
        Some(k) if crate::store::legacy_safe_key(&k) == stem || keyname::file_stem(&k) == stem => k,
        Some(k) => {
            return Err(format!(
                "its name does not match the key {k:?} its first line records"
            ));
        }
        None => keyname::key_from_stem(&stem)
            .ok_or("it records no key and its name is not the encoding of one")?,
    };
    keyname::check_key(&key).map_err(|e| e.to_string())?;
    let new = dir.join(format!("{}.jsonl", keyname::file_stem(&key)));
    if fs::symlink_metadata(&new).is_ok() {
        return Err(format!("session {key:?} already exists in the current layout"));
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
    fsio::write_atomic(&new, &bytes).map_err(|e| e.to_string())?;
    let kept = fsio::backup_path(path, "migrated");
    fs::rename(path, &kept).map_err(|e| e.to_string())?;
    tracing::info!(from = %path.display(), to = %new.display(), kept = %kept.display(), "imported old-layout session file");
    Ok(key)
}
