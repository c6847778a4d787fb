//! `exec`: runs a shell command with a scrubbed environment, a timeout that kills the whole
//! process group, the command guard, and (on Linux) a Landlock ruleset.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use regex::Regex;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::io::AsyncReadExt;

use super::guard;
use crate::error::ToolError;
use crate::sandbox::Sandbox;
use crate::schema::TypedTool;
use crate::settings::{ExecSandbox, ExecSettings};
use crate::tool::{ToolContext, ToolOutput};

/// Largest timeout the model may ask for, in seconds.
pub const MAX_TIMEOUT_SECS: u64 = 600;
const READ_CAP: usize = 1024 * 1024;
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Arguments of `exec`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ExecArgs {
    /// The shell command to execute.
    pub command: String,
    /// Optional working directory for the command (default: the workspace).
    #[serde(default)]
    pub working_dir: Option<String>,
    /// Timeout in seconds (default 60, max 600).
    #[schemars(range(min = 1, max = 600))]
    pub timeout: Option<u64>,
}

/// `exec`: exclusive (never runs beside another tool).
#[derive(Debug, Clone)]
pub struct ExecTool {
    settings: Arc<ExecSettings>,
    sandbox: Arc<Sandbox>,
    allow: Vec<Regex>,
    deny: Vec<Regex>,
}

impl ExecTool {
    /// An `exec` tool. Invalid `allowPatterns`/`denyPatterns` regexes are an error naming the
    /// pattern.
    pub fn new(settings: ExecSettings, sandbox: Arc<Sandbox>) -> Result<Self, ToolError> {
        let compile = |key: &str, pats: &[String]| -> Result<Vec<Regex>, ToolError> {
            pats.iter()
                .map(|p| {
                    Regex::new(&format!("(?i){p}")).map_err(|e| {
                        ToolError::InvalidArguments(format!("tools.exec.{key}: bad regex '{p}': {e}"))
                    })
                })
                .collect()
        };
        Ok(Self {
            allow: compile("allowPatterns", &settings.allow_patterns)?,
            deny: compile("denyPatterns", &settings.deny_patterns)?,
            settings: Arc::new(settings),
            sandbox,
        })
    }

    /// The guard: built-in rules, config deny/allow patterns, and the workspace restriction.
    /// `Err` is the reason.
    pub fn check_command(&self, command: &str, cwd: &Path) -> Result<(), String> {
        guard::check(command)?;
        let lower = command.to_lowercase();
        if let Some(p) = self.deny.iter().find(|r| r.is_match(&lower)) {
            return Err(format!(
                "matches deny pattern {}",
                p.as_str().trim_start_matches("(?i)")
            ));
        }
        if !self.allow.is_empty() && !self.allow.iter().any(|r| r.is_match(&lower)) {
            return Err("not in allowlist".into());
        }
        if self.settings.restrict_to_workspace {
            self.check_paths(command, cwd)?;
        }
        Ok(())
    }

    fn check_paths(&self, command: &str, cwd: &Path) -> Result<(), String> {
        let lexed = guard::lex(command);
        let mut candidates: Vec<String> = Vec::new();
        for c in &lexed.commands {
            candidates.extend(c.words.iter().skip(1).cloned());
            candidates.extend(c.writes.iter().cloned());
            candidates.extend(c.reads.iter().cloned());
        }
        for sub in &lexed.substitutions {
            self.check_paths(sub, cwd)?;
        }
        for raw in candidates {
            let value = match raw.split_once('=') {
                Some((k, v)) if k.starts_with('-') || !k.contains('/') => v.to_owned(),
                _ => raw.clone(),
            };
            if value.contains("://") {
                continue; // URLs are not paths
            }
            let is_path = value.starts_with('/')
                || value == "~"
                || value.starts_with("~/")
                || value.split(['/', '\\']).any(|c| c == "..");
            if !is_path || matches!(value.as_str(), "/dev/null" | "/dev/stdout" | "/dev/stderr") {
                continue;
            }
            if value.split(['/', '\\']).any(|c| c == "..") && !value.starts_with('/') {
                // relative traversal: resolve against cwd
                let joined = cwd.join(&value);
                let real = crate::sandbox::real_path(&joined).unwrap_or(joined);
                if !self.sandbox.allowed(&real, false) {
                    return Err("path traversal detected".into());
                }
                continue;
            }
            match self.sandbox.resolve_write(&value) {
                Ok(_) => {}
                Err(_) => return Err(format!("path outside working dir: {value}")),
            }
        }
        Ok(())
    }

