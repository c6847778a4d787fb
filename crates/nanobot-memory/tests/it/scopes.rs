//! Memory scopes: a scope's files, consolidation into it, its Dream (which may touch nothing else), and search over
//! scopes whose cursors overlap.

use nanobot_memory::{Dream, DreamSettings, MemoryScope, MemorySearchTool, ScopeKey, SearchIndex};
use nanobot_testkit::{MockLlm, MockReply};
use nanobot_tools::{Tool, ToolContext};
use serde_json::json;

use crate::support::{env, fill, provider};

fn alice() -> ScopeKey {
    MemoryScope::PerUser.resolve("telegram", "111", "111|alice", Some(false))
}

fn group() -> ScopeKey {
    MemoryScope::PerUser.resolve("telegram", "-100", "111|alice", Some(true))
}

#[test]
fn a_scope_keeps_its_files_in_its_own_folder() {
    let env = env();
    let ws = env.ws.path();
    let a = env.store.scoped(&alice());
    a.write_memory("- Alice's secret: the surprise party\n").unwrap();
    let entry = a
        .append_history("[2026-01-01 10:00] planned a party", Some("telegram:111"))
        .unwrap();
    assert_eq!(entry.cursor, 1);
    assert!(a.dir().starts_with(ws.join("memory/scopes")));
    assert!(a.dir().join("MEMORY.md").is_file());
    assert!(a.dir().join("history.jsonl").is_file());
    // Nothing of it reached the shared memory, nor the group's.
    assert_eq!(env.store.read_memory().unwrap(), "");
    assert!(env.store.read_history_after(0).unwrap().is_empty());
    let g = env.store.scoped(&group());
    assert_eq!(g.read_memory().unwrap(), "");
    assert!(g.read_history_after(0).unwrap().is_empty());
    // Cursors count per scope.
    assert_eq!(
        g.append_history("[2026-01-01 11:00] group chat", None)
            .unwrap()
            .cursor,
        1
    );
    assert_eq!(env.store.scoped(&ScopeKey::Shared).dir(), env.store.dir());
}

