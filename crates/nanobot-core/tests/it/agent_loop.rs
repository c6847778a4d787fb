//! The agent loop end to end: sessions, tools, progress, streaming, routing, concurrency, /stop.

use std::time::Duration;

use nanobot_bus::{InboundMessage, OutboundKind, SYSTEM_CHANNEL};
use nanobot_core::{StopReason, TurnOptions};
use nanobot_testkit::{MockLlm, MockReply, TempHome, ToolCallSpec};
use serde_json::json;

use crate::common::{GUARD, Running, agent, session_lines};

#[tokio::test]
async fn multi_tool_turn_is_saved_with_truncated_results() {
    let home = TempHome::new();
    let big = "0123456789".repeat(100);
    home.write_workspace_file("big.txt", &big);
    let mock = MockLlm::start().await;
    mock.push(MockReply::tool_call(
        "write_file",
        json!({"path": "a.txt", "content": "hello"}),
    ));
    mock.push(MockReply::tool_calls(vec![
        ToolCallSpec::new("read_file", json!({"path": "big.txt"})),
        ToolCallSpec::new("list_dir", json!({"path": "."})),
    ]));
    mock.push(MockReply::text("Done: wrote a.txt."));
    let agent = agent(&home, &mock);

    let answer = agent.process_direct("make a file", "cli:direct").await.unwrap();
    assert_eq!(answer, "Done: wrote a.txt.");
    assert_eq!(
        std::fs::read_to_string(home.workspace().join("a.txt")).unwrap(),
        "hello"
    );

    let reqs = mock.completion_requests();
    assert_eq!(reqs.len(), 3);
    // The model saw the whole read_file result, in call order before list_dir's.
    let results = reqs[2].tool_results();
    assert_eq!(results.len(), 3);
    assert!(
        results[1].content.contains(&"0123456789".repeat(50)),
        "full result sent to the model"
    );
    assert!(results[2].content.contains("a.txt"));
    // The request's user message is the user's text, as 0.3.5 sends it; the system prompt does not change.
    assert!(!reqs[0].last_user_text().unwrap().contains("Runtime Context"));
    assert_eq!(reqs[0].system_text(), reqs[2].system_text());

    let lines = session_lines(&agent, "cli:direct");
    assert_eq!(lines[0]["_type"], "metadata");
    let roles: Vec<&str> = lines[1..].iter().map(|l| l["role"].as_str().unwrap()).collect();
    assert_eq!(
        roles,
        [
            "user",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "tool",
            "assistant"
        ]
    );
    assert_eq!(
        lines[1]["content"], "make a file",
        "stored without the runtime context"
    );
    assert_eq!(lines[2]["tool_calls"][0]["function"]["name"], "write_file");
    assert_eq!(lines[5]["name"], "read_file");
    let stored = lines[5]["content"].as_str().unwrap();
    assert!(
        stored.ends_with("... (truncated)") && stored.chars().count() < 520,
        "stored copy truncated"
    );
    assert_eq!(lines[7]["content"], "Done: wrote a.txt.");
    assert!(lines[1..].iter().all(|l| l["timestamp"].is_string()));
    assert!(
        !agent.sessions().holds_checkpoint("cli:direct"),
        "checkpoint cleared after the turn"
    );

    // The next turn replays the history.
    mock.push(MockReply::text("again"));
    agent.process_direct("and now?", "cli:direct").await.unwrap();
    let last = mock.completion_requests().pop().unwrap();
    assert_eq!(
        last.messages().len(),
        1 + 7 + 1,
        "system + stored turn + new user message"
    );
}

