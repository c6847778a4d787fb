//! The path sandbox shared by every file tool: files are opened by handle, never re-opened by name.
//!
//! A tool path is expanded (`~` against the home directory the caller passed in, relative paths against
//! the workspace) and normalised lexically. Then it is opened one step at a time from a directory
//! handle, so what is checked is what is used:
//!
//! - **`restrictToWorkspace: true`**: the path must lie inside the workspace (or, for reads only, an
//!   extra read root such as the built-in skills folder). Its parent directory is opened *beneath* a
//!   handle of that root with [`cap_std`] (Linux `openat2` with `RESOLVE_BENEATH`, or a checked
//!   component walk where the kernel lacks it), so no `..`, absolute symlink, `/proc/self/root` magic
//!   link or directory swapped for a symlink mid-call can lead outside. Regular files with more than one
//!   hard link are refused: a hard link made earlier can point at any file on the same file system.
//! - **`restrictToWorkspace: false`**: any path may be used, as in the Python nanobot.
//! - **In both modes** nanobot's own data directory (`~/.nanobot`: config with keys, sessions,
//!   cron and pairing stores) is out of reach, except the workspace when it lives inside it. After the
//!   parent directory is opened, its real ancestry is walked upwards by handle (`openat(fd, "..")` and
//!   `fstat`, comparing device and inode numbers): if the data directory is met before the workspace,
//!   the call is refused. The identity check sees through symlinks, bind mounts and `/proc` magic links,
//!   because it looks at the directory actually opened, not at its name.
//!
//! The last path component is opened with `O_NOFOLLOW` relative to the verified parent handle. A final
//! symlink is read and its target resolved again from the top (at most [`MAX_SYMLINKS`] times), so it is
//! subject to the same checks. Writes create a temporary file beside the target through the same handle,
//! `fsync` it and rename it into place with `renameat`, which replaces a raced-in symlink rather than
//! following it.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use rustix::fs::{Mode, OFlags};

/// Most symlinks followed while resolving one tool path.
pub const MAX_SYMLINKS: usize = 40;

