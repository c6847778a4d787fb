//! A temporary HOME with a `.nanobot/` config dir and a workspace.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde_json::Value;
use tempfile::TempDir;

/// A throw-away home directory laid out like a Python nanobot install:
///
/// ```text
/// <tmp>/home/                       home()
/// <tmp>/home/.nanobot/              nanobot_dir()
/// <tmp>/home/.nanobot/config.json   config_path()      (written by write_config)
/// <tmp>/home/.nanobot/workspace/    workspace()
/// ```
///
/// It never touches the process environment: pass [`TempHome::env`] to a child process or to a loader that
/// takes the environment as a map. Everything is deleted on drop.
///
/// ```
/// use nanobot_testkit::TempHome;
/// let home = TempHome::new();
/// let path = home.write_config(&serde_json::json!({"agents": {"defaults": {"model": "mock-model"}}}));
/// assert_eq!(path, home.config_path());
/// assert!(home.workspace().is_dir());
/// assert_eq!(home.env().get("HOME"), home.home().to_str());
/// ```
#[derive(Debug)]
pub struct TempHome {
    dir: TempDir,
    home: PathBuf,
}

impl TempHome {
    /// Creates the directories. Panics if the temp dir cannot be created (see [`TempHome::try_new`]).
    pub fn new() -> Self {
        match Self::try_new() {
            Ok(home) => home,
            Err(err) => panic!("TempHome: {err:#}"),
        }
    }

    /// Creates the directories.
    pub fn try_new() -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("nanobot-test-")
            .tempdir()
            .context("creating a temp dir")?;
        let home = dir.path().join("home");
        fs::create_dir_all(home.join(".nanobot").join("workspace"))
            .with_context(|| format!("creating {}", home.display()))?;
        Ok(Self { dir, home })
    }

    /// The temp root (parent of `home()`), for files that must live outside HOME.
    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// The HOME directory.
    pub fn home(&self) -> &Path {
        &self.home
    }

    /// `HOME/.nanobot`.
    pub fn nanobot_dir(&self) -> PathBuf {
        self.home.join(".nanobot")
    }

    /// `HOME/.nanobot/config.json`.
    pub fn config_path(&self) -> PathBuf {
        self.nanobot_dir().join("config.json")
    }

    /// `HOME/.nanobot/workspace` (the Python nanobot's default workspace).
    pub fn workspace(&self) -> PathBuf {
        self.nanobot_dir().join("workspace")
    }

    /// Writes `config` as pretty JSON to [`TempHome::config_path`] and returns that path.
    pub fn write_config(&self, config: &Value) -> PathBuf {
        let text = serde_json::to_string_pretty(config).unwrap_or_else(|_| config.to_string());
        self.write_config_str(&text)
    }

    /// Writes `text` verbatim to [`TempHome::config_path`] (for malformed configs) and returns that path.
    pub fn write_config_str(&self, text: &str) -> PathBuf {
        let path = self.config_path();
        write(&path, text.as_bytes());
        path
    }

    /// Writes a file under the workspace (parents created) and returns its path.
    pub fn write_workspace_file(&self, relative: impl AsRef<Path>, contents: impl AsRef<[u8]>) -> PathBuf {
        let path = self.workspace().join(relative);
        write(&path, contents.as_ref());
        path
    }

    /// Writes a file under HOME (parents created) and returns its path.
    pub fn write_home_file(&self, relative: impl AsRef<Path>, contents: impl AsRef<[u8]>) -> PathBuf {
        let path = self.home.join(relative);
        write(&path, contents.as_ref());
        path
    }

    /// An environment map pointing at this home: `HOME`, and `NANOBOT_TEST_ROOT` (the temp root).
    pub fn env(&self) -> nanobot_util::EnvMap {
        nanobot_util::EnvMap::from_iter([
            ("HOME", self.home.to_string_lossy().into_owned()),
            ("NANOBOT_TEST_ROOT", self.root().to_string_lossy().into_owned()),
        ])
    }
}

impl Default for TempHome {
    fn default() -> Self {
        Self::new()
    }
}

fn write(path: &Path, contents: &[u8]) {
    if let Some(parent) = path.parent()
        && let Err(err) = fs::create_dir_all(parent)
    {
        panic!("TempHome: cannot create {}: {err}", parent.display());
    }
    if let Err(err) = fs::write(path, contents) {
        panic!("TempHome: cannot write {}: {err}", path.display());
    }
}
