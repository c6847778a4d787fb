//! memory_search: finds old facts after consolidation, and in session messages.

use nanobot_memory::{MemorySearchTool, SearchIndex};
use nanobot_sessions::SessionMessage;
use nanobot_testkit::{MockLlm, MockReply};
use nanobot_tools::{Tool, ToolContext, ToolRegistry};
use serde_json::json;
use std::sync::Arc;

use crate::support::{env, fill, provider};

#[tokio::test]
async fn fts_finds_an_old_fact_after_consolidation() {
    let env = env();
    let mock = MockLlm::start().await;
    mock.push(MockReply::text(
        "- [permanent] The user's tabby cat is named Miso and hates baths.",
    ));
    fill(&env, "telegram:42", 5).await;
    let c = env.consolidator(provider(&mock), 10);
    c.consolidate("telegram:42").await.unwrap();
    assert_eq!(
        env.sessions
            .session("telegram:42")
            .await
            .unwrap()
            .last_consolidated,
        16
    );

    let index = SearchIndex::open_in_workspace(env.ws.path()).unwrap();
    let tool = MemorySearchTool::new(index.clone(), env.store.clone(), Some(env.sessions.clone()));
    let registry = ToolRegistry::default();
    registry.register(Arc::new(tool.clone()));
    let ctx = ToolContext::new(env.ws.path());

    let out = registry
        .execute("memory_search", json!({"query": "baths", "limit": 3}), &ctx)
        .await;
    assert!(!out.is_error, "{}", out.text);
    assert!(
        out.text.contains("history #1, session telegram:42"),
        "{}",
        out.text
    );
    assert!(out.text.contains("[baths]"), "{}", out.text);
    assert!(out.text.contains("[2026-"), "{}", out.text);

    // The consolidated messages themselves are searchable too.
    let out = registry
        .execute("memory_search", json!({"query": "cat called Miso"}), &ctx)
        .await;
    assert!(
        out.text.contains("message #0, session telegram:42"),
        "{}",
        out.text
    );

    let out = registry
        .execute("memory_search", json!({"query": "giraffe"}), &ctx)
        .await;
    assert_eq!(out.text, "No memories match \"giraffe\".");
    let out = registry
        .execute("memory_search", json!({"query": "   "}), &ctx)
        .await;
    assert!(out.is_error);
    assert!(tool.read_only());
}

#[tokio::test]
async fn new_session_messages_are_indexed_incrementally() {
    let env = env();
    let index = SearchIndex::open_in_workspace(env.ws.path()).unwrap();
    env.sessions
        .append(
            "slack:C1",
            vec![SessionMessage::new("user", "the wifi password is hunter2")],
        )
        .await
        .unwrap();
    assert_eq!(index.sync_sessions(&env.sessions).await.unwrap(), 1);
    assert_eq!(
        index.sync_sessions(&env.sessions).await.unwrap(),
        0,
        "unchanged sessions are skipped"
    );
    env.sessions
        .append(
            "slack:C1",
            vec![SessionMessage::new(
                "assistant",
                "I will remember the router is in the attic",
            )],
        )
        .await
        .unwrap();
    assert_eq!(index.sync_sessions(&env.sessions).await.unwrap(), 1);
    let hits = index.search("router attic", 5).unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].position, 1);
    assert_eq!(hits[0].session_key.as_deref(), Some("slack:C1"));

    // A reopened index keeps what it had.
    drop(index);
    let index = SearchIndex::open_in_workspace(env.ws.path()).unwrap();
    assert_eq!(index.search("hunter2", 5).unwrap().len(), 1);
    assert_eq!(index.sync_sessions(&env.sessions).await.unwrap(), 0);
}

#[tokio::test]
async fn a_chat_searches_only_its_own_conversation_and_the_cli_everything() {
    let env = env();
    let index = SearchIndex::open_in_workspace(env.ws.path()).unwrap();
    for (key, text) in [
        ("telegram:alice", "my bank pin is 4711"),
        ("telegram:bob", "my bank pin is 9999"),
    ] {
        env.sessions
            .append(key, vec![SessionMessage::new("user", text)])
            .await
            .unwrap();
    }
    let tool = MemorySearchTool::new(index, env.store.clone(), Some(env.sessions.clone()));
    let registry = ToolRegistry::default();
    registry.register(Arc::new(tool));
    let in_chat = |channel: &str, chat: &str| {
        let mut ctx = ToolContext::new(env.ws.path());
        ctx.channel = channel.into();
        ctx.chat_id = chat.into();
        ctx.session_key = format!("{channel}:{chat}");
        ctx
    };
    let bob = registry
        .execute(
            "memory_search",
            json!({"query": "bank pin"}),
            &in_chat("telegram", "bob"),
        )
        .await;
    assert!(bob.text.contains("9999"), "{}", bob.text);
    assert!(
        !bob.text.contains("4711") && !bob.text.contains("alice"),
        "{}",
        bob.text
    );
    let stranger = registry
        .execute(
            "memory_search",
            json!({"query": "bank pin"}),
            &in_chat("telegram", "mallory"),
        )
        .await;
    assert_eq!(stranger.text, "No memories match \"bank pin\".");
    let cli = registry
        .execute(
            "memory_search",
            json!({"query": "bank pin"}),
            &in_chat("cli", "direct"),
        )
        .await;
    assert!(
        cli.text.contains("4711") && cli.text.contains("9999"),
        "{}",
        cli.text
    );
}
