//! Small file helpers: atomic replacement and "missing means empty" reads.

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Write};
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

/// Replaces `path` with `contents` atomically: a temporary file in the same directory, fsync, rename, fsync of
/// the directory. A reader sees the old or the new contents, never a mix; a crash leaves one of them.
pub(crate) fn write_atomic(path: &Path, contents: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    ensure_dir(dir)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp-{}-{}", std::process::id(), unique()));
    let result = (|| {
        let mut f = create_private(&tmp).map_err(|e| MemoryError::io("creating", &tmp, e))?;
        f.write_all(contents)
            .map_err(|e| MemoryError::io("writing", &tmp, e))?;
        f.sync_all().map_err(|e| MemoryError::io("syncing", &tmp, e))?;
        fs::rename(&tmp, path).map_err(|e| MemoryError::io("renaming into place", path, e))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result?;
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Deletes `path`; a missing file is fine.
pub(crate) fn remove_optional(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(MemoryError::io("deleting", path, e)),
    }
}

/// Opens a new file for writing with mode 0600 on Unix.
pub(crate) fn create_private(path: &Path) -> std::io::Result<File> {
    let mut o = OpenOptions::new();
    o.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600);
    }
    o.open(path)
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}
