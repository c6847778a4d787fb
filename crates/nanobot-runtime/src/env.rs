//! [`Environment`]: the process facts the agent may use, discovered once, the same way for every binary.

use std::path::{Path, PathBuf};

use nanobot_config::env_vars;
use nanobot_config::paths::{NanobotPaths, expand_tilde};
use nanobot_util::EnvMap;

/// What the binaries pass in instead of letting a library read the process: the home directory, the
/// environment as a map, and the config file path when it is not the default.
///
/// Build it with [`Environment::discover`] (from a map: tests, embedders) or [`Environment::from_process`]
/// (binaries only). `Debug` lists the variables' names only: their values include API keys.
#[derive(Clone, Debug, Default)]
pub struct Environment {
    /// The user's home directory.
    pub home: PathBuf,
    /// Environment variables (`std::env::vars().collect()` in a binary, a map in tests); `Debug` shows names only.
    pub vars: EnvMap,
    /// `--config` or `NANOBOT_CONFIG` when given (absolute).
    pub config_path: Option<PathBuf>,
}

/// The home directory named by `vars`: `HOME`, else `USERPROFILE`, else the current directory (`.`).
pub fn home_from_vars<'a, I>(vars: I) -> PathBuf
where
    I: Fn(&str) -> Option<&'a str>,
{
    vars(env_vars::HOME)
        .filter(|h| !h.is_empty())
        .or_else(|| vars(env_vars::USERPROFILE).filter(|h| !h.is_empty()))
        .map_or_else(|| PathBuf::from("."), PathBuf::from)
}

/// `p` with `~` expanded against `home`, made absolute against `cwd`.
pub fn absolute(p: &Path, home: &Path, cwd: &Path) -> PathBuf {
    let p = match p.to_str() {
        Some(s) => expand_tilde(s, home),
        None => p.to_path_buf(),
    };
    if p.is_absolute() { p } else { cwd.join(p) }
}

/// The config file the user asked for: `flag` (`-c`), else a non-blank `NANOBOT_CONFIG`; `None` means the
/// default `~/.nanobot/config.json`. Relative paths are resolved against `cwd`, `~` against `home`.
pub fn explicit_config_path<'a, I>(flag: Option<&Path>, vars: I, home: &Path, cwd: &Path) -> Option<PathBuf>
where
    I: Fn(&str) -> Option<&'a str>,
{
    flag.map(Path::to_path_buf)
        .or_else(|| {
            vars(env_vars::NANOBOT_CONFIG)
                .filter(|v| !v.trim().is_empty())
                .map(PathBuf::from)
        })
        .map(|p| absolute(&p, home, cwd))
}

impl Environment {
    /// An environment with this home and variables (the default config path).
    pub fn new(home: impl Into<PathBuf>, vars: impl Into<EnvMap>) -> Self {
        Self {
            home: home.into(),
            vars: vars.into(),
            config_path: None,
        }
    }

    /// The one discovery every binary uses: home from `HOME`/`USERPROFILE`, the config from `config_flag` or
    /// `NANOBOT_CONFIG` (made absolute against `cwd`).
    pub fn discover(vars: impl Into<EnvMap>, cwd: &Path, config_flag: Option<&Path>) -> Self {
        let vars: EnvMap = vars.into();
        let get = |k: &str| vars.get(k);
        let home = home_from_vars(get);
        let config_path = explicit_config_path(config_flag, get, &home, cwd);
        Self {
            home,
            vars,
            config_path,
        }
    }

    /// [`Environment::discover`] over the real process (variables and current directory). Binaries only.
    pub fn from_process(config_flag: Option<&Path>) -> Self {
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
        Self::discover(std::env::vars().collect::<EnvMap>(), &cwd, config_flag)
    }

    /// The nanobot paths of this environment.
    pub fn paths(&self) -> NanobotPaths {
        match &self.config_path {
            Some(p) => NanobotPaths::with_config_path(&self.home, p),
            None => NanobotPaths::new(&self.home),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_names_not_values() {
        let env = Environment::new("/home/u", EnvMap::from_iter([("OPENAI_API_KEY", "sk-SEKRIT")]));
        let dbg = format!("{env:?}");
        assert!(
            dbg.contains("OPENAI_API_KEY") && !dbg.contains("sk-SEKRIT"),
            "{dbg}"
        );
    }

    #[test]
    fn discovery_prefers_the_flag_then_nanobot_config_and_resolves_relative_paths() {
        let vars = EnvMap::from_iter([("HOME", "/home/u"), ("NANOBOT_CONFIG", "conf/env.json")]);
        let cwd = Path::new("/srv/bot");
        let env = Environment::discover(vars.clone(), cwd, None);
        assert_eq!(env.home, Path::new("/home/u"));
        assert_eq!(
            env.config_path.as_deref(),
            Some(Path::new("/srv/bot/conf/env.json"))
        );
        let env = Environment::discover(vars.clone(), cwd, Some(Path::new("~/other.json")));
        assert_eq!(env.config_path.as_deref(), Some(Path::new("/home/u/other.json")));
        assert_eq!(env.paths().config_path(), Path::new("/home/u/other.json"));
        let mut no_home = vars;
        no_home.remove("HOME");
        no_home.remove("NANOBOT_CONFIG");
        no_home.insert("USERPROFILE", "C:/Users/u");
        no_home.insert("NANOBOT_CONFIG", "  ");
        let env = Environment::discover(no_home, cwd, None);
        assert_eq!(env.home, Path::new("C:/Users/u"));
        assert_eq!(env.config_path, None, "a blank NANOBOT_CONFIG is ignored");
    }
}
