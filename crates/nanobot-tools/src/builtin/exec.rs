//! `exec`: runs a shell command with a scrubbed environment, the command guard (a friendly first
//! line, not the boundary), and the kernel confinement of [`crate::confine`]: bubblewrap
//! namespaces, else Landlock, plus resource limits. No descendant outlives the call.

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

use super::exec_session::ExecSessions;
use super::guard;
use crate::confine::{self, Backend, FsView, kernel_support};
use crate::error::ToolError;
use crate::sandbox::Sandbox;
use crate::schema::TypedTool;
use crate::settings::ExecSettings;
use crate::tool::{ToolContext, ToolOutput};

/// Largest timeout the model may ask for, in seconds.
pub const MAX_TIMEOUT_SECS: u64 = 600;
const READ_CAP: usize = 1024 * 1024;
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The shells `exec` runs commands in (`shell`; bash when omitted, sh when bash is not installed).
pub const SHELLS: [&str; 3] = ["bash", "sh", "zsh"];
/// Bounds of `max_output_chars` (0.3.5's).
const OUTPUT_CHARS_RANGE: std::ops::RangeInclusive<u64> = 1000..=50_000;

/// Arguments of `exec` (0.3.5's parameters; `cmd`, `workdir` and `max_output_tokens` are its aliases).
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct ExecArgs {
    /// The shell command to execute.
    #[serde(default)]
    pub command: Option<String>,
    /// The same as command.
    #[serde(default)]
    pub cmd: Option<String>,
    /// Working directory for the command (default: the workspace).
    #[serde(default)]
    pub working_dir: Option<String>,
    /// The same as working_dir.
    #[serde(default)]
    pub workdir: Option<String>,
    /// Hard timeout in seconds (default 60, max 600).
    #[schemars(range(min = 1, max = 600))]
    pub timeout: Option<u64>,
    /// The shell: bash when omitted, or sh or zsh.
    #[serde(default)]
    #[schemars(extend("nullable" = true))]
    pub shell: Option<String>,
    /// Run bash or zsh as a login shell (default false).
    #[serde(default)]
    #[schemars(extend("nullable" = true, "default" = false))]
    pub login: Option<bool>,
    /// Most characters of output returned (default 10000; 1000 to 50000).
    #[serde(default)]
    #[schemars(range(min = 1000, max = 50000), extend("nullable" = true))]
    pub max_output_chars: Option<u64>,
    /// The same as max_output_chars.
    #[serde(default)]
    #[schemars(range(min = 1000, max = 50000), extend("nullable" = true))]
    pub max_output_tokens: Option<u64>,
    /// Return after this many milliseconds if the command is still running (it goes on as an exec session:
    /// see exec_session); omit to wait for it to exit.
    #[serde(default)]
    #[schemars(range(min = 0, max = 30000), extend("nullable" = true))]
    pub yield_time_ms: Option<u64>,
}

/// A call resolved and checked, ready to run.
#[derive(Debug)]
pub(crate) struct Prepared {
    command: String,
    shell: Vec<std::ffi::OsString>,
    cwd: PathBuf,
    timeout: Duration,
    max_output: usize,
    /// The folders the call's context hides ([`crate::HiddenPaths`]).
    hidden: Option<crate::HiddenPaths>,
}

/// A command started in the sandbox: the child, its process group (killed when this is dropped), what keeps a
/// bubblewrap sandbox's parent alive, and the pids cgroup of the call (removed when dropped).
pub(crate) struct Spawned {
    pub(crate) child: tokio::process::Child,
    pub(crate) group: GroupKill,
    pub(crate) keep_parent: confine::SpawnerThread,
    pub(crate) _cgroup: Option<confine::PidsCgroup>,
    /// The call's egress proxy (`tools.network.allowedDomains` under bubblewrap), which keeps what it refused.
    pub(crate) egress: Option<crate::egress::EgressProxy>,
}

