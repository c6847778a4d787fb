use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nanobot_tools::builtin::{ExecTool, LandlockSupport, landlock_support};
use nanobot_tools::sandbox::Sandbox;
use nanobot_tools::{ExecSandbox, ExecSettings, ToolRegistry, builtin};
use serde_json::json;

use crate::ctx;

fn settings(restrict: bool) -> ExecSettings {
    let mut parent = BTreeMap::new();
    parent.insert("PATH".to_owned(), "/usr/local/bin:/usr/bin:/bin".to_owned());
    parent.insert("HOME".to_owned(), "/nonexistent-home".to_owned());
    parent.insert("OPENAI_API_KEY".to_owned(), "sk-fake-parent-secret".to_owned());
    parent.insert("ALLOWED_ONE".to_owned(), "visible".to_owned());
    ExecSettings {
        restrict_to_workspace: restrict,
        allowed_env_keys: vec!["ALLOWED_ONE".to_owned()],
        parent_env: parent.into(),
        sandbox: ExecSandbox::None,
        ..ExecSettings::default()
    }
}

fn tool(ws: &Path, restrict: bool) -> ExecTool {
    ExecTool::new(settings(restrict), Arc::new(Sandbox::new(ws, restrict))).unwrap()
}

#[test]
fn guard_table() {
    let ws = tempfile::tempdir().unwrap();
    let t = tool(ws.path(), false);
    let blocked = [
        "rm -rf /",
        "rm -r build",
        "rm -f x",
        "rm -fr ~",
        "rm --recursive dir",
        "sudo rm -rf /var",
        "cd /tmp && rm -rf *",
        "ls; rm -Rf .",
        "echo hi | xargs rm -rf",
        "find . -name '*.o' -exec rm -f {} \\;",
        "find . -delete",
        "bash -c 'rm -rf /'",
        "sh -c \"shutdown -h now\"",
        "eval 'rm -rf /'",
        "echo \"$(rm -rf /)\"",
        "echo `reboot`",
        "mkfs.ext4 /dev/sda1",
        "mkfs -t ext4 /dev/sdb",
        "dd if=/dev/zero of=/dev/sda",
        "echo x > /dev/sda",
        "cat img > /dev/nvme0n1",
        "shutdown now",
        "reboot",
        "/sbin/poweroff",
        "systemctl poweroff",
        ":(){ :|:& };:",
        "echo '{}' > memory/history.jsonl",
        "echo 1 >> ./memory/history.jsonl",
        "printf x > .dream_cursor",
        "echo x | tee memory/history.jsonl",
        "env FOO=1 rm -rf /tmp/x",
        "timeout 5 rm -rf x",
        "del /f file.txt",
        "rmdir /s folder",
    ];
    for cmd in blocked {
        assert!(t.check_command(cmd, ws.path()).is_err(), "should block: {cmd}");
    }
    let allowed = [
        "echo \"rm -rf /\"",
        "grep -r 'shutdown' .",
        "curl https://example.com/reboot",
        "curl https://example.com/api?action=shutdown",
        "git commit -m 'fix rm -rf bug'",
        "cat docs/mkfs.md",
        "echo dd if=/dev/zero",
        "ls -la",
        "rm file.txt",
        "rm -- -rf",
        "cat memory/history.jsonl",
        "tail -n 5 memory/history.jsonl",
        "python3 -c 'print(1)'",
        "echo reboot-notes > notes.txt",
        "ls /dev/sda 2>/dev/null",
        "cargo build --format json",
        "npm run format",
        "echo ':(){ :|:& };:'",
    ];
    for cmd in allowed {
        assert!(
            t.check_command(cmd, ws.path()).is_ok(),
            "should allow: {cmd}: {:?}",
            t.check_command(cmd, ws.path())
        );
    }
}

#[test]
fn config_patterns_and_workspace_restriction() {
    let ws = tempfile::tempdir().unwrap();
    let mut s = settings(true);
    s.deny_patterns = vec![r"\bgit\s+push\b".into()];
    let t = ExecTool::new(s, Arc::new(Sandbox::new(ws.path(), true))).unwrap();
    assert!(t.check_command("git push origin main", ws.path()).is_err());
    assert!(t.check_command("git status", ws.path()).is_ok());
    for bad in [
        "cat /etc/passwd",
        "cat ../../etc/passwd",
        "ls ~",
        "cp x ~/y",
        "cat < /etc/shadow",
        "echo x > /tmp/out",
    ] {
        let err = t.check_command(bad, ws.path());
        assert!(err.is_err(), "should refuse under restriction: {bad}");
    }
    for ok in [
        "ls -la",
        "cat a/../b.txt",
        "echo hi > /dev/null",
        "curl https://example.com/a/../b",
    ] {
        assert!(
            t.check_command(ok, ws.path()).is_ok(),
            "{ok}: {:?}",
            t.check_command(ok, ws.path())
        );
    }
    let mut s = settings(false);
    s.allow_patterns = vec!["^ls\\b".into()];
    let t = ExecTool::new(s, Arc::new(Sandbox::new(ws.path(), false))).unwrap();
    assert!(t.check_command("ls", ws.path()).is_ok());
    assert!(t.check_command("whoami", ws.path()).is_err());
    let mut s = settings(false);
    s.deny_patterns = vec!["(".into()];
    let err = ExecTool::new(s, Arc::new(Sandbox::new(ws.path(), false))).unwrap_err();
    assert!(err.to_string().contains("tools.exec.denyPatterns"));
}

