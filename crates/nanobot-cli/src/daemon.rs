//! The gateway in the background (0.3.5's `nanobot gateway --background`, `status`, `logs`, `stop`, `restart`).
//!
//! A background gateway is this program run as `gateway --foreground`, detached (a session of its own), its
//! output appended to `<data dir>/logs/gateway.log`; its pid and how it was started are recorded in
//! `<data dir>/run/gateway.json`. Both files are 0.3.5's, with its names and fields: the default config uses
//! `gateway.json`/`gateway.log`, an explicit `-c` or `-w` gets `gateway.<16 hex of SHA-1>.json`, and the record
//! carries the process identity (`<process group>:<start time>` from `/proc`), so a pid the system gave to
//! another program since is never taken for the gateway, whichever of the two programs wrote the record.
//! Every wait is bounded: the start waits at most [`READY_WAIT`] for `/health`, `stop` at most its `--timeout`
//! for the exit after SIGTERM, then SIGKILL.

use std::io::{BufRead as _, Read as _, Seek as _, Write as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nanobot_config::paths::NanobotPaths;
use serde_json::{Map, Value, json};
use sha1::{Digest, Sha1};

use crate::args::ConfigArgs;
use crate::error::CliError;
use crate::setup::CliEnv;

/// The longest wait for a background gateway to answer `/health` after it started.
pub(crate) const READY_WAIT: Duration = Duration::from_secs(30);

/// Where one gateway instance keeps its record and its log.
#[derive(Debug, Clone)]
pub(crate) struct Instance {
    pub(crate) state: PathBuf,
    pub(crate) log: PathBuf,
    /// `-c` as given to the child (absolute), when not the default config.
    config: Option<PathBuf>,
    /// `-w` as given to the child (absolute).
    workspace: Option<PathBuf>,
}

impl Instance {
    /// The instance `-c`/`-w` select, named as 0.3.5 names it.
    pub(crate) fn resolve(env: &CliEnv, args: &ConfigArgs) -> Self {
        let (paths, _) = env.paths(args.config.as_deref());
        let config_path = paths.config_path().to_path_buf();
        let default = NanobotPaths::new(&env.home).config_path().to_path_buf();
        let config = (config_path != default).then_some(config_path.clone());
        let workspace = args.workspace.as_deref().map(|w| env.absolute(w));
        let selector: Vec<String> = [&workspace, &config]
            .into_iter()
            .flatten()
            .map(|p| p.display().to_string())
            .collect();
        let stem = if selector.is_empty() {
            "gateway".to_owned()
        } else {
            let digest = Sha1::digest(selector.join("|").as_bytes());
            let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
            format!("gateway.{}", &hex[..16])
        };
        let data = config_path
            .parent()
            .map_or_else(|| paths.data_dir(), Path::to_path_buf);
        Self {
            state: data.join("run").join(format!("{stem}.json")),
            log: data.join("logs").join(format!("{stem}.log")),
            config,
            workspace,
        }
    }
}

/// What is known of an instance's process.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Status {
    pub(crate) running: bool,
    pub(crate) pid: Option<i32>,
    pub(crate) port: Option<u64>,
    pub(crate) started_at: Option<String>,
    pub(crate) launch_mode: String,
    pub(crate) reason: String,
}

/// The fields of `/proc/<pid>/stat` after the command name (state first); `None` when there is no such process.
/// The file is one short line; at most 4 KiB of it is read.
fn stat_fields(pid: i32) -> Option<Vec<String>> {
    if pid <= 0 {
        return None;
    }
    let stat = nanobot_util::read_to_string_bounded(Path::new(&format!("/proc/{pid}/stat")), 4096).ok()?;
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// `<process group>:<start time in clock ticks>` of `pid`, as 0.3.5 records it (`None`: no such process).
fn identity(pid: i32) -> Option<String> {
    let fields = stat_fields(pid)?;
    // After the name: state (3), ppid, pgrp (5) … starttime (22).
    Some(format!("{}:{}", fields.get(2)?, fields.get(19)?))
}

/// Whether `pid` is a live process (not a zombie).
fn alive(pid: i32) -> bool {
    stat_fields(pid)
        .and_then(|f| f.into_iter().next())
        .is_some_and(|state| state != "Z" && state != "X")
}

/// The largest state record read.
const MAX_STATE_BYTES: u64 = 64 * 1024;
/// The most of the log read at once (its tail, or new lines while following).
const MAX_LOG_READ: u64 = 1024 * 1024;

fn read_state(path: &Path) -> Option<Map<String, Value>> {
    let text = nanobot_util::read_to_string_bounded(path, MAX_STATE_BYTES).ok()?;
    match serde_json::from_str(&text) {
        Ok(Value::Object(m)) => Some(m),
        _ => None,
    }
}

fn write_state(path: &Path, state: &Value) -> Result<(), CliError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| CliError::io("create", dir, e))?;
    let text = format!("{}\n", serde_json::to_string_pretty(state).unwrap_or_default());
    nanobot_util::write_atomic(path, text.as_bytes()).map_err(|e| CliError::io("write", path, e.into()))
}

