//! `nanobot webui`: starts the gateway with the websocket channel and opens `$BROWSER` on the page; a second run
//! finds it running and only opens the browser.

use std::io::Read as _;
use std::process::Stdio;
use std::time::Duration;

use nanobot_testkit::MockLlm;
use nanobot_testkit::peers::{free_port, wait_for_http};

use crate::support::{nanobot, onboarded, run, stderr, stdout, terminate};

/// A `$BROWSER` that writes the URL it was given into a FIFO the test reads (so the test waits on the browser
/// being started, not on time).
fn fake_browser(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let fifo = dir.join("opened");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let script = dir.join("browser.sh");
    std::fs::write(
        &script,
        format!("#!/bin/sh\nprintf '%s\\n' \"$1\" > '{}'\n", fifo.display()),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    (script, fifo)
}

async fn read_fifo(fifo: std::path::PathBuf) -> String {
    let read = tokio::task::spawn_blocking(move || {
        let mut s = String::new();
        std::fs::File::open(fifo).unwrap().read_to_string(&mut s).unwrap();
        s
    });
    tokio::time::timeout(Duration::from_secs(60), read)
        .await
        .expect("the browser was started")
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn webui_starts_the_channel_and_opens_the_browser() {
    let mock = MockLlm::start_background();
    let home = onboarded(&mock);
    let (port, ops) = (free_port().unwrap(), free_port().unwrap());
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(home.config_path()).unwrap()).unwrap();
    config["api"]["port"] = free_port().unwrap().into();
    home.write_config(&config);
    let tmp = tempfile::tempdir().unwrap();
    let (browser, fifo) = fake_browser(tmp.path());

    let child = nanobot(home.home())
        .args([
            "webui",
            "-p",
            &port.to_string(),
            "--gateway-port",
            &ops.to_string(),
        ])
        .env("BROWSER", &browser)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let opened = read_fifo(fifo.clone()).await;
    assert_eq!(opened.trim(), format!("http://127.0.0.1:{port}/"));
    let page = wait_for_http(opened.trim(), Duration::from_secs(30)).await;
    let health = wait_for_http(&format!("http://127.0.0.1:{ops}/health"), Duration::from_secs(30)).await;

    // A second `nanobot webui` finds the running one and only opens the browser.
    let again = tokio::task::spawn_blocking({
        let home = home.home().to_path_buf();
        let browser = browser.clone();
        move || {
            nanobot(&home)
                .args(["webui", "-p", &port.to_string()])
                .env("BROWSER", &browser)
                .output()
                .unwrap()
        }
    });
    let opened_again = read_fifo(fifo).await;
    let again = tokio::time::timeout(Duration::from_secs(60), again)
        .await
        .unwrap()
        .unwrap();

    let out = terminate(child).await;
    assert_eq!(page.unwrap(), 200);
    assert_eq!(health.unwrap(), 200);
    assert_eq!(opened_again.trim(), opened.trim());
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    assert!(stdout(&again).contains("already running"), "{}", stdout(&again));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("WebUI: http://127.0.0.1:{port}/")));
}

#[test]
fn webui_refuses_flags_it_cannot_honour() {
    let mock = MockLlm::start_background();
    let home = onboarded(&mock);
    for flag in ["--dev", "--background"] {
        let o = run(home.home(), &["webui", flag, "--no-open"]);
        assert_eq!(o.status.code(), Some(2), "{flag}: {}", stderr(&o));
    }
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(home.config_path()).unwrap()).unwrap();
    config["channels"]["websocket"] = serde_json::json!({"host": "0.0.0.0"});
    home.write_config(&config);
    let o = run(home.home(), &["webui", "--no-open"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("not a loopback address"), "{}", stderr(&o));
}
