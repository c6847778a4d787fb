//! `nanobot gateway` / `nanobot serve` through the CLI (the gateway itself is tested in nanobot-gateway).

use std::process::Stdio;
use std::time::Duration;

use nanobot_testkit::MockLlm;
use nanobot_testkit::peers::{free_port, wait_for_http};

use crate::support::{nanobot, onboarded, run, stderr, terminate};

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
    let child = nanobot(home.home())
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
    let out = terminate(child).await;
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

/// `gateway --background`, `status`, `logs`, `stop` (0.3.5's): the record in `run/gateway.json` is one the
/// Python nanobot reads too.
#[test]
fn a_background_gateway_is_started_reported_and_stopped_with_no_process_left() {
    let mock = MockLlm::start_background();
    let home = onboarded(&mock);
    let ops = free_port().unwrap();
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(home.config_path()).unwrap()).unwrap();
    config["gateway"]["host"] = "127.0.0.1".into();
    config["gateway"]["port"] = ops.into();
    home.write_config(&config);
    let text = |o: &std::process::Output| String::from_utf8_lossy(&o.stdout).into_owned();

    let o = run(home.home(), &["gateway", "status"]);
    assert!(
        text(&o).starts_with("Running: no\nReason: not_started"),
        "{}",
        text(&o)
    );
    let o = run(home.home(), &["gateway", "--background"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", text(&o), stderr(&o));
    assert!(
        text(&o).starts_with("Gateway started in the background.\nRunning: yes"),
        "{}",
        text(&o)
    );
    let state_path = home.nanobot_dir().join("run/gateway.json");
    let state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&state_path).unwrap()).unwrap();
    let pid = state["pid"].as_i64().unwrap();
    assert_eq!(state["port"], ops);
    assert_eq!(state["launch_mode"], "background");

    // A second start finds it; status reports it; its output is in the log.
    let o = run(home.home(), &["gateway", "--background"]);
    assert!(text(&o).starts_with("Gateway is already running"), "{}", text(&o));
    let o = run(home.home(), &["gateway", "status"]);
    assert!(
        text(&o).contains(&format!("PID: {pid}\nPort: {ops}")),
        "{}",
        text(&o)
    );
    let o = run(home.home(), &["gateway", "logs", "--no-follow", "--tail", "50"]);
    assert!(!text(&o).trim().is_empty(), "the log has the gateway's output");

    // The Python nanobot reads the same record.
    if let Some(python) = crate::compat_python::python_nanobot() {
        let mut cmd = std::process::Command::new(python);
        cmd.args(["gateway", "status"])
            .env_clear()
            .env("HOME", home.home())
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("NO_COLOR", "1")
            .env("COLUMNS", "200");
        let o = crate::compat_python::bounded(cmd, "python nanobot gateway status");
        assert!(text(&o).contains("Running: yes"), "{}{}", text(&o), stderr(&o));
        assert!(text(&o).contains(&format!("PID: {pid}")), "{}", text(&o));
    }

    let o = run(home.home(), &["gateway", "stop", "--timeout", "30"]);
    assert!(
        text(&o).starts_with("Gateway stopped.\nRunning: no"),
        "{}{}",
        text(&o),
        stderr(&o)
    );
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists() || {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            stat.contains(") Z ")
        },
        "the gateway process is gone"
    );
    assert!(!state_path.exists());
    let o = run(home.home(), &["gateway", "stop"]);
    assert!(
        text(&o).starts_with("Gateway was not stopped: gateway_not_running"),
        "{}",
        text(&o)
    );
    assert_eq!(o.status.code(), Some(0));
    let o = run(home.home(), &["gateway", "restart"]);
    assert_ne!(o.status.code(), Some(0), "nothing to restart");
    assert!(text(&o).contains("nothing to restart"), "{}", text(&o));
}
