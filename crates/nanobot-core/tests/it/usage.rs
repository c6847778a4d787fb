//! Usage and budgets through the loop: each model call recorded with who it was for, figures that add up over
//! turns streamed and not, a budget that refuses the next turn, stops a running one and holds for cron, `/usage`.

use std::sync::Arc;

use nanobot_core::{AgentLoop, TurnOptions};
use nanobot_testkit::{MockLlm, MockReply, TempHome};
use nanobot_usage::{Budget, Limit, Limits, Scope, UsageLedger};
use serde_json::json;

use crate::common::{GUARD, provider, settings};

fn ledger(home: &TempHome, budget: Budget) -> UsageLedger {
    UsageLedger::new(&home.nanobot_dir(), "UTC".parse().unwrap()).with_budget(budget)
}

fn agent(home: &TempHome, mock: &MockLlm, budget: Budget) -> AgentLoop {
    AgentLoop::builder(provider(mock), settings(home))
        .usage_ledger(Arc::new(ledger(home, budget)))
        .build()
        .unwrap()
}

fn per_chat_daily(tokens: u64) -> Budget {
    Budget {
        per_chat: Limits {
            daily: Limit {
                tokens: Some(tokens),
                cost: None,
            },
            monthly: Limit::default(),
        },
        ..Budget::default()
    }
}

#[tokio::test]
async fn every_call_is_recorded_for_its_chat_and_person_and_the_figures_add_up_streamed_or_not() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.push(MockReply::tool_call("list_dir", json!({"path": "."})).with_usage(100, 10));
    mock.push(
        MockReply::text("done")
            .with_usage(150, 20)
            .with_cache_usage(0, 40),
    );
    mock.push(MockReply::text("streamed answer").with_usage(300, 30));
    let agent = agent(&home, &mock, Budget::default());
    assert_eq!(
        agent.process_direct("look around", "cli:u").await.unwrap(),
        "done"
    );
    // A streamed turn: the usage comes in the stream's last chunk (`stream_options.include_usage`).
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let msg = nanobot_bus::InboundMessage::new("cli", "user", "u", "again").with_session_key("cli:u");
    let opts = TurnOptions {
        stream: Some(tx),
        ..TurnOptions::default()
    };
    let reply = agent.process_message(msg, opts).await.unwrap();
    assert_eq!(reply.content, "streamed answer");
    let streamed = tokio::time::timeout(GUARD, rx.recv())
        .await
        .expect("the stream's pieces are buffered");
    assert!(streamed.is_some(), "the answer was streamed");
    assert_eq!(mock.request_count(), 3);

    let read = ledger(&home, Budget::default());
    let (day, month) = read.totals(&Scope::Chat("cli:u".into())).unwrap();
    assert_eq!((day.calls, day.input, day.output), (3, 550, 60));
    assert_eq!(day, month);
    let (person, _) = read.totals(&Scope::Person("cli:user".into())).unwrap();
    assert_eq!(person.tokens(), 610);
    // mock-model has no price: its cost is unknown, never zero.
    assert_eq!(day.known_cost(), None);

    let text = agent.process_direct("/usage", "cli:u").await.unwrap();
    assert!(
        text.contains("This chat: today 3 calls, 610 tokens (550 in (40 cached), 60 out)"),
        "{text}"
    );
    assert!(text.contains("You: today 3 calls"), "{text}");
    assert!(text.contains("unknown"), "{text}");
    assert_eq!(mock.request_count(), 3, "/usage asks no model");
}

#[tokio::test]
async fn over_budget_the_next_turn_is_refused_with_the_limit_and_its_reset_and_asks_no_model() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("first").with_usage(250, 60));
    let agent = agent(&home, &mock, per_chat_daily(300));
    assert_eq!(agent.process_direct("hello", "cli:b").await.unwrap(), "first");
    let refused = agent.process_direct("and again", "cli:b").await.unwrap();
    assert!(
        refused.contains("daily budget of 300 tokens is used up (310 used)"),
        "{refused}"
    );
    assert!(
        refused.contains("agents.defaults.budget.perChat.daily.tokens"),
        "{refused}"
    );
    assert!(refused.contains("resets at"), "{refused}");
    assert_eq!(mock.request_count(), 1, "a refused turn asks no model");
    // The refused message is not kept as a turn of the conversation.
    let session = agent.sessions().session("cli:b").await.unwrap();
    assert!(
        !session
            .messages
            .iter()
            .any(|m| m.content_text().as_deref() == Some("and again"))
    );
    // Another chat has a budget of its own.
    mock.push(MockReply::text("other chat").with_usage(10, 1));
    assert_eq!(
        agent.process_direct("hi", "cli:other").await.unwrap(),
        "other chat"
    );
}

