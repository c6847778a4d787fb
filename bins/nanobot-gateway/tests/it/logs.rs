//! `nanobot-gateway 2>file`: the filter comes from `NANOBOT_LOG`, and a file gets no ANSI colour codes even when
//! `TERM` says colour and `NO_COLOR` is unset (stderr is not a terminal).

use std::process::{Command, Stdio};
use std::time::Duration;

use nanobot_testkit::peers::{ChildGuard, free_port, wait_for_http};
use nanobot_testkit::{MockLlm, TempHome, WireFormat};
use serde_json::json;

/// The text of the rotated log files in `<data dir>/logs/`.
fn data_dir_logs(home: &TempHome) -> String {
    let dir = home.nanobot_dir().join("logs");
    let mut text = String::new();
    for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(nanobot_logging::FILE_PREFIX) {
            text.push_str(&std::fs::read_to_string(entry.path()).unwrap_or_default());
        }
    }
    text
}

/// Starts the gateway with `vars` (stderr to a file), waits until it is healthy and (when `want_file`) until
/// its log file in `<data dir>/logs/` has a line, stops it; returns stderr's file and the log files' text.
async fn gateway_logs(vars: &[(&str, &str)], want_file: bool) -> (String, String) {
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
    if want_file {
        // The file writer runs on its own thread: wait (bounded) for its first line.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !data_dir_logs(&home).contains(" INFO ") {
            assert!(
                std::time::Instant::now() < deadline,
                "no INFO line in {}/logs within 30 s; stderr:\n{}",
                home.nanobot_dir().display(),
                show_log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    drop(guard);
    (show_log(), data_dir_logs(&home))
}

async fn gateway_log(vars: &[(&str, &str)]) -> String {
    gateway_logs(vars, false).await.0
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lines_also_go_to_rotated_files_in_the_data_dir_without_colour() {
    nanobot_testkit::install_ring();
    let (stderr, files) = gateway_logs(&[], true).await;
    assert!(stderr.contains(" INFO "), "stderr keeps the lines:\n{stderr}");
    assert!(files.contains(" INFO "), "{files}");
    assert!(!files.contains('\u{1b}'), "ANSI codes in the log file: {files:?}");
}
