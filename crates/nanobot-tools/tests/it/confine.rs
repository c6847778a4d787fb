//! Attacks on `exec`'s kernel confinement, through the real `ExecTool` running real shells.
//!
//! Kernel features: the bubblewrap cases need unprivileged user + mount + PID namespaces and the
//! `bwrap` binary (`.ci/run` installs it; with `CI` set a missing `bwrap` fails the test); the
//! Landlock cases need Landlock (ABI 6 for the signal scope). A case is skipped, with the reason
//! printed, only where the kernel lacks the feature.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine as _;
use nanobot_tools::builtin::ExecTool;
use nanobot_tools::confine::{Backend, ExecLimits, kernel_support};
use nanobot_tools::sandbox::Sandbox;
use nanobot_tools::{ExecSandbox, ExecSettings, ToolOutput, ToolRegistry};
use serde_json::json;

use crate::ctx;

/// A home with nanobot's data directory (a canary key in `config.json` and in another chat's
/// session), a workspace inside it, an SSH key, and a folder outside everything. Lives under
/// the target dir, not `/tmp` (the sandbox gives commands a private `/tmp`, which would hide a
/// canary there for the wrong reason).
pub(crate) struct Lab {
    _dir: tempfile::TempDir,
    pub root: PathBuf,
    pub home: PathBuf,
    pub data: PathBuf,
    pub ws: PathBuf,
    pub outside: PathBuf,
    pub key: String,
}

/// Where labs are made: the target dir's scratch folder, unless the checkout lies under a directory the sandbox
/// replaces with a private one (`/tmp`, `/var/tmp`: a clone made in `/tmp`), where the "outside" canary would be
/// hidden from commands for the wrong reason and the control case would fail. Then a folder under `/var/cache`
/// (as root, which CI is), else the test says what to set.
fn lab_base() -> PathBuf {
    let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let real = target.canonicalize().unwrap_or_else(|_| target.clone());
    let private = ["/tmp", "/var/tmp"]
        .iter()
        .any(|root| real.starts_with(root) || target.starts_with(root));
    if !private {
        return target;
    }
    let fallback = PathBuf::from("/var/cache/nanobot-tests");
    match std::fs::create_dir_all(&fallback) {
        Ok(()) => fallback,
        Err(e) => panic!(
            "the target dir {} is under a private-temp root of the exec sandbox and {} cannot be made ({e}); \
             set NANOBOT_TEST_LAB_BASE to a writable folder outside /tmp and /var/tmp",
            target.display(),
            fallback.display()
        ),
    }
}

impl Lab {
    pub(crate) fn new() -> Self {
        let base = std::env::var_os("NANOBOT_TEST_LAB_BASE").map_or_else(lab_base, PathBuf::from);
        std::fs::create_dir_all(&base).unwrap();
        let dir = tempfile::tempdir_in(&base).unwrap();
        let root = dir.path().canonicalize().unwrap();
        let home = root.join("home");
        let data = home.join(".nanobot");
        let ws = data.join("workspace");
        let outside = root.join("outside");
        let key = format!("sk-canary-{}", uuid::Uuid::new_v4().simple());
        for d in [
            &ws,
            &data.join("sessions"),
            &home.join(".ssh"),
            &outside.join("victim"),
        ] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(
            data.join("config.json"),
            json!({"providers": {"openai": {"apiKey": key}}}).to_string(),
        )
        .unwrap();
        std::fs::write(
            data.join("sessions/telegram_42.jsonl"),
            format!("{{\"secret\":\"{key}\"}}\n"),
        )
        .unwrap();
        std::fs::write(home.join(".ssh/id_rsa"), format!("-----BEGIN KEY----- {key}\n")).unwrap();
        std::fs::write(outside.join("canary.txt"), "outside-canary\n").unwrap();
        std::fs::write(outside.join("victim/precious.txt"), "keep me\n").unwrap();
        std::fs::write(ws.join("visible.txt"), "in-workspace\n").unwrap();
        Self {
            _dir: dir,
            root,
            home,
            data,
            ws,
            outside,
            key,
        }
    }