    fn child_env(&self) -> BTreeMap<String, String> {
        let parent = &self.settings.parent_env;
        let mut env = BTreeMap::new();
        let home = parent
            .get("HOME")
            .cloned()
            .unwrap_or_else(|| self.sandbox.workspace().display().to_string());
        env.insert("HOME".to_owned(), home);
        env.insert(
            "LANG".to_owned(),
            parent
                .get("LANG")
                .cloned()
                .unwrap_or_else(|| "C.UTF-8".to_owned()),
        );
        env.insert(
            "TERM".to_owned(),
            parent.get("TERM").cloned().unwrap_or_else(|| "dumb".to_owned()),
        );
        let mut path = parent
            .get("PATH")
            .cloned()
            .unwrap_or_else(|| DEFAULT_PATH.to_owned());
        if !self.settings.path_prepend.is_empty() {
            path = format!("{}:{path}", self.settings.path_prepend);
        }
        if !self.settings.path_append.is_empty() {
            path = format!("{path}:{}", self.settings.path_append);
        }
        env.insert("PATH".to_owned(), path);
        for key in &self.settings.allowed_env_keys {
            if let Some(v) = parent.get(key) {
                env.insert(key.clone(), v.clone());
            }
        }
        env
    }

    fn writable_dirs(&self, cwd: &Path) -> Vec<PathBuf> {
        let mut dirs = vec![
            self.sandbox.workspace_real().to_path_buf(),
            PathBuf::from("/tmp"),
            PathBuf::from("/var/tmp"),
            PathBuf::from("/dev"),
        ];
        if let Some(t) = self.settings.parent_env.get("TMPDIR") {
            dirs.push(PathBuf::from(t));
        }
        if cwd.starts_with(self.sandbox.workspace_real()) {
            // already covered
        }
        dirs.extend(self.settings.extra_writable.iter().cloned());
        dirs.retain(|d| d.exists());
        dirs
    }
}

/// What Landlock can do on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LandlockSupport {
    /// Rulesets are enforced.
    Enforced,
    /// The kernel (or a seccomp filter) does not enforce Landlock; the reason.
    Unavailable(String),
}

/// Probes Landlock once (by restricting a throwaway thread) and caches the answer.
pub fn landlock_support() -> LandlockSupport {
    static PROBE: OnceLock<LandlockSupport> = OnceLock::new();
    PROBE
        .get_or_init(|| {
            #[cfg(target_os = "linux")]
            {
                let handle = std::thread::spawn(|| match landlock_restrict(&[]) {
                    Ok(true) => LandlockSupport::Enforced,
                    Ok(false) => LandlockSupport::Unavailable("ruleset not enforced by the kernel".into()),
                    Err(e) => LandlockSupport::Unavailable(e),
                });
                handle
                    .join()
                    .unwrap_or_else(|_| LandlockSupport::Unavailable("probe panicked".into()))
            }
            #[cfg(not(target_os = "linux"))]
            {
                LandlockSupport::Unavailable("not Linux".into())
            }
        })
        .clone()
}

/// Restricts the calling thread: read/execute everywhere, write only under `writable`.
/// `Ok(true)` when enforced (fully or partially).
#[cfg(target_os = "linux")]
fn landlock_restrict(writable: &[PathBuf]) -> Result<bool, String> {
    use landlock::{
        ABI, Access, AccessFs, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, path_beneath_rules,
    };
    let abi = ABI::V5;
    let status = Ruleset::default()
        .handle_access(AccessFs::from_all(abi))
        .and_then(|r| r.create())
        .and_then(|r| r.add_rules(path_beneath_rules(["/"], AccessFs::from_read(abi))))
        .and_then(|r| r.add_rules(path_beneath_rules(writable, AccessFs::from_all(abi))))
        .and_then(|r| r.restrict_self())
        .map_err(|e| e.to_string())?;
    Ok(status.ruleset != RulesetStatus::NotEnforced)
}

/// Kills the child's process group when dropped (timeout, cancellation) unless disarmed.
struct GroupKill(Option<i32>);

impl GroupKill {
    fn kill(&mut self) {
        #[cfg(unix)]
        if let Some(pid) = self.0.take() {
            let _ =
                nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        }
    }
}

impl Drop for GroupKill {
    fn drop(&mut self) {
        self.kill();
    }
}

async fn read_capped<R: tokio::io::AsyncRead + Unpin>(mut r: R) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if out.len() < READ_CAP {
                    out.extend_from_slice(&buf[..n.min(READ_CAP - out.len())]);
                }
            }
        }
    }
    out
}

/// Truncates `text` to `max` characters with the Python nanobot's marker.
pub fn cap_output(text: &str, max: usize) -> String {
    let total = text.chars().count();
    if total <= max {
        return text.to_owned();
    }
    let head: String = text.chars().take(max).collect();
    format!("{head}\n... (truncated, {} more chars)", total - max)
}

#[async_trait]
impl TypedTool for ExecTool {
    type Args = ExecArgs;

    fn name(&self) -> &str {
        "exec"
    }

    fn description(&self) -> &str {
        "Execute a shell command and return its output. Prefer read_file/write_file/edit_file \
         over cat/echo/sed, and grep/glob over shell find/grep. Use -y or --yes flags to avoid \
         interactive prompts. Output is truncated at 10 000 chars; timeout defaults to 60s."
    }

    fn exclusive(&self) -> bool {
        true
    }

