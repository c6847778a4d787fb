//! stdio transport: the server is a child process in its own process group.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;

#[cfg(unix)]
use nanobot_util::{EnvMap, SecretMap};
use process_wrap::tokio::ProcessGroup;
use process_wrap::tokio::{CommandWrap, KillOnDrop};
use rmcp::transport::TokioChildProcess;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::McpError;

/// Variables of the parent environment a stdio server inherits. Everything else (API keys of
/// other services, tokens, ...) is dropped; a server that needs more gets it through its `env`.
pub const INHERITED_ENV: &[&str] = &[
    "HOME",
    "LOGNAME",
    "PATH",
    "SHELL",
    "TERM",
    "USER",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TMPDIR",
    "TZ",
    "SYSTEMROOT",
    "APPDATA",
    "USERPROFILE",
    "NODE_EXTRA_CA_CERTS",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
];

/// The environment a stdio server starts with: the allowed subset of `parent`, then `configured`
/// on top (configured values win).
pub fn child_env(parent: &EnvMap, configured: &SecretMap) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = parent
        .iter()
        .filter(|(k, _)| INHERITED_ENV.contains(k))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    env.extend(configured.iter().map(|(k, v)| (k.to_owned(), v.to_owned())));
    env
}

/// What is needed to start one stdio server.
pub(crate) struct StdioLaunch<'a> {
    pub(crate) server: &'a str,
    pub(crate) command: &'a str,
    pub(crate) args: &'a [String],
    pub(crate) env: BTreeMap<String, String>,
    pub(crate) cwd: Option<&'a PathBuf>,
}

/// Spawns the child (its stderr forwarded to `tracing` at debug level).
///
/// rmcp's `TokioChildProcess` closes stdin on shutdown, waits, sends SIGTERM, waits and finally
/// kills; the process group makes the kill reach grandchildren too (`npx` → `node`).
pub(crate) fn spawn(launch: StdioLaunch<'_>) -> Result<TokioChildProcess, McpError> {
    let mut cmd = tokio::process::Command::new(launch.command);
    cmd.args(launch.args).env_clear().envs(&launch.env);
    if let Some(cwd) = launch.cwd {
        cmd.current_dir(cwd);
    }
    let mut wrapped = CommandWrap::from(cmd);
    // Its own process group, so the final kill reaches grandchildren too; killed when the
    // handle is dropped even if nobody shut it down.
    #[cfg(unix)]
    wrapped.wrap(ProcessGroup::leader());
    wrapped.wrap(KillOnDrop);
    let (child, stderr) = TokioChildProcess::builder(wrapped)
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| McpError::Spawn {
            server: launch.server.to_owned(),
            command: launch.command.to_owned(),
            source,
        })?;
    if let Some(stderr) = stderr {
        let server = launch.server.to_owned();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::debug!(target: "nanobot_mcp::stderr", server = %server, "{line}");
            }
        });
    }
    Ok(child)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_is_scrubbed_then_configured() {
        let parent = EnvMap::from_iter([
            ("PATH", "/usr/bin"),
            ("HOME", "/home/u"),
            ("OPENAI_API_KEY", "sk-parent"),
            ("TELEGRAM_TOKEN", "t"),
        ]);
        let configured: SecretMap = [("BRAVE_API_KEY", "b"), ("HOME", "/srv")].into_iter().collect();
        let env = child_env(&parent, &configured);
        assert_eq!(env.get("PATH").map(String::as_str), Some("/usr/bin"));
        assert_eq!(env.get("HOME").map(String::as_str), Some("/srv"));
        assert_eq!(env.get("BRAVE_API_KEY").map(String::as_str), Some("b"));
        assert!(!env.contains_key("OPENAI_API_KEY"));
        assert!(!env.contains_key("TELEGRAM_TOKEN"));
    }
}
