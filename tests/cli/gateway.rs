//! `nanobot gateway` / `nanobot serve` through the CLI (the gateway itself is tested in nanobot-gateway).

use std::process::Stdio;
use std::time::Duration;

use nanobot_testkit::MockLlm;
use nanobot_testkit::peers::{free_port, wait_for_http};

use crate::support::{nanobot, onboarded, run, stderr};

#[tokio::test(flavor = "multi_thread")]
async fn gateway_serves_health_and_stops_on_sigterm() {
    let mock = MockLlm::start_background();
    let home = onboarded(&mock);
    let (ops, api) = (free_port().unwrap(), free_port().unwrap());
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(home.config_path()).unwrap()).unwrap();
    config["gateway"]["host"] = "127.0.0.1".into();
    config["gateway"]["port"] = ops.into();
    config["api"]["host"] = "127.0.0.1".into();
    config["api"]["port"] = api.into();
    home.write_config(&config);
    let mut child = nanobot(home.home())
        .args(["gateway", "--api"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let ready = wait_for_http(&format!("http://127.0.0.1:{ops}/health"), Duration::from_secs(60)).await;
    let models = wait_for_http(
        &format!("http://127.0.0.1:{api}/v1/models"),
        Duration::from_secs(60),
    )
    .await;
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let out = tokio::task::spawn_blocking(move || {
        let _ = child.stdin.take();
        child.wait_with_output()
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(ready.unwrap(), 200);
    assert_eq!(models.unwrap(), 200);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn serve_refuses_a_public_bind_without_a_key() {
    let mock = MockLlm::start_background();
    let home = onboarded(&mock);
    let port = free_port().unwrap().to_string();
    let o = run(home.home(), &["serve", "--host", "0.0.0.0", "--port", &port]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("apiKey"), "{}", stderr(&o));
}

#[test]
fn gateway_without_config_says_run_onboard() {
    let home = nanobot_testkit::TempHome::new();
    let o = run(home.home(), &["gateway"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("nanobot onboard"), "{}", stderr(&o));
}
