//! The OpenAI-compatible API over real HTTP (reqwest as the client).

use std::time::Duration;

use nanobot_gateway::{Gateway, GatewayError};
use nanobot_testkit::{MockLlm, MockReply, TempHome};
use serde_json::{Value, json};

use crate::common::{GUARD, KEY, api_url, client, options, sessions, start, texts};

fn chat(text: &str, session: Option<&str>, stream: bool) -> Value {
    let mut body =
        json!({"model": "mock-model", "messages": [{"role": "user", "content": text}], "stream": stream});
    if let Some(s) = session {
        body["session_id"] = json!(s);
    }
    body
}

#[tokio::test]
async fn plain_completion_runs_a_turn_in_the_default_session() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("Hello from nanobot").with_usage(12, 5));
    let gw = start(&home, &mock).await;
    let c = client();

    let r = c.get(api_url(&gw, "/health")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let models: Value = c
        .get(api_url(&gw, "/v1/models"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["data"][0]["id"], "mock-model");

    let r = c
        .post(api_url(&gw, "/v1/chat/completions"))
        .bearer_auth(KEY)
        .json(&chat("hi there", None, false))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["message"]["content"], "Hello from nanobot");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    // Usage as the provider reported it.
    assert_eq!(
        (
            &v["usage"]["prompt_tokens"],
            &v["usage"]["completion_tokens"],
            &v["usage"]["total_tokens"]
        ),
        (&json!(12), &json!(5), &json!(17))
    );
    assert!(mock.requests()[0].last_user_text().unwrap().contains("hi there"));

    let report = tokio::time::timeout(GUARD, gw.shutdown()).await.unwrap();
    assert!(report.drained);
    let s = sessions(&home);
    let msgs = &s["api:default"];
    assert!(texts(msgs, "user")[0].contains("hi there"));
    assert_eq!(texts(msgs, "assistant"), ["Hello from nanobot"]);
}

#[tokio::test]
async fn streaming_completion_sends_chunks_then_done() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("one two three four five six").chunk_chars(5));
    let gw = start(&home, &mock).await;
    let r = client()
        .post(api_url(&gw, "/v1/chat/completions"))
        .bearer_auth(KEY)
        .json(&chat("stream please", Some("s1"), true))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let body = tokio::time::timeout(GUARD, r.text()).await.unwrap().unwrap();
    let datas: Vec<&str> = body
        .lines()
        .filter_map(|l| l.strip_prefix("data: ").or_else(|| l.strip_prefix("data:")))
        .collect();
    assert_eq!(datas.last(), Some(&"[DONE]"), "{body}");
    let chunks: Vec<Value> = datas[..datas.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert!(chunks.iter().all(|c| c["object"] == "chat.completion.chunk"));
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "one two three four five six");
    assert!(chunks.len() >= 4, "several deltas expected: {chunks:?}");
    assert_eq!(chunks.last().unwrap()["choices"][0]["finish_reason"], "stop");

    // With `stream_options.include_usage`, a last chunk carries the provider's usage.
    mock.push(MockReply::text("short").with_usage(30, 2));
    let mut body = chat("with usage", Some("s1"), true);
    body["stream_options"] = json!({"include_usage": true});
    let r = client()
        .post(api_url(&gw, "/v1/chat/completions"))
        .bearer_auth(KEY)
        .json(&body)
        .send()
        .await
        .unwrap();
    let text = tokio::time::timeout(GUARD, r.text()).await.unwrap().unwrap();
    let datas: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: ").or_else(|| l.strip_prefix("data:")))
        .collect();
    let last: Value = serde_json::from_str(datas[datas.len() - 2]).unwrap();
    assert_eq!(last["choices"], json!([]), "{text}");
    assert_eq!(last["usage"]["prompt_tokens"], 30, "{text}");
    assert_eq!(last["usage"]["total_tokens"], 32, "{text}");
    gw.shutdown().await;
}

#[tokio::test]
async fn wrong_or_missing_key_is_rejected_without_a_turn() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    let gw = start(&home, &mock).await;
    let c = client();
    for auth in [Some("sk-wrong"), None] {
        let mut req = c
            .post(api_url(&gw, "/v1/chat/completions"))
            .json(&chat("hi", None, false));
        if let Some(k) = auth {
            req = req.bearer_auth(k);
        }
        let r = req.send().await.unwrap();
        assert_eq!(r.status(), 401);
        let v: Value = r.json().await.unwrap();
        assert!(v["error"]["message"].as_str().unwrap().contains("API key"));
    }
    let r = c
        .get(api_url(&gw, "/v1/models"))
        .bearer_auth("nope")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(mock.request_count(), 0, "no model call for a rejected request");
    gw.shutdown().await;
}

