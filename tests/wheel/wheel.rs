//! The Python wheel (`python/`, maturin `bindings = "bin"`): built from the dev profile into the shared target
//! dir, installed offline into a fresh venv, then driven the three ways scripts drive the Python nanobot:
//! `nanobot`, `python -m nanobot`, and `nanobot.cli.commands.app` imported into the caller's interpreter; the
//! program `app()` starts ends when its caller is killed.
//!
//! Needs maturin from `.ci/.peers/venv` (scripts/install-peers.sh): skipped with a message when it is missing,
//! a failure when `CI` is set.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use nanobot_testkit::peers::{repo_root, require_venv_exe};
use nanobot_testkit::{MockLlm, MockReply};

use crate::support::{exe, onboarded, stderr, stdout};

fn output(cmd: &mut Command, what: &str) -> Output {
    let o = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    assert!(
        o.status.success(),
        "{what} failed ({}):\nstdout: {}\nstderr: {}",
        o.status,
        stdout(&o),
        stderr(&o)
    );
    o
}

/// A command with a clean environment: HOME, a PATH without the venv (the launcher must find the executable
/// itself), no colour.
fn clean(program: &Path, home: &Path) -> Command {
    let mut cmd = Command::new(program);
    cmd.env_clear()
        .env("HOME", home)
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("NO_COLOR", "1")
        .current_dir(home);
    cmd
}

fn build_wheel(maturin: &Path, out: &Path) -> PathBuf {
    let root = repo_root().expect("the workspace root");
    let mut cmd = Command::new(maturin);
    cmd.args(["build", "--profile", "dev", "--locked", "--offline", "--out"])
        .arg(out)
        .current_dir(root.join("python"));
    output(&mut cmd, "maturin build");
    let wheels: Vec<PathBuf> = std::fs::read_dir(out)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "whl"))
        .collect();
    assert_eq!(wheels.len(), 1, "one wheel: {wheels:?}");
    wheels.into_iter().next().unwrap()
}

#[test]
fn wheel_installs_offline_and_runs_three_ways() {
    let Some(maturin) = require_venv_exe("maturin") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let wheel = build_wheel(&maturin, &tmp.path().join("dist"));
    let name = wheel.file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with("nanobot_rs-"), "{name}");

    // A fresh venv from the peers' interpreter, the wheel installed with no index at all.
    let python = maturin.with_file_name("python");
    let venv = tmp.path().join("venv");
    output(
        Command::new(&python).args(["-m", "venv"]).arg(&venv),
        "python -m venv",
    );
    let vpy = venv.join("bin").join("python");
    output(
        Command::new(&vpy)
            .args([
                "-m",
                "pip",
                "install",
                "--no-index",
                "--no-deps",
                "--disable-pip-version-check",
                "--quiet",
            ])
            .arg(&wheel),
        "pip install --no-index",
    );

    let mock = MockLlm::start_background();
    let home = onboarded(&mock);

    // 1. The executable the wheel installed: the same version as the binary under test.
    let o = output(
        clean(&venv.join("bin").join("nanobot"), home.home()).arg("--version"),
        "nanobot --version",
    );
    let ours = output(Command::new(exe()).arg("--version"), "nanobot --version (cargo)");
    assert_eq!(stdout(&o), stdout(&ours));
    assert!(stdout(&o).contains(env!("CARGO_PKG_VERSION")), "{}", stdout(&o));

    // 2. python -m nanobot agent -m hi
    mock.when_last_user_contains_once("hi from -m", MockReply::text("Hello via python -m."));
    let o = output(
        clean(&vpy, home.home()).args(["-m", "nanobot", "agent", "-m", "hi from -m"]),
        "python -m nanobot agent -m",
    );
    assert_eq!(stdout(&o), "Hello via python -m.\n");

    // 3. The Typer-style entry point, imported into the caller's interpreter: with explicit args and
    //    standalone_mode=False (returns, output into a swapped sys.stdout), then plain app() reading sys.argv
    //    (exits with the status). The interpreter survives the first call: the binary runs as a child.
    mock.when_last_user_contains_once("hi from app", MockReply::text("Hello via app()."));
    mock.when_last_user_contains_once("hi from argv", MockReply::text("Hello via sys.argv."));
    let script = r#"
import contextlib, io, sys
from nanobot.cli.commands import app
buf = io.StringIO()
with contextlib.redirect_stdout(buf):
    rc = app(args=["agent", "-m", "hi from app"], standalone_mode=False)