#[tokio::test]
async fn think_blocks_are_stripped_everywhere() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("<think>secret plan</think>The answer is 4."));
    let agent = agent(&home, &mock);
    assert_eq!(
        agent.process_direct("2+2?", "cli:t").await.unwrap(),
        "The answer is 4."
    );
    let lines = session_lines(&agent, "cli:t");
    assert!(!lines.iter().any(|l| l.to_string().contains("secret plan")));

    // Streamed to the CLI: no think text in the deltas either.
    mock.push(MockReply::text("<think>hidden</think>Streamed answer").chunk_chars(3));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let msg = InboundMessage::new("cli", "u", "t", "again").with_session_key("cli:t");
    let reply = agent
        .process_message(
            msg,
            TurnOptions {
                stream: Some(tx),
                ..TurnOptions::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(reply.content, "Streamed answer");
    let mut streamed = String::new();
    while let Ok(d) = rx.try_recv() {
        streamed.push_str(&d);
    }
    assert_eq!(streamed, "Streamed answer");
}

#[tokio::test]
async fn empty_answer_is_retried_once() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.push(MockReply::text(""));
    mock.push(MockReply::text("Here is the summary."));
    let agent = agent(&home, &mock);
    assert_eq!(
        agent.process_direct("do it", "cli:e").await.unwrap(),
        "Here is the summary."
    );
    let reqs = mock.completion_requests();
    assert_eq!(reqs.len(), 2);
    assert!(
        reqs[1]
            .last_user_text()
            .unwrap()
            .contains("previous reply was empty")
    );
}

#[tokio::test]
async fn an_empty_answer_twice_is_a_clear_message_not_an_outage() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.set_fallback(MockReply::text(""));
    let agent = agent(&home, &mock);
    let answer = agent.process_direct("hi", "cli:empty").await.unwrap();
    assert!(
        answer.starts_with("The model gave an empty answer twice"),
        "{answer}"
    );
    assert!(!answer.contains("unavailable"));
    let reqs = mock.completion_requests();
    assert!(
        reqs.last()
            .unwrap()
            .last_user_text()
            .unwrap()
            .contains("previous reply was empty"),
        "one retry with a nudge"
    );
}

#[tokio::test]
async fn max_iterations_ends_with_a_final_call_without_tools() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.set_fallback(MockReply::tool_call("list_dir", json!({"path": "."})));
    let mut s = crate::common::settings(&home);
    s.max_tool_iterations = 2;
    let agent = nanobot_core::AgentLoop::new(crate::common::provider(&mock), s).unwrap();
    let answer = agent.process_direct("loop forever", "cli:m").await.unwrap();
    assert!(
        answer.contains("maximum number of tool call iterations (2)"),
        "{answer}"
    );
    let reqs = mock.completion_requests();
    assert_eq!(reqs.len(), 3, "two iterations plus one final call");
    assert!(!reqs[1].tools().is_empty());
    assert!(reqs[2].tools().is_empty(), "the final call offers no tools");

    // When the final call answers, that answer is used.
    mock.clear_fallback();
    mock.push_all([
        MockReply::tool_call("list_dir", json!({"path": "."})),
        MockReply::tool_call("list_dir", json!({"path": "."})),
        MockReply::text("Best effort answer."),
    ]);
    // When the final call answers, the answer says what happened, then gives the model's summary.
    let answer = agent.process_direct("again", "cli:m").await.unwrap();
    assert!(
        answer.starts_with("I reached the maximum number of tool call iterations (2)")
            && answer.ends_with("Best effort answer."),
        "{answer}"
    );
    assert!(
        answer.contains("agents.defaults.maxToolIterations"),
        "the cap message names the setting to raise: {answer}"
    );
    // Tool-call text written instead of a summary is not shown as the answer.
    mock.push_all([
        MockReply::tool_call("list_dir", json!({"path": "."})),
        MockReply::tool_call("list_dir", json!({"path": "."})),
        MockReply::text("functions.list_dir: {\"path\": \".\"}"),
    ]);
    let answer = agent.process_direct("once more", "cli:m").await.unwrap();
    assert!(!answer.contains("functions.list_dir"), "{answer}");
    assert!(
        answer.contains("maximum number of tool call iterations (2)"),
        "{answer}"
    );
    // Nor a call cut off by the length limit, with the quotes HTML-escaped as some chat templates write them.
    mock.push_all([
        MockReply::tool_call("list_dir", json!({"path": "."})),
        MockReply::tool_call("list_dir", json!({"path": "."})),
        MockReply::text(
            "functions.write_file:{&#34;path&#34;: &#34;notes.txt&#34;, &#34;content&#34;: &#34;buy",
        ),
    ]);
    let answer = agent.process_direct("and again", "cli:m").await.unwrap();
    assert!(
        !answer.contains("functions.write_file") && !answer.contains("&#34;"),
        "{answer}"
    );
    assert!(
        answer.contains("maximum number of tool call iterations (2)"),
        "{answer}"
    );
}