/// Why a path was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// The resolved path lies outside every allowed directory.
    #[error("Path {path} is outside allowed directory {allowed}", allowed = allowed.display())]
    OutsideWorkspace {
        /// The path as the model gave it.
        path: String,
        /// The workspace it had to stay in.
        allowed: PathBuf,
    },
    /// The path leads into nanobot's own data directory (config, sessions, pairing, cron).
    #[error(
        "Path {path} is inside nanobot's data directory {data_dir}, which file tools cannot reach",
        data_dir = data_dir.display()
    )]
    DataDir {
        /// The path as the model gave it.
        path: String,
        /// The data directory.
        data_dir: PathBuf,
    },
    /// The path leads into a folder this call may not reach (another conversation's or person's memory).
    #[error("Path {path} is in another conversation's memory, which this conversation's tools cannot reach")]
    Hidden {
        /// The path as the model gave it.
        path: String,
    },
    /// A regular file with more than one hard link, refused where it could lead outside.
    #[error(
        "Path {path} is a hard-linked file ({links} names); it is not read or written through \
         because another of its names may lie outside the allowed directories"
    )]
    HardLink {
        /// The path as the model gave it.
        path: String,
        /// Its link count.
        links: u64,
    },
    /// More than [`MAX_SYMLINKS`] symlinks.
    #[error("Path {0} has too many levels of symbolic links")]
    SymlinkLoop(String),
    /// The path uses `~` but no home directory was configured.
    #[error("Path {0} uses ~ but no home directory is known")]
    NoHome(String),
    /// The path is empty.
    #[error("Path is empty")]
    Empty,
    /// The path names a directory where a file is needed.
    #[error("{0} is a directory")]
    IsDirectory(String),
    /// The path names a device, FIFO, socket or dangling entry, not a regular file or directory.
    #[error("Reading {0} is blocked (not a regular file)")]
    NotRegular(String),
    /// The path contains a NUL byte.
    #[error("Path {0} contains a NUL byte")]
    Nul(String),
    /// A prefix of the path exists but could not be resolved.
    #[error("cannot resolve path {path}")]
    Resolve {
        /// The path as the model gave it.
        path: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

/// `(st_dev, st_ino)`: what identifies a directory regardless of the names leading to it.
type FileId = (u64, u64);

/// Resolves tool paths and opens them by handle, enforcing `restrictToWorkspace` and keeping nanobot's
/// data directory out of reach.
#[derive(Debug, Clone)]
pub struct Sandbox {
    workspace: PathBuf,
    workspace_real: PathBuf,
    restrict: bool,
    read_roots: Vec<PathBuf>,
    home: Option<PathBuf>,
    data_dir: Option<PathBuf>,
    /// Folders this call may not reach, and folders inside them it may ([`crate::HiddenPaths`]).
    hidden: Vec<PathBuf>,
    shown: Vec<PathBuf>,
}

/// What `Sandbox::locate` found: a verified handle of the parent directory and the final name in it.
#[derive(Debug)]
pub struct Located {
    /// The parent directory, opened by handle and checked.
    pub parent: Dir,
    /// The final component (`None` when the path is an allowed root itself).
    pub name: Option<OsString>,
    /// The path as resolved (absolute, lexically normalised, symlinks in the last component followed):
    /// for messages only, never re-opened.
    pub logical: PathBuf,
    /// `lstat` of the final component, when it exists.
    pub meta: Option<Entry>,
}

/// An opened directory with the identities the walkers must not enter.
#[derive(Debug)]
pub struct OpenedDir {
    /// The directory handle.
    pub dir: Dir,
    /// The path as resolved, for messages.
    pub logical: PathBuf,
    /// The fence the walkers consult before entering a subdirectory.
    pub fence: Fence,
}

/// Directory identities a recursive walk must not enter (the data directory, unless it is the workspace).
#[derive(Debug, Clone, Default)]
pub struct Fence {
    data: Option<FileId>,
    allowed: Vec<FileId>,
    /// Folders of this call's [`crate::HiddenPaths`]: never entered, refused in an ancestry.
    hidden: Vec<FileId>,
    restrict: bool,
    data_dev: Option<u64>,
}

impl Fence {
    /// Whether a walk may enter this opened directory (by `fstat` of its handle): anything but the data
    /// directory (which is entered only when it is also the workspace).
    #[allow(clippy::useless_conversion, clippy::unnecessary_cast)]
    pub fn may_enter(&self, dir: &Dir) -> bool {
        match rustix::fs::fstat(dir) {
            Ok(st) => {
                let id = (st.st_dev as u64, st.st_ino as u64);
                self.allowed.contains(&id) || (self.data != Some(id) && !self.hidden.contains(&id))
            }
            Err(_) => false,
        }
    }

    /// Whether a regular file with this metadata (from `fstat` of its opened handle) may be read:
    /// single-link files always; hard-linked files only when unrestricted and not on the data
    /// directory's file system.
    pub fn may_read_file(&self, meta: &std::fs::Metadata) -> bool {
        self.links_ok(meta.is_file(), meta.nlink(), meta.dev())
    }

    fn links_ok(&self, is_file: bool, nlink: u64, dev: u64) -> bool {
        !(is_file && nlink > 1 && (self.restrict || self.data_dev == Some(dev)))
    }
}

/// What `lstat` said about the last component of a located path.
#[derive(Debug, Clone, Copy)]
pub struct Entry {
    /// Its type (a symlink is reported as such, not followed).
    pub kind: EntryKind,
    /// Its hard-link count.
    pub nlink: u64,
    /// The device it lives on.
    pub dev: u64,
}

/// The type of an [`Entry`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
    /// A device, FIFO or socket.
    Other,
}

/// An opened regular file.
#[derive(Debug)]
pub struct OpenedFile {
    /// The file, open for reading.
    pub file: File,
    /// `fstat` of the handle.
    pub meta: std::fs::Metadata,
    /// The path as resolved, for messages.
    pub logical: PathBuf,
    /// The fence of the call that opened it.
    pub fence: Fence,
}

