//! Low-level file operations: private modes, atomic replace, durable append, tail repair.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::error::{Result, SessionError};
use crate::time;

/// Creates `dir` and its missing parents (new directories mode 0700).
pub(crate) fn create_dir_private(dir: &Path) -> Result<()> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder
        .create(dir)
        .map_err(|e| SessionError::io("create directory", dir, e))
}

/// Open options for a new private (0600) file.
pub(crate) fn private_new() -> OpenOptions {
    let mut o = OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
    o
}

/// Replaces `path` with `bytes` atomically ([`nanobot_util::write_atomic`]: a private temp file in the same
/// directory, fsync, rename, fsync of the directory), creating the directory (0700) first. A crash leaves either
/// the old or the new file, never a mix.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    create_dir_private(path.parent().unwrap_or(Path::new(".")))?;
    nanobot_util::write_atomic(path, bytes).map_err(|e| SessionError::io(e.action, e.path, e.source))
}

/// Opens `path` for appending (`O_APPEND`); `None` if it does not exist.
pub(crate) fn open_append(path: &Path) -> Result<Option<File>> {
    match OpenOptions::new().append(true).open(path) {
        Ok(f) => Ok(Some(f)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(SessionError::io("open for append", path, e)),
    }
}

/// What [`repair_tail`] found at the end of a file.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Tail {
    /// The file is missing.
    Missing,
    /// Empty, or ends with a newline.
    Clean,
    /// The last line was complete JSON without its newline; the newline was added.
    NewlineAdded,
    /// The last line was cut (a crash mid-write): the file was copied to `backup`, then cut back to its last
    /// complete line.
    Truncated {
        /// The copy of the damaged file.
        backup: PathBuf,
    },
}

/// Makes sure `path` ends with a complete line, so that the next append starts a fresh line and a load sees
/// only whole records. Reads only the last line, however long the file is.
pub(crate) fn repair_tail(path: &Path) -> Result<Tail> {
    repair_tail_counted(path, &mut 0)
}

/// [`repair_tail`], adding the bytes it read to `read`. A file that ends with a newline costs one byte.
pub(crate) fn repair_tail_counted(path: &Path, read: &mut u64) -> Result<Tail> {
    let mut f = match OpenOptions::new().read(true).append(true).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Tail::Missing),
        Err(e) => return Err(SessionError::io("open", path, e)),
    };
    let len = f.metadata().map_err(|e| SessionError::io("stat", path, e))?.len();
    if len == 0 {
        return Ok(Tail::Clean);
    }
    let mut last = [0u8; 1];
    f.seek(SeekFrom::Start(len - 1))
        .map_err(|e| SessionError::io("seek", path, e))?;
    f.read_exact(&mut last)
        .map_err(|e| SessionError::io("read", path, e))?;
    *read += 1;
    if last[0] == b'\n' {
        return Ok(Tail::Clean);
    }
    let (start, fragment) = last_line_counted(&mut f, len, path, read)?;
    if serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(&fragment).is_ok() {
        f.write_all(b"\n")
            .map_err(|e| SessionError::io("append to", path, e))?;
        f.sync_data().map_err(|e| SessionError::io("fsync", path, e))?;
        return Ok(Tail::NewlineAdded);
    }
    let backup = backup_path(path, "corrupt");
    copy_private(path, &backup)?;
    f.set_len(start)
        .map_err(|e| SessionError::io("truncate", path, e))?;
    f.sync_all().map_err(|e| SessionError::io("fsync", path, e))?;
    tracing::warn!(
        file = %path.display(),
        backup = %backup.display(),
        dropped_bytes = len - start,
        "session file ended with an incomplete line (interrupted write); kept every complete line, \
         saved the damaged file as a backup"
    );
    Ok(Tail::Truncated { backup })
}

/// The last line of the file (its start offset and bytes, trailing newline included when there is one).
pub(crate) fn last_line(f: &mut File, len: u64, path: &Path) -> Result<(u64, Vec<u8>)> {
    last_line_counted(f, len, path, &mut 0)
}