#[tokio::test]
async fn a_running_turn_stops_before_its_next_model_call_once_over() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.push(MockReply::tool_call("list_dir", json!({"path": "."})).with_usage(400, 20));
    mock.set_fallback(MockReply::tool_call("list_dir", json!({"path": "."})).with_usage(400, 20));
    let agent = agent(&home, &mock, per_chat_daily(300));
    let answer = agent.process_direct("work on it", "cli:s").await.unwrap();
    assert!(answer.starts_with("⛔ Stopped before the next step:"), "{answer}");
    assert!(answer.contains("perChat.daily.tokens"), "{answer}");
    assert_eq!(
        mock.request_count(),
        1,
        "no model call after the limit was reached"
    );
    // What the turn did is kept: the tool call and its result are in the session.
    let session = agent.sessions().session("cli:s").await.unwrap();
    assert!(session.messages.iter().any(|m| m.role() == Some("tool")));
}

#[cfg(feature = "cron")]
#[tokio::test]
async fn the_budget_holds_for_cron_jobs_in_the_chat_they_work_for() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("daily report").with_usage(500, 50));
    let agent = agent(&home, &mock, per_chat_daily(100));
    let job: nanobot_cron::CronJob = serde_json::from_value(json!({
        "id": "j1", "name": "j1", "enabled": true,
        "schedule": {"kind": "every", "everyMs": 3_600_000},
        "payload": {"kind": "agent_turn", "message": "write the report", "channel": "telegram", "to": "1",
                    "sessionKey": "telegram:1"},
        "state": {}, "createdAtMs": 0, "updatedAtMs": 0, "deleteAfterRun": false
    }))
    .unwrap();
    assert_eq!(agent.run_cron_job(job.clone()).await.unwrap(), "daily report");
    let read = ledger(&home, Budget::default());
    let (chat, _) = read.totals(&Scope::Chat("telegram:1".into())).unwrap();
    assert_eq!(
        chat.tokens(),
        550,
        "the job's calls count against the chat it works for"
    );
    let held = agent.run_cron_job(job).await.unwrap();
    assert!(held.contains("per-chat (for telegram:1) daily budget"), "{held}");
    assert_eq!(mock.request_count(), 1);
}

#[tokio::test]
async fn the_heartbeat_is_charged_to_the_chat_it_reports_to_and_held_by_its_budget() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    let agent = agent(&home, &mock, per_chat_daily(900));
    mock.push(MockReply::text("hi").with_usage(10, 1));
    assert_eq!(agent.process_direct("hello", "telegram:42").await.unwrap(), "hi");
    home.write_workspace_file("HEARTBEAT.md", "- Check whether the backup folder exists\n");
    mock.push(
        MockReply::tool_call("heartbeat", json!({"action": "run", "tasks": "Check"})).with_usage(300, 20),
    );
    mock.push(MockReply::text("The backup folder is missing!").with_usage(400, 30));
    mock.push(
        MockReply::tool_call(
            "evaluate_notification",
            json!({"should_notify": false, "reason": "test"}),
        )
        .with_usage(200, 10),
    );
    let outcome = agent.heartbeat_tick().await.unwrap();
    assert!(
        matches!(outcome, nanobot_core::HeartbeatOutcome::Ran { .. }),
        "{outcome:?}"
    );
    // The decision, the run and the notification gate, all charged to the chat the answer would go to.
    let read = ledger(&home, Budget::default());
    let (chat, _) = read.totals(&Scope::Chat("telegram:42".into())).unwrap();
    assert_eq!((chat.calls, chat.tokens()), (4, 971));
    // Over the chat's limit now: the next heartbeat asks no model and says which limit holds it.
    let before = mock.request_count();
    match agent.heartbeat_tick().await.unwrap() {
        nanobot_core::HeartbeatOutcome::OverBudget { limit } => {
            assert!(limit.contains("perChat.daily.tokens"), "{limit}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(mock.request_count(), before);
}

fn telegram(text: &str, message_id: i64) -> nanobot_bus::InboundMessage {
    let mut m = nanobot_bus::InboundMessage::new("telegram", "5", "5", text);
    m.metadata.insert("message_id".into(), json!(message_id));
    m
}

#[tokio::test]
async fn over_budget_a_message_delivered_again_is_still_answered_once() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("first answer").with_usage(500, 50));
    let agent = agent(&home, &mock, per_chat_daily(300));
    let ask = |text, id| agent.process_message(telegram(text, id), TurnOptions::default());
    assert_eq!(ask("hello", 1).await.unwrap().content, "first answer");
    // Now over budget. The answered message delivered again (a bus redelivering it) gets its earlier answer,
    // marked replayed (never sent again), not a refusal.
    let again = ask("hello", 1).await.unwrap();
    assert!(again.replayed);
    assert_eq!(again.content, "first answer");
    // A new message is refused once; delivered again, the refusal is not sent a second time.
    let refused = ask("more", 2).await.unwrap();
    assert!(
        !refused.replayed && refused.content.contains("daily budget"),
        "{}",
        refused.content
    );
    let repeated = ask("more", 2).await.unwrap();
    assert!(repeated.replayed, "{repeated:?}");
    assert_eq!(mock.request_count(), 1);
}

