//! Kernel confinement of `exec` children.
//!
//! Three backends, chosen once per machine (see `docs/security.md`):
//!
//! - **bubblewrap** (`bwrap`, preferred): an unprivileged user, mount, PID, IPC and UTS namespace. The
//!   data directory (and `tools.exec.hidePaths`) is covered by an empty tmpfs, the root is read-only
//!   except the workspace, a private `/tmp` and `sandboxRwBinds`; with `restrictToWorkspace` only the
//!   system directories a program needs are mounted at all. The PID namespace ends with the command,
//!   so no descendant survives the call, and nanobot is not visible (it cannot be signalled).
//! - **Landlock** (fallback when user namespaces or `bwrap` are missing): the same read and write sets
//!   as rules on the calling thread; the data directory is hidden by granting every sibling along its
//!   path instead of `/`; ABI 6 scopes stop signals to nanobot. No PID namespace: children that leave
//!   the process group can outlive the call.
//! - **none**: only the guard. Reported loudly.
//!
//! Resource limits are set by `prlimit(1)` (util-linux) as the first program inside the sandbox.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Directories searched for `bwrap` and `prlimit` (the library does not read `PATH`).
const TOOL_DIRS: &[&str] = &["/usr/bin", "/bin", "/usr/local/bin", "/usr/sbin", "/sbin"];

/// System directories a program needs, mounted read-only under `restrictToWorkspace`.
pub const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt",
];

/// The parts of `/etc` a program needs (loader cache, certificates, users, name service, time).
pub const SYSTEM_ETC: &[&str] = &[
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/pki",
    "/etc/crypto-policies",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/host.conf",
    "/etc/gai.conf",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/alternatives",
    "/etc/mime.types",
    "/etc/protocols",
    "/etc/services",
    "/etc/os-release",
    "/etc/locale.alias",
    "/etc/inputrc",
];

/// Device files a program may write (never `/dev` wholesale: root could write to disks).
const DEV_WRITABLE: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
    "/dev/shm",
];

/// Resource limits of one `exec` call (`tools.exec.limits`). `0` means no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecLimits {
    /// `maxProcesses`: processes of the sandbox (`RLIMIT_NPROC`; counted in the sandbox's own user
    /// namespace, so only with bubblewrap; not enforced for root).
    pub max_processes: u64,
    /// `maxCpuSeconds`: CPU seconds per process (`RLIMIT_CPU`).
    pub cpu_seconds: u64,
    /// `maxMemoryMb`: address space per process in MiB (`RLIMIT_AS`).
    pub memory_mb: u64,
    /// `maxFileSizeMb`: largest file a process may write, in MiB (`RLIMIT_FSIZE`).
    pub file_size_mb: u64,
}

impl Default for ExecLimits {
    fn default() -> Self {
        Self {
            max_processes: 256,
            cpu_seconds: 600,
            memory_mb: 8192,
            file_size_mb: 1024,
        }
    }
}

/// What this machine offers for confining `exec` (probed once).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelSupport {
    /// The kernel's Landlock ABI when a ruleset is enforced; `Err` says why not.
    pub landlock: Result<i32, String>,
    /// `bwrap` when it can create an unprivileged sandbox here; `Err` says why not.
    pub bwrap: Result<PathBuf, String>,
    /// Whether this `bwrap` knows `--disable-userns` (0.8+).
    pub bwrap_disable_userns: bool,
    /// `prlimit(1)`, which sets the resource limits; `None` when missing.
    pub prlimit: Option<PathBuf>,
    /// Whether nanobot runs as root (`RLIMIT_NPROC` does not bind root).
    pub root: bool,
}

/// Which confinement an `exec` call gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// bubblewrap at this path.
    Bwrap(PathBuf),
    /// Landlock on the spawning thread.
    Landlock,
    /// Nothing but the guard.
    None,
}

impl Backend {
    /// A short name for reports.
    pub fn name(&self) -> &'static str {
        match self {
            Backend::Bwrap(_) => "bubblewrap (user+mount+pid namespaces)",
            Backend::Landlock => "Landlock only",
            Backend::None => "none",
        }
    }
}