/// What a path turned out to be when opened for reading.
#[derive(Debug)]
pub enum Opened {
    /// A regular file.
    File(OpenedFile),
    /// A directory.
    Dir(OpenedDir),
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Intent {
    Read,
    Write,
}

impl Sandbox {
    /// A sandbox rooted at `workspace`; `restrict` is `tools.restrictToWorkspace`.
    pub fn new(workspace: impl Into<PathBuf>, restrict: bool) -> Self {
        let workspace = workspace.into();
        let workspace_real = real_path(&workspace).unwrap_or_else(|_| normalize(&workspace));
        Self {
            workspace,
            workspace_real,
            restrict,
            read_roots: Vec::new(),
            home: None,
            data_dir: None,
            hidden: Vec::new(),
            shown: Vec::new(),
        }
    }

    /// This sandbox for one call: with the folders the call's context hides ([`crate::HiddenPaths`]), else as it
    /// is.
    pub fn for_call(self: &std::sync::Arc<Self>, ctx: &crate::ToolContext) -> std::sync::Arc<Self> {
        match ctx.extensions.get::<crate::HiddenPaths>() {
            Some(h) if !h.hidden.is_empty() => {
                let mut s = Self::clone(self);
                s.hidden = h.hidden.clone();
                s.shown = h.shown.clone();
                std::sync::Arc::new(s)
            }
            _ => self.clone(),
        }
    }

    /// Adds a directory that stays readable under the restriction (the built-in skills folder).
    pub fn with_read_root(mut self, root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        self.read_roots
            .push(real_path(&root).unwrap_or_else(|_| normalize(&root)));
        self
    }

    /// Sets the home directory `~` expands to.
    pub fn with_home(mut self, home: Option<PathBuf>) -> Self {
        self.home = home;
        self
    }

    /// Sets nanobot's data directory (`~/.nanobot`, the config file's directory), which the file tools
    /// never reach in any mode (the workspace stays reachable when it lies inside it).
    pub fn with_data_dir(mut self, data_dir: Option<PathBuf>) -> Self {
        self.data_dir = data_dir;
        self
    }

    /// The workspace as configured.
    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// The workspace with symlinks resolved.
    pub fn workspace_real(&self) -> &Path {
        &self.workspace_real
    }

    /// Whether `restrictToWorkspace` is on.
    pub fn is_restricted(&self) -> bool {
        self.restrict
    }

    /// The extra readable roots (resolved).
    pub fn read_roots(&self) -> &[PathBuf] {
        &self.read_roots
    }

    /// The data directory kept out of reach, when one was set.
    pub fn data_dir(&self) -> Option<&Path> {
        self.data_dir.as_deref()
    }

    /// Resolves `path` for reading, by name. For callers that hand a directory to another program (the
    /// `exec` working directory); file tools use the handle API ([`Sandbox::open_read`] and friends).
    pub fn resolve_read(&self, path: &str) -> Result<PathBuf, SandboxError> {
        self.resolve(path, true)
    }

    /// Resolves `path` for writing by name (extra read roots do not count); see [`Sandbox::resolve_read`].
    pub fn resolve_write(&self, path: &str) -> Result<PathBuf, SandboxError> {
        self.resolve(path, false)
    }

    /// Resolves `path` by name (expanding `~`, joining relative paths to the workspace, following
    /// symlinks) and checks it against the allowed roots. The answer can be stale by the time it is
    /// used: file tools open through [`Sandbox::open_read`], [`Sandbox::open_dir`] and
    /// [`Sandbox::write_atomic`] instead.
    pub fn resolve(&self, path: &str, for_read: bool) -> Result<PathBuf, SandboxError> {
        if path.trim().is_empty() {
            return Err(SandboxError::Empty);
        }
        let expanded = self.expand(path)?;
        let joined = if expanded.is_absolute() {
            expanded
        } else {
            self.workspace_real.join(expanded)
        };
        let resolved = real_path(&joined).map_err(|source| SandboxError::Resolve {
            path: path.to_owned(),
            source,
        })?;
        if self.restrict && !self.allowed(&resolved, for_read) {
            return Err(SandboxError::OutsideWorkspace {
                path: path.to_owned(),
                allowed: self.workspace.clone(),
            });
        }
        Ok(resolved)
    }

