//! Every wait of a model call is bounded: a server that stalls after its headers or mid-answer ends the call
//! with a message naming the endpoint and the bound; keep-alive comments keep a slow stream alive; retries
//! never outlast the call's deadline. Paused tokio clocks: the bounds pass without real waiting, and the mock
//! runs on the test's own runtime so its sockets are served before the clock moves.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use nanobot_providers::{
    ChatMessage, ChatRequest, Provider, ProviderError, RetryPolicy, RetryingProvider, StreamEvent, Timeouts,
    WaitKind, display_endpoint, is_local_url, tokio_sleeper,
};
use nanobot_testkit::{MockLlm, MockReply};

use nanobot_providers::Endpoint;
use nanobot_providers::registry::find_spec;

use crate::common::{fast_policy, openai};

fn req() -> ChatRequest {
    ChatRequest::new("gpt-4o", vec![ChatMessage::user("hi")])
}

fn short() -> Timeouts {
    Timeouts {
        request: Duration::from_millis(500),
        stream_idle: Duration::from_millis(200),
        connect: Duration::from_secs(5),
        total: Duration::from_secs(3),
    }
}

fn client(mock: &MockLlm, t: Timeouts) -> Arc<dyn Provider> {
    let c = openai(mock, "openai");
    let ep = c.endpoint().clone().with_timeouts(t);
    Arc::new(nanobot_providers::OpenAiCompatClient::new(ep))
}

/// Drains `s`: the text and the error it ended with, if any.
async fn drain(mut s: nanobot_providers::EventStream) -> (String, Option<ProviderError>) {
    let mut text = String::new();
    while let Some(item) = s.next().await {
        match item {
            Ok(StreamEvent::TextDelta(t)) => text.push_str(&t),
            Ok(_) => {}
            Err(e) => return (text, Some(e)),
        }
    }
    (text, None)
}

#[tokio::test(start_paused = true)]
async fn stall_after_headers_ends_with_the_endpoint_and_the_bound() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("never sent").stall_after_headers());
    let (text, err) = drain(client(&mock, short()).stream(req())).await;
    let err = err.expect("a stalled call must fail");
    assert!(text.is_empty());
    assert!(
        matches!(err, ProviderError::TimedOut { what: WaitKind::Idle, after, .. } if after == Duration::from_millis(200)),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains(&mock.openai_base_url()), "names the endpoint: {msg}");
    assert!(msg.contains("200ms"), "names the bound: {msg}");
    assert!(!msg.contains("sk-test"), "never the key: {msg}");
    assert!(err.is_retryable());
}

#[tokio::test(start_paused = true)]
async fn stall_mid_stream_is_cut_at_the_idle_bound_on_both_wire_formats() {
    let mock = MockLlm::start().await;
    mock.push(
        MockReply::text("partial answer")
            .chunk_chars(3)
            .stall_after_chunks(2),
    );
    let (text, err) = drain(client(&mock, short()).stream(req())).await;
    assert!(!text.is_empty(), "the chunks before the stall arrive");
    let err = err.expect("stall");
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

    mock.push(
        MockReply::text("partial answer")
            .chunk_chars(3)
            .stall_after_chunks(2),
    );
    let spec = find_spec("anthropic").unwrap();
    let ep = Endpoint::new(
        "anthropic",
        spec,
        mock.anthropic_base_url(),
        Some("sk-ant-test".into()),
    )
    .unwrap()
    .with_timeouts(short());
    let c = nanobot_providers::AnthropicClient::new(ep);
    let (_, err) = drain(c.stream(req())).await;
    let err = err.expect("stall");
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
    assert!(err.to_string().contains(&mock.anthropic_base_url()), "{err}");
}

#[tokio::test(start_paused = true)]
async fn keepalive_comments_keep_a_slow_stream_alive() {
    let mock = MockLlm::start().await;
    // Five comments 150 ms apart (750 ms before the first token) under a 200 ms idle bound: every comment
    // resets the bound, so the answer arrives. A parser-level timer (comments invisible) would cut it.
    mock.push(MockReply::text("slow but alive").keepalive_before_first(Duration::from_millis(150), 5));
    let (text, err) = drain(client(&mock, short()).stream(req())).await;
    assert!(err.is_none(), "{err:?}");
    assert_eq!(text, "slow but alive");
    // Control: the same pauses without comments are a stall.
    mock.push(MockReply::text("slow").delay(Duration::from_millis(750)));
    let (_, err) = drain(client(&mock, short()).stream(req())).await;
    assert!(err.is_some(), "a silent 750 ms wait must pass the bounds");
}