/// The backend `setting` gives on this machine; `Err` (naming `tools.exec.sandbox` and bubblewrap's complaint)
/// when the setting requires bubblewrap and it cannot run here. `landlock` falls back to none when the kernel lacks Landlock, `auto` to
/// Landlock and then none.
pub fn choose_backend(setting: crate::ExecSandbox) -> Result<Backend, String> {
    use crate::ExecSandbox;
    let k = kernel_support();
    Ok(match setting {
        ExecSandbox::None => Backend::None,
        ExecSandbox::Bwrap => match &k.bwrap {
            Ok(p) => Backend::Bwrap(p.clone()),
            Err(e) => return Err(format!("tools.exec.sandbox is \"bwrap\" but {e}")),
        },
        ExecSandbox::Landlock if k.landlock.is_ok() => Backend::Landlock,
        ExecSandbox::Landlock => Backend::None,
        ExecSandbox::Auto => match (&k.bwrap, &k.landlock) {
            (Ok(p), _) => Backend::Bwrap(p.clone()),
            (Err(_), Ok(_)) => Backend::Landlock,
            _ => Backend::None,
        },
    })
}

/// What a Landlock ruleset grants a spawning thread: read beneath `read`, write beneath `write`, and TCP only
/// when `network`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LandlockRules {
    /// Readable roots.
    pub read: Vec<PathBuf>,
    /// Writable roots.
    pub write: Vec<PathBuf>,
    /// Whether TCP stays open.
    pub network: bool,
}

/// The thread that started a confined program, kept alive while the program must live: Landlock restricted
/// that thread (never a pooled one), and bubblewrap's `--die-with-parent` ends the sandbox when it ends. Dropping
/// this ends the thread.
#[derive(Debug)]
pub struct SpawnerThread(#[allow(dead_code, reason = "held only to be dropped")] std::sync::mpsc::Sender<()>);

/// Runs `spawn` on a new thread named `name` inside the current tokio runtime, after restricting the thread with
/// `landlock` when given, and returns what it made with the thread's keep-alive handle. The thread ends at once
/// when `spawn` fails, else when the handle is dropped.
///
/// # Errors
/// The thread cannot start, Landlock cannot be enforced, or `spawn` fails.
pub async fn spawn_on_own_thread<T, F>(
    name: &str,
    landlock: Option<LandlockRules>,
    spawn: F,
) -> std::io::Result<(T, SpawnerThread)>
where
    T: Send + 'static,
    F: FnOnce() -> std::io::Result<T> + Send + 'static,
{
    let handle = tokio::runtime::Handle::current();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let (keep, done) = std::sync::mpsc::channel::<()>();
    std::thread::Builder::new().name(name.to_owned()).spawn(move || {
        let _guard = handle.enter();
        #[cfg(target_os = "linux")]
        if let Some(rules) = &landlock
            && let Err(e) = landlock_restrict(&rules.read, &rules.write, rules.network)
        {
            let _ = tx.send(Err(std::io::Error::other(format!("landlock: {e}"))));
            return;
        }
        #[cfg(not(target_os = "linux"))]
        if landlock.is_some() {
            let _ = tx.send(Err(std::io::Error::other("landlock: not Linux")));
            return;
        }
        let made = spawn();
        let ok = made.is_ok();
        let _ = tx.send(made);
        if ok {
            // Returns when the handle is dropped.
            let _ = done.recv();
        }
    })?;
    let made = rx.await.map_err(|_| {
        std::io::Error::other(format!("the {name} thread ended before starting the program"))
    })??;
    Ok((made, SpawnerThread(keep)))
}

/// The programs a confined start runs before its command, and the Landlock rules its spawning thread takes:
/// bubblewrap with `view` (working directory `cwd`), then the egress bridge when there is a `route`, then
/// `prlimit` with `limits` (the process count only where it binds, inside bubblewrap's user namespace). Landlock
/// gets the rules instead of bubblewrap; `Backend::None` only the limits.
pub fn launcher(
    backend: &Backend,
    view: &FsView,
    cwd: &Path,
    route: Option<&crate::egress::Route>,
    limits: &ExecLimits,
) -> (Vec<OsString>, Option<LandlockRules>) {
    let k = kernel_support();
    let mut argv: Vec<OsString> = Vec::new();
    let landlock = match backend {
        Backend::Bwrap(bwrap) => {
            argv.push(bwrap.clone().into_os_string());
            argv.extend(view.bwrap_args(cwd, k.bwrap_disable_userns));
            argv.push("--".into());
            argv.extend(route.map(crate::egress::Route::argv).unwrap_or_default());
            None
        }
        Backend::Landlock => Some(view.landlock_rules()),
        Backend::None => None,
    };
    if let Some(prlimit) = &k.prlimit {
        let nproc = matches!(backend, Backend::Bwrap(_));
        argv.extend(prlimit_args(prlimit, limits, nproc));
    }
    (argv, landlock)
}

/// A private directory of one confined program (mode 0700, under `base`), removed with what it holds when dropped:
/// the temporary directory `exec` calls share, a server's own directory when it has no lasting one.
#[derive(Debug)]
pub struct PrivateDir(tempfile::TempDir);

impl PrivateDir {
    /// A new directory under `base` named `<prefix><random>`.
    ///
    /// # Errors
    /// The directory cannot be made.
    pub fn new_in(base: &Path, prefix: &str) -> std::io::Result<Self> {
        tempfile::Builder::new().prefix(prefix).tempdir_in(base).map(Self)
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        self.0.path()
    }
}

/// Probes the kernel and the helper programs once and caches the answer.
pub fn kernel_support() -> &'static KernelSupport {
    static PROBE: OnceLock<KernelSupport> = OnceLock::new();
    PROBE.get_or_init(|| {
        tracing::debug!("probing the kernel and bubblewrap for exec's confinement");
        let landlock = probe_landlock();
        let (bwrap, bwrap_disable_userns) = match find_tool("bwrap") {
            None => (Err("bwrap (bubblewrap) is not installed".to_owned()), false),
            Some(path) => match probe_bwrap(&path, true) {
                Ok(()) => (Ok(path), true),
                Err(_) => match probe_bwrap(&path, false) {
                    Ok(()) => (Ok(path), false),
                    Err(e) => (Err(e), false),
                },
            },
        };
        KernelSupport {
            landlock,
            bwrap,
            bwrap_disable_userns,
            prlimit: find_tool("prlimit"),
            root: nix::unistd::geteuid().is_root(),
        }
    })
}

