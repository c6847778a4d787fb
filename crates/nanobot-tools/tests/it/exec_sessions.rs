//! Exec sessions (issue 18): `exec` with `yield_time_ms`, `exec_session`, `list_exec_sessions`, on every sandbox
//! this machine has (none, Landlock, bubblewrap): input, waiting for text and for the exit, the owner boundary,
//! the bound on sessions, and that no process survives terminate, `/stop` (`stop_session`) or shutdown.

use std::path::Path;
use std::sync::Arc;

use nanobot_tools::builtin::{ExecTool, register_exec};
use nanobot_tools::sandbox::Sandbox;
use nanobot_tools::{ExecSandbox, ExecSettings, ToolContext, ToolRegistry};
use serde_json::json;

fn registry(ws: &Path, sandbox: ExecSandbox) -> ToolRegistry {
    let mut parent = std::collections::BTreeMap::new();
    parent.insert("PATH".to_owned(), "/usr/local/bin:/usr/bin:/bin".to_owned());
    let s = ExecSettings {
        restrict_to_workspace: true,
        parent_env: parent.into(),
        sandbox,
        ..ExecSettings::default()
    };
    let reg = ToolRegistry::default();
    register_exec(&reg, ExecTool::new(s, Arc::new(Sandbox::new(ws, true))).unwrap());
    reg
}

fn ctx(ws: &Path, session: &str) -> ToolContext {
    ToolContext::new(ws).with_session(session)
}

fn session_id(text: &str) -> String {
    text.lines()
        .find_map(|l| l.strip_prefix("Process running. session_id: "))
        .unwrap_or_else(|| panic!("no session id in {text}"))
        .to_owned()
}

fn sandboxes() -> Vec<ExecSandbox> {
    let mut out = vec![ExecSandbox::None];
    out.extend(crate::confine::backends().into_iter().map(|(s, _)| s));
    out
}

#[tokio::test]
async fn a_session_takes_input_waits_for_text_and_exit_and_belongs_to_its_conversation() {
    for sandbox in sandboxes() {
        let ws = tempfile::tempdir().unwrap();
        let reg = registry(ws.path(), sandbox);
        let alice = ctx(ws.path(), "telegram:1");
        let started = reg
            .execute(
                "exec",
                json!({"command": "echo ready; read name; echo \"hello $name\"; read _; echo bye",
                       "yield_time_ms": 200}),
                &alice,
            )
            .await;
        assert!(!started.is_error, "{sandbox:?}: {}", started.text);
        let id = session_id(&started.text);
        if !started.text.contains("ready") {
            let ready = reg
                .execute(
                    "exec_session",
                    json!({"session_id": id, "wait_for": "ready"}),
                    &alice,
                )
                .await;
            assert!(ready.text.contains("ready"), "{sandbox:?}: {}", ready.text);
        }

        // Another conversation can neither list nor reach it.
        let bob = ctx(ws.path(), "telegram:2");
        let listed = reg.execute("list_exec_sessions", json!({}), &bob).await;
        assert_eq!(listed.text, "No active exec sessions.");
        let probe = reg
            .execute("exec_session", json!({"session_id": id, "terminate": true}), &bob)
            .await;
        assert!(
            probe.is_error && probe.text.contains("exec session not found"),
            "{}",
            probe.text
        );
        let listed = reg.execute("list_exec_sessions", json!({}), &alice).await;
        assert!(
            listed.text.starts_with(&format!("{id} | running")),
            "{}",
            listed.text
        );

        let greeted = reg
            .execute(
                "exec_session",
                json!({"session_id": id, "input": "Ada\n", "wait_for": "hello Ada"}),
                &alice,
            )
            .await;
        assert!(
            greeted.text.contains("hello Ada"),
            "{sandbox:?}: {}",
            greeted.text
        );
        assert!(greeted.text.contains("Process running."), "{}", greeted.text);

        let done = reg
            .execute(
                "exec_session",
                json!({"session_id": id, "close_stdin": true, "until_exit": true}),
                &alice,
            )
            .await;
        assert!(
            done.text.contains("bye") && done.text.contains("Exit code: 0"),
            "{sandbox:?}: {}",
            done.text
        );
        assert!(done.text.contains("Stdin closed."), "{}", done.text);
        let after = reg.execute("list_exec_sessions", json!({}), &alice).await;
        assert_eq!(
            after.text, "No active exec sessions.",
            "a finished session is forgotten"
        );
    }
}

