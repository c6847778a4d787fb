//! Injected faults: HTTP errors, dropped connections, stalls, delays.

use std::time::Duration;

use nanobot_testkit::{MockLlm, MockReply, NO_REPLY_LEFT};
use serde_json::Value;

use crate::support::{anthropic_body, chat_body, client, read_events};

fn chat_url(mock: &MockLlm) -> String {
    format!("{}/chat/completions", mock.openai_base_url())
}

#[tokio::test]
async fn error_429_with_retry_after_and_openai_body() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::error(429).retry_after_secs(2));
    mock.push(MockReply::text("after retry"));
    let c = client();
    let resp = c
        .post(chat_url(&mock))
        .json(&chat_body("x", true))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["retry-after"], "2");
    assert_eq!(resp.headers()["content-type"], "application/json");
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["code"], "rate_limit_exceeded");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("Rate limit reached")
    );
    let v: Value = c
        .post(chat_url(&mock))
        .json(&chat_body("x", false))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "after retry");
}

#[tokio::test]
async fn error_500_and_custom_error_bodies() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::error(500));
    mock.push(MockReply::error(401).error_message("bad key"));
    mock.push(MockReply::context_length_exceeded());
    mock.push(MockReply::error(418).error_body(serde_json::json!({"detail": "teapot"})));
    let c = client();
    let send = || async {
        c.post(chat_url(&mock))
            .json(&chat_body("x", false))
            .send()
            .await
            .unwrap()
    };
    let r = send().await;
    assert_eq!(r.status(), 500);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "server_error");
    let r = send().await;
    assert_eq!(r.status(), 401);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["message"], "bad key");
    assert_eq!(v["error"]["code"], "invalid_api_key");
    let r = send().await;
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "context_length_exceeded");
    assert_eq!(v["error"]["type"], "invalid_request_error");
    let r = send().await;
    assert_eq!(r.status(), 418);
    assert_eq!(
        r.json::<Value>().await.unwrap(),
        serde_json::json!({"detail": "teapot"})
    );
}

#[tokio::test]
async fn default_fallback_is_a_loud_500() {
    let mock = MockLlm::start().await;
    let r = client()
        .post(chat_url(&mock))
        .json(&chat_body("x", false))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 500);
    assert_eq!(r.headers()["x-mockllm"], "no-scripted-reply");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["message"], NO_REPLY_LEFT);
}

#[tokio::test]
async fn drop_connection_gives_no_response_and_the_mock_keeps_serving() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::drop_connection());
    mock.push(MockReply::drop_connection());
    mock.push(MockReply::text("alive"));
    let c = client();
    let err = c
        .post(chat_url(&mock))
        .json(&chat_body("x", false))
        .send()
        .await
        .unwrap_err();
    assert!(!err.is_status() && err.status().is_none(), "{err:?}");
    let err = client()
        .post(format!("{}/v1/messages", mock.anthropic_base_url()))
        .json(&anthropic_body("x", true))
        .send()
        .await
        .unwrap_err();
    assert!(err.status().is_none(), "{err:?}");
    let v: Value = c
        .post(chat_url(&mock))
        .json(&chat_body("x", false))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "alive");
    assert_eq!(mock.requests().len(), 3, "dropped requests are still recorded");
}

#[tokio::test(start_paused = true)]
async fn stall_after_chunks_sends_n_deltas_then_hangs() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("abcdefgh").chunk_chars(2).stall_after_chunks(2));
    let mut resp = client()
        .post(chat_url(&mock))
        .json(&chat_body("x", true))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    // role chunk + 2 content deltas
    let events = read_events(&mut resp, 3).await;
    assert_eq!(events.len(), 3);
    let text: String = events
        .iter()
        .filter_map(|e| {
            e.json()["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(text, "abcd");
    // Nothing more arrives: with the paused clock, the timeout fires once every task is idle.
    let next = tokio::time::timeout(Duration::from_secs(600), resp.chunk()).await;
    assert!(next.is_err(), "stream should hang, got {next:?}");
}

#[tokio::test(start_paused = true)]
async fn stall_anthropic_stream_and_non_streaming_body() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("abcdefgh").chunk_chars(2).stall_after_chunks(1));
    mock.push(MockReply::text("never").stall_after_chunks(0));
    let c = client();
    let mut resp = c
        .post(format!("{}/v1/messages", mock.anthropic_base_url()))
        .json(&anthropic_body("x", true))
        .send()
        .await
        .unwrap();
    // message_start, content_block_start, ping, one text_delta
    let events = read_events(&mut resp, 4).await;
    let names: Vec<_> = events.iter().map(|e| e.event.clone().unwrap()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "ping",
            "content_block_delta"
        ]
    );
    assert!(
        tokio::time::timeout(Duration::from_secs(600), resp.chunk())
            .await
            .is_err()
    );

    // Non-streaming: status and headers arrive, the body never does.
    let resp = c
        .post(chat_url(&mock))
        .json(&chat_body("x", false))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(
        tokio::time::timeout(Duration::from_secs(600), resp.text())
            .await
            .is_err()
    );
}