fn find_tool(name: &str) -> Option<PathBuf> {
    TOOL_DIRS
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

fn probe_landlock() -> Result<i32, String> {
    #[cfg(target_os = "linux")]
    {
        let handle = std::thread::spawn(|| {
            use landlock::{ABI, Access, AccessFs, LandlockStatus, Ruleset, RulesetAttr, RulesetStatus};
            let status = Ruleset::default()
                .handle_access(AccessFs::from_all(ABI::V1))
                .and_then(|r| r.create())
                .and_then(|r| r.restrict_self())
                .map_err(|e| e.to_string())?;
            if status.ruleset == RulesetStatus::NotEnforced {
                return Err("the kernel does not enforce Landlock (disabled or not built in)".to_owned());
            }
            Ok(match status.landlock {
                LandlockStatus::Available {
                    effective_abi,
                    kernel_abi,
                } => kernel_abi.unwrap_or(effective_abi as i32),
                _ => 1,
            })
        });
        handle
            .join()
            .unwrap_or_else(|_| Err("Landlock probe panicked".to_owned()))
    }
    #[cfg(not(target_os = "linux"))]
    {
        Err("not Linux".to_owned())
    }
}

/// Runs `bwrap … true` with the namespaces `exec` uses; `Err` carries bwrap's complaint.
fn probe_bwrap(bwrap: &Path, disable_userns: bool) -> Result<(), String> {
    let mut cmd = Command::new(bwrap);
    cmd.args(namespace_args(true, disable_userns))
        .args([
            "--ro-bind",
            "/",
            "/",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--",
            "true",
        ])
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", bwrap.display()))?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return Ok(()),
            Ok(Some(_)) => {
                let mut err = String::new();
                if let Some(mut s) = child.stderr.take() {
                    use std::io::Read;
                    let _ = s.read_to_string(&mut err);
                }
                return Err(format!(
                    "bwrap cannot create an unprivileged sandbox here: {}",
                    err.trim()
                ));
            }
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err("bwrap probe did not finish in 10 s".to_owned());
            }
            Err(e) => return Err(format!("waiting for bwrap: {e}")),
        }
    }
}

fn namespace_args(network: bool, disable_userns: bool) -> Vec<&'static str> {
    let mut a = vec![
        "--unshare-user",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
    ];
    if !network {
        a.push("--unshare-net");
    }
    if disable_userns {
        a.push("--disable-userns");
    }
    a
}