/// [`last_line`], adding the bytes read to `read`. Linear in the line's length: chunks are read backwards,
/// only the new chunk is searched for a newline, and they are joined once at the end.
fn last_line_counted(f: &mut File, len: u64, path: &Path, read: &mut u64) -> Result<(u64, Vec<u8>)> {
    let mut chunk_len: u64 = 16 * 1024;
    // Newest chunk first; joined in file order at the end.
    let mut chunks: Vec<Vec<u8>> = Vec::new();
    let mut pos = len;
    let mut first = true;
    loop {
        let start = pos.saturating_sub(chunk_len);
        let mut chunk = vec![0u8; (pos - start) as usize];
        f.seek(SeekFrom::Start(start))
            .map_err(|e| SessionError::io("seek", path, e))?;
        f.read_exact(&mut chunk)
            .map_err(|e| SessionError::io("read", path, e))?;
        *read += chunk.len() as u64;
        // The newline that ends the last line is part of it, not its start.
        let limit = chunk.len() - usize::from(first && chunk.last() == Some(&b'\n'));
        first = false;
        let found = chunk[..limit].iter().rposition(|&b| b == b'\n');
        match found {
            Some(nl) => {
                chunks.push(chunk.split_off(nl + 1));
                break;
            }
            None => chunks.push(chunk),
        }
        if start == 0 {
            break;
        }
        pos = start;
        chunk_len = (chunk_len * 2).min(8 * 1024 * 1024);
    }
    let line: Vec<u8> = chunks.into_iter().rev().flatten().collect();
    Ok((len - line.len() as u64, line))
}

pub(crate) fn backup_path(path: &Path, what: &str) -> PathBuf {
    let stamp = time::now().format("%Y%m%dT%H%M%S%.3f").to_string();
    let base = format!("{}.{what}-{stamp}", path.display());
    let mut candidate = PathBuf::from(&base);
    let mut n = 1;
    while candidate.exists() {
        candidate = PathBuf::from(format!("{base}-{n}"));
        n += 1;
    }
    candidate
}

/// Copies `from` to the new file `to` (mode 0600) and syncs it.
pub(crate) fn copy_private(from: &Path, to: &Path) -> Result<()> {
    let mut src = File::open(from).map_err(|e| SessionError::io("open", from, e))?;
    let mut dst = private_new()
        .open(to)
        .map_err(|e| SessionError::io("create", to, e))?;
    std::io::copy(&mut src, &mut dst).map_err(|e| SessionError::io("copy to", to, e))?;
    dst.sync_all().map_err(|e| SessionError::io("fsync", to, e))
}

/// The first line of a file (without its newline); `None` if the file is missing.
pub(crate) fn first_line(path: &Path) -> Result<Option<Vec<u8>>> {
    use std::io::BufRead;
    let f = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(SessionError::io("open", path, e)),
    };
    let mut line = Vec::new();
    std::io::BufReader::new(f)
        .read_until(b'\n', &mut line)
        .map_err(|e| SessionError::io("read", path, e))?;
    if line.last() == Some(&b'\n') {
        line.pop();
    }
    Ok(Some(line))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_line_handles_long_lines_and_single_lines() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let long = "x".repeat(40_000);
        fs::write(&p, format!("a\n{long}\n")).unwrap();
        let mut f = File::open(&p).unwrap();
        let len = f.metadata().unwrap().len();
        let (start, line) = last_line(&mut f, len, &p).unwrap();
        assert_eq!(start, 2);
        assert_eq!(line.len(), 40_001);
        fs::write(&p, "only").unwrap();
        let mut f = File::open(&p).unwrap();
        assert_eq!(last_line(&mut f, 4, &p).unwrap(), (0, b"only".to_vec()));
    }

    #[test]
    fn repair_adds_newline_or_truncates() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.jsonl");
        fs::write(&p, "{\"a\":1}\n{\"b\":2}").unwrap();
        assert_eq!(repair_tail(&p).unwrap(), Tail::NewlineAdded);
        assert_eq!(fs::read_to_string(&p).unwrap(), "{\"a\":1}\n{\"b\":2}\n");
        assert_eq!(repair_tail(&p).unwrap(), Tail::Clean);
        fs::write(&p, "{\"a\":1}\n{\"b\":").unwrap();
        let Tail::Truncated { backup } = repair_tail(&p).unwrap() else {
            panic!("not truncated")
        };
        assert_eq!(fs::read_to_string(&p).unwrap(), "{\"a\":1}\n");
        assert_eq!(fs::read_to_string(backup).unwrap(), "{\"a\":1}\n{\"b\":");
        assert_eq!(repair_tail(&dir.path().join("none")).unwrap(), Tail::Missing);
    }
}
