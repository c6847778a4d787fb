//! What egress by domain costs a request: one `curl` fetching N URLs from a loopback server straight, and the same
//! inside a bubblewrap sandbox without network whose only way out is the bridge and nanobot's proxy; the start of
//! such a sandbox with its bridge is timed apart and left out. Run by `benches/egress.sh`; prints one JSON line.
//!
//! Usage: egress_bench <bridge program> [requests per round, 500] [rounds, 7]

#![allow(
    clippy::unwrap_used,
    reason = "a benchmark program stops at its first failure"
)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nanobot_testkit::host_echo::{HostEcho, TestDns};
use nanobot_tools::egress::{self, DomainList, EgressProxy};
use nanobot_tools::ssrf::SsrfGuard;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn run(cmd: &mut Command) -> Duration {
    let started = Instant::now();
    let status = cmd.stdout(Stdio::null()).stderr(Stdio::null()).status();
    let took = started.elapsed();
    assert!(status.is_ok_and(|s| s.success()), "{cmd:?} failed");
    took
}

fn sandboxed(bwrap: &Path, dir: &Path, bridge: &Path, proxy: &EgressProxy, command: &[String]) -> Command {
    let mut cmd = Command::new(bwrap);
    cmd.args([
        "--unshare-user",
        "--unshare-net",
        "--die-with-parent",
        "--ro-bind",
        "/",
        "/",
    ])
    .args(["--dev", "/dev", "--proc", "/proc", "--bind"])
    .arg(dir)
    .arg(dir)
    .arg("--")
    .args(egress::bridge_argv(bridge, proxy.socket()))
    .args(command)
    .env_clear()
    .env("PATH", std::env::var("PATH").unwrap_or_default())
    .envs(egress::proxy_env());
    cmd
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(bridge) = args.get(1).map(Path::new) else {
        eprintln!("usage: egress_bench <bridge program> [requests] [rounds]");
        std::process::exit(2);
    };
    let n: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(500);
    let rounds: usize = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(7);
    let bwrap = match &nanobot_tools::confine::kernel_support().bwrap {
        Ok(b) => b.clone(),
        Err(why) => {
            eprintln!("egress_bench: bubblewrap cannot run here: {why}");
            std::process::exit(1);
        }
    };
    let server = HostEcho::start();
    let port = server.port();
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path().canonicalize().unwrap();
    let guard = SsrfGuard::from_cidrs(&["127.0.0.1/32"])
        .unwrap()
        .with_resolver(Arc::new(TestDns));
    let proxy =
        EgressProxy::start(&dir.join("egress.sock"), DomainList::new(&["bench.test"]), guard).unwrap();
    let urls: Vec<String> = (0..n).map(|i| format!("http://bench.test:{port}/{i}")).collect();
    let mut direct_cmd = vec![
        "curl".to_owned(),
        "-s".to_owned(),
        "--noproxy".to_owned(),
        "*".to_owned(),
        "--resolve".to_owned(),
        format!("bench.test:{port}:127.0.0.1"),
    ];
    direct_cmd.extend(urls.iter().cloned());
    let mut proxied_cmd = vec!["curl".to_owned(), "-s".to_owned()];
    proxied_cmd.extend(urls.iter().cloned());
    let (mut direct, mut proxied, mut start) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        direct.push(run(Command::new(&direct_cmd[0]).args(&direct_cmd[1..])));
        proxied.push(run(&mut sandboxed(&bwrap, &dir, bridge, &proxy, &proxied_cmd)));
        start.push(run(&mut sandboxed(
            &bwrap,
            &dir,
            bridge,
            &proxy,
            &["true".to_owned()],
        )));
    }
    let (direct, proxied, start) = (median(direct), median(proxied), median(start));
    let per_request = proxied.saturating_sub(start).saturating_sub(direct) / u32::try_from(n).unwrap_or(1);
    let seen = server.request_lines().len();
    assert_eq!(seen, 2 * n * rounds, "every request reached the server");
    println!(
        "{{\"requests\": {n}, \"rounds\": {rounds}, \"direct_ms\": {:.2}, \"proxied_ms\": {:.2}, \
         \"sandbox_start_ms\": {:.2}, \"per_request_us\": {:.1}}}",
        direct.as_secs_f64() * 1e3,
        proxied.as_secs_f64() * 1e3,
        start.as_secs_f64() * 1e3,
        per_request.as_secs_f64() * 1e6
    );
}
