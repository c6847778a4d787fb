//! Running the binary in a temporary home.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use nanobot_testkit::{MockLlm, TempHome, WireFormat};
use serde_json::Value;

/// The built `nanobot` executable.
pub(crate) fn exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_nanobot"))
}

/// A `nanobot` command with a clean environment: only HOME, PATH and the given variables.
pub(crate) fn nanobot(home: &Path) -> Command {
    let mut cmd = Command::new(exe());
    cmd.env_clear()
        .env("HOME", home)
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("NO_COLOR", "1")
        .current_dir(home);
    cmd
}

/// Stops a running `nanobot` as a service manager or a harness's timeout does (SIGTERM, stdin closed) and
/// returns its output. Bounded: a program still running a minute later is killed and the test fails with what it
/// wrote to stderr.
pub(crate) async fn terminate(mut child: std::process::Child) -> Output {
    const GRACE: std::time::Duration = std::time::Duration::from_secs(60);
    let pid = child.id().to_string();
    let term = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("run kill");
    assert!(term.success(), "kill -TERM {pid} failed");
    let mut waiting = tokio::task::spawn_blocking(move || {
        drop(child.stdin.take());
        child.wait_with_output()
    });
    match tokio::time::timeout(GRACE, &mut waiting).await {
        Ok(out) => out.expect("join the wait").expect("wait for nanobot"),
        Err(_) => {
            // Not reaped yet (the wait is pending), so the number is still this child's.
            let _ = Command::new("kill").args(["-KILL", &pid]).status();
            let out = tokio::time::timeout(GRACE, waiting).await;
            let stderr = match out {
                Ok(Ok(Ok(out))) => String::from_utf8_lossy(&out.stderr).into_owned(),
                _ => String::from("(not collected)"),
            };
            panic!("nanobot (pid {pid}) still ran {GRACE:?} after SIGTERM; its stderr: {stderr}")
        }
    }
}

/// The content of the last tool result in a request body sent to the model, if it holds one.
pub(crate) fn last_tool_result(body: &Value) -> Option<String> {
    body["messages"]
        .as_array()?
        .iter()
        .rev()
        .find(|m| m["role"] == "tool")
        .and_then(|m| m["content"].as_str())
        .map(str::to_owned)
}

/// Runs `nanobot args…` in `home`.
pub(crate) fn run(home: &Path, args: &[&str]) -> Output {
    nanobot(home).args(args).output().expect("run nanobot")
}

pub(crate) fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub(crate) fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Merges `over` into `base` (objects key by key, anything else replaced).
pub(crate) fn merge(base: &mut Value, over: &Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                match b.get_mut(k) {
                    Some(slot) => merge(slot, v),
                    None => {
                        b.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (b, o) => *b = o.clone(),
    }
}

/// `nanobot onboard`, then the config pointed at `mock` (OpenAI wire format through `custom`).
pub(crate) fn onboarded(mock: &MockLlm) -> TempHome {
    let home = TempHome::new();
    let o = run(home.home(), &["onboard"]);
    assert!(o.status.success(), "onboard failed: {}", stderr(&o));
    point_at_mock(&home, mock);
    home
}

/// Edits the config in `home` so the agent talks to `mock`.
pub(crate) fn point_at_mock(home: &TempHome, mock: &MockLlm) {
    set(home, mock.nanobot_config(WireFormat::OpenAi));
}

/// Merges `patch` into the config in `home` (the test's own small file, written by `onboard`).
pub(crate) fn set(home: &TempHome, patch: Value) {
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(home.config_path()).unwrap()).unwrap();
    merge(&mut config, &patch);
    home.write_config(&config);
}
