//! [`ConfinedDir`]: nanobot's own files in a directory the model can also write to (the workspace: memory,
//! skills, the cron store, `HEARTBEAT.md`), opened *beneath* a handle of that directory.
//!
//! The model's `exec` commands may leave anything in the workspace: a symlink where `memory/` was, a hard link
//! to a file elsewhere, a FIFO named `MEMORY.md`, a folder swapped for a link while nanobot works. Opening such
//! a path by name would make nanobot itself (which the exec sandbox does not confine) read or write outside the
//! workspace on the model's behalf, for example append memory to `~/.bashrc` or put `config.json` into a prompt.
//! So every path here is relative to the root and resolved from a handle of it with [`cap_std`] (Linux
//! `openat2` with `RESOLVE_BENEATH`, or a checked component walk): no `..`, absolute symlink or symlink leading
//! out of the root is followed, whatever happens to the names in between. Symlinks that stay inside are
//! followed. Files are opened without blocking (a FIFO cannot hang nanobot), must be regular files, and must
//! have a single name (a hard link may be a second name of a file outside). Replacing a file writes a
//! temporary file beside it and renames it into place within the same directory handle, so a symlink raced
//! into the target's place is replaced, never followed.
//!
//! The root itself is trusted: it is the directory the user configured, opened by name each time.
//!
//! ```
//! use std::path::Path;
//! use nanobot_util::ConfinedDir;
//!
//! let ws = tempfile::tempdir().unwrap();
//! let dir = ConfinedDir::new(ws.path());
//! dir.write_atomic(Path::new("memory/MEMORY.md"), b"# Facts\n").unwrap();
//! assert_eq!(dir.read(Path::new("memory/MEMORY.md")).unwrap().as_deref(), Some(&b"# Facts\n"[..]));
//! assert_eq!(dir.read(Path::new("memory/missing.md")).unwrap(), None);
//!
//! // A link the model planted that leads out of the workspace is not followed.
//! std::os::unix::fs::symlink("/etc", ws.path().join("skills")).unwrap();
//! let err = dir.read(Path::new("skills/passwd")).unwrap_err();
//! assert!(err.to_string().contains("leads outside"), "{err}");
//! ```

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use cap_std::ambient_authority;
use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt};
use rustix::fs::OFlags;

/// What an entry of a directory listed by [`ConfinedDir::read_dir`] is (its own type: symlinks are not
/// followed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link (open it to see whether it stays inside the root).
    Symlink,
    /// A FIFO, socket or device.
    Other,
}

/// A directory whose files nanobot reads and writes only beneath a handle of it. Cheap to clone.
///
/// Every method takes a path relative to the root made of plain names (no `..`, no leading `/`); anything
/// else is an `InvalidInput` error. Errors say why in terms a user can act on; callers name the path
/// ([`ConfinedDir::display_path`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfinedDir {
    root: PathBuf,
}

/// Files are created private to the user.
const FILE_MODE: u32 = 0o600;

/// The largest file [`ConfinedDir::read`] takes into memory: far above any memory, skill or cron file nanobot
/// writes, and below the 1 GiB a command may write (`tools.exec.maxFileSizeMb`), so a planted file cannot make
/// nanobot allocate without bound.
pub const MAX_READ_BYTES: u64 = 256 * 1024 * 1024;

impl ConfinedDir {
    /// The directory `root` (nothing is opened yet; it need not exist until a method is called).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `root/rel`, for messages.
    pub fn display_path(&self, rel: &Path) -> PathBuf {
        self.root.join(rel)
    }

