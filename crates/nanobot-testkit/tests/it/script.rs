//! Choosing replies (rules, FIFO, fallback) and recording requests.

use nanobot_testkit::{MockLlm, MockReply, WireFormat};
use serde_json::{Value, json};

use crate::support::{anthropic_body, chat_body, client};

async fn ask(mock: &MockLlm, user: &str) -> String {
    let v: Value = client()
        .post(format!("{}/chat/completions", mock.openai_base_url()))
        .json(&chat_body(user, false))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    v["choices"][0]["message"]["content"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| format!("error: {}", v["error"]["message"]))
}

#[tokio::test]
async fn fifo_in_order_then_fallback() {
    let mock = MockLlm::start().await;
    mock.push_all([MockReply::text("one"), MockReply::text("two")]);
    assert_eq!(mock.remaining(), 2);
    assert_eq!(ask(&mock, "a").await, "one");
    assert_eq!(ask(&mock, "b").await, "two");
    assert_eq!(mock.remaining(), 0);
    assert_eq!(
        ask(&mock, "c").await,
        format!("error: \"{}\"", nanobot_testkit::NO_REPLY_LEFT)
    );
    mock.set_fallback(MockReply::text("ok"));
    assert_eq!(ask(&mock, "d").await, "ok");
    assert_eq!(ask(&mock, "e").await, "ok");
    mock.clear_fallback();
    assert!(ask(&mock, "f").await.starts_with("error"));
}

#[tokio::test]
async fn rules_are_checked_before_the_fifo() {
    let mock = MockLlm::start().await;
    mock.push_all([MockReply::text("fifo 1"), MockReply::text("fifo 2")]);
    mock.when_last_user_contains("slow", MockReply::text("rule"));
    mock.when_last_user_contains_once("once", MockReply::text("one-shot"));
    assert_eq!(ask(&mock, "be slow please").await, "rule");
    assert_eq!(ask(&mock, "slow again").await, "rule", "reusable rule");
    assert_eq!(mock.remaining(), 2, "rules consume no scripted reply");
    assert_eq!(ask(&mock, "just once").await, "one-shot");
    assert_eq!(ask(&mock, "once more").await, "fifo 1", "once-rule is gone");
    mock.clear_rules();
    assert_eq!(ask(&mock, "slow").await, "fifo 2");
}

#[tokio::test]
async fn rule_matches_only_the_last_user_message() {
    let mock = MockLlm::start().await;
    mock.when_last_user_contains("slow", MockReply::text("rule"));
    mock.set_fallback(MockReply::text("fallback"));
    let body = json!({"model": "m", "messages": [
        {"role": "user", "content": "slow"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": [{"type": "text", "text": "fast now"}]},
    ]});
    let v: Value = client()
        .post(format!("{}/chat/completions", mock.openai_base_url()))
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "fallback");
}

#[tokio::test]
async fn predicate_rules_see_the_whole_request() {
    let mock = MockLlm::start().await;
    mock.when_once(
        |r| r.format() == Some(WireFormat::Anthropic),
        MockReply::text("anthropic"),
    );
    mock.when(|r| r.model() == Some("gpt-test"), MockReply::text("gpt"));
    let v: Value = client()
        .post(format!("{}/v1/messages", mock.anthropic_base_url()))
        .json(&anthropic_body("x", false))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["content"][0]["text"], "anthropic");
    assert_eq!(ask(&mock, "x").await, "gpt");
}

#[tokio::test]
async fn requests_are_recorded_with_headers_and_body() {
    let mock = MockLlm::start().await;
    mock.set_fallback(MockReply::text("ok"));
    let c = client();
    c.post(format!("{}/chat/completions?trace=1", mock.openai_base_url()))
        .bearer_auth("sk-secret")
        .header("X-Custom", "yes")
        .json(&chat_body("hello there", true))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    c.post(format!("{}/nope", mock.url()))
        .body("not json")
        .send()
        .await
        .unwrap();
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 2);
    let r = &reqs[0];
    assert_eq!(
        (r.index, r.method.as_str(), r.path.as_str()),
        (0, "POST", "/v1/chat/completions")
    );
    assert_eq!(r.query.as_deref(), Some("trace=1"));
    assert_eq!(r.header("authorization"), Some("Bearer sk-secret"));
    assert_eq!(r.header("x-custom"), Some("yes"));
    assert_eq!(r.body, chat_body("hello there", true));
    assert!(r.is_stream());
    assert_eq!(r.model(), Some("gpt-test"));
    assert_eq!(r.system_text().as_deref(), Some("sys"));
    assert_eq!(r.last_user_text().as_deref(), Some("hello there"));
    assert_eq!(r.format(), Some(WireFormat::OpenAi));
    let unknown = &reqs[1];
    assert_eq!(unknown.path, "/nope");
    assert_eq!(unknown.body, Value::String("not json".into()));
    assert_eq!(unknown.format(), None);
    assert_eq!(mock.completion_requests().len(), 1);
    assert_eq!(mock.last_request().unwrap().path, "/nope");
    assert_eq!(mock.request_count(), 2);
}