#[cfg(unix)]
#[test]
fn a_scope_folder_linked_out_of_the_workspace_is_refused() {
    let env = env();
    let outside = tempfile::tempdir().unwrap();
    let a = env.store.scoped(&alice());
    std::fs::create_dir_all(a.dir().parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(outside.path(), a.dir()).unwrap();
    assert!(a.write_memory("x").is_err());
    assert!(a.append_history("x", None).is_err());
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
}

#[tokio::test]
async fn consolidation_writes_to_the_scope_and_search_finds_it_there() {
    let env = env();
    let mock = MockLlm::start().await;
    mock.push(MockReply::text("[2026-01-01 10:00] Alice's cat is called Miso."));
    fill(&env, "telegram:111", 12).await;
    let c = env.consolidator(provider(&mock), 8).scoped(&alice());
    c.consolidate("telegram:111").await.unwrap();
    let scoped = env.store.scoped(&alice());
    let history = scoped.read_history_after(0).unwrap();
    assert_eq!(history.len(), 1, "{history:?}");
    assert_eq!(history[0].session_key.as_deref(), Some("telegram:111"));
    assert!(
        env.store.read_history_after(0).unwrap().is_empty(),
        "the shared history stays empty"
    );

    // A shared entry with the same cursor must not hide the scope's from the index.
    env.store
        .append_history(
            "[2026-01-02 10:00] Shared note about a dog.",
            Some("telegram:111"),
        )
        .unwrap();
    let index = SearchIndex::open(&env.ws.path().join("index.sqlite")).unwrap();
    let tool = MemorySearchTool::new(index.clone(), env.store.clone(), None);
    let mut ctx = ToolContext::new(env.ws.path())
        .with_session("telegram:111")
        .with_route("telegram", "111");
    ctx.extensions.insert(alice());
    let out = tool.execute(json!({"query": "Miso"}), &ctx).await.unwrap();
    assert!(out.text.contains("Miso"), "{}", out.text);
    // The scope's history was indexed under its folder, the shared one separately: both cursor 1.
    assert_eq!(index.sync_history(&env.store).unwrap(), 1);
    assert_eq!(index.sync_history(&scoped).unwrap(), 0, "already indexed");
    assert_eq!(index.search("dog", 5).unwrap().len(), 1);
    assert_eq!(
        index
            .search("Miso", 5)
            .unwrap()
            .iter()
            .filter(|h| h.position == 1)
            .count(),
        1
    );
}

#[tokio::test]
async fn a_scopes_dream_changes_only_that_scopes_memory() {
    let env = env();
    let ws = env.ws.path();
    std::fs::create_dir_all(env.store.dir()).unwrap();
    env.store.write_memory("# Shared\n").unwrap();
    std::fs::write(ws.join("SOUL.md"), "Be kind.\n").unwrap();
    let a = env.store.scoped(&alice());
    a.append_history(
        "[2026-01-01 10:00] Alice adopted a cat named Miso.",
        Some("telegram:111"),
    )
    .unwrap();
    let a_memory = format!("{}/MEMORY.md", a.rel_dir().display());

    let mock = MockLlm::start().await;
    for path in ["memory/MEMORY.md", "SOUL.md", "USER.md", "skills/x/SKILL.md"] {
        mock.push(MockReply::tool_call(
            "write_file",
            json!({"path": path, "content": "hijacked"}),
        ));
    }
    mock.push(MockReply::tool_call(
        "write_file",
        json!({"path": a_memory, "content": "# Alice\n- cat: Miso\n"}),
    ));
    mock.push(MockReply::text("Noted the cat."));
    let d = Dream::new(env.store.clone(), provider(&mock), DreamSettings::new("m")).scoped(&alice());
    let outcome = d.run().await.unwrap();
    assert_eq!((outcome.entries, outcome.cursor), (1, 1));

    assert_eq!(a.read_memory().unwrap(), "# Alice\n- cat: Miso\n");
    assert_eq!(env.store.read_memory().unwrap(), "# Shared\n");
    assert_eq!(std::fs::read_to_string(ws.join("SOUL.md")).unwrap(), "Be kind.\n");
    assert!(!ws.join("USER.md").exists() && !ws.join("skills").exists());
    // Its cursor and record are the scope's own.
    assert_eq!(a.dream_cursor().unwrap(), 1);
    assert_eq!(env.store.dream_cursor().unwrap(), 0);
    assert!(d.records_dir().starts_with(a.dir()));
    let record = outcome.record.unwrap();
    let paths: Vec<&str> = record.changes.iter().map(|c| c.path.as_str()).collect();
    assert_eq!(paths, vec![a_memory.as_str()]);

    let reqs = mock.completion_requests();
    for req in &reqs[1..=4] {
        let r = req.tool_results();
        assert!(
            r.last().unwrap().content.contains("outside what Dream may touch"),
            "{r:?}"
        );
    }
    let system = reqs[0].messages()[0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(system.contains(&a_memory), "{system}");
    assert!(!system.contains("SOUL.md"), "{system}");
    let prompt = reqs[0].last_user_text().unwrap();
    assert!(
        !prompt.contains("## SOUL.md") && !prompt.contains("Skill files"),
        "{prompt}"
    );
    // The tool list has no list_dir (there is no directory it may list).
    let tools = reqs[0].tool_names();
    assert!(!tools.iter().any(|t| t == "list_dir"), "{tools:?}");

    // Restoring undoes the scope's change only.
    d.restore(None).await.unwrap();
    assert_eq!(a.read_memory().unwrap(), "");
    assert_eq!(env.store.read_memory().unwrap(), "# Shared\n");
}

#[tokio::test]
async fn run_all_dreams_every_scope_with_new_history() {
    let env = env();
    env.store
        .append_history("[2026-01-01 09:00] shared entry", None)
        .unwrap();
    env.store
        .scoped(&alice())
        .append_history("[2026-01-01 10:00] alice entry", Some("telegram:111"))
        .unwrap();
    env.store
        .scoped(&group())
        .append_history("[2026-01-01 11:00] group entry", Some("telegram:-100"))
        .unwrap();
    // Something planted among the scope folders is not a scope.
    std::fs::write(env.store.dir().join("scopes/planted"), "x").unwrap();

    let mock = MockLlm::start().await;
    for _ in 0..3 {
        mock.push(MockReply::text("nothing to change"));
    }
    let d = Dream::new(env.store.clone(), provider(&mock), DreamSettings::new("m"));
    let runs = d.run_all().await;
    let mut ids: Vec<&str> = runs.iter().map(|(id, _)| id.as_str()).collect();
    ids.sort_unstable();
    assert_eq!(ids, vec!["chat:telegram:-100", "shared", "user:telegram:111"]);
    for (id, outcome) in &runs {
        assert_eq!(outcome.as_ref().unwrap().entries, 1, "{id}");
    }
    assert_eq!(mock.completion_requests().len(), 3);
    let prompts: Vec<String> = mock
        .completion_requests()
        .iter()
        .map(|r| r.last_user_text().unwrap())
        .collect();
    // Each Dream saw only its own scope's history.
    for (needle, others) in [
        ("alice entry", ["group entry", "shared entry"]),
        ("group entry", ["alice entry", "shared entry"]),
    ] {
        let p = prompts.iter().find(|p| p.contains(needle)).unwrap();
        assert!(others.iter().all(|o| !p.contains(o)), "{p}");
    }
}