#[tokio::test]
async fn terminate_stop_and_shutdown_leave_no_process_behind() {
    for sandbox in sandboxes() {
        let ws = tempfile::tempdir().unwrap();
        let reg = registry(ws.path(), sandbox);
        let c = ctx(ws.path(), "telegram:1");
        let mut pids = Vec::new();
        let mut ids = Vec::new();
        for i in 0..3 {
            let out = reg
                .execute(
                    "exec",
                    json!({"command": format!("sleep 300 & echo $! > bg{i}.pid; echo started; wait"),
                           "yield_time_ms": 0, "timeout": 600}),
                    &c,
                )
                .await;
            let id = session_id(&out.text);
            let up = reg
                .execute(
                    "exec_session",
                    json!({"session_id": id, "wait_for": "started"}),
                    &c,
                )
                .await;
            assert!(up.text.contains("started"), "{sandbox:?}: {}", up.text);
            ids.push(id);
            let pid_file = ws.path().join(format!("bg{i}.pid"));
            let pid: i32 = std::fs::read_to_string(pid_file).unwrap().trim().parse().unwrap();
            pids.push(pid);
        }
        // Inside bubblewrap the pid is the namespace's: check the host side only without it.
        let visible = sandbox != ExecSandbox::Bwrap;

        let ended = reg
            .execute(
                "exec_session",
                json!({"session_id": ids[0], "terminate": true}),
                &c,
            )
            .await;
        assert!(ended.text.contains("Session terminated."), "{}", ended.text);
        assert_eq!(
            reg.stop_session("telegram:1").await,
            2,
            "{sandbox:?}: /stop ends the other two"
        );
        assert_eq!(
            reg.execute("list_exec_sessions", json!({}), &c).await.text,
            "No active exec sessions."
        );
        if visible {
            for pid in &pids {
                assert!(
                    crate::process_ended(*pid),
                    "{sandbox:?}: background process {pid} survived"
                );
            }
        }

        // Shutdown ends what runs and refuses new sessions.
        let out = reg
            .execute("exec", json!({"command": "sleep 300", "yield_time_ms": 0}), &c)
            .await;
        let _ = session_id(&out.text);
        reg.shutdown().await;
        assert_eq!(
            reg.execute("list_exec_sessions", json!({}), &c).await.text,
            "No active exec sessions."
        );
        let refused = reg
            .execute("exec", json!({"command": "sleep 1", "yield_time_ms": 0}), &c)
            .await;
        assert!(
            refused.is_error && refused.text.contains("shutting down"),
            "{}",
            refused.text
        );
    }
}