    pub(crate) fn settings(&self, restrict: bool, sandbox: ExecSandbox) -> ExecSettings {
        let mut parent = BTreeMap::new();
        parent.insert("PATH".to_owned(), "/usr/local/bin:/usr/bin:/bin".to_owned());
        parent.insert("HOME".to_owned(), self.home.display().to_string());
        ExecSettings {
            restrict_to_workspace: restrict,
            parent_env: parent.into(),
            sandbox,
            data_dir: Some(self.data.clone()),
            hide_paths: vec![self.home.join(".ssh")],
            ..ExecSettings::default()
        }
    }

    pub(crate) fn registry(&self, s: ExecSettings) -> ToolRegistry {
        let restrict = s.restrict_to_workspace;
        let sandbox = Sandbox::new(&self.ws, restrict).with_home(Some(self.home.clone()));
        let reg = ToolRegistry::default();
        reg.register(Arc::new(ExecTool::new(s, Arc::new(sandbox)).unwrap()));
        reg
    }

    pub(crate) async fn run(&self, reg: &ToolRegistry, cmd: &str) -> ToolOutput {
        reg.execute("exec", json!({"command": cmd, "timeout": 30}), &ctx(&self.ws))
            .await
    }
}

fn blocked(out: &ToolOutput) -> bool {
    out.text.contains("blocked by safety guard")
}

/// The sandboxes this machine can test: bubblewrap (namespaces) and Landlock alone.
pub(crate) fn backends() -> Vec<(ExecSandbox, &'static str)> {
    let k = kernel_support();
    let mut out = Vec::new();
    match &k.bwrap {
        Ok(_) => out.push((ExecSandbox::Bwrap, "bubblewrap")),
        Err(why) => {
            let installed = ["/usr/bin/bwrap", "/bin/bwrap", "/usr/local/bin/bwrap"]
                .iter()
                .any(|p| Path::new(p).exists());
            assert!(
                installed || std::env::var_os("CI").is_none(),
                "CI is set but bwrap is missing (.ci/run installs bubblewrap): {why}"
            );
            println!("bubblewrap cases skipped: {why}");
        }
    }
    match &k.landlock {
        Ok(_) => out.push((ExecSandbox::Landlock, "landlock")),
        Err(why) => println!("Landlock cases skipped: {why}"),
    }
    out
}

/// Ways to read the data directory: through `$HOME`, `cd`, variables, interpreters, globbing,
/// relative paths, `/proc` of the test process, and searches.
fn read_attacks(lab: &Lab) -> Vec<String> {
    let data = lab.data.display();
    let root = lab.root.display();
    let pid = std::process::id();
    vec![
        "cat $HOME/.nanobot/config.json".to_owned(),
        "cd; cat .nanobot/config.json; cat .nanobot/sessions/*".to_owned(),
        "cd; cat .ssh/id_rsa".to_owned(),
        format!("d={data}; f=con; cat \"$d/${{f}}fig.json\""),
        format!("cat {root}/ho*/.nano*/con*"),
        "cat ../config.json ../sessions/*".to_owned(),
        format!("python3 -c \"print(open('{data}/config.json').read())\""),
        format!("perl -e 'open F, \"<{data}/config.json\"; print <F>'"),
        format!("grep -r sk-canary {root} 2>/dev/null"),
        format!("find {root} -name '*.json*' 2>/dev/null | xargs cat 2>/dev/null"),
        format!("cat /proc/{pid}/root{data}/config.json"),
        format!("tar cf - {data} 2>/dev/null | strings"),
        format!("ln -s {data}/config.json link.json; cat link.json"),
        format!("cat /proc/{pid}/environ"),
    ]
}

