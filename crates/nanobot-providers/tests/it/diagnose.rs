//! Errors that name the cause, the endpoint and what to change, never the key.

use nanobot_providers::registry::find_spec;
use nanobot_providers::{ChatMessage, ChatRequest, Endpoint, OpenAiCompatClient, Provider, ProviderError};
use nanobot_testkit::{MockLlm, MockReply};

use crate::common::{openai, timeouts};

const KEY: &str = "sk-test-123";

fn client_at(base: &str) -> OpenAiCompatClient {
    nanobot_providers::install_ring();
    let spec = find_spec("custom").unwrap();
    OpenAiCompatClient::new(
        Endpoint::new("custom", spec, base, Some(KEY.into()))
            .unwrap()
            .with_timeouts(timeouts()),
    )
}

async fn fail(client: &OpenAiCompatClient) -> ProviderError {
    client
        .chat(ChatRequest::new("local-model", vec![ChatMessage::user("hi")]))
        .await
        .unwrap_err()
}

fn assert_names(err: &ProviderError, parts: &[&str]) {
    let s = err.to_string();
    for p in parts {
        assert!(s.contains(p), "`{p}` missing from: {s}");
    }
    assert!(!s.contains(KEY) && !format!("{err:?}").contains(KEY), "{s}");
}

#[tokio::test]
async fn connection_refused_names_the_address_and_the_fix_and_is_not_retried() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let err = fail(&client_at(&format!("http://127.0.0.1:{port}/v1"))).await;
    assert!(matches!(err, ProviderError::Unreachable { .. }), "{err:?}");
    assert!(!err.is_retryable());
    assert_names(
        &err,
        &[
            &format!("127.0.0.1:{port}"),
            "connection refused",
            "providers.custom.apiBase",
        ],
    );
}

#[tokio::test]
async fn an_unknown_host_names_the_host_and_the_setting() {
    // `.invalid` never resolves (RFC 2606).
    let err = fail(&client_at("http://nanobot-no-such-host.invalid:8080/v1")).await;
    assert_names(&err, &["nanobot-no-such-host.invalid"]);
    if let ProviderError::Unreachable { cause, .. } = &err {
        assert!(cause.contains("does not resolve"), "{err}");
        assert_names(&err, &["providers.custom.apiBase"]);
    } else {
        // Without any resolver the lookup may only time out; that message names the address too.
        assert!(matches!(err, ProviderError::TimedOut { .. }), "{err:?}");
    }
}

#[tokio::test]
async fn https_to_a_plain_http_server_is_a_tls_error_with_the_fix() {
    let mock = MockLlm::start().await;
    let base = mock.openai_base_url().replace("http://", "https://");
    let err = fail(&client_at(&base)).await;
    assert!(matches!(err, ProviderError::Unreachable { .. }), "{err:?}");
    assert_names(&err, &["TLS", "http://", "providers.custom.apiBase"]);
}

#[tokio::test]
async fn http_errors_name_the_endpoint_and_what_to_change() {
    let mock = MockLlm::start().await;
    let at = mock.openai_base_url();
    let shown = at.trim_end_matches('/');
    let client = openai(&mock, "custom");

    mock.push(MockReply::error(401).error_message(format!("Incorrect API key provided: {KEY}")));
    let err = fail(&client).await;
    assert!(matches!(err, ProviderError::Auth { .. }), "{err:?}");
    assert_names(&err, &[shown, "providers.custom.apiKey"]);

    mock.push(MockReply::error(404).error_message("model 'local-model' not found"));
    let err = fail(&client).await;
    assert_names(
        &err,
        &[shown, "model `local-model`", "agents.defaults.model", "/v1"],
    );

    mock.push(MockReply::error(503).error_message("loading model"));
    let err = fail(&client).await;
    assert!(err.is_retryable());
    assert_names(&err, &[shown, "HTTP 503", "loading model"]);
}
