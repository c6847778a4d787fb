//! Where nanobot keeps its files: `~/.nanobot/config.json`, the workspace, sessions, media, cron, logs.
//!
//! Nothing here looks at the process: the home directory is always passed in.

use std::path::{Path, PathBuf};

/// Name of the config directory under the home directory.
pub const CONFIG_DIR_NAME: &str = ".nanobot";
/// Name of the config file inside the config directory.
pub const CONFIG_FILE_NAME: &str = "config.json";

/// `<home>/.nanobot`.
pub fn default_config_dir(home: &Path) -> PathBuf {
    home.join(CONFIG_DIR_NAME)
}

/// `<home>/.nanobot/config.json`.
pub fn default_config_path(home: &Path) -> PathBuf {
    default_config_dir(home).join(CONFIG_FILE_NAME)
}

/// Expands a leading `~` (alone or followed by `/`) against `home`; other paths are returned unchanged.
///
/// ```
/// use std::path::Path;
/// use nanobot_config::paths::expand_tilde;
/// assert_eq!(expand_tilde("~/.nanobot/workspace", Path::new("/home/ada")), Path::new("/home/ada/.nanobot/workspace"));
/// assert_eq!(expand_tilde("/srv/ws", Path::new("/home/ada")), Path::new("/srv/ws"));
/// ```
pub fn expand_tilde(path: &str, home: &Path) -> PathBuf {
    if path == "~" {
        home.to_path_buf()
    } else if let Some(rest) = path.strip_prefix("~/").or_else(|| path.strip_prefix("~\\")) {
        home.join(rest)
    } else {
        PathBuf::from(path)
    }
}

/// The paths of one nanobot installation, derived from the home directory and the config file.
///
/// The data directory is the config file's directory (as in the Python nanobot), so `--config /x/config.json`
/// moves sessions, media and logs to `/x`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NanobotPaths {
    home: PathBuf,
    config_path: PathBuf,
}

impl NanobotPaths {
    /// Paths for the default config file `<home>/.nanobot/config.json`.
    pub fn new(home: impl Into<PathBuf>) -> Self {
        let home = home.into();
        let config_path = default_config_path(&home);
        Self { home, config_path }
    }

    /// Paths for an explicit config file (a leading `~` is expanded against `home`).
    pub fn with_config_path(home: impl Into<PathBuf>, config_path: impl AsRef<Path>) -> Self {
        let home = home.into();
        let config_path = match config_path.as_ref().to_str() {
            Some(s) => expand_tilde(s, &home),
            None => config_path.as_ref().to_path_buf(),
        };
        Self { home, config_path }
    }

    /// The home directory.
    pub fn home(&self) -> &Path {
        &self.home
    }

    /// The config file.
    pub fn config_path(&self) -> &Path {
        &self.config_path
    }

