//! GitHub Copilot against a fake GitHub and a fake chat API, over real HTTP: the device flow (pending,
//! slow_down, expiry, denial, bad answers), the Copilot token exchange and its renewal, and chat turns.

use std::time::Duration;

use futures::StreamExt;
use nanobot_config::Config;
use nanobot_providers::copilot::{CopilotTokens, CopilotUrls, DevicePacing, GithubDeviceLogin, token_store};
use nanobot_providers::oauth::{OAuthError, OAuthToken, TokenStore};
use nanobot_providers::{ChatMessage, ChatRequest, ProviderError, StreamEvent, resolve_provider};
use nanobot_testkit::fake_oauth::{FakeGithub, GITHUB_LOGIN, GITHUB_TOKEN, Poll, USER_CODE};
use nanobot_testkit::{MockLlm, MockReply};
use nanobot_util::{EnvMap, Secret};
use serde_json::json;

/// The server's seconds last a millisecond; no minimum interval.
fn fast() -> DevicePacing {
    DevicePacing {
        min_interval: Duration::ZERO,
        slow_down_step: Duration::from_millis(5),
        max_wait: Duration::from_secs(60),
        unit: Duration::from_millis(1),
    }
}

fn env_for(fake: &FakeGithub, home: &std::path::Path, api_base: &str) -> EnvMap {
    let mut env: EnvMap = fake.env(api_base).into_iter().collect();
    env.insert("HOME", home.to_str().unwrap());
    env
}

fn device_login(fake: &FakeGithub) -> GithubDeviceLogin {
    nanobot_providers::install_ring();
    let urls = CopilotUrls::from_env(&fake.env("http://unused").into_iter().collect());
    GithubDeviceLogin::new(urls).unwrap().with_pacing(fast())
}

fn saved_login(store: &TokenStore) {
    store
        .save(&OAuthToken {
            access: Secret::new(GITHUB_TOKEN),
            refresh: Secret::new(""),
            expires: i64::MAX / 2,
            account_id: Some(GITHUB_LOGIN.into()),
        })
        .unwrap();
}

#[tokio::test]
async fn device_flow_succeeds_after_pending_and_slow_down() {
    let fake = FakeGithub::start(vec![
        Poll::Pending,
        Poll::SlowDown(0),
        Poll::Pending,
        Poll::SlowDown(2),
    ])
    .await;
    fake.set_device_timing(1, 100_000);
    let login = device_login(&fake);
    let code = login.start().await.unwrap();
    assert_eq!(code.user_code, USER_CODE);
    assert_eq!(code.verification_uri, "https://github.com/login/device");
    assert!(!format!("{code:?}").contains("device-code-secret"));
    let token = login.finish(&code).await.unwrap();
    assert_eq!(token.access.expose(), GITHUB_TOKEN);
    assert_eq!(token.account_id.as_deref(), Some(GITHUB_LOGIN));
    assert!(
        token.fresh_for(Duration::from_secs(86_400 * 365)),
        "GitHub tokens are long-lived"
    );
    assert!(!format!("{token:?}").contains(GITHUB_TOKEN));

    // Four refusals, then the grant: five polls, each with the device code and the grant type.
    let polls = fake.seen_at("/login/oauth/access_token");
    assert_eq!(polls.len(), 5);
    for p in &polls {
        assert_eq!(p.form("device_code").as_deref(), Some("device-code-secret"));
        assert_eq!(
            p.form("grant_type").as_deref(),
            Some("urn:ietf:params:oauth:grant-type:device_code")
        );
        assert_eq!(p.form("client_id").as_deref(), Some("Iv1.b507a08c87ecfe98"));
        assert_eq!(p.header("accept"), Some("application/json"));
    }
    let start = &fake.seen_at("/login/device/code")[0];
    assert_eq!(start.form("scope").as_deref(), Some("read:user"));
    assert_eq!(start.header("user-agent"), Some("nanobot/0.1"));
}