print("captured=" + repr(buf.getvalue()) + " rc=" + repr(rc))
sys.stdout.flush()
sys.argv = ["nanobot", "agent", "-m", "hi from argv"]
app()
print("not reached")
"#;
    let o = clean(&vpy, home.home()).args(["-c", script]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "captured='Hello via app().\\n' rc=None\nHello via sys.argv.\n",
        "stderr: {}",
        stderr(&o)
    );

    // A failing command gives its status back, as Click does with standalone_mode=False.
    let o = output(
        clean(&vpy, home.home()).args([
            "-c",
            "from nanobot.cli.commands import app; print(app(['no-such-command'], standalone_mode=False))",
        ]),
        "app(['no-such-command'])",
    );
    assert_eq!(
        stdout(&o).trim(),
        "2",
        "clap's usage error status; stderr: {}",
        stderr(&o)
    );

    let asked: Vec<String> = mock
        .completion_requests()
        .iter()
        .filter_map(|r| r.last_user_text())
        .collect();
    for q in ["hi from -m", "hi from app", "hi from argv"] {
        assert!(
            asked.iter().any(|t| t.contains(q)),
            "{q} reached the model: {asked:?}"
        );
    }

    app_child_ends_with_its_caller(&vpy, &home, &mock, tmp.path());
}

/// The program `app()` starts ends with the Python process that called it, however that ends: a harness that
/// SIGKILLs its Python on a timeout gets its pipes back at once instead of waiting for nanobot to finish the
/// turn. The launcher passes its pid (`NANOBOT_LAUNCHER_PID`) and the binary binds itself to it at start-up;
/// the variable never reaches what the binary starts (checked through `exec`, even with the key allowed).
/// Control: a `nanobot` started by plain `subprocess.Popen` (no launcher pid) survives the same kill.
fn app_child_ends_with_its_caller(vpy: &Path, home: &nanobot_testkit::TempHome, mock: &MockLlm, tmp: &Path) {
    // 1. The variable stays out of the binary's children: `exec` may pass it (allowedEnvKeys) and still
    //    sees none, while the child ran bound (its parent was the launcher).
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(home.config_path()).unwrap()).unwrap();
    crate::support::merge(
        &mut config,
        &serde_json::json!({"tools": {"exec": {"allowedEnvKeys": ["NANOBOT_LAUNCHER_PID"]}}}),
    );
    home.write_config(&config);
    mock.when_once(
        |r| r.last_user_text().is_some_and(|t| t.contains("which launcher")) && !r.ends_with_tool_result(),
        MockReply::tool_call(
            "exec",
            serde_json::json!({"command": "echo launcher=${NANOBOT_LAUNCHER_PID:-unset}"}),
        ),
    );
    mock.when_once(
        |r| r.ends_with_tool_result() && r.tool_results().iter().any(|t| t.content.contains("launcher=")),
        MockReply::text("Checked."),
    );
    let o = output(
        clean(vpy, home.home()).args([
            "-c",
            "from nanobot.cli.commands import app; app(['agent', '-m', 'which launcher'])",
        ]),
        "app(['agent', '-m', 'which launcher'])",
    );
    assert_eq!(stdout(&o), "Checked.\n", "stderr: {}", stderr(&o));
    let seen: Vec<String> = mock
        .completion_requests()
        .iter()
        .flat_map(|r| r.tool_results())
        .map(|t| t.content)
        .filter(|c| c.contains("launcher="))
        .collect();
    let leaked = |c: &String| {
        c.match_indices("launcher=")
            .any(|(i, m)| c[i + m.len()..].starts_with(|ch: char| ch.is_ascii_digit()))
    };
    assert!(
        !seen.is_empty() && seen.iter().all(|c| c.contains("launcher=unset") && !leaked(c)),
        "the launcher pid must not reach exec: {seen:?}"
    );

    // 2. The check at start-up, on the executable alone: a launcher already gone ends it at once (137, nothing
    //    done); its real parent binds it; a live process that is not its parent (a stale value) is ignored.
    let exe = vpy.with_file_name("nanobot");
    let mut ended = Command::new("true").spawn().unwrap();
    let gone = ended.id().to_string();
    ended.wait().unwrap();
    let me = std::process::id().to_string();
    let not_parent = std::os::unix::process::parent_id().to_string();
    for (pid, code) in [(gone.as_str(), 137), (me.as_str(), 0), (not_parent.as_str(), 0)] {
        let o = clean(&exe, home.home())
            .arg("--version")
            .env("NANOBOT_LAUNCHER_PID", pid)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(code), "launcher pid {pid}: {o:?}");
        assert_eq!(stdout(&o).is_empty(), code != 0, "launcher pid {pid}: {o:?}");
    }

    // 3. A turn that would run for minutes: the model sends its head and then nothing.
    mock.when_last_user_contains(
        "launcher test",
        MockReply::text("never sent").stall_after_headers(),
    );
    let bound = r#"