/// The tool results of `key`'s session, in order.
async fn tool_results(agent: &AgentLoop, key: &str) -> Vec<String> {
    let session = agent.sessions().session(key).await.unwrap();
    session
        .messages
        .iter()
        .filter(|m| m.role() == Some("tool"))
        .filter_map(|m| m.content_text())
        .collect()
}

/// The ledger's records (every line of every month file), as JSON.
fn records(home: &TempHome) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(home.nanobot_dir().join("usage")).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        out.extend(text.lines().map(|l| serde_json::from_str(l).unwrap()));
    }
    out
}

#[tokio::test]
async fn the_last_call_after_the_iteration_cap_is_recorded_too() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.push(MockReply::tool_call("list_dir", json!({"path": "."})).with_usage(100, 10));
    mock.push(MockReply::text("what I found so far").with_usage(50, 5));
    let mut s = settings(&home);
    s.max_tool_iterations = 1;
    let agent = AgentLoop::builder(provider(&mock), s)
        .usage_ledger(Arc::new(ledger(&home, Budget::default())))
        .build()
        .unwrap();
    let answer = agent.process_direct("work on it", "cli:c").await.unwrap();
    assert!(answer.contains("what I found so far"), "{answer}");
    assert_eq!(mock.request_count(), 2, "the cap's last call without tools");
    let (day, _) = ledger(&home, Budget::default())
        .totals(&Scope::Chat("cli:c".into()))
        .unwrap();
    assert_eq!((day.calls, day.input, day.output), (2, 150, 15));
}

#[tokio::test]
async fn a_subagent_is_charged_to_its_parent_and_stopped_before_its_next_call_once_over() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.push(
        MockReply::tool_call("spawn", json!({"task": "look around", "wait": true})).with_usage(100, 10),
    );
    // The subagent's first call takes the chat over its limit (110 + 220 > 300).
    mock.push(MockReply::tool_call("list_dir", json!({"path": "."})).with_usage(200, 20));
    mock.set_fallback(MockReply::text("a call that must not be made").with_usage(1, 1));
    let agent = agent(&home, &mock, per_chat_daily(300));
    let answer = agent.process_direct("delegate it", "cli:d").await.unwrap();
    assert_eq!(
        mock.request_count(),
        2,
        "neither the subagent nor its parent called the model once over"
    );
    assert!(answer.starts_with("⛔ Stopped before the next step:"), "{answer}");
    let results = tool_results(&agent, "cli:d").await;
    assert!(
        results
            .iter()
            .any(|r| r.contains("⛔ Stopped before the next step:") && r.contains("perChat.daily.tokens")),
        "the subagent says which limit stopped it: {results:?}"
    );
    let records = records(&home);
    let sub: Vec<_> = records.iter().filter(|r| r["run"] == "subagent").collect();
    assert_eq!(sub.len(), 1, "{records:?}");
    assert_eq!(sub[0]["chat"], "cli:d", "charged to the parent's chat");
    assert_eq!(sub[0]["person"], "cli:user", "and to the parent's person");
    let (day, _) = ledger(&home, Budget::default())
        .totals(&Scope::Chat("cli:d".into()))
        .unwrap();
    assert_eq!(day.tokens(), 330);
}

#[tokio::test]
async fn a_subagent_is_not_started_once_the_call_that_asked_for_it_went_over() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    // The call asking for the subagent is recorded before it starts, and takes the chat over its limit.
    mock.push(
        MockReply::tool_call("spawn", json!({"task": "look around", "wait": true})).with_usage(100, 10),
    );
    mock.set_fallback(MockReply::text("a call that must not be made").with_usage(1, 1));
    let agent = agent(&home, &mock, per_chat_daily(100));
    let answer = agent.process_direct("delegate it", "cli:n").await.unwrap();
    assert_eq!(mock.request_count(), 1, "the subagent never called the model");
    assert!(answer.starts_with("⛔ Stopped before the next step:"), "{answer}");
    let results = tool_results(&agent, "cli:n").await;
    assert!(
        results
            .iter()
            .any(|r| r.contains("⛔ Not started:") && r.contains("perChat.daily.tokens")),
        "{results:?}"
    );
    assert!(records(&home).iter().all(|r| r["run"] != "subagent"));
}