    /// True when `resolved` (already real) is inside the workspace or, for reads, a read root.
    pub fn allowed(&self, resolved: &Path, for_read: bool) -> bool {
        resolved.starts_with(&self.workspace_real)
            || (for_read && self.read_roots.iter().any(|r| resolved.starts_with(r)))
    }

    fn expand(&self, path: &str) -> Result<PathBuf, SandboxError> {
        if path.contains('\0') {
            return Err(SandboxError::Nul(path.to_owned()));
        }
        if path == "~" || path.starts_with("~/") {
            let home = self
                .home
                .as_ref()
                .ok_or_else(|| SandboxError::NoHome(path.to_owned()))?;
            Ok(match path.strip_prefix("~/") {
                Some(rest) => home.join(rest),
                None => home.clone(),
            })
        } else {
            Ok(PathBuf::from(path))
        }
    }

    /// The absolute, lexically normalised form of a tool path.
    fn absolute(&self, raw: &str) -> Result<PathBuf, SandboxError> {
        if raw.trim().is_empty() {
            return Err(SandboxError::Empty);
        }
        let expanded = self.expand(raw)?;
        let joined = if expanded.is_absolute() {
            expanded
        } else {
            self.workspace_real.join(expanded)
        };
        Ok(normalize(&joined))
    }

    /// The identities of this call's fence (stat by name of trusted, configured directories).
    fn fence(&self) -> Fence {
        let id = |p: &Path| std::fs::metadata(p).ok().map(|m| ((m.dev(), m.ino()), m.dev()));
        let mut allowed: Vec<FileId> = id(&self.workspace_real).map(|(i, _)| i).into_iter().collect();
        allowed.extend(self.read_roots.iter().filter_map(|r| id(r).map(|(i, _)| i)));
        // A shown folder inside a hidden one is reached through its own identity, met first on the way up.
        allowed.extend(self.shown.iter().filter_map(|r| id(r).map(|(i, _)| i)));
        let hidden = self.hidden.iter().filter_map(|h| id(h).map(|(i, _)| i)).collect();
        let data = self.data_dir.as_deref().and_then(id);
        Fence {
            data: data.map(|(i, _)| i),
            data_dev: data.map(|(_, d)| d),
            allowed,
            hidden,
            restrict: self.restrict,
        }
    }

    /// The allowed roots for `intent` as `(prefix to match, directory to open)`.
    fn roots(&self, intent: Intent) -> Vec<(PathBuf, PathBuf)> {
        let mut roots = vec![(self.workspace_real.clone(), self.workspace_real.clone())];
        let configured = normalize(&self.workspace);
        if configured.is_absolute() && configured != self.workspace_real {
            roots.push((configured, self.workspace_real.clone()));
        }
        if intent == Intent::Read {
            roots.extend(self.read_roots.iter().map(|r| (r.clone(), r.clone())));
        }
        roots
    }

    /// Where to start opening `abs`: a handle of an allowed root and the path beneath it (restricted),
    /// or the file-system root (unrestricted).
    fn base_for(&self, raw: &str, abs: &Path, intent: Intent) -> Result<(Base, PathBuf), SandboxError> {
        if !self.restrict {
            let rel = abs.strip_prefix("/").unwrap_or(abs).to_path_buf();
            return Ok((Base::Ambient, rel));
        }
        for (prefix, open) in self.roots(intent) {
            if let Ok(rel) = abs.strip_prefix(&prefix) {
                let dir = Dir::open_ambient_dir(&open, ambient_authority()).map_err(|source| {
                    SandboxError::Resolve {
                        path: raw.to_owned(),
                        source,
                    }
                })?;
                return Ok((Base::Beneath(dir), rel.to_path_buf()));
            }
        }
        Err(SandboxError::OutsideWorkspace {
            path: raw.to_owned(),
            allowed: self.workspace.clone(),
        })
    }