    /// Reads a whole file; `None` when it (or a directory on the way) does not exist. A file larger than
    /// [`MAX_READ_BYTES`] is an error (`FileTooLarge`) and is not read.
    pub fn read(&self, rel: &Path) -> io::Result<Option<Vec<u8>>> {
        let Some(file) = self.open_file(rel, OpenOptions::new().read(true))? else {
            return Ok(None);
        };
        let len = file.metadata()?.len();
        if len > MAX_READ_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::FileTooLarge,
                format!("{len} bytes, more than the {MAX_READ_BYTES} nanobot reads into memory"),
            ));
        }
        let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
        // `take` as well: a file that grows while it is read stops at the limit too.
        file.take(MAX_READ_BYTES + 1).read_to_end(&mut bytes)?;
        if bytes.len() as u64 > MAX_READ_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::FileTooLarge,
                format!("more than the {MAX_READ_BYTES} bytes nanobot reads into memory"),
            ));
        }
        Ok(Some(bytes))
    }

    /// Reads a whole UTF-8 file; `None` when it does not exist, `InvalidData` when it is not UTF-8.
    pub fn read_to_string(&self, rel: &Path) -> io::Result<Option<String>> {
        match self.read(rel)? {
            None => Ok(None),
            Some(bytes) => String::from_utf8(bytes)
                .map(Some)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("not valid UTF-8: {e}"))),
        }
    }

    /// Opens an existing file for reading; `None` when it does not exist.
    pub fn open_read(&self, rel: &Path) -> io::Result<Option<File>> {
        self.open_file(rel, OpenOptions::new().read(true))
    }

    /// Opens a file for reading and appending, creating it (mode 0600) and its directories when missing.
    /// Every `write` goes to the end (`O_APPEND`).
    pub fn open_append(&self, rel: &Path) -> io::Result<File> {
        self.create_parent(rel)?;
        let mut opts = OpenOptions::new();
        opts.read(true).append(true).create(true).mode(FILE_MODE);
        self.open_file(rel, &opts)?
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
    }

    /// Opens (creating when missing, never truncating) a lock file, for `File::lock`.
    pub fn open_lock(&self, rel: &Path) -> io::Result<File> {
        self.create_parent(rel)?;
        let mut opts = OpenOptions::new();
        opts.write(true).create(true).truncate(false).mode(FILE_MODE);
        self.open_file(rel, &opts)?
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
    }

    /// Replaces `rel` with `bytes` atomically, creating its directories: a temporary file (mode 0600) beside
    /// it, written and fsynced, renamed over it within the same directory handle, then the directory fsynced.
    /// A reader sees the old or the new contents; a symlink at `rel` is replaced, not followed.
    pub fn write_atomic(&self, rel: &Path, bytes: &[u8]) -> io::Result<()> {
        let (parent, name) = self.parent(rel, true)?;
        replace_in(&parent, &name, bytes, FILE_MODE).map_err(|e| self.explain(e))
    }

    /// Creates the directory `rel` and its parents beneath the root.
    pub fn create_dir_all(&self, rel: &Path) -> io::Result<()> {
        check_relative(rel)?;
        let root = self.open_root(true)?;
        if rel.as_os_str().is_empty() {
            return Ok(());
        }
        match root.open_dir(rel) {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                root.create_dir_all(rel).map_err(|e| self.explain(e))
            }
            Err(e) => Err(self.explain(e)),
        }
    }

    /// Removes the file (or symlink) `rel`; `Ok(false)` when it did not exist.
    pub fn remove_file(&self, rel: &Path) -> io::Result<bool> {
        let (parent, name) = match self.parent(rel, false) {
            Ok(p) => p,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(e),
        };
        match parent.remove_file(&name) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(self.explain(e)),
        }
    }

    /// Renames `from` to `to` (both beneath the root), replacing `to`.
    pub fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let (from_dir, from_name) = self.parent(from, false)?;
        let (to_dir, to_name) = self.parent(to, true)?;
        from_dir
            .rename(&from_name, &to_dir, &to_name)
            .map_err(|e| self.explain(e))
    }

    /// The metadata of `rel` itself (a symlink is not followed); `None` when it does not exist.
    pub fn symlink_metadata(&self, rel: &Path) -> io::Result<Option<std::fs::Metadata>> {
        let (parent, name) = match self.parent(rel, false) {
            Ok(p) => p,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match rustix::fs::openat(&parent, name.as_os_str(), flags, rustix::fs::Mode::empty()) {
            Ok(fd) => File::from(fd).metadata().map(Some),
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(e) => Err(self.explain(e.into())),
        }
    }

    /// The entries of the directory `rel` (`.` and `..` left out) with their own types, sorted by name;
    /// `None` when the directory does not exist.
    pub fn read_dir(&self, rel: &Path) -> io::Result<Option<Vec<(OsString, EntryKind)>>> {
        check_relative(rel)?;
        let root = match self.open_root(false) {
            Ok(r) => r,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let dir = if rel.as_os_str().is_empty() {
            root
        } else {
            match root.open_dir(rel) {
                Ok(d) => d,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(self.explain(e)),
            }
        };
        let mut out = Vec::new();
        for entry in dir.entries().map_err(|e| self.explain(e))? {
            let entry = entry.map_err(|e| self.explain(e))?;
            let kind = match entry.file_type() {
                Ok(t) if t.is_symlink() => EntryKind::Symlink,
                Ok(t) if t.is_dir() => EntryKind::Dir,
                Ok(t) if t.is_file() => EntryKind::File,
                Ok(_) => EntryKind::Other,
                Err(_) => continue, // removed while listing
            };
            out.push((entry.file_name(), kind));
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(Some(out))
    }

    /// Opens `rel` with `opts` beneath the root, checking that it is a regular file with one name.
    fn open_file(&self, rel: &Path, opts: &OpenOptions) -> io::Result<Option<File>> {
        check_relative(rel)?;
        if rel.as_os_str().is_empty() {
            return Err(invalid(rel, "names no file"));
        }
        let root = match self.open_root(false) {
            Ok(r) => r,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut opts = opts.clone();
        // A FIFO must not hang the open (nor the read: it is refused below); no terminal is adopted.
        opts.custom_flags((OFlags::NONBLOCK | OFlags::NOCTTY).bits() as i32);
        let file = match root.open_with(rel, &opts) {
            Ok(f) => f.into_std(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(self.explain(e)),
        };
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file; nanobot does not read or write it",
            ));
        }
        if meta.nlink() > 1 {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "a hard-linked file ({} names); nanobot does not read or write through it, because \
                     another of its names may lie outside {}",
                    meta.nlink(),
                    self.root.display()
                ),
            ));
        }
        // Back to blocking mode for ordinary reads and writes of the regular file.
        let flags = rustix::fs::fcntl_getfl(&file)?;
        rustix::fs::fcntl_setfl(&file, flags - OFlags::NONBLOCK)?;
        Ok(Some(file))
    }

    /// The handle of the root; created (by name: the root is the user's) when `create`.
    fn open_root(&self, create: bool) -> io::Result<Dir> {
        if create {
            std::fs::create_dir_all(&self.root).map_err(|e| with_path(&self.root, "cannot create", e))?;
        }
        Dir::open_ambient_dir(&self.root, ambient_authority())
            .map_err(|e| with_path(&self.root, "cannot open", e))
    }

    /// The handle of `rel`'s directory (beneath the root, created when `create`) and `rel`'s last name.
    fn parent(&self, rel: &Path, create: bool) -> io::Result<(Dir, OsString)> {
        check_relative(rel)?;
        let name = rel
            .file_name()
            .map(OsStr::to_owned)
            .ok_or_else(|| invalid(rel, "names no file"))?;
        let root = self.open_root(create)?;
        let dir_rel = rel.parent().unwrap_or(Path::new(""));
        if dir_rel.as_os_str().is_empty() {
            return Ok((root, name));
        }
        // Open first: an existing link leading out is then refused as such (creating over it would only say that
        // something exists there).
        let dir = match root.open_dir(dir_rel) {
            Ok(d) => d,
            Err(e) if create && e.kind() == io::ErrorKind::NotFound => {
                root.create_dir_all(dir_rel).map_err(|e| self.explain(e))?;
                root.open_dir(dir_rel).map_err(|e| self.explain(e))?
            }
            Err(e) => return Err(self.explain(e)),
        };
        Ok((dir, name))
    }

    fn create_parent(&self, rel: &Path) -> io::Result<()> {
        self.parent(rel, true).map(drop)
    }

    /// Turns cap-std's refusal of an escape into a message that says what happened.
    fn explain(&self, e: io::Error) -> io::Error {
        if e.kind() == io::ErrorKind::PermissionDenied && e.to_string().contains("outside") {
            return io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "it leads outside {} (through a symbolic link or `..`), or through an absolute symbolic link; nanobot \
                     does not follow it",
                    self.root.display()
                ),
            );
        }
        e
    }
}