fn exec_registry(ws: &Path, s: ExecSettings) -> ToolRegistry {
    let reg = ToolRegistry::default();
    builtin::register_exec_tool(&reg, &s, &Sandbox::new(ws, s.restrict_to_workspace)).unwrap();
    reg
}

#[tokio::test]
async fn env_is_scrubbed() {
    let ws = tempfile::tempdir().unwrap();
    let reg = exec_registry(ws.path(), settings(false));
    let out = reg
        .execute("exec", json!({"command": "env"}), &ctx(ws.path()))
        .await;
    assert!(!out.is_error, "{}", out.text);
    assert!(!out.text.contains("sk-fake-parent-secret"), "{}", out.text);
    assert!(!out.text.contains("OPENAI_API_KEY"), "{}", out.text);
    assert!(out.text.contains("ALLOWED_ONE=visible"), "{}", out.text);
    assert!(out.text.contains("HOME=/nonexistent-home"));
    assert!(out.text.contains("LANG=C.UTF-8") && out.text.contains("TERM=dumb"));
    // nothing from the test process's own environment leaks either
    let names: Vec<&str> = out
        .text
        .lines()
        .filter_map(|l| l.split_once('=').map(|p| p.0))
        .collect();
    for n in names {
        assert!(
            [
                "HOME",
                "LANG",
                "TERM",
                "PATH",
                "ALLOWED_ONE",
                "PWD",
                "SHLVL",
                "_",
                "OLDPWD",
                "TMPDIR"
            ]
            .contains(&n),
            "unexpected var {n}"
        );
    }
}

#[tokio::test]
async fn output_exit_code_stderr_and_cap() {
    let ws = tempfile::tempdir().unwrap();
    let reg = exec_registry(ws.path(), settings(false));
    let c = ctx(ws.path());
    let out = reg
        .execute("exec", json!({"command": "echo out; echo err >&2; exit 3"}), &c)
        .await;
    assert_eq!(out.text, "out\nSTDERR:\nerr\n\nExit code: 3");
    let out = reg
        .execute(
            "exec",
            json!({"command": "head -c 20000 /dev/zero | tr '\\0' a"}),
            &c,
        )
        .await;
    assert!(
        out.text.contains("... (truncated, "),
        "{}",
        &out.text[out.text.len() - 80..]
    );
    assert!(out.text.chars().count() < 10_100);
    let out = reg
        .execute("exec", json!({"command": "pwd", "working_dir": "."}), &c)
        .await;
    assert!(
        out.text
            .starts_with(&ws.path().canonicalize().unwrap().display().to_string())
    );
    let out = reg.execute("exec", json!({"command": "true"}), &c).await;
    assert_eq!(out.text, "\nExit code: 0");
    let out = reg
        .execute("exec", json!({"command": "ls", "timeout": 601}), &c)
        .await;
    assert!(out.text.contains("timeout must be <= 600"), "{}", out.text);
    let out = reg.execute("exec", json!({"command": "rm -rf /"}), &c).await;
    assert!(out.is_error && out.text.starts_with("Error: Command blocked by safety guard"));
    assert!(reg.get("exec").unwrap().exclusive());
    assert!(!reg.get("exec").unwrap().concurrency_safe());
}

