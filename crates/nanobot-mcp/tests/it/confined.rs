//! Stdio servers confined as `exec` is (issue 48): an obedient server (the test server's `shell` tool runs what it
//! is told) tries to read nanobot's data directory, write where its config does not say, leave a process running
//! and signal nanobot; under each sandbox this machine has (bubblewrap and Landlock; with `CI` set a missing
//! bubblewrap fails the test), and a trusted server as the control.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use nanobot_mcp::{McpManager, McpOptions, RawServer, StdioConfinement};
use nanobot_tools::ExecSandbox;
use nanobot_tools::confine::kernel_support;
use serde_json::json;

use crate::peers::{self, ctx, local_options, processes_with, spec};

/// The sandboxes to test here.
fn backends() -> Vec<ExecSandbox> {
    let k = kernel_support();
    let mut out = Vec::new();
    match &k.bwrap {
        Ok(_) => out.push(ExecSandbox::Bwrap),
        Err(why) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI is set but bubblewrap cannot run here (.ci/run installs it): {why}"
            );
            println!("bubblewrap cases skipped: {why}");
        }
    }
    match &k.landlock {
        Ok(_) => out.push(ExecSandbox::Landlock),
        Err(why) => println!("Landlock cases skipped: {why}"),
    }
    out
}

/// A home with a data directory holding a secret, and directories a server's config names or does not.
struct Place {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl Place {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        for d in ["data/sessions", "named", "extra", "cwd", "outside"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::write(root.join("data/config.json"), r#"{"apiKey": "SEKRIT-KEY"}"#).unwrap();
        std::fs::write(root.join("data/sessions/telegram_1.jsonl"), "SEKRIT-CHAT\n").unwrap();
        Self { _dir: dir, root }
    }

    fn path(&self, p: &str) -> PathBuf {
        self.root.join(p)
    }

    /// The test server, named `t`, with one directory in its `args`, a `cwd` and a `writablePaths` entry.
    fn manager(&self, sandbox: ExecSandbox, trusted: bool) -> McpManager {
        let confinement = StdioConfinement {
            sandbox,
            hidden: vec![self.path("data")],
            state_dir: Some(self.path("data/mcp")),
            ..StdioConfinement::default()
        };
        let raw = RawServer {
            command: Some(peers::stdio_test_server().display().to_string()),
            args: vec![self.path("named").display().to_string()],
            cwd: Some(self.path("cwd")),
            writable_paths: vec![self.path("extra")],
            trusted,
            ..RawServer::default()
        };
        McpManager::new(
            vec![spec("t", raw)],
            McpOptions {
                confinement,
                ..local_options(None)
            },
        )
    }
}

async fn shell(manager: &McpManager, command: &str) -> String {
    let tools = manager.tools();
    let tool = tools
        .iter()
        .find(|t| t.name() == "mcp_t_shell")
        .expect("the shell tool");
    let out = tool.execute(json!({"command": command}), &ctx()).await.unwrap();
    out.text
}

/// Waits (bounded) until a process's command line contains `needle` (a process started in the background may not
/// have reached `exec` yet when the shell that started it answers).
fn appears(needle: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if !processes_with(needle).is_empty() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (bounded) until no process's command line contains `needle`.
fn gone(needle: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if processes_with(needle).is_empty() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test]
async fn a_confined_server_sees_no_data_dir_writes_only_what_its_config_names_and_leaves_nothing_behind() {
    for sandbox in backends() {
        let place = Place::new();
        let manager = place.manager(sandbox, false);
        let status = manager.connect().await;
        assert!(status[0].connected(), "{sandbox:?}: {:?}", status[0].state);

        // The data directory: not readable by any path, not listable.
        for read in [
            format!("cat {}", place.path("data/config.json").display()),
            format!("cat {}/../data/sessions/*", place.path("named").display()),
            format!("grep -r SEKRIT {}", place.root.display()),
        ] {
            let out = shell(&manager, &read).await;
            assert!(
                !out.contains("SEKRIT"),
                "{sandbox:?}: `{read}` read the data dir: {out}"
            );
        }
        let out = shell(&manager, &format!("ls -la {}", place.path("data").display())).await;
        assert!(
            !out.contains("config.json"),
            "{sandbox:?}: the data dir was listed: {out}"
        );

        // Writes: where its config says (args, writablePaths, cwd) and its own directory; nowhere else.
        for (dir, allowed) in [
            (place.path("named"), true),
            (place.path("extra"), true),
            (place.path("cwd"), true),
            (place.path("outside"), false),
            (place.path("data"), false),
            (place.path("data/sessions"), false),
        ] {
            let file = dir.join("written.txt");
            let out = shell(&manager, &format!("echo x > {}", file.display())).await;
            assert_eq!(
                file.exists(),
                allowed,
                "{sandbox:?}: writing {} (allowed: {allowed}): {out}",
                file.display()
            );
        }
        let out = shell(
            &manager,
            "echo x > \"$TMPDIR/t\" && echo tmp-ok; echo \"cache=$XDG_CACHE_HOME\"",
        )
        .await;
        assert!(out.contains("tmp-ok"), "{sandbox:?}: {out}");
        let own = place.path("data/mcp/t");
        assert!(
            out.contains(&format!("cache={}", own.join("cache").display())),
            "{sandbox:?}: caches go to the server's own directory: {out}"
        );
        let out = shell(&manager, "echo kept > \"$XDG_CACHE_HOME/c\" && echo cache-ok").await;
        assert!(out.contains("cache-ok"), "{sandbox:?}: {out}");
        assert!(
            own.join("cache/c").is_file(),
            "{sandbox:?}: its cache is kept between starts"
        );

        // Under bubblewrap nanobot is not visible to it (its own PID namespace).
        if sandbox == ExecSandbox::Bwrap {
            let out = shell(
                &manager,
                &format!("kill -0 {} && echo visible", std::process::id()),
            )
            .await;
            assert!(!out.contains("visible"), "{out}");
        }

        // Nothing it starts outlives it.
        let marker = format!(
            "{}",
            4000 + std::process::id() % 1000 + (sandbox == ExecSandbox::Bwrap) as u32
        );
        let out = shell(
            &manager,
            &format!("setsid sleep {marker} >/dev/null 2>&1 < /dev/null & echo started"),
        )
        .await;
        assert!(out.contains("started"), "{sandbox:?}: {out}");
        let needle = format!("sleep {marker}");
        assert!(appears(&needle), "{sandbox:?}: the background sleep runs");
        manager.shutdown().await;
        if sandbox == ExecSandbox::Bwrap {
            assert!(
                gone(&needle),
                "{sandbox:?}: a process the server left outlived it"
            );
        } else {
            // Landlock has no PID namespace: a process that left the server's group (setsid) can outlive it, as
            // docs/security.md says. Ended here so it does not outlive the test.
            for pid in processes_with(&needle) {
                let _ = std::process::Command::new("kill")
                    .arg("-9")
                    .arg(pid.to_string())
                    .status();
            }
        }
    }
}

#[tokio::test]
async fn a_trusted_server_runs_with_nanobots_rights() {
    let place = Place::new();
    let manager = place.manager(ExecSandbox::Auto, true);
    let status = manager.connect().await;
    assert!(status[0].connected(), "{:?}", status[0].state);
    let out = shell(
        &manager,
        &format!("cat {}", place.path("data/config.json").display()),
    )
    .await;
    assert!(out.contains("SEKRIT-KEY"), "{out}");
    let file = place.path("outside/written.txt");
    shell(&manager, &format!("echo x > {}", file.display())).await;
    assert!(file.exists());
    assert!(
        !place.path("data/mcp/t").exists(),
        "no directory of its own is made"
    );
    manager.shutdown().await;
}

#[test]
fn doctor_lines_say_how_each_server_runs() {
    let place = Place::new();
    let confinement = StdioConfinement {
        hidden: vec![place.path("data")],
        state_dir: Some(place.path("data/mcp")),
        ..StdioConfinement::default()
    };
    let server = |trusted| {
        spec(
            "t",
            RawServer {
                command: Some("srv".into()),
                args: vec![place.path("named").display().to_string()],
                trusted,
                ..RawServer::default()
            },
        )
    };
    use nanobot_mcp::confine::ConfinementOutcome;
    match confinement.describe(&server(false)).unwrap() {
        ConfinementOutcome::Confined(line) => {
            assert!(
                line.contains(&place.path("named").display().to_string()),
                "{line}"
            );
            assert!(
                line.contains(&place.path("data/mcp/t").display().to_string()),
                "{line}"
            );
            assert!(
                line.contains(&format!("hidden: {}", place.path("data").display())),
                "{line}"
            );
        }
        other => {
            assert!(std::env::var_os("CI").is_none(), "CI has a sandbox: {other:?}");
        }
    }
    assert!(matches!(
        confinement.describe(&server(true)),
        Some(ConfinementOutcome::Trusted(line)) if line.contains("tools.mcpServers.t.trusted")
    ));
    let none = StdioConfinement {
        sandbox: ExecSandbox::None,
        ..confinement
    };
    assert!(matches!(
        none.describe(&server(false)),
        Some(ConfinementOutcome::Weaker(line)) if line.contains("tools.exec.sandbox is \"none\"")
    ));
    let http = spec(
        "h",
        RawServer {
            url: Some("http://127.0.0.1:1/mcp".into()),
            ..RawServer::default()
        },
    );
    assert_eq!(none.describe(&http), None);
}

#[test]
fn a_relative_writable_path_is_refused_by_name() {
    let err = nanobot_mcp::ServerSpec::resolve(
        "t",
        RawServer {
            command: Some("srv".into()),
            writable_paths: vec!["data".into()],
            ..RawServer::default()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("writablePaths") && err.contains("not an absolute path"),
        "{err}"
    );
}

#[tokio::test]
async fn with_an_allow_list_a_server_reaches_only_those_domains_through_the_proxy() {
    if let Err(why) = &kernel_support().bwrap {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set but bubblewrap cannot run here: {why}"
        );
        println!("skipped: {why}");
        return;
    }
    let port = nanobot_testkit::host_echo::HostEcho::start().port();
    // A credential granted to a TLS server's domain: the server's commands get a placeholder, the request the
    // value.
    let tls = nanobot_testkit::host_echo::TlsEcho::start(&["api.granted.test"]);
    let place = Place::new();
    let guard = nanobot_tools::ssrf::SsrfGuard::from_cidrs(&["127.0.0.1/32"])
        .unwrap()
        .with_resolver(std::sync::Arc::new(nanobot_testkit::host_echo::TestDns));
    let mut egress = nanobot_tools::egress::EgressSettings::new(
        nanobot_tools::egress::DomainList::new(&["allowed.test", "granted.test"]),
        guard,
    );
    egress.bridge = Some(peers::stdio_test_server());
    let ca = tls.ca();
    let trusted: nanobot_tools::egress::TrustedRoots =
        std::sync::Arc::new(move || Ok(std::sync::Arc::new(vec![ca.clone()])));
    egress.credentials = Some(std::sync::Arc::new(nanobot_tools::egress::Credentials::new(
        vec![nanobot_tools::egress::Grant::new(
            "TOKEN",
            nanobot_util::secret::Secret::new("mcp-credential-0123456789"),
            nanobot_tools::egress::DomainList::new(&["api.granted.test"]),
        )],
        &tls.client_config(),
        trusted,
    )));
    let confinement = StdioConfinement {
        sandbox: ExecSandbox::Bwrap,
        hidden: vec![place.path("data")],
        state_dir: Some(place.path("data/mcp")),
        egress: Some(egress),
        ..StdioConfinement::default()
    };
    let raw = RawServer {
        command: Some(peers::stdio_test_server().display().to_string()),
        ..RawServer::default()
    };
    let manager = McpManager::new(
        vec![spec("t", raw)],
        McpOptions {
            confinement,
            ..local_options(None)
        },
    );
    let status = manager.connect().await;
    assert!(status[0].connected(), "{:?}", status[0].state);
    let out = shell(
        &manager,
        &format!(
            "curl -sS --max-time 10 http://allowed.test:{port}/; \
             curl -sS --max-time 10 http://evil.test:{port}/; \
             curl -sS --noproxy '*' --max-time 5 http://127.0.0.1:{port}/; echo \"direct=$?\"; \
             echo \"token=$TOKEN\"; \
             curl -sS --max-time 10 -H \"Authorization: Bearer $TOKEN\" https://api.granted.test:{}/mcp",
            tls.port()
        ),
    )
    .await;
    assert!(out.contains("token=nanobot_credential_TOKEN_"), "{out}");
    assert!(
        tls.heads()
            .contains("Authorization: Bearer mcp-credential-0123456789"),
        "{}",
        tls.heads()
    );
    // What the server sent back reached the MCP server masked.
    assert!(
        out.contains(&format!("Authorization: Bearer {}", "*".repeat(25))),
        "{out}"
    );
    assert!(!out.contains("mcp-credential-0123456789"), "{out}");
    assert!(out.contains(&format!("hello from allowed.test:{port}")), "{out}");
    assert!(
        out.contains("evil.test: it is not in tools.network.allowedDomains"),
        "{out}"
    );
    // The tool's answer says what the server was refused, whatever the server made of it.
    assert!(
        out.contains("\nNetwork: nanobot refused the connection to evil.test"),
        "{out}"
    );
    assert!(!out.contains("direct=0"), "{out}");
    manager.shutdown().await;
}