/// `rel` must be relative and made of plain names.
fn check_relative(rel: &Path) -> io::Result<()> {
    if rel.components().all(|c| matches!(c, Component::Normal(_))) {
        Ok(())
    } else {
        Err(invalid(
            rel,
            "must be a relative path of plain names (no `..`, no leading `/`)",
        ))
    }
}

fn invalid(rel: &Path, why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, format!("{}: {why}", rel.display()))
}

fn with_path(path: &Path, action: &str, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{action} {}: {e}", path.display()))
}

/// Creates a new temporary file beside `name` in `dir` (`O_EXCL`, mode 0600), returning its name.
/// Replaces the entry `name` of the directory handle `dir` with `bytes` atomically, with permissions `mode`: a
/// temporary file beside it (created exclusively, mode 0600 until written), written and fsynced, renamed over it
/// within the handle, then the directory fsynced. A reader sees the old or the new contents; a symlink at `name`
/// is replaced, not followed; a failed write removes its temporary file. The one such sequence for files opened
/// by handle (nanobot's own files here, the file tools' writes in `nanobot-tools`); [`crate::write_atomic`] is
/// the one for paths.
pub fn replace_in(dir: &Dir, name: &OsStr, bytes: &[u8], mode: u32) -> io::Result<()> {
    let (tmp, mut file) = create_temporary(dir, name)?;
    let written = file
        .write_all(bytes)
        .and_then(|()| file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode)))
        .and_then(|()| file.sync_all());
    drop(file);
    if let Err(e) = written.and_then(|()| dir.rename(&tmp, dir, name)) {
        let _ = dir.remove_file(&tmp);
        return Err(e);
    }
    let _ = rustix::fs::fsync(dir);
    Ok(())
}