/// The command an `exec` call's raw arguments run, resolved as the tool resolves it (`command`, else its alias
/// `cmd`), for anything that judges a call before it runs (the approval gate).
pub fn command_of(arguments: &serde_json::Value) -> &str {
    let arg = |k: &str| arguments.get(k).and_then(serde_json::Value::as_str);
    arg("command").or_else(|| arg("cmd")).unwrap_or("")
}

/// The shell program (and its flags before `-c`) for `shell`/`login`: a name from [`SHELLS`] found in `/bin` or
/// `/usr/bin`. Omitted, bash, or sh where bash is not installed.
fn shell_argv(shell: Option<&str>, login: bool) -> Result<Vec<std::ffi::OsString>, String> {
    let find = |name: &str| {
        ["/bin", "/usr/bin"]
            .iter()
            .map(|d| Path::new(d).join(name))
            .find(|p| p.is_file())
    };
    let (name, path) = match shell.map(str::trim).filter(|s| !s.is_empty()) {
        Some(name) if SHELLS.contains(&name) => match find(name) {
            Some(p) => (name, p),
            None => return Err(format!("shell {name} is not installed on this machine")),
        },
        Some(other) => return Err(format!("shell must be one of bash, sh or zsh, not {other:?}")),
        None => match find("bash") {
            Some(p) => ("bash", p),
            None => ("sh", find("sh").unwrap_or_else(|| PathBuf::from("/bin/sh"))),
        },
    };
    let mut argv = vec![path.into_os_string()];
    if login && name != "sh" {
        argv.push("-l".into());
    }
    argv.push("-c".into());
    Ok(argv)
}

