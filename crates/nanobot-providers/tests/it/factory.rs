//! From configuration to a working provider, over real HTTP.

use nanobot_util::EnvMap;

use nanobot_config::Config;
use nanobot_providers::{
    Backend, ChatMessage, ChatRequest, ProviderError, ProviderFactory, resolve_provider,
};
use nanobot_testkit::{MockLlm, MockReply};
use serde_json::json;

fn config(v: serde_json::Value) -> Config {
    serde_json::from_value(v).unwrap()
}

#[tokio::test]
async fn custom_endpoint_from_config_answers() {
    nanobot_providers::install_ring();
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("hello via custom"));
    let cfg = config(json!({
        "agents": {"defaults": {"model": "local-model"}},
        "providers": {"custom": {"apiBase": mock.openai_base_url(), "extraHeaders": {"X-App": "nb"},
            "extraBody": {"top_p": 0.5}, "extraQuery": {"api-version": "2024-10-21"}}}
    }));
    let p = resolve_provider(&cfg, "", &EnvMap::new()).unwrap();
    let r = p
        .chat(ChatRequest::new("local-model", vec![ChatMessage::user("hi")]))
        .await
        .unwrap();
    assert_eq!(r.content.as_deref(), Some("hello via custom"));
    let req = mock.requests().remove(0);
    assert_eq!(req.header("x-app"), Some("nb"));
    assert_eq!(req.header("authorization"), None);
    assert_eq!(req.body["top_p"], 0.5);
    assert_eq!(req.query.as_deref(), Some("api-version=2024-10-21"));
}

#[tokio::test]
async fn anthropic_api_type_and_env_key() {
    nanobot_providers::install_ring();
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("claude says hi"));
    let cfg = config(json!({"providers": {"anthropic": {"apiBase": mock.anthropic_base_url()}}}));
    let env = EnvMap::from_iter([("ANTHROPIC_API_KEY".to_owned(), "sk-ant-from-env".to_owned())]);
    let f = ProviderFactory::new(&cfg.providers, &cfg.agents.defaults, env.clone());
    let resolved = f.resolve("anthropic/claude-opus-4-5").unwrap();
    assert_eq!(resolved.backend, Backend::Anthropic);
    assert_eq!(resolved.wire_model, "claude-opus-4-5");
    assert!(!format!("{resolved:?}").contains("sk-ant-from-env"));
    let p = resolve_provider(&cfg, "anthropic/claude-opus-4-5", &env).unwrap();
    let r = p
        .chat(ChatRequest::new(
            "anthropic/claude-opus-4-5",
            vec![ChatMessage::user("hi")],
        ))
        .await
        .unwrap();
    assert_eq!(r.content.as_deref(), Some("claude says hi"));
    assert_eq!(mock.requests()[0].header("x-api-key"), Some("sk-ant-from-env"));
}

#[test]
fn missing_key_error_names_provider_and_variable() {
    let cfg = config(json!({}));
    let err = resolve_provider(&cfg, "anthropic/claude-opus-4-5", &EnvMap::new()).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, ProviderError::MissingApiKey { .. }), "{err:?}");
    assert!(
        msg.contains("anthropic")
            && msg.contains("providers.anthropic.apiKey")
            && msg.contains("ANTHROPIC_API_KEY"),
        "{msg}"
    );
    let err = resolve_provider(&cfg, "some-model", &EnvMap::new())
        .unwrap_err()
        .to_string();
    assert!(err.contains("apiKey"), "{err}");
    // A forced provider without a key says so too.
    let cfg = config(json!({"agents": {"defaults": {"provider": "lmStudio"}}, "providers": {}}));
    assert!(
        resolve_provider(&cfg, "x", &EnvMap::new()).is_ok(),
        "local providers need no key"
    );
    let cfg = config(json!({"providers": {"vllm": {}}}));
    let err = ProviderFactory::new(&cfg.providers, &cfg.agents.defaults, EnvMap::new())
        .resolve("vllm/x")
        .unwrap_err();
    assert!(err.to_string().contains("providers.vllm.apiBase"), "{err}");
}

#[tokio::test]
async fn fallback_models_from_config() {
    nanobot_providers::install_ring();
    let mock = MockLlm::start().await;
    mock.push(MockReply::error(401));
    mock.push(MockReply::text("fallback answered"));
    let cfg = config(json!({
        "agents": {"defaults": {"model": "deepseek/deepseek-chat", "fallbackModels": ["myProxy/backup-model"]}},
        "providers": {
            "deepseek": {"apiKey": "k1", "apiBase": mock.openai_base_url()},
            "myProxy": {"apiKey": "k2", "apiBase": mock.openai_base_url()}
        }
    }));
    let p = resolve_provider(&cfg, "", &EnvMap::new()).unwrap();
    let r = p
        .chat(ChatRequest::new(
            "deepseek/deepseek-chat",
            vec![ChatMessage::user("hi")],
        ))
        .await
        .unwrap();
    assert_eq!(r.content.as_deref(), Some("fallback answered"));
    let reqs = mock.requests();
    assert_eq!(reqs[0].model(), Some("deepseek-chat"));
    assert_eq!(reqs[1].model(), Some("backup-model"));
    assert_eq!(reqs[1].header("authorization"), Some("Bearer k2"));
}

#[test]
fn bad_proxy_is_a_clear_config_error_and_all_python_blocks_load() {
    nanobot_providers::install_ring();
    let cfg = config(json!({"providers": {"openai": {"apiKey": "sk", "proxy": "http://[::1"}}}));
    let err = resolve_provider(&cfg, "gpt-4o", &EnvMap::new())
        .unwrap_err()
        .to_string();
    assert!(err.contains("providers.openai.proxy"), "{err}");
    // Every provider block the Python nanobot writes (all empty) is harmless: nothing matches, the error says
    // what to set.
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/it/python_providers.json"
    ))
    .unwrap();
    let cfg: Config = serde_json::from_str(&text).unwrap();
    let err = resolve_provider(&cfg, "anthropic/claude-opus-4-5", &EnvMap::new())
        .unwrap_err()
        .to_string();
    assert!(err.contains("ANTHROPIC_API_KEY"), "{err}");
    let env = EnvMap::from_iter([("OPENROUTER_API_KEY".to_owned(), "sk-or-x".to_owned())]);
    let f = ProviderFactory::new(&cfg.providers, &cfg.agents.defaults, env);
    assert_eq!(f.resolve("anthropic/claude-opus-4-5").unwrap().name, "openrouter");
    // A vendor prefix without its own key goes through the keyed gateway, unchanged.
    assert_eq!(
        f.resolve("byteplus/seed-1-6").unwrap().wire_model,
        "byteplus/seed-1-6"
    );
}
