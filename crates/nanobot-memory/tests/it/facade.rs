//! `Memory::open`: the wiring the agent core uses.

use nanobot_memory::{Budget, ConsolidationSettings, DreamSettings, Memory};
use nanobot_testkit::{MockLlm, MockReply};
use nanobot_tools::{Tool, ToolContext};
use serde_json::json;

use crate::support::{env, fill, provider};

#[tokio::test]
async fn open_migrates_and_wires_consolidation_into_search() {
    let env = env();
    std::fs::create_dir_all(env.store.dir()).unwrap();
    std::fs::write(
        env.store.dir().join("HISTORY.md"),
        "[2025-10-10 10:10] The user's boat is the Albatross.\n\n",
    )
    .unwrap();
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("- [durable] The user's cat is called Miso."));
    let memory = Memory::open(
        env.ws.path(),
        env.sessions.clone(),
        provider(&mock),
        ConsolidationSettings::new("m", Budget::Messages { window: 10 }),
        DreamSettings::new("m"),
    )
    .unwrap();
    assert!(env.store.dir().join("HISTORY.md.bak").exists());

    fill(&env, "cli:direct", 5).await;
    let outcomes = memory
        .consolidator
        .spawn_if_needed("cli:direct")
        .await
        .unwrap()
        .unwrap();
    assert!(outcomes[0].summarised());
    assert_eq!(outcomes[0].entry().unwrap().cursor, 2, "after the migrated entry");

    let tool = memory.search_tool();
    let ctx = ToolContext::new(env.ws.path());
    let out = tool.execute(json!({"query": "Albatross"}), &ctx).await.unwrap();
    assert!(out.text.contains("history #1"), "{}", out.text);
    let out = tool
        .execute(json!({"query": "Miso", "limit": 10}), &ctx)
        .await
        .unwrap();
    assert!(
        out.text.contains("history #2, session cli:direct"),
        "{}",
        out.text
    );
    assert!(
        out.text.contains("message #0, session cli:direct"),
        "{}",
        out.text
    );
}

#[tokio::test]
async fn open_leaves_the_index_closed_until_first_search() {
    let env = env();
    let mock = MockLlm::start().await;
    let memory = Memory::open(
        env.ws.path(),
        env.sessions.clone(),
        provider(&mock),
        ConsolidationSettings::new("m", Budget::Messages { window: 10 }),
        DreamSettings::new("m"),
    )
    .unwrap();
    // The index lives beside the session files (the data directory), not in the workspace the model can
    // write to: SQLite opens files by name.
    let db = env.sessions.dir().join(nanobot_memory::SESSION_DIR_INDEX_FILE);
    assert_eq!(memory.index.path(), db);
    assert!(!memory.index.is_open());
    assert!(!db.exists(), "opening the memory created the SQLite index");
    env.store
        .append_history("[2026-01-01 10:00] The kettle is blue.", None)
        .unwrap();
    let out = memory
        .search_tool()
        .execute(json!({"query": "kettle"}), &ToolContext::new(env.ws.path()))
        .await
        .unwrap();
    assert!(out.text.contains("kettle"), "{}", out.text);
    assert!(memory.index.is_open() && db.exists());
    assert!(!env.store.dir().join(nanobot_memory::INDEX_FILE).exists());
}

#[test]
fn a_lazy_index_reports_an_unopenable_path_on_first_use() {
    let dir = tempfile::tempdir().unwrap();
    let blocker = dir.path().join("memory");
    std::fs::write(&blocker, "a file where the directory should be").unwrap();
    let index = nanobot_memory::SearchIndex::open_lazy_in_workspace(dir.path());
    let err = index.search("anything", 5).unwrap_err().to_string();
    assert!(err.contains("memory"), "{err}");
    assert!(!index.is_open());
}