#[tokio::test]
async fn device_flow_reports_expiry_from_the_server_and_from_the_clock() {
    let fake = FakeGithub::start(vec![Poll::Pending, Poll::Expired]).await;
    let login = device_login(&fake);
    let code = login.start().await.unwrap();
    let err = login.finish(&code).await.unwrap_err();
    assert!(matches!(err, OAuthError::Expired { .. }), "{err:?}");
    assert!(
        err.to_string().contains("nanobot provider login github-copilot"),
        "{err}"
    );

    // The server never decides: the code's own lifetime (50 of the test's short seconds) ends the wait.
    let fake = FakeGithub::start(vec![Poll::Pending; 100_000]).await;
    fake.set_device_timing(1, 50);
    let login = device_login(&fake);
    let code = login.start().await.unwrap();
    let err = login.finish(&code).await.unwrap_err();
    assert!(matches!(err, OAuthError::Expired { .. }), "{err:?}");
    let polls = fake.seen_at("/login/oauth/access_token").len();
    assert!((1..100_000).contains(&polls), "{polls}");
}

#[tokio::test]
async fn device_flow_denied_and_bad_answers_are_clear_errors() {
    let fake = FakeGithub::start(vec![Poll::Denied]).await;
    let login = device_login(&fake);
    let code = login.start().await.unwrap();
    let err = login.finish(&code).await.unwrap_err();
    assert!(matches!(err, OAuthError::Denied { .. }), "{err:?}");
    assert!(err.to_string().contains("denied"), "{err}");

    // 200 without a token or an error: the endpoint and the problem are named.
    let fake = FakeGithub::start(vec![Poll::Raw(200, json!({"hello": 1}))]).await;
    let login = device_login(&fake);
    let code = login.start().await.unwrap();
    let err = login.finish(&code).await.unwrap_err().to_string();
    assert!(err.contains("/login/oauth/access_token"), "{err}");
    assert!(err.contains("neither `access_token` nor `error`"), "{err}");

    // An error status with the server's own words.
    let fake = FakeGithub::start(vec![Poll::Raw(
        503,
        json!({"error": "unavailable", "error_description": "try later"}),
    )])
    .await;
    let login = device_login(&fake);
    let code = login.start().await.unwrap();
    let err = login.finish(&code).await.unwrap_err().to_string();
    assert!(err.contains("HTTP 503") && err.contains("try later"), "{err}");

    // An unknown OAuth error is passed on with its description.
    let fake = FakeGithub::start(vec![Poll::Raw(
        400,
        json!({"error": "incorrect_client_credentials", "error_description": "The client_id is wrong."}),
    )])
    .await;
    let login = device_login(&fake);
    let code = login.start().await.unwrap();
    let err = login.finish(&code).await.unwrap_err().to_string();
    assert!(err.contains("The client_id is wrong."), "{err}");

    // Nothing listening: the device-code URL is named.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let urls = CopilotUrls {
        device_code: format!("http://{dead}/login/device/code"),
        ..CopilotUrls::default()
    };
    let err = GithubDeviceLogin::new(urls).unwrap().start().await.unwrap_err();
    assert!(matches!(err, OAuthError::Unreachable { .. }), "{err:?}");
    assert!(err.to_string().contains(&dead.to_string()), "{err}");
}

