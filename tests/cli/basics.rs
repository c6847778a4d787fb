//! Flags, messages and exit codes that need no model.

use nanobot_testkit::TempHome;

use crate::support::{nanobot, run, stderr, stdout};

#[test]
fn version_and_help_are_instant_and_need_no_config() {
    let home = TempHome::new();
    // A broken config must not matter: --version/--help never load it.
    home.write_config_str("{ not json");
    let o = run(home.home(), &["--version"]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(
        stdout(&o).trim(),
        format!("nanobot {}", env!("CARGO_PKG_VERSION"))
    );
    let o = run(home.home(), &["--help"]);
    assert_eq!(o.status.code(), Some(0));
    for cmd in [
        "onboard", "agent", "status", "doctor", "channels", "cron", "mcp", "eval",
    ] {
        assert!(stdout(&o).contains(cmd), "help lists {cmd}: {}", stdout(&o));
    }
    let o = run(home.home(), &["agent", "--help"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stdout(&o).contains("--no-markdown"));
}

#[test]
fn usage_errors_exit_2() {
    let home = TempHome::new();
    let o = run(home.home(), &["agent", "--bogus"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let o = run(home.home(), &["no-such-command"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn missing_config_says_run_onboard() {
    let home = TempHome::new();
    let o = run(home.home(), &["agent", "-m", "hi"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("nanobot onboard"), "{}", stderr(&o));
    assert!(stdout(&o).is_empty());
}

#[test]
fn config_errors_name_file_line_and_field() {
    let home = TempHome::new();
    let path = home.write_config_str(
        "{\n  \"agents\": {\n    \"defaults\": {\n      \"maxTokens\": \"lots\"\n    }\n  }\n}\n",
    );
    let o = run(home.home(), &["agent", "-m", "hi"]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(err.contains(&path.display().to_string()), "{err}");
    assert!(err.contains("line 4"), "{err}");
    assert!(err.contains("maxTokens"), "{err}");

    home.write_config_str("{\n  \"agents\": {,\n}");
    let o = run(home.home(), &["status"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("line 2"), "{}", stderr(&o));
}

#[test]
fn an_unknown_top_level_key_is_refused_like_python_does() {
    // nanobot 0.3.5 refuses the file ("Unknown setting."); so does nanobot-rs, naming the key and the file.
    let home = TempHome::new();
    let path = home.write_config_str("{\"agents\": {\"defaults\": {}}, \"agent\": {\"model\": \"x\"}}");
    let o = run(home.home(), &["status"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("unknown setting `agent`"), "{err}");
    assert!(err.contains(&path.display().to_string()), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn no_api_key_names_the_provider_and_the_variable() {
    let home = TempHome::new();
    assert!(run(home.home(), &["onboard"]).status.success());
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(home.config_path()).unwrap()).unwrap();
    config["agents"]["defaults"]["model"] = "openrouter/anthropic/claude-sonnet-4".into();
    home.write_config(&config);
    let o = run(home.home(), &["agent", "-m", "hi"]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(err.contains("openrouter"), "{err}");
    assert!(err.contains("providers.openrouter.apiKey"), "{err}");
    assert!(err.contains("OPENROUTER_API_KEY"), "{err}");
    // With the variable set, the key problem is gone (status shows the provider, never the key).
    let o = nanobot(home.home())
        .env("OPENROUTER_API_KEY", "sk-or-verysecret")
        .arg("status")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    assert!(stdout(&o).contains("Provider:  openrouter"), "{}", stdout(&o));
    assert!(stdout(&o).contains("env OPENROUTER_API_KEY"), "{}", stdout(&o));
    assert!(!stdout(&o).contains("verysecret"));
}

#[test]
fn onboard_writes_config_and_templates_and_refresh_keeps_values() {
    let home = TempHome::new();
    let o = run(home.home(), &["onboard"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = std::fs::read_to_string(home.config_path()).unwrap();
    assert!(text.contains("\"maxTokens\""));
    for f in [
        "AGENTS.md",
        "SOUL.md",
        "USER.md",
        "HEARTBEAT.md",
        "memory/MEMORY.md",
    ] {
        assert!(home.workspace().join(f).is_file(), "{f}");
    }
    // As 0.3.5: no TOOLS.md (the prompt does not read it).
    assert!(!home.workspace().join("TOOLS.md").exists());
    assert!(home.workspace().join("skills").is_dir());
    let mut config: serde_json::Value = serde_json::from_str(&text).unwrap();
    // As 0.3.5: a block per key-based provider, none for the OAuth ones (their login is a token file).
    assert!(config["providers"]["openrouter"].is_object());
    for oauth in ["githubCopilot", "openaiCodex", "xaiGrok"] {
        assert!(
            config["providers"].get(oauth).is_none(),
            "{oauth} written: {text}"
        );
    }
    config["agents"]["defaults"]["model"] = "deepseek/deepseek-chat".into();
    config["agents"]["defaults"]
        .as_object_mut()
        .unwrap()
        .remove("maxTokens");
    home.write_config(&config);
    std::fs::write(home.workspace().join("USER.md"), "I am Ada.").unwrap();
    let o = run(home.home(), &["onboard"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stdout(&o).contains("Refreshed"));
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(home.config_path()).unwrap()).unwrap();
    assert_eq!(config["agents"]["defaults"]["model"], "deepseek/deepseek-chat");
    assert_eq!(
        config["agents"]["defaults"]["maxTokens"], 8192,
        "new key added back"
    );
    assert_eq!(
        std::fs::read_to_string(home.workspace().join("USER.md")).unwrap(),
        "I am Ada."
    );
}

#[test]
fn onboard_with_explicit_config_and_workspace() {
    let home = TempHome::new();
    let cfg = home.root().join("alt/config.json");
    let ws = home.root().join("alt-ws");
    let o = run(
        home.home(),
        &["onboard", "-c", cfg.to_str().unwrap(), "-w", ws.to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(cfg.is_file());
    assert!(ws.join("AGENTS.md").is_file());
    let o = run(home.home(), &["status", "-c", cfg.to_str().unwrap()]);
    assert!(stdout(&o).contains(&ws.display().to_string()), "{}", stdout(&o));
}

#[test]
fn doctor_reports_problems_with_fixes() {
    let home = TempHome::new();
    assert!(run(home.home(), &["onboard"]).status.success());
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(home.config_path()).unwrap()).unwrap();
    config["channels"]["telegram"]["enabled"] = true.into();
    config["channels"]["telegram"]["token"] = "not-a-token".into();
    home.write_config(&config);
    let o = run(home.home(), &["doctor"]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    assert!(out.contains("telegram token does not look like"), "{out}");
    assert!(out.contains("fix:"), "{out}");
    assert!(out.contains("ANTHROPIC_API_KEY"), "{out}");
    assert!(!out.contains("not-a-token"), "tokens are never printed: {out}");

    let o = nanobot(home.home())
        .env("ANTHROPIC_API_KEY", "sk-ant-x")
        .args(["channels", "status"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    assert!(
        stdout(&o)
            .lines()
            .any(|l| l.starts_with("telegram") && l.contains('✓')),
        "{}",
        stdout(&o)
    );
}

#[test]
fn the_0_3_5_flags_of_onboard_and_serve_are_accepted() {
    let home = TempHome::new();
    let o = run(home.home(), &["onboard"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(home.config_path()).unwrap()).unwrap();
    config["agents"]["defaults"]["model"] = "my-own-model".into();
    home.write_config(&config);
    let o = run(home.home(), &["onboard", "--refresh"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let after: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(home.config_path()).unwrap()).unwrap();
    assert_eq!(
        after["agents"]["defaults"]["model"], "my-own-model",
        "--refresh keeps values"
    );
    let o = run(home.home(), &["serve", "-H", "127.0.0.1", "-t", "0"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--timeout must be a positive number"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn plugins_enable_and_disable_channels_in_the_config_and_refuse_unknown_features() {
    use std::os::unix::fs::PermissionsExt as _;
    let home = TempHome::new();
    assert_eq!(run(home.home(), &["onboard"]).status.code(), Some(0));
    let o = run(home.home(), &["plugins", "list"]);
    assert!(
        stdout(&o)
            .lines()
            .any(|l| l.starts_with("telegram") && l.contains(" no ")),
        "{}",
        stdout(&o)
    );
    let o = run(home.home(), &["plugins", "enable", "Telegram"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(home.config_path()).unwrap()).unwrap();
    assert_eq!(config["channels"]["telegram"]["enabled"], true);
    assert!(
        config["agents"]["defaults"]["model"].is_string(),
        "other keys kept"
    );
    let mode = std::fs::metadata(home.config_path())
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600, "the config stays private");
    let o = run(home.home(), &["plugins", "disable", "telegram"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(home.config_path()).unwrap()).unwrap();
    assert_eq!(config["channels"]["telegram"]["enabled"], false);
    // Every channel of 0.3.5 is built (a build without one refuses it by name: `plugins.rs`).
    let o = run(home.home(), &["plugins", "enable", "matrix"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    for (args, needle) in [
        (&["plugins", "enable", "bogus"][..], "unknown feature 'bogus'"),
        (&["plugins", "enable", "bedrock"], "not in nanobot-rs"),
    ] {
        let o = run(home.home(), args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(stderr(&o).contains(needle), "{}", stderr(&o));
    }
}

#[test]
fn the_program_is_its_own_egress_bridge_when_started_as_one() {
    // What a sandbox with `tools.network.allowedDomains` starts first: the bridge runs the command after `--` and
    // ends with its status (the proxy's socket is only dialled when something connects).
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("egress.sock");
    let o = std::process::Command::new(crate::support::exe())
        .args(["__nanobot-egress-bridge"])
        .arg(&sock)
        .args(["0", "--", "sh", "-c", "echo bridged; exit 3"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "bridged\n");
}