#[tokio::test]
async fn parameters_of_0_3_5_shells_aliases_and_output_limit() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(ws.path().join("sub")).unwrap();
    let reg = exec_registry(ws.path(), settings(false));
    let c = ctx(ws.path());
    // bash by default (where installed), sh or zsh on request.
    let out = reg
        .execute(
            "exec",
            json!({"command": "echo \"bash=${BASH_VERSION:+yes}\""}),
            &c,
        )
        .await;
    assert!(out.text.starts_with("bash=yes"), "{}", out.text);
    let out = reg
        .execute(
            "exec",
            json!({"command": "echo \"bash=${BASH_VERSION:+yes}\"", "shell": "sh"}),
            &c,
        )
        .await;
    assert!(out.text.starts_with("bash=\n"), "{}", out.text);
    let out = reg
        .execute(
            "exec",
            json!({"command": "shopt -q login_shell && echo login", "login": true}),
            &c,
        )
        .await;
    assert!(out.text.starts_with("login"), "{}", out.text);
    let out = reg
        .execute("exec", json!({"command": "true", "shell": "fish"}), &c)
        .await;
    assert!(
        out.is_error && out.text.contains("bash, sh or zsh"),
        "{}",
        out.text
    );
    // `cmd` and `workdir` are aliases.
    let out = reg
        .execute("exec", json!({"cmd": "basename \"$PWD\"", "workdir": "sub"}), &c)
        .await;
    assert!(out.text.starts_with("sub\n"), "{}", out.text);
    let out = reg.execute("exec", json!({"timeout": 5}), &c).await;
    assert!(
        out.is_error && out.text.contains("missing required command"),
        "{}",
        out.text
    );
    // The output limit is the call's to choose, within 1000..=50000.
    let big = json!({"command": "head -c 30000 /dev/zero | tr '\\0' a", "max_output_chars": 12000});
    let out = reg.execute("exec", big, &c).await;
    assert!(
        out.text.contains("... (truncated, ") && out.text.chars().count() > 11_000,
        "{}",
        &out.text[..out.text.len().min(300)]
    );
    let out = reg
        .execute("exec", json!({"command": "true", "max_output_tokens": 10}), &c)
        .await;
    assert!(
        out.is_error && out.text.contains("max_output_tokens must be >= 1000"),
        "{}",
        out.text
    );
    // Unknown parameters are refused by name, as 0.3.5 does; `yield_time_ms` is bounded as there.
    let out = reg
        .execute("exec", json!({"command": "true", "yield_ms": 100}), &c)
        .await;
    assert!(
        out.is_error && out.text.contains("unexpected parameter yield_ms"),
        "{}",
        out.text
    );
    let out = reg
        .execute("exec", json!({"command": "true", "yield_time_ms": 30001}), &c)
        .await;
    assert!(out.is_error && out.text.contains("yield_time_ms"), "{}", out.text);
}

#[tokio::test]
async fn timeout_kills_the_process_group() {
    let ws = tempfile::tempdir().unwrap();
    let reg = exec_registry(ws.path(), settings(false));
    let c = ctx(ws.path());
    let out = reg
        .execute(
            "exec",
            json!({"command": "sleep 300 & echo $! > bg.pid; sleep 300", "timeout": "1"}),
            &c,
        )
        .await;
    assert!(
        out.is_error && out.text.contains("timed out after 1 seconds"),
        "{}",
        out.text
    );
    let pid: i32 = std::fs::read_to_string(ws.path().join("bg.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // The background sleep got SIGKILL with its group: it is gone, a zombie, or (delivery is
    // asynchronous) still has the SIGKILL pending.
    assert!(
        crate::process_ended(pid),
        "background process {pid} still running"
    );
}

#[tokio::test]
async fn landlock_confines_writes_to_the_workspace() {
    if let LandlockSupport::Unavailable(why) = landlock_support() {
        println!("skipped: Landlock unavailable on this kernel: {why}");
        return;
    }
    // "Outside" lies beyond /tmp, /var/tmp and $TMPDIR: earlier rulesets left them writable, and a
    // clone (and its target dir) may itself live under /tmp.
    let temp_roots: Vec<PathBuf> = ["/tmp", "/var/tmp"]
        .into_iter()
        .map(PathBuf::from)
        .chain(std::env::var_os("TMPDIR").map(PathBuf::from))
        .filter_map(|p| p.canonicalize().ok())
        .collect();
    let candidates = [
        Some(PathBuf::from(env!("CARGO_TARGET_TMPDIR"))),
        std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")),
    ];
    let Some(root) = candidates.into_iter().flatten().find(|c| {
        std::fs::create_dir_all(c).is_ok()
            && c.canonicalize()
                .is_ok_and(|c| !temp_roots.iter().any(|t| c.starts_with(t)))
    }) else {
        println!("skipped: no writable directory outside the sandbox's temp roots to test an escape");
        return;
    };
    let base = root.join(format!("nanobot-landlock-test-{}", std::process::id()));
    let ws = base.join("ws");
    let outside = base.join("outside");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    let mut s = settings(false);
    s.sandbox = ExecSandbox::Landlock;
    let reg = exec_registry(&ws, s);
    let c = ctx(&ws);
    let cmd = format!(
        "echo in > inside.txt; echo out > {}/escaped.txt; python3 -c \"import shutil; shutil.rmtree('{}')\" ; echo done",
        outside.display(),
        outside.display()
    );
    let out = reg.execute("exec", json!({"command": cmd}), &c).await;
    assert!(out.text.contains("done"), "{}", out.text);
    assert_eq!(std::fs::read_to_string(ws.join("inside.txt")).unwrap(), "in\n");
    assert!(
        !outside.join("escaped.txt").exists(),
        "write outside the workspace succeeded: {}",
        out.text
    );
    assert!(outside.exists(), "rmtree outside the workspace succeeded");
    // the test process itself is not confined
    std::fs::write(outside.join("mine.txt"), "ok").unwrap();
    let _ = std::fs::remove_dir_all(&base);
}
