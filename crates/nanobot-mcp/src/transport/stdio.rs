//! stdio transport: the server is a child process in its own process group.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;

use nanobot_tools::confine::{SpawnerThread, spawn_on_own_thread};
use nanobot_util::{EnvMap, SecretMap};
use process_wrap::tokio::ProcessGroup;
use process_wrap::tokio::{CommandWrap, KillOnDrop};
use rmcp::transport::TokioChildProcess;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::McpError;
use crate::confine::{OwnDir, StdioConfinement};

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
    pub(crate) parent_env: &'a EnvMap,
    pub(crate) configured: &'a SecretMap,
    pub(crate) cwd: Option<&'a PathBuf>,
    /// `trusted: true`: started unconfined.
    pub(crate) trusted: bool,
    /// `writablePaths`.
    pub(crate) writable_paths: &'a [PathBuf],
    pub(crate) confinement: &'a StdioConfinement,
}

/// What must live as long as a confined server: the thread that started it (bubblewrap's `--die-with-parent`
/// watches it; Landlock restricted it) and its own directory when that is a temporary one.
#[derive(Debug)]
pub(crate) struct SandboxHold {
    _thread: SpawnerThread,
    _own: OwnDir,
    /// The server's egress proxy (`tools.network.allowedDomains`), whose refusals its tools' answers tell.
    pub(crate) egress: Option<Arc<nanobot_tools::egress::EgressProxy>>,
}

/// Spawns the child (its stderr forwarded to `tracing` at debug level), confined unless the server is trusted or
/// this machine has no confinement (then it says so at warn level); a confined one comes with what must live as
/// long as it.
///
/// rmcp's `TokioChildProcess` closes stdin on shutdown, waits, sends SIGTERM, waits and finally
/// kills; the process group makes the kill reach grandchildren too (`npx` → `node`), and under bubblewrap the PID
/// namespace ends everything the server started with it.
pub(crate) async fn spawn(
    launch: StdioLaunch<'_>,
) -> Result<(TokioChildProcess, Option<SandboxHold>), McpError> {
    let spawn_error = |source| McpError::Spawn {
        server: launch.server.to_owned(),
        command: launch.command.to_owned(),
        source,
    };
    let confined = if launch.trusted {
        None
    } else {
        // The sandbox starts whatever it is given: a program that is not there is said so here, as an unconfined
        // start would, and the one found is shown in the sandbox wherever it lies.
        let path = launch
            .configured
            .get("PATH")
            .or_else(|| launch.parent_env.get("PATH"));
        let program = find_program(launch.command, path, launch.cwd).map_err(spawn_error)?;
        launch
            .confinement
            .prepare(
                launch.server,
                launch
                    .parent_env
                    .get("TMPDIR")
                    .map(std::path::Path::new)
                    .filter(|t| t.is_dir())
                    .unwrap_or(std::path::Path::new("/tmp")),
                &program,
                launch.args,
                launch.cwd.map(PathBuf::as_path),
                launch.writable_paths,
            )
            .map_err(spawn_error)?
    };
    let (child, stderr, hold) = match confined {
        None => {
            if !launch.trusted && launch.confinement.sandbox != nanobot_tools::ExecSandbox::None {
                tracing::warn!(
                    server = %launch.server,
                    "MCP server runs without kernel confinement: neither bubblewrap nor Landlock works here (see `nanobot doctor`)"
                );
            }
            let mut cmd = tokio::process::Command::new(launch.command);
            cmd.args(launch.args)
                .env_clear()
                .envs(child_env(launch.parent_env, launch.configured));
            if let Some(cwd) = launch.cwd {
                cmd.current_dir(cwd);
            }
            let (child, stderr) = wrapped(cmd).map_err(spawn_error)?;
            (child, stderr, None)
        }
        Some(c) => {
            let mut env = child_env(launch.parent_env, &SecretMap::default());
            env.extend(c.env);
            // What the server's config sets wins.
            env.extend(
                launch
                    .configured
                    .iter()
                    .map(|(k, v)| (k.to_owned(), v.to_owned())),
            );
            let (argv, cwd) = (c.argv, c.cwd);
            let ((child, stderr), thread) = spawn_on_own_thread("nanobot-mcp-spawn", c.landlock, move || {
                let mut cmd = tokio::process::Command::new(&argv[0]);
                cmd.args(&argv[1..]).env_clear().envs(&env).current_dir(&cwd);
                wrapped(cmd)
            })
            .await
            .map_err(spawn_error)?;
            let hold = SandboxHold {
                _thread: thread,
                _own: c.own,
                egress: c.egress.map(Arc::new),
            };
            (child, stderr, Some(hold))
        }
    };
    if let Some(stderr) = stderr {
        let server = launch.server.to_owned();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::debug!(target: "nanobot_mcp::stderr", server = %server, "{line}");
            }
        });
    }
    Ok((child, hold))
}

/// Where `command` is found as `execvp` would find it (a name with a `/` as it is, against `cwd` when relative;
/// otherwise in `path`'s directories): `NotFound` when nowhere.
fn find_program(command: &str, path: Option<&str>, cwd: Option<&PathBuf>) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let runnable = |p: &std::path::Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let found = if command.contains('/') {
        let p = match cwd {
            Some(dir) => dir.join(command),
            None => PathBuf::from(command),
        };
        runnable(&p).then_some(p)
    } else {
        path.unwrap_or("/usr/local/bin:/usr/bin:/bin")
            .split(':')
            .filter(|d| !d.is_empty())
            .map(|d| std::path::Path::new(d).join(command))
            .find(|p| runnable(p))
    };
    found.ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            if command.contains('/') {
                "no such program (or it is not executable)"
            } else {
                "not found in any directory of PATH"
            },
        )
    })
}

/// Starts `cmd` in a process group of its own (so the final kill reaches grandchildren too), killed when the
/// handle is dropped even if nobody shut it down, with its stderr piped.
fn wrapped(
    cmd: tokio::process::Command,
) -> std::io::Result<(TokioChildProcess, Option<tokio::process::ChildStderr>)> {
    let mut wrapped = CommandWrap::from(cmd);
    #[cfg(unix)]
    wrapped.wrap(ProcessGroup::leader());
    wrapped.wrap(KillOnDrop);
    TokioChildProcess::builder(wrapped).stderr(Stdio::piped()).spawn()
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
