//! `doctor` runs what `agent` and `gateway` run on the config: whatever they refuse, it reports with the file,
//! the line and the field. A UTF-8 byte-order mark in `config.json` is accepted by all of them.

use nanobot_testkit::TempHome;

use crate::support::{nanobot, run, stderr, stdout};

/// Writes `text` as the config file (byte for byte).
fn write_raw(home: &TempHome, text: &str) {
    std::fs::create_dir_all(home.config_path().parent().unwrap()).unwrap();
    std::fs::write(home.config_path(), text).unwrap();
}

/// `nanobot doctor` in `home`, with a provider key set.
fn doctor(home: &TempHome) -> std::process::Output {
    nanobot(home.home())
        .env("ANTHROPIC_API_KEY", "sk-ant-x")
        .arg("doctor")
        .output()
        .unwrap()
}

fn onboarded_config(home: &TempHome) -> serde_json::Value {
    assert!(run(home.home(), &["onboard"]).status.success());
    serde_json::from_str(&std::fs::read_to_string(home.config_path()).unwrap()).unwrap()
}

#[test]
fn doctor_reports_what_agent_refuses_with_file_line_and_field() {
    let home = TempHome::new();
    let mut config = onboarded_config(&home);
    config["agents"]["defaults"]["timezone"] = "Mars/Olympus_Mons".into();
    let text = serde_json::to_string_pretty(&config).unwrap();
    write_raw(&home, &text);
    let line = text.lines().position(|l| l.contains("\"timezone\"")).unwrap() + 1;

    let agent = nanobot(home.home())
        .env("ANTHROPIC_API_KEY", "sk-ant-x")
        .args(["agent", "-m", "hi"])
        .output()
        .unwrap();
    assert!(!agent.status.success(), "agent must refuse the config");
    assert!(
        stderr(&agent).contains("agents.defaults.timezone"),
        "{}",
        stderr(&agent)
    );

    let o = doctor(&home);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(!out.contains("No problems found"), "{out}");
    assert!(out.contains("agents.defaults.timezone"), "{out}");
    assert!(out.contains(&home.config_path().display().to_string()), "{out}");
    assert!(out.contains(&format!("line {line}")), "line {line}: {out}");
}

#[test]
fn doctor_reports_range_errors_with_file_line_and_field() {
    let home = TempHome::new();
    let mut config = onboarded_config(&home);
    config["api"]["limits"] = serde_json::json!({"maxConnectionsPerClient": 0});
    let text = serde_json::to_string_pretty(&config).unwrap();
    write_raw(&home, &text);
    let line = text
        .lines()
        .position(|l| l.contains("maxConnectionsPerClient"))
        .unwrap()
        + 1;
    for args in [&["doctor"][..], &["agent", "-m", "hi"][..], &["gateway"][..]] {
        let o = nanobot(home.home())
            .env("ANTHROPIC_API_KEY", "sk-ant-x")
            .args(args)
            .output()
            .unwrap();
        let all = format!("{}{}", stdout(&o), stderr(&o));
        assert!(!o.status.success(), "{args:?}: {all}");
        assert!(
            all.contains("api.limits.maxConnectionsPerClient"),
            "{args:?}: {all}"
        );
        assert!(all.contains(&format!("line {line}")), "{args:?}: {all}");
        assert!(
            all.contains(&home.config_path().display().to_string()),
            "{args:?}: {all}"
        );
    }
}

#[test]
fn a_byte_order_mark_in_config_json_is_accepted() {
    let home = TempHome::new();
    let config = onboarded_config(&home);
    let text = format!("\u{feff}{}", serde_json::to_string_pretty(&config).unwrap());
    write_raw(&home, &text);
    let o = nanobot(home.home()).arg("status").output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    let o = doctor(&home);
    let out = stdout(&o);
    assert!(out.contains("config loads"), "{out}");
    assert!(!out.contains("invalid JSON"), "{out}");
}

#[test]
fn doctor_checks_the_nats_bus_of_replicas() {
    let home = TempHome::new();
    let mut config = onboarded_config(&home);
    // Nobody listens there: a problem naming the server.
    let port = nanobot_testkit::peers::free_port().unwrap();
    config["gateway"]["bus"] = serde_json::json!({
        "kind": "nats",
        "nats": {"url": format!("nats://bot:sekrit@127.0.0.1:{port}"), "connectTimeoutS": 2}
    });
    write_raw(&home, &serde_json::to_string_pretty(&config).unwrap());
    let o = doctor(&home);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains(&format!("cannot connect to NATS at nats://127.0.0.1:{port}")),
        "{out}"
    );
    assert!(!out.contains("sekrit"), "never the password: {out}");

    // A real server: its version and the streams (not created by the check).
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let Some(server) = rt
        .block_on(nanobot_testkit::nats::NatsServer::start_open())
        .unwrap()
    else {
        return;
    };
    config["gateway"]["bus"]["nats"]["url"] = server.url().into();
    write_raw(&home, &serde_json::to_string_pretty(&config).unwrap());
    let o = doctor(&home);
    let out = stdout(&o);
    assert!(out.contains("gateway bus: NATS"), "{out}");
    assert!(out.contains("NANOBOT_IN (made by the first gateway)"), "{out}");
    assert!(out.contains("no lease held"), "{out}");
    // Debian's server as installed lets anyone publish: a problem, since gateways refuse it, with the fix.
    assert_eq!(o.status.code(), Some(1), "{out}");
    let line = out.lines().find(|l| l.contains("gateway bus: NATS")).unwrap();
    assert!(line.starts_with('✗'), "a problem: {line}");
    assert!(
        line.contains("OPEN: clients without credentials may publish") && line.contains("refuse to start"),
        "{line}"
    );
    // The user's explicit opt-in: still a warning, and the gateways start.
    config["gateway"]["bus"]["nats"]["allowAnonymous"] = true.into();
    write_raw(&home, &serde_json::to_string_pretty(&config).unwrap());
    let out = stdout(&doctor(&home));
    let line = out.lines().find(|l| l.contains("gateway bus: NATS")).unwrap();
    assert!(
        line.starts_with('!') && line.contains("start anyway"),
        "a warning: {line}"
    );
    config["gateway"]["bus"]["nats"]["allowAnonymous"] = false.into();

    // A server that wants a token, given it: no warning.
    let Some(guarded) = rt
        .block_on(nanobot_testkit::nats::NatsServer::start_with_token("tok-7f3a"))
        .unwrap()
    else {
        return;
    };
    config["gateway"]["bus"]["nats"]["url"] = guarded.url().into();
    config["gateway"]["bus"]["nats"]["token"] = "tok-7f3a".into();
    write_raw(&home, &serde_json::to_string_pretty(&config).unwrap());
    let o = doctor(&home);
    let out = stdout(&o);
    let line = out
        .lines()
        .find(|l| l.contains("gateway bus: NATS"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        line.starts_with('✓') && line.contains("clients without credentials are turned away"),
        "{line}"
    );
    assert!(!out.contains("tok-7f3a"), "never the token: {out}");
}
