//! Costs that must stay linear: reading the tail after a huge last message, the first read of a long
//! Python-written file, checkpoints per tool step, oversized messages. Asserted on bytes read and syncs
//! counted by the store, never on time.

use nanobot_sessions::{SessionMessage, SessionStore, StoreOptions};
use serde_json::json;

use crate::{Env, lines};

fn store_with(env: &Env, options: StoreOptions) -> SessionStore {
    SessionStore::with_options(env.home.path(), env.workspace.path(), options).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_16_mib_last_message_is_read_once_not_rescanned() {
    let env = Env::new();
    // Spilling off: the raw cost of a 16 MiB line is what is measured.
    let store = store_with(&env, StoreOptions::default().max_message_bytes(usize::MAX));
    let key = "api:big";
    let mut small = Vec::new();
    for i in 0..40 {
        small.push(SessionMessage::new(
            if i % 2 == 0 { "user" } else { "assistant" },
            format!("m{i}"),
        ));
    }
    store.append(key, small).await.unwrap();
    let big = "y".repeat(16 * 1024 * 1024);
    store
        .append(key, vec![SessionMessage::new("user", big.clone())])
        .await
        .unwrap();
    let file_len = std::fs::metadata(store.path_for(key)).unwrap().len();

    for _ in 0..3 {
        store.invalidate(key).await;
        let before = store.bytes_read();
        let h = store.history(key, 10).await.unwrap();
        assert_eq!(h.last().unwrap().content_text().unwrap().len(), big.len());
        let read = store.bytes_read() - before;
        // Linear: each byte of the tail is read at most about twice (chunks double), never once per step.
        assert!(
            read <= 2 * file_len + 1024 * 1024,
            "read {read} bytes of a {file_len}-byte file"
        );
        assert!(read >= 16 * 1024 * 1024, "the big line must be read: {read}");
    }
    // Appending does not read the big line again: the store knows the file ends with a newline.
    let before = store.bytes_read();
    store
        .append(key, vec![SessionMessage::new("assistant", "ok")])
        .await
        .unwrap();
    assert!(store.bytes_read() - before < 1024 * 1024);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_long_lines_cost_only_the_lines_wanted() {
    let env = Env::new();
    let store = store_with(&env, StoreOptions::default().max_message_bytes(usize::MAX));
    let key = "cli:long-lines";
    for i in 0..30 {
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        store
            .append(
                key,
                vec![SessionMessage::new(
                    role,
                    format!("{i}:{}", "z".repeat(512 * 1024)),
                )],
            )
            .await
            .unwrap();
    }
    store.invalidate(key).await;
    let before = store.bytes_read();
    let h = store.history(key, 2).await.unwrap();
    assert!(!h.is_empty());
    let read = store.bytes_read() - before;
    let file_len = std::fs::metadata(store.path_for(key)).unwrap().len();
    // `2 × max + 32` = 36 of 30 messages are wanted here, so the whole file; twice its size is the bound.
    assert!(read <= 2 * file_len, "{read} > 2 × {file_len}");
}

/// Writes session `key` as the Python nanobot does (one metadata line, then `n` messages, some of whose
/// contents mention `"_type"` early, with a few blank lines), with `last_consolidated`; returns the file's text.
fn write_python_file(env: &Env, key: &str, n: usize, last_consolidated: usize) -> String {
    let path = env.store.path_for(key);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut text = serde_json::to_string(&json!({
        "_type": "metadata", "key": key, "created_at": "2026-01-01T00:00:00",
        "updated_at": "2026-01-01T00:00:00", "metadata": {}, "last_consolidated": last_consolidated
    }))
    .unwrap();
    text.push('\n');
    for i in 0..n {
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        // Some contents mention "_type" early: such lines are parsed, and still counted as messages.
        let content = if i % 97 == 0 {
            "\"_type\": \"metadata\"".to_owned()
        } else {
            format!("message {i}")
        };
        text.push_str(
            &serde_json::to_string(
                &json!({"role": role, "content": content, "timestamp": "2026-01-01T00:00:01"}),
            )
            .unwrap(),
        );
        text.push('\n');
        if i % 500 == 250 {
            // Blank lines are not messages (nor counted as such).
            text.push_str("\n   \n");
        }
    }
    std::fs::write(&path, &text).unwrap();
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_read_of_a_long_python_file_keeps_only_the_tail() {
    let env = Env::new();
    let key = "cli:py-long";
    let path = env.store.path_for(key);
    let text = write_python_file(&env, key, 5000, 4990);
    let full = {
        let s = env.store.session(key).await.unwrap();
        env.store.invalidate(key).await;
        s
    };
    assert_eq!(full.messages.len(), 5000);
    let h = env.store.history(key, 5).await.unwrap();
    assert_eq!(h, full.history(5));
    // The count record left at the end says 5000: every line was counted, none lost.
    let l = lines(&path);
    assert_eq!(l.last().unwrap()["_message_count"], 5000);
    // A later read reads only the tail.
    env.store.invalidate(key).await;
    let before = env.store.bytes_read();
    assert_eq!(env.store.history(key, 5).await.unwrap(), full.history(5));
    assert!(env.store.bytes_read() - before < text.len() as u64 / 4);
}

/// Indexing in the background (as the runtime does at start) counts a Python-written file once, so the first
/// turn on it reads only its tail and gets the same history as a whole read; files already indexed, and
/// sessions written by nanobot-rs, cost only a small read from the end and are not touched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_indexing_makes_the_first_read_of_a_python_file_a_tail_read() {
    let env = Env::new();
    let py = "telegram:py";
    let text = write_python_file(&env, py, 5000, 4900);
    write_python_file(&env, "cli:short", 10, 0);
    env.store
        .append("cli:ours", vec![SessionMessage::new("user", "hi")])
        .await
        .unwrap();
    let expected = {
        let whole = SessionStore::new(env.home.path(), env.workspace.path()).unwrap();
        whole.session(py).await.unwrap().history(100)
    };
    let ours_before = std::fs::read(env.store.path_for("cli:ours")).unwrap();
    let short_before = std::fs::read(env.store.path_for("cli:short")).unwrap();

    let store = SessionStore::new(env.home.path(), env.workspace.path()).unwrap();
    let read_before = store.bytes_read();
    assert_eq!(
        store.index_sessions().await.unwrap(),
        1,
        "only the long Python file needs a count record"
    );
    assert!(
        store.bytes_read() - read_before >= text.len() as u64,
        "the long file was counted through once"
    );
    assert_eq!(lines(&store.path_for(py)).last().unwrap()["_message_count"], 5000);
    assert_eq!(std::fs::read(store.path_for("cli:ours")).unwrap(), ours_before);
    assert_eq!(std::fs::read(store.path_for("cli:short")).unwrap(), short_before);

    // A process that starts later (or this one's first turn) reads only the tail for the first turn.
    let fresh = SessionStore::new(env.home.path(), env.workspace.path()).unwrap();
    let before = fresh.bytes_read();
    assert_eq!(fresh.history(py, 100).await.unwrap(), expected);
    let first_turn = fresh.bytes_read() - before;
    // One read chunk (64 KiB) from the end, and a byte to check the last line, whatever the file's length.
    assert!(
        text.len() > 5 * 65_536,
        "the file is long enough to tell the two apart"
    );
    assert!(
        first_turn <= 65_537,
        "first turn read {first_turn} of {} bytes",
        text.len()
    );
    // Indexing again finds nothing to do and changes nothing.
    let again = SessionStore::new(env.home.path(), env.workspace.path()).unwrap();
    let size = std::fs::metadata(store.path_for(py)).unwrap().len();
    assert_eq!(again.index_sessions().await.unwrap(), 0);
    assert_eq!(std::fs::metadata(store.path_for(py)).unwrap().len(), size);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_step_is_one_append_and_one_sync() {
    let env = Env::new();
    let key = "cli:cp";
    let mut messages = Vec::new();
    let mut last = json!(null);
    let syncs0 = env.store.syncs();
    for step in 0..20 {
        messages.push(json!({"role": "assistant", "content": format!("step {step} {}", "w".repeat(2000))}));
        messages.push(json!({"role": "tool", "tool_call_id": format!("c{step}"), "content": "done"}));
        last = json!({"phase": "tools_completed", "iteration": step, "messages": messages});
        env.store.write_checkpoint(key, &last).await.unwrap();
    }
    assert_eq!(env.store.syncs() - syncs0, 20, "one sync per step");
    assert_eq!(env.store.read_checkpoint(key).await.unwrap(), Some(last.clone()));
    // Appended changes only: the file is about the size of the final payload, not 20 growing copies of it.
    let cp = env.store.checkpoint_path(key);
    let file_len = std::fs::metadata(&cp).unwrap().len() as usize;
    let payload_len = serde_json::to_vec(&last).unwrap().len();
    assert!(file_len < payload_len * 2, "{file_len} vs {payload_len}");

    // A torn last record (crash mid-write) leaves the state before it.
    let mut bytes = std::fs::read(&cp).unwrap();
    bytes.extend_from_slice(b"{\"_checkpoint\": \"change\", \"set\": {\"phase\": \"aw");
    std::fs::write(&cp, &bytes).unwrap();
    assert_eq!(env.store.read_checkpoint(key).await.unwrap(), Some(last));

    // A field replaced, one removed, a payload that is not an object.
    env.store.clear_checkpoint(key).await.unwrap();
    assert_eq!(env.store.read_checkpoint(key).await.unwrap(), None);
    env.store
        .write_checkpoint(key, &json!({"a": [1], "b": 1}))
        .await
        .unwrap();
    env.store.write_checkpoint(key, &json!({"a": [2]})).await.unwrap();
    assert_eq!(
        env.store.read_checkpoint(key).await.unwrap(),
        Some(json!({"a": [2]}))
    );
    env.store.write_checkpoint(key, &json!([1, 2])).await.unwrap();
    assert_eq!(env.store.read_checkpoint(key).await.unwrap(), Some(json!([1, 2])));
    // A checkpoint file of an older version (one JSON object) still reads.
    std::fs::write(&cp, b"{\"phase\": \"awaiting_tools\"}").unwrap();
    assert_eq!(
        env.store.read_checkpoint(key).await.unwrap(),
        Some(json!({"phase": "awaiting_tools"}))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_message_is_spilled_to_a_side_file() {
    let env = Env::new();
    let key = "api:spill";
    let big: String = "é".repeat(1024 * 1024); // 2 MiB of two-byte characters
    env.store
        .append(key, vec![SessionMessage::new("user", big.clone())])
        .await
        .unwrap();
    let l = lines(&env.store.path_for(key));
    let stored = l.last().unwrap()["content"].as_str().unwrap().to_owned();
    assert!(stored.len() < 64 * 1024, "the session line stays small");
    assert!(
        stored.contains("bytes) is in"),
        "{}",
        &stored[stored.len() - 200..]
    );
    let side = stored.rsplit("is in ").next().unwrap().trim_end_matches(']');
    assert_eq!(std::fs::read_to_string(side).unwrap(), big, "nothing is lost");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(side).unwrap().permissions().mode() & 0o777,
        0o600
    );
}

/// What consolidation plans on is read from the end of the file: the same messages as a whole load gives, for a
/// cost that follows the part not yet consolidated, not the session's length.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_unconsolidated_part_is_read_from_the_end() {
    let env = Env::new();
    let store = store_with(&env, StoreOptions::default());
    let key = "telegram:long";
    for round in 0..40 {
        let batch = (0..250)
            .map(|i| {
                let role = if i % 2 == 0 { "user" } else { "assistant" };
                SessionMessage::new(role, format!("round {round} message {i}: {}", "w".repeat(100)))
            })
            .collect();
        store.append(key, batch).await.unwrap();
    }
    // 10,000 messages, all but the last 30 consolidated.
    store.set_last_consolidated(key, 9_970).await.unwrap();
    let file_len = std::fs::metadata(store.path_for(key)).unwrap().len();
    for _ in 0..2 {
        store.invalidate(key).await;
        let before = store.bytes_read();
        let part = store.unconsolidated(key).await.unwrap();
        let read = store.bytes_read() - before;
        assert_eq!(part.start, 9_970);
        assert_eq!(part.messages.len(), 30);
        assert!(
            read < file_len / 20,
            "read {read} bytes of a {file_len}-byte file for 30 messages"
        );
        let whole = store.session(key).await.unwrap();
        assert_eq!(part.messages, whole.messages[9_970..].to_vec());
        assert_eq!(part.metadata, whole.metadata);
    }
    // From the cache, the same.
    let cached = store.unconsolidated(key).await.unwrap();
    assert_eq!((cached.start, cached.messages.len()), (9_970, 30));
    // Without the whole session cached, what was read is kept and followed: appends and a pointer moving
    // forward cost no read (a long-running process checks every turn).
    store.invalidate(key).await;
    store.unconsolidated(key).await.unwrap();
    let before = store.bytes_read();
    for i in 0..6 {
        store
            .append(key, vec![SessionMessage::new("user", format!("later {i}"))])
            .await
            .unwrap();
        let part = store.unconsolidated(key).await.unwrap();
        assert_eq!(part.start + part.messages.len(), 10_001 + i);
    }
    store.set_last_consolidated(key, 9_990).await.unwrap();
    let moved = store.unconsolidated(key).await.unwrap();
    assert_eq!(
        store.bytes_read(),
        before,
        "appends and the pointer are followed in memory"
    );
    assert_eq!((moved.start, moved.messages.len()), (9_990, 16));
    let whole = store.session(key).await.unwrap();
    assert_eq!(moved.messages, whole.messages[9_990..].to_vec());
    assert_eq!(
        moved.messages.last().unwrap().content_text().as_deref(),
        Some("later 5")
    );
    store.set_last_consolidated(key, 9_970).await.unwrap();
    // A pointer past the end (a hand-edited file) is taken as the end.
    store.set_last_consolidated(key, 20_000).await.unwrap();
    store.invalidate(key).await;
    let none = store.unconsolidated(key).await.unwrap();
    assert_eq!((none.start, none.messages.len()), (10_006, 0));
    // A file the Python nanobot wrote (no count record near its end) is read whole once, then from its end.
    let text = write_python_file(&env, "cli:py", 5_000, 4_990);
    let first = env.store.unconsolidated("cli:py").await.unwrap();
    assert_eq!((first.start, first.messages.len()), (4_990, 10));
    env.store.invalidate("cli:py").await;
    let before = env.store.bytes_read();
    let again = env.store.unconsolidated("cli:py").await.unwrap();
    assert_eq!(again.messages, first.messages);
    assert!(
        env.store.bytes_read() - before < text.len() as u64 / 4,
        "the second read is from the end"
    );
}

/// A long-running process keeps the unconsolidated part for the consolidator's check: a turn's history comes from
/// it, with no read at all, and is what a whole load gives (interrupted tool calls answered, the window's rules).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_history_comes_from_the_kept_unconsolidated_part_without_a_read() {
    let env = Env::new();
    let store = store_with(&env, StoreOptions::default());
    let key = "telegram:kept";
    let batch: Vec<SessionMessage> = (0..2_000)
        .map(|i| {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            SessionMessage::new(role, format!("message {i}: {}", "w".repeat(100)))
        })
        .collect();
    store.append(key, batch).await.unwrap();
    store.set_last_consolidated(key, 1_000).await.unwrap();
    store.invalidate(key).await;
    store.unconsolidated(key).await.unwrap();
    let mut before = store.bytes_read();
    for turn in 0..5 {
        let call = serde_json::json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": format!("call_{turn}"), "type": "function", "function": {"name": "exec", "arguments": "{}"}}]});
        store
            .append(
                key,
                vec![
                    SessionMessage::new("user", format!("turn {turn}")),
                    serde_json::from_value(call).unwrap(),
                ],
            )
            .await
            .unwrap();
        store.unconsolidated(key).await.unwrap();
        let (history, metadata) = store.history_and_metadata(key, 50).await.unwrap();
        let borrowed = store
            .with_history(key, 50, |h, _| {
                h.iter().map(|m| m.clone().into_owned()).collect::<Vec<_>>()
            })
            .await
            .unwrap();
        assert_eq!(
            store.bytes_read(),
            before,
            "turn {turn}: the history was read from the file"
        );
        assert_eq!(borrowed, history);
        let last = history.last().unwrap();
        assert_eq!(last.role(), Some("tool"), "the interrupted call is answered");
        assert_eq!(last.tool_call_id(), Some(format!("call_{turn}").as_str()));
        assert_eq!(history.first().unwrap().role(), Some("user"));
        let whole = store.session(key).await.unwrap();
        assert_eq!(history, whole.history(50));
        assert_eq!(metadata, whole.metadata);
        // Back to the state of a long-running process that has not loaded the whole session.
        store.invalidate(key).await;
        store.unconsolidated(key).await.unwrap();
        before = store.bytes_read();
    }
}
