//! OAuth tokens never leave: GitHub, Copilot, ChatGPT and xAI tokens (and the refresh tokens) are searched for in
//! everything logged at TRACE level (reqwest's and hyper's records included) and in every rendering of the
//! errors, over sign-ins, exchanges, refreshes, chat turns and refused calls against the fakes.
//!
//! A test binary of its own, so that its TRACE subscriber is the process-wide one.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use std::time::Duration;

use nanobot_config::Config;
use nanobot_providers::copilot::{CopilotUrls, DevicePacing, GithubDeviceLogin};
use nanobot_providers::oauth::{OAuthToken, TokenStore};
use nanobot_providers::{ChatMessage, ChatRequest, ProviderFactory};
use nanobot_testkit::MockLlm;
use nanobot_testkit::MockReply;
use nanobot_testkit::fake_oauth::{CodexReply, FakeGithub, FakeOpenAi, GITHUB_TOKEN, Poll};
use nanobot_testkit::secrets::{LogCapture, error_text};
use nanobot_util::{EnvMap, Secret};
use serde_json::json;

fn save(store: &TokenStore, access: &str, refresh: &str, expires_in_ms: i64) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    store
        .save(&OAuthToken {
            access: Secret::new(access),
            refresh: Secret::new(refresh),
            expires: now + expires_in_ms,
            account_id: Some("acct".into()),
        })
        .unwrap();
}

#[tokio::test]
async fn oauth_tokens_are_never_logged_nor_shown_in_errors() {
    let logs = LogCapture::install();
    nanobot_providers::install_ring();
    let mut errors = String::new();
    let github = FakeGithub::start(vec![Poll::Pending]).await;
    let openai = FakeOpenAi::start().await;
    let xai = FakeOpenAi::start().await;
    let api = MockLlm::start().await;
    let home = tempfile::tempdir().unwrap();
    let mut env: EnvMap = github.env(&api.url()).into_iter().collect();
    env.extend(openai.env("http://127.0.0.1:1/cb"));
    env.extend(xai.xai_env());
    env.insert("HOME", home.path().to_str().unwrap());

    // GitHub's device flow and the Copilot exchange and turns (one refused by the API).
    let login = GithubDeviceLogin::new(CopilotUrls::from_env(&env))
        .unwrap()
        .with_pacing(DevicePacing {
            min_interval: Duration::ZERO,
            slow_down_step: Duration::ZERO,
            max_wait: Duration::from_secs(60),
            unit: Duration::from_millis(1),
        });
    let code = login.start().await.unwrap();
    let token = login.finish(&code).await.unwrap();
    nanobot_providers::copilot::token_store(&env)
        .unwrap()
        .save(&token)
        .unwrap();
    let cfg: Config = serde_json::from_value(json!({
        "providers": {"openaiCodex": {"apiBase": openai.api_base()}, "xaiGrok": {"apiBase": xai.xai_api_base()}}
    }))
    .unwrap();
    let factory = ProviderFactory::new(&cfg.providers, &cfg.agents.defaults, env.clone());
    let copilot = factory.client("github-copilot/gpt-4.1").unwrap();
    api.push(MockReply::text("ok"));
    api.push(MockReply::error(401));
    let req = |m: &str| ChatRequest::new(m, vec![ChatMessage::user("hi")]);
    copilot.chat(req("github-copilot/gpt-4.1")).await.unwrap();
    errors.push_str(&error_text(
        &copilot.chat(req("github-copilot/gpt-4.1")).await.unwrap_err(),
    ));
    github.fail_copilot_exchange(500, json!({"message": "boom"}));
    errors.push_str(&error_text(
        &copilot.chat(req("github-copilot/gpt-4.1")).await.unwrap_err(),
    ));

    // Codex: a refresh, a turn, a refused turn, a refused refresh.
    let codex_store = nanobot_providers::codex::token_store(&env).unwrap();
    save(&codex_store, &FakeOpenAi::access_token(0), "refresh-0", 1000);
    let codex = factory.client("openai-codex/gpt-5.5").unwrap();
    openai.push(CodexReply::Text("ok".into()));
    openai.push(CodexReply::Status(401, json!({"error": {"message": "revoked"}})));
    codex.chat(req("openai-codex/gpt-5.5")).await.unwrap();
    errors.push_str(&error_text(
        &codex.chat(req("openai-codex/gpt-5.5")).await.unwrap_err(),
    ));
    save(
        &codex_store,
        "expired-access-SEKRIT",
        "refresh-SEKRIT-stale",
        -1000,
    );
    errors.push_str(&error_text(
        &codex.chat(req("openai-codex/gpt-5.5")).await.unwrap_err(),
    ));

    // Grok: a turn refused once (refresh, retry).
    let grok_store = nanobot_providers::grok::token_store(&home.path().join(".nanobot"));
    save(&grok_store, "xai-access-SEKRIT", "refresh-0", 3_600_000);
    let grok = factory.client("xai-grok/grok-4.6").unwrap();
    xai.push(CodexReply::Status(401, json!({"error": "expired"})));
    xai.push(CodexReply::Text("ok".into()));
    grok.chat(req("xai-grok/grok-4.6")).await.unwrap();

    let logged = logs.text();
    assert!(
        logged.contains("Copilot API token exchanged"),
        "the capture works"
    );
    let mut secrets = vec![
        GITHUB_TOKEN.to_owned(),
        "device-code-secret".to_owned(),
        "copilot-token-1".to_owned(),
        "copilot-token-2".to_owned(),
        "expired-access-SEKRIT".to_owned(),
        "refresh-SEKRIT-stale".to_owned(),
        "xai-access-SEKRIT".to_owned(),
    ];
    for n in 0..4 {
        secrets.push(FakeOpenAi::access_token(n));
        secrets.push(format!("refresh-{n}\""));
    }
    for s in &secrets {
        assert!(!logged.contains(s.as_str()), "{s} was logged");
        assert!(!errors.contains(s.as_str()), "{s} is in an error: {errors}");
    }
}