#[tokio::test]
async fn data_dir_is_never_readable_in_either_mode() {
    let lab = Lab::new();
    for (sandbox, name) in backends() {
        for restrict in [false, true] {
            let reg = lab.registry(lab.settings(restrict, sandbox));
            let ok = lab.run(&reg, "cat visible.txt").await;
            assert!(
                ok.text.contains("in-workspace"),
                "{name} restrict={restrict}: {}",
                ok.text
            );
            let mut ran = 0;
            for cmd in read_attacks(&lab) {
                let out = lab.run(&reg, &cmd).await;
                ran += usize::from(!blocked(&out));
                assert!(
                    !out.text.contains(&lab.key),
                    "{name} restrict={restrict}: `{cmd}` read the canary key:\n{}",
                    out.text
                );
            }
            let need = if restrict { 5 } else { 12 };
            assert!(
                ran >= need,
                "{name}: the guard blocked most attacks ({ran} ran), the kernel was not tested"
            );
            // outside the data dir, reading is allowed without the restriction and not with it
            let out = lab
                .run(&reg, &format!("cat {}/canary.txt", lab.outside.display()))
                .await;
            let via_python = lab
                .run(
                    &reg,
                    &format!(
                        "python3 -c \"print(open('{}/canary.txt').read())\"",
                        lab.outside.display()
                    ),
                )
                .await;
            if restrict {
                assert!(!out.text.contains("outside-canary"), "{name}: {}", out.text);
                assert!(
                    !via_python.text.contains("outside-canary"),
                    "{name}: {}",
                    via_python.text
                );
            } else {
                assert!(out.text.contains("outside-canary"), "{name}: {}", out.text);
                assert!(
                    via_python.text.contains("outside-canary"),
                    "{name}: {}",
                    via_python.text
                );
            }
        }
    }
}

/// Each evasion class of the deny list: the command names the victim however the class allows.
fn evasions(victim: &Path) -> Vec<String> {
    let v = victim.display();
    let b64 = base64::engine::general_purpose::STANDARD.encode(format!("rm -rf {v}"));
    vec![
        format!("echo {b64} | base64 -d | sh"),
        format!("c=rm; f=-rf; $c $f {v}"),
        format!("rm${{IFS}}-rf${{IFS}}{v}"),
        format!("eval \"r\"\"m -rf {v}\""),
        format!("bash -c \"\\$'\\\\x72m' -rf {v}\""),
        format!("/???/r? -rf {v}"),
        // bash (the default shell) expands aliases in scripts only when asked.
        format!("shopt -s expand_aliases\nalias zap='rm -rf'\nzap {v}"),
        format!("python3 -c \"import shutil; shutil.rmtree('{v}')\""),
        format!("perl -e 'use File::Path qw(remove_tree); remove_tree(\"{v}\")'"),
        format!("find {v} -delete"),
        format!("mv {v} {v}.gone"),
        format!("echo gone > {v}/precious.txt"),
    ]
}

#[tokio::test]
async fn evasion_classes_cannot_damage_outside_the_workspace() {
    let lab = Lab::new();
    let victim = lab.outside.join("victim");
    for (sandbox, name) in backends() {
        for restrict in [false, true] {
            let reg = lab.registry(lab.settings(restrict, sandbox));
            let mut ran = 0;
            for cmd in evasions(&victim) {
                let out = lab.run(&reg, &cmd).await;
                ran += usize::from(!blocked(&out));
                assert_eq!(
                    std::fs::read_to_string(victim.join("precious.txt"))
                        .ok()
                        .as_deref(),
                    Some("keep me\n"),
                    "{name} restrict={restrict}: `{cmd}` damaged the folder outside:\n{}",
                    out.text
                );
            }
            let need = if restrict { 4 } else { 8 };
            assert!(
                ran >= need,
                "{name}: the guard blocked most evasions ({ran} ran), the kernel was not tested"
            );
            // The same commands do their damage inside the workspace: they are real attacks.
            for (i, cmd) in evasions(&lab.ws.join("target")).iter().enumerate().take(9) {
                let target = lab.ws.join("target");
                std::fs::create_dir_all(&target).unwrap();
                std::fs::write(target.join("precious.txt"), "x").unwrap();
                let out = lab.run(&reg, cmd).await;
                // Landlock alone cannot list `/` (an ancestor of the hidden data dir), so a
                // glob over `/` finds nothing there.
                let unlistable_root = sandbox == ExecSandbox::Landlock && cmd.contains("/???");
                if !blocked(&out) && !unlistable_root {
                    assert!(
                        !target.exists(),
                        "{name}: evasion {i} `{cmd}` did not work inside the workspace:\n{}",
                        out.text
                    );
                }
            }
        }
    }
}

