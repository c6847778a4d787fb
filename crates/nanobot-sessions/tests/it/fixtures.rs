//! The Python nanobot's own files load, keep every field, and old-layout files are migrated.

use nanobot_sessions::SessionMessage;
use serde_json::{Value, json};

use crate::{Env, fixture, lines};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn current_layout_fixture_loads_with_its_values() {
    let env = Env::new();
    let path = env.install("Y2xpOmRpcmVjdA.jsonl");
    assert_eq!(env.store.path_for("cli:direct"), path);

    let s = env.store.session("cli:direct").await.unwrap();
    assert_eq!(s.key, "cli:direct");
    assert_eq!(s.messages.len(), 26);
    assert_eq!(s.created_at.to_string(), "2026-11-22 04:36:08.797239");
    assert_eq!(s.updated_at.to_string(), "2026-11-22 04:50:58.260843");
    assert_eq!(s.last_consolidated, 0);
    assert_eq!(s.metadata["_last_usage"]["total_tokens"], 15);
    assert_eq!(s.metadata["_last_usage"]["cache_read_tokens"], Value::Null);
    // `last_archived` is 0.3.5's name for the watermark: read as it (it wins over `last_consolidated`).
    assert!(!s.extra.contains_key("last_archived"));
    assert_eq!(s.messages[0].role(), Some("user"));
    assert_eq!(s.messages[0].content_text().as_deref(), Some("hi"));
    assert_eq!(s.messages[1].get("latency_ms"), Some(&json!(2428)));
    assert_eq!(s.messages[1].timestamp(), Some("2026-11-22T04:36:11.223417"));
    assert!(s.messages[12].is_command());
    assert_eq!(s.messages[12].content_text().as_deref(), Some("/help"));

    // Slash commands and their replies stay in the file but never reach the model.
    let h = env.store.history("cli:direct", 500).await.unwrap();
    assert_eq!(h.len(), 20);
    assert!(h.iter().all(|m| !m.is_command()));
    assert_eq!(h[0].role(), Some("user"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_call_fixture_loads_and_replays() {
    let env = Env::new();
    env.install("Y2xpOnRvb2x0ZXN0.jsonl");
    let s = env.store.session("cli:tooltest").await.unwrap();
    assert_eq!(s.messages.len(), 13);
    assert_eq!(s.messages[1].tool_call_ids(), ["call_0_1"]);
    assert_eq!(
        s.messages[1].tool_calls().unwrap()[0]["function"]["arguments"],
        "{\"command\": \"rm -rf /home/user/nonexistent\"}"
    );
    assert_eq!(s.messages[7].tool_call_ids(), ["call_0_4", "call_1_4"]);
    assert_eq!(s.messages[9].tool_call_id(), Some("call_1_4"));
    assert_eq!(s.messages[9].name(), Some("list_dir"));
    assert_eq!(s.metadata["_last_usage"]["request_count"], 6);

    let full = env.store.history("cli:tooltest", 100).await.unwrap();
    assert_eq!(full.len(), 13);
    // The last 3 messages hold no user turn: the window widens back to the user message that started the run.
    let h = env.store.history("cli:tooltest", 3).await.unwrap();
    assert_eq!(h.len(), 13);
    assert_eq!(h[0].content_text().as_deref(), Some("do tools"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_field_survives_load_save_and_append() {
    for name in ["Y2xpOmRpcmVjdA.jsonl", "Y2xpOnRvb2x0ZXN0.jsonl"] {
        let env = Env::new();
        let path = env.install(name);
        let original = lines(&path);
        let key = original[0]["key"].as_str().unwrap().to_owned();

        // Full rewrite: every line is the same JSON (key order aside).
        let s = env.store.session(&key).await.unwrap();
        env.store.save(s).await.unwrap();
        assert_eq!(lines(&path), original, "{name}: load -> save changed the file");

        // Append: the existing bytes are untouched, one line is added.
        let before = std::fs::read(&path).unwrap();
        env.store
            .append(
                &key,
                vec![SessionMessage::new("user", "more").with("x_custom", json!({"a": [1]}))],
            )
            .await
            .unwrap();
        let after = std::fs::read(&path).unwrap();
        assert_eq!(&after[..before.len()], &before[..]);
        let new = lines(&path);
        assert_eq!(new.len(), original.len() + 1);
        assert_eq!(new.last().unwrap()["x_custom"], json!({"a": [1]}));

        // And a fresh load sees it all.
        env.store.invalidate(&key).await;
        let s = env.store.session(&key).await.unwrap();
        assert_eq!(s.messages.len(), original.len());
        let watermark = original[0]
            .get("last_archived")
            .or_else(|| original[0].get("last_consolidated"))
            .and_then(Value::as_u64)
            .unwrap_or(0);
        assert_eq!(s.last_consolidated as u64, watermark);
    }
}

/// A store opened over a workspace that already has an old-layout folder (an upgrade).
fn upgraded_env(files: &[(&str, &str)]) -> crate::Env {
    let home = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let old_dir = workspace.path().join("sessions");
    std::fs::create_dir_all(&old_dir).unwrap();
    for (name, fixture_rel) in files {
        std::fs::copy(fixture(fixture_rel), old_dir.join(name)).unwrap();
    }
    let store = nanobot_sessions::SessionStore::new(home.path(), workspace.path()).unwrap();
    crate::Env {
        home,
        workspace,
        store,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_layout_is_imported_at_upgrade_and_kept() {
    let env = upgraded_env(&[("telegram_12345.jsonl", "workspace/sessions/telegram_12345.jsonl")]);
    let old_dir = env.workspace.path().join("sessions");
    let original = lines(&fixture("workspace/sessions/telegram_12345.jsonl"));

    let listed = env.store.list_sessions().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].key, "telegram:12345");
    assert!(!listed[0].legacy);
    assert_eq!(listed[0].updated_at.to_string(), "2026-02-25 10:01:05");

    let s = env.store.session("telegram:12345").await.unwrap();
    assert_eq!(s.messages.len(), 6);
    assert_eq!(s.created_at.to_string(), "2026-02-25 10:00:00");
    assert_eq!(s.messages[3].content(), Some(&Value::Null));
    assert_eq!(s.messages[3].tool_call_ids(), ["call_abc123"]);
    assert_eq!(s.messages[5].get("tools_used"), Some(&json!(["read_file"])));

    // Now in the current layout, same content; the old file is kept, out of the workspace (where every chat's
    // file tools read), in the namespace folder.
    let new = env.store.path_for("telegram:12345");
    assert!(new.starts_with(env.home.path().join("sessions").join(env.store.workspace_id())));
    assert_eq!(new.file_name().unwrap(), "dGVsZWdyYW06MTIzNDU.jsonl");
    assert_eq!(lines(&new), original);
    assert_eq!(names(&old_dir), Vec::<String>::new());
    let kept_dir = env.store.dir().join(nanobot_sessions::legacy::MOVED_OUT);
    let kept = names(&kept_dir);
    assert_eq!(kept.len(), 1);
    assert!(kept[0].starts_with("telegram_12345.jsonl.migrated-"), "{kept:?}");
    assert_eq!(lines(&kept_dir.join(&kept[0])), original);

    let h = env.store.history("telegram:12345", 10).await.unwrap();
    let roles: Vec<_> = h.iter().map(|m| m.role().unwrap()).collect();
    assert_eq!(
        roles,
        ["user", "assistant", "user", "assistant", "tool", "assistant"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_planted_in_the_workspace_after_the_upgrade_is_never_read() {
    let env = upgraded_env(&[]);
    let old_dir = env.workspace.path().join("sessions");
    // The model writes an old-layout file for another chat, with a forged history.
    std::fs::copy(
        fixture("workspace/sessions/telegram_12345.jsonl"),
        old_dir.join("telegram_12345.jsonl"),
    )
    .unwrap();
    assert!(!env.store.exists("telegram:12345").await.unwrap());
    assert!(
        env.store
            .session("telegram:12345")
            .await
            .unwrap()
            .messages
            .is_empty()
    );
    assert!(env.store.list_sessions().await.unwrap().is_empty());
    // Reopening the store (a restart) does not import it either: the import ran once.
    let again = nanobot_sessions::SessionStore::new(env.home.path(), env.workspace.path()).unwrap();
    assert!(again.session("telegram:12345").await.unwrap().messages.is_empty());
    assert!(old_dir.join("telegram_12345.jsonl").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_file_whose_name_disagrees_with_its_key_is_not_imported() {
    // Named after chat 999 but recording key telegram:12345: it must not become either session.
    let env = upgraded_env(&[("telegram_999.jsonl", "workspace/sessions/telegram_12345.jsonl")]);
    assert!(
        env.store
            .session("telegram:12345")
            .await
            .unwrap()
            .messages
            .is_empty()
    );
    assert!(
        env.store
            .session("telegram:999")
            .await
            .unwrap()
            .messages
            .is_empty()
    );
    // It holds a chat's history all the same: kept, out of the workspace.
    assert!(!env.workspace.path().join("sessions/telegram_999.jsonl").exists());
    let kept = names(&env.store.dir().join(nanobot_sessions::legacy::MOVED_OUT));
    assert_eq!(kept.len(), 1);
    assert!(
        kept[0].starts_with("telegram_999.jsonl.not-imported-"),
        "{kept:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_naming_no_session_is_left_where_it_is() {
    let home = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let old_dir = workspace.path().join("sessions");
    std::fs::create_dir_all(&old_dir).unwrap();
    std::fs::write(old_dir.join("notes.jsonl"), "{\"a\": 1}\n").unwrap();
    let store = nanobot_sessions::SessionStore::new(home.path(), workspace.path()).unwrap();
    assert!(store.list_sessions().await.unwrap().is_empty());
    assert_eq!(names(&old_dir), ["notes.jsonl"]);
    assert!(!store.dir().join(nanobot_sessions::legacy::MOVED_OUT).exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_an_earlier_upgrade_left_in_the_workspace_are_moved_out_once() {
    let home = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let first = nanobot_sessions::SessionStore::new(home.path(), workspace.path()).unwrap();
    // An earlier nanobot-rs imported, renamed the old file in place, and wrote its own marker text.
    std::fs::write(
        first.dir().join(nanobot_sessions::legacy::IMPORT_MARKER),
        "imported once; old-layout session files are not read again\n",
    )
    .unwrap();
    let old_dir = workspace.path().join("sessions");
    std::fs::create_dir_all(&old_dir).unwrap();
    let left = "telegram_12345.jsonl.migrated-20260301T100000.000";
    std::fs::copy(
        fixture("workspace/sessions/telegram_12345.jsonl"),
        old_dir.join(left),
    )
    .unwrap();
    std::fs::write(old_dir.join("mine.txt"), "not a session").unwrap();

    let store = nanobot_sessions::SessionStore::new(home.path(), workspace.path()).unwrap();
    let kept_dir = store.dir().join(nanobot_sessions::legacy::MOVED_OUT);
    assert_eq!(names(&kept_dir), [left]);
    assert_eq!(
        lines(&kept_dir.join(left)),
        lines(&fixture("workspace/sessions/telegram_12345.jsonl"))
    );
    assert_eq!(names(&old_dir), ["mine.txt"]);
    // Once: a copy written there later (by the model, say) is not carried into the data directory.
    std::fs::write(old_dir.join(left), "planted\n").unwrap();
    let _again = nanobot_sessions::SessionStore::new(home.path(), workspace.path()).unwrap();
    assert_eq!(names(&kept_dir), [left]);
    assert!(old_dir.join(left).exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_never_overwrites_a_current_session() {
    let home = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let first = nanobot_sessions::SessionStore::new(home.path(), workspace.path()).unwrap();
    first
        .append("telegram:12345", vec![SessionMessage::new("user", "current")])
        .await
        .unwrap();
    // Drop the marker so the next open imports again (as an upgrade from a version without it would).
    std::fs::remove_file(first.dir().join(nanobot_sessions::legacy::IMPORT_MARKER)).unwrap();
    let old_dir = workspace.path().join("sessions");
    std::fs::create_dir_all(&old_dir).unwrap();
    std::fs::copy(
        fixture("workspace/sessions/telegram_12345.jsonl"),
        old_dir.join("telegram_12345.jsonl"),
    )
    .unwrap();
    let store = nanobot_sessions::SessionStore::new(home.path(), workspace.path()).unwrap();
    let s = store.session("telegram:12345").await.unwrap();
    assert_eq!(s.messages.len(), 1);
    assert_eq!(s.messages[0].content_text().as_deref(), Some("current"));
    // The old file is kept, out of the workspace, as one not imported.
    assert_eq!(names(&old_dir), Vec::<String>::new());
    let kept = names(&store.dir().join(nanobot_sessions::legacy::MOVED_OUT));
    assert!(
        kept[0].starts_with("telegram_12345.jsonl.not-imported-"),
        "{kept:?}"
    );
}

/// The names in `dir`, sorted.
fn names(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}