/// The file-system view of one call: what is visible, what is writable, what is hidden.
#[derive(Debug, Clone)]
pub struct FsView {
    /// The workspace (real path): readable and writable.
    pub workspace: PathBuf,
    /// The private temporary directory mounted at `/tmp` and `/var/tmp` (bwrap, unless `shared_tmp`) or given as
    /// `TMPDIR` (Landlock).
    pub private_tmp: PathBuf,
    /// `/tmp` and `/var/tmp` stay as they are (readable, not writable) and the private temporary directory is
    /// only `TMPDIR`: for a long-running program that may be installed under `/tmp`.
    pub shared_tmp: bool,
    /// `restrictToWorkspace`: only system directories, the workspace and the lists below exist.
    pub restrict: bool,
    /// `sandboxRoBinds`: extra readable paths.
    pub read_only: Vec<PathBuf>,
    /// `sandboxRwBinds`: extra writable paths.
    pub read_write: Vec<PathBuf>,
    /// Hidden in every mode: nanobot's data directory and `hidePaths`.
    pub hidden: Vec<PathBuf>,
    /// Whether the network stays reachable.
    pub network: bool,
}

fn inside_any(p: &Path, hidden: &[PathBuf]) -> bool {
    hidden.iter().any(|h| p.starts_with(h))
}

fn strictly_inside_any(p: &Path, hidden: &[PathBuf]) -> bool {
    hidden.iter().any(|h| p.starts_with(h) && p != h)
}

impl FsView {
    /// The bwrap arguments (before `--`) for this view with `cwd` as the working directory.
    pub fn bwrap_args(&self, cwd: &Path, disable_userns: bool) -> Vec<OsString> {
        let mut a: Vec<OsString> = namespace_args(self.network, disable_userns)
            .into_iter()
            .map(OsString::from)
            .collect();
        let mut push = |args: &[&std::ffi::OsStr]| a.extend(args.iter().map(|s| s.to_os_string()));
        if self.restrict {
            for d in SYSTEM_DIRS {
                let p = Path::new(d);
                match std::fs::read_link(p) {
                    Ok(target) => push(&["--symlink".as_ref(), target.as_os_str(), p.as_os_str()]),
                    Err(_) => push(&["--ro-bind-try".as_ref(), p.as_os_str(), p.as_os_str()]),
                }
            }
            for f in SYSTEM_ETC {
                push(&["--ro-bind-try".as_ref(), f.as_ref(), f.as_ref()]);
            }
        } else {
            push(&["--ro-bind".as_ref(), "/".as_ref(), "/".as_ref()]);
        }
        push(&[
            "--dev".as_ref(),
            "/dev".as_ref(),
            "--proc".as_ref(),
            "/proc".as_ref(),
        ]);
        let tmp = self.private_tmp.as_os_str();
        if self.shared_tmp {
            push(&["--bind".as_ref(), tmp, tmp]);
        } else {
            push(&[
                "--bind".as_ref(),
                tmp,
                "/tmp".as_ref(),
                "--bind".as_ref(),
                tmp,
                "/var/tmp".as_ref(),
            ]);
        }
        let ws = self.workspace.as_os_str();
        let binds = |a: &mut dyn FnMut(&[&std::ffi::OsStr]), only_hidden: bool| {
            for p in &self.read_only {
                if strictly_inside_any(p, &self.hidden) == only_hidden {
                    a(&["--ro-bind-try".as_ref(), p.as_os_str(), p.as_os_str()]);
                }
            }
            for p in &self.read_write {
                if strictly_inside_any(p, &self.hidden) == only_hidden {
                    a(&["--bind-try".as_ref(), p.as_os_str(), p.as_os_str()]);
                }
            }
            if strictly_inside_any(&self.workspace, &self.hidden) == only_hidden {
                a(&["--bind".as_ref(), ws, ws]);
            }
        };
        binds(&mut push, false);
        for h in &self.hidden {
            if h.is_dir() {
                push(&["--tmpfs".as_ref(), h.as_os_str()]);
            } else if h.exists() {
                push(&["--ro-bind".as_ref(), "/dev/null".as_ref(), h.as_os_str()]);
            }
        }
        // What the user (or the workspace) puts back inside a hidden directory.
        binds(&mut push, true);
        push(&["--chdir".as_ref(), cwd.as_os_str()]);
        a
    }