fn marker() -> String {
    // `sleep` accepts a fraction: a unique argument to find our processes in /proc.
    format!("4321.{}", uuid::Uuid::new_v4().as_u128() % 1_000_000_000)
}

/// Live (not zombie, no SIGKILL pending) processes whose command line holds `marker`.
fn alive_with(marker: &str) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let p = e.path();
        let Ok(cmd) = std::fs::read(p.join("cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if !cmd.contains(marker) {
            continue;
        }
        let pid = p
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.parse::<i32>().ok());
        if pid.is_some_and(|pid| !crate::process_ended(pid)) {
            out.push(format!("{}: {cmd}", p.display()));
        }
    }
    out
}

#[tokio::test]
async fn no_descendant_outlives_the_call() {
    let lab = Lab::new();
    let Some((sandbox, _)) = backends().into_iter().find(|(s, _)| *s == ExecSandbox::Bwrap) else {
        println!("skipped: needs user + PID namespaces (bubblewrap)");
        return;
    };
    for restrict in [false, true] {
        let reg = lab.registry(lab.settings(restrict, sandbox));
        let m = marker();
        let cmd = format!(
            "setsid sleep {m} & nohup sleep {m} >/dev/null 2>&1 & (sleep {m} &) ; \
             sh -c 'sleep {m} &' ; setsid -f sleep {m} ; sleep {m} & \
             python3 -c \"import os,subprocess; os.fork() or (os.setsid(), subprocess.Popen(['sleep','{m}']))\" ; \
             echo started"
        );
        let out = lab.run(&reg, &cmd).await;
        assert!(out.text.contains("started"), "{}", out.text);
        let alive = alive_with(&m);
        assert!(alive.is_empty(), "restrict={restrict}: survivors: {alive:?}");
        // and when the call times out while its children run
        let m = marker();
        let out = reg
            .execute(
                "exec",
                json!({"command": format!("setsid sleep {m} & (sleep {m} &); sleep {m}"), "timeout": 1}),
                &ctx(&lab.ws),
            )
            .await;
        assert!(out.text.contains("timed out"), "{}", out.text);
        let alive = alive_with(&m);
        assert!(
            alive.is_empty(),
            "restrict={restrict}: survivors after a timeout: {alive:?}"
        );
    }
}

#[tokio::test]
async fn the_child_cannot_signal_nanobot() {
    let lab = Lab::new();
    let me = std::process::id();
    for (sandbox, name) in backends() {
        if sandbox == ExecSandbox::Landlock && !matches!(kernel_support().landlock, Ok(abi) if abi >= 6) {
            println!("{name}: skipped, the signal scope needs Landlock ABI 6");
            continue;
        }
        let reg = lab.registry(lab.settings(false, sandbox));
        for cmd in [
            "kill -9 $PPID; echo after-ppid".to_owned(),
            format!("kill -9 {me}; echo after-pid"),
            format!("python3 -c 'import os,signal; os.kill({me}, signal.SIGKILL)'; echo after-py"),
            format!("kill -STOP {me}; echo after-stop"),
        ] {
            let out = lab.run(&reg, &cmd).await;
            assert!(out.text.contains("after-"), "{name}: {}", out.text);
        }
        // Still here, and not stopped: this call runs.
        let out = lab.run(&reg, "echo alive").await;
        assert!(out.text.contains("alive"), "{name}: {}", out.text);
    }
}