#[tokio::test]
async fn a_model_repeating_the_same_call_is_stopped_early_with_a_clear_answer() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.set_fallback(MockReply::tool_call("list_dir", json!({"path": "."})));
    let mut s = crate::common::settings(&home);
    s.max_tool_iterations = 50;
    let agent = nanobot_core::AgentLoop::new(crate::common::provider(&mock), s).unwrap();
    let answer = agent.process_direct("loop forever", "cli:r").await.unwrap();
    assert!(
        answer.contains("called `list_dir` with the same arguments 3 times in a row"),
        "{answer}"
    );
    // Three identical rounds, then one final call without tools.
    let reqs = mock.completion_requests();
    assert_eq!(reqs.len(), 4);
    assert!(reqs[3].tools().is_empty());

    // Streamed (the CLI, a streaming channel): the last call's tool-call text never reaches the screen; the
    // composed answer is the reply (llama-cpp-python's `chatml-function-calling` with SmolLM2, the bench).
    let same = || MockReply::tool_call("list_dir", json!({"path": "."}));
    mock.push_all([
        same(),
        same(),
        same(),
        MockReply::text("functions.list_dir:\n{&#34;path&#34;: &#34;.&#34;}").chunk_chars(4),
    ]);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let reply = agent
        .process_message(
            InboundMessage::new("cli", "u", "r", "loop again").with_session_key("cli:r"),
            TurnOptions {
                stream: Some(tx),
                ..TurnOptions::default()
            },
        )
        .await
        .unwrap();
    let mut streamed = String::new();
    while let Ok(d) = rx.try_recv() {
        streamed.push_str(&d);
    }
    assert!(
        !streamed.contains("functions.") && !streamed.contains("&#34;"),
        "{streamed}"
    );
    assert!(
        reply
            .content
            .contains("called `list_dir` with the same arguments 3 times in a row")
            && !reply.content.contains("functions."),
        "{}",
        reply.content
    );

    // Different arguments are progress, not a loop.
    mock.clear_fallback();
    mock.push_all([
        MockReply::tool_call("list_dir", json!({"path": "."})),
        MockReply::tool_call("list_dir", json!({"path": "a"})),
        MockReply::tool_call("list_dir", json!({"path": "."})),
        MockReply::text("Found it."),
    ]);
    assert_eq!(agent.process_direct("look", "cli:r2").await.unwrap(), "Found it.");
}

#[tokio::test]
async fn provider_errors_end_the_turn_with_a_clear_message() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.push(MockReply::error(401));
    let agent = agent(&home, &mock);
    let msg = InboundMessage::new("cli", "u", "x", "hi");
    let reply = agent.process_message(msg, TurnOptions::default()).await.unwrap();
    assert_eq!(reply.stop_reason, Some(StopReason::Error));
    assert!(
        reply.content.contains("rejected the credentials"),
        "{}",
        reply.content
    );
}

#[tokio::test]
async fn a_local_server_too_small_for_the_request_names_the_setting() {
    // llama.cpp's answer when the request is larger than the server's context (-c).
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.push(
        MockReply::error(400)
            .error_message("the request exceeds the available context size, try increasing it"),
    );
    let agent = agent(&home, &mock);
    let reply = agent
        .process_message(InboundMessage::new("cli", "u", "x", "hi"), TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(reply.stop_reason, Some(StopReason::Error));
    assert!(
        reply.content.contains("too long for the model")
            && reply.content.contains("agents.defaults.contextWindowTokens")
            && reply.content.contains("available context size"),
        "{}",
        reply.content
    );
}

#[tokio::test]
async fn progress_hints_and_reply_go_to_the_bus() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.push(MockReply::tool_call("list_dir", json!({"path": "."})).with_text("Let me look."));
    mock.push(MockReply::text("Nothing much."));
    let run = Running::start(agent(&home, &mock));
    let mut msg = InboundMessage::new("telegram", "42", "42", "what's there?");
    msg.metadata.insert("message_id".into(), json!(7));
    run.send(msg).await;
    let p = run.next().await;
    assert_eq!(
        (p.kind.clone(), p.content.as_str()),
        (OutboundKind::Progress, "Let me look.")
    );
    let h = run.next().await;
    assert_eq!(h.kind, OutboundKind::ToolHint);
    assert_eq!(h.content, "list_dir(\".\")");
    let r = run.next().await;
    assert_eq!(
        (r.kind.clone(), r.channel.as_str(), r.chat_id.as_str()),
        (OutboundKind::Reply, "telegram", "42")
    );
    assert_eq!(r.content, "Nothing much.");
    assert_eq!(r.metadata["message_id"], 7);
}

