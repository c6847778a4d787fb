//! What every command starts from: the process facts the binary passes in ([`CliEnv`]) and loading the
//! config for `-c`/`-w`.

use std::path::{Path, PathBuf};

use nanobot_config::LoadedConfig;
use nanobot_config::paths::NanobotPaths;
use nanobot_util::EnvMap;

use crate::args::ConfigArgs;
use crate::error::CliError;

/// The process facts a command may use. The binary builds it from the real process (`HOME`,
/// `std::env::vars()`, whether stdin/stdout are terminals); tests build it from maps.
#[derive(Clone, Default)]
pub struct CliEnv {
    /// The home directory (`~`).
    pub home: PathBuf,
    /// The environment variables.
    pub vars: EnvMap,
    /// The current directory (relative `-c`/`-w`/`--trace` paths are resolved against it).
    pub cwd: PathBuf,
    /// Whether stdin is a terminal.
    pub stdin_tty: bool,
    /// Whether stdout is a terminal (colours, Markdown rendering, spinner).
    pub stdout_tty: bool,
    /// Whether stderr is a terminal (spinner).
    pub stderr_tty: bool,
}

impl std::fmt::Debug for CliEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Variable values may be secrets: only their names.
        f.debug_struct("CliEnv")
            .field("home", &self.home)
            .field("vars", &self.vars)
            .field("cwd", &self.cwd)
            .field("stdin_tty", &self.stdin_tty)
            .field("stdout_tty", &self.stdout_tty)
            .field("stderr_tty", &self.stderr_tty)
            .finish()
    }
}

impl CliEnv {
    /// The real process: `HOME` (or `USERPROFILE`), every environment variable, the current directory and
    /// the terminal state of the standard streams. Only binaries call this.
    pub fn from_process() -> Self {
        use std::io::IsTerminal;
        // The launcher's pid is for this process only (`crate::launcher`): no tool, server or config sees it.
        let vars: EnvMap = std::env::vars()
            .filter(|(k, _)| k != crate::launcher::LAUNCHER_PID_VAR)
            .collect();
        let home = nanobot_runtime::home_from_vars(|k| vars.get(k));
        CliEnv {
            home,
            vars,
            cwd: std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
            stdin_tty: std::io::stdin().is_terminal(),
            stdout_tty: std::io::stdout().is_terminal(),
            stderr_tty: std::io::stderr().is_terminal(),
        }
    }

    /// A test environment: this home, these variables, no terminals.
    pub fn for_home(home: impl Into<PathBuf>, vars: impl Into<EnvMap>) -> Self {
        let home = home.into();
        CliEnv {
            cwd: home.clone(),
            home,
            vars: vars.into(),
            ..CliEnv::default()
        }
    }

    /// `p` made absolute against the current directory (`~` expanded).
    pub(crate) fn absolute(&self, p: &Path) -> PathBuf {
        nanobot_runtime::absolute(p, &self.home, &self.cwd)
    }

    /// The paths for `-c` (or `NANOBOT_CONFIG`, or the default `~/.nanobot/config.json`): the runtime's one
    /// discovery rule.
    pub(crate) fn paths(&self, config: Option<&Path>) -> (NanobotPaths, bool) {
        let explicit =
            nanobot_runtime::explicit_config_path(config, |k| self.vars.get(k), &self.home, &self.cwd);
        match explicit {
            Some(p) => (NanobotPaths::with_config_path(&self.home, p), true),
            None => (NanobotPaths::new(&self.home), false),
        }
    }

    /// The runtime's view of this environment.
    pub(crate) fn core_env(&self, paths: &NanobotPaths) -> nanobot_runtime::Environment {
        let mut env = nanobot_runtime::Environment::new(&self.home, self.vars.clone());
        env.config_path = Some(paths.config_path().to_path_buf());
        env
    }
}

/// A loaded config with the paths around it.
#[derive(Debug)]
pub(crate) struct Setup {
    /// Config file, data dir …
    pub(crate) paths: NanobotPaths,
    /// The config (with `-w` applied).
    pub(crate) loaded: LoadedConfig,
    /// The workspace directory.
    pub(crate) workspace: PathBuf,
}

/// Loads the config for `args`. With `require_file`, a missing file is [`CliError::NoConfig`] (the "run
/// `nanobot onboard`" message); otherwise the defaults are used.
pub(crate) fn load(env: &CliEnv, args: &ConfigArgs, require_file: bool) -> Result<Setup, CliError> {
    let (paths, explicit) = env.paths(args.config.as_deref());
    let path = paths.config_path().to_path_buf();
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => Some(t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if require_file {
                return Err(CliError::NoConfig { path, explicit });
            }
            None
        }
        Err(e) => return Err(CliError::io("read", &path, e)),
    };
    let loaded = match &text {
        Some(t) => nanobot_config::load_str(t, &path, &env.vars),
        None => nanobot_config::load(&path, &env.vars),
    }
    .map_err(|e| CliError::from_config_in(e, text.as_deref(), Some(&path)))?;
    let mut loaded = loaded;
    if let Some(ws) = &args.workspace {
        let ws = env.absolute(ws);
        loaded.config.agents.defaults.workspace = ws.display().to_string();
    }
    let workspace = paths.workspace(&loaded.config.agents.defaults.workspace);
    Ok(Setup {
        paths,
        loaded,
        workspace,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_config_says_run_onboard() {
        let dir = tempfile::tempdir().unwrap();
        let env = CliEnv::for_home(dir.path(), EnvMap::new());
        let err = load(&env, &ConfigArgs::default(), true).unwrap_err();
        assert!(err.to_string().contains("nanobot onboard"), "{err}");
        assert_eq!(err.exit_code(), crate::error::EXIT_USAGE);
    }

    #[test]
    fn bad_value_names_file_line_and_field() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("c.json");
        std::fs::write(
            &cfg,
            "{\n \"agents\": {\n  \"defaults\": {\n   \"maxTokens\": \"many\"\n  }\n }\n}\n",
        )
        .unwrap();
        let env = CliEnv::for_home(dir.path(), EnvMap::new());
        let args = ConfigArgs {
            config: Some(cfg.clone()),
            workspace: None,
        };
        let err = load(&env, &args, true).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("maxTokens"), "{text}");
        assert!(text.contains("line 4"), "{text}");
        assert!(text.contains("c.json"), "{text}");
        assert_eq!(err.exit_code(), crate::error::EXIT_USAGE);
    }

    #[test]
    fn workspace_flag_overrides_the_config() {
        let dir = tempfile::tempdir().unwrap();
        let env = CliEnv::for_home(dir.path(), EnvMap::new());
        let args = ConfigArgs {
            config: None,
            workspace: Some(PathBuf::from("ws")),
        };
        let s = load(&env, &args, false).unwrap();
        assert_eq!(s.workspace, dir.path().join("ws"));
    }
}
