//! Small file helpers: atomic replacement and "missing means empty" reads.

use std::fs;
use std::io::ErrorKind;
use std::path::Path;

use crate::error::{MemoryError, Result};

/// Reads a UTF-8 file; `None` when it does not exist.
pub(crate) fn read_optional(path: &Path) -> Result<Option<String>> {
    match fs::read(path) {
        Ok(bytes) => String::from_utf8(bytes)
            .map(Some)
            .map_err(|e| MemoryError::Corrupt {
                path: path.to_owned(),
                line: 0,
                message: format!("not valid UTF-8: {e}"),
            }),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(MemoryError::io("reading", path, e)),
    }
}

/// Creates `dir` and its parents.
pub(crate) fn ensure_dir(dir: &Path) -> Result<()> {
    fs::create_dir_all(dir).map_err(|e| MemoryError::io("creating directory", dir, e))
}

/// Replaces `path` with `contents` atomically ([`nanobot_util::write_atomic`]), creating the directory first.
/// A reader sees the old or the new contents, never a mix; a crash leaves one of them.
pub(crate) fn write_atomic(path: &Path, contents: &[u8]) -> Result<()> {
    ensure_dir(path.parent().unwrap_or(Path::new(".")))?;
    nanobot_util::write_atomic(path, contents).map_err(|e| MemoryError::io(e.action, e.path, e.source))
}

/// Deletes `path`; a missing file is fine.
pub(crate) fn remove_optional(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(MemoryError::io("deleting", path, e)),
    }
}
