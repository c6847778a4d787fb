//! OpenAI Codex against a fake OpenAI over real HTTP: the browser sign-in (PKCE, the callback on loopback,
//! state checks, denial), token refresh, the Codex CLI's login taken over, and turns through the Responses API.

use std::time::Duration;

use nanobot_config::Config;
use nanobot_providers::codex::{CodexLogin, CodexTokens, CodexUrls, token_store};
use nanobot_providers::oauth::{OAuthError, OAuthToken, TokenStore};
use nanobot_providers::{
    ChatMessage, ChatRequest, ProviderError, ProviderFactory, ToolSpec, resolve_provider,
};
use nanobot_testkit::fake_oauth::{AUTH_CODE, CHATGPT_ACCOUNT, CodexReply, FakeOpenAi};
use nanobot_util::{EnvMap, Secret};
use serde_json::json;

fn free_redirect() -> String {
    let port = nanobot_testkit::peers::free_port().unwrap();
    format!("http://127.0.0.1:{port}/auth/callback")
}

fn env_for(fake: &FakeOpenAi, home: &std::path::Path, redirect: &str) -> EnvMap {
    let mut env: EnvMap = fake.env(redirect).into_iter().collect();
    env.insert("HOME", home.to_str().unwrap());
    env
}

fn query(url: &str, key: &str) -> String {
    reqwest::Url::parse(url)
        .unwrap()
        .query_pairs()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

fn saved(store: &TokenStore, expires: i64, refresh: &str) {
    store
        .save(&OAuthToken {
            access: Secret::new(FakeOpenAi::access_token(0)),
            refresh: Secret::new(refresh),
            expires,
            account_id: Some(CHATGPT_ACCOUNT.into()),
        })
        .unwrap();
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[tokio::test]
async fn browser_sign_in_with_pkce_and_the_callback_on_loopback() {
    nanobot_providers::install_ring();
    let fake = FakeOpenAi::start().await;
    let home = tempfile::tempdir().unwrap();
    let redirect = free_redirect();
    let env = env_for(&fake, home.path(), &redirect);
    let login = CodexLogin::start(CodexUrls::from_env(&env)).await.unwrap();
    assert_eq!(login.browser().callback_problem(), None);
    let url = login.browser().authorize_url().to_owned();
    assert!(
        url.starts_with(&format!("{}/oauth/authorize?", fake.url())),
        "{url}"
    );
    assert_eq!(query(&url, "response_type"), "code");
    assert_eq!(query(&url, "client_id"), "app_EMoamEEZ73f0CkXaXp7hrann");
    assert_eq!(query(&url, "redirect_uri"), redirect);
    assert_eq!(query(&url, "code_challenge_method"), "S256");
    assert_eq!(query(&url, "originator"), "nanobot");
    assert_eq!(query(&url, "scope"), "openid profile email offline_access");
    fake.expect_challenge(&query(&url, "code_challenge"));
    let state = query(&url, "state");

    // The browser comes back: first with another sign-in's state (refused, waited past), then with this one.
    let browser = async {
        let http = nanobot_providers::http_client().unwrap();
        let wrong = http
            .get(format!("{redirect}?code={AUTH_CODE}&state=not-{state}"))
            .send()
            .await
            .unwrap();
        assert_eq!(wrong.status(), 400);
        let right = http
            .get(format!("{redirect}?code={AUTH_CODE}&state={state}"))
            .send()
            .await
            .unwrap();
        assert_eq!(right.status(), 200);
        assert!(right.text().await.unwrap().contains("Authentication successful"));
    };
    let (code, ()) = tokio::join!(
        login.browser().wait_for_callback(Duration::from_secs(60)),
        browser
    );
    let code = code.unwrap();
    assert_eq!(code, AUTH_CODE);

    // The fake checks the verifier against the challenge: a wrong PKCE pair would be refused here.
    let token = login.exchange(&code).await.unwrap();
    assert_eq!(token.access.expose(), FakeOpenAi::access_token(1));
    assert_eq!(token.refresh.expose(), "refresh-1");
    assert_eq!(token.account_id.as_deref(), Some(CHATGPT_ACCOUNT));
    assert!(token.fresh_for(Duration::from_secs(3000)));
    let exchange = &fake.seen_at("/oauth/token")[0];
    assert_eq!(exchange.form("grant_type").as_deref(), Some("authorization_code"));
    assert_eq!(exchange.form("redirect_uri").as_deref(), Some(redirect.as_str()));

    // A bad code is a clear error naming the endpoint and the server's words.
    let err = login.exchange("other").await.unwrap_err().to_string();
    assert!(
        err.contains("/oauth/token") && err.contains("unknown code"),
        "{err}"
    );
}

#[tokio::test]
async fn a_refused_sign_in_is_reported_and_a_sign_in_not_completed_expires() {
    nanobot_providers::install_ring();
    let fake = FakeOpenAi::start().await;
    let home = tempfile::tempdir().unwrap();
    let redirect = free_redirect();
    let env = env_for(&fake, home.path(), &redirect);
    let login = CodexLogin::start(CodexUrls::from_env(&env)).await.unwrap();
    let state = query(login.browser().authorize_url(), "state");
    let browser = async {
        let http = nanobot_providers::http_client().unwrap();
        http.get(format!(
            "{redirect}?error=access_denied&error_description=no+thanks&state={state}"
        ))
        .send()
        .await
        .unwrap()
    };
    let (result, resp) = tokio::join!(
        login.browser().wait_for_callback(Duration::from_secs(60)),
        browser
    );
    assert_eq!(resp.status(), 400);
    let err = result.unwrap_err();
    assert!(matches!(err, OAuthError::Denied { .. }), "{err:?}");
    assert!(err.to_string().contains("no thanks"), "{err}");

    // Nobody comes back: the wait ends at its bound.
    let login = CodexLogin::start(CodexUrls::from_env(&env_for(
        &fake,
        home.path(),
        &free_redirect(),
    )))
    .await
    .unwrap();
    let err = login
        .browser()
        .wait_for_callback(Duration::from_millis(50))
        .await
        .unwrap_err();
    assert!(matches!(err, OAuthError::Expired { .. }), "{err:?}");
}

#[tokio::test]
async fn logins_are_refreshed_before_they_expire_and_codex_cli_logins_are_taken_over() {
    nanobot_providers::install_ring();
    let fake = FakeOpenAi::start().await;
    let home = tempfile::tempdir().unwrap();
    let env = env_for(&fake, home.path(), "http://127.0.0.1:1/cb");
    let store = token_store(&env).unwrap();
    assert!(store.path().ends_with("oauth-cli-kit/auth/codex.json"));
    let http = nanobot_providers::http_client().unwrap();
    let tokens = || {
        CodexTokens::new(
            CodexUrls::from_env(&env),
            store.clone(),
            http.clone(),
            Some(home.path()),
        )
    };

    let err = tokens().token().await.unwrap_err();
    assert!(
        err.to_string().contains("nanobot provider login openai-codex"),
        "{err}"
    );

    // Expiring within the minute: refreshed once, saved, then kept.
    saved(&store, now_ms() + 30_000, "refresh-0");
    let t = tokens();
    assert_eq!(
        t.token().await.unwrap().access.expose(),
        FakeOpenAi::access_token(1)
    );
    assert_eq!(
        t.token().await.unwrap().access.expose(),
        FakeOpenAi::access_token(1)
    );
    assert_eq!(fake.refreshes(), 1);
    let on_disk = store.load().unwrap();
    assert_eq!(on_disk.refresh.expose(), "refresh-1");
    assert_eq!(on_disk.account_id.as_deref(), Some(CHATGPT_ACCOUNT));
    let form = &fake.seen_at("/oauth/token")[0];
    assert_eq!(form.form("grant_type").as_deref(), Some("refresh_token"));
    assert_eq!(
        form.form("client_id").as_deref(),
        Some("app_EMoamEEZ73f0CkXaXp7hrann")
    );

    // A refused refresh of an expired login names the endpoint; the token never appears.
    saved(&store, now_ms() - 1000, "stale-refresh");
    let err = tokens().token().await.unwrap_err().to_string();
    assert!(err.contains("/oauth/token") && err.contains("HTTP 401"), "{err}");
    assert!(!err.contains("stale-refresh"), "{err}");

    // No file of its own: the Codex CLI's login is taken over (and kept in nanobot's file).
    store.remove().unwrap();
    std::fs::create_dir_all(home.path().join(".codex")).unwrap();
    std::fs::write(
        home.path().join(".codex/auth.json"),
        json!({"tokens": {"access_token": "cli-access", "refresh_token": "cli-refresh", "account_id": "acct-cli"}})
            .to_string(),
    )
    .unwrap();
    let t = tokens().token().await.unwrap();
    assert_eq!(t.access.expose(), "cli-access");
    assert_eq!(t.account_id.as_deref(), Some("acct-cli"));
    assert_eq!(store.load().unwrap().access.expose(), "cli-access");
}

fn codex_config(fake: &FakeOpenAi) -> Config {
    serde_json::from_value(json!({
        "agents": {"defaults": {"model": "openai-codex/gpt-5.5"}},
        "providers": {"openaiCodex": {"apiBase": fake.api_base()}}
    }))
    .unwrap()
}

#[tokio::test]
async fn turns_go_through_the_codex_responses_api() {
    nanobot_providers::install_ring();
    let fake = FakeOpenAi::start().await;
    let home = tempfile::tempdir().unwrap();
    let env = env_for(&fake, home.path(), "http://127.0.0.1:1/cb");
    saved(&token_store(&env).unwrap(), now_ms() + 3_600_000, "refresh-0");
    let cfg = codex_config(&fake);
    let provider = resolve_provider(&cfg, "", &env).unwrap();
    assert_eq!(provider.name(), "openai_codex");

    fake.push(CodexReply::Text("Hello from Codex.".into()));
    let request = ChatRequest::new(
        "openai-codex/gpt-5.5",
        vec![ChatMessage::system("You are nanobot."), ChatMessage::user("hi")],
    );
    let answer = provider.chat(request).await.unwrap();
    assert_eq!(answer.content.as_deref(), Some("Hello from Codex."));
    assert_eq!(answer.usage.map(|u| u.total_tokens), Some(13));

    let sent = &fake.seen_at("/backend-api/codex/responses")[0];
    assert_eq!(
        sent.header("authorization"),
        Some(&*format!("Bearer {}", FakeOpenAi::access_token(0)))
    );
    assert_eq!(sent.header("chatgpt-account-id"), Some(CHATGPT_ACCOUNT));
    assert_eq!(sent.header("originator"), Some("nanobot"));
    assert_eq!(sent.header("openai-beta"), Some("responses=experimental"));
    assert_eq!(sent.header("accept"), Some("text/event-stream"));
    let body: serde_json::Value = serde_json::from_str(&sent.body).unwrap();
    assert_eq!(body["model"], "gpt-5.5");
    assert_eq!(body["stream"], true);
    assert_eq!(body["store"], false);
    assert_eq!(body["instructions"], "You are nanobot.");
    assert_eq!(
        body["input"],
        json!([{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}])
    );
    assert_eq!(body["reasoning"], json!({"summary": "auto"}));
    assert_eq!(body["include"], json!(["reasoning.encrypted_content"]));

    // A tool call, its arguments streamed in pieces.
    fake.push(CodexReply::ToolCall("read_file".into(), json!({"path": "a.txt"})));
    let tool = ToolSpec {
        name: "read_file".into(),
        description: "Read a file".into(),
        parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
    };
    let answer = provider
        .chat(
            ChatRequest::new("openai-codex/gpt-5.5", vec![ChatMessage::user("read a.txt")])
                .with_tools(vec![tool]),
        )
        .await
        .unwrap();
    assert_eq!(answer.tool_calls.len(), 1);
    assert_eq!(answer.tool_calls[0].id, "call_fake_1");
    assert_eq!(answer.tool_calls[0].name, "read_file");
    assert_eq!(answer.tool_calls[0].arguments, json!({"path": "a.txt"}));
    let body: serde_json::Value =
        serde_json::from_str(&fake.seen_at("/backend-api/codex/responses")[1].body).unwrap();
    assert_eq!(
        body["tools"],
        json!([{"type": "function", "name": "read_file", "description": "Read a file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}])
    );
}

#[tokio::test]
async fn codex_errors_are_classified_and_name_the_cause() {
    nanobot_providers::install_ring();
    let fake = FakeOpenAi::start().await;
    let home = tempfile::tempdir().unwrap();
    let env = env_for(&fake, home.path(), "http://127.0.0.1:1/cb");
    let cfg = codex_config(&fake);
    let factory = ProviderFactory::new(&cfg.providers, &cfg.agents.defaults, env.clone());
    let client = factory.client("openai-codex/gpt-5.5").unwrap();
    let req = || ChatRequest::new("openai-codex/gpt-5.5", vec![ChatMessage::user("hi")]);

    let err = client.chat(req()).await.unwrap_err();
    assert!(matches!(err, ProviderError::Config(_)), "{err:?}");
    assert!(
        err.to_string().contains("nanobot provider login openai-codex"),
        "{err}"
    );

    saved(&token_store(&env).unwrap(), now_ms() + 3_600_000, "refresh-0");
    fake.push(CodexReply::Failed(
        "context_length_exceeded".into(),
        "too long".into(),
    ));
    let err = client.chat(req()).await.unwrap_err();
    assert!(
        matches!(err, ProviderError::ContextLengthExceeded { .. }),
        "{err:?}"
    );

    fake.push(CodexReply::Status(
        429,
        json!({"error": {"message": "slow down", "type": "rate_limit"}}),
    ));
    let err = client.chat(req()).await.unwrap_err();
    assert!(err.is_retryable(), "{err:?}");

    fake.push(CodexReply::Status(
        429,
        json!({"error": {"type": "usage_limit_reached", "message": "The usage limit has been reached"}}),
    ));
    let err = client.chat(req()).await.unwrap_err();
    assert!(matches!(err, ProviderError::QuotaExceeded { .. }), "{err:?}");
    assert!(!err.is_retryable());

    fake.push(CodexReply::Status(
        401,
        json!({"error": {"message": "token revoked"}}),
    ));
    let err = client.chat(req()).await.unwrap_err();
    assert!(matches!(err, ProviderError::Auth { .. }), "{err:?}");
    assert!(!err.to_string().contains(&FakeOpenAi::access_token(0)), "{err}");
}