#[tokio::test]
async fn two_session_ids_are_kept_apart() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.when_last_user_contains("alice-1", MockReply::text("A1"));
    mock.when_last_user_contains("bob-1", MockReply::text("B1"));
    mock.when_last_user_contains("alice-2", MockReply::text("A2"));
    let gw = start(&home, &mock).await;
    let c = client();
    for (text, session, want) in [
        ("alice-1", "alice", "A1"),
        ("bob-1", "bob", "B1"),
        ("alice-2", "alice", "A2"),
    ] {
        let v: Value = c
            .post(api_url(&gw, "/v1/chat/completions"))
            .bearer_auth(KEY)
            .json(&chat(text, Some(session), false))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(v["choices"][0]["message"]["content"], want);
    }
    // The second alice request carried alice's history and none of bob's.
    let last = mock.requests().last().unwrap().body.to_string();
    assert!(last.contains("alice-1") && last.contains("A1"));
    assert!(!last.contains("bob-1") && !last.contains("B1"));
    gw.shutdown().await;
    let s = sessions(&home);
    assert_eq!(texts(&s["api:alice"], "assistant"), ["A1", "A2"]);
    assert_eq!(texts(&s["api:bob"], "assistant"), ["B1"]);
}

#[tokio::test]
async fn bad_bodies_get_openai_style_errors_and_oversized_ones_413() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    let gw = start(&home, &mock).await;
    let c = client();
    let url = api_url(&gw, "/v1/chat/completions");
    let r = c
        .post(&url)
        .bearer_auth(KEY)
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "invalid_request_error");
    let r = c
        .post(&url)
        .bearer_auth(KEY)
        .json(&json!({"messages": [{"role": "system", "content": "x"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let mut other_model = chat("hi", None, false);
    other_model["model"] = json!("gpt-4o");
    let r = c
        .post(&url)
        .bearer_auth(KEY)
        .json(&other_model)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        v["error"]["message"],
        "Only configured model 'mock-model' is available"
    );
    let huge = "x".repeat(nanobot_gateway::api::MAX_BODY_BYTES + 10);
    let r = c
        .post(&url)
        .bearer_auth(KEY)
        .json(&chat(&huge, None, false))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    assert_eq!(mock.request_count(), 0);
    gw.shutdown().await;
}

#[tokio::test]
async fn a_client_that_disconnects_cancels_its_turn() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("too late").delay(Duration::from_secs(600)));
    mock.push(MockReply::text("next answer"));
    let gw = start(&home, &mock).await;
    let url = api_url(&gw, "/v1/chat/completions");
    let c = client();
    let mut r = c
        .post(&url)
        .bearer_auth(KEY)
        .json(&chat("slow one", Some("gone"), true))
        .send()
        .await
        .unwrap();
    r.chunk().await.unwrap();
    mock.wait_for_requests(1).await;
    // The turn is running: drop the response, which closes the connection.
    drop(r);
    // The session's next turn runs at once: the slow one was cancelled, not waited for.
    let v: Value = tokio::time::timeout(
        GUARD,
        c.post(&url)
            .bearer_auth(KEY)
            .json(&chat("after", Some("gone"), false))
            .send(),
    )
    .await
    .unwrap()
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "next answer");
    let text = gw.metrics().render(&Default::default());
    assert!(
        text.contains("nanobot_turns_total{channel=\"api\",outcome=\"cancelled\"} 1"),
        "{text}"
    );
    gw.shutdown().await;
}

#[tokio::test]
async fn a_non_loopback_api_without_a_key_is_refused_at_start() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    let mut opts = options(&home, &mock, json!({"api": {"host": "0.0.0.0", "apiKey": ""}}));
    assert!(
        !opts.api,
        "without a key the gateway does not run the API unless told to"
    );
    opts.api = true; // `--api`
    let err = Gateway::start(opts).await.unwrap_err();
    assert!(matches!(err, GatewayError::UnprotectedApi { .. }), "{err}");
    assert!(err.to_string().contains("api.apiKey"), "{err}");
    // With a key the same address is fine.
    let opts = options(&home, &mock, json!({"api": {"host": "0.0.0.0", "apiKey": "k"}}));
    let gw = Gateway::start(opts).await.unwrap();
    gw.shutdown().await;
}

