//! Bus-aware tools: `spawn` (subagents report back through the system channel) and `cron`.

use std::time::Duration;

use nanobot_bus::{InboundMessage, OutboundKind};
use nanobot_core::AgentLoop;
use nanobot_cron::{CronSchedule, JobStore};
use nanobot_testkit::{MockLlm, MockReply, TempHome};
use nanobot_tools::ToolContext;
use serde_json::json;

use crate::common::{GUARD, Running, agent, provider, settings};

fn is_subagent(r: &nanobot_testkit::RecordedRequest) -> bool {
    r.system_text().is_some_and(|s| s.contains("# Subagent"))
}

#[tokio::test]
async fn spawned_subagent_reports_back_through_the_system_channel() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.when(is_subagent, MockReply::text("There are 3 files."));
    mock.when_last_user_contains(
        "[Subagent 'counter' completed successfully]",
        MockReply::text("You have 3 files."),
    );
    mock.push(MockReply::tool_call(
        "spawn",
        json!({"task": "count the files", "label": "counter"}),
    ));
    mock.push(MockReply::text("I started a helper."));
    let run = Running::start(agent(&home, &mock));
    run.send(InboundMessage::new("telegram", "7", "7", "how many files?"))
        .await;
    let hint = run.next().await;
    assert_eq!(hint.kind, OutboundKind::ToolHint);
    assert_eq!(run.next_reply().await.content, "I started a helper.");
    let report = run.next_reply().await;
    assert_eq!(
        (report.channel.as_str(), report.chat_id.as_str()),
        ("telegram", "7")
    );
    assert_eq!(report.content, "You have 3 files.");

    let sub = mock.requests().into_iter().find(is_subagent).unwrap();
    let tools = sub.tool_names();
    assert!(tools.contains(&"read_file".to_owned()) && tools.contains(&"exec".to_owned()));
    for banned in ["message", "spawn", "cron"] {
        assert!(
            !tools.contains(&banned.to_owned()),
            "subagents must not get {banned}"
        );
    }
}

#[tokio::test]
async fn a_waited_subagent_answers_within_the_turn_at_its_own_temperature() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.when(is_subagent, MockReply::text("The capital is Lisbon."));
    mock.push(MockReply::tool_call(
        "spawn",
        json!({"task": "what is the capital of Portugal?", "label": "geo", "wait": true, "temperature": 0.7}),
    ));
    mock.push(MockReply::text("Lisbon."));
    let run = Running::start(agent(&home, &mock));
    run.send(InboundMessage::new("telegram", "7", "7", "capital of Portugal?"))
        .await;
    assert_eq!(run.next_reply().await.content, "Lisbon.");
    let requests = mock.requests();
    let sub = requests.iter().find(|r| is_subagent(r)).unwrap();
    assert_eq!(sub.body["temperature"], json!(0.7));
    // The result came back as the tool's result, in the same turn; no report follows on the system channel.
    let last = requests.iter().rev().find(|r| !is_subagent(r)).unwrap();
    let results = last.tool_results();
    assert!(
        results[0].content.contains("Subagent [geo] completed") && results[0].content.contains("Lisbon"),
        "{results:?}"
    );
    // The turn's call, the subagent's, the turn's answer: nothing was left to report in the background.
    assert_eq!(requests.len(), 3, "{requests:#?}");
}

#[tokio::test]
async fn stop_cancels_running_subagents() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.when(
        is_subagent,
        MockReply::text("never").delay(Duration::from_secs(3600)),
    );
    mock.push(MockReply::tool_call("spawn", json!({"task": "a long job"})));
    mock.push(MockReply::text("Working on it."));
    let run = Running::start(agent(&home, &mock));
    run.send(InboundMessage::new("telegram", "7", "7", "do the long job"))
        .await;
    assert_eq!(run.next_reply().await.content, "Working on it.");
    tokio::time::timeout(GUARD, mock.wait_for_requests(3))
        .await
        .unwrap();
    run.send(InboundMessage::new("telegram", "7", "7", "/stop")).await;
    assert_eq!(run.next_reply().await.content, "⏹ Stopped 1 task(s).");
    run.send(InboundMessage::new("telegram", "7", "7", "/status"))
        .await;
    assert!(run.next_reply().await.content.contains("Subagents running: 0"));
}