    async fn call(&self, args: ExecArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let cwd = match args.working_dir.as_deref().filter(|s| !s.trim().is_empty()) {
            Some(dir) => {
                let p = if self.settings.restrict_to_workspace {
                    self.sandbox.resolve_write(dir)?
                } else {
                    self.sandbox
                        .resolve(dir, false)
                        .or_else(|_| Sandbox::new(self.sandbox.workspace(), false).resolve(dir, false))?
                };
                if !p.is_dir() {
                    return Err(ToolError::Failed(format!("working_dir {dir} is not a directory")));
                }
                p
            }
            None => self.sandbox.workspace_real().to_path_buf(),
        };
        if let Err(reason) = self.check_command(&args.command, &cwd) {
            return Ok(ToolOutput::error(format!(
                "Error: Command blocked by safety guard ({reason})"
            )));
        }
        let timeout = Duration::from_secs(
            args.timeout
                .unwrap_or(self.settings.timeout.as_secs().max(1))
                .clamp(1, MAX_TIMEOUT_SECS),
        );
        let env = self.child_env();
        let use_landlock = match self.settings.sandbox {
            ExecSandbox::None => false,
            ExecSandbox::Auto | ExecSandbox::Landlock => match landlock_support() {
                LandlockSupport::Enforced => true,
                LandlockSupport::Unavailable(why) => {
                    static WARNED: OnceLock<()> = OnceLock::new();
                    WARNED.get_or_init(|| {
                        tracing::warn!(reason = %why, "Landlock unavailable: exec runs without an OS sandbox");
                    });
                    false
                }
            },
        };
        let writable = self.writable_dirs(&cwd);
        let command = args.command.clone();
        let cwd2 = cwd.clone();
        let handle = tokio::runtime::Handle::current();
        let (tx, rx) = tokio::sync::oneshot::channel();
        // A dedicated thread: Landlock restricts the calling thread and what it spawns, so it
        // must never be a pooled runtime thread. The thread ends right after spawning.
        std::thread::Builder::new()
            .name("nanobot-exec-spawn".into())
            .spawn(move || {
                let _guard = handle.enter();
                #[cfg(target_os = "linux")]
                if use_landlock && let Err(e) = landlock_restrict(&writable) {
                    let _ = tx.send(Err(std::io::Error::other(format!("landlock: {e}"))));
                    return;
                }
                let _ = &writable;
                let mut cmd = tokio::process::Command::new("sh");
                cmd.arg("-c")
                    .arg(&command)
                    .current_dir(&cwd2)
                    .env_clear()
                    .envs(&env)
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .kill_on_drop(true);
                #[cfg(unix)]
                cmd.process_group(0);
                let _ = tx.send(cmd.spawn());
            })
            .map_err(|e| ToolError::Failed(format!("cannot start exec thread: {e}")))?;
        let mut child = rx
            .await
            .map_err(|_| ToolError::Failed("exec spawn thread died".into()))?
            .map_err(|e| ToolError::Failed(format!("cannot run command: {e}")))?;
        let mut group = GroupKill(child.id().map(|p| p as i32));
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let out_task = tokio::spawn(async move {
            match stdout {
                Some(s) => read_capped(s).await,
                None => Vec::new(),
            }
        });
        let err_task = tokio::spawn(async move {
            match stderr {
                Some(s) => read_capped(s).await,
                None => Vec::new(),
            }
        });
        let status = tokio::select! {
            r = tokio::time::timeout(timeout, child.wait()) => r,
            () = ctx.cancel.cancelled() => {
                group.kill();
                let _ = child.wait().await;
                return Err(ToolError::Cancelled);
            }
        };
        let status = match status {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(ToolError::Failed(format!("waiting for command: {e}"))),
            Err(_) => {
                group.kill();
                let _ = child.wait().await;
                out_task.abort();
                err_task.abort();
                return Ok(ToolOutput::error(format!(
                    "Error: Command timed out after {} seconds",
                    timeout.as_secs()
                )));
            }
        };
        // The shell is done; background children may still hold the pipes open, so collect
        // what is there without waiting on them for long.
        group.0 = None;
        let grace = Duration::from_secs(2);
        let stdout = tokio::time::timeout(grace, out_task)
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default();
        let stderr = tokio::time::timeout(grace, err_task)
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default();
        let mut text = String::from_utf8_lossy(&stdout).into_owned();
        let err_text = String::from_utf8_lossy(&stderr);
        if !err_text.trim().is_empty() {
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str("STDERR:\n");
            text.push_str(&err_text);
        }
        let code = status.code().map_or_else(
            || {
                #[cfg(unix)]
                {
                    use std::os::unix::process::ExitStatusExt;
                    status
                        .signal()
                        .map_or("unknown".to_owned(), |s| format!("killed by signal {s}"))
                }
                #[cfg(not(unix))]
                {
                    "unknown".to_owned()
                }
            },
            |c| c.to_string(),
        );
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&format!("\nExit code: {code}"));
        Ok(ToolOutput::text(cap_output(
            &text,
            self.settings.max_output_chars,
        )))
    }
}
