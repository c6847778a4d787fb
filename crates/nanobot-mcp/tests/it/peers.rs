//! Finding and running the peer programs the tests talk to.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nanobot_mcp::{McpOptions, RawServer, ServerSpec};
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

/// A free port on 127.0.0.1.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A peer process, killed and reaped on drop.
pub struct Peer(Child);

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `node <entry> <mode>` with `PORT=port` and waits until the port accepts connections.
pub fn start_http_peer(entry: &Path, mode: &str, port: u16) -> Peer {
    let child = Command::new("node")
        .arg(entry)
        .arg(mode)
        .env("PORT", port.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let peer = Peer(child);
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "{mode} server did not open port {port}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    peer
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
