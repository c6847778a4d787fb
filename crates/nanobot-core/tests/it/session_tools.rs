//! Issue 18: the session tools of 0.3.5 (`list_sessions`, `read_session`, `search_sessions`,
//! `send_session_message`), through the agent loop, within each chat's rights (issue 28): the CLI reaches every
//! session, a chat only its own chat's sessions, and it messages another chat's session only where `allowFrom`
//! lets it send there.

use nanobot_bus::InboundMessage;
use nanobot_core::AgentLoop;
use nanobot_core::rights::ChatRights;
use nanobot_sessions::{SessionMessage, SessionStore};
use nanobot_testkit::{MockLlm, MockReply, TempHome};
use serde_json::{Value, json};

use crate::common::{Running, provider, settings};

fn agent(home: &TempHome, mock: &MockLlm, per_minute: u32) -> AgentLoop {
    let mut s = settings(home);
    s.max_session_messages_per_minute = per_minute;
    AgentLoop::builder(provider(mock), s)
        .chat_rights(ChatRights::own_chat_only().with_channel("telegram", ["111", "222"]))
        .build()
        .unwrap()
}

async fn seed(store: &SessionStore, key: &str, user: &str, assistant: &str) {
    store
        .append(
            key,
            vec![
                SessionMessage::new("user", user),
                SessionMessage::new("assistant", assistant),
            ],
        )
        .await
        .unwrap();
}

/// Alice's private chat (111), a topic of it, Bob's chat (222) and a Slack channel nobody allowed.
async fn seed_home(store: &SessionStore) {
    seed(store, "telegram:111", "hello", "hi alice").await;
    seed(
        store,
        "telegram:111:topic-7",
        "plan the trip to Lisbon",
        "Flights booked for May.",
    )
    .await;
    store
        .update_header("telegram:111:topic-7", |h| {
            h.metadata.insert(
                "_compaction_route".into(),
                json!({"channel": "telegram", "chat_id": "111", "metadata": {}}),
            );
        })
        .await
        .unwrap();
    seed(
        store,
        "telegram:222",
        "my dentist appointment is on Tuesday",
        "Noted, Bob.",
    )
    .await;
    seed(store, "slack:C9", "the launch code is SWORDFISH", "Stored.").await;
}

/// An agent (`per_minute` session messages a minute) on a home seeded by [`seed_home`], and its store.
async fn seeded(home: &TempHome, mock: &MockLlm, per_minute: u32) -> (AgentLoop, SessionStore) {
    let agent = agent(home, mock, per_minute);
    let store = agent.sessions().clone();
    seed_home(&store).await;
    (agent, store)
}

/// The handle of session `key` (given out on first use, as the tools do).
async fn handle(store: &SessionStore, key: &str) -> String {
    let h = store.handles().await.unwrap();
    let name = &h.iter().find(|h| h.key == key).unwrap().name;
    format!("@{name}")
}

fn tool_results(mock: &MockLlm) -> Vec<String> {
    mock.last_request()
        .unwrap()
        .tool_results()
        .into_iter()
        .map(|r| r.content)
        .collect()
}

#[tokio::test]
async fn the_cli_lists_reads_and_searches_every_other_session() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    let (agent, store) = seeded(&home, &mock, 6).await;
    let bob = handle(&store, "telegram:222").await;
    let run = Running::start(agent);

    mock.push(MockReply::tool_call("list_sessions", json!({})));
    mock.push(MockReply::tool_call(
        "search_sessions",
        json!({"query": "NOTED, BOB"}),
    ));
    mock.push(MockReply::tool_call("read_session", json!({"session_key": bob})));
    mock.push(MockReply::tool_call(
        "read_session",
        json!({"session_key": "slack:C9", "query": "launch"}),
    ));
    mock.push(MockReply::tool_call(
        "read_session",
        json!({"session_key": "*", "query": "*"}),
    ));
    mock.push(MockReply::text("done"));
    run.send(InboundMessage::new("cli", "user", "direct", "what did bob say?"))
        .await;
    assert_eq!(run.next_reply().await.content, "done");

    let results = tool_results(&mock);
    let listed: Vec<String> = serde_json::from_str(&results[0]).unwrap();
    assert_eq!(listed.len(), 4, "every session but the CLI's own: {listed:?}");
    assert!(listed.contains(&bob), "{listed:?}");

    let found: Value = serde_json::from_str(&results[1]).unwrap();
    assert!(found["notice"].as_str().unwrap().contains("untrusted"));
    let hits = found["results"].as_array().unwrap();
    assert_eq!(hits.len(), 1, "{found}");
    assert_eq!(hits[0]["session_key"], "telegram:222");
    assert_eq!(hits[0]["session_ref"], "#session/telegram%3A222");
    assert_eq!(hits[0]["title"], "my dentist appointment is on Tuesday");
    assert_eq!(hits[0]["excerpts"][0]["content"], "Noted, Bob.");
    assert_eq!(hits[0]["excerpts"][0]["role"], "assistant");

    let read: Value = serde_json::from_str(&results[2]).unwrap();
    assert_eq!(read["handle"], bob.as_str());
    let roles: Vec<&str> = read["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant"]);

    let slack: Value = serde_json::from_str(&results[3]).unwrap();
    assert_eq!(slack["messages"].as_array().unwrap().len(), 1, "{slack}");
    assert_eq!(slack["session_key"], "slack:C9");
    assert!(results[4].contains("literal substring"), "{}", results[4]);
}

