//! The one-line constructor for embedders, in a test binary of its own: nothing here installs a rustls crypto
//! provider first, so the constructor must (reqwest is built without one and would panic).

#![allow(clippy::unwrap_used, reason = "tests")]

use nanobot_providers::{ChatMessage, ChatRequest, OpenAiCompatClient, Provider};
use nanobot_testkit::{MockLlm, MockReply};

#[tokio::test]
async fn one_line_client_installs_tls_and_talks_to_the_mock() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("hello, embedder"));
    let client = OpenAiCompatClient::for_url(mock.openai_base_url(), Some("sk-embed")).unwrap();
    assert!(
        rustls::crypto::CryptoProvider::get_default().is_some(),
        "the constructor installed the ring provider"
    );
    // Twice is fine: the installation is idempotent.
    let again = OpenAiCompatClient::for_url(mock.openai_base_url(), None::<String>).unwrap();
    assert_eq!(again.name(), "custom");
    let answer = client
        .chat(ChatRequest::new("local-model", vec![ChatMessage::user("hi")]))
        .await
        .unwrap();
    assert_eq!(answer.content.as_deref(), Some("hello, embedder"));
    let req = mock.last_request().unwrap();
    assert_eq!(req.path, "/v1/chat/completions");
    assert_eq!(req.body["model"], "local-model");
    assert!(
        req.headers
            .iter()
            .any(|(k, v)| k == "authorization" && v == "Bearer sk-embed"),
        "{:?}",
        req.headers
    );
    assert!(
        !format!("{client:?}").contains("sk-embed"),
        "the key never reaches Debug"
    );
}

#[test]
fn a_bad_url_is_an_error_naming_it() {
    let err = OpenAiCompatClient::for_url("not a url", None::<String>).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("base URL") && msg.contains("relative URL without a base"),
        "{msg}"
    );
}