    /// The data directory: the directory of the config file (`~/.nanobot`).
    pub fn data_dir(&self) -> PathBuf {
        match self.config_path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        }
    }

    /// `<data dir>/sessions`: session files, grouped by workspace id below it.
    pub fn sessions_dir(&self) -> PathBuf {
        self.data_dir().join("sessions")
    }

    /// `<data dir>/media`, or `<data dir>/media/<channel>` for one channel's downloads.
    pub fn media_dir(&self, channel: Option<&str>) -> PathBuf {
        let media = self.data_dir().join("media");
        match channel {
            Some(c) => media.join(c),
            None => media,
        }
    }

    /// `<data dir>/logs`.
    pub fn logs_dir(&self) -> PathBuf {
        self.data_dir().join("logs")
    }

    /// `<data dir>/history/cli_history`: the interactive CLI's line history.
    pub fn cli_history_path(&self) -> PathBuf {
        self.data_dir().join("history").join("cli_history")
    }

    /// Why `workspace` cannot be the workspace, if it cannot: it is the data directory itself (where
    /// `config.json` holds the keys, beside every chat's sessions), or lies inside one of the data directory's own
    /// folders (sessions, media, logs, history, pairing). The workspace is where the model reads and writes;
    /// `~/.nanobot/workspace`, a folder inside the data directory, is the default and fine, and so is a workspace
    /// containing the data directory (the file tools and exec refuse the data directory within it). Compared on
    /// the paths as they resolve on disk (links followed), so a link to the data directory is refused too.
    pub fn workspace_problem(&self, workspace: &Path) -> Option<String> {
        let data = resolved(&self.data_dir());
        let ws = resolved(workspace);
        if ws == data {
            return Some(format!(
                "{} is nanobot's data directory, where config.json holds your API keys beside the sessions of every \
                 chat: the model's file tools and commands would reach them. Use a folder of its own, such as {} \
                 (the default)",
                workspace.display(),
                self.data_dir().join("workspace").display()
            ));
        }
        let first = ws.strip_prefix(&data).ok()?.components().next()?;
        let first = first.as_os_str().to_string_lossy();
        DATA_FOLDERS.contains(&first.as_ref()).then(|| {
            format!(
                "{} is inside {}, a folder nanobot keeps its own data in: the model's file tools and commands \
                 would reach it. Use a folder of its own, such as {} (the default)",
                workspace.display(),
                self.data_dir().join(first.as_ref()).display(),
                self.data_dir().join("workspace").display()
            )
        })
    }

    /// The workspace directory for the configured value (`agents.defaults.workspace`), `~` expanded; an empty
    /// value means `<data dir>/workspace`.
    pub fn workspace(&self, configured: &str) -> PathBuf {
        if configured.trim().is_empty() {
            self.data_dir().join("workspace")
        } else {
            expand_tilde(configured.trim(), &self.home)
        }
    }
}

/// The data directory's own folders, which can never hold the workspace.
const DATA_FOLDERS: &[&str] = &[
    "sessions", "media", "logs", "history", "pairing", "cli-apps", "bridge",
];

/// `p` as it resolves on disk ([`nanobot_util::real_path`] of its normalised text; the text alone when that
/// fails).
fn resolved(p: &Path) -> PathBuf {
    let norm = nanobot_util::normalize(p);
    nanobot_util::real_path(&norm).unwrap_or(norm)
}

/// Paths inside a workspace.
pub mod workspace {
    use std::path::{Path, PathBuf};

    /// `<workspace>/cron/jobs.json`: the cron store.
    pub fn cron_jobs(workspace: &Path) -> PathBuf {
        workspace.join("cron").join("jobs.json")
    }

    /// `<workspace>/memory`: `MEMORY.md` and `history.jsonl`.
    pub fn memory_dir(workspace: &Path) -> PathBuf {
        workspace.join("memory")
    }

    /// `<workspace>/skills`: the workspace's own skills.
    pub fn skills_dir(workspace: &Path) -> PathBuf {
        workspace.join("skills")
    }

    /// `<workspace>/sessions`: the old session layout (read and migrated, no longer written).
    pub fn legacy_sessions_dir(workspace: &Path) -> PathBuf {
        workspace.join("sessions")
    }

    /// `<workspace>/.nanobot/workspace-id`: the id that names this workspace's session folder.
    pub fn workspace_id_file(workspace: &Path) -> PathBuf {
        workspace.join(".nanobot").join("workspace-id")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_layout_under_home() {
        let p = NanobotPaths::new("/home/ada");
        assert_eq!(p.config_path(), Path::new("/home/ada/.nanobot/config.json"));
        assert_eq!(p.sessions_dir(), Path::new("/home/ada/.nanobot/sessions"));
        assert_eq!(
            p.media_dir(Some("telegram")),
            Path::new("/home/ada/.nanobot/media/telegram")
        );
        assert_eq!(
            p.workspace("~/.nanobot/workspace"),
            Path::new("/home/ada/.nanobot/workspace")
        );
        assert_eq!(p.workspace(""), Path::new("/home/ada/.nanobot/workspace"));
    }

    #[test]
    fn explicit_config_path_moves_the_data_dir() {
        let p = NanobotPaths::with_config_path("/home/ada", "~/alt/config.json");
        assert_eq!(p.data_dir(), Path::new("/home/ada/alt"));
        assert_eq!(p.logs_dir(), Path::new("/home/ada/alt/logs"));
        assert_eq!(expand_tilde("~user/x", Path::new("/h")), Path::new("~user/x"));
    }
}