    /// The Landlock rules of this view ([`Self::landlock_read`], [`Self::landlock_write`], the network).
    pub fn landlock_rules(&self) -> LandlockRules {
        LandlockRules {
            read: self.landlock_read(),
            write: self.landlock_write(),
            network: self.network,
        }
    }

    /// Readable roots for a Landlock ruleset.
    pub fn landlock_read(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        if self.restrict {
            out.extend(SYSTEM_DIRS.iter().chain(SYSTEM_ETC).map(PathBuf::from));
            out.extend(["/proc", "/dev"].map(PathBuf::from));
        } else {
            readable_except(Path::new("/"), &self.hidden, &mut out);
        }
        out.extend(self.landlock_write());
        for p in &self.read_only {
            self.expand(p, &mut out);
        }
        out.retain(|p| p.exists());
        out
    }

    /// `p`, or its parts outside the hidden paths when it contains one. A path strictly inside a
    /// hidden one is the user's explicit choice; a hidden path itself is never granted.
    fn expand(&self, p: &Path, out: &mut Vec<PathBuf>) {
        if self.hidden.iter().any(|h| h == p) {
            return;
        }
        if self.hidden.iter().any(|h| h.starts_with(p)) {
            readable_except(p, &self.hidden, out);
        } else {
            out.push(p.to_path_buf());
        }
    }

    /// Writable roots for a Landlock ruleset.
    pub fn landlock_write(&self) -> Vec<PathBuf> {
        let mut out = vec![self.workspace.clone(), self.private_tmp.clone()];
        for p in &self.read_write {
            self.expand(p, &mut out);
        }
        out.extend(DEV_WRITABLE.iter().map(PathBuf::from));
        out.retain(|p| p.exists());
        out
    }
}

/// Every entry below `dir` except the hidden paths: siblings of each hidden path and of its
/// ancestors. Symlinked entries are judged by their target, so none leads into a hidden path.
fn readable_except(dir: &Path, hidden: &[PathBuf], out: &mut Vec<PathBuf>) {
    if hidden.is_empty() {
        out.push(dir.to_path_buf());
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let real = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
        if inside_any(&real, hidden) {
            continue;
        }
        if hidden.iter().any(|h| h.starts_with(&real)) {
            let is_real_dir = entry.file_type().map(|t| t.is_dir()).unwrap_or(false);
            if is_real_dir && real == path {
                readable_except(&path, hidden, out);
            }
            continue;
        }
        out.push(path);
    }
}

/// Restricts the calling thread with Landlock: reads only beneath `read`, writes only beneath
/// `write`, no signals or abstract sockets outside the sandbox (ABI 6), and no TCP when
/// `network` is false (ABI 4). `Ok(false)` when the kernel enforced nothing.
#[cfg(target_os = "linux")]
pub fn landlock_restrict(read: &[PathBuf], write: &[PathBuf], network: bool) -> Result<bool, String> {
    use landlock::{
        ABI, Access, AccessFs, AccessNet, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope,
        path_beneath_rules,
    };
    let abi = ABI::V6;
    let mut ruleset = Ruleset::default()
        .handle_access(AccessFs::from_all(abi))
        .and_then(|r| r.scope(Scope::from_all(abi)))
        .map_err(|e| e.to_string())?;
    if !network {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(abi))
            .map_err(|e| e.to_string())?;
    }
    let status = ruleset
        .create()
        .and_then(|r| r.add_rules(path_beneath_rules(read, AccessFs::from_read(abi))))
        .and_then(|r| r.add_rules(path_beneath_rules(write, AccessFs::from_all(abi))))
        .and_then(|r| r.restrict_self())
        .map_err(|e| e.to_string())?;
    Ok(status.ruleset != RulesetStatus::NotEnforced)
}

/// The `prlimit(1)` arguments (program first) for `limits`; `nproc` only when it binds.
pub fn prlimit_args(prlimit: &Path, limits: &ExecLimits, nproc: bool) -> Vec<OsString> {
    let mut a = vec![prlimit.as_os_str().to_os_string()];
    let mut lim = |name: &str, v: u64| {
        if v > 0 {
            a.push(format!("--{name}={v}:{v}").into());
        }
    };
    if nproc {
        lim("nproc", limits.max_processes);
    }
    lim("cpu", limits.cpu_seconds);
    lim("as", limits.memory_mb.saturating_mul(1024 * 1024));
    lim("fsize", limits.file_size_mb.saturating_mul(1024 * 1024));
    a.push("--".into());
    a
}

