//! Consolidation with the MockLlm over real HTTP (and a gated fake provider for the one-at-a-time rule).

use std::sync::Arc;

use async_trait::async_trait;
use nanobot_memory::{ConsolidationOutcome, NOTHING_TO_KEEP};
use nanobot_providers::{ChatRequest, ChatResponse, EventStream, Provider, ProviderError};
use nanobot_testkit::{MockLlm, MockReply};
use serde_json::json;
use tokio::sync::{Notify, Semaphore};

use crate::support::{env, fill, provider};

#[tokio::test]
async fn consolidation_archives_the_text_answer_and_never_touches_memory_md() {
    let env = env();
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("- [permanent] The user's cat is called Miso."));
    fill(&env, "telegram:42", 5).await; // 20 messages
    std::fs::create_dir_all(env.store.dir()).unwrap();
    env.store
        .write_memory("# Memory\n- The user lives in Porto.\n")
        .unwrap();
    let c = env.consolidator(provider(&mock), 10);

    let outcomes = c.spawn_if_needed("telegram:42").await.unwrap().unwrap();
    let ConsolidationOutcome::Summarised { range, entry } = &outcomes[0] else {
        panic!("{outcomes:?}")
    };
    // window 10 keeps 5 → the cut is the next user turn at 16, never between a call and its result.
    assert_eq!(*range, 0..16);
    let entry = entry.as_ref().unwrap();
    assert_eq!(entry.cursor, 1);
    assert_eq!(entry.session_key.as_deref(), Some("telegram:42"));
    assert_eq!(entry.content, "- [permanent] The user's cat is called Miso.");
    assert_eq!(outcomes.len(), 1, "within budget after one round");

    let session = env.sessions.session("telegram:42").await.unwrap();
    assert_eq!(session.last_consolidated, 16);
    assert_eq!(
        env.store.read_memory().unwrap(),
        "# Memory\n- The user lives in Porto.\n",
        "only Dream edits MEMORY.md"
    );
    let history = env.store.read_history_after(0).unwrap();
    assert_eq!(history.len(), 1);

    // What the model saw: no tools, the memory as data, the conversation, then the archive prompt.
    let req = &mock.completion_requests()[0];
    assert!(req.tool_names().is_empty(), "{:?}", req.tool_names());
    let system = req.system_text().unwrap_or_default();
    assert!(system.contains("The user lives in Porto."), "{system}");
    let prompt = req.last_user_text().unwrap();
    assert!(prompt.contains("USER: turn 0: my cat is called Miso"), "{prompt}");
    assert!(prompt.ends_with(nanobot_memory::ARCHIVE_PROMPT), "{prompt}");
    assert!(prompt.contains("ASSISTANT [tools: exec]"), "{prompt}");
    assert!(
        !prompt.contains("turn 4"),
        "the kept tail is not consolidated: {prompt}"
    );

    // Within budget now: nothing more, and no model call.
    let again = c.spawn_if_needed("telegram:42").await.unwrap().unwrap();
    assert_eq!(again, vec![ConsolidationOutcome::NothingToDo]);
    assert_eq!(mock.completion_requests().len(), 1);
}

#[tokio::test]
async fn an_empty_answer_archives_raw() {
    let env = env();
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("   "));
    fill(&env, "cli:direct", 5).await;
    std::fs::create_dir_all(env.store.dir()).unwrap();
    env.store.write_memory("# Memory\n- old fact\n").unwrap();
    let c = env.consolidator(provider(&mock), 10);

    let outcome = c.consolidate("cli:direct").await.unwrap();
    let ConsolidationOutcome::RawArchived { range, entry, reason } = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(range, 0..16);
    assert!(reason.contains("no archive text"), "{reason}");
    assert!(
        entry.content.starts_with("[RAW] 16 messages\n"),
        "{}",
        entry.content
    );
    assert!(entry.content.contains("USER: turn 0: my cat is called Miso"));
    assert_eq!(
        env.sessions
            .session("cli:direct")
            .await
            .unwrap()
            .last_consolidated,
        16
    );
    assert_eq!(
        env.store.read_memory().unwrap(),
        "# Memory\n- old fact\n",
        "memory untouched"
    );
}