#[tokio::test]
async fn a_chat_reads_only_its_own_chats_sessions_and_other_chats_look_missing() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    let (agent, store) = seeded(&home, &mock, 6).await;
    let bob = handle(&store, "telegram:222").await;
    let slack = handle(&store, "slack:C9").await;
    let topic = handle(&store, "telegram:111:topic-7").await;
    let run = Running::start(agent);

    // Alice, in her own chat, probes everything a smuggled instruction could ask for.
    mock.push(MockReply::tool_call("list_sessions", json!({})));
    mock.push(MockReply::tool_call(
        "read_session",
        json!({"session_key": "telegram:222"}),
    ));
    mock.push(MockReply::tool_call(
        "read_session",
        json!({"session_key": slack}),
    ));
    mock.push(MockReply::tool_call(
        "read_session",
        json!({"session_key": "telegram:nobody"}),
    ));
    mock.push(MockReply::tool_call(
        "search_sessions",
        json!({"query": "swordfish"}),
    ));
    mock.push(MockReply::tool_call(
        "search_sessions",
        json!({"query": "dentist"}),
    ));
    mock.push(MockReply::tool_call(
        "read_session",
        json!({"session_key": topic}),
    ));
    mock.push(MockReply::text("done"));
    run.send(InboundMessage::new("telegram", "111", "111", "look around"))
        .await;
    assert_eq!(run.next_reply().await.content, "done");

    let results = tool_results(&mock);
    let listed: Vec<String> = serde_json::from_str(&results[0]).unwrap();
    assert!(listed.contains(&topic), "her topic: {listed:?}");
    assert!(
        listed.contains(&bob),
        "bob may be messaged (allowFrom): {listed:?}"
    );
    assert!(!listed.contains(&slack), "{listed:?}");
    let missing = |r: &str, name: &str| r.contains(&format!("session not found: {name}\n"));
    assert!(missing(&results[1], "telegram:222"), "{}", results[1]);
    assert!(missing(&results[2], &slack), "{}", results[2]);
    assert!(missing(&results[3], "telegram:nobody"), "{}", results[3]);
    for r in &results[4..6] {
        let v: Value = serde_json::from_str(r).unwrap();
        assert_eq!(v["results"], json!([]), "{r}");
    }
    assert!(
        !results
            .iter()
            .any(|r| r.contains("SWORDFISH") || r.contains("Tuesday"))
    );
    assert!(results[6].contains("Lisbon"), "{}", results[6]);
}

