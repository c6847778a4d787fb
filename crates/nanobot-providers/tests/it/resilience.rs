//! Retries, backoff, stalls and fallback models against the mock.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use nanobot_providers::{
    ChatMessage, ChatRequest, FallbackProvider, Provider, ProviderError, RetryPolicy, RetryingProvider,
    StreamEvent, Timeouts, WaitKind,
};
use nanobot_testkit::{MockLlm, MockReply};

use crate::common::{fast_policy, openai};

fn req() -> ChatRequest {
    ChatRequest::new("gpt-4o", vec![ChatMessage::user("hi")])
}

#[tokio::test]
async fn rate_limit_with_retry_after_then_success() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::error(429).retry_after_secs(3));
    mock.push(MockReply::text("made it"));
    let (policy, delays) = fast_policy();
    let p = RetryingProvider::new(Arc::new(openai(&mock, "openai")), policy);
    let r = nanobot_providers::collect(p.stream(req())).await.unwrap();
    assert_eq!(r.content.as_deref(), Some("made it"));
    assert_eq!(*delays.lock().unwrap(), vec![Duration::from_secs(3)]);
    assert_eq!(mock.request_count(), 2);
}

#[tokio::test]
async fn server_errors_back_off_exponentially_then_fail_typed() {
    let mock = MockLlm::start().await;
    for _ in 0..4 {
        mock.push(MockReply::error(500));
    }
    mock.push(MockReply::text("never reached"));
    let (policy, delays) = fast_policy();
    let p = RetryingProvider::new(Arc::new(openai(&mock, "openai")), policy);
    let err = p.chat(req()).await.unwrap_err();
    assert!(
        matches!(
            err,
            ProviderError::Transient {
                status: Some(500),
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        *delays.lock().unwrap(),
        vec![
            Duration::from_secs(1),
            Duration::from_secs(2),
            Duration::from_secs(4)
        ]
    );
    assert_eq!(mock.request_count(), 4);
}

#[tokio::test]
async fn dropped_connection_is_transient_and_retried() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::drop_connection());
    let bare = openai(&mock, "openai");
    let err = bare.chat(req()).await.unwrap_err();
    assert!(err.is_retryable(), "{err:?}");

    mock.push(MockReply::drop_connection());
    mock.push(MockReply::text("second try"));
    let (policy, delays) = fast_policy();
    let p = RetryingProvider::new(Arc::new(bare), policy);
    let r = nanobot_providers::collect(p.stream(req())).await.unwrap();
    assert_eq!(r.content.as_deref(), Some("second try"));
    assert_eq!(delays.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn stalled_stream_is_transient_and_not_retried_after_output() {
    let mock = MockLlm::start().await;
    mock.push(
        MockReply::text("partial answer that stalls")
            .chunk_chars(5)
            .stall_after_chunks(2),
    );
    mock.push(MockReply::text("should not be requested"));
    let mut client = openai(&mock, "openai");
    let ep = client.endpoint().clone().with_timeouts(Timeouts {
        stream_idle: Duration::from_millis(300),
        ..crate::common::timeouts()
    });
    client = nanobot_providers::OpenAiCompatClient::new(ep);
    let (policy, delays) = fast_policy();
    let p = RetryingProvider::new(Arc::new(client), policy);
    let mut s = p.stream(req());
    let mut text = String::new();
    let err = loop {
        match s.next().await {
            Some(Ok(StreamEvent::TextDelta(t))) => text.push_str(&t),
            Some(Ok(_)) => {}
            Some(Err(e)) => break e,
            None => panic!("stream ended without the stall error"),
        }
    };
    assert!(!text.is_empty());
    assert!(
        matches!(
            err,
            ProviderError::TimedOut {
                what: WaitKind::Idle,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("stalled"), "{err}");
    assert!(
        delays.lock().unwrap().is_empty(),
        "no retry after text was streamed"
    );
    assert_eq!(mock.request_count(), 1);
}

#[tokio::test]
async fn fallback_model_after_a_non_retryable_error() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::error(403));
    mock.push(MockReply::text("from the fallback"));
    let (policy, _) = fast_policy();
    let primary: Arc<dyn Provider> = Arc::new(RetryingProvider::new(
        Arc::new(openai(&mock, "openai")),
        policy.clone(),
    ));
    let second: Arc<dyn Provider> =
        Arc::new(RetryingProvider::new(Arc::new(openai(&mock, "deepseek")), policy));
    let p = FallbackProvider::new(vec![
        (primary, "gpt-4o".into()),
        (second, "deepseek/deepseek-chat".into()),
    ]);
    let r = nanobot_providers::collect(p.stream(req())).await.unwrap();
    assert_eq!(r.content.as_deref(), Some("from the fallback"));
    let reqs = mock.requests();
    assert_eq!(reqs[0].model(), Some("gpt-4o"));
    assert_eq!(reqs[1].model(), Some("deepseek-chat"));
}

#[tokio::test]
async fn exhausted_retries_move_to_the_fallback_and_policy_none_does_not_retry() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::error(503));
    mock.push(MockReply::text("fallback"));
    let primary: Arc<dyn Provider> = Arc::new(RetryingProvider::new(
        Arc::new(openai(&mock, "openai")),
        RetryPolicy::none(),
    ));
    let second: Arc<dyn Provider> = Arc::new(openai(&mock, "openai"));
    let p = FallbackProvider::new(vec![(primary, "gpt-4o".into()), (second, "gpt-4o-mini".into())]);
    let r = p.chat(req()).await.unwrap();
    assert_eq!(r.content.as_deref(), Some("fallback"));
    assert_eq!(mock.request_count(), 2);
}

#[tokio::test]
async fn connection_cut_mid_stream_is_an_error_not_a_short_answer() {
    let mock = MockLlm::start().await;
    mock.push(
        MockReply::text("this answer gets cut off somewhere")
            .chunk_chars(4)
            .drop_after_chunks(2),
    );
    mock.push(
        MockReply::text("this answer gets cut off somewhere")
            .chunk_chars(4)
            .drop_after_chunks(2),
    );
    let err = nanobot_providers::collect(openai(&mock, "openai").stream(req()))
        .await
        .unwrap_err();
    assert!(err.is_retryable(), "{err:?}");
    let err = nanobot_providers::collect(crate::common::anthropic(&mock).stream(req()))
        .await
        .unwrap_err();
    assert!(err.is_retryable(), "{err:?}");
}
