//! The official OpenAI Python SDK as a client of the API (peer: `openai` in `.ci/.peers/venv`).

use nanobot_testkit::{MockLlm, MockReply, TempHome, peers};

use crate::common::{GUARD, KEY, api_url, sessions, start, texts};

const SCRIPT: &str = r#"
import os, sys, openai
from openai import OpenAI
base, key = os.environ["BASE_URL"], os.environ["API_KEY"]
c = OpenAI(base_url=base, api_key=key, max_retries=0)
r = c.chat.completions.create(model="mock-model", messages=[{"role": "user", "content": "plain alice"}],
                              extra_body={"session_id": "alice"})
assert r.choices[0].message.content == "PLAIN", r
assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (21, 4, 25), r.usage
parts = []
for chunk in c.chat.completions.create(model="mock-model", stream=True,
                                       messages=[{"role": "user", "content": "stream bob"}],
                                       extra_body={"session_id": "bob"}):
    if chunk.choices and chunk.choices[0].delta.content:
        parts.append(chunk.choices[0].delta.content)
assert "".join(parts) == "STREAMED ANSWER", parts
assert len(parts) > 1, parts
usage = [ch.usage for ch in c.chat.completions.create(model="mock-model", stream=True,
                                                     stream_options={"include_usage": True},
                                                     messages=[{"role": "user", "content": "stream bob"}],
                                                     extra_body={"session_id": "bob2"}) if ch.usage]
assert len(usage) == 1 and usage[0].total_tokens == 9, usage
try:
    OpenAI(base_url=base, api_key="sk-wrong", max_retries=0).chat.completions.create(
        model="mock-model", messages=[{"role": "user", "content": "x"}])
    sys.exit("a wrong key was accepted")
except openai.AuthenticationError:
    pass
models = c.models.list()
assert [m.id for m in models.data] == ["mock-model"], models
print("SDK-OK")
"#;

/// Runs `script` with the venv's Python against the gateway's API (`BASE_URL`, `API_KEY`), bounded, and checks
/// that it succeeds and prints `marker`.
async fn run_sdk_script(python: &std::path::Path, script: &str, gw: &nanobot_gateway::Gateway, marker: &str) {
    let out = tokio::time::timeout(
        GUARD,
        tokio::process::Command::new(python)
            .args(["-c", script])
            .env("BASE_URL", api_url(gw, "/v1"))
            .env("API_KEY", KEY)
            .output(),
    )
    .await
    .unwrap()
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains(marker),
        "stdout: {stdout}\nstderr: {stderr}"
    );
}

#[tokio::test]
async fn the_openai_python_sdk_talks_to_the_api() {
    let Some(python) = peers::require("openai (python venv)", peers::python()) else {
        return;
    };
    let check = std::process::Command::new(&python)
        .args(["-c", "import openai"])
        .output()
        .unwrap();
    if !check.status.success() {
        if peers::is_ci() {
            panic!("the openai package is missing from the venv (run scripts/install-peers.sh)");
        }
        eprintln!("skipped: openai not installed (run scripts/install-peers.sh)");
        return;
    }
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.when_last_user_contains("plain alice", MockReply::text("PLAIN").with_usage(21, 4));
    mock.when_last_user_contains(
        "stream bob",
        MockReply::text("STREAMED ANSWER").chunk_chars(4).with_usage(7, 2),
    );
    let gw = start(&home, &mock).await;
    run_sdk_script(&python, SCRIPT, &gw, "SDK-OK").await;
    gw.shutdown().await;
    let s = sessions(&home);
    assert_eq!(texts(&s["api:alice"], "assistant"), ["PLAIN"]);
    assert_eq!(texts(&s["api:bob"], "assistant"), ["STREAMED ANSWER"]);
}

const RETRY_SCRIPT: &str = r#"
import os, openai
from openai import OpenAI
c = OpenAI(base_url=os.environ["BASE_URL"], api_key=os.environ["API_KEY"], timeout=2.0, max_retries=2)
r = c.chat.completions.create(model="mock-model", messages=[{"role": "user", "content": "slow question"}],
                              extra_body={"session_id": "cold"})
assert r.choices[0].message.content == "WARM ANSWER", r
print("SDK-RETRY-OK")
"#;

/// A cold local model: the SDK gives up on its first attempt (its own timeout), the turn is cancelled as the
/// client goes, and the SDK's retry (`x-stainless-retry-count: 1`) runs that question again: it is answered,
/// and stored once.
#[tokio::test]
async fn the_sdks_retry_after_its_timeout_does_not_store_the_question_twice() {
    let Some(python) = peers::require("openai (python venv)", peers::python()) else {
        return;
    };
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    // Far longer than the client waits: the first attempt can only end by the client leaving.
    mock.push(MockReply::text("COLD ANSWER").delay(std::time::Duration::from_secs(300)));
    mock.push(MockReply::text("WARM ANSWER"));
    let gw = start(&home, &mock).await;
    run_sdk_script(&python, RETRY_SCRIPT, &gw, "SDK-RETRY-OK").await;
    gw.shutdown().await;
    let s = sessions(&home);
    assert_eq!(texts(&s["api:cold"], "user"), ["slow question"], "stored once");
    assert_eq!(
        texts(&s["api:cold"], "assistant").last().map(String::as_str),
        Some("WARM ANSWER")
    );
}