fn create_temporary(dir: &Dir, name: &OsStr) -> io::Result<(OsString, File)> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut opts = OpenOptions::new();
    opts.write(true).create_new(true).mode(FILE_MODE);
    let mut last = None;
    for _ in 0..16 {
        let mut tmp = OsString::from(".");
        tmp.push(name);
        tmp.push(format!(
            ".{}.{}.tmp",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        match dir.open_with(&tmp, &opts) {
            Ok(f) => return Ok((tmp, f.into_std())),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::from(io::ErrorKind::AlreadyExists)))
}

/// The longest workspace prompt override used ([`workspace_prompt`]): longer files are cut.
pub const WORKSPACE_PROMPT_MAX_CHARS: usize = 32_000;

/// A prompt the user keeps in the workspace to replace a built-in one (0.3.5's `prompts/<name>.md`), read
/// beneath `ws`'s handle (a link leading out is not followed): its text without trailing blanks, cut at
/// [`WORKSPACE_PROMPT_MAX_CHARS`]; `None` when it is missing, empty, unreadable or not UTF-8 (the built-in one
/// applies; an unreadable file is logged).
pub fn workspace_prompt(ws: &ConfinedDir, rel: &Path) -> Option<String> {
    let text = match ws.read_to_string(rel) {
        Ok(Some(t)) => t,
        Ok(None) => return None,
        Err(e) => {
            tracing::warn!(file = %rel.display(), error = %e, "workspace prompt unreadable; using the default");
            return None;
        }
    };
    let text = text.trim_end();
    if text.is_empty() {
        return None;
    }
    let chars = text.chars().count();
    if chars > WORKSPACE_PROMPT_MAX_CHARS {
        tracing::warn!(file = %rel.display(), chars, "workspace prompt too long; cut");
        return Some(text.chars().take(WORKSPACE_PROMPT_MAX_CHARS).collect());
    }
    Some(text.to_owned())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    fn setup() -> (tempfile::TempDir, PathBuf, PathBuf, ConfinedDir) {
        let base = tempfile::tempdir().unwrap();
        let ws = base.path().join("ws");
        let outside = base.path().join("outside");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret"), "key=sk-outside").unwrap();
        let dir = ConfinedDir::new(&ws);
        (base, ws, outside, dir)
    }

    #[test]
    fn reads_writes_appends_and_lists_inside() {
        let (_b, ws, _o, dir) = setup();
        dir.write_atomic(Path::new("memory/MEMORY.md"), b"one").unwrap();
        dir.write_atomic(Path::new("memory/MEMORY.md"), b"two").unwrap();
        assert_eq!(
            std::fs::read_to_string(ws.join("memory/MEMORY.md")).unwrap(),
            "two"
        );
        let mut f = dir.open_append(Path::new("memory/history.jsonl")).unwrap();
        f.write_all(b"a\n").unwrap();
        let mut f = dir.open_append(Path::new("memory/history.jsonl")).unwrap();
        f.write_all(b"b\n").unwrap();
        assert_eq!(
            dir.read_to_string(Path::new("memory/history.jsonl"))
                .unwrap()
                .unwrap(),
            "a\nb\n"
        );
        let names: Vec<_> = dir
            .read_dir(Path::new("memory"))
            .unwrap()
            .unwrap()
            .into_iter()
            .map(|(n, k)| (n.into_string().unwrap(), k))
            .collect();
        assert_eq!(
            names,
            [
                ("MEMORY.md".to_owned(), EntryKind::File),
                ("history.jsonl".to_owned(), EntryKind::File)
            ],
            "no temporary file is left"
        );
        let mode = std::fs::metadata(ws.join("memory/MEMORY.md")).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(dir.remove_file(Path::new("memory/MEMORY.md")).unwrap());
        assert!(!dir.remove_file(Path::new("memory/MEMORY.md")).unwrap());
        assert_eq!(dir.read_dir(Path::new("nope")).unwrap(), None);
    }

    #[test]
    fn symlinks_inside_are_followed() {
        let (_b, ws, _o, dir) = setup();
        std::fs::create_dir_all(ws.join("notes")).unwrap();
        symlink("notes", ws.join("memory")).unwrap();
        dir.write_atomic(Path::new("memory/MEMORY.md"), b"x").unwrap();
        assert_eq!(std::fs::read_to_string(ws.join("notes/MEMORY.md")).unwrap(), "x");
    }

    #[test]
    fn a_directory_link_leading_out_is_refused_for_every_operation() {
        let (_b, ws, outside, dir) = setup();
        symlink(&outside, ws.join("memory")).unwrap();
        let rel = Path::new("memory/secret");
        for (what, err) in [
            ("read", dir.read(rel).unwrap_err()),
            ("append", dir.open_append(rel).unwrap_err()),
            ("lock", dir.open_lock(Path::new("memory/x.lock")).unwrap_err()),
            (
                "write",
                dir.write_atomic(Path::new("memory/new"), b"pwned").unwrap_err(),
            ),
            ("mkdir", dir.create_dir_all(Path::new("memory/sub")).unwrap_err()),
            ("remove", dir.remove_file(rel).unwrap_err()),
            ("list", dir.read_dir(Path::new("memory")).unwrap_err()),
        ] {
            assert!(err.to_string().contains("leads outside"), "{what}: {err}");
        }
        let relative = ws.join("skills");
        symlink("../outside", &relative).unwrap();
        assert!(dir.read(Path::new("skills/secret")).is_err());
        let names: Vec<_> = std::fs::read_dir(&outside)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["secret"], "nothing was created outside");
        assert_eq!(
            std::fs::read_to_string(outside.join("secret")).unwrap(),
            "key=sk-outside"
        );
    }

    #[test]
    fn a_final_link_leading_out_is_refused_and_replaced_on_write() {
        let (_b, ws, outside, dir) = setup();
        std::fs::create_dir_all(ws.join("memory")).unwrap();
        symlink(outside.join("secret"), ws.join("memory/MEMORY.md")).unwrap();
        assert!(dir.read(Path::new("memory/MEMORY.md")).is_err());
        assert!(dir.open_append(Path::new("memory/MEMORY.md")).is_err());
        dir.write_atomic(Path::new("memory/MEMORY.md"), b"mine").unwrap();
        assert_eq!(
            std::fs::read_to_string(outside.join("secret")).unwrap(),
            "key=sk-outside"
        );
        assert_eq!(
            std::fs::read_to_string(ws.join("memory/MEMORY.md")).unwrap(),
            "mine"
        );
    }

    #[test]
    fn hard_links_fifos_and_bad_paths_are_refused() {
        let (_b, ws, outside, dir) = setup();
        std::fs::hard_link(outside.join("secret"), ws.join("linked")).unwrap();
        let e = dir.read(Path::new("linked")).unwrap_err();
        assert!(e.to_string().contains("hard-linked"), "{e}");
        let e = dir.open_append(Path::new("linked")).unwrap_err();
        assert!(e.to_string().contains("hard-linked"), "{e}");
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            ws.join("fifo"),
            rustix::fs::Mode::from_raw_mode(0o600),
        )
        .unwrap();
        let e = dir.read(Path::new("fifo")).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        for bad in ["../outside/secret", "/etc/passwd", ""] {
            assert_eq!(
                dir.read(Path::new(bad)).unwrap_err().kind(),
                io::ErrorKind::InvalidInput,
                "{bad}"
            );
        }
    }

    #[test]
    fn a_file_over_the_read_limit_is_refused_without_reading_it() {
        let (_b, ws, _o, dir) = setup();
        let f = std::fs::File::create(ws.join("huge")).unwrap();
        f.set_len(MAX_READ_BYTES + 1).unwrap(); // sparse: nothing is written
        let e = dir.read(Path::new("huge")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::FileTooLarge, "{e}");
        f.set_len(3).unwrap();
        assert_eq!(dir.read(Path::new("huge")).unwrap().unwrap().len(), 3);
    }

    #[test]
    fn a_missing_root_reads_as_empty_and_is_created_on_write() {
        let base = tempfile::tempdir().unwrap();
        let dir = ConfinedDir::new(base.path().join("later"));
        assert_eq!(dir.read(Path::new("a")).unwrap(), None);
        assert_eq!(
            dir.symlink_metadata(Path::new("a")).unwrap().map(|m| m.len()),
            None
        );
        dir.write_atomic(Path::new("cron/jobs.json"), b"{}").unwrap();
        assert_eq!(
            dir.symlink_metadata(Path::new("cron/jobs.json"))
                .unwrap()
                .map(|m| m.len()),
            Some(2)
        );
    }
}