#[tokio::test]
async fn streaming_channels_get_deltas_and_one_stream_end() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("<think>x</think>Hello there, friend.").chunk_chars(4));
    let run = Running::start(agent(&home, &mock));
    run.send(InboundMessage::new("web", "u", "c", "hi").with_streaming(true))
        .await;
    let mut text = String::new();
    let stream_id;
    loop {
        let m = run.next().await;
        match m.kind {
            OutboundKind::StreamDelta { .. } => text.push_str(&m.content),
            OutboundKind::StreamEnd { stream_id: id } => {
                assert_eq!(m.content, "Hello there, friend.");
                stream_id = id;
                break;
            }
            other => panic!("unexpected {other:?}: {}", m.content),
        }
    }
    assert_eq!(text, "Hello there, friend.");
    assert!(!stream_id.is_empty());
    // No duplicate plain reply follows: the next outbound belongs to the next message.
    mock.push(MockReply::text("second"));
    run.send(InboundMessage::new("web", "u", "c", "again")).await;
    assert_eq!(run.next_reply().await.content, "second");
}

#[tokio::test]
async fn a_stream_end_before_tool_calls_says_the_turn_goes_on() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.push(MockReply::tool_call("list_dir", json!({"path": "."})).with_text("Let me look."));
    mock.push(MockReply::text("Nothing much."));
    let run = Running::start(agent(&home, &mock));
    run.send(InboundMessage::new("web", "u", "c", "what's there?").with_streaming(true))
        .await;
    let mut ends = Vec::new();
    while ends.len() < 2 {
        let m = run.next().await;
        if let OutboundKind::StreamEnd { .. } = m.kind {
            ends.push((
                m.content.clone(),
                m.metadata.get(nanobot_bus::META_STREAM_RESUMING).cloned(),
            ));
        }
    }
    assert_eq!(
        ends,
        [
            ("Let me look.".to_string(), Some(json!(true))),
            ("Nothing much.".to_string(), None)
        ],
        "only the stream end that ends the turn lacks the marker"
    );
}

#[tokio::test]
async fn message_tool_to_own_chat_suppresses_the_final_reply() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.push(MockReply::tool_call(
        "message",
        json!({"content": "Here you go!"}),
    ));
    mock.push(MockReply::text("I sent it."));
    let run = Running::start(agent(&home, &mock));
    run.send(InboundMessage::new("telegram", "1", "99", "send me something"))
        .await;
    let m = run.next_reply().await;
    assert_eq!((m.content.as_str(), m.chat_id.as_str()), ("Here you go!", "99"));
    mock.push(MockReply::text("pong"));
    run.send(InboundMessage::new("telegram", "1", "99", "ping")).await;
    assert_eq!(
        run.next_reply().await.content,
        "pong",
        "no duplicate 'I sent it.' reply"
    );
}

#[tokio::test]
async fn system_messages_are_routed_to_the_origin_session() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("Your report is ready."));
    let run = Running::start(agent(&home, &mock));
    run.send(InboundMessage::new(
        SYSTEM_CHANNEL,
        "subagent",
        "telegram:42",
        "[Subagent 'x' completed]\n\nResult: 3",
    ))
    .await;
    let m = run.next_reply().await;
    assert_eq!(
        (m.channel.as_str(), m.chat_id.as_str(), m.content.as_str()),
        ("telegram", "42", "Your report is ready.")
    );
    let req = mock.last_request().unwrap();
    // The turn runs as the origin chat's: the prompt is shaped for Telegram.
    assert!(
        req.system_text().unwrap().contains("messaging app"),
        "{:?}",
        req.system_text()
    );
    let lines = session_lines(&run.agent, "telegram:42");
    assert!(lines.iter().any(|l| l["content"] == "Your report is ready."));
}