#[tokio::test]
async fn a_fork_loop_is_bounded_and_the_call_returns() {
    let lab = Lab::new();
    let Some((sandbox, _)) = backends().into_iter().find(|(s, _)| *s == ExecSandbox::Bwrap) else {
        println!("skipped: needs user + PID namespaces (bubblewrap)");
        return;
    };
    let mut s = lab.settings(false, sandbox);
    s.limits = ExecLimits {
        max_processes: 24,
        ..ExecLimits::default()
    };
    let reg = lab.registry(s);
    let m = marker();
    // Bounded by the loop itself so a root run (where RLIMIT_NPROC does not bind) stays small.
    let cmd = format!(
        "python3 -c \"\nimport subprocess\nn, err = 0, ''\nfor i in range(120):\n    try:\n        \
         subprocess.Popen(['sleep', '{m}']); n += 1\n    except OSError as e:\n        err = str(e); break\n\
         print('started=%d %s' % (n, err))\n\""
    );
    let out = lab.run(&reg, &cmd).await;
    let started: usize = out
        .text
        .split("started=")
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count: {}", out.text));
    // As root RLIMIT_NPROC does not bind; a pids cgroup per call does the counting where one can be made.
    let bounded = !kernel_support().root || nanobot_tools::confine::pids_cgroup_parent().is_some();
    if !bounded {
        println!(
            "running as root without a writable pids cgroup: RLIMIT_NPROC does not bind root; checking only \
             that nothing survives"
        );
        assert_eq!(started, 120, "{}", out.text);
    } else {
        assert!(
            started < 24,
            "process limit not applied: {started} started\n{}",
            out.text
        );
        assert!(
            out.text.contains("Resource temporarily unavailable"),
            "{}",
            out.text
        );
    }
    assert!(alive_with(&m).is_empty(), "fork-loop children survived the call");
    // A real fork bomb ends with the call (bounded by the limit, or by the timeout as root).
    if bounded {
        let out = reg
            .execute(
                "exec",
                json!({"command": "b(){ b | b & }; b", "timeout": 3}),
                &ctx(&lab.ws),
            )
            .await;
        assert!(!out.text.is_empty());
    }
}

#[tokio::test]
async fn network_can_be_cut() {
    let lab = Lab::new();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let cmd = format!(
        "python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5); print('connected')\""
    );
    for (sandbox, name) in backends() {
        let reg = lab.registry(lab.settings(false, sandbox));
        let out = lab.run(&reg, &cmd).await;
        assert!(out.text.contains("connected"), "{name} network on: {}", out.text);
        let mut s = lab.settings(false, sandbox);
        s.network = false;
        let reg = lab.registry(s);
        let out = lab.run(&reg, &cmd).await;
        assert!(
            !out.text.contains("connected"),
            "{name} network off: {}",
            out.text
        );
    }
}

#[tokio::test]
async fn limits_apply_inside_the_sandbox() {
    let lab = Lab::new();
    if kernel_support().prlimit.is_none() {
        println!("skipped: prlimit (util-linux) is not installed");
        return;
    }
    for (sandbox, name) in backends() {
        let mut s = lab.settings(false, sandbox);
        s.limits = ExecLimits {
            max_processes: 64,
            cpu_seconds: 7,
            memory_mb: 900,
            file_size_mb: 1,
        };
        let reg = lab.registry(s);
        let out = lab
            .run(
                &reg,
                "cat /proc/self/limits | grep -E 'cpu time|file size|address space'; \
                 head -c 2000000 /dev/zero > big.bin; echo size=$(wc -c < big.bin)",
            )
            .await;
        assert!(
            out.text.contains("Max cpu time              7"),
            "{name}: {}",
            out.text
        );
        assert!(out.text.contains("943718400"), "{name}: {}", out.text);
        assert!(out.text.contains("size=1048576"), "{name}: {}", out.text);
    }
}

#[test]
fn the_report_names_what_is_enforced() {
    let lab = Lab::new();
    let r = nanobot_tools::builtin::confinement_report(&lab.settings(false, ExecSandbox::Auto), &lab.ws);
    let text = r.facts.join("\n");
    assert!(text.contains("Landlock"), "{text}");
    assert!(text.contains("exec confinement:"), "{text}");
    match &kernel_support().bwrap {
        Ok(_) => {
            assert!(matches!(r.backend, Backend::Bwrap(_)));
            assert!(text.contains(&lab.data.display().to_string()), "{text}");
        }
        Err(_) => assert!(!r.warnings.is_empty(), "degraded without a warning: {text}"),
    }
    let none = nanobot_tools::builtin::confinement_report(&lab.settings(false, ExecSandbox::None), &lab.ws);
    assert!(
        none.warnings
            .iter()
            .any(|w| w.contains("WITHOUT kernel confinement")),
        "{:?}",
        none.warnings
    );
}