/// The instance's status; a record whose process is gone (or is another program now) is removed.
pub(crate) fn status(inst: &Instance) -> Status {
    let not_running = |reason: &str| Status {
        running: false,
        pid: None,
        port: None,
        started_at: None,
        launch_mode: "unknown".into(),
        reason: reason.into(),
    };
    let Some(state) = read_state(&inst.state) else {
        return not_running("not_started");
    };
    let Some(pid) = state
        .get("pid")
        .and_then(Value::as_i64)
        .and_then(|p| i32::try_from(p).ok())
    else {
        return not_running("not_started");
    };
    let recorded = state.get("stable_identity").or_else(|| state.get("identity"));
    let matches = match (recorded, identity(pid)) {
        (None | Some(Value::Null), _) => true,
        (Some(_), None) => false,
        (Some(Value::String(r)), Some(now)) => *r == now,
        // Older records hold the process group only.
        (Some(Value::Number(g)), Some(now)) => now.starts_with(&format!("{g}:")),
        _ => false,
    };
    if !alive(pid) || !matches {
        let _ = std::fs::remove_file(&inst.state);
        return not_running("stale_state");
    }
    Status {
        running: true,
        pid: Some(pid),
        port: state.get("port").and_then(Value::as_u64),
        started_at: state.get("started_at").and_then(Value::as_str).map(str::to_owned),
        launch_mode: state
            .get("launch_mode")
            .and_then(Value::as_str)
            .filter(|m| matches!(*m, "foreground" | "background"))
            .unwrap_or("unknown")
            .to_owned(),
        reason: "running".into(),
    }
}

/// The status lines 0.3.5 prints.
pub(crate) fn print_status(inst: &Instance, s: &Status, out: &mut dyn std::io::Write) {
    let _ = writeln!(out, "Running: {}", if s.running { "yes" } else { "no" });
    let _ = writeln!(out, "Reason: {}", s.reason);
    if let Some(pid) = s.pid {
        let _ = writeln!(out, "PID: {pid}");
    }
    if let Some(port) = s.port {
        let _ = writeln!(out, "Port: {port}");
    }
    if let Some(at) = &s.started_at {
        let _ = writeln!(out, "Started At: {at}");
    }
    if s.running {
        let _ = writeln!(out, "Launch Mode: {}", s.launch_mode);
    }
    let _ = writeln!(out, "State: {}", inst.state.display());
    let _ = writeln!(out, "Logs: {}", inst.log.display());
}

/// Whether `GET /health` on `host:port` answers 200 (one bounded attempt).
fn healthy(host: &str, port: u16) -> bool {
    let host = match host {
        "" | "0.0.0.0" => "127.0.0.1",
        "::" => "::1",
        h => h,
    };
    let Ok(mut addrs) = std::net::ToSocketAddrs::to_socket_addrs(&(host, port)) else {
        return false;
    };
    let Some(addr) = addrs.next() else {
        return false;
    };
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
    let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
    if s.write_all(format!("GET /health HTTP/1.0\r\nHost: {host}\r\n\r\n").as_bytes())
        .is_err()
    {
        return false;
    }
    let mut head = [0u8; 16];
    let n = s.read(&mut head).unwrap_or(0);
    String::from_utf8_lossy(&head[..n]).starts_with("HTTP/1.1 200")
        || String::from_utf8_lossy(&head[..n]).starts_with("HTTP/1.0 200")
}

