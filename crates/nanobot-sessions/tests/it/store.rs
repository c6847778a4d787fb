//! The store: permissions, concurrency, listing, checkpoints, reset, compaction, cache, the written format.

use std::collections::BTreeMap;

use nanobot_sessions::{Opening, Session, SessionError, SessionMessage, SessionStore, StoreOptions};
use serde_json::{Value, json};

use crate::{Env, lines, python_load};

#[cfg(unix)]
fn mode(p: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_are_private() {
    let env = Env::new();
    env.store
        .append("cli:a", vec![SessionMessage::new("user", "secret")])
        .await
        .unwrap();
    env.store
        .write_checkpoint("cli:a", &json!({"phase": "awaiting_tools"}))
        .await
        .unwrap();
    assert_eq!(mode(&env.store.path_for("cli:a")), 0o600);
    assert_eq!(mode(&env.store.checkpoint_path("cli:a")), 0o600);
    assert_eq!(mode(env.store.dir()), 0o700);
    assert_eq!(mode(&env.workspace.path().join(".nanobot/workspace-id")), 0o600);
    // After a full rewrite too.
    env.store.reset("cli:a").await.unwrap();
    assert_eq!(mode(&env.store.path_for("cli:a")), 0o600);
}

#[test]
fn workspace_id_is_stable_and_names_the_directory() {
    let env = Env::new();
    let again = SessionStore::new(env.home.path(), env.workspace.path()).unwrap();
    assert_eq!(again.workspace_id(), env.store.workspace_id());
    let written = std::fs::read_to_string(env.workspace.path().join(".nanobot/workspace-id")).unwrap();
    assert_eq!(written.trim(), env.store.workspace_id());
    assert_eq!(
        env.store.dir(),
        env.home.path().join("sessions").join(env.store.workspace_id())
    );

    // An id written by someone else (the Python nanobot) is used as it is.
    let ws = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(ws.path().join(".nanobot")).unwrap();
    std::fs::write(ws.path().join(".nanobot/workspace-id"), "3f9c2a1b7d\n").unwrap();
    // Not 32 hex digits: refused, as the Python nanobot refuses it.
    let e = SessionStore::new(env.home.path(), ws.path())
        .unwrap_err()
        .to_string();
    assert!(e.contains("workspace-id"), "{e}");
    let id = "3f9c2a1b7d3f9c2a1b7d3f9c2a1b7d00";
    std::fs::write(ws.path().join(".nanobot/workspace-id"), format!("{id}\n")).unwrap();
    let s = SessionStore::new(env.home.path(), ws.path()).unwrap();
    assert_eq!(s.workspace_id(), id);
    // The namespace records its workspace, as 0.3.5 expects.
    let marker = std::fs::read_to_string(s.dir().join(".workspace")).unwrap();
    assert_eq!(
        std::path::PathBuf::from(marker.trim()),
        std::fs::canonicalize(ws.path()).unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appends_to_different_and_same_sessions() {
    let env = Env::new();
    let mut tasks = Vec::new();
    for s in 0..8 {
        let store = env.store.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..40 {
                store
                    .append(
                        &format!("tg:{s}"),
                        vec![SessionMessage::new("user", format!("{s}-{i}"))],
                    )
                    .await
                    .unwrap();
            }
        }));
    }
    // Four writers on one session at the same time: no line lost or torn.
    for w in 0..4 {
        let store = env.store.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..25 {
                store
                    .append(
                        "tg:shared",
                        vec![SessionMessage::new("user", format!("w{w}-{i}"))],
                    )
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    for s in 0..8 {
        let key = format!("tg:{s}");
        let l = lines(&env.store.path_for(&key));
        let texts: Vec<_> = l[1..]
            .iter()
            .map(|v| v["content"].as_str().unwrap().to_owned())
            .collect();
        let expected: Vec<_> = (0..40).map(|i| format!("{s}-{i}")).collect();
        assert_eq!(texts, expected, "{key}");
    }
    let shared = lines(&env.store.path_for("tg:shared"));
    assert_eq!(shared.len(), 101);
    let mut per_writer: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for v in &shared[1..] {
        let (w, i) = v["content"].as_str().unwrap().split_once('-').unwrap();
        per_writer.entry(w.into()).or_default().push(i.parse().unwrap());
    }
    assert_eq!(per_writer.len(), 4);
    assert!(per_writer.values().all(|v| *v == (0..25).collect::<Vec<_>>()));
    // The cache agrees with the file.
    assert_eq!(env.store.session("tg:shared").await.unwrap().messages.len(), 100);
}

fn at(s: &str) -> chrono::NaiveDateTime {
    chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S").unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_is_by_updated_at_newest_first() {
    let env = Env::new();
    for (key, updated) in [
        ("a:1", "2026-01-03T00:00:00"),
        ("b:2", "2026-01-01T00:00:00"),
        ("c:3", "2026-01-02T00:00:00"),
    ] {
        let mut s = Session::new(key);
        s.created_at = at("2025-12-31T00:00:00");
        s.updated_at = at(updated);
        env.store.save(s).await.unwrap();
    }
    let keys = |l: Vec<nanobot_sessions::SessionInfo>| l.into_iter().map(|i| i.key).collect::<Vec<_>>();
    assert_eq!(
        keys(env.store.list_sessions().await.unwrap()),
        ["a:1", "c:3", "b:2"]
    );

    // An appended message (no metadata rewrite) moves its session up: the last line is read too.
    env.store
        .append(
            "b:2",
            vec![SessionMessage::new("user", "late").with("timestamp", "2026-01-05T00:00:00")],
        )
        .await
        .unwrap();
    let listed = env.store.list_sessions().await.unwrap();
    assert_eq!(listed[0].updated_at, at("2026-01-05T00:00:00"));
    assert_eq!(keys(listed), ["b:2", "a:1", "c:3"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_write_read_replace_clear() {
    let env = Env::new();
    let key = "telegram:7";
    assert_eq!(env.store.read_checkpoint(key).await.unwrap(), None);
    env.store
        .write_checkpoint(key, &json!({"phase": "awaiting_tools", "iteration": 1}))
        .await
        .unwrap();
    env.store
        .write_checkpoint(key, &json!({"phase": "tools_completed", "iteration": 1}))
        .await
        .unwrap();
    assert_eq!(
        env.store.read_checkpoint(key).await.unwrap(),
        Some(json!({"phase": "tools_completed", "iteration": 1}))
    );
    let path = env.store.checkpoint_path(key);
    assert_eq!(path.file_name().unwrap(), "dGVsZWdyYW06Nw.jsonl.checkpoint.json");
    // Only the checkpoint (beside the namespace marker) and no temp files are left in the directory.
    let names: Vec<_> = std::fs::read_dir(env.store.dir())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n != ".workspace" && n != nanobot_sessions::legacy::IMPORT_MARKER)
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");

    std::fs::write(&path, "{\"phase\": ").unwrap();
    let err = env.store.read_checkpoint(key).await.unwrap_err();
    assert!(matches!(err, SessionError::Checkpoint { .. }));
    assert!(err.to_string().contains("checkpoint.json"));

    env.store.clear_checkpoint(key).await.unwrap();
    env.store.clear_checkpoint(key).await.unwrap();
    assert_eq!(env.store.read_checkpoint(key).await.unwrap(), None);
    assert!(!env.store.holds_checkpoint(key));
    // A checkpoint is not a session.
    assert!(env.store.list_sessions().await.unwrap().is_empty());

    // Cleared is emptied, not deleted: the next turn's opening record reuses the file (no directory change), is
    // read back whole, and is not synced (a killed process keeps it); the run's later records are.
    assert!(path.is_file());
    let inode = |p: &std::path::Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap());
    let before = inode(&path);
    let syncs = env.store.syncs();
    env.store
        .write_checkpoint_unsynced(key, &json!({"user": "hi", "turn": 2}))
        .await
        .unwrap();
    assert_eq!(env.store.syncs(), syncs, "the opening record is not synced");
    assert_eq!(inode(&path), before, "the same file");
    assert!(env.store.holds_checkpoint(key));
    env.store
        .write_checkpoint(key, &json!({"user": "hi", "turn": 2, "run": [1]}))
        .await
        .unwrap();
    assert_eq!(env.store.syncs(), syncs + 1, "a later record is synced");
    assert_eq!(
        env.store.read_checkpoint(key).await.unwrap(),
        Some(json!({"user": "hi", "turn": 2, "run": [1]}))
    );
    env.store.clear_checkpoint(key).await.unwrap();
    assert!(!env.store.holds_checkpoint(key));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_saved_with_its_checkpoint_cleared_in_one_step() {
    let env = Env::new();
    let key = "api:one-step";
    env.store
        .write_checkpoint(key, &json!({"user": "hi", "run": [1]}))
        .await
        .unwrap();
    let cleared = env
        .store
        .append_and_clear_checkpoint(
            key,
            vec![
                SessionMessage::new("user", "hi"),
                SessionMessage::new("assistant", "hello"),
            ],
            |h| {
                h.metadata.insert("answered".into(), json!("m-1"));
            },
        )
        .await
        .unwrap();
    assert!(cleared.is_ok(), "{cleared:?}");
    assert_eq!(env.store.read_checkpoint(key).await.unwrap(), None);
    assert!(!env.store.holds_checkpoint(key));
    let meta = env.store.metadata(key).await.unwrap();
    assert_eq!(meta.get("answered"), Some(&json!("m-1")));
    let texts: Vec<String> = env
        .store
        .history(key, 10)
        .await
        .unwrap()
        .iter()
        .filter_map(|m| m.content_text())
        .collect();
    assert_eq!(texts, ["hi", "hello"]);

    // A key the store refuses: nothing appended, nothing cleared, the append's error returned.
    let bad = env
        .store
        .append_and_clear_checkpoint("", vec![SessionMessage::new("user", "x")], |_| {})
        .await;
    assert!(bad.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_returns_the_old_session_and_starts_empty() {
    let env = Env::new();
    let key = "cli:direct";
    env.store
        .append(
            key,
            vec![
                SessionMessage::new("user", "a"),
                SessionMessage::new("assistant", "b"),
            ],
        )
        .await
        .unwrap();
    env.store
        .update_header(key, |h| {
            h.metadata.insert("lang".into(), json!("fr"));
            h.last_consolidated = 1;
        })
        .await
        .unwrap();

    let old = env.store.reset(key).await.unwrap();
    assert_eq!(old.messages.len(), 2);
    assert_eq!(old.last_consolidated, 1);

    let l = lines(&env.store.path_for(key));
    assert_eq!(l.len(), 1);
    assert_eq!(l[0]["_type"], "metadata");
    assert_eq!(l[0]["last_consolidated"], 0);
    assert_eq!(l[0]["metadata"]["lang"], "fr");
    let now = env.store.session(key).await.unwrap();
    assert!(now.messages.is_empty());
    assert_eq!(now.created_at, old.created_at);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_changes_append_then_compact() {
    let env = Env::new();
    let store = SessionStore::with_options(
        env.home.path(),
        env.workspace.path(),
        StoreOptions::default().compact_after(2),
    )
    .unwrap();
    let key = "cli:c";
    store
        .append(
            key,
            vec![
                SessionMessage::new("user", "x"),
                SessionMessage::new("assistant", "y"),
            ],
        )
        .await
        .unwrap();
    let path = store.path_for(key);
    let count_meta = || lines(&path).iter().filter(|v| v["_type"] == "metadata").count();

    store.set_last_consolidated(key, 1).await.unwrap();
    assert_eq!(count_meta(), 2, "a metadata change is one appended record");
    store.set_last_consolidated(key, 2).await.unwrap();
    assert_eq!(count_meta(), 3);
    store.set_last_consolidated(key, 0).await.unwrap();
    assert_eq!(count_meta(), 1, "compacted to one first-line record");
    assert_eq!(lines(&path)[0]["last_consolidated"], 0);
    let py = python_load(&path);
    assert_eq!(py.messages.len(), 2);
    assert_eq!(py.last_consolidated, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_behind_the_caches_back_is_read_again() {
    let env = Env::new();
    let key = "cli:cache";
    env.store
        .append(key, vec![SessionMessage::new("user", "x")])
        .await
        .unwrap();
    assert_eq!(env.store.session(key).await.unwrap().messages.len(), 1);
    // Another program appends behind our back.
    let path = env.store.path_for(key);
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str("{\"role\":\"assistant\",\"content\":\"external\"}\n");
    std::fs::write(&path, text).unwrap();
    // The file is not ours as we left it: the cache is dropped and the file read again.
    assert_eq!(env.store.session(key).await.unwrap().messages.len(), 2);
    env.store.invalidate(key).await;
    assert_eq!(env.store.session(key).await.unwrap().messages.len(), 2);
    env.store.invalidate_all().await;
    assert!(env.store.exists(key).await.unwrap());
    assert!(!env.store.exists("cli:none").await.unwrap());
    env.store.delete(key).await.unwrap();
    assert!(!env.store.exists(key).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_key_is_rejected() {
    let env = Env::new();
    let err = env
        .store
        .append("", vec![SessionMessage::new("user", "x")])
        .await
        .unwrap_err();
    assert!(matches!(err, SessionError::EmptyKey));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn written_file_snapshot() {
    let env = Env::new();
    let key = "telegram:12345";
    env.store
        .append(
            key,
            vec![
                SessionMessage::new("user", "What is in notes.txt?"),
                serde_json::from_value(json!({"role": "assistant", "content": null, "tool_calls": [{"id": "call_1",
                    "type": "function", "function": {"name": "read_file", "arguments": "{\"path\": \"notes.txt\"}"}}]}))
                .unwrap(),
                serde_json::from_value(json!({"role": "tool", "tool_call_id": "call_1", "name": "read_file",
                    "content": "1| buy milk"}))
                .unwrap(),
                SessionMessage::new("assistant", "buy milk").with("latency_ms", 12),
            ],
        )
        .await
        .unwrap();
    env.store.set_last_consolidated(key, 2).await.unwrap();
    let l: Vec<Value> = lines(&env.store.path_for(key));
    insta::assert_json_snapshot!("written_session_file", l, {
        "[].timestamp" => "[timestamp]",
        "[].created_at" => "[timestamp]",
        "[].updated_at" => "[timestamp]",
    });
}

/// A file as 0.3.5 writes it: `last_archived` and `last_consolidated` in the metadata line, then its provider
/// cache record (`_type: provider_state`), then the messages. The cache record is not a message (not in the
/// history, not counted by the tail reader); the watermark we write is read back the same by 0.3.5, which reads
/// `last_archived` first, so the two never disagree after we move it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_provider_state_record_and_last_archived() {
    let env = Env::new();
    let key = "cli:py";
    let path = env.store.path_for(key);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut text = String::from(concat!(
        r#"{"_type": "metadata", "key": "cli:py", "created_at": "2026-01-01T00:00:00", "updated_at": "2026-01-01T00:00:05", "metadata": {}, "last_archived": 2, "last_consolidated": 2}"#,
        "\n",
        r#"{"_type": "provider_state", "state": {"kind": "responses", "response_id": "resp_1"}}"#,
        "\n"
    ));
    for i in 0..6 {
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        text.push_str(&format!(
            "{{\"role\": \"{role}\", \"content\": \"m{i}\", \"timestamp\": \"2026-01-01T00:00:0{i}\"}}\n"
        ));
    }
    std::fs::write(&path, text).unwrap();

    // The tail reader (a cold read) and the whole-file reader agree: six messages, the watermark at 2.
    let tail = env.store.history(key, 4).await.unwrap();
    let contents: Vec<_> = tail
        .iter()
        .map(|m| m.content_text().unwrap_or_default())
        .collect();
    assert_eq!(contents, ["m2", "m3", "m4", "m5"]);
    let session = env.store.session(key).await.unwrap();
    assert_eq!(session.messages.len(), 6);
    assert!(
        session
            .messages
            .iter()
            .all(|m| m.role() != Some("provider_state"))
    );
    assert_eq!(session.last_consolidated, 2);

    // Moving the watermark: 0.3.5 (which reads `last_archived` first) sees the new value.
    env.store.set_last_consolidated(key, 4).await.unwrap();
    let py = python_load(&path);
    assert_eq!(py.last_consolidated, 4);
    assert_eq!(py.messages.len(), 6);
    env.store.invalidate(key).await;
    assert_eq!(env.store.session(key).await.unwrap().last_consolidated, 4);
    for v in lines(&path).iter().filter(|v| v["_type"] == "metadata") {
        assert_eq!(v["last_archived"], v["last_consolidated"], "{v}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_taking_turns_on_one_session_each_see_the_other() {
    // Two gateway replicas on one home: a session's turns run one at a time, on either of them.
    let env = Env::new();
    let other = SessionStore::new(env.home.path(), env.workspace.path()).unwrap();
    let key = "telegram:42";
    let stores = [&env.store, &other];
    for turn in 0..40 {
        let store = stores[turn % 2];
        // Each turn reads the history first, as the agent does, then saves its messages.
        let before = store.history(key, 500).await.unwrap();
        assert_eq!(before.len(), turn * 2, "turn {turn} saw a stale history");
        store
            .append(
                key,
                vec![
                    SessionMessage::new("user", format!("q{turn}")),
                    SessionMessage::new("assistant", format!("a{turn}")),
                ],
            )
            .await
            .unwrap();
    }
    // A third reader (and the Python nanobot) sees every message once, in order.
    let fresh = SessionStore::new(env.home.path(), env.workspace.path()).unwrap();
    let all = fresh.session(key).await.unwrap().messages;
    let texts: Vec<String> = all.iter().map(|m| m.content_text().unwrap_or_default()).collect();
    let expected: Vec<String> = (0..40).flat_map(|t| [format!("q{t}"), format!("a{t}")]).collect();
    assert_eq!(texts, expected);
    let tail = fresh.history(key, 10).await.unwrap();
    assert_eq!(tail.last().and_then(|m| m.content_text()).as_deref(), Some("a39"));
    assert_eq!(python_load(&fresh.path_for(key)).messages.len(), 80);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_and_a_metadata_change_are_appended_together() {
    let env = Env::new();
    let key = "telegram:7";
    env.store
        .append(key, vec![SessionMessage::new("user", "q")])
        .await
        .unwrap();
    env.store
        .append_with_header(key, vec![SessionMessage::new("assistant", "a")], |h| {
            h.metadata.insert("_answered".into(), serde_json::json!("q"));
        })
        .await
        .unwrap();
    let path = env.store.path_for(key);
    let text = std::fs::read_to_string(&path).unwrap();
    let last: Vec<serde_json::Value> = text
        .lines()
        .rev()
        .take(2)
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // The answer, then at once the metadata record that goes with it.
    assert_eq!(last[0]["_type"], "metadata");
    assert_eq!(last[0]["metadata"]["_answered"], "q");
    assert_eq!(last[1]["content"], "a");
    let fresh = SessionStore::new(env.home.path(), env.workspace.path()).unwrap();
    assert_eq!(fresh.metadata(key).await.unwrap()["_answered"], "q");
    assert_eq!(fresh.session(key).await.unwrap().messages.len(), 2);
    assert_eq!(python_load(&path).messages.len(), 2);
    // Nothing to change and nothing to add: nothing written.
    let before = std::fs::read(&path).unwrap();
    env.store
        .append_with_header(key, Vec::new(), |_| {})
        .await
        .unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_changes_with_the_session_and_only_then() {
    let env = Env::new();
    let key = "api:versions";
    assert_eq!(env.store.version(key), None, "never read");
    env.store
        .append(key, vec![SessionMessage::new("user", "one")])
        .await
        .unwrap();
    let first = env.store.version(key).expect("known after a write");
    // Reads and checkpoints leave the session as it was.
    env.store.history(key, 10).await.unwrap();
    env.store.metadata(key).await.unwrap();
    env.store
        .write_checkpoint(key, &json!({"user": "two"}))
        .await
        .unwrap();
    env.store.clear_checkpoint(key).await.unwrap();
    assert_eq!(env.store.version(key), Some(first));
    // A write of this store changes it, a metadata record too.
    env.store
        .append(key, vec![SessionMessage::new("assistant", "two")])
        .await
        .unwrap();
    let second = env.store.version(key).unwrap();
    assert_ne!(second, first);
    env.store
        .update_header(key, |h| {
            h.metadata.insert("k".into(), json!(1));
        })
        .await
        .unwrap();
    let third = env.store.version(key).unwrap();
    assert_ne!(third, second);

    // Another process's write is seen at this store's next call on the key, not before.
    let other = SessionStore::new(env.home.path(), env.workspace.path()).unwrap();
    other
        .append(key, vec![SessionMessage::new("user", "three")])
        .await
        .unwrap();
    assert_eq!(env.store.version(key), Some(third), "answered from memory");
    assert_eq!(env.store.history(key, 10).await.unwrap().len(), 3);
    let fourth = env.store.version(key).unwrap();
    assert_ne!(fourth, third);

    // Reset and delete are changes; a version is never given out twice.
    env.store.reset(key).await.unwrap();
    let fifth = env.store.version(key).unwrap();
    env.store.delete(key).await.unwrap();
    let sixth = env.store.version(key).unwrap();
    let all = [first, second, third, fourth, fifth, sixth];
    let distinct: std::collections::HashSet<_> = all.iter().collect();
    assert_eq!(distinct.len(), all.len(), "{all:?}");
    assert_eq!(env.store.version("bad\nkey"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_checkpoint_is_known_without_reading_the_file() {
    let env = Env::new();
    let key = "api:emptied";
    assert!(env.store.holds_no_checkpoint(key), "none written");
    env.store
        .write_checkpoint_unsynced(key, &json!({"user": "hi"}))
        .await
        .unwrap();
    assert!(!env.store.holds_no_checkpoint(key), "written");
    env.store
        .append_and_clear_checkpoint(key, vec![SessionMessage::new("user", "hi")], |_| {})
        .await
        .unwrap()
        .unwrap();
    assert!(env.store.holds_no_checkpoint(key), "emptied");

    // Another process on this home (a replica sharing it) leaves a checkpoint: seen at once, nothing cached.
    let other = SessionStore::new(env.home.path(), env.workspace.path()).unwrap();
    other
        .write_checkpoint(key, &json!({"user": "again"}))
        .await
        .unwrap();
    assert!(!env.store.holds_no_checkpoint(key));
    assert!(env.store.read_checkpoint(key).await.unwrap().is_some());

    // Replicas sharing files through a shared store never answer from this machine's file.
    let shared = std::sync::Arc::new(nanobot_util::shared::MemorySharedFiles::new());
    let home = tempfile::tempdir().unwrap();
    let replica = SessionStore::with_options(
        home.path(),
        env.workspace.path(),
        StoreOptions::default().shared(shared),
    )
    .unwrap();
    assert_eq!(replica.read_checkpoint(key).await.unwrap(), None);
    assert!(!replica.holds_no_checkpoint(key));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_opens_with_its_history_read_and_its_records_written_in_one_step() {
    let env = Env::new();
    let key = "telegram:open";
    env.store
        .append(
            key,
            vec![
                SessionMessage::new("user", "hi"),
                SessionMessage::new("assistant", "hello"),
            ],
        )
        .await
        .unwrap();
    let syncs = env.store.syncs();
    let (read, written) = env
        .store
        .with_history_then_open(key, 10, |history, metadata| {
            let texts: Vec<String> = history.iter().filter_map(|m| m.content_text()).collect();
            let opening = Opening::default()
                .checkpoint(json!({"user": "again", "turn": 3}))
                .header(|h| {
                    h.metadata.insert("first".into(), json!(1));
                })
                .header(|h| {
                    // Changes run in order: this one sees the first.
                    let seen = h.metadata.get("first").cloned();
                    h.metadata.insert("second".into(), json!(seen));
                });
            ((texts, metadata.contains_key("first")), opening)
        })
        .await
        .unwrap();
    written.unwrap();
    assert_eq!(
        read,
        (vec!["hi".to_owned(), "hello".to_owned()], false),
        "read before the writes"
    );
    assert_eq!(
        env.store.read_checkpoint(key).await.unwrap(),
        Some(json!({"user": "again", "turn": 3}))
    );
    assert_eq!(
        env.store.syncs(),
        syncs + 1,
        "one sync, the header record's: the opening checkpoint record is not synced"
    );
    let meta = env.store.metadata(key).await.unwrap();
    assert_eq!(
        (meta.get("first"), meta.get("second")),
        (Some(&json!(1)), Some(&json!(1)))
    );
    // Read by another process as written.
    let other = SessionStore::new(env.home.path(), env.workspace.path()).unwrap();
    assert_eq!(other.metadata(key).await.unwrap().get("second"), Some(&json!(1)));
    assert_eq!(other.history(key, 10).await.unwrap().len(), 2);

    // Nothing asked, nothing written.
    env.store.clear_checkpoint(key).await.unwrap();
    let version = env.store.version(key);
    let ((), written) = env
        .store
        .with_history_then_open(key, 10, |_, _| ((), Opening::default()))
        .await
        .unwrap();
    written.unwrap();
    assert_eq!(env.store.version(key), version);
    assert!(!env.store.holds_checkpoint(key));

    // A session that cannot be read: an error, and nothing written.
    std::fs::write(env.store.path_for(key), b"\xff\xfe not json\n").unwrap();
    let failed = env
        .store
        .with_history_then_open(key, 10, |_, _| {
            ((), Opening::default().checkpoint(json!({"user": "x"})))
        })
        .await;
    assert!(failed.is_err(), "{failed:?}");
    assert!(!env.store.holds_checkpoint(key));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_that_goes_with_a_save_runs_whatever_the_saves_outcome() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let env = Env::new();
    let ran = Arc::new(AtomicUsize::new(0));
    let key = "api:then";
    let counter = ran.clone();
    let (cleared, answer) = env
        .store
        .append_and_clear_checkpoint_then(
            key,
            vec![SessionMessage::new("user", "hi")],
            |_| {},
            move || counter.fetch_add(1, Ordering::SeqCst) + 41,
        )
        .await
        .unwrap();
    cleared.unwrap();
    assert_eq!(answer, 41);
    assert_eq!(env.store.history(key, 10).await.unwrap().len(), 1);

    // A save that fails (a folder where the session file should be): an error, and the work ran all the same.
    let broken = "api:broken";
    std::fs::create_dir_all(env.store.path_for(broken)).unwrap();
    let counter = ran.clone();
    let failed = env
        .store
        .append_and_clear_checkpoint_then(
            broken,
            vec![SessionMessage::new("user", "hi")],
            |_| {},
            move || {
                counter.fetch_add(1, Ordering::SeqCst);
            },
        )
        .await;
    assert!(failed.is_err());
    assert_eq!(ran.load(Ordering::SeqCst), 2);
}

/// A shared store that records what each push left in it: the name and the file's length then.
#[derive(Debug, Default)]
struct RecordingShared {
    inner: nanobot_util::MemorySharedFiles,
    pushes: std::sync::Mutex<Vec<(String, u64)>>,
}

impl nanobot_util::SharedFiles for RecordingShared {
    fn pull(&self, file: nanobot_util::SharedFile<'_>) -> Result<bool, nanobot_util::SharedFilesError> {
        self.inner.pull(file)
    }

    fn push(&self, file: nanobot_util::SharedFile<'_>) -> Result<(), nanobot_util::SharedFilesError> {
        let len = std::fs::metadata(file.local).map(|m| m.len()).unwrap_or(0);
        self.pushes.lock().unwrap().push((file.name.to_owned(), len));
        self.inner.push(file)
    }

    fn list(&self, prefix: &str) -> Result<Vec<String>, nanobot_util::SharedFilesError> {
        self.inner.list(prefix)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saved_turn_is_published_before_its_checkpoint_is_emptied() {
    let shared = std::sync::Arc::new(RecordingShared::default());
    let env = Env::new();
    let store = SessionStore::with_options(
        env.home.path(),
        env.workspace.path(),
        StoreOptions::default().shared(shared.clone()),
    )
    .unwrap();
    let key = "telegram:order";
    store.write_checkpoint(key, &json!({"user": "hi"})).await.unwrap();
    shared.pushes.lock().unwrap().clear();
    store
        .append_and_clear_checkpoint(key, vec![SessionMessage::new("user", "hi")], |_| {})
        .await
        .unwrap()
        .unwrap();
    let pushes = shared.pushes.lock().unwrap().clone();
    // A replica killed between two pushes must leave the question somewhere: the turn published, then the
    // checkpoint emptied (never the checkpoint emptied while the turn is unpublished).
    let session = pushes
        .iter()
        .position(|(name, len)| name.ends_with(".jsonl") && *len > 0)
        .expect("the session published");
    let emptied = pushes
        .iter()
        .position(|(name, len)| name.ends_with(".checkpoint.json") && *len == 0)
        .expect("the checkpoint emptied");
    assert!(session < emptied, "{pushes:?}");
}
