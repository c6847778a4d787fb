//! xAI Grok against a fake xAI over real HTTP: discovery, the browser sign-in (PKCE, callback on 127.0.0.1),
//! refresh before expiry and after a refused token, and turns through the Responses API with Grok's headers.

use std::time::Duration;

use nanobot_config::Config;
use nanobot_providers::grok::{GrokLogin, GrokTokens, discover, token_store};
use nanobot_providers::oauth::{OAuthError, OAuthToken, TokenStore};
use nanobot_providers::{ChatMessage, ChatRequest, ProviderFactory, ToolSpec, resolve_provider};
use nanobot_testkit::fake_oauth::{AUTH_CODE, CodexReply, FakeOpenAi, XAI_EMAIL};
use nanobot_util::{EnvMap, Secret};
use serde_json::json;

fn query(url: &str, key: &str) -> String {
    reqwest::Url::parse(url)
        .unwrap()
        .query_pairs()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn saved(store: &TokenStore, expires: i64) {
    store
        .save(&OAuthToken {
            access: Secret::new("xai-access-0"),
            refresh: Secret::new("refresh-0"),
            expires,
            account_id: Some(XAI_EMAIL.into()),
        })
        .unwrap();
}

#[tokio::test]
async fn browser_sign_in_discovers_the_endpoints_and_names_the_account() {
    nanobot_providers::install_ring();
    let fake = FakeOpenAi::start().await;
    let login = GrokLogin::start(&fake.url()).await.unwrap();
    let url = login.browser().authorize_url().to_owned();
    assert!(url.starts_with(&format!("{}/oauth2/auth?", fake.url())), "{url}");
    assert_eq!(query(&url, "client_id"), "b1a00492-073a-47ea-816f-4c329264a828");
    assert_eq!(query(&url, "redirect_uri"), login.browser().redirect_uri());
    assert!(login.browser().redirect_uri().starts_with("http://127.0.0.1:"));
    assert!(query(&url, "scope").contains("grok-cli:access"));
    assert!(!query(&url, "nonce").is_empty());
    assert_eq!(query(&url, "referrer"), "nanobot");
    fake.expect_challenge(&query(&url, "code_challenge"));
    let state = query(&url, "state");
    let redirect = login.browser().redirect_uri().to_owned();
    // xAI's page calls the callback itself: the preflight and the answer carry its CORS headers.
    let browser = async {
        let http = nanobot_providers::http_client().unwrap();
        let preflight = http
            .request(reqwest::Method::OPTIONS, &redirect)
            .header("origin", "https://accounts.x.ai")
            .header("access-control-request-private-network", "true")
            .send()
            .await
            .unwrap();
        assert_eq!(preflight.status(), 204);
        assert_eq!(
            preflight.headers()["access-control-allow-origin"],
            "https://accounts.x.ai"
        );
        assert_eq!(
            preflight.headers()["access-control-allow-private-network"],
            "true"
        );
        let other = http
            .get(format!("{redirect}?code={AUTH_CODE}&state=other"))
            .header("origin", "https://evil.example")
            .send()
            .await
            .unwrap();
        assert_eq!(other.status(), 400);
        assert!(other.headers().get("access-control-allow-origin").is_none());
        let done = http
            .get(format!("{redirect}?code={AUTH_CODE}&state={state}"))
            .header("origin", "https://accounts.x.ai")
            .send()
            .await
            .unwrap();
        assert_eq!(
            done.headers()["access-control-allow-origin"],
            "https://accounts.x.ai"
        );
        done.status()
    };
    let (code, status) = tokio::join!(
        login.browser().wait_for_callback(Duration::from_secs(60)),
        browser
    );
    assert_eq!(status, 200);
    let token = login.exchange(&code.unwrap()).await.unwrap();
    assert_eq!(token.account_id.as_deref(), Some(XAI_EMAIL));
    assert_eq!(token.refresh.expose(), "refresh-1");
    let exchange = &fake.seen_at("/oauth2/token")[0];
    assert_eq!(exchange.header("x-grok-client-version"), Some("0.2.109"));
    assert_eq!(exchange.form("redirect_uri").as_deref(), Some(redirect.as_str()));
}

#[tokio::test]
async fn discovery_from_another_issuer_is_refused() {
    nanobot_providers::install_ring();
    let fake = FakeOpenAi::start().await;
    let http = nanobot_providers::http_client().unwrap();
    // The fake says its issuer is its own URL: asked as another issuer, the answer is refused by name.
    let other = format!("{}/", fake.url()).replace("127.0.0.1", "localhost");
    let other = other.trim_end_matches('/');
    let err = discover(other, &http).await.unwrap_err();
    assert!(matches!(err, OAuthError::BadAnswer { .. }), "{err:?}");
    assert!(err.to_string().contains("issuer"), "{err}");
    assert!(discover(&fake.url(), &http).await.is_ok());
}

#[tokio::test]
async fn logins_are_refreshed_before_they_expire() {
    nanobot_providers::install_ring();
    let fake = FakeOpenAi::start().await;
    let dir = tempfile::tempdir().unwrap();
    let store = token_store(dir.path());
    let http = nanobot_providers::http_client().unwrap();
    let tokens = GrokTokens::new(fake.url(), store.clone(), http);
    let err = tokens.token(false).await.unwrap_err();
    assert!(
        err.to_string().contains("nanobot provider login xai-grok"),
        "{err}"
    );

    // Within the five-minute margin: refreshed once, the account kept.
    saved(&store, now_ms() + 120_000);
    let t = tokens.token(false).await.unwrap();
    assert_eq!(t.access.expose(), FakeOpenAi::access_token(1));
    assert_eq!(t.account_id.as_deref(), Some(XAI_EMAIL));
    assert_eq!(
        tokens.token(false).await.unwrap().access.expose(),
        FakeOpenAi::access_token(1)
    );
    assert_eq!(fake.refreshes(), 1);
    assert_eq!(store.load().unwrap().refresh.expose(), "refresh-1");
}

fn grok_config(fake: &FakeOpenAi, extra: serde_json::Value) -> Config {
    serde_json::from_value(json!({
        "agents": {"defaults": {"model": "xai-grok/grok-4.6"}},
        "providers": {"xaiGrok": {"apiBase": fake.xai_api_base(), "extraBody": extra}}
    }))
    .unwrap()
}

#[tokio::test]
async fn turns_go_through_the_xai_responses_api_and_a_refused_token_is_refreshed() {
    nanobot_providers::install_ring();
    let fake = FakeOpenAi::start().await;
    let home = tempfile::tempdir().unwrap();
    let mut env: EnvMap = fake.xai_env().into_iter().collect();
    env.insert("HOME", home.path().to_str().unwrap());
    saved(&token_store(&home.path().join(".nanobot")), now_ms() + 3_600_000);

    let cfg = grok_config(&fake, json!({"tools": [{"type": "x_search"}]}));
    let provider = resolve_provider(&cfg, "", &env).unwrap();
    assert_eq!(provider.name(), "xai_grok");
    fake.push(CodexReply::Text("Hello from Grok.".into()));
    let tool = ToolSpec {
        name: "read_file".into(),
        description: "Read".into(),
        parameters: json!({"type": "object"}),
    };
    let req = ChatRequest::new("xai-grok/grok-4.6", vec![ChatMessage::user("hi")])
        .with_tools(vec![tool])
        .with_max_tokens(100)
        .with_temperature(0.5);
    let answer = provider.chat(req.clone()).await.unwrap();
    assert_eq!(answer.content.as_deref(), Some("Hello from Grok."));
    let sent = &fake.seen_at("/v1/responses")[0];
    assert_eq!(sent.header("authorization"), Some("Bearer xai-access-0"));
    assert_eq!(sent.header("x-xai-token-auth"), Some("xai-grok-cli"));
    assert_eq!(sent.header("x-grok-client-version"), Some("0.2.109"));
    assert_eq!(sent.header("x-grok-model-override"), Some("grok-4.6"));
    assert_eq!(sent.header("x-grok-client-mode"), Some("headless"));
    let body: serde_json::Value = serde_json::from_str(&sent.body).unwrap();
    assert_eq!(body["model"], "grok-4.6");
    assert_eq!(body["max_output_tokens"], 100);
    assert_eq!(body["temperature"], 0.5);
    assert_eq!(body["stream_tool_calls"], true);
    assert_eq!(body["reasoning"], json!({"summary": "concise"}));
    assert_eq!(body["tools"][0]["name"], "read_file");
    assert_eq!(body["tools"][1], json!({"type": "x_search"}));

    // The API refuses the token: refreshed once, the call tried again.
    fake.push(CodexReply::Status(401, json!({"error": "token expired"})));
    fake.push(CodexReply::Text("After refresh.".into()));
    let factory = ProviderFactory::new(&cfg.providers, &cfg.agents.defaults, env.clone());
    let client = factory.client("xai-grok/grok-4.6").unwrap();
    let answer = client.chat(req).await.unwrap();
    assert_eq!(answer.content.as_deref(), Some("After refresh."));
    assert_eq!(fake.refreshes(), 1);
    let retried = fake.seen_at("/v1/responses").pop().unwrap();
    assert_eq!(
        retried.header("authorization"),
        Some(&*format!("Bearer {}", FakeOpenAi::access_token(1)))
    );
}