    fn refuse(&self, raw: &str, source: io::Error) -> SandboxError {
        // cap-std reports an attempt to leave the base directory as `PermissionDenied` with this text.
        if self.restrict && source.to_string().contains("outside of the filesystem") {
            SandboxError::OutsideWorkspace {
                path: raw.to_owned(),
                allowed: self.workspace.clone(),
            }
        } else {
            SandboxError::Resolve {
                path: raw.to_owned(),
                source,
            }
        }
    }

    /// Opens the directory `comps` below `base`, creating missing components when `create`.
    fn open_parent(
        &self,
        raw: &str,
        base: &Base,
        comps: &[OsString],
        create: bool,
        fence: &Fence,
    ) -> Result<Dir, SandboxError> {
        let mut n = comps.len();
        let mut dir = loop {
            let rel: PathBuf = comps[..n].iter().collect();
            match base.open_dir(&rel) {
                Ok(d) => break d,
                Err(e) if create && n > 0 && e.kind() == io::ErrorKind::NotFound => n -= 1,
                Err(e) => return Err(self.refuse(raw, e)),
            }
        };
        if n < comps.len() {
            // Check where we are before creating anything, then create one component at a time,
            // each opened without following symlinks.
            self.check_ancestry(raw, &dir, fence)?;
            for c in &comps[n..] {
                match dir.create_dir(c) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(self.refuse(raw, e)),
                }
                dir = open_child_dir(&dir, c).map_err(|e| self.refuse(raw, e))?;
            }
        }
        Ok(dir)
    }

    /// Walks the real ancestry of `dir` by handle: refused if nanobot's data directory is met before an
    /// allowed root (the workspace or a read root); in restricted mode also refused if no allowed root
    /// is met at all.
    fn check_ancestry(&self, raw: &str, dir: &Dir, fence: &Fence) -> Result<(), SandboxError> {
        let err = |source: io::Error| SandboxError::Resolve {
            path: raw.to_owned(),
            source,
        };
        let path_flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let mut cur =
            File::from(rustix::fs::openat(dir, ".", path_flags, Mode::empty()).map_err(|e| err(e.into()))?);
        let mut meta = cur.metadata().map_err(err)?;
        // A path cannot be deeper than PATH_MAX / 2 components.
        for _ in 0..2048 {
            let id = (meta.dev(), meta.ino());
            if fence.allowed.contains(&id) {
                return Ok(());
            }
            if fence.hidden.contains(&id) {
                return Err(SandboxError::Hidden { path: raw.to_owned() });
            }
            if fence.data == Some(id) {
                return Err(SandboxError::DataDir {
                    path: raw.to_owned(),
                    data_dir: self.data_dir.clone().unwrap_or_default(),
                });
            }
            let up = File::from(
                rustix::fs::openat(&cur, "..", path_flags, Mode::empty()).map_err(|e| err(e.into()))?,
            );
            let up_meta = up.metadata().map_err(err)?;
            if (up_meta.dev(), up_meta.ino()) == id {
                break;
            }
            cur = up;
            meta = up_meta;
        }
        if self.restrict {
            return Err(SandboxError::OutsideWorkspace {
                path: raw.to_owned(),
                allowed: self.workspace.clone(),
            });
        }
        Ok(())
    }

