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
    /// A config loaded before the command ran (for the log plan), handed to the command's own first load of the
    /// same arguments: one read and parse of the file per start ([`load_and_keep`]).
    kept: std::sync::Arc<std::sync::Mutex<Option<(ConfigArgs, Setup)>>>,
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
            kept: std::sync::Arc::default(),
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
#[derive(Debug, Clone)]
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
    let kept = nanobot_util::lock(&env.kept).take();
    if let Some((kept_args, setup)) = kept
        && kept_args.config == args.config
        && kept_args.workspace == args.workspace
    {
        return Ok(setup);
    }
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

/// [`load`] without requiring the file, for what runs before the command (the log plan); a config read from a
/// file is kept for the command's own first load with the same arguments, which then reads nothing.
pub(crate) fn load_and_keep(env: &CliEnv, args: &ConfigArgs) -> Result<Setup, CliError> {
    let setup = load(env, args, false)?;
    if setup.loaded.file_found {
        *nanobot_util::lock(&env.kept) = Some((args.clone(), setup.clone()));
    }
    Ok(setup)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_loaded_for_the_log_plan_is_read_once() {
        let dir = tempfile::tempdir().unwrap();
        let env = CliEnv::for_home(dir.path(), EnvMap::new());
        // No file: nothing kept, and the command still says to run onboard.
        assert!(
            !load_and_keep(&env, &ConfigArgs::default())
                .unwrap()
                .loaded
                .file_found
        );
        assert!(load(&env, &ConfigArgs::default(), true).is_err());
        crate::onboard::onboard(&env, &ConfigArgs::default()).unwrap();
        let first = load_and_keep(&env, &ConfigArgs::default()).unwrap();
        // Changed on disk after the first read: the command's first load takes what was read, a later one reads again.
        let path = first.paths.config_path().to_path_buf();
        let mut v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        v["agents"]["defaults"]["model"] = "changed/model".into();
        std::fs::write(&path, v.to_string()).unwrap();
        let model = || {
            load(&env, &ConfigArgs::default(), true)
                .unwrap()
                .loaded
                .config
                .agents
                .defaults
                .model
        };
        assert_ne!(model(), "changed/model");
        assert_eq!(model(), "changed/model");
        // Other arguments never take what was kept.
        load_and_keep(&env, &ConfigArgs::default()).unwrap();
        let other = ConfigArgs {
            workspace: Some(dir.path().join("elsewhere")),
            ..ConfigArgs::default()
        };
        assert_eq!(
            load(&env, &other, true).unwrap().workspace,
            dir.path().join("elsewhere")
        );
    }

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