#[tokio::test]
async fn failing_model_keeps_the_slice_then_archives_it_raw() {
    let env = env();
    let mock = MockLlm::start().await;
    mock.set_fallback(MockReply::error(500));
    fill(&env, "cli:direct", 5).await;
    let c = env.consolidator(provider(&mock), 10);

    for _ in 0..2 {
        assert!(c.consolidate("cli:direct").await.is_err());
        assert_eq!(
            env.sessions
                .session("cli:direct")
                .await
                .unwrap()
                .last_consolidated,
            0
        );
    }
    assert!(env.store.read_history_after(0).unwrap().is_empty());
    let third = c.consolidate("cli:direct").await.unwrap();
    assert!(
        matches!(third, ConsolidationOutcome::RawArchived { .. }),
        "{third:?}"
    );
    assert_eq!(
        env.sessions
            .session("cli:direct")
            .await
            .unwrap()
            .last_consolidated,
        16
    );
}

#[tokio::test]
async fn reset_and_archive_saves_the_whole_session() {
    let env = env();
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("[2026-01-01 10:00] Talked about Miso."));
    fill(&env, "cli:direct", 2).await;
    let c = env.consolidator(provider(&mock), 100);

    let outcome = c.reset_and_archive("cli:direct").await.unwrap();
    let ConsolidationOutcome::Summarised { range, .. } = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(range, 0..8);
    let session = env.sessions.session("cli:direct").await.unwrap();
    assert!(session.messages.is_empty());
    assert_eq!(session.last_consolidated, 0);
    assert_eq!(
        env.store.read_history_after(0).unwrap()[0].content,
        "[2026-01-01 10:00] Talked about Miso."
    );
}

#[tokio::test]
async fn compact_consolidates_up_to_the_latest_turn() {
    let env = env();
    let mock = MockLlm::start().await;
    mock.push(MockReply::text(NOTHING_TO_KEEP));
    fill(&env, "cli:direct", 3).await;
    let c = env.consolidator(provider(&mock), 100);
    let outcome = c.compact("cli:direct").await.unwrap();
    let ConsolidationOutcome::Summarised { range, entry } = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(range, 0..8);
    assert!(entry.is_none(), "(nothing) writes no history entry");
    assert!(env.store.read_history_after(0).unwrap().is_empty());
    assert_eq!(
        env.sessions
            .session("cli:direct")
            .await
            .unwrap()
            .last_consolidated,
        8,
        "the slice is done all the same"
    );
    assert!(!env.store.memory_path().exists());
}

#[tokio::test]
async fn a_tool_call_is_refused_once_then_the_text_is_taken() {
    let env = env();
    let mock = MockLlm::start().await;
    // A model trained on the old protocol calls save_memory; it gets no tool and is asked again.
    mock.push(MockReply::tool_call(
        "save_memory",
        json!({"history_entry": "x", "memory_update": "wiped"}),
    ));
    mock.push(MockReply::text("- [durable] The project builds with cargo."));
    fill(&env, "cli:direct", 5).await;
    let c = env.consolidator(provider(&mock), 10);
    let outcome = c.consolidate("cli:direct").await.unwrap();
    assert_eq!(
        outcome.entry().unwrap().content,
        "- [durable] The project builds with cargo."
    );
    assert!(
        !env.store.memory_path().exists(),
        "a tool call never writes MEMORY.md"
    );
    let requests = mock.completion_requests();
    assert_eq!(requests.len(), 2);
    let second = serde_json::to_string(&requests[1].body).unwrap();
    assert!(second.contains("No tools run while archiving"), "{second}");

    // Tool calls twice in a row: archived raw, nothing lost.
    mock.push(MockReply::tool_call("save_memory", json!({})));
    mock.push(MockReply::tool_call("save_memory", json!({})));
    fill(&env, "cli:other", 5).await;
    let outcome = c.consolidate("cli:other").await.unwrap();
    let ConsolidationOutcome::RawArchived { reason, entry, .. } = outcome else {
        panic!("{outcome:?}")
    };
    assert!(reason.contains("tool calls"), "{reason}");
    assert!(entry.content.starts_with("[RAW] "), "{}", entry.content);
}

/// A provider that answers only when told to, to hold a consolidation in flight.
#[derive(Debug)]
struct Gated {
    gate: Arc<Semaphore>,
    entered: Arc<Notify>,
}

#[async_trait]
impl Provider for Gated {
    fn name(&self) -> &str {
        "gated"
    }

    fn stream(&self, _request: ChatRequest) -> EventStream {
        Box::pin(futures::stream::empty())
    }

    async fn chat(&self, _request: ChatRequest) -> Result<ChatResponse, ProviderError> {
        self.entered.notify_one();
        self.gate.acquire().await.unwrap().forget();
        Ok(ChatResponse {
            content: Some("- [ephemeral] gated".to_owned()),
            ..ChatResponse::default()
        })
    }
}