    /// Resolves `raw` to a verified parent directory handle and a final name, following a symlink in the
    /// last component by resolving its target again from the top.
    fn locate(
        &self,
        raw: &str,
        intent: Intent,
        create: bool,
        fence: &Fence,
    ) -> Result<Located, SandboxError> {
        let mut abs = self.absolute(raw)?;
        for _ in 0..=MAX_SYMLINKS {
            let (base, rel) = self.base_for(raw, &abs, intent)?;
            let mut comps: Vec<OsString> = rel
                .components()
                .filter(|c| matches!(c, Component::Normal(_)))
                .map(|c| c.as_os_str().to_owned())
                .collect();
            let name = comps.pop();
            let parent = match self.open_parent(raw, &base, &comps, create, fence) {
                Ok(p) => p,
                Err(e @ SandboxError::OutsideWorkspace { .. }) => {
                    // cap-std refuses every absolute symlink on the way, even one that stays inside the
                    // root: resolve the first symlink from the top, as for the last component, so its
                    // target is checked again.
                    let Base::Beneath(root) = &base else {
                        return Err(e);
                    };
                    let Some((i, target)) = first_symlink(root, &comps) else {
                        return Err(e);
                    };
                    let depth = abs.components().count() - rel.components().count();
                    let mut next: PathBuf = abs.components().take(depth).collect();
                    next.extend(&comps[..i]);
                    next.push(target);
                    next.extend(&comps[i + 1..]);
                    next.extend(&name);
                    abs = normalize(&next);
                    continue;
                }
                Err(e) => return Err(e),
            };
            match self.check_ancestry(raw, &parent, fence) {
                Ok(()) => {}
                Err(e @ (SandboxError::DataDir { .. } | SandboxError::Hidden { .. })) => {
                    // The path may name an allowed root itself (the workspace, a read root, or a folder shown inside
                    // a hidden one) whose parent is the data directory (the default `~/.nanobot/workspace`) or
                    // hidden: that root is reached, not its parent.
                    let root = name.as_deref().and_then(|n| allowed_child(&parent, n, fence));
                    let Some(root) = root else { return Err(e) };
                    return Ok(Located {
                        parent: root,
                        name: None,
                        logical: abs,
                        meta: None,
                    });
                }
                Err(e) => return Err(e),
            }
            let Some(name) = name else {
                return Ok(Located {
                    parent,
                    name: None,
                    logical: abs,
                    meta: None,
                });
            };
            let meta =
                match rustix::fs::statat(&parent, name.as_os_str(), rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st) => Some(entry_of(&st)),
                    Err(rustix::io::Errno::NOENT) => None,
                    Err(e) => return Err(self.refuse(raw, e.into())),
                };
            if meta.is_some_and(|m| m.kind == EntryKind::Symlink) {
                let target = parent
                    .read_link_contents(&name)
                    .map_err(|e| self.refuse(raw, e))?;
                let from = abs
                    .parent()
                    .map(Path::to_path_buf)
                    .unwrap_or_else(|| PathBuf::from("/"));
                abs = normalize(&from.join(target));
                continue;
            }
            return Ok(Located {
                parent,
                name: Some(name),
                logical: abs,
                meta,
            });
        }
        Err(SandboxError::SymlinkLoop(raw.to_owned()))
    }

    /// Opens `raw` for reading: a regular file (refusing hard links where they could lead outside) or a
    /// directory. Devices, FIFOs and sockets are refused without being opened.
    pub fn open_read(&self, raw: &str) -> Result<Opened, SandboxError> {
        self.open_as(raw, Intent::Read)
    }

    /// Like [`Sandbox::open_read`], limited to where writes are allowed (for `edit_file`).
    pub fn open_for_edit(&self, raw: &str) -> Result<Opened, SandboxError> {
        self.open_as(raw, Intent::Write)
    }

    /// Opens `raw` as a directory (for `list_dir`, `glob`, `grep`).
    pub fn open_dir(&self, raw: &str) -> Result<Opened, SandboxError> {
        self.open_as(raw, Intent::Read)
    }

    fn open_as(&self, raw: &str, intent: Intent) -> Result<Opened, SandboxError> {
        let fence = self.fence();
        let loc = self.locate(raw, intent, false, &fence)?;
        let Some(name) = loc.name else {
            return Ok(Opened::Dir(OpenedDir {
                dir: loc.parent,
                logical: loc.logical,
                fence,
            }));
        };
        let Some(entry) = loc.meta else {
            return Err(SandboxError::Resolve {
                path: raw.to_owned(),
                source: io::Error::from(io::ErrorKind::NotFound),
            });
        };
        match entry.kind {
            EntryKind::Dir => {
                let dir = open_child_dir(&loc.parent, &name).map_err(|e| self.refuse(raw, e))?;
                self.check_ancestry(raw, &dir, &fence)?;
                Ok(Opened::Dir(OpenedDir {
                    dir,
                    logical: loc.logical,
                    fence,
                }))
            }
            EntryKind::File => {
                let file = open_child_file(&loc.parent, &name).map_err(|e| self.refuse(raw, e))?;
                let meta = file.metadata().map_err(|e| self.refuse(raw, e))?;
                if !fence.may_read_file(&meta) {
                    return Err(SandboxError::HardLink {
                        path: raw.to_owned(),
                        links: meta.nlink(),
                    });
                }
                Ok(Opened::File(OpenedFile {
                    file,
                    meta,
                    logical: loc.logical,
                    fence,
                }))
            }
            EntryKind::Symlink | EntryKind::Other => Err(SandboxError::NotRegular(raw.to_owned())),
        }
    }

    /// Deletes the regular file `raw` (beneath the verified handle of its directory; a link or a directory is
    /// refused). A missing file is fine. Used to undo a file a failed multi-file edit created.
    pub fn remove_file(&self, raw: &str) -> Result<(), SandboxError> {
        let fence = self.fence();
        let loc = self.locate(raw, Intent::Write, false, &fence)?;
        let Some(name) = loc.name else {
            return Err(SandboxError::IsDirectory(raw.to_owned()));
        };
        match loc.meta.map(|m| m.kind) {
            None => Ok(()),
            Some(EntryKind::File) => loc.parent.remove_file(&name).map_err(|e| SandboxError::Resolve {
                path: raw.to_owned(),
                source: e,
            }),
            Some(EntryKind::Dir) => Err(SandboxError::IsDirectory(raw.to_owned())),
            Some(EntryKind::Symlink | EntryKind::Other) => Err(SandboxError::NotRegular(raw.to_owned())),
        }
    }

    /// Writes `content` to `raw` atomically: creates missing parent directories beneath the verified
    /// handle, writes and `fsync`s a temporary file beside the target, keeps the old file's permissions,
    /// and renames it into place within the same directory handle. Returns the path as resolved.
    pub fn write_atomic(&self, raw: &str, content: &[u8]) -> Result<PathBuf, SandboxError> {
        let fence = self.fence();
        let loc = self.locate(raw, Intent::Write, true, &fence)?;
        let Some(name) = loc.name else {
            return Err(SandboxError::IsDirectory(raw.to_owned()));
        };
        let mut mode = 0o644;
        if let Some(entry) = loc.meta {
            match entry.kind {
                EntryKind::Dir => return Err(SandboxError::IsDirectory(raw.to_owned())),
                EntryKind::File => {
                    if !fence.links_ok(true, entry.nlink, entry.dev) {
                        return Err(SandboxError::HardLink {
                            path: raw.to_owned(),
                            links: entry.nlink,
                        });
                    }
                    if let Ok(st) = rustix::fs::statat(
                        &loc.parent,
                        name.as_os_str(),
                        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
                    ) {
                        mode = st.st_mode & 0o7777;
                    }
                }
                EntryKind::Symlink | EntryKind::Other => {
                    return Err(SandboxError::NotRegular(raw.to_owned()));
                }
            }
        }
        nanobot_util::replace_in(&loc.parent, &name, content, mode).map_err(|e| SandboxError::Resolve {
            path: raw.to_owned(),
            source: e,
        })?;
        Ok(loc.logical)
    }
}

