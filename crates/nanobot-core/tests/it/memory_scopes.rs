//! Memory scopes (issue 28): with `per-user`, each person's private chats read and write their own memory, a
//! group chat the group's, and turns nobody typed (cron jobs) the memory their session recorded; `shared` stays
//! the Python nanobot's one memory.

use std::sync::Arc;

use nanobot_bus::{InboundMessage, META_IS_GROUP};
use nanobot_core::{AgentLoop, MemoryAdapter};

/// The session metadata key that records the memory a session reads.
const MEMORY_SCOPE_KEY: &str = "memory_scope";
use nanobot_cron::CronJob;
use nanobot_memory::{ConsolidationSettings, DreamSettings, Memory, MemoryScope, MemoryStore, ScopeKey};
use nanobot_testkit::{MockLlm, MockReply, TempHome};
use serde_json::json;

use crate::common::{Running, provider, session_lines, settings};

fn agent(home: &TempHome, mock: &MockLlm, scope: MemoryScope) -> AgentLoop {
    let mut s = settings(home);
    s.memory_scope = scope;
    let sessions = nanobot_sessions::SessionStore::new(home.nanobot_dir(), home.workspace()).unwrap();
    let memory = Memory::open(
        &home.workspace(),
        sessions.clone(),
        provider(mock),
        ConsolidationSettings::new("mock-model", nanobot_memory::Budget::Messages { window: 1000 }),
        DreamSettings::new("mock-model"),
    )
    .unwrap();
    AgentLoop::builder(provider(mock), s)
        .sessions(sessions)
        .tool(Arc::new(memory.search_tool()))
        .memory(Arc::new(MemoryAdapter::new(memory)))
        .build()
        .unwrap()
}

fn dm(person: &str, text: &str) -> InboundMessage {
    InboundMessage::new("telegram", format!("{person}|name"), person, text)
        .with_metadata(META_IS_GROUP, false)
}

fn in_group(person: &str, text: &str) -> InboundMessage {
    InboundMessage::new("telegram", format!("{person}|name"), "-100", text).with_metadata(META_IS_GROUP, true)
}

/// Sends `msg`, answers it with `reply`, and returns the system prompt the model saw.
async fn prompt_of(run: &Running, mock: &MockLlm, msg: InboundMessage) -> String {
    mock.push(MockReply::text("ok"));
    run.send(msg).await;
    assert_eq!(run.next_reply().await.content, "ok");
    mock.completion_requests().last().unwrap().system_text().unwrap()
}

fn scoped(home: &TempHome, scope: &ScopeKey) -> MemoryStore {
    MemoryStore::new(home.workspace()).scoped(scope)
}

