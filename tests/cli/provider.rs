//! `nanobot provider login|logout` and a model served through an OAuth provider, against a fake GitHub and a
//! fake Copilot chat API on loopback.

use nanobot_testkit::fake_oauth::{FakeGithub, GITHUB_LOGIN, GITHUB_TOKEN, USER_CODE};
use nanobot_testkit::{MockLlm, MockReply, TempHome};
use serde_json::{Value, json};

use crate::support::{merge, nanobot, run, stderr, stdout};

fn token_file(home: &TempHome) -> std::path::PathBuf {
    home.home().join(".local/share/nanobot/auth/github-copilot.json")
}

fn provider(home: &TempHome, fake: &FakeGithub, api: &MockLlm, args: &[&str]) -> std::process::Output {
    nanobot(home.home())
        .envs(fake.env(&api.url()))
        .args(args)
        .output()
        .expect("run nanobot")
}

#[test]
fn login_shows_the_code_and_writes_the_token_file_logout_removes_it() {
    let fake = FakeGithub::start_background(vec![]);
    let api = MockLlm::start_background();
    let home = TempHome::new();

    let o = provider(&home, &fake, &api, &["provider", "login", "github-copilot"]);
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains(&format!("Code: {USER_CODE}")), "{out}");
    assert!(out.contains("Open: https://github.com/login/device"), "{out}");
    assert!(
        out.contains(&format!("✓ Authenticated with GitHub Copilot  {GITHUB_LOGIN}")),
        "{out}"
    );
    assert!(!out.contains(GITHUB_TOKEN) && !stderr(&o).contains(GITHUB_TOKEN));

    // 0.3.5's file: the same place and keys, private to the user.
    let path = token_file(&home);
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(saved["access"], GITHUB_TOKEN);
    assert_eq!(saved["refresh"], "");
    assert_eq!(saved["account_id"], GITHUB_LOGIN);
    assert!(saved["expires"].as_i64().unwrap() > 0);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    let o = provider(&home, &fake, &api, &["provider", "logout", "github-copilot"]);
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    assert!(
        stdout(&o).contains("✓ Logged out from GitHub Copilot"),
        "{}",
        stdout(&o)
    );
    assert!(!path.exists());
    let o = provider(&home, &fake, &api, &["provider", "logout", "github-copilot"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(
        stdout(&o).contains("No local OAuth credentials found for GitHub Copilot"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn a_denied_login_fails_and_writes_nothing_unknown_providers_are_named() {
    let fake = FakeGithub::start_background(vec![nanobot_testkit::fake_oauth::Poll::Denied]);
    let api = MockLlm::start_background();
    let home = TempHome::new();
    let o = provider(&home, &fake, &api, &["provider", "login", "github-copilot"]);
    assert_eq!(o.status.code(), Some(1), "stdout: {}", stdout(&o));
    assert!(stderr(&o).contains("sign-in was denied"), "{}", stderr(&o));
    assert!(!token_file(&home).exists());

    let o = run(home.home(), &["provider", "login", "openai"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("github-copilot"), "{}", stderr(&o));
}

#[test]
fn login_set_main_then_agent_answers_through_copilot() {
    let fake = FakeGithub::start_background(vec![]);
    let api = MockLlm::start_background();
    let home = TempHome::new();
    let o = run(home.home(), &["onboard"]);
    assert!(o.status.success(), "onboard: {}", stderr(&o));

    let o = provider(
        &home,
        &fake,
        &api,
        &[
            "provider",
            "login",
            "github-copilot",
            "--set-main",
            "-m",
            "github-copilot/gpt-4.1",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    assert!(
        stdout(&o).contains("✓ Set github-copilot as the main provider"),
        "{}",
        stdout(&o)
    );
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(home.config_path()).unwrap()).unwrap();
    assert_eq!(config["agents"]["defaults"]["provider"], "github_copilot");
    assert_eq!(config["agents"]["defaults"]["model"], "github-copilot/gpt-4.1");
    // Nothing else is configured: no key anywhere.
    merge(
        &mut config,
        &json!({"agents": {"defaults": {"provider": "auto"}}}),
    );
    home.write_config(&config);

    api.push(MockReply::text("Hi from Copilot."));
    let o = provider(&home, &fake, &api, &["agent", "-m", "hi"]);
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    assert_eq!(stdout(&o), "Hi from Copilot.\n");
    let reqs = api.completion_requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].header("authorization"), Some("Bearer copilot-token-1"));
    assert_eq!(reqs[0].header("editor-version"), Some("vscode/1.99.0"));
    assert_eq!(reqs[0].body["model"], "gpt-4.1");
    assert_eq!(fake.exchanges(), 1);
    assert!(!stderr(&o).contains("unknown"), "{}", stderr(&o));
}
