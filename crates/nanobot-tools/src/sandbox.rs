//! The path sandbox shared by every file tool (`restrictToWorkspace`).
//!
//! Relative paths resolve against the workspace, `~` against the home directory the caller
//! passed in, and resolution follows symlinks (the longest existing prefix is canonicalised;
//! the rest, which cannot contain symlinks, is normalised lexically). With the restriction on,
//! the result must lie inside the workspace — or, for reads only, inside one of the extra read
//! roots (the built-in skills folder). So no `..`, `~`, absolute-path or symlink escape works.

use std::io;
use std::path::{Component, Path, PathBuf};

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
    /// The path uses `~` but no home directory was configured.
    #[error("Path {0} uses ~ but no home directory is known")]
    NoHome(String),
    /// The path is empty.
    #[error("Path is empty")]
    Empty,
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

/// Resolves tool paths and enforces `restrictToWorkspace`.
#[derive(Debug, Clone)]
pub struct Sandbox {
    workspace: PathBuf,
    workspace_real: PathBuf,
    restrict: bool,
    read_roots: Vec<PathBuf>,
    home: Option<PathBuf>,
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

    /// Resolves `path` for reading.
    pub fn resolve_read(&self, path: &str) -> Result<PathBuf, SandboxError> {
        self.resolve(path, true)
    }

    /// Resolves `path` for writing (extra read roots do not count).
    pub fn resolve_write(&self, path: &str) -> Result<PathBuf, SandboxError> {
        self.resolve(path, false)
    }

    /// Resolves `path` (expanding `~`, joining relative paths to the workspace, following
    /// symlinks) and checks it against the allowed roots.
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
    fn relative_paths_join_the_workspace() {
        let dir = tempfile::tempdir().unwrap();
        let sb = Sandbox::new(dir.path(), true);
        let p = sb.resolve_write("a/b/../c.txt").unwrap();
        assert_eq!(p, sb.workspace_real().join("a/c.txt"));
    }

    #[test]
    fn dotdot_escape_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let sb = Sandbox::new(dir.path(), true);
        let err = sb.resolve_read("../etc/passwd").unwrap_err();
        assert!(matches!(err, SandboxError::OutsideWorkspace { .. }), "{err}");
        // a non-existing dir followed by .. twice
        assert!(sb.resolve_read("nope/../../x").is_err());
    }

    #[test]
    fn unrestricted_allows_anything() {
        let dir = tempfile::tempdir().unwrap();
        let sb = Sandbox::new(dir.path(), false);
        assert!(sb.resolve_read("/etc/hostname").is_ok());
    }
}