#[tokio::test]
async fn what_a_session_left_in_its_group_ends_when_its_shell_does() {
    // Inside bubblewrap the pid is the namespace's (and the namespace ends with the shell): host side only.
    for sandbox in sandboxes().into_iter().filter(|s| *s != ExecSandbox::Bwrap) {
        let ws = tempfile::tempdir().unwrap();
        let reg = registry(ws.path(), sandbox);
        let c = ctx(ws.path(), "telegram:1");
        let out = reg
            .execute(
                "exec",
                json!({"command": "sleep 300 > /dev/null 2>&1 & echo $! > bg.tmp; mv bg.tmp bg.pid",
                       "yield_time_ms": 0, "timeout": 600}),
                &c,
            )
            .await;
        let id = session_id(&out.text);
        // Nobody polls the session: its shell ends on its own, and what it left must end then, not when the
        // session is closed (by then the reaped shell's number may be another process's).
        let pid_file = ws.path().join("bg.pid");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let pid: i32 = loop {
            if let Ok(text) = std::fs::read_to_string(&pid_file) {
                break text.trim().parse().unwrap();
            }
            assert!(std::time::Instant::now() < deadline, "{sandbox:?}: no pid file");
            tokio::task::yield_now().await;
        };
        while !crate::process_ended(pid) && std::time::Instant::now() < deadline {
            tokio::task::yield_now().await;
        }
        assert!(crate::process_ended(pid), "{sandbox:?}: {pid} outlived its shell");
        let done = reg
            .execute("exec_session", json!({"session_id": id, "until_exit": true}), &c)
            .await;
        assert!(done.text.contains("Exit code: 0"), "{sandbox:?}: {}", done.text);
    }
}

#[tokio::test]
async fn sessions_are_bounded_in_number_time_and_output() {
    let ws = tempfile::tempdir().unwrap();
    let reg = registry(ws.path(), ExecSandbox::None);
    let c = ctx(ws.path(), "cli:direct");
    for _ in 0..nanobot_tools::builtin::exec_session::MAX_SESSIONS {
        let out = reg
            .execute("exec", json!({"command": "sleep 300", "yield_time_ms": 0}), &c)
            .await;
        session_id(&out.text);
    }
    let ninth = reg
        .execute("exec", json!({"command": "sleep 300", "yield_time_ms": 0}), &c)
        .await;
    assert!(
        ninth.is_error && ninth.text.contains("at most 8"),
        "{}",
        ninth.text
    );
    assert_eq!(reg.stop_session("cli:direct").await, 8);

    // Sessions whose command ended on its own make room for new ones.
    for _ in 0..nanobot_tools::builtin::exec_session::MAX_SESSIONS {
        let out = reg
            .execute("exec", json!({"command": "true", "yield_time_ms": 0}), &c)
            .await;
        assert!(!out.is_error, "{}", out.text);
    }
    let ninth = reg
        .execute("exec", json!({"command": "sleep 300", "yield_time_ms": 0}), &c)
        .await;
    assert!(!ninth.is_error, "an ended session gave its place: {}", ninth.text);
    reg.stop_session("cli:direct").await;

    // The exec timeout still ends a session.
    let out = reg
        .execute(
            "exec",
            json!({"command": "sleep 300", "yield_time_ms": 0, "timeout": 1}),
            &c,
        )
        .await;
    let id = session_id(&out.text);
    let waited = reg
        .execute(
            "exec_session",
            json!({"session_id": id, "until_exit": true, "timeout_ms": 30000}),
            &c,
        )
        .await;
    assert!(
        waited.is_error && waited.text.contains("timed out; session was terminated"),
        "{}",
        waited.text
    );

    // Output beyond the bound keeps its start and its end.
    let out = reg
        .execute(
            "exec",
            json!({"command": "seq 1 200000", "yield_time_ms": 10000, "max_output_chars": 2000}),
            &c,
        )
        .await;
    assert!(out.text.starts_with("1\n2\n3\n"), "{}", &out.text[..40]);
    assert!(out.text.contains("chars truncated from output"), "{}", out.text);
    assert!(out.text.contains("200000\n"), "the latest output is kept");
    assert!(out.text.contains("Exit code: 0"), "{}", out.text);

    // Mistakes are named.
    for (args, needle) in [
        (json!({"session_id": "nope"}), "exec session not found"),
        (
            json!({"session_id": "x", "wait_for": "a", "until_exit": true}),
            "cannot be used together",
        ),
        (
            json!({"session_id": "x", "terminate": true, "input": "a"}),
            "exec session not found",
        ),
    ] {
        let out = reg.execute("exec_session", args, &c).await;
        assert!(out.is_error && out.text.contains(needle), "{}", out.text);
    }
}