#[tokio::test]
async fn cron_tool_binds_jobs_to_the_chat_and_refuses_inside_cron_turns() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    let agent = AgentLoop::builder(provider(&mock), settings(&home))
        .cron(
            JobStore::new(home.workspace().join("cron/jobs.json")),
            chrono_tz::Tz::UTC,
        )
        .build()
        .unwrap();
    let run = Running::start(agent);
    let cron = run.agent.cron().unwrap().clone();

    mock.push(MockReply::tool_call(
        "cron",
        json!({"action": "add", "message": "Drink water", "every_seconds": 3600}),
    ));
    mock.push(MockReply::text("Scheduled."));
    run.send(InboundMessage::new(
        "telegram",
        "5",
        "5",
        "remind me hourly to drink water",
    ))
    .await;
    assert_eq!(run.next_reply().await.content, "Scheduled.");
    let jobs = cron.list().unwrap();
    assert_eq!(jobs.len(), 1);
    let job = &jobs[0];
    // Written as 0.3.5 writes it: bound to the session and origin chat, no legacy delivery fields.
    assert_eq!(job.payload.origin_channel.as_deref(), Some("telegram"));
    assert_eq!(job.payload.origin_chat_id.as_deref(), Some("5"));
    assert_eq!(job.payload.session_key.as_deref(), Some("telegram:5"));
    assert_eq!(
        (job.payload.channel.as_deref(), job.payload.to.as_deref()),
        (None, None)
    );
    assert!(!job.payload.deliver);
    assert!(job.payload.is_bound());

    // The job fires: a cron turn, whose attempt to add another job is refused; the answer is delivered.
    mock.push(MockReply::tool_call(
        "cron",
        json!({"action": "add", "message": "again", "every_seconds": 60}),
    ));
    mock.push(MockReply::text("Time to drink water!"));
    let outcome = tokio::time::timeout(GUARD, cron.run_now(&job.id, true))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(outcome.output.as_deref(), Some("Time to drink water!"));
    let delivered = run.next_reply().await;
    assert_eq!(
        (delivered.chat_id.as_str(), delivered.content.as_str()),
        ("5", "Time to drink water!")
    );
    let refused = mock.last_request().unwrap().tool_results().pop().unwrap();
    assert!(
        refused
            .content
            .contains("cannot schedule new jobs from within a cron job"),
        "{}",
        refused.content
    );
    assert_eq!(cron.list().unwrap().len(), 1);

    // Protected system jobs are listed but not removable through the tool.
    cron.upsert_system_job("dream", "Dream", CronSchedule::every(Duration::from_secs(7200)))
        .unwrap();
    let ctx = ToolContext::new(home.workspace())
        .with_route("telegram", "5")
        .with_session("telegram:5");
    let listed = run
        .agent
        .tools()
        .execute("cron", json!({"action": "list"}), &ctx)
        .await;
    assert!(
        listed.text.contains("dream") && listed.text.contains("Drink water"),
        "{}",
        listed.text
    );
    let removed = run
        .agent
        .tools()
        .execute("cron", json!({"action": "remove", "job_id": "dream"}), &ctx)
        .await;
    assert!(removed.is_error, "{}", removed.text);
    assert_eq!(cron.list().unwrap().len(), 2);
}

#[tokio::test]
async fn the_message_tool_carries_buttons_and_refuses_commands_as_labels() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    mock.push(MockReply::tool_call(
        "message",
        json!({"content": "Pick one", "buttons": [["/new"]]}),
    ));
    mock.push(MockReply::tool_call(
        "message",
        json!({"content": "Pick one", "buttons": [["Tea", "Coffee"]]}),
    ));
    mock.push(MockReply::text("Asked."));
    let run = Running::start(agent(&home, &mock));
    run.send(InboundMessage::new("telegram", "7", "7", "offer drinks"))
        .await;
    let offer = loop {
        let m = run.next_reply().await;
        if m.content == "Pick one" {
            break m;
        }
    };
    assert_eq!(
        offer.metadata[nanobot_bus::META_BUTTONS],
        json!([["Tea", "Coffee"]])
    );
    let results = mock.requests().last().unwrap().tool_results();
    assert!(results[0].content.contains("not a /command"), "{results:?}");
}