#[tokio::test]
async fn two_sessions_progress_while_one_is_slow() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.when_last_user_contains(
        "slow job",
        MockReply::text("slow done").delay(Duration::from_secs(3600)),
    );
    mock.when_last_user_contains("quick job", MockReply::text("quick done"));
    let run = Running::start(agent(&home, &mock));
    run.send(InboundMessage::new("telegram", "a", "A", "slow job"))
        .await;
    tokio::time::timeout(GUARD, mock.wait_for_requests(1))
        .await
        .unwrap();
    run.send(InboundMessage::new("telegram", "b", "B", "quick job"))
        .await;
    let m = run.next_reply().await;
    assert_eq!((m.chat_id.as_str(), m.content.as_str()), ("B", "quick done"));
    assert_eq!(run.agent.stop_session("telegram:A"), 1);
}

#[tokio::test]
async fn stop_cancels_a_turn_waiting_on_the_model() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.when_last_user_contains_once(
        "take your time",
        MockReply::text("too late").delay(Duration::from_secs(3600)),
    );
    let run = Running::start(agent(&home, &mock));
    run.send(InboundMessage::new("telegram", "a", "A", "take your time"))
        .await;
    tokio::time::timeout(GUARD, mock.wait_for_requests(1))
        .await
        .unwrap();
    run.send(InboundMessage::new("telegram", "a", "A", "/stop")).await;
    let m = run.next_reply().await;
    assert_eq!(m.content, "⏹ Stopped 1 task(s).");
    // The session's worker is free again: a new message is answered (it would wait an hour otherwise).
    mock.push(MockReply::text("fresh answer"));
    run.send(InboundMessage::new("telegram", "a", "A", "hello again"))
        .await;
    assert_eq!(run.next_reply().await.content, "fresh answer");
    let lines = session_lines(&run.agent, "telegram:A");
    assert!(!lines.iter().any(|l| l["content"] == "too late"));
}

#[tokio::test]
async fn a_cut_off_answer_is_continued() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("The first half, ").finish_reason("length"));
    mock.push(MockReply::text("and the second half."));
    let agent = agent(&home, &mock);
    let answer = agent
        .process_direct("tell me everything", "cli:len")
        .await
        .unwrap();
    assert_eq!(answer, "The first half, and the second half.");
    let reqs = mock.completion_requests();
    assert_eq!(reqs.len(), 2);
    assert!(
        reqs[1]
            .last_user_text()
            .unwrap()
            .contains("Continue exactly where you stopped")
    );
    let lines = session_lines(&agent, "cli:len");
    assert_eq!(lines.len(), 3, "metadata, user, one assistant answer");
    assert_eq!(lines[2]["content"], "The first half, and the second half.");
}

/// A turn whose model never finishes is stopped at `turn_timeout`, and the user is told why (paused clock:
/// the hour-long model delay passes at once).
#[tokio::test(start_paused = true)]
async fn a_turn_is_stopped_at_its_deadline_with_a_message() {
    let home = nanobot_testkit::TempHome::new();
    let mock = nanobot_testkit::MockLlm::start().await;
    mock.push(nanobot_testkit::MockReply::text("too late").delay(std::time::Duration::from_secs(3000)));
    let mut s = crate::common::settings(&home);
    s.turn_timeout = std::time::Duration::from_secs(5);
    let agent = nanobot_core::AgentLoop::new(crate::common::provider(&mock), s).unwrap();
    let answer = agent.process_direct("hi", "cli:deadline").await.unwrap();
    assert!(answer.contains("turn limit of 5s"), "{answer}");
    assert!(!answer.contains("too late"));
}