/// Where a lookup starts.
enum Base {
    /// Beneath a handle of an allowed root (restricted mode).
    Beneath(Dir),
    /// From the file-system root, following symlinks (unrestricted mode; the ancestry check follows).
    Ambient,
}

impl Base {
    fn open_dir(&self, rel: &Path) -> io::Result<Dir> {
        match self {
            Self::Beneath(root) if rel.as_os_str().is_empty() => root.try_clone(),
            Self::Beneath(root) => root.open_dir(rel),
            Self::Ambient => Dir::open_ambient_dir(Path::new("/").join(rel), ambient_authority()),
        }
    }
}

/// The first component of `comps` below `root` that is a symlink, with its target.
/// The directory `name` in `parent` (opened without following a link), when it is one of the fence's allowed
/// roots: judged by the identity of the handle opened, so a swap after a look cannot pass.
#[allow(clippy::useless_conversion, clippy::unnecessary_cast)]
fn allowed_child(parent: &Dir, name: &OsStr, fence: &Fence) -> Option<Dir> {
    let dir = open_child_dir(parent, name).ok()?;
    let st = rustix::fs::fstat(&dir).ok()?;
    let id = (st.st_dev as u64, st.st_ino as u64);
    fence.allowed.contains(&id).then_some(dir)
}

