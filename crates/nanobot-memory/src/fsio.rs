//! The memory files' I/O, confined to the workspace: every path is relative to it and opened beneath a handle
//! of it ([`nanobot_util::ConfinedDir`]), so a symlink, hard link or FIFO that a command planted in the
//! workspace cannot make nanobot read or write outside it.

use std::io::ErrorKind;
use std::path::Path;

use nanobot_util::ConfinedDir;

use crate::error::{MemoryError, Result};

/// Reads a UTF-8 file; `None` when it does not exist.
pub(crate) fn read_optional(ws: &ConfinedDir, rel: &Path) -> Result<Option<String>> {
    ws.read_to_string(rel).map_err(|e| {
        let path = ws.display_path(rel);
        if e.kind() == ErrorKind::InvalidData {
            MemoryError::Corrupt {
                path,
                line: 0,
                message: e.to_string(),
            }
        } else {
            MemoryError::io("reading", path, e)
        }
    })
}

/// Creates the directory `rel` and its parents.
pub(crate) fn ensure_dir(ws: &ConfinedDir, rel: &Path) -> Result<()> {
    ws.create_dir_all(rel)
        .map_err(|e| MemoryError::io("creating directory", ws.display_path(rel), e))
}

/// Replaces `rel` with `contents` atomically, creating its directory first. A reader sees the old or the new
/// contents, never a mix; a crash leaves one of them.
pub(crate) fn write_atomic(ws: &ConfinedDir, rel: &Path, contents: &[u8]) -> Result<()> {
    ws.write_atomic(rel, contents)
        .map_err(|e| MemoryError::io("writing", ws.display_path(rel), e))
}

/// Deletes `rel`; a missing file is fine.
pub(crate) fn remove_optional(ws: &ConfinedDir, rel: &Path) -> Result<()> {
    ws.remove_file(rel)
        .map(drop)
        .map_err(|e| MemoryError::io("deleting", ws.display_path(rel), e))
}