#[tokio::test]
async fn copilot_tokens_are_kept_and_renewed_before_they_expire() {
    nanobot_providers::install_ring();
    let fake = FakeGithub::start(vec![]).await;
    let home = tempfile::tempdir().unwrap();
    let env = env_for(&fake, home.path(), "http://unused");
    let store = token_store(&env).unwrap();
    let urls = CopilotUrls::from_env(&env);
    let http = nanobot_providers::http_client().unwrap();

    let tokens = CopilotTokens::new(urls.clone(), store.clone(), http.clone());
    let err = tokens.token().await.unwrap_err();
    assert!(matches!(err, OAuthError::NotLoggedIn { .. }), "{err:?}");
    assert!(
        err.to_string().contains("nanobot provider login github-copilot"),
        "{err}"
    );
    assert_eq!(fake.exchanges(), 0);

    saved_login(&store);
    // Long-lived tokens: one exchange serves both calls.
    assert_eq!(tokens.token().await.unwrap().expose(), "copilot-token-1");
    assert_eq!(tokens.token().await.unwrap().expose(), "copilot-token-1");
    assert_eq!(fake.exchanges(), 1);
    let ex = &fake.seen_at("/copilot_internal/v2/token")[0];
    assert_eq!(
        ex.header("authorization"),
        Some(&*format!("token {GITHUB_TOKEN}"))
    );
    assert_eq!(ex.header("editor-version"), Some("vscode/1.99.0"));
    assert_eq!(ex.header("editor-plugin-version"), Some("copilot-chat/0.26.0"));

    // Tokens that expire within the safety margin are exchanged again on every call.
    fake.set_copilot_ttl(30);
    let tokens = CopilotTokens::new(urls.clone(), store.clone(), http.clone());
    assert_eq!(tokens.token().await.unwrap().expose(), "copilot-token-2");
    assert_eq!(tokens.token().await.unwrap().expose(), "copilot-token-3");
    // Forgetting a token (the API refused it) exchanges again.
    fake.set_copilot_ttl(3600);
    let tokens = CopilotTokens::new(urls.clone(), store.clone(), http.clone());
    assert_eq!(tokens.token().await.unwrap().expose(), "copilot-token-4");
    tokens.forget().await;
    assert_eq!(tokens.token().await.unwrap().expose(), "copilot-token-5");

    // A refused exchange names the endpoint and the status, and never the GitHub token.
    fake.fail_copilot_exchange(401, json!({"message": "Bad credentials"}));
    let tokens = CopilotTokens::new(urls, store, http);
    let err = tokens.token().await.unwrap_err().to_string();
    assert!(
        err.contains("/copilot_internal/v2/token") && err.contains("HTTP 401"),
        "{err}"
    );
    assert!(!err.contains(GITHUB_TOKEN), "{err}");
}

fn copilot_config(model: &str) -> Config {
    serde_json::from_value(json!({"agents": {"defaults": {"model": model}}})).unwrap()
}

#[tokio::test]
async fn a_chat_turn_goes_through_copilot_with_its_headers_and_token() {
    nanobot_providers::install_ring();
    let fake = FakeGithub::start(vec![]).await;
    let api = MockLlm::start().await;
    let home = tempfile::tempdir().unwrap();
    let env = env_for(&fake, home.path(), &api.url());
    saved_login(&token_store(&env).unwrap());

    let cfg = copilot_config("github-copilot/gpt-4.1");
    let provider = resolve_provider(&cfg, "", &env).unwrap();
    assert_eq!(provider.name(), "github_copilot");
    // `status` shows where the requests go: the variable's URL.
    let factory = nanobot_providers::ProviderFactory::new(&cfg.providers, &cfg.agents.defaults, env.clone());
    assert_eq!(factory.endpoint_url("github-copilot/gpt-4.1"), Some(api.url()));
    api.push(MockReply::text("Hello from Copilot."));
    let answer = provider
        .chat(ChatRequest::new(
            "github-copilot/gpt-4.1",
            vec![ChatMessage::user("hi")],
        ))
        .await
        .unwrap();
    assert_eq!(answer.content.as_deref(), Some("Hello from Copilot."));

    // Streaming too, with the same (kept) token.
    api.push(MockReply::text("Streamed."));
    let mut events = provider.stream(ChatRequest::new(
        "github-copilot/gpt-4.1",
        vec![ChatMessage::user("again")],
    ));
    let mut text = String::new();
    while let Some(e) = events.next().await {
        if let StreamEvent::TextDelta(t) = e.unwrap() {
            text.push_str(&t);
        }
    }
    assert_eq!(text, "Streamed.");
    assert_eq!(fake.exchanges(), 1);

    let reqs = api.requests();
    assert_eq!(reqs.len(), 2);
    for r in &reqs {
        assert_eq!(r.path, "/chat/completions");
        assert_eq!(r.header("authorization"), Some("Bearer copilot-token-1"));
        assert_eq!(r.header("editor-version"), Some("vscode/1.99.0"));
        assert_eq!(r.header("editor-plugin-version"), Some("copilot-chat/0.26.0"));
        assert_eq!(r.header("user-agent"), Some("nanobot/0.1"));
        // The prefix is not sent; Copilot takes `max_completion_tokens`.
        assert_eq!(r.body["model"], "gpt-4.1");
    }
}