fn first_symlink(root: &Dir, comps: &[OsString]) -> Option<(usize, PathBuf)> {
    let mut dir = root.try_clone().ok()?;
    for (i, c) in comps.iter().enumerate() {
        match open_child_dir(&dir, c) {
            Ok(d) => dir = d,
            Err(_) => {
                let st =
                    rustix::fs::statat(&dir, c.as_os_str(), rustix::fs::AtFlags::SYMLINK_NOFOLLOW).ok()?;
                if entry_of(&st).kind != EntryKind::Symlink {
                    return None;
                }
                return dir.read_link_contents(c).ok().map(|t| (i, t));
            }
        }
    }
    None
}

#[allow(clippy::useless_conversion, clippy::unnecessary_cast)]
fn entry_of(st: &rustix::fs::Stat) -> Entry {
    use rustix::fs::FileType;
    let kind = match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => EntryKind::File,
        FileType::Directory => EntryKind::Dir,
        FileType::Symlink => EntryKind::Symlink,
        _ => EntryKind::Other,
    };
    Entry {
        kind,
        nlink: st.st_nlink as u64,
        dev: st.st_dev as u64,
    }
}

/// Opens the subdirectory `name` of `dir` without following a symlink.
pub fn open_child_dir(dir: &Dir, name: &OsStr) -> io::Result<Dir> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(dir, name, flags, Mode::empty())?;
    Ok(Dir::from_std_file(File::from(fd)))
}

/// Opens the file `name` of `dir` for reading without following a symlink (non-blocking, so a FIFO
/// swapped in cannot hang the call; the caller checks the type with `fstat`).
pub fn open_child_file(dir: &Dir, name: &OsStr) -> io::Result<File> {
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    Ok(File::from(rustix::fs::openat(dir, name, flags, Mode::empty())?))
}

impl SandboxError {
    /// Whether the path (or one of its directories) does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Resolve { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }
}

pub use nanobot_util::{normalize, real_path};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_join_the_workspace() {
        let dir = tempfile::tempdir().unwrap();
        let sb = Sandbox::new(dir.path(), true);
        let p = sb.resolve_write("a/b/../c.txt").unwrap();
        assert_eq!(p, sb.workspace_real().join("a/c.txt"));
        let written = sb.write_atomic("a/b/../c.txt", b"x").unwrap();
        assert_eq!(written, sb.workspace_real().join("a/c.txt"));
    }

    #[test]
    fn dotdot_escape_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let sb = Sandbox::new(dir.path().join("ws"), true);
        std::fs::create_dir(dir.path().join("ws")).unwrap();
        std::fs::write(dir.path().join("secret"), "s").unwrap();
        let err = sb.resolve_read("../etc/passwd").unwrap_err();
        assert!(matches!(err, SandboxError::OutsideWorkspace { .. }), "{err}");
        assert!(sb.resolve_read("nope/../../x").is_err());
        let err = sb.open_read("../secret").unwrap_err();
        assert!(matches!(err, SandboxError::OutsideWorkspace { .. }), "{err}");
        assert!(sb.open_read("nope/../../secret").is_err());
    }

    #[test]
    fn unrestricted_allows_anything_but_the_data_dir() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir_all(data.join("workspace")).unwrap();
        std::fs::write(data.join("config.json"), "{}").unwrap();
        let sb = Sandbox::new(data.join("workspace"), false).with_data_dir(Some(data.clone()));
        assert!(sb.resolve_read("/etc/hostname").is_ok());
        assert!(matches!(sb.open_read("/etc/hostname"), Ok(Opened::File(_))));
        let err = sb
            .open_read(&data.join("config.json").to_string_lossy())
            .unwrap_err();
        assert!(matches!(err, SandboxError::DataDir { .. }), "{err}");
        assert!(matches!(
            sb.open_read("../config.json"),
            Err(SandboxError::DataDir { .. })
        ));
        assert!(sb.write_atomic("inside.txt", b"ok").is_ok());
    }
}