#[tokio::test]
async fn one_consolidation_per_session_at_a_time() {
    let env = env();
    fill(&env, "a", 5).await;
    fill(&env, "b", 5).await;
    let gate = Arc::new(Semaphore::new(0));
    let entered = Arc::new(Notify::new());
    let c = env.consolidator(
        Arc::new(Gated {
            gate: gate.clone(),
            entered: entered.clone(),
        }),
        10,
    );

    let first = c.spawn_if_needed("a");
    entered.notified().await; // the first run is inside the model call
    let second = c.spawn_if_needed("a").await.unwrap().unwrap();
    assert_eq!(second, vec![ConsolidationOutcome::Busy]);

    // Another session is not blocked by it.
    let other = c.spawn_if_needed("b");
    entered.notified().await;
    gate.add_permits(2);
    let (first, other) = (first.await.unwrap().unwrap(), other.await.unwrap().unwrap());
    assert!(
        matches!(first[0], ConsolidationOutcome::Summarised { .. }),
        "{first:?}"
    );
    assert!(
        matches!(other[0], ConsolidationOutcome::Summarised { .. }),
        "{other:?}"
    );
    let cursors: Vec<u64> = env
        .store
        .read_history_after(0)
        .unwrap()
        .iter()
        .map(|e| e.cursor)
        .collect();
    assert_eq!(cursors, vec![1, 2]);
}

#[tokio::test]
async fn a_reset_during_consolidation_leaves_the_new_session_alone() {
    let env = env();
    fill(&env, "a", 5).await;
    let gate = Arc::new(Semaphore::new(0));
    let entered = Arc::new(Notify::new());
    let c = env.consolidator(
        Arc::new(Gated {
            gate: gate.clone(),
            entered: entered.clone(),
        }),
        10,
    );

    let running = c.spawn_if_needed("a");
    entered.notified().await;
    // `/new` as the core does it: reset, then archive the old messages (waits for the running consolidation).
    let old = env.sessions.reset("a").await.unwrap();
    env.sessions
        .append("a", crate::support::turn(9, "fresh start"))
        .await
        .unwrap();
    let archive = tokio::spawn({
        let c = c.clone();
        async move { c.archive_session(old).await }
    });
    gate.add_permits(2);
    let first = running.await.unwrap().unwrap();
    assert_eq!(first[0].archived_messages(), 16);
    let archived = archive.await.unwrap().unwrap();
    assert!(archived.summarised());
    assert_eq!(
        archived.range(),
        16..20,
        "the rest of the old session; nothing is archived twice"
    );
    let session = env.sessions.session("a").await.unwrap();
    assert_eq!(session.messages.len(), 4);
    assert_eq!(
        session.last_consolidated, 0,
        "pointer of the fresh session untouched"
    );
}

#[tokio::test]
async fn the_checkpoint_becomes_the_sessions_summary_and_is_updated_next_time() {
    let env = env();
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("- [ephemeral] Naming the cat."));
    mock.push(MockReply::text("- [permanent] The cat is Miso; the dog is Rex."));
    fill(&env, "cli:s", 5).await;
    let c = env.consolidator(provider(&mock), 10);
    c.consolidate("cli:s").await.unwrap();
    let session = env.sessions.session("cli:s").await.unwrap();
    // Stored where 0.3.5 keeps it, so either program shows it in the system prompt.
    let summary = &session.metadata[nanobot_sessions::LAST_SUMMARY_KEY];
    assert_eq!(summary["text"], "- [ephemeral] Naming the cat.");
    assert!(
        summary["last_active"].as_str().is_some_and(|s| s.len() >= 19),
        "{summary}"
    );
    assert_eq!(
        nanobot_memory::last_summary(&session).as_deref(),
        Some("- [ephemeral] Naming the cat.")
    );

    // The next archive is asked to update it.
    fill(&env, "cli:s", 5).await;
    c.consolidate("cli:s").await.unwrap();
    let system = mock.completion_requests()[1].system_text().unwrap();
    assert!(
        system.contains("[Archived Context Summary]") && system.contains("Naming the cat."),
        "{system}"
    );
    let session = env.sessions.session("cli:s").await.unwrap();
    assert_eq!(
        session.metadata[nanobot_sessions::LAST_SUMMARY_KEY]["text"],
        "- [permanent] The cat is Miso; the dog is Rex."
    );

    // `/new` starts without it (as 0.3.5's clear does).
    env.sessions.reset("cli:s").await.unwrap();
    let session = env.sessions.session("cli:s").await.unwrap();
    assert!(!session.metadata.contains_key(nanobot_sessions::LAST_SUMMARY_KEY));
}

