//! What egress by domain costs a request: one `curl` fetching N URLs from a loopback server straight, and the same
//! inside a bubblewrap sandbox without network whose only way out is the bridge and nanobot's proxy; the start of
//! such a sandbox with its bridge is timed apart and left out. Then the same over HTTPS with a credential granted
//! to the server's domain (`tools.secrets`): the proxy opens each connection, puts the value in and masks the
//! answer. Run by `benches/egress.sh`; prints one JSON line.
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

use nanobot_testkit::host_echo::{HostEcho, TestDns, TlsEcho};
use nanobot_tools::egress::{self, Credentials, DomainList, EgressProxy, Grant, TrustedRoots};
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

fn sandboxed(
    bwrap: &Path,
    dir: &Path,
    bridge: &Path,
    proxy: &EgressProxy,
    env: &[(String, String)],
    command: &[String],
) -> Command {
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
    .envs(egress::proxy_env())
    .envs(env.iter().cloned());
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
        proxied.push(run(&mut sandboxed(
            &bwrap,
            &dir,
            bridge,
            &proxy,
            &[],
            &proxied_cmd,
        )));
        start.push(run(&mut sandboxed(
            &bwrap,
            &dir,
            bridge,
            &proxy,
            &[],
            &["true".to_owned()],
        )));
    }
    let (direct, proxied, start) = (median(direct), median(proxied), median(start));
    let per = |total: Duration, base: Duration| {
        total.saturating_sub(start).saturating_sub(base) / u32::try_from(n).unwrap_or(1)
    };
    let per_request = per(proxied, direct);
    let seen = server.request_lines().len();
    assert_eq!(seen, 2 * n * rounds, "every request reached the server");

    // HTTPS with a credential: straight (trusting the server's CA), then through the proxy, which opens each
    // connection (its own CA, trusted inside through the bundle) and puts the credential in.
    let tls = TlsEcho::start(&["bench.test"]);
    let tls_port = tls.port();
    let ca_file = dir.join("server-ca.pem");
    std::fs::write(&ca_file, tls.ca_pem()).unwrap();
    let upstream = tls.client_config();
    let ca = tls.ca();
    let trusted: TrustedRoots = Arc::new(move || Ok(Arc::new(vec![ca.clone()])));
    let credentials = Arc::new(Credentials::new(
        vec![Grant::new(
            "TOKEN",
            nanobot_util::secret::Secret::new("bench-credential-0123456789"),
            DomainList::new(&["bench.test"]),
        )],
        &upstream,
        trusted,
    ));
    let bundle = dir.join("bundle.pem");
    std::fs::write(&bundle, &*credentials.bundle().unwrap()).unwrap();
    let granted = EgressProxy::start_with(
        &dir.join("granted.sock"),
        DomainList::new(&["bench.test"]),
        SsrfGuard::from_cidrs(&["127.0.0.1/32"])
            .unwrap()
            .with_resolver(Arc::new(TestDns)),
        Some(credentials.clone()),
    )
    .unwrap();
    let env = credentials.env(&bundle);
    let https: Vec<String> = (0..n)
        .map(|i| format!("https://bench.test:{tls_port}/{i}"))
        .collect();
    let mut https_direct = vec![
        "curl".to_owned(),
        "-s".to_owned(),
        "--noproxy".to_owned(),
        "*".to_owned(),
        "--cacert".to_owned(),
        ca_file.display().to_string(),
        "--resolve".to_owned(),
        format!("bench.test:{tls_port}:127.0.0.1"),
        "-H".to_owned(),
        "Authorization: Bearer bench-credential-0123456789".to_owned(),
    ];
    https_direct.extend(https.iter().cloned());
    let placeholder = credentials.grants()[0].placeholder().to_owned();
    let mut https_granted = vec![
        "curl".to_owned(),
        "-s".to_owned(),
        "-H".to_owned(),
        format!("Authorization: Bearer {placeholder}"),
    ];
    https_granted.extend(https.iter().cloned());
    let (mut tls_direct, mut tls_granted) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        tls_direct.push(run(Command::new(&https_direct[0]).args(&https_direct[1..])));
        tls_granted.push(run(&mut sandboxed(
            &bwrap,
            &dir,
            bridge,
            &granted,
            &env,
            &https_granted,
        )));
    }
    let (tls_direct, tls_granted) = (median(tls_direct), median(tls_granted));
    let per_credential_request = per(tls_granted, tls_direct);
    let heads = tls.heads();
    assert_eq!(
        heads
            .matches("Authorization: Bearer bench-credential-0123456789")
            .count(),
        2 * n * rounds,
        "every request reached the server with the credential"
    );
    println!(
        "{{\"requests\": {n}, \"rounds\": {rounds}, \"direct_ms\": {:.2}, \"proxied_ms\": {:.2}, \
         \"sandbox_start_ms\": {:.2}, \"per_request_us\": {:.1}, \"https_direct_ms\": {:.2}, \
         \"https_credential_ms\": {:.2}, \"per_credential_request_us\": {:.1}}}",
        direct.as_secs_f64() * 1e3,
        proxied.as_secs_f64() * 1e3,
        start.as_secs_f64() * 1e3,
        per_request.as_secs_f64() * 1e6,
        tls_direct.as_secs_f64() * 1e3,
        tls_granted.as_secs_f64() * 1e3,
        per_credential_request.as_secs_f64() * 1e6
    );
}