/// `tools.approval` over the API: a risky call is refused with an id the client can approve; after
/// `/approve ID` in the same session the model's identical call runs, once.
#[tokio::test]
async fn an_api_client_approves_a_refused_call_with_approve_id() {
    let home = TempHome::new();
    home.write_workspace_file("victim.txt", "x");
    let mock = MockLlm::start().await;
    mock.push(MockReply::tool_call("exec", json!({"command": "rm victim.txt"})));
    mock.push(MockReply::text("I need your approval to delete victim.txt."));
    let gw = Gateway::start(crate::common::options(
        &home,
        &mock,
        json!({"tools": {"approval": {"mode": "risky"}}}),
    ))
    .await
    .unwrap();
    let c = client();
    let ask = |text: &str| {
        c.post(api_url(&gw, "/v1/chat/completions"))
            .bearer_auth(KEY)
            .json(&chat(text, Some("ops-client"), false))
            .send()
    };
    let v: Value = ask("clean up").await.unwrap().json().await.unwrap();
    assert_eq!(
        v["choices"][0]["message"]["content"],
        "I need your approval to delete victim.txt."
    );
    assert!(
        home.workspace().join("victim.txt").exists(),
        "refused: nobody to ask over the API"
    );
    let refusal = mock.completion_requests().last().unwrap().raw_body.clone();
    let id: String = refusal
        .split("/approve ")
        .nth(1)
        .unwrap()
        .chars()
        .take_while(char::is_ascii_alphanumeric)
        .collect();

    let v: Value = ask(&format!("/approve {id}"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let text = v["choices"][0]["message"]["content"].as_str().unwrap().to_owned();
    assert!(text.starts_with("✓ Approved once"), "{text}");

    mock.push(MockReply::tool_call("exec", json!({"command": "rm victim.txt"})));
    mock.push(MockReply::text("Deleted."));
    let v: Value = ask("go on").await.unwrap().json().await.unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "Deleted.");
    assert!(
        !home.workspace().join("victim.txt").exists(),
        "approved once and run"
    );
    gw.shutdown().await;
}

#[tokio::test]
async fn a_request_retried_with_its_idempotency_key_is_answered_once() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("The answer is 42."));
    mock.set_fallback(MockReply::text("A SECOND ANSWER"));
    let gw = start(&home, &mock).await;
    let c = client();
    let ask = |key: Option<&str>| {
        let mut r = c
            .post(api_url(&gw, "/v1/chat/completions"))
            .bearer_auth(KEY)
            .json(&chat("what is the answer?", Some("retry"), false));
        if let Some(k) = key {
            r = r.header("Idempotency-Key", k);
        }
        r.send()
    };
    for _ in 0..2 {
        let v: Value = ask(Some("req-7f3a")).await.unwrap().json().await.unwrap();
        assert_eq!(v["choices"][0]["message"]["content"], "The answer is 42.");
    }
    assert_eq!(
        mock.completion_requests().len(),
        1,
        "the retry ran no second turn"
    );
    let session = &sessions(&home)["api:retry"];
    assert_eq!(
        texts(session, "user"),
        ["what is the answer?"],
        "the question is stored once"
    );
    assert_eq!(texts(session, "assistant"), ["The answer is 42."]);

    // A bad key is refused, naming the header.
    let r = c
        .post(api_url(&gw, "/v1/chat/completions"))
        .bearer_auth(KEY)
        .header("Idempotency-Key", "")
        .json(&chat("hi", Some("retry"), false))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("Idempotency-Key"));
    // Without a key, the same question is a new request.
    let v: Value = ask(None).await.unwrap().json().await.unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "A SECOND ANSWER");
}

/// An OpenAI SDK marks its retries (`x-stainless-retry-count` ≥ 1) without any key: a retry whose question the
/// session already answered gets that answer again (no turn, no second copy, streamed or not); a first attempt
/// (count 0) of the same words is a new question; a retry after another question is a new question too.
#[tokio::test]
async fn a_request_an_sdk_marks_as_its_retry_is_not_stored_twice() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("FIRST"));
    mock.set_fallback(MockReply::text("ANOTHER"));
    let gw = start(&home, &mock).await;
    let c = client();
    let ask = |text: &'static str, retry: u32, stream: bool| {
        c.post(api_url(&gw, "/v1/chat/completions"))
            .bearer_auth(KEY)
            .header("x-stainless-retry-count", retry.to_string())
            .json(&chat(text, Some("sdk"), stream))
            .send()
    };
    let content = |v: Value| v["choices"][0]["message"]["content"].as_str().unwrap().to_owned();
    assert_eq!(
        content(ask("again?", 0, false).await.unwrap().json().await.unwrap()),
        "FIRST"
    );
    assert_eq!(
        content(ask("again?", 1, false).await.unwrap().json().await.unwrap()),
        "FIRST"
    );
    let streamed = ask("again?", 2, true).await.unwrap().text().await.unwrap();
    assert!(
        streamed.contains("FIRST") && !streamed.contains("ANOTHER"),
        "{streamed}"
    );
    assert_eq!(mock.completion_requests().len(), 1, "the retries ran no turn");
    let session = &sessions(&home)["api:sdk"];
    assert_eq!(texts(session, "user"), ["again?"], "the question is stored once");

    // Count 0 is a first attempt: the same words asked again are a new question.
    assert_eq!(
        content(ask("again?", 0, false).await.unwrap().json().await.unwrap()),
        "ANOTHER"
    );
    // A "retry" of a question that is not the session's last one is a new question as well.
    assert_eq!(
        content(ask("other", 0, false).await.unwrap().json().await.unwrap()),
        "ANOTHER"
    );
    assert_eq!(
        content(ask("again?", 1, false).await.unwrap().json().await.unwrap()),
        "ANOTHER"
    );
    let session = &sessions(&home)["api:sdk"];
    assert_eq!(texts(session, "user"), ["again?", "again?", "other", "again?"]);
    gw.shutdown().await;
}
