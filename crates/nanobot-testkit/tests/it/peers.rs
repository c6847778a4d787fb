//! Peer discovery, the skip-or-fail rule, ChildGuard and readiness waits.

use std::io::BufRead;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nanobot_testkit::peers::{self, ChildGuard};
use nanobot_testkit::{MockLlm, TempHome};

#[test]
fn repo_root_is_the_workspace() {
    let root = peers::repo_root().unwrap();
    assert!(
        std::fs::read_to_string(root.join("Cargo.toml"))
            .unwrap()
            .contains("[workspace]")
    );
    assert!(root.join("crates").join("nanobot-testkit").is_dir());
    assert_eq!(peers::peers_dir().unwrap(), root.join(".ci/.peers"));
    assert_eq!(
        peers::workspace_root_from(&root.join("crates/nanobot-testkit/src")).unwrap(),
        root
    );
}

#[test]
fn workspace_root_needs_a_workspace_table() {
    let home = TempHome::new();
    home.write_home_file("Cargo.toml", "[package]\nname = \"x\"\n");
    assert_eq!(peers::workspace_root_from(home.home()), None);
    home.write_home_file("Cargo.toml", "[workspace]\nmembers = []\n");
    assert_eq!(
        peers::workspace_root_from(&home.workspace()).as_deref(),
        Some(home.home())
    );
}

#[test]
fn missing_packages_are_none() {
    assert_eq!(peers::node_package("definitely-not-installed-pkg-xyz"), None);
    assert_eq!(peers::venv_exe("definitely-not-installed-exe-xyz"), None);
    assert!(peers::which("sh").is_some());
}

#[test]
fn require_skips_outside_ci() {
    assert_eq!(peers::require_with::<u8>("missing-peer", None, false), None);
    assert_eq!(
        peers::require_with("present", Some(Path::new("/x")), true),
        Some(Path::new("/x"))
    );
}

#[test]
#[should_panic(expected = "missing-peer not installed but CI is set")]
fn require_fails_on_ci() {
    peers::require_with::<u8>("missing-peer", None, true);
}

fn is_dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

#[test]
fn child_guard_kills_the_whole_group_on_drop() {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "sleep 600 & echo $!; wait"])
        .stdout(Stdio::piped());
    let mut guard = ChildGuard::spawn("sleeper", &mut cmd).unwrap();
    let sh_pid = guard.id().unwrap();
    let stdout = guard.std_child_mut().unwrap().stdout.take().unwrap();
    let mut line = String::new();
    std::io::BufReader::new(stdout).read_line(&mut line).unwrap();
    let grandchild: u32 = line.trim().parse().unwrap();
    assert!(!is_dead(grandchild));
    assert!(!guard.has_exited());
    drop(guard);
    assert!(is_dead(sh_pid));
    // SIGKILL delivery to the grandchild is asynchronous: poll its state with a bounded deadline.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !is_dead(grandchild) && Instant::now() < deadline {
        std::thread::yield_now();
    }
    assert!(is_dead(grandchild), "grandchild {grandchild} survived");
}

#[tokio::test]
async fn tokio_child_guard_and_readiness() {
    let mut cmd = tokio::process::Command::new("sleep");
    cmd.arg("600");
    let guard = ChildGuard::spawn_tokio("sleep", &mut cmd).unwrap();
    let pid = guard.id().unwrap();
    assert_eq!(guard.name(), "sleep");
    drop(guard);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !is_dead(pid) && Instant::now() < deadline {
        tokio::task::yield_now().await;
    }
    assert!(is_dead(pid));

    let mock = MockLlm::start().await;
    peers::wait_for_port(&mock.addr().to_string(), Duration::from_secs(10))
        .await
        .unwrap();
    let status = peers::wait_for_http(
        &format!("{}/models", mock.openai_base_url()),
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    assert_eq!(status, 200);
    let port = peers::free_port().unwrap();
    let err = peers::wait_for_port(&format!("127.0.0.1:{port}"), Duration::from_millis(200))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("did not accept connections"));
}

#[test]
fn a_leader_seen_ended_has_its_group_killed_then_and_is_not_signalled_again() {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "sleep 600 & echo $!"]).stdout(Stdio::piped());
    let mut guard = ChildGuard::spawn("leaves-a-child", &mut cmd).unwrap();
    let stdout = guard.std_child_mut().unwrap().stdout.take().unwrap();
    let mut line = String::new();
    std::io::BufReader::new(stdout).read_line(&mut line).unwrap();
    let grandchild: u32 = line.trim().parse().unwrap();
    // The leader ends on its own; its group lives on in the grandchild until the guard sees the end.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !guard.has_exited() && Instant::now() < deadline {
        std::thread::yield_now();
    }
    assert!(guard.has_exited());
    assert!(
        guard.report().contains("leaves-a-child has exited"),
        "{}",
        guard.report()
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !is_dead(grandchild) && Instant::now() < deadline {
        std::thread::yield_now();
    }
    assert!(
        is_dead(grandchild),
        "grandchild {grandchild} outlived its leader's end"
    );
    // Killing (and dropping) afterwards signals nothing: the number may be another process's by now.
    guard.kill();
    assert!(guard.has_exited());
}

/// A command that listens on `port` until killed.
fn listener(port: u16) -> Command {
    let mut cmd = Command::new("python3");
    cmd.args([
        "-c",
        "import socket, sys, time\ns = socket.socket()\ns.bind(('127.0.0.1', int(sys.argv[1])))\ns.listen()\ntime.sleep(600)",
        &port.to_string(),
    ]);
    cmd
}

/// A command that ends at once, saying why on stderr.
fn ends_at_once() -> Command {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "echo 'address already in use' >&2; exit 3"]);
    cmd
}

#[tokio::test]
async fn a_peer_that_ends_before_listening_is_started_again_on_another_port() {
    let mut ports = Vec::new();
    let (mut guard, port) = peers::spawn_listening("flaky", Duration::from_secs(20), |port| {
        ports.push(port);
        if ports.len() == 1 {
            ends_at_once()
        } else {
            listener(port)
        }
    })
    .await
    .unwrap();
    assert_eq!(ports.len(), 2, "{ports:?}");
    assert_eq!(port, ports[1]);
    assert_ne!(ports[0], ports[1]);
    let report = guard.report();
    assert!(
        report.contains("flaky (pid") && report.contains("is running"),
        "{report}"
    );
    assert!(report.contains("its stderr is empty"), "{report}");
    tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
}

#[tokio::test]
async fn a_peer_that_never_listens_is_named_with_its_last_words() {
    let mut calls = 0;
    let err = peers::spawn_listening("broken", Duration::from_secs(20), |_| {
        calls += 1;
        ends_at_once()
    })
    .await
    .unwrap_err()
    .to_string();
    assert_eq!(calls, 3);
    assert!(err.starts_with("broken did not start (3 attempts)"), "{err}");
    assert!(err.contains("address already in use"), "{err}");
    assert!(err.contains("exit status: 3"), "{err}");
}