#[tokio::test]
async fn per_user_memory_keeps_people_and_groups_apart() {
    let home = TempHome::new();
    let alice = MemoryScope::PerUser.resolve("telegram", "111", "111", Some(false));
    let bob = MemoryScope::PerUser.resolve("telegram", "222", "222", Some(false));
    let group = MemoryScope::PerUser.resolve("telegram", "-100", "111", Some(true));
    home.write_workspace_file("memory/MEMORY.md", "SHARED-FACT\n");
    for (scope, text) in [
        (&alice, "ALICE-SECRET: surprise party for Bob\n"),
        (&bob, "BOB-FACT: likes chess\n"),
        (&group, "GROUP-FACT: picnic on Sunday\n"),
    ] {
        scoped(&home, scope).write_memory(text).unwrap();
    }
    scoped(&home, &alice)
        .append_history(
            "[2026-01-01 10:00] Alice's cat is called Miso.",
            Some("telegram:111"),
        )
        .unwrap();
    let mock = MockLlm::start().await;
    let run = Running::start(agent(&home, &mock, MemoryScope::PerUser));

    let a = prompt_of(&run, &mock, dm("111", "hi")).await;
    assert!(a.contains("ALICE-SECRET"), "{a}");
    assert!(
        a.contains(&format!("{}/MEMORY.md", alice.dir().display())),
        "the prompt names her file: {a}"
    );
    let b = prompt_of(&run, &mock, dm("222", "hi")).await;
    let g = prompt_of(&run, &mock, in_group("111", "hi all")).await;
    assert!(b.contains("BOB-FACT") && g.contains("GROUP-FACT"), "{b}\n{g}");
    for (who, p) in [("bob", &b), ("group", &g)] {
        assert!(!p.contains("ALICE-SECRET"), "{who} saw Alice's memory: {p}");
    }
    for p in [&a, &b, &g] {
        assert!(!p.contains("SHARED-FACT"), "{p}");
    }
    // A chat whose adapter does not say whether it is a group never gets a person's memory.
    let unknown = prompt_of(
        &run,
        &mock,
        InboundMessage::new("telegram", "111|name", "-200", "hi"),
    )
    .await;
    assert!(!unknown.contains("ALICE-SECRET"), "{unknown}");

    // memory_search searches the turn's scope.
    mock.push(MockReply::tool_call("memory_search", json!({"query": "Miso"})));
    mock.push(MockReply::text("found"));
    run.send(dm("111", "what is my cat called?")).await;
    assert_eq!(run.next_reply().await.content, "found");
    let results = mock.completion_requests().last().unwrap().tool_results();
    assert!(results[0].content.contains("Miso"), "{results:?}");

    // The scope is recorded with the session, for turns nobody types there.
    let header = &session_lines(&run.agent, "telegram:111")[0];
    assert_eq!(
        header["metadata"][MEMORY_SCOPE_KEY], "user:telegram:111",
        "{header}"
    );
    let job: CronJob = serde_json::from_value(json!({
        "id": "a1b2c3d4", "name": "reminder", "enabled": true,
        "schedule": {"kind": "every", "everyMs": 3_600_000},
        "payload": {"kind": "agent_turn", "message": "Remind me of the plans",
                    "sessionKey": "telegram:111", "originChannel": "telegram", "originChatId": "111"},
        "state": {}, "createdAtMs": 0, "updatedAtMs": 0, "deleteAfterRun": false
    }))
    .unwrap();
    mock.push(MockReply::text("reminder sent"));
    run.agent.run_cron_job(job).await.unwrap();
    assert_eq!(
        run.next_reply().await.content,
        "reminder sent",
        "delivered to the chat"
    );
    let cron = mock.completion_requests().last().unwrap().system_text().unwrap();
    assert!(cron.contains("ALICE-SECRET"), "{cron}");

    // /dream in the group runs the group's Dream only: it sees the group's history, not Alice's.
    scoped(&home, &group)
        .append_history(
            "[2026-01-02 10:00] The group moved the picnic.",
            Some("telegram:-100"),
        )
        .unwrap();
    mock.push(MockReply::text("nothing to change"));
    run.send(in_group("222", "/dream")).await;
    let report = run.next_reply().await.content;
    assert!(report.contains("1 new history entry"), "{report}");
    let dream = mock
        .completion_requests()
        .last()
        .unwrap()
        .last_user_text()
        .unwrap();
    assert!(
        dream.contains("moved the picnic") && !dream.contains("Miso"),
        "{dream}"
    );
}

