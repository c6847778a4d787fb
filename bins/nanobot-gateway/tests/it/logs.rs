//! `nanobot-gateway 2>file`: the filter comes from `NANOBOT_LOG`, and a file gets no ANSI colour codes even when
//! `TERM` says colour and `NO_COLOR` is unset (stderr is not a terminal).

use std::process::{Command, Stdio};
use std::time::Duration;

use nanobot_testkit::peers::{ChildGuard, free_port, wait_for_http};
use nanobot_testkit::{MockLlm, TempHome, WireFormat};
use serde_json::json;

/// Starts the gateway with `vars` (stderr to a file), waits until it is healthy, stops it; returns the file.
async fn gateway_log(vars: &[(&str, &str)]) -> String {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    let http_port = free_port().unwrap();
    let mut cfg = mock.nanobot_config(WireFormat::OpenAi);
    cfg["agents"]["defaults"]["workspace"] = json!(home.workspace());
    cfg["gateway"] = json!({"host": "127.0.0.1", "port": http_port, "heartbeat": {"enabled": false}});
    let config = home.write_config(&cfg);
    let log = home.root().join("gateway.log");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_nanobot-gateway"));
    cmd.arg("-c")
        .arg(&config)
        .arg("--no-api")
        .env_clear()
        .envs(home.env())
        .env("TERM", "xterm-256color")
        .envs(vars.iter().copied())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    let guard = ChildGuard::spawn("nanobot-gateway", &mut cmd).unwrap();
    let show_log = || std::fs::read_to_string(&log).unwrap_or_default();
    wait_for_http(
        &format!("http://127.0.0.1:{http_port}/health"),
        Duration::from_secs(120),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", show_log()));
    drop(guard);
    show_log()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stderr_to_a_file_has_no_colour_and_nanobot_log_is_honoured() {
    nanobot_testkit::install_ring();
    let default = gateway_log(&[]).await;
    assert!(
        default.contains(" INFO "),
        "the default filter is info:\n{default}"
    );
    assert!(!default.contains('\u{1b}'), "ANSI codes in the file: {default:?}");
    let quiet = gateway_log(&[("NANOBOT_LOG", "error"), ("RUST_LOG", "debug")]).await;
    assert!(
        !quiet.contains(" INFO ") && !quiet.contains("DEBUG"),
        "NANOBOT_LOG=error wins:\n{quiet}"
    );
}