from nanobot.cli.commands import app
app(["agent", "-m", "launcher test: bound"])
"#;
    let mut python = spawn_python(vpy, home.home(), bound, &tmp.join("bound.err"));
    let nanobot = started_child(mock, &mut python, "launcher test: bound", &tmp.join("bound.err"));
    assert!(nanobot.running(), "the turn is under way while its caller lives");
    let mut pipe = python.stdout.take().unwrap();
    python.kill().unwrap(); // SIGKILL: no Python code runs
    python.wait().unwrap();
    assert!(
        nanobot.ends_within(Duration::from_secs(60)),
        "nanobot (pid {}) outlived the Python process that ran app()",
        nanobot.pid
    );
    // The harness's pipe is free again: nothing holds its write end.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut rest = Vec::new();
        let _ = std::io::Read::read_to_end(&mut pipe, &mut rest);
        let _ = tx.send(rest);
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the caller's stdout pipe reaches its end once the caller is killed");

    // 4. Control: the same turn started without the launcher's variable survives its parent's SIGKILL.
    let unbound = r#"
import subprocess
from nanobot import find_nanobot_bin
subprocess.Popen([find_nanobot_bin(), "agent", "-m", "launcher test: control"]).wait()
"#;
    let mut python = spawn_python(vpy, home.home(), unbound, &tmp.join("control.err"));
    let control = started_child(
        mock,
        &mut python,
        "launcher test: control",
        &tmp.join("control.err"),
    );
    python.kill().unwrap();
    python.wait().unwrap();
    let survived = control.running();
    // Ended here either way: this test started it.
    let _ = Command::new("kill")
        .args(["-KILL", &control.pid.to_string()])
        .status();
    assert!(
        survived,
        "control: without the launcher's pid the child outlives its parent (else the test above proves nothing)"
    );
    assert!(control.ends_within(Duration::from_secs(60)));
}

/// `python -c script` in `home` with its stdout piped (as a harness runs it) and its stderr in `err`.
fn spawn_python(vpy: &Path, home: &Path, script: &str, err: &Path) -> std::process::Child {
    clean(vpy, home)
        .args(["-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(err).unwrap())
        .spawn()
        .unwrap()
}

/// The `nanobot` child of `python`, once the model has been asked `question` (so it is past its start-up).
/// A bounded poll: it fails with the Python process's stderr when either does not happen within a minute.
fn started_child(mock: &MockLlm, python: &mut std::process::Child, question: &str, err: &Path) -> Proc {
    let deadline = Instant::now() + Duration::from_secs(60);
    let asked = || {
        mock.completion_requests()
            .iter()
            .any(|r| r.last_user_text().is_some_and(|t| t.contains(question)))
    };
    loop {
        if asked()
            && let Some(p) = Proc::child_of(python.id(), "nanobot")
        {
            return p;
        }
        let done = python.try_wait().unwrap();
        assert!(
            done.is_none() && Instant::now() < deadline,
            "{question:?} never reached the model (python: {done:?}); stderr: {}",
            std::fs::read_to_string(err).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A process seen in `/proc`, told apart from a later one with the same pid by its start time.
struct Proc {
    pid: u32,
    start: u64,
}

impl Proc {
    /// `/proc/<pid>/stat`: (name, state, parent pid, start time).
    fn stat(pid: u32) -> Option<(String, char, u32, u64)> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let (head, rest) = text.rsplit_once(')')?;
        let name = head.split_once('(')?.1.to_owned();
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // After the name: state (3rd field of the file), ppid (4th) … starttime (22nd).
        let state = fields.first()?.chars().next()?;
        let ppid = fields.get(1)?.parse().ok()?;
        let start = fields.get(19)?.parse().ok()?;
        Some((name, state, ppid, start))
    }

    fn child_of(parent: u32, name: &str) -> Option<Self> {
        std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let (n, _, ppid, start) = Self::stat(pid)?;
            (ppid == parent && n == name).then_some(Self { pid, start })
        })
    }

    /// Still running: the same process, not a zombie waiting to be reaped.
    fn running(&self) -> bool {
        Self::stat(self.pid).is_some_and(|(_, state, _, start)| start == self.start && state != 'Z')
    }

    /// Polls until it is no longer running, at most `bound`.
    fn ends_within(&self, bound: Duration) -> bool {
        let deadline = Instant::now() + bound;
        while self.running() {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        true
    }
}