/// The last `n` lines of the log (bounded read: at most its last 1 MiB).
pub(crate) fn log_tail(path: &Path, n: usize) -> Vec<String> {
    let Ok(mut f) = std::fs::File::open(path) else {
        return Vec::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    if f.seek(std::io::SeekFrom::Start(len.saturating_sub(MAX_LOG_READ)))
        .is_err()
    {
        return Vec::new();
    }
    let mut bytes = Vec::new();
    let _ = f.take(MAX_LOG_READ).read_to_end(&mut bytes);
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<String> = text.lines().map(str::to_owned).collect();
    lines[lines.len().saturating_sub(n)..].to_vec()
}

/// What a background start needs besides the instance.
#[derive(Debug, Clone)]
pub(crate) struct StartOptions {
    pub(crate) port: u16,
    pub(crate) host: String,
    pub(crate) verbose: bool,
    pub(crate) api: Option<bool>,
}

/// Starts the gateway in the background unless it runs already; waits (bounded) until it answers `/health`.
pub(crate) fn start(
    inst: &Instance,
    opts: &StartOptions,
    out: &mut dyn std::io::Write,
) -> Result<(), CliError> {
    let current = status(inst);
    if current.running {
        let _ = writeln!(out, "Gateway is already running in persistent background mode.");
        print_status(inst, &current, out);
        return Ok(());
    }
    let program = std::env::current_exe().map_err(|e| CliError::io("find", "this program's path", e))?;
    let mut args: Vec<String> = vec![
        "gateway".into(),
        "--foreground".into(),
        "--detached".into(),
        "--port".into(),
        opts.port.to_string(),
    ];
    if opts.verbose {
        args.push("--verbose".into());
    }
    match opts.api {
        Some(true) => args.push("--api".into()),
        Some(false) => args.push("--no-api".into()),
        None => {}
    }
    if let Some(w) = &inst.workspace {
        args.extend(["--workspace".into(), w.display().to_string()]);
    }
    if let Some(c) = &inst.config {
        args.extend(["--config".into(), c.display().to_string()]);
    }
    let logs = inst.log.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(logs).map_err(|e| CliError::io("create", logs, e))?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&inst.log)
        .map_err(|e| CliError::io("open", &inst.log, e))?;
    let log2 = log.try_clone().map_err(|e| CliError::io("open", &inst.log, e))?;
    let log_start = log.metadata().map(|m| m.len()).unwrap_or(0);
    let mut child = std::process::Command::new(&program)
        .args(&args)
        // The background gateway outlives this command: never bound to a launcher of ours (`crate::launcher`).
        .env_remove(crate::launcher::LAUNCHER_PID_VAR)
        .stdin(std::process::Stdio::null())
        .stdout(log)
        .stderr(log2)
        .spawn()
        .map_err(|e| CliError::io("start", &program, e))?;
    let pid = i32::try_from(child.id()).unwrap_or(0);
    // Ready when /health answers; failed when the process ends first.
    let deadline = Instant::now() + READY_WAIT;
    let mut ready = false;
    while Instant::now() < deadline {
        if let Ok(Some(code)) = child.try_wait() {
            let tail = new_log_lines(&inst.log, log_start, 20);
            return Err(CliError::Failed(format!(
                "the gateway exited during startup ({code}); its last output ({}):\n{}",
                inst.log.display(),
                tail.join("\n")
            )));
        }
        if healthy(&opts.host, opts.port) {
            ready = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut command = vec![program.display().to_string()];
    command.extend(args);
    let state = json!({
        "pid": pid,
        "started_at": chrono::Utc::now().format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string(),
        "platform": "Linux",
        "port": opts.port,
        "workspace": inst.workspace.as_ref().map(|p| p.display().to_string()),
        "config_path": inst.config.as_ref().map(|p| p.display().to_string()),
        "command": command,
        "log_path": inst.log.display().to_string(),
        "identity": identity(pid),
        "launch_mode": "background",
        "health_host": opts.host,
    });
    write_state(&inst.state, &state)?;
    // The child runs on in its own session; this process does not wait for it.
    drop(child);
    if ready {
        let _ = writeln!(out, "Gateway started in the background.");
    } else {
        let _ = writeln!(
            out,
            "Gateway started in the background, but it did not answer /health within {}s: see `nanobot gateway logs`.",
            READY_WAIT.as_secs()
        );
    }
    print_status(inst, &status(inst), out);
    Ok(())
}

fn new_log_lines(path: &Path, from: u64, n: usize) -> Vec<String> {
    let Ok(mut f) = std::fs::File::open(path) else {
        return Vec::new();
    };
    if f.seek(std::io::SeekFrom::Start(from)).is_err() {
        return Vec::new();
    }
    let lines: Vec<String> = std::io::BufReader::new(f.take(MAX_LOG_READ))
        .lines()
        .map_while(Result::ok)
        .collect();
    lines[lines.len().saturating_sub(n)..].to_vec()
}

/// Stops the recorded gateway: SIGTERM to its process group, then SIGKILL after `timeout`. `Ok(false)`: nothing
/// was running.
pub(crate) fn stop(inst: &Instance, timeout: Duration) -> Result<bool, CliError> {
    let s = status(inst);
    let Some(pid) = s.pid.filter(|_| s.running) else {
        return Ok(false);
    };
    use nix::sys::signal::{Signal, kill, killpg};
    use nix::unistd::{Pid, getpgid};
    let group = getpgid(Some(Pid::from_raw(pid))).ok();
    let signal = |sig: Signal| match group {
        Some(g) => killpg(g, sig),
        None => kill(Pid::from_raw(pid), sig),
    };
    let _ = signal(Signal::SIGTERM);
    let deadline = Instant::now() + timeout;
    while alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    if alive(pid) {
        let _ = signal(Signal::SIGKILL);
        let hard = Instant::now() + Duration::from_secs(2);
        while alive(pid) && Instant::now() < hard {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    if alive(pid) {
        return Err(CliError::Failed(format!(
            "the gateway (pid {pid}) did not stop within {}s",
            timeout.as_secs()
        )));
    }
    let _ = std::fs::remove_file(&inst.state);
    Ok(true)
}

/// Prints the last `tail` lines of the log, then (with `follow`) new lines as they come until interrupted.
pub(crate) fn logs(
    inst: &Instance,
    tail: usize,
    follow: bool,
    out: &mut dyn std::io::Write,
) -> Result<(), CliError> {
    let lines = log_tail(&inst.log, tail);
    if lines.is_empty() && !follow {
        let _ = writeln!(out, "No gateway log output available yet.");
        return Ok(());
    }
    for l in &lines {
        let _ = writeln!(out, "{l}");
    }
    if !follow {
        return Ok(());
    }
    let mut pos = std::fs::metadata(&inst.log).map(|m| m.len()).unwrap_or(0);
    let mut partial = String::new();
    // Like `tail -f`: until the user interrupts (Ctrl-C ends the process, exit status 130 as in 0.3.5).
    loop {
        let len = std::fs::metadata(&inst.log).map(|m| m.len()).unwrap_or(0);
        if len < pos {
            pos = 0; // rotated or truncated
        }
        if len > pos
            && let Ok(mut f) = std::fs::File::open(&inst.log)
            && f.seek(std::io::SeekFrom::Start(pos)).is_ok()
        {
            let mut bytes = Vec::new();
            let _ = f.take((len - pos).min(MAX_LOG_READ)).read_to_end(&mut bytes);
            pos += bytes.len() as u64;
            partial.push_str(&String::from_utf8_lossy(&bytes));
            while let Some(i) = partial.find('\n') {
                let line: String = partial.drain(..=i).collect();
                let _ = write!(out, "{line}");
            }
            let _ = out.flush();
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instances_are_named_as_0_3_5_names_them() {
        let home = tempfile::tempdir().unwrap();
        let env = CliEnv::for_home(home.path(), nanobot_util::EnvMap::default());
        let default = Instance::resolve(&env, &ConfigArgs::default());
        assert_eq!(default.state, home.path().join(".nanobot/run/gateway.json"));
        assert_eq!(default.log, home.path().join(".nanobot/logs/gateway.log"));
        let ws = home.path().join("ws");
        let other = Instance::resolve(
            &env,
            &ConfigArgs {
                config: None,
                workspace: Some(ws.clone()),
            },
        );
        let digest = Sha1::digest(ws.display().to_string().as_bytes());
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            other.state,
            home.path()
                .join(format!(".nanobot/run/gateway.{}.json", &hex[..16]))
        );
    }

    #[test]
    fn a_record_of_a_process_that_is_gone_or_is_another_program_is_stale() {
        let dir = tempfile::tempdir().unwrap();
        let inst = Instance {
            state: dir.path().join("run/gateway.json"),
            log: dir.path().join("logs/gateway.log"),
            config: None,
            workspace: None,
        };
        assert_eq!(status(&inst).reason, "not_started");
        let me = i32::try_from(std::process::id()).unwrap();
        write_state(
            &inst.state,
            &json!({"pid": me, "identity": identity(me), "port": 1}),
        )
        .unwrap();
        let s = status(&inst);
        assert!(s.running && s.pid == Some(me), "{s:?}");
        // The same pid with another start time: another program now.
        write_state(&inst.state, &json!({"pid": me, "identity": "1:1"})).unwrap();
        assert_eq!(status(&inst).reason, "stale_state");
        assert!(!inst.state.exists(), "the stale record is removed");
        write_state(&inst.state, &json!({"pid": i32::MAX})).unwrap();
        assert!(!status(&inst).running);
    }
}
