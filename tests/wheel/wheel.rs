//! The Python wheel (`python/`, maturin `bindings = "bin"`): built from the dev profile into the shared target
//! dir, installed offline into a fresh venv, then driven the three ways scripts drive the Python nanobot:
//! `nanobot`, `python -m nanobot`, and `nanobot.cli.commands.app` imported into the caller's interpreter.
//!
//! Needs maturin from `.ci/.peers/venv` (scripts/install-peers.sh): skipped with a message when it is missing,
//! a failure when `CI` is set.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

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
}