/// Where per-call process-count cgroups can be made here, probed once: the directory of nanobot's own cgroup
/// in a writable `pids` hierarchy (cgroup v1's `pids` controller, or cgroup v2 where nanobot's cgroup already
/// delegates `pids` to its children). Used where `RLIMIT_NPROC` does not bind, that is when nanobot runs as
/// root; `None` elsewhere, or when no such hierarchy can be written (then the PID namespace and the timeout
/// are the bound, and `doctor` says so).
pub fn pids_cgroup_parent() -> Option<&'static Path> {
    static PROBE: OnceLock<Option<PathBuf>> = OnceLock::new();
    PROBE
        .get_or_init(|| {
            if !kernel_support().root {
                return None;
            }
            let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
            let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
            let parent = pids_parent_candidates(&cgroups, &mounts)
                .into_iter()
                .find(|dir| PidsCgroup::create_in(dir, 1).is_ok())?;
            sweep_stale_cgroups(&parent);
            Some(parent)
        })
        .as_deref()
}

/// Removes the empty per-call cgroups that nanobot processes no longer running left behind (a process that
/// exited while a call's cgroup was still being emptied).
fn sweep_stale_cgroups(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("nanobot-exec-"))
            .and_then(|n| n.split('-').next())
        else {
            continue;
        };
        if pid != std::process::id().to_string() && !Path::new("/proc").join(pid).exists() {
            // Fails (harmlessly) while processes are still in it.
            let _ = std::fs::remove_dir(entry.path());
        }
    }
}

/// The directories that may hold per-call pids cgroups, from `/proc/self/cgroup` and `/proc/self/mountinfo`:
/// the v1 `pids` hierarchy first, then the v2 one when its cgroup delegates `pids`.
fn pids_parent_candidates(cgroups: &str, mountinfo: &str) -> Vec<PathBuf> {
    // (mount root, mount point, fstype, super options) of each cgroup mount.
    let mounts: Vec<(&str, &str, &str, &str)> = mountinfo
        .lines()
        .filter_map(|line| {
            let (head, tail) = line.split_once(" - ")?;
            let head: Vec<&str> = head.split(' ').collect();
            let mut tail = tail.split(' ');
            let (fstype, _source, opts) = (tail.next()?, tail.next()?, tail.next().unwrap_or(""));
            Some((*head.get(3)?, *head.get(4)?, fstype, opts))
        })
        .filter(|m| m.2 == "cgroup" || m.2 == "cgroup2")
        .collect();
    let under = |root: &str, point: &str, path: &str| {
        let rel = path.strip_prefix(root.trim_end_matches('/')).unwrap_or(path);
        Path::new(point).join(rel.trim_start_matches('/'))
    };
    let mut out = Vec::new();
    for line in cgroups.lines() {
        let mut f = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        if controllers.split(',').any(|c| c == "pids") {
            for (root, point, _, opts) in mounts.iter().filter(|m| m.2 == "cgroup") {
                if opts.split(',').any(|o| o == "pids") {
                    out.push(under(root, point, path));
                }
            }
        } else if controllers.is_empty() {
            for (root, point, _, _) in mounts.iter().filter(|m| m.2 == "cgroup2") {
                let dir = under(root, point, path);
                let delegated = std::fs::read_to_string(dir.join("cgroup.subtree_control"))
                    .is_ok_and(|c| c.split_whitespace().any(|c| c == "pids"));
                if delegated {
                    out.push(dir);
                }
            }
        }
    }
    out
}

/// A cgroup that limits the number of processes of one `exec` call (`pids.max`), removed when dropped.
///
/// The command joins it before anything else runs: [`PidsCgroup::join_prefix`] is a `sh` that writes its own
/// PID into `cgroup.procs` and then `exec`s the real argv (bubblewrap), so every descendant is counted from the
/// first fork, with no `pre_exec` hook.
#[derive(Debug)]
pub struct PidsCgroup {
    dir: PathBuf,
}

impl PidsCgroup {
    /// A new cgroup allowing `max` processes under [`pids_cgroup_parent`]; `None` where there is none.
    pub fn create(max: u64) -> Option<Self> {
        Self::create_in(pids_cgroup_parent()?, max).ok()
    }