#[tokio::test]
async fn per_chat_memory_is_the_chats_and_compaction_archives_into_it() {
    let home = TempHome::new();
    let mock = MockLlm::start().await;
    let run = Running::start(agent(&home, &mock, MemoryScope::PerChat));
    for n in 0..12 {
        mock.push(MockReply::text(format!("answer {n}")));
        run.send(dm("111", &format!("message {n}"))).await;
        run.next_reply().await;
    }
    mock.push(MockReply::text("[2026-01-01 10:00] Talked about twelve things."));
    run.send(dm("111", "/compact")).await;
    let reply = run.next_reply().await.content;
    assert!(reply.starts_with("Compacted:"), "{reply}");
    let chat = MemoryScope::PerChat.resolve("telegram", "111", "111", Some(false));
    let history = scoped(&home, &chat).read_history_after(0).unwrap();
    assert_eq!(history.len(), 1, "{history:?}");
    assert!(history[0].content.contains("twelve things"));
    assert!(
        MemoryStore::new(home.workspace())
            .read_history_after(0)
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn shared_memory_is_the_python_nanobots() {
    let home = TempHome::new();
    home.write_workspace_file("memory/MEMORY.md", "SHARED-FACT\n");
    let mock = MockLlm::start().await;
    let run = Running::start(agent(&home, &mock, MemoryScope::Shared));
    for msg in [dm("111", "hi"), in_group("222", "hi")] {
        let p = prompt_of(&run, &mock, msg).await;
        assert!(
            p.contains("SHARED-FACT") && p.contains("- Long-term memory: memory/MEMORY.md"),
            "{p}"
        );
    }
    assert!(!home.workspace().join("memory/scopes").exists());
    let header = &session_lines(&run.agent, "telegram:111")[0];
    assert!(header["metadata"].get(MEMORY_SCOPE_KEY).is_none(), "{header}");
}

/// Issue 41: a divided memory is divided where files open, not only in the prompt. Under `per-user`, Alice's turn
/// cannot read Bob's or the group's memory with `read_file`, list the scopes, find them with `grep`, or `cat`
/// them with `exec` (the namespace sandbox covers them); her own memory stays reachable (the control).
#[tokio::test]
async fn another_scope_is_out_of_reach_of_the_file_tools_and_exec() {
    let home = TempHome::new();
    let alice = MemoryScope::PerUser.resolve("telegram", "111", "111", Some(false));
    let bob = MemoryScope::PerUser.resolve("telegram", "222", "222", Some(false));
    let group = MemoryScope::PerUser.resolve("telegram", "-100", "111", Some(true));
    for (scope, text) in [
        (&alice, "ALICE-SECRET: surprise party\n"),
        (&bob, "BOB-FACT: likes chess\n"),
        (&group, "GROUP-FACT: picnic\n"),
    ] {
        scoped(&home, scope).write_memory(text).unwrap();
    }
    let file = |s: &ScopeKey| format!("{}/MEMORY.md", s.dir().display());
    let mock = MockLlm::start().await;
    let run = Running::start(agent(&home, &mock, MemoryScope::PerUser));
    for call in [
        json!({"name": "read_file", "args": {"path": file(&bob)}}),
        json!({"name": "read_file", "args": {"path": file(&group)}}),
        json!({"name": "list_dir", "args": {"path": "memory/scopes"}}),
        json!({"name": "grep", "args": {"pattern": "FACT"}}),
        json!({"name": "read_file", "args": {"path": file(&alice)}}),
        json!({"name": "grep", "args": {"pattern": "SECRET", "path": alice.dir().display().to_string()}}),
    ] {
        mock.push(MockReply::tool_call(
            call["name"].as_str().unwrap(),
            call["args"].clone(),
        ));
    }
    mock.push(MockReply::text("done"));
    run.send(dm("111", "what do the others remember?")).await;
    assert_eq!(run.next_reply().await.content, "done");
    let results: Vec<String> = mock
        .completion_requests()
        .last()
        .unwrap()
        .tool_results()
        .into_iter()
        .map(|r| r.content)
        .collect();
    let [bob_read, group_read, listed, grepped, own_read, own_grep] = results.as_slice() else {
        panic!("{results:?}")
    };
    for refused in [bob_read, group_read, listed] {
        assert!(refused.contains("another conversation's memory"), "{refused}");
    }
    assert!(
        !grepped.contains("BOB-FACT") && !grepped.contains("GROUP-FACT"),
        "{grepped}"
    );
    assert!(own_read.contains("ALICE-SECRET"), "{own_read}");
    assert!(own_grep.contains("ALICE-SECRET"), "{own_grep}");

    // exec: under the namespace sandbox (bubblewrap) the other scopes are an empty folder.
    if nanobot_testkit::peers::require("bwrap", nanobot_testkit::peers::which("bwrap")).is_none() {
        return;
    }
    mock.push(MockReply::tool_call(
        "exec",
        json!({"command": format!("cat {} {} {}", file(&bob), file(&group), file(&alice))}),
    ));
    mock.push(MockReply::text("done"));
    run.send(dm("111", "cat them")).await;
    assert_eq!(run.next_reply().await.content, "done");
    let out = mock.last_request().unwrap().tool_results().pop().unwrap().content;
    assert!(!out.contains("BOB-FACT") && !out.contains("GROUP-FACT"), "{out}");
    assert!(out.contains("ALICE-SECRET"), "{out}");
}