#[tokio::test(start_paused = true)]
async fn a_slow_head_is_bounded_by_the_first_byte_timeout() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("late").delay(Duration::from_secs(30)));
    let (_, err) = drain(client(&mock, short()).stream(req())).await;
    let err = err.expect("head timeout");
    assert!(
        matches!(err, ProviderError::TimedOut { what: WaitKind::Head, after, .. } if after == Duration::from_millis(500)),
        "{err:?}"
    );
    assert!(err.to_string().contains("no response for 500ms"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn retries_of_a_stalling_server_stop_at_the_call_deadline() {
    let mock = MockLlm::start().await;
    mock.set_fallback(MockReply::text("never").stall_after_headers());
    let policy = RetryPolicy {
        max_retries: 1000,
        // Every stall retried: the deadline alone has to end it.
        max_stall_retries: u32::MAX,
        base_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(10),
        retry_after_output: false,
        sleeper: tokio_sleeper(),
    };
    let p = RetryingProvider::new(client(&mock, short()), policy)
        .with_deadline(Duration::from_secs(2), display_endpoint(&mock.openai_base_url()));
    let (_, err) = drain(p.stream(req())).await;
    let err = err.expect("the deadline ends it");
    assert!(
        matches!(
            err,
            ProviderError::TimedOut {
                what: WaitKind::Deadline | WaitKind::Idle,
                ..
            }
        ),
        "{err:?}"
    );
    // 2 s of 200 ms stalls: about ten attempts, nowhere near the 1001 allowed.
    let attempts = mock.completion_requests().len();
    assert!((2..=12).contains(&attempts), "{attempts} attempts");
    // The non-streaming path is bounded the same way.
    let err = p.chat(req()).await.unwrap_err();
    assert!(matches!(err, ProviderError::TimedOut { .. }), "{err:?}");
}

/// A server that answers with its head and then sends nothing was waited out on each of four attempts (with a
/// local server's 300 s idle bound: 20 minutes of a turn). A stall is tried once more (a dead pooled connection
/// recovers), then the call ends with the endpoint named. Real time with short bounds: nothing is ever sent,
/// so a bound is what ends each attempt, whatever the machine's load.
#[tokio::test]
async fn a_stall_after_the_head_is_retried_once_then_ends_the_call_streaming_or_not() {
    let mock = MockLlm::start().await;
    mock.set_fallback(MockReply::text("never sent").stall_after_headers());
    let t = Timeouts {
        request: Duration::from_secs(60),
        stream_idle: Duration::from_millis(300),
        connect: Duration::from_secs(5),
        total: Duration::from_secs(600),
    };
    let (policy, delays) = fast_policy();
    assert_eq!(policy.max_retries, 3);
    assert_eq!(policy.max_stall_retries, 1);
    let p = RetryingProvider::new(client(&mock, t.clone()), policy)
        .with_deadline(t.total, display_endpoint(&mock.openai_base_url()));

    let check = |err: &ProviderError| {
        assert!(
            matches!(err, ProviderError::TimedOut { what: WaitKind::Idle, after, .. } if *after == Duration::from_millis(300)),
            "{err:?}"
        );
        let msg = err.to_string();
        assert!(msg.contains(&mock.openai_base_url()), "names the endpoint: {msg}");
        assert!(
            msg.contains("stalled: nothing received for 300ms"),
            "says the server stopped sending: {msg}"
        );
    };

    // Non-streaming (what `agent -m` uses when its output is not a terminal).
    let err = p
        .chat(req())
        .await
        .expect_err("a silent server must fail the call");
    check(&err);
    assert_eq!(mock.completion_requests().len(), 2, "one retry, not three");
    assert_eq!(delays.lock().unwrap().len(), 1);

    // Streaming.
    let (text, err) = drain(p.stream(req())).await;
    assert!(text.is_empty());
    check(&err.expect("a silent stream must fail the call"));
    assert_eq!(mock.completion_requests().len(), 4);
    assert!(mock.completion_requests().iter().any(|r| r.is_stream()));
}

/// Controls: a stall followed by an answer recovers, and the stall rule leaves the other retries alone (a
/// stall, two 500s, then the answer: four attempts under `max_retries: 3`).
#[tokio::test]
async fn after_a_stall_the_retry_answers_and_other_failures_keep_their_retries() {
    let mock = MockLlm::start().await;
    let t = Timeouts {
        request: Duration::from_secs(60),
        stream_idle: Duration::from_millis(300),
        connect: Duration::from_secs(5),
        total: Duration::from_secs(600),
    };
    let (policy, delays) = fast_policy();
    let p = RetryingProvider::new(client(&mock, t), policy);
    mock.push(MockReply::text("never sent").stall_after_headers());
    mock.push(MockReply::text("after the stall"));
    let r = p.chat(req()).await.unwrap();
    assert_eq!(r.content.as_deref(), Some("after the stall"));
    assert_eq!(mock.completion_requests().len(), 2);

    mock.push(MockReply::text("never sent").stall_after_headers());
    mock.push(MockReply::error(500));
    mock.push(MockReply::error(500));
    mock.push(MockReply::text("fourth attempt"));
    let r = p.chat(req()).await.unwrap();
    assert_eq!(r.content.as_deref(), Some("fourth attempt"));
    assert_eq!(mock.completion_requests().len(), 6);
    assert_eq!(delays.lock().unwrap().len(), 4);

    // No stall retries at all when the policy says so.
    let (policy, _) = fast_policy();
    let none = RetryingProvider::new(
        client(
            &mock,
            Timeouts {
                request: Duration::from_secs(60),
                stream_idle: Duration::from_millis(300),
                connect: Duration::from_secs(5),
                total: Duration::from_secs(600),
            },
        ),
        RetryPolicy {
            max_stall_retries: 0,
            ..policy
        },
    );
    mock.push(MockReply::text("never sent").stall_after_headers());
    mock.push(MockReply::text("not asked"));
    let err = none.chat(req()).await.unwrap_err();
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
    assert_eq!(mock.completion_requests().len(), 7);
}

/// A non-streaming body is bounded as a whole by the request bound (0.3.5's `NANOBOT_OPENAI_COMPAT_TIMEOUT_S`),
/// even when the idle bound is longer: headers and then silence end at the request bound, reported as the
/// stall it is (not as the call deadline, with the call's length). A streamed body is not cut by the request
/// bound (answers may stream for long), only by its gaps.
#[tokio::test(start_paused = true)]
async fn a_stalled_non_streaming_body_ends_at_the_request_bound_a_stream_at_its_idle_bound() {
    let mock = MockLlm::start().await;
    let t = Timeouts {
        request: Duration::from_millis(400),
        stream_idle: Duration::from_secs(30),
        connect: Duration::from_secs(5),
        total: Duration::from_secs(600),
    };
    mock.push(MockReply::text("never sent").stall_after_headers());
    let err = client(&mock, t.clone()).chat(req()).await.unwrap_err();
    assert!(
        matches!(err, ProviderError::TimedOut { what: WaitKind::Idle, after, .. } if after == Duration::from_millis(400)),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains(&mock.openai_base_url()), "{msg}");
    assert!(msg.contains("nothing received for 400ms"), "{msg}");
    assert!(err.is_retryable());

    mock.push(MockReply::text("never sent").stall_after_headers());
    let (_, err) = drain(client(&mock, t).stream(req())).await;
    let err = err.expect("stall");
    assert!(
        matches!(err, ProviderError::TimedOut { what: WaitKind::Idle, after, .. } if after == Duration::from_secs(30)),
        "{err:?}"
    );
}

#[test]
fn local_servers_get_longer_bounds_and_messages_never_show_credentials() {
    for url in [
        "http://localhost:11434/v1",
        "http://127.0.0.1:8080/v1",
        "http://192.168.1.20:8000/v1",
        "http://[::1]:1234/v1",
        "http://ollama:11434/v1",
    ] {
        assert!(is_local_url(url), "{url}");
        assert_eq!(Timeouts::for_base_url(url), Timeouts::local());
    }
    for url in ["https://api.openai.com/v1", "https://8.8.8.8/v1", "not a url"] {
        assert!(!is_local_url(url), "{url}");
        assert_eq!(Timeouts::for_base_url(url), Timeouts::cloud());
    }
    assert!(Timeouts::local().stream_idle > Timeouts::cloud().stream_idle);
    assert_eq!(
        display_endpoint("https://user:secret@example.com/v1?key=sk-abc"),
        "https://example.com/v1"
    );
}

#[test]
fn config_timeouts_apply_per_locality() {
    let config: nanobot_config::Config = serde_json::from_value(serde_json::json!({
        "agents": {"defaults": {"timeouts": {"idle": 7, "first_byte": 8.5}}}
    }))
    .unwrap();
    let f = nanobot_providers::ProviderFactory::new(
        &config.providers,
        &config.agents.defaults,
        nanobot_util::EnvMap::new(),
    );
    let local = f.timeouts_for("http://127.0.0.1:1/v1");
    assert_eq!(local.stream_idle, Duration::from_secs(7));
    assert_eq!(local.request, Duration::from_millis(8500));
    assert_eq!(local.total, Timeouts::local().total);
    let cloud = f.timeouts_for("https://api.openai.com/v1");
    assert_eq!(cloud.stream_idle, Duration::from_secs(7));
    assert_eq!(cloud.total, Timeouts::cloud().total);
}

#[test]
fn python_runtime_variables_set_the_timeouts_and_config_wins_over_them() {
    use nanobot_providers::{OPENAI_COMPAT_TIMEOUT_VAR, ProviderFactory, STREAM_IDLE_TIMEOUT_VAR};
    let config: nanobot_config::Config = serde_json::from_value(serde_json::json!({
        "agents": {"defaults": {"model": "custom/m"}},
        "providers": {"custom": {"apiBase": "http://127.0.0.1:1/v1"}}
    }))
    .unwrap();
    let env = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect::<nanobot_util::EnvMap>()
    };
    let f = ProviderFactory::new(
        &config.providers,
        &config.agents.defaults,
        env(&[
            (STREAM_IDLE_TIMEOUT_VAR, "42"),
            (OPENAI_COMPAT_TIMEOUT_VAR, "33.5"),
        ]),
    );
    assert_eq!(
        f.timeouts_for("http://127.0.0.1:1/v1").stream_idle,
        Duration::from_secs(42)
    );
    let resolved = f.resolve("custom/m").unwrap();
    assert_eq!(resolved.endpoint.timeouts.stream_idle, Duration::from_secs(42));
    assert_eq!(resolved.endpoint.timeouts.request, Duration::from_millis(33_500));

    // Clamped like 0.3.5 (at most an hour); nonsense is ignored, not fatal.
    let f = ProviderFactory::new(
        &config.providers,
        &config.agents.defaults,
        env(&[
            (STREAM_IDLE_TIMEOUT_VAR, "99999"),
            (OPENAI_COMPAT_TIMEOUT_VAR, "-1"),
        ]),
    );
    let t = f.resolve("custom/m").unwrap().endpoint.timeouts;
    assert_eq!(t.stream_idle, Duration::from_secs(3600));
    assert_eq!(t.request, Timeouts::local().request);
    let f = ProviderFactory::new(
        &config.providers,
        &config.agents.defaults,
        env(&[(STREAM_IDLE_TIMEOUT_VAR, "soon")]),
    );
    assert_eq!(
        f.timeouts_for("http://127.0.0.1:1/v1").stream_idle,
        Timeouts::local().stream_idle
    );

    // The config's own keys are the more specific setting.
    let config: nanobot_config::Config = serde_json::from_value(serde_json::json!({
        "agents": {"defaults": {"model": "custom/m", "timeouts": {"idle": 7, "firstByte": 9}}},
        "providers": {"custom": {"apiBase": "http://127.0.0.1:1/v1"}}
    }))
    .unwrap();
    let f = ProviderFactory::new(
        &config.providers,
        &config.agents.defaults,
        env(&[(STREAM_IDLE_TIMEOUT_VAR, "42"), (OPENAI_COMPAT_TIMEOUT_VAR, "33")]),
    );
    let t = f.resolve("custom/m").unwrap().endpoint.timeouts;
    assert_eq!(t.stream_idle, Duration::from_secs(7));
    assert_eq!(t.request, Duration::from_secs(9));
}