    fn create_in(parent: &Path, max: u64) -> std::io::Result<Self> {
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = parent.join(format!("nanobot-exec-{}-{n}", std::process::id()));
        std::fs::create_dir(&dir)?;
        let group = Self { dir };
        std::fs::write(group.dir.join("pids.max"), max.to_string())?;
        Ok(group)
    }

    /// The arguments to put before the command's argv: `sh -c 'echo 0 > "$0" && exec "$@"' <cgroup.procs>`.
    pub fn join_prefix(&self) -> Vec<OsString> {
        let sh = find_tool("sh").unwrap_or_else(|| PathBuf::from("/bin/sh"));
        vec![
            sh.into_os_string(),
            "-c".into(),
            r#"echo 0 > "$0" && exec "$@""#.into(),
            self.dir.join("cgroup.procs").into_os_string(),
        ]
    }

    /// How many processes are in the cgroup now.
    pub fn count(&self) -> usize {
        std::fs::read_to_string(self.dir.join("cgroup.procs")).map_or(0, |t| t.lines().count())
    }
}

impl Drop for PidsCgroup {
    /// Removes the cgroup; processes still in it (the call ended without its PID namespace: Landlock only)
    /// are killed first. Bounded: at most 50 tries, 20 ms apart, on a thread of its own.
    fn drop(&mut self) {
        if std::fs::remove_dir(&self.dir).is_ok() {
            return;
        }
        let dir = self.dir.clone();
        let _ = std::thread::Builder::new()
            .name("nanobot-exec-cgroup".into())
            .spawn(move || {
                for _ in 0..50 {
                    if let Ok(pids) = std::fs::read_to_string(dir.join("cgroup.procs")) {
                        for pid in pids.lines().filter_map(|p| p.trim().parse::<i32>().ok()) {
                            let _ = nix::sys::signal::kill(
                                nix::unistd::Pid::from_raw(pid),
                                nix::sys::signal::Signal::SIGKILL,
                            );
                        }
                    }
                    if std::fs::remove_dir(&dir).is_ok() || !dir.exists() {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                tracing::warn!(cgroup = %dir.display(), "could not remove an exec call's cgroup");
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pids_cgroup_candidates_from_v1_and_v2_tables() {
        let cgroups = "8:pids:/job/42\n4:memory:/job/42\n0::/user.slice/app\n";
        let mountinfo = "\
30 25 0:26 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n\
31 25 0:27 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
32 25 0:28 /job /mnt/pids-in-container rw - cgroup cgroup rw,pids\n\
33 25 0:29 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n";
        let c = pids_parent_candidates(cgroups, mountinfo);
        assert_eq!(
            c,
            [
                PathBuf::from("/sys/fs/cgroup/pids/job/42"),
                PathBuf::from("/mnt/pids-in-container/42")
            ],
            "v2 is a candidate only where pids is delegated (not readable here)"
        );
    }

    #[test]
    fn readable_except_skips_the_hidden_dir_and_symlinks_into_it() {
        let root = tempfile::tempdir().unwrap();
        let r = std::fs::canonicalize(root.path()).unwrap();
        std::fs::create_dir_all(r.join("home/.nanobot/ws")).unwrap();
        std::fs::create_dir_all(r.join("home/docs")).unwrap();
        std::fs::create_dir_all(r.join("other")).unwrap();
        std::os::unix::fs::symlink(r.join("home/.nanobot"), r.join("home/link")).unwrap();
        let mut out = Vec::new();
        readable_except(&r, &[r.join("home/.nanobot")], &mut out);
        out.sort();
        assert_eq!(out, vec![r.join("home/docs"), r.join("other")]);
    }

    #[test]
    fn prlimit_args_skip_zero_limits() {
        let l = ExecLimits {
            max_processes: 10,
            cpu_seconds: 0,
            memory_mb: 1,
            file_size_mb: 0,
        };
        let a = prlimit_args(Path::new("/usr/bin/prlimit"), &l, true);
        let a: Vec<_> = a.iter().map(|s| s.to_string_lossy().into_owned()).collect();
        assert_eq!(
            a,
            ["/usr/bin/prlimit", "--nproc=10:10", "--as=1048576:1048576", "--"]
        );
    }
}