/// A turn's consolidation check costs what is not yet consolidated, not the session: on a long session it reads
/// only the file's tail, and under a token budget each message is counted once over the session's life, not at
/// every check (a long chat's checks would otherwise grow with it).
#[tokio::test]
async fn planning_reads_the_tail_and_counts_each_message_once() {
    use std::sync::atomic::{AtomicUsize, Ordering};

    let env = env();
    let mock = MockLlm::start().await;
    let key = "telegram:long";
    let long: Vec<_> = (0..2_500)
        .flat_map(|n| crate::support::turn(n, "small talk"))
        .collect();
    env.sessions.append(key, long).await.unwrap(); // 10,000 messages
    env.sessions.set_last_consolidated(key, 9_996).await.unwrap();
    let counted = Arc::new(AtomicUsize::new(0));
    let mut settings = nanobot_memory::ConsolidationSettings::new(
        "test-model",
        nanobot_memory::Budget::Tokens {
            max: 100_000,
            target: 50_000,
        },
    );
    let calls = counted.clone();
    settings.token_counter = Arc::new(move |text: &str| {
        calls.fetch_add(1, Ordering::SeqCst);
        text.len() / 4
    });
    let c =
        nanobot_memory::Consolidator::new(env.store.clone(), env.sessions.clone(), provider(&mock), settings);

    env.sessions.invalidate(key).await;
    let file_len = std::fs::metadata(env.sessions.path_for(key)).unwrap().len();
    let before = env.sessions.bytes_read();
    assert_eq!(
        c.run_if_needed(key).await.unwrap(),
        vec![ConsolidationOutcome::NothingToDo]
    );
    let read = env.sessions.bytes_read() - before;
    assert!(
        read < file_len / 10,
        "read {read} bytes of a {file_len}-byte file for 4 messages"
    );
    assert_eq!(counted.load(Ordering::SeqCst), 4, "the 4 unconsolidated messages");

    // Turns go on: each check counts only the new messages.
    for n in 0..5 {
        env.sessions
            .append(key, crate::support::turn(10_000 + n, "more"))
            .await
            .unwrap();
        c.run_if_needed(key).await.unwrap();
    }
    assert_eq!(counted.load(Ordering::SeqCst), 4 + 5 * 4);
    assert!(
        mock.completion_requests().is_empty(),
        "within budget: no model call"
    );
}

#[tokio::test]
async fn a_plan_with_nothing_to_do_is_kept_until_the_session_changes() {
    let env = env();
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("- [permanent] The user's cat is called Miso."));
    let key = "telegram:settled";
    fill(&env, key, 2).await; // 8 messages, within a window of 10
    let c = env.consolidator(provider(&mock), 10);
    assert_eq!(
        c.run_if_needed(key).await.unwrap(),
        vec![ConsolidationOutcome::NothingToDo]
    );

    // Another process (an older replica, an editor) grows the session past the budget: this store has not seen
    // it yet, so the plan it settled on stands and nothing is read or asked.
    let other = nanobot_sessions::SessionStore::new(env.home.path(), env.ws.path()).unwrap();
    for n in 2..5 {
        other
            .append(key, crate::support::turn(n, "small talk"))
            .await
            .unwrap();
    }
    assert_eq!(
        c.run_if_needed(key).await.unwrap(),
        vec![ConsolidationOutcome::NothingToDo]
    );
    assert!(mock.completion_requests().is_empty());

    // The store's next call on the session sees the change (a turn reads its history next), and so does the plan.
    assert_eq!(env.sessions.history(key, 100).await.unwrap().len(), 20);
    let outcomes = c.run_if_needed(key).await.unwrap();
    assert!(
        matches!(outcomes[0], ConsolidationOutcome::Summarised { .. }),
        "{outcomes:?}"
    );
    assert_eq!(mock.completion_requests().len(), 1);

    // Settled again; then a write of this store is a change too.
    assert_eq!(
        c.run_if_needed(key).await.unwrap(),
        vec![ConsolidationOutcome::NothingToDo]
    );
    mock.push(MockReply::text("- [permanent] More small talk."));
    for n in 5..9 {
        env.sessions
            .append(key, crate::support::turn(n, "small talk"))
            .await
            .unwrap();
    }
    let outcomes = c.run_if_needed(key).await.unwrap();
    assert!(
        matches!(outcomes[0], ConsolidationOutcome::Summarised { .. }),
        "{outcomes:?}"
    );
    assert_eq!(mock.completion_requests().len(), 2);
}