#[tokio::test]
async fn unknown_paths_get_a_404() {
    let mock = MockLlm::start().await;
    let r = client()
        .get(format!("{}/v2/whatever", mock.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let v: Value = r.json().await.unwrap();
    assert!(v["error"]["message"].as_str().unwrap().contains("/v2/whatever"));
}

#[tokio::test]
async fn wait_for_requests_resolves_on_concurrent_requests() {
    let mock = MockLlm::start().await;
    mock.set_fallback(MockReply::text("ok"));
    let url = format!("{}/chat/completions", mock.openai_base_url());
    let mut tasks = Vec::new();
    for i in 0..3 {
        let (c, url) = (client(), url.clone());
        tasks.push(tokio::spawn(async move {
            c.post(url)
                .json(&chat_body(&format!("msg {i}"), false))
                .send()
                .await
                .unwrap()
                .status()
        }));
    }
    let seen = mock.wait_for_requests(3).await;
    assert_eq!(seen.len(), 3);
    let mut texts: Vec<String> = seen.iter().map(|r| r.last_user_text().unwrap()).collect();
    texts.sort();
    assert_eq!(texts, ["msg 0", "msg 1", "msg 2"]);
    for t in tasks {
        assert_eq!(t.await.unwrap(), 200);
    }
}

#[tokio::test]
async fn tool_call_ids_count_across_formats() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::tool_call("a", json!({})));
    mock.push(MockReply::tool_call("b", json!({})));
    let v: Value = client()
        .post(format!("{}/chat/completions", mock.openai_base_url()))
        .json(&chat_body("x", false))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["choices"][0]["message"]["tool_calls"][0]["id"], "call_1");
    let v: Value = client()
        .post(format!("{}/v1/messages", mock.anthropic_base_url()))
        .json(&anthropic_body("x", false))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["content"][0]["id"], "call_2");
}

#[test]
fn background_mock_answers_while_the_test_thread_blocks() {
    use std::io::{Read, Write};
    let mock = MockLlm::start_background();
    mock.push(MockReply::text("from a blocking test"));
    let body = chat_body("x", false).to_string();
    let mut stream = std::net::TcpStream::connect(mock.addr()).unwrap();
    write!(
        stream,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        mock.addr(),
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    assert!(answer.contains("from a blocking test"));
    assert_eq!(mock.requests().len(), 1);
}

#[tokio::test]
async fn background_mock_can_be_dropped_inside_a_runtime() {
    let mock = MockLlm::start_background();
    mock.push(MockReply::text("bg"));
    assert_eq!(ask(&mock, "x").await, "bg");
    let addr = mock.addr();
    drop(mock);
    // The port is closed once the mock is gone (its runtime shut down).
    // Its worker thread shuts down asynchronously: poll with a bounded deadline.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut refused = false;
    while !refused && std::time::Instant::now() < deadline {
        refused = tokio::net::TcpStream::connect(addr).await.is_err();
        tokio::task::yield_now().await;
    }
    assert!(refused, "background mock still accepting after drop");
}

#[tokio::test]
async fn tool_results_are_visible_to_rules_and_assertions() {
    let mock = MockLlm::start().await;
    // A tool loop: the rule only answers the first turn, follow-ups with a tool result fall through.
    mock.when(
        |r| r.last_user_text().is_some_and(|t| t.contains("list")) && !r.ends_with_tool_result(),
        MockReply::tool_call("list_dir", json!({"path": "."})),
    );
    mock.set_fallback(MockReply::text("done"));
    let c = client();
    let url = format!("{}/chat/completions", mock.openai_base_url());
    let first: Value = c
        .post(&url)
        .json(&chat_body("list files", false))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let call = &first["choices"][0]["message"]["tool_calls"][0];
    let follow_up = json!({"model": "m", "messages": [
        {"role": "user", "content": "list files"},
        first["choices"][0]["message"].clone(),
        {"role": "tool", "tool_call_id": call["id"], "content": "a.txt"},
    ]});
    let second: Value = c
        .post(&url)
        .json(&follow_up)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(second["choices"][0]["message"]["content"], "done");
    let last = mock.last_request().unwrap();
    assert_eq!(last.last_role(), Some("tool"));
    assert_eq!(last.tool_results()[0].call_id, "call_1");
    assert_eq!(last.tool_results()[0].content, "a.txt");
}

#[tokio::test]
async fn sse_reader_reports_an_early_end() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("short"));
    let mut resp = client()
        .post(format!("{}/chat/completions", mock.openai_base_url()))
        .json(&chat_body("x", true))
        .send()
        .await
        .unwrap();
    let err = nanobot_testkit::sse::read_frames(&mut resp, 100)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("stream ended after"), "{err}");
    let frames = nanobot_testkit::sse::parse("data: a\r\n\r\n: comment\n\nevent: x\ndata: b\ndata: c");
    assert_eq!(frames.len(), 2);
    assert_eq!(frames[1].data, "b\nc");
}
