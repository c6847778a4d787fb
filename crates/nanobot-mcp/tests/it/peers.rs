//! Finding and running the peer programs the tests talk to.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use nanobot_mcp::{McpOptions, RawServer, ServerSpec};
use nanobot_testkit::peers::ChildGuard;
use nanobot_tools::ToolContext;
use nanobot_tools::ssrf::SsrfGuard;

/// `.ci/.peers/node/node_modules/<pkg>/dist/index.js`, or `None` (after printing why) when it is
/// not installed. With `CI` set, a missing peer fails the test instead.
pub fn npm_server(pkg: &str) -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.ci/.peers/node/node_modules");
    let entry = root.join(pkg).join("dist/index.js");
    let node_ok = Command::new("node")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if entry.is_file() && node_ok {
        return Some(entry);
    }
    let what = if node_ok { pkg } else { "node" };
    if std::env::var_os("CI").is_some() {
        panic!("{what} not installed (run scripts/install-peers.sh)");
    }
    eprintln!("skipped: {what} not installed (run scripts/install-peers.sh)");
    None
}

/// The stdio build of the test server (`examples/stdio_test_server.rs`, built by `cargo test`).
pub fn stdio_test_server() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    let path = dir.join("examples/stdio_test_server");
    assert!(
        path.is_file(),
        "{} missing: run `cargo test -p nanobot-mcp`",
        path.display()
    );
    path
}

/// Starts `node <entry> <mode>` with `PORT` set to a free port and waits until it listens there (started again on
/// another port if it ends first); killed with its process group when the guard is dropped.
pub async fn start_http_peer(entry: &Path, mode: &str) -> (ChildGuard, u16) {
    nanobot_testkit::peers::spawn_listening(mode, Duration::from_secs(30), |port| {
        let mut cmd = Command::new("node");
        cmd.arg(entry)
            .arg(mode)
            .env("PORT", port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        cmd
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}"))
}

/// The real parent environment (tests may read it; they never change it).
pub fn parent_env() -> nanobot_util::EnvMap {
    std::env::vars().collect()
}

/// Options for local servers: real env, 127.0.0.1 whitelisted, media into `media`.
pub fn local_options(media: Option<&Path>) -> McpOptions {
    McpOptions {
        parent_env: parent_env(),
        media_dir: media.map(Path::to_path_buf),
        ssrf: SsrfGuard::from_cidrs(&["127.0.0.1/32"]).unwrap(),
        connect_timeout: Duration::from_secs(60),
        ..McpOptions::default()
    }
}

pub fn spec(name: &str, raw: RawServer) -> ServerSpec {
    ServerSpec::resolve(name, raw).unwrap()
}

pub fn ctx() -> ToolContext {
    ToolContext::new(std::env::temp_dir())
}

/// PIDs of live processes whose command line contains `needle`.
pub fn processes_with(needle: &str) -> Vec<u32> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if cmdline.contains(needle) {
                found.push(pid);
            }
        }
    }
    found
}
