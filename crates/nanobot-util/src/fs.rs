//! [`write_atomic`]: replace a file so that a crash leaves the old or the new contents, never a mix;
//! [`read_to_string_bounded`]: read a small file that something else may have made large.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Component, Path, PathBuf};

/// A step of [`write_atomic`] failed; names the step and the path it was working on.
#[derive(Debug, thiserror::Error)]
#[error("{action} {}", path.display())]
#[non_exhaustive]
pub struct AtomicWriteError {
    /// What failed: `cannot create a temporary file in`, `cannot write`, `cannot flush`, `cannot replace`.
    pub action: &'static str,
    /// The file or directory concerned.
    pub path: PathBuf,
    /// The I/O error.
    #[source]
    pub source: io::Error,
}

impl From<AtomicWriteError> for io::Error {
    fn from(e: AtomicWriteError) -> Self {
        io::Error::new(e.source.kind(), e)
    }
}

/// Replaces `path` with `bytes` atomically: a temporary file (mode 0600 on Unix) in the same directory,
/// written and fsynced, renamed over `path`, then the directory fsynced. A reader sees the old or the new
/// contents; a crash leaves one of them, and a failed write removes its temporary file. The directory must
/// exist (callers decide its permissions).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), AtomicWriteError> {
    let err = |action: &'static str, p: &Path| {
        let path = p.to_path_buf();
        move |source| AtomicWriteError { action, path, source }
    };
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".tmp")
        .tempfile_in(dir)
        .map_err(err("cannot create a temporary file in", dir))?;
    tmp.write_all(bytes).map_err(err("cannot write", tmp.path()))?;
    tmp.as_file()
        .sync_all()
        .map_err(err("cannot flush", tmp.path()))?;
    tmp.persist(path).map_err(|e| AtomicWriteError {
        action: "cannot replace",
        path: path.to_path_buf(),
        source: e.error,
    })?;
    sync_dir(dir);
    Ok(())
}

/// Reads `path` as UTF-8 (invalid bytes replaced) if it holds at most `limit` bytes; a larger file is an
/// `InvalidData` error naming the limit, and at most `limit + 1` bytes are read to find out.
pub fn read_to_string_bounded(path: &Path, limit: u64) -> io::Result<String> {
    read_bounded(path, limit).map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
}

/// The bytes of `path` if it holds at most `limit` of them; a larger file is an `InvalidData` error naming the
/// limit, and at most `limit + 1` bytes are read to find out.
pub fn read_bounded(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    use std::io::Read as _;
    let mut bytes = Vec::new();
    File::open(path)?
        .take(limit.saturating_add(1))
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is larger than {limit} bytes", path.display()),
        ));
    }
    Ok(bytes)
}

/// Flushes the rename to disk; best effort (some platforms and file systems cannot open a directory).
fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Lexical normalisation: drops `.`, applies `..` (never above the root).
pub fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for comp in path.components() {
        match comp {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// Resolves symlinks in the longest existing prefix of `path` (which must be absolute or is
/// taken as given) and normalises the non-existing rest lexically.
pub fn real_path(path: &Path) -> io::Result<PathBuf> {
    let comps: Vec<Component<'_>> = path
        .components()
        .filter(|c| !matches!(c, Component::CurDir))
        .collect();
    let mut cut = comps.len();
    loop {
        let prefix: PathBuf = if cut == 0 {
            PathBuf::from(".")
        } else {
            comps[..cut].iter().collect()
        };
        match std::fs::canonicalize(&prefix) {
            Ok(mut out) => {
                for comp in &comps[cut..] {
                    match comp {
                        Component::ParentDir => {
                            out.pop();
                        }
                        other => out.push(other.as_os_str()),
                    }
                }
                return Ok(out);
            }
            Err(e)
                if cut > 0
                    && (e.kind() == io::ErrorKind::NotFound || e.kind() == io::ErrorKind::NotADirectory) =>
            {
                cut -= 1;
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_reads_refuse_a_file_over_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        std::fs::write(&path, "12345").unwrap();
        assert_eq!(read_to_string_bounded(&path, 5).unwrap(), "12345");
        let err = read_to_string_bounded(&path, 4).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(err.to_string().contains("larger than 4 bytes"), "{err}");
    }

    #[test]
    fn replaces_whole_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jobs.json");
        std::fs::write(&path, "old contents, longer than the new").unwrap();
        write_atomic(&path, b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["jobs.json"]);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "written files are private");
        }
    }

    #[test]
    fn a_missing_directory_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nope").join("f.json");
        let e = write_atomic(&path, b"x").unwrap_err();
        assert_eq!(e.path, dir.path().join("nope"));
        assert!(e.to_string().contains("cannot create a temporary file in"), "{e}");
        assert!(!path.exists());
    }
}
