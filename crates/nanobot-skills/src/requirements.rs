//! Requirement checks: binaries on `PATH`, environment variables, operating system.
//!
//! Nothing here reads the process environment: the caller passes `PATH` and the variables as values.

use nanobot_util::EnvMap;
use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;

/// What a skill needs before it can be used (from its frontmatter).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Requirements {
    /// Executables that must be found on `PATH` (`requires.bins`).
    pub bins: Vec<String>,
    /// Environment variables that must be set and non-empty (`requires.env`).
    pub env: Vec<String>,
    /// Operating systems the skill supports (`os`; empty = all). Python/Node spellings are
    /// accepted: `darwin`/`macos`, `linux`, `win32`/`windows`.
    pub os: Vec<String>,
}

/// One unmet requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Missing {
    /// A binary not found on `PATH`.
    Bin(String),
    /// An environment variable that is unset or empty.
    Env(String),
    /// The skill supports only these operating systems.
    Os(Vec<String>),
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Missing::Bin(b) => write!(f, "CLI: {b}"),
            Missing::Env(e) => write!(f, "ENV: {e}"),
            Missing::Os(os) => write!(f, "OS: {}", os.join("|")),
        }
    }
}

/// The environment requirement checks run against, passed in by the caller.
#[derive(Clone)]
pub struct RequirementEnv {
    path: Option<OsString>,
    vars: EnvMap,
    os: String,
    cwd: PathBuf,
}

impl fmt::Debug for RequirementEnv {
    // Variable values may be secrets: `EnvMap` shows only the names.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequirementEnv")
            .field("path", &self.path)
            .field("vars", &self.vars)
            .field("os", &self.os)
            .finish()
    }
}

impl RequirementEnv {
    /// Checks against these environment variables; `PATH` is taken from the map, the OS is the one
    /// this binary was built for (`std::env::consts::OS`).
    pub fn new(vars: impl Into<EnvMap>) -> Self {
        let vars = vars.into();
        let path = vars.get("PATH").map(OsString::from);
        RequirementEnv {
            path,
            vars,
            os: std::env::consts::OS.to_owned(),
            cwd: PathBuf::from("/"),
        }
    }

    /// Overrides the `PATH` used to find binaries.
    #[must_use]
    pub fn with_path(mut self, path: impl Into<OsString>) -> Self {
        self.path = Some(path.into());
        self
    }

    /// Overrides the operating system name (`linux`, `macos`/`darwin`, `windows`/`win32`).
    #[must_use]
    pub fn with_os(mut self, os: impl Into<String>) -> Self {
        self.os = os.into();
        self
    }

    /// Directory relative binary paths (`./tool`) are resolved against.
    #[must_use]
    pub fn with_cwd(mut self, cwd: impl Into<PathBuf>) -> Self {
        self.cwd = cwd.into();
        self
    }

    /// Whether `bin` is an executable on `PATH` (or, when it contains a `/`, at that path).
    pub fn has_bin(&self, bin: &str) -> bool {
        if bin.contains('/') {
            return which::which_in(bin, None::<&str>, &self.cwd).is_ok();
        }
        match &self.path {
            Some(path) => which::which_in(bin, Some(path), &self.cwd).is_ok(),
            None => false,
        }
    }

    /// Whether the environment variable is set to a non-empty value.
    pub fn has_env(&self, name: &str) -> bool {
        self.vars.non_empty(name).is_some()
    }

    /// Whether one of `allowed` names this OS.
    pub fn os_matches(&self, allowed: &[String]) -> bool {
        allowed.is_empty() || allowed.iter().any(|a| normalise_os(a) == normalise_os(&self.os))
    }

    /// Everything in `req` that this environment lacks, in frontmatter order.
    pub fn missing(&self, req: &Requirements) -> Vec<Missing> {
        let mut out: Vec<Missing> = req
            .bins
            .iter()
            .filter(|b| !self.has_bin(b))
            .map(|b| Missing::Bin(b.clone()))
            .collect();
        out.extend(
            req.env
                .iter()
                .filter(|e| !self.has_env(e))
                .map(|e| Missing::Env(e.clone())),
        );
        if !self.os_matches(&req.os) {
            out.push(Missing::Os(req.os.clone()));
        }
        out
    }
}

fn normalise_os(os: &str) -> String {
    match os.trim().to_ascii_lowercase().as_str() {
        "darwin" | "macos" | "mac" | "osx" => "macos".into(),
        "win32" | "windows" | "win" => "windows".into(),
        other => other.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn os_names_normalised() {
        let env = RequirementEnv::new(HashMap::new()).with_os("macos");
        assert!(env.os_matches(&["darwin".into()]));
        assert!(!env.os_matches(&["linux".into(), "win32".into()]));
        assert!(env.os_matches(&[]));
    }

    #[test]
    fn empty_env_value_counts_as_missing_and_debug_hides_values() {
        let env = RequirementEnv::new(HashMap::from([
            ("A".to_owned(), "secret-value".to_owned()),
            ("B".to_owned(), "  ".to_owned()),
        ]));
        assert!(env.has_env("A"));
        assert!(!env.has_env("B"));
        assert!(!env.has_env("C"));
        assert!(!format!("{env:?}").contains("secret-value"));
    }

    #[test]
    fn missing_display_matches_python_format() {
        let req = Requirements {
            bins: vec!["no-such-bin-xyz".into()],
            env: vec!["NOPE".into()],
            os: vec![],
        };
        let env = RequirementEnv::new(HashMap::from([("PATH".to_owned(), "/nonexistent".to_owned())]));
        let missing: Vec<String> = env.missing(&req).iter().map(ToString::to_string).collect();
        assert_eq!(missing, vec!["CLI: no-such-bin-xyz", "ENV: NOPE"]);
    }
}
