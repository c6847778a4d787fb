//! Issue 28 through the API: session ids are names, not paths; no input crashes the process.

use nanobot_testkit::{MockLlm, MockReply, TempHome};
use serde_json::{Value, json};

use crate::common::{KEY, api_url, client, sessions, start, texts};

fn chat(text: &str, session: &str) -> Value {
    json!({"model": "mock-model", "messages": [{"role": "user", "content": text}], "session_id": session})
}

#[tokio::test]
async fn session_ids_are_kept_exactly_and_bad_ones_get_a_400_that_reveals_nothing() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.set_fallback(MockReply::text("ok"));
    let gw = start(&home, &mock).await;
    let c = client();
    let url = api_url(&gw, "/v1/chat/completions");
    let long = "l".repeat(4000);
    // Ids that used to be trimmed together, collide on separators, or exceed the file-name limit (HTTP 500).
    let ids = ["a", " a", "a ", "a/b", "a_b", "a:b", "../../etc", long.as_str()];
    for id in ids {
        let r = c
            .post(&url)
            .bearer_auth(KEY)
            .json(&chat(&format!("to {id:.8}"), id))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{id:.20}");
    }
    for bad in ["a\0b", "tab\there", "\u{7f}", "line\nbreak"] {
        let r = c
            .post(&url)
            .bearer_auth(KEY)
            .json(&chat("x", bad))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{bad:?}");
        let text = r.text().await.unwrap();
        assert!(text.contains("control characters"), "{text}");
        let home_path = home.nanobot_dir().display().to_string();
        assert!(!text.contains(&home_path) && !text.contains("/tmp"), "{text}");
    }
    gw.shutdown().await;
    let s = sessions(&home);
    for id in ids {
        let key = format!("api:{id}");
        assert_eq!(texts(&s[&key], "user").len(), 1, "{key:.20}");
    }
    // Nothing was written outside the sessions folder.
    assert!(!home.nanobot_dir().join("etc").exists());
}

#[tokio::test]
async fn deeply_nested_bodies_and_tool_arguments_do_not_crash_the_gateway() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    // The model answers with a tool call whose arguments nest 200 000 levels (broken JSON, so the repairer
    // would see it), then reads the error and answers.
    let deep = format!("{{\"path\": {}", "[".repeat(200_000));
    mock.push(MockReply::raw_arguments("read_file", deep));
    mock.push(MockReply::text("recovered"));
    let gw = start(&home, &mock).await;
    let c = client();
    let url = api_url(&gw, "/v1/chat/completions");

    // A body nested far deeper than serde_json's recursion limit: a 400, and the server lives on.
    let nested = format!(
        "{{\"messages\": [{{\"role\": \"user\", \"content\": {}1{}}}]}}",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let r = c.post(&url).bearer_auth(KEY).body(nested).send().await.unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "invalid_request_error");

    let r = c
        .post(&url)
        .bearer_auth(KEY)
        .json(&chat("go", "deep"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "recovered");
    // The model was told why its call failed.
    let second = mock.requests()[1].body.to_string();
    assert!(second.contains("nested deeper than 64 levels"), "{second:.400}");
    // And the gateway still answers.
    let r = c.get(api_url(&gw, "/health")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    gw.shutdown().await;
}