#[tokio::test]
async fn a_refused_copilot_token_is_exchanged_again_and_no_login_is_a_clear_error() {
    nanobot_providers::install_ring();
    let fake = FakeGithub::start(vec![]).await;
    let api = MockLlm::start().await;
    let home = tempfile::tempdir().unwrap();
    let env = env_for(&fake, home.path(), &api.url());

    let cfg = copilot_config("github-copilot/gpt-4.1");
    let provider = resolve_provider(&cfg, "", &env).unwrap();
    let req = || ChatRequest::new("github-copilot/gpt-4.1", vec![ChatMessage::user("hi")]);
    let err = provider.chat(req()).await.unwrap_err();
    assert!(matches!(err, ProviderError::Config(_)), "{err:?}");
    assert!(
        err.to_string().contains("nanobot provider login github-copilot"),
        "{err}"
    );
    assert_eq!(api.request_count(), 0);

    saved_login(&token_store(&env).unwrap());
    api.push(MockReply::error(401));
    api.push(MockReply::text("ok now"));
    let err = provider.chat(req()).await.unwrap_err();
    assert!(matches!(err, ProviderError::Auth { .. }), "{err:?}");
    let answer = provider.chat(req()).await.unwrap();
    assert_eq!(answer.content.as_deref(), Some("ok now"));
    assert_eq!(fake.exchanges(), 2);
    assert_eq!(
        api.requests()[1].header("authorization"),
        Some("Bearer copilot-token-2")
    );
}

#[tokio::test]
async fn gpt_5_models_go_through_copilot_s_responses_api() {
    nanobot_providers::install_ring();
    let fake = FakeGithub::start(vec![]).await;
    let api = nanobot_testkit::fake_oauth::FakeOpenAi::start().await;
    let home = tempfile::tempdir().unwrap();
    let env = env_for(&fake, home.path(), &api.xai_api_base());
    saved_login(&token_store(&env).unwrap());
    let cfg = copilot_config("github-copilot/gpt-5.4-mini");
    let provider = resolve_provider(&cfg, "", &env).unwrap();
    api.push(nanobot_testkit::fake_oauth::CodexReply::ToolCall(
        "read_file".into(),
        json!({"path": "a.txt"}),
    ));
    let answer = provider
        .chat(
            ChatRequest::new(
                "github-copilot/gpt-5.4-mini",
                vec![ChatMessage::system("sys"), ChatMessage::user("read a.txt")],
            )
            .with_tools(vec![nanobot_providers::ToolSpec {
                name: "read_file".into(),
                description: "Read".into(),
                parameters: json!({"type": "object"}),
            }])
            .with_max_tokens(64),
        )
        .await
        .unwrap();
    assert_eq!(answer.tool_calls.len(), 1);
    assert_eq!(answer.tool_calls[0].arguments, json!({"path": "a.txt"}));
    let sent = &api.seen_at("/v1/responses")[0];
    assert_eq!(sent.header("authorization"), Some("Bearer copilot-token-1"));
    assert_eq!(sent.header("editor-version"), Some("vscode/1.99.0"));
    let body: serde_json::Value = serde_json::from_str(&sent.body).unwrap();
    assert_eq!(body["model"], "gpt-5.4-mini");
    assert_eq!(body["instructions"], "sys");
    assert_eq!(body["max_output_tokens"], 64);
    assert_eq!(body["stream"], true);
    assert_eq!(body["tools"][0]["name"], "read_file");
    assert!(body.get("temperature").is_none());
}