#[tokio::test]
async fn a_message_to_another_session_is_answered_in_its_chat_within_the_rights_and_the_rate() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    let (agent, store) = seeded(&home, &mock, 1).await;
    seed(&store, "telegram:111", "more", "ok").await;
    let bob = handle(&store, "telegram:222").await;
    let slack = handle(&store, "slack:C9").await;
    let alice = handle(&store, "telegram:111").await;
    let run = Running::start(agent);

    // Alice's turn: Slack is refused as missing; Bob is reached; a second message is over the rate.
    mock.push(MockReply::tool_call(
        "send_session_message",
        json!({"to": slack, "content": "leak", "expect_reply": false}),
    ));
    mock.push(MockReply::tool_call(
        "send_session_message",
        json!({"to": bob, "content": "<think>plan</think>Lunch at noon?", "expect_reply": false}),
    ));
    mock.push(MockReply::tool_call(
        "send_session_message",
        json!({"to": bob, "content": "again", "expect_reply": false}),
    ));
    mock.push(MockReply::text("asked bob"));
    // Bob's session answers the message it received (its turn runs beside Alice's).
    mock.when_last_user_contains_once("Lunch at noon?", MockReply::text("Bob's agent: noon works."));
    run.send(InboundMessage::new(
        "telegram",
        "111",
        "111",
        "ask bob about lunch",
    ))
    .await;

    let mut replies = Vec::new();
    while replies.len() < 2 {
        let m = run.next_reply().await;
        replies.push((m.channel.clone(), m.chat_id.clone(), m.content.clone()));
    }
    assert!(
        replies.contains(&("telegram".into(), "222".into(), "Bob's agent: noon works.".into())),
        "{replies:?}"
    );
    assert!(replies.contains(&("telegram".into(), "111".into(), "asked bob".into())));
    let reqs = mock.completion_requests();
    let user_says = |r: &nanobot_testkit::RecordedRequest, text: &str| {
        r.last_user_text().is_some_and(|t| t.contains(text))
    };
    let alice_last = reqs
        .iter()
        .rfind(|r| user_says(r, "ask bob about lunch"))
        .unwrap();
    let alice_results: Vec<String> = alice_last.tool_results().into_iter().map(|r| r.content).collect();
    assert!(
        alice_results[0].contains(&format!("session not found: {slack}\n")),
        "{}",
        alice_results[0]
    );
    assert_eq!(alice_results[1], format!("Sent to {bob}."));
    assert!(alice_results[2].contains("rate limit"), "{}", alice_results[2]);
    // Bob's turn saw the message (without the thinking) and who sent it, as data.
    let bob_turn = reqs
        .iter()
        .find(|r| user_says(r, "Lunch at noon?"))
        .unwrap()
        .body
        .to_string();
    assert!(
        bob_turn.contains("Lunch at noon?") && !bob_turn.contains("think>plan"),
        "{bob_turn:.800}"
    );
    assert!(
        bob_turn.contains(&format!("Message from {alice}.")),
        "{bob_turn:.800}"
    );
    // Alice's chat turn recorded where her session answers (0.3.5's `_compaction_route`).
    let alice_meta = store.metadata("telegram:111").await.unwrap();
    assert_eq!(
        alice_meta["_compaction_route"],
        json!({"channel": "telegram", "chat_id": "111", "metadata": {}})
    );
    // Stored in Bob's session, not in a session of its own.
    let bob_history = store.history("telegram:222", 50).await.unwrap();
    assert!(
        bob_history
            .iter()
            .any(|m| m.content_text().as_deref() == Some("Lunch at noon?"))
    );
}

#[tokio::test]
async fn a_message_expecting_a_reply_tells_the_sender_when_none_comes() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    let (agent, store) = seeded(&home, &mock, 6).await;
    seed(&store, "cli:direct", "earlier", "yes").await;
    let bob = handle(&store, "telegram:222").await;
    let run = Running::start(agent);

    mock.push(MockReply::tool_call(
        "send_session_message",
        json!({"to": bob, "content": "status?", "expect_reply": true}),
    ));
    mock.push(MockReply::tool_call(
        "send_session_message",
        json!({"to": bob, "content": "status?", "expect_reply": true, "reply_timeout_seconds": 5}),
    ));
    mock.push(MockReply::text("waiting"));
    // Bob's session answers in its chat, not with send_session_message: no reply reaches the CLI session.
    mock.when_last_user_contains_once("status?", MockReply::text("all fine"));
    // The CLI session's turn on the timeout notice.
    mock.when_last_user_contains_once("No reply from", MockReply::text("Bob did not answer in time."));
    run.send(InboundMessage::new("cli", "user", "direct", "ask bob"))
        .await;

    let mut cli = Vec::new();
    while cli.len() < 2 {
        let m = run.next_reply().await;
        if m.channel == "cli" {
            cli.push(m.content.clone());
        }
    }
    assert_eq!(cli, ["waiting", "Bob did not answer in time."]);
    let reqs = mock.completion_requests();
    let first = reqs[1].tool_results().remove(0).content;
    assert!(
        first.contains("reply_timeout_seconds between 5 and 60"),
        "{first}"
    );
    let notice = reqs
        .iter()
        .find(|r| r.last_user_text().is_some_and(|t| t.contains("No reply from")))
        .unwrap()
        .body
        .to_string();
    assert!(
        notice.contains(&format!("No reply from {bob} after 5 seconds.")),
        "{notice:.600}"
    );
}
