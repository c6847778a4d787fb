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