#[tokio::test]
async fn drop_after_chunks_aborts_mid_stream() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("abcdefgh").chunk_chars(2).drop_after_chunks(1));
    let resp = client()
        .post(chat_url(&mock))
        .json(&chat_body("x", true))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut resp = resp;
    let mut body = String::new();
    let err = loop {
        match resp.chunk().await {
            Ok(Some(chunk)) => body.push_str(std::str::from_utf8(&chunk).unwrap()),
            Ok(None) => panic!("stream ended cleanly: {body}"),
            Err(err) => break err,
        }
    };
    assert!(err.is_body() || err.is_decode() || err.is_request(), "{err:?}");
    assert!(body.contains("\"content\":\"ab\""));
    assert!(!body.contains("[DONE]"));
}

#[tokio::test(start_paused = true)]
async fn delay_holds_the_answer_after_recording_the_request() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("late").delay(Duration::from_secs(30)));
    let c = client();
    let url = chat_url(&mock);
    let mut task = tokio::spawn(async move {
        c.post(url)
            .json(&chat_body("x", false))
            .send()
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap()
    });
    let seen = mock.wait_for_requests(1).await;
    assert_eq!(seen.len(), 1);
    // 10 s of (virtual) time later the answer is still pending...
    assert!(
        tokio::time::timeout(Duration::from_secs(10), &mut task)
            .await
            .is_err()
    );
    // ...and it arrives after the delay.
    let v = task.await.unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "late");
}

#[tokio::test]
async fn error_event_mid_stream_in_both_formats() {
    let mock = MockLlm::start().await;
    mock.push(
        MockReply::text("abcdef")
            .chunk_chars(2)
            .error_event_after_chunks(1),
    );
    mock.push(
        MockReply::text("abcdef")
            .chunk_chars(2)
            .error_event_after_chunks(2),
    );
    let c = client();
    let text = c
        .post(chat_url(&mock))
        .json(&chat_body("x", true))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let frames = nanobot_testkit::sse::parse(&text);
    assert!(frames.iter().all(|f| !f.is_done()));
    let last = frames.last().unwrap().json();
    assert_eq!(last["error"]["type"], "server_error");
    let content: Vec<String> = frames
        .iter()
        .filter_map(|f| {
            f.json()["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .filter(|s| !s.is_empty())
        .collect();
    assert_eq!(content, ["ab"]);

    let text = c
        .post(format!("{}/v1/messages", mock.anthropic_base_url()))
        .json(&anthropic_body("x", true))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let frames = nanobot_testkit::sse::parse(&text);
    let last = frames.last().unwrap();
    assert_eq!(last.event.as_deref(), Some("error"));
    assert_eq!(last.json()["error"]["type"], "overloaded_error");
    assert!(frames.iter().all(|f| f.event.as_deref() != Some("message_stop")));
    let deltas = frames
        .iter()
        .filter(|f| f.event.as_deref() == Some("content_block_delta"))
        .count();
    assert_eq!(deltas, 2);
}

#[tokio::test]
async fn client_cancellation_is_recorded() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("never sent").delay(Duration::from_secs(3600)));
    mock.push(MockReply::text("abcdefgh").chunk_chars(2).stall_after_chunks(1));
    mock.push(MockReply::text("complete"));
    mock.push(MockReply::drop_connection());
    let c = client();
    // 1. cancelled during the delay
    let url = chat_url(&mock);
    let (c2, url2) = (c.clone(), url.clone());
    let task = tokio::spawn(async move { c2.post(url2).json(&chat_body("x", false)).send().await });
    mock.wait_for_requests(1).await;
    task.abort();
    assert_eq!(mock.wait_for_cancelled(1).await, [0]);
    // 2. cancelled while the stream stalls
    let mut resp = c.post(&url).json(&chat_body("x", true)).send().await.unwrap();
    read_events(&mut resp, 2).await;
    drop(resp);
    assert_eq!(mock.wait_for_cancelled(2).await, [0, 1]);
    // 3. complete answers and the mock's own faults are not cancellations
    c.post(&url)
        .json(&chat_body("x", true))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(c.post(&url).json(&chat_body("x", false)).send().await.is_err());
    mock.push(MockReply::text("sync"));
    c.post(&url)
        .json(&chat_body("x", false))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(mock.cancelled(), [0, 1]);
}