/// Runs every attack above again as an unprivileged user (uid 65534) when the tests run as
/// root, as CI does: that is the path users get (no capabilities to start with, and the process
/// limit binds). The child is this test binary under `setpriv`.
#[test]
fn the_attacks_also_fail_for_an_unprivileged_user() {
    if std::env::var_os("NANOBOT_TEST_UNPRIVILEGED").is_some() {
        return; // we are that child
    }
    if !kernel_support().root {
        println!("skipped: not root, so the other tests already ran unprivileged");
        return;
    }
    let Some(setpriv) = ["/usr/bin/setpriv", "/bin/setpriv"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
    else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set but setpriv (util-linux) is missing"
        );
        println!("skipped: setpriv (util-linux) is not installed");
        return;
    };
    let exe = std::env::current_exe().unwrap();
    let base = tempfile::tempdir_in(lab_base()).unwrap();
    std::os::unix::fs::chown(base.path(), Some(65534), Some(65534)).unwrap();
    let drop = |cmd: &mut std::process::Command| {
        cmd.arg("--reuid=65534")
            .arg("--regid=65534")
            .arg("--clear-groups")
            .arg("--inh-caps=-all")
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("NANOBOT_TEST_UNPRIVILEGED", "1")
            .env("NANOBOT_TEST_LAB_BASE", base.path());
    };
    let mut probe = std::process::Command::new(&setpriv);
    drop(&mut probe);
    let reachable = probe.arg("test").arg("-x").arg(&exe).status().unwrap();
    if !reachable.success() {
        println!(
            "skipped: uid 65534 cannot reach {} (directory permissions)",
            exe.display()
        );
        return;
    }
    let mut cmd = std::process::Command::new(&setpriv);
    drop(&mut cmd);
    if let Some(ci) = std::env::var_os("CI") {
        cmd.env("CI", ci);
    }
    let out = cmd
        .arg(&exe)
        .args(["confine::", "--skip", "the_attacks_also_fail", "--test-threads=2"])
        .output()
        .unwrap();
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "unprivileged run failed:\n{text}");
    assert!(text.contains("test result: ok"), "{text}");
    assert!(
        !text.contains("ok. 0 passed"),
        "no test ran unprivileged:\n{text}"
    );
}

/// The other half of `nothing_survives_when_nanobot_dies`: only does something in the child that
/// test starts (it plays nanobot, stuck in a long `exec` call, and is killed).
#[tokio::test]
async fn helper_plays_nanobot_stuck_in_exec() {
    let (Some(root), Some(mark)) = (
        std::env::var_os("NANOBOT_TEST_HANG_LAB"),
        std::env::var("NANOBOT_TEST_HANG_MARK").ok(),
    ) else {
        return;
    };
    let root = PathBuf::from(root);
    let home = root.join("home");
    let mut parent = BTreeMap::new();
    parent.insert("PATH".to_owned(), "/usr/local/bin:/usr/bin:/bin".to_owned());
    let s = ExecSettings {
        parent_env: parent.into(),
        sandbox: ExecSandbox::Bwrap,
        data_dir: Some(home.join(".nanobot")),
        ..ExecSettings::default()
    };
    let ws = home.join(".nanobot/workspace");
    let reg = ToolRegistry::default();
    reg.register(Arc::new(
        ExecTool::new(s, Arc::new(Sandbox::new(&ws, false))).unwrap(),
    ));
    let cmd = format!("setsid sleep {mark} & (sleep {mark} &); echo ready > ready.fifo; sleep {mark}");
    let _ = reg
        .execute("exec", json!({"command": cmd, "timeout": 600}), &ctx(&ws))
        .await;
}