/// A valid value for `schema` in which every optional parameter, at every level, is `null`.
fn with_nulls(schema: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    if let Some(first) = schema["enum"].get(0) {
        return first.clone();
    }
    let ty = match &schema["type"] {
        Value::String(t) => t.as_str(),
        Value::Array(ts) => ts
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null")
            .unwrap_or(""),
        _ => "",
    };
    match ty {
        "string" => Value::from("x"),
        "integer" | "number" => schema.get("minimum").cloned().unwrap_or(Value::from(1)),
        "boolean" => Value::Bool(false),
        "array" => Value::Array(vec![with_nulls(&schema["items"])]),
        "object" => {
            let required = schema["required"].as_array().cloned().unwrap_or_default();
            let props = schema["properties"].as_object().cloned().unwrap_or_default();
            Value::Object(
                props
                    .iter()
                    .map(|(name, prop)| {
                        let v = if required.iter().any(|r| r == name) {
                            with_nulls(prop)
                        } else {
                            Value::Null
                        };
                        (name.clone(), v)
                    })
                    .collect(),
            )
        }
        _ => Value::Null,
    }
}

/// The schema keywords in `schema` that local servers' grammar builders cannot take (`maxLength`, `pattern`),
/// property names aside.
fn grammar_unfriendly(schema: &serde_json::Value) -> Vec<String> {
    use serde_json::Value;
    let mut found = Vec::new();
    match schema {
        Value::Object(o) => {
            for (k, v) in o {
                if k == "properties" {
                    for p in v.as_object().into_iter().flat_map(|m| m.values()) {
                        found.extend(grammar_unfriendly(p));
                    }
                } else if k == "maxLength" || (k == "pattern" && v.is_string()) {
                    found.push(format!("{k}={v}"));
                } else {
                    found.extend(grammar_unfriendly(v));
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| found.extend(grammar_unfriendly(v))),
        _ => {}
    }
    found
}

/// Models with strict schemas send `null` for every parameter they omit: each tool the agent offers accepts it,
/// its schema declares no `default: null`, and the agent's own tools are nullable and defaulted as in 0.3.5.
#[tokio::test]
async fn every_tool_of_the_agent_accepts_null_for_its_optional_parameters() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    let agent =
        nanobot_core::AgentLoop::builder(crate::common::provider(&mock), crate::common::settings(&home))
            .cron(
                nanobot_cron::JobStore::new(home.workspace().join("cron/jobs.json")),
                chrono_tz::Tz::UTC,
            )
            .build()
            .unwrap();
    let defs = agent.tools().definitions();
    for name in [
        "cron",
        "create_goal",
        "update_goal",
        "message",
        "spawn",
        "read_session",
    ] {
        assert!(defs.iter().any(|d| d.name == name), "{name} offered");
    }
    for spec in &defs {
        let args = with_nulls(&spec.parameters);
        if let Err(e) = agent.tools().prepare(&spec.name, args.clone()) {
            panic!("{} refuses {args}: {e}", spec.name);
        }
        let text = spec.parameters.to_string();
        assert!(!text.contains("\"default\":null"), "{}: {text}", spec.name);
        // Issue 50: no limit a local server's grammar builder cannot take (llama-cpp-python crashed on a
        // `maxLength` of 4,000); lengths are checked when the call runs.
        let found = grammar_unfriendly(&spec.parameters);
        assert!(found.is_empty(), "{}: {found:?} in {text}", spec.name);
    }
    // The agent's own tools, nullable and defaulted where 0.3.5 declares them, nowhere else.
    let own = [
        "cron",
        "create_goal",
        "update_goal",
        "message",
        "spawn",
        "list_sessions",
        "read_session",
        "search_sessions",
        "send_session_message",
        "my",
    ];
    let (mut nullable, mut defaults) = (Vec::new(), Vec::new());
    for spec in defs.iter().filter(|d| own.contains(&d.name.as_str())) {
        for (name, prop) in spec.parameters["properties"].as_object().unwrap() {
            if prop["type"]
                .as_array()
                .is_some_and(|t| t.contains(&json!("null")))
            {
                nullable.push(format!("{}.{name}", spec.name));
            }
            if let Some(d) = prop.get("default") {
                defaults.push(format!("{}.{name}={d}", spec.name));
            }
        }
    }
    nullable.sort();
    assert_eq!(
        nullable,
        [
            "create_goal.ui_summary",
            "update_goal.objective",
            "update_goal.recap",
            "update_goal.ui_summary"
        ]
    );
    assert_eq!(defaults, ["spawn.wait=false"]);
}