/// `exec`: exclusive (never runs beside another tool).
#[derive(Debug, Clone)]
pub struct ExecTool {
    settings: Arc<ExecSettings>,
    sandbox: Arc<Sandbox>,
    allow: Vec<Regex>,
    deny: Vec<Regex>,
    /// The private `/tmp` of this tool's commands (created on first use, removed with the tool).
    tmp: Arc<OnceLock<Result<confine::PrivateDir, String>>>,
    /// Commands left running by calls with `yield_time_ms`.
    sessions: ExecSessions,
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
            tmp: Arc::new(OnceLock::new()),
            sessions: ExecSessions::new(),
        })
    }

    /// The commands this tool left running (for `exec_session` and `list_exec_sessions`).
    pub fn sessions(&self) -> ExecSessions {
        self.sessions.clone()
    }

    /// Starts `p` as an exec session of the calling conversation and waits up to `yield_ms` for it.
    async fn start_session(
        &self,
        p: Prepared,
        yield_ms: u64,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let spawned = self.spawn(&p, true).await?;
        let id = self
            .sessions
            .start(spawned, &ctx.session_key, &p.command, p.cwd.clone(), p.timeout)
            .await?;
        Ok(self
            .sessions
            .first_poll(&id, &ctx.session_key, yield_ms, p.max_output)
            .await)
    }

    /// What `exec` will enforce on this machine with these settings (for `doctor` and the
    /// start-up warning).
    pub fn confinement(&self) -> ConfinementReport {
        confinement_report(&self.settings, self.sandbox.workspace_real())
    }

    /// Logs a warning when confinement is degraded on this machine, at once: the first command of a process does
    /// this itself, so only a long-running program that wants to warn at start calls it (on a thread of its own:
    /// the probe runs bubblewrap). One warning per process.
    pub fn warn_if_degraded(&self) {
        warn_if_degraded(&self.settings, self.sandbox.workspace_real());
    }

    fn backend(&self) -> Result<Backend, String> {
        confine::choose_backend(self.settings.sandbox)
    }

    fn private_tmp(&self) -> Result<PathBuf, ToolError> {
        let base = self
            .settings
            .parent_env
            .get("TMPDIR")
            .filter(|t| Path::new(t).is_dir())
            .map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
        let made = self.tmp.get_or_init(|| {
            confine::PrivateDir::new_in(&base, "nanobot-exec-")
                .map_err(|e| format!("cannot create the private temp dir in {}: {e}", base.display()))
        });
        match made {
            Ok(d) => Ok(crate::sandbox::real_path(d.path()).unwrap_or_else(|_| d.path().to_path_buf())),
            Err(e) => Err(ToolError::Failed(e.clone())),
        }
    }

    /// What a call sees; `call_hidden` are the folders its context hides ([`crate::HiddenPaths`]).
    fn view(&self, private_tmp: PathBuf, call_hidden: Option<&crate::HiddenPaths>) -> FsView {
        let mut hidden = hidden_paths(&self.settings, self.sandbox.workspace_real());
        let mut read_write = real_existing(&self.settings.extra_writable);
        if let Some(h) = call_hidden {
            hidden.extend(real_existing(&h.hidden));
            read_write.extend(real_existing(&h.shown));
        }
        FsView {
            workspace: self.sandbox.workspace_real().to_path_buf(),
            private_tmp,
            shared_tmp: false,
            restrict: self.settings.restrict_to_workspace,
            read_only: real_existing(&self.settings.extra_readable),
            read_write,
            hidden,
            network: self.settings.network,
        }
    }

    /// Resolves and checks a call: the command, shell, working directory, timeout and output bound; `Ok(Err(_))`
    /// is the safety guard's refusal (an answer, not an error).
    fn prepare(&self, args: ExecArgs) -> Result<Result<Prepared, ToolOutput>, ToolError> {
        // The same resolution as `command_of` (what the approval gate judged).
        let command = match args.command.or(args.cmd).filter(|c| !c.trim().is_empty()) {
            Some(c) => c,
            None => return Err(ToolError::InvalidArguments("missing required command".into())),
        };
        let shell = shell_argv(args.shell.as_deref(), args.login.unwrap_or(false))
            .map_err(ToolError::InvalidArguments)?;
        let max_output = match args.max_output_chars.or(args.max_output_tokens) {
            Some(n) if !OUTPUT_CHARS_RANGE.contains(&n) => {
                return Err(ToolError::InvalidArguments(format!(
                    "max_output_chars must be between {} and {}",
                    OUTPUT_CHARS_RANGE.start(),
                    OUTPUT_CHARS_RANGE.end()
                )));
            }
            Some(n) => usize::try_from(n).unwrap_or(self.settings.max_output_chars),
            None => self.settings.max_output_chars,
        };
        let working_dir = args.working_dir.or(args.workdir);
        let cwd = match working_dir.as_deref().filter(|s| !s.trim().is_empty()) {
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
        if let Err(reason) = self.check_command(&command, &cwd) {
            return Ok(Err(ToolOutput::error(format!(
                "Error: Command blocked by safety guard ({reason})"
            ))));
        }
        let timeout = Duration::from_secs(
            args.timeout
                .unwrap_or(self.settings.timeout.as_secs().max(1))
                .clamp(1, MAX_TIMEOUT_SECS),
        );
        Ok(Ok(Prepared {
            command,
            shell,
            cwd,
            timeout,
            max_output,
            hidden: None,
        }))
    }

    /// Starts a prepared command in the sandbox (stdin piped when `stdin`, else /dev/null), in a process group of
    /// its own.
    pub(crate) async fn spawn(&self, p: &Prepared, stdin: bool) -> Result<Spawned, ToolError> {
        let (command, cwd) = (&p.command, &p.cwd);
        let shell = p.shell.clone();
        let backend = self.backend().map_err(ToolError::Failed)?;
        self.warn_if_degraded();
        let k = kernel_support();
        let mut view = self.view(self.private_tmp()?, p.hidden.as_ref());
        // Under the allow-list: no network of its own; under bubblewrap a proxy of this call is the one way out,
        // its socket in the private temporary directory (`/tmp` inside).
        let egress = match &self.settings.egress {
            Some(e) => {
                static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
                let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let name = format!("egress-{}-{n}.sock", std::process::id());
                let socket = view.private_tmp.join(&name);
                e.route(&backend, &mut view, &socket, &Path::new("/tmp").join(name))
                    .map_err(|err| ToolError::Failed(format!("cannot start the egress proxy: {err}")))?
            }
            None => None,
        };
        if backend == Backend::None {
            static WARNED: OnceLock<()> = OnceLock::new();
            WARNED.get_or_init(|| {
                tracing::warn!("exec runs without kernel confinement (see `nanobot doctor`)");
            });
        }
        // Bubblewrap mounts the private temporary directory at /tmp; elsewhere it is given as it is.
        let tmpdir = match &backend {
            Backend::Bwrap(_) => PathBuf::from("/tmp"),
            _ => view.private_tmp.clone(),
        };
        let (mut argv, landlock) =
            confine::launcher(&backend, &view, cwd, egress.as_ref(), &self.settings.limits);
        argv.extend(shell);
        argv.push(command.clone().into());
        // As root RLIMIT_NPROC does not bind: count the call's processes in a cgroup of its own instead, joined
        // before bubblewrap starts (Landlock would refuse the write to cgroup.procs). Removed when the call ends.
        let cgroup = match (&backend, self.settings.limits.max_processes) {
            (Backend::Landlock, _) | (_, 0) => None,
            _ if !k.root => None,
            (_, max) => confine::PidsCgroup::create(max).inspect(|cg| {
                argv.splice(0..0, cg.join_prefix());
            }),
        };
        let mut env = self.child_env(&tmpdir);
        if let Some(route) = &egress {
            // A granted credential is never handed over, whatever variable would carry it: its placeholder is.
            env.retain(|_, v| !route.reveals(v));
            env.extend(route.env());
        }
        let cwd = cwd.clone();
        // A thread of its own: Landlock restricts the calling thread and what it spawns, so it must never be a
        // pooled runtime thread; and bwrap's --die-with-parent fires when that thread ends, so it lives until
        // this call is over (`Spawned::keep_parent`).
        let (child, keep_parent) = confine::spawn_on_own_thread("nanobot-exec-spawn", landlock, move || {
            let mut cmd = tokio::process::Command::new(&argv[0]);
            cmd.args(&argv[1..])
                .current_dir(&cwd)
                .env_clear()
                .envs(&env)
                .stdin(if stdin { Stdio::piped() } else { Stdio::null() })
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true);
            #[cfg(unix)]
            cmd.process_group(0);
            cmd.spawn()
        })
        .await
        .map_err(|e| ToolError::Failed(format!("cannot run command: {e}")))?;
        let group = GroupKill(child.id().map(|p| p as i32));
        Ok(Spawned {
            child,
            group,
            keep_parent,
            _cgroup: cgroup,
            egress: egress.map(crate::egress::Route::into_proxy),
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

    fn child_env(&self, tmpdir: &Path) -> BTreeMap<String, String> {
        let parent = &self.settings.parent_env;
        let mut env = BTreeMap::new();
        let workspace = self.sandbox.workspace_real().display().to_string();
        // Under the restriction the real home is not there: the workspace is home.
        let home = match parent.get("HOME") {
            Some(h) if !self.settings.restrict_to_workspace => h.to_owned(),
            _ => workspace,
        };
        env.insert("TMPDIR".to_owned(), tmpdir.display().to_string());
        env.insert("HOME".to_owned(), home);
        env.insert(
            "LANG".to_owned(),
            parent.get("LANG").unwrap_or("C.UTF-8").to_owned(),
        );
        env.insert("TERM".to_owned(), parent.get("TERM").unwrap_or("dumb").to_owned());
        let mut path = parent.get("PATH").unwrap_or(DEFAULT_PATH).to_owned();
        if !self.settings.path_prepend.is_empty() {
            path = format!("{}:{path}", self.settings.path_prepend);
        }
        if !self.settings.path_append.is_empty() {
            path = format!("{path}:{}", self.settings.path_append);
        }
        env.insert("PATH".to_owned(), path);
        for key in &self.settings.allowed_env_keys {
            if let Some(v) = parent.get(key) {
                env.insert(key.clone(), v.to_owned());
            }
        }
        env
    }
}

fn real_existing(paths: &[PathBuf]) -> Vec<PathBuf> {
    paths
        .iter()
        .filter(|p| p.is_absolute())
        .filter_map(|p| std::fs::canonicalize(p).ok())
        .collect()
}

/// The data directory and `hidePaths` (real, existing), minus any that is the workspace itself.
fn hidden_paths(settings: &ExecSettings, workspace: &Path) -> Vec<PathBuf> {
    let mut out = real_existing(&settings.data_dir.iter().cloned().collect::<Vec<_>>());
    out.extend(real_existing(&settings.hide_paths));
    out.retain(|h| h.as_path() != workspace);
    out.sort();
    out.dedup();
    out
}

/// What `exec` enforces on this machine, as lines for `nanobot doctor`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfinementReport {
    /// The backend calls will use.
    pub backend: Backend,
    /// Facts, one per line (`Landlock ABI 7`, `bubblewrap: /usr/bin/bwrap`, …).
    pub facts: Vec<String>,
    /// What is weaker than the documented default, one per line (empty when nothing is).
    pub warnings: Vec<String>,
}

/// Logs (once per process) what confinement lacks for `settings` with `workspace` on this machine.
pub fn warn_if_degraded(settings: &ExecSettings, workspace: &Path) {
    static ONCE: OnceLock<()> = OnceLock::new();
    if ONCE.set(()).is_err() {
        return;
    }
    for w in confinement_report(settings, workspace).warnings {
        tracing::warn!("exec confinement degraded: {w}");
    }
}

/// Builds the [`ConfinementReport`] for `settings` with `workspace`.
pub fn confinement_report(settings: &ExecSettings, workspace: &Path) -> ConfinementReport {
    let k = kernel_support();
    let mut facts = Vec::new();
    let mut warnings = Vec::new();
    match &k.landlock {
        Ok(abi) => facts.push(format!("Landlock ABI {abi} enforced")),
        Err(e) => facts.push(format!("Landlock unavailable: {e}")),
    }
    match &k.bwrap {
        Ok(p) => facts.push(format!(
            "user namespaces available; bubblewrap {} works",
            p.display()
        )),
        Err(e) => facts.push(format!("no namespaces: {e}")),
    }
    let tool = ExecTool {
        settings: Arc::new(settings.clone()),
        sandbox: Arc::new(Sandbox::new(workspace, settings.restrict_to_workspace)),
        allow: Vec::new(),
        deny: Vec::new(),
        tmp: Arc::new(OnceLock::new()),
        sessions: ExecSessions::new(),
    };
    let backend = match tool.backend() {
        Ok(b) => b,
        Err(e) => {
            warnings.push(format!("every exec call will fail: {e}"));
            Backend::None
        }
    };
    facts.push(format!("exec confinement: {}", backend.name()));
    let hidden = hidden_paths(settings, workspace);
    let shown: Vec<String> = hidden.iter().map(|p| p.display().to_string()).collect();
    match &backend {
        Backend::Bwrap(_) => {
            facts.push(format!("hidden from exec (empty tmpfs): {}", shown.join(", ")));
            facts.push(
                "every descendant ends with the call (PID namespace); nanobot is invisible to it".into(),
            );
        }
        Backend::Landlock => {
            facts.push(format!(
                "hidden from exec (Landlock, not granted): {}",
                shown.join(", ")
            ));
            warnings.push(
                "no PID namespace: children started with setsid can outlive an exec call; \
                 install bubblewrap and allow unprivileged user namespaces"
                    .into(),
            );
            if !matches!(k.landlock, Ok(abi) if abi >= 6) {
                warnings.push("Landlock ABI < 6: exec children can signal nanobot".into());
            }
        }
        Backend::None => warnings.push(
            "exec runs WITHOUT kernel confinement: it can read nanobot's data directory \
             (API keys, other chats' sessions) and write anywhere the user can; only the \
             command guard (a word list) stands in the way"
                .into(),
        ),
    }
    if settings
        .data_dir
        .as_ref()
        .is_some_and(|d| std::fs::canonicalize(d).is_ok_and(|d| d == workspace))
    {
        warnings.push("the workspace is the data directory itself, so it cannot be hidden from exec".into());
    }
    facts.push(format!(
        "reads: {}; writes: workspace, private /tmp{}",
        if settings.restrict_to_workspace {
            "workspace, system directories, sandboxRoBinds"
        } else {
            "everything not hidden"
        },
        if settings.extra_writable.is_empty() {
            ""
        } else {
            ", sandboxRwBinds"
        }
    ));
    match &settings.egress {
        None => facts.push(format!(
            "network: {}",
            match (settings.network, &backend) {
                (true, _) => "allowed",
                (false, Backend::Bwrap(_)) => "cut (network namespace)",
                (false, Backend::Landlock) => "TCP cut (Landlock); UDP still allowed",
                (false, Backend::None) => "NOT cut (no confinement available)",
            }
        )),
        Some(e) => match e.describe(&backend) {
            Ok(route) => facts.push(format!(
                "network: {route} (tools.network.allowedDomains; no DNS, UDP or direct connection)"
            )),
            Err(why) => warnings.push(why),
        },
    }
    let l = &settings.limits;
    match &k.prlimit {
        Some(_) => {
            facts.push(format!(
                "limits: {} processes, {} s CPU, {} MiB memory, {} MiB files (0 = none), {} chars of output",
                l.max_processes, l.cpu_seconds, l.memory_mb, l.file_size_mb, settings.max_output_chars
            ));
            if k.root && !matches!(backend, Backend::Landlock) && confine::pids_cgroup_parent().is_some() {
                facts.push(
                    "running as root: the process count is enforced by a pids cgroup per call (RLIMIT_NPROC \
                     does not bind root)"
                        .into(),
                );
            } else if k.root {
                warnings.push(
                    "running as root: the process-count limit does not bind root and no writable pids cgroup \
                     was found (the PID namespace and the timeout still end every process)"
                        .into(),
                );
            } else if !matches!(backend, Backend::Bwrap(_)) {
                warnings.push("no user namespace: the process-count limit is not applied".into());
            }
        }
        None => warnings.push("prlimit (util-linux) not found: no resource limits on exec".into()),
    }
    ConfinementReport {
        backend,
        facts,
        warnings,
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

/// Whether Landlock is enforced here (probed once, see [`confine::kernel_support`]).
pub fn landlock_support() -> LandlockSupport {
    match &kernel_support().landlock {
        Ok(_) => LandlockSupport::Enforced,
        Err(e) => LandlockSupport::Unavailable(e.clone()),
    }
}

/// Kills the child's process group when dropped (timeout, cancellation) unless disarmed.
pub(crate) struct GroupKill(Option<i32>);

impl GroupKill {
    /// Nothing to kill.
    pub(crate) fn none() -> Self {
        Self(None)
    }

    /// Kills the group now, once: the number is forgotten, so nothing signals it again after the kernel may have
    /// given it to another process. Call it right after reaping the leader, not later.
    pub(crate) fn kill(&mut self) {
        #[cfg(unix)]
        if let Some(pid) = self.0.take() {
            let _ =
                nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        }
    }
}

impl GroupKill {
    /// Kills the group and, when it is bubblewrap's, waits (at most 10 s) until the sandbox's PID
    /// namespace is gone: the kill reaches the namespace's init only through bubblewrap's
    /// parent-death signal, asynchronously, and the kernel ends the namespace's other processes
    /// before that init's exit is visible.
    pub(crate) async fn kill_and_wait_namespace(&mut self) {
        #[cfg(target_os = "linux")]
        let inits: Vec<rustix::fd::OwnedFd> = self
            .0
            .map(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
                    .unwrap_or_default()
                    .split_whitespace()
                    .filter_map(|c| c.parse::<i32>().ok())
                    .filter_map(rustix::process::Pid::from_raw)
                    .filter_map(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok())
                    .collect()
            })
            .unwrap_or_default();
        self.kill();
        #[cfg(target_os = "linux")]
        if !inits.is_empty() {
            let _ = tokio::task::spawn_blocking(move || {
                let deadline = std::time::Instant::now() + Duration::from_secs(10);
                for fd in &inits {
                    let left = deadline.saturating_duration_since(std::time::Instant::now());
                    let limit = rustix::event::Timespec {
                        tv_sec: i64::try_from(left.as_secs()).unwrap_or(10),
                        tv_nsec: i64::from(left.subsec_nanos()),
                    };
                    let mut p = [rustix::event::PollFd::new(fd, rustix::event::PollFlags::IN)];
                    let _ = rustix::event::poll(&mut p, Some(&limit));
                }
            })
            .await;
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

    fn effects(&self, args: &serde_json::Value) -> crate::Effects {
        crate::Effects::command(command_of(args))
    }

    fn description(&self) -> &str {
        "Execute a shell command (bash unless shell says otherwise) and return its output and exit code. Prefer \
         read_file/write_file/edit_file over cat/echo/sed, and grep/glob over shell find/grep. Use -y or --yes \
         flags to avoid interactive prompts. Output is cut at max_output_chars (default 10000); timeout defaults \
         to 60s."
    }

    fn exclusive(&self) -> bool {
        true
    }

    async fn stop_session(&self, session_key: &str) -> usize {
        self.sessions.stop_owner(session_key).await
    }

    async fn shutdown(&self) {
        self.sessions.close_all().await;
    }

    async fn call(&self, args: ExecArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let yield_ms = args.yield_time_ms;
        let mut prepared = match self.prepare(args)? {
            Ok(p) => p,
            Err(blocked) => return Ok(blocked),
        };
        prepared.hidden = ctx.extensions.get::<crate::HiddenPaths>().cloned();
        if let Some(ms) = yield_ms {
            return self.start_session(prepared, ms, ctx).await;
        }
        let Spawned {
            mut child,
            mut group,
            keep_parent,
            _cgroup,
            egress,
        } = self.spawn(&prepared, false).await?;
        let (timeout, max_output) = (prepared.timeout, prepared.max_output);
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
                group.kill_and_wait_namespace().await;
                let _ = child.wait().await;
                return Err(ToolError::Cancelled);
            }
        };
        let status = match status {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(ToolError::Failed(format!("waiting for command: {e}"))),
            Err(_) => {
                group.kill_and_wait_namespace().await;
                let _ = child.wait().await;
                out_task.abort();
                err_task.abort();
                return Ok(ToolOutput::error(format!(
                    "Error: Command timed out after {} seconds",
                    timeout.as_secs()
                )));
            }
        };
        // The shell is done: end what it left in its process group (inside bubblewrap the PID
        // namespace has already ended every descendant). Children that left the group (setsid)
        // may still hold the pipes open without namespaces, so collect what is there without
        // waiting on them for long.
        group.kill();
        drop(keep_parent);
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
        let mut text = cap_output(&text, max_output);
        // What the proxy refused, after the cap so that it is always read.
        for note in egress.iter().flat_map(crate::egress::EgressProxy::notes) {
            text.push('\n');
            text.push_str(&note);
        }
        Ok(ToolOutput::text(text))
    }
}