/// nanobot killed with SIGKILL in the middle of an `exec` call: bubblewrap's parent-death signal
/// ends the sandbox and every process in it. Needs user + PID namespaces.
#[test]
fn nothing_survives_when_nanobot_dies() {
    if !backends().iter().any(|(s, _)| *s == ExecSandbox::Bwrap) {
        println!("skipped: needs user + PID namespaces (bubblewrap)");
        return;
    }
    if std::env::var_os("NANOBOT_TEST_HANG_LAB").is_some() {
        return;
    }
    let lab = Lab::new();
    let fifo = lab.ws.join("ready.fifo");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let m = marker();
    let mut nanobot = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "confine::helper_plays_nanobot_stuck_in_exec",
            "--nocapture",
        ])
        .env("NANOBOT_TEST_HANG_LAB", &lab.root)
        .env("NANOBOT_TEST_HANG_MARK", &m)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait (bounded) until the command inside the sandbox says it started its children.
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = fifo.clone();
    std::thread::spawn(move || {
        let _ = tx.send(std::fs::read_to_string(reader));
    });
    let ready = rx.recv_timeout(std::time::Duration::from_secs(60));
    if !matches!(ready, Ok(Ok(ref t)) if t.contains("ready")) {
        let _ = nanobot.kill();
        let _ = nanobot.wait();
        // unblock the reader thread if it is still waiting
        let _ = std::fs::write(&fifo, "x");
        panic!("the sandboxed command never started: {ready:?}");
    }
    let victims: Vec<i32> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&m))
        })
        .collect();
    assert!(
        victims.len() >= 3,
        "expected the sandbox's sleeps, found {victims:?}"
    );
    let fds: Vec<_> = victims
        .iter()
        .filter_map(|p| {
            let pid = rustix::process::Pid::from_raw(*p)?;
            rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
        })
        .collect();
    nanobot.kill().unwrap();
    nanobot.wait().unwrap();
    // Each pidfd becomes readable when its process has exited; bounded wait.
    for fd in &fds {
        let mut p = [rustix::event::PollFd::new(fd, rustix::event::PollFlags::IN)];
        let limit = rustix::event::Timespec {
            tv_sec: 20,
            tv_nsec: 0,
        };
        let n = rustix::event::poll(&mut p, Some(&limit)).unwrap();
        assert_eq!(n, 1, "a sandboxed process outlived nanobot by 20 s");
    }
    assert!(alive_with(&m).is_empty(), "survivors after nanobot died");
}

/// As root, each call's processes are counted in a pids cgroup of its own, which is gone after the call.
#[test]
fn a_pids_cgroup_limits_and_is_removed() {
    let Some(parent) = nanobot_tools::confine::pids_cgroup_parent() else {
        println!("skipped: not root, or no writable pids cgroup hierarchy here");
        return;
    };
    let group = nanobot_tools::confine::PidsCgroup::create(7).expect("a cgroup under a probed parent");
    let prefix = group.join_prefix();
    let procs = PathBuf::from(prefix.last().unwrap());
    let dir = procs.parent().unwrap().to_path_buf();
    assert!(dir.starts_with(parent), "{}", dir.display());
    // Cgroups left by nanobot processes that are gone were swept when the parent was probed.
    for entry in std::fs::read_dir(parent).unwrap().flatten() {
        let name = entry.file_name().into_string().unwrap();
        if let Some(pid) = name
            .strip_prefix("nanobot-exec-")
            .and_then(|n| n.split('-').next())
        {
            let alive = Path::new("/proc").join(pid).exists();
            assert!(
                alive
                    || std::fs::read_to_string(entry.path().join("cgroup.procs"))
                        .unwrap()
                        .trim()
                        != "",
                "stale empty cgroup {name} was not swept"
            );
        }
    }
    assert_eq!(std::fs::read_to_string(dir.join("pids.max")).unwrap().trim(), "7");
    // The prefix really moves the command into the cgroup: the command sees its own cgroup.
    let out = std::process::Command::new(&prefix[0])
        .args(&prefix[1..])
        .args(["sh", "-c", "cat /proc/self/cgroup"])
        .output()
        .unwrap();
    let seen = String::from_utf8_lossy(&out.stdout);
    let name = dir.file_name().unwrap().to_str().unwrap();
    assert!(seen.contains(name), "{seen}");
    assert_eq!(group.count(), 0);
    drop(group);
    assert!(!dir.exists(), "the cgroup of an ended call is removed");
}
