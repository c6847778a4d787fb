//! History replay from stored sessions: starts at a user turn, no orphans, interrupted calls closed.

use nanobot_sessions::{INTERRUPTED_TOOL_RESULT, SessionMessage};
use serde_json::json;

use crate::{Env, lines, python_load};

fn m(v: serde_json::Value) -> SessionMessage {
    serde_json::from_value(v).unwrap()
}

fn call(id: &str, name: &str) -> SessionMessage {
    m(json!({"role": "assistant", "content": "", "tool_calls": [
        {"id": id, "type": "function", "function": {"name": name, "arguments": "{}"}}]}))
}

fn result(id: &str) -> SessionMessage {
    m(json!({"role": "tool", "tool_call_id": id, "name": "exec", "content": "ok"}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupted_run_replays_with_a_closed_call() {
    let env = Env::new();
    let key = "telegram:1";
    env.store
        .append(
            key,
            vec![
                SessionMessage::new("user", "clean up"),
                call("c1", "exec"),
                result("c1"),
                call("c2", "exec"),
            ],
        )
        .await
        .unwrap();
    // The process died here, before c2's result. A new process loads the file.
    env.store.invalidate(key).await;
    let h = env.store.history(key, 50).await.unwrap();
    let roles: Vec<_> = h.iter().map(|x| x.role().unwrap()).collect();
    assert_eq!(roles, ["user", "assistant", "tool", "assistant", "tool"]);
    assert_eq!(h[4].tool_call_id(), Some("c2"));
    assert_eq!(h[4].name(), Some("exec"));
    assert_eq!(h[4].content_text().as_deref(), Some(INTERRUPTED_TOOL_RESULT));
    // The synthetic result is not written: the file records what happened.
    assert_eq!(lines(&env.store.path_for(key)).len(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn window_never_starts_with_or_contains_an_orphan() {
    let env = Env::new();
    let key = "slack:C1";
    env.store
        .append(
            key,
            vec![
                SessionMessage::new("user", "one"),
                call("a", "exec"),
                result("a"),
                SessionMessage::new("assistant", "done one"),
                SessionMessage::new("user", "two"),
                result("zzz"), // a result for a call that is not in the file
                SessionMessage::new("assistant", "done two"),
            ],
        )
        .await
        .unwrap();
    // Window of 5 = [result a, assistant, user two, orphan, assistant]: starts at "two", orphan dropped.
    let h = env.store.history(key, 5).await.unwrap();
    let texts: Vec<_> = h.iter().map(|x| x.content_text().unwrap_or_default()).collect();
    assert_eq!(texts, ["two", "done two"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consolidation_pointer_is_durable_and_python_readable() {
    let env = Env::new();
    let key = "cli:direct";
    let msgs: Vec<_> = (0..10)
        .map(|i| SessionMessage::new(if i % 2 == 0 { "user" } else { "assistant" }, format!("m{i}")))
        .collect();
    env.store.append(key, msgs).await.unwrap();
    assert!(env.store.set_last_consolidated(key, 6).await.unwrap());
    assert!(
        !env.store.set_last_consolidated(key, 6).await.unwrap(),
        "no change, no write"
    );
    env.store
        .update_header(key, |h| {
            h.metadata
                .insert("_last_usage".into(), json!({"total_tokens": 42}));
        })
        .await
        .unwrap();

    env.store.invalidate(key).await;
    let s = env.store.session(key).await.unwrap();
    assert_eq!(s.last_consolidated, 6);
    assert_eq!(s.metadata["_last_usage"]["total_tokens"], 42);
    assert_eq!(s.messages.len(), 10);
    let h = env.store.history(key, 100).await.unwrap();
    assert_eq!(h[0].content_text().as_deref(), Some("m6"));

    let py = python_load(&env.store.path_for(key));
    assert_eq!(py.messages.len(), 10);
    assert_eq!(py.last_consolidated, 6);
    assert_eq!(py.metadata["_last_usage"]["total_tokens"], 42);
}

/// A session of `n` messages: user turns, tool runs (some interrupted), commands, answers.
fn varied(n: usize) -> Vec<SessionMessage> {
    let mut out = Vec::new();
    let mut i = 0;
    while out.len() < n {
        match i % 7 {
            0 => out.push(SessionMessage::new("user", format!("u{i}"))),
            1 => out.push(call(&format!("c{i}"), "exec")),
            2 => out.push(result(&format!("c{}", i - 1))),
            3 => out.push(call(&format!("c{i}"), "read_file")), // never answered
            4 => out.push(SessionMessage::new("user", "/status").with("_command", true)),
            5 => out.push(result("orphan")),
            _ => out.push(SessionMessage::new("assistant", format!("a{i}"))),
        }
        i += 1;
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_from_the_end_gives_the_same_history_as_a_full_load() {
    let env = Env::new();
    let key = "cli:long";
    // Several appends so that metadata records with message counts land inside the file.
    for chunk in varied(1500).chunks(100) {
        env.store.append(key, chunk.to_vec()).await.unwrap();
    }
    env.store.set_last_consolidated(key, 700).await.unwrap();
    env.store.append(key, varied(60)).await.unwrap();

    env.store.invalidate(key).await;
    let full = env.store.session(key).await.unwrap();
    assert_eq!(full.messages.len(), 1560);
    assert_eq!(full.last_consolidated, 700);
    for max in [1, 2, 5, 50, 100, 500, 900, 2000] {
        env.store.invalidate(key).await;
        let from_end = env.store.history(key, max).await.unwrap();
        assert_eq!(from_end, full.history(max), "max_messages = {max}");
    }
    let py = python_load(&env.store.path_for(key));
    assert_eq!(py.messages.len(), 1560);
    assert_eq!(py.last_consolidated, 700);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_written_file_gets_a_marker_after_the_first_read() {
    let env = Env::new();
    let key = "cli:py";
    let path = env.store.path_for(key);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    // As the Python nanobot writes it: one metadata line, then messages.
    let mut text = String::from(
        "{\"_type\": \"metadata\", \"key\": \"cli:py\", \"created_at\": \"2026-01-01T00:00:00\", \"updated_at\": \"2026-01-01T00:00:00\", \"metadata\": {}, \"last_consolidated\": 10}\n",
    );
    for m in varied(1000) {
        text.push_str(&serde_json::to_string(&m).unwrap());
        text.push('\n');
    }
    std::fs::write(&path, &text).unwrap();

    let reference = {
        let s = env.store.session(key).await.unwrap();
        env.store.invalidate(key).await;
        s.history(40)
    };
    assert_eq!(env.store.history(key, 40).await.unwrap(), reference);
    // The first read had to go through the whole file; it left a marker record at the end.
    let l = lines(&path);
    assert_eq!(l.len(), 1002);
    assert_eq!(l[1001]["_type"], "metadata");
    assert_eq!(l[1001]["_message_count"], 1000);
    assert_eq!(l[1001]["last_consolidated"], 10);
    env.store.invalidate(key).await;
    assert_eq!(env.store.history(key, 40).await.unwrap(), reference);
    let py = python_load(&path);
    assert_eq!(py.messages.len(), 1000);
    assert_eq!(py.last_consolidated, 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_edited_file_with_a_stale_count_is_read_whole() {
    let env = Env::new();
    let key = "cli:edited";
    env.store.append(key, varied(300)).await.unwrap();
    env.store.set_last_consolidated(key, 100).await.unwrap();
    let path = env.store.path_for(key);
    // Someone deletes the first 50 messages by hand: the record at the end now over-counts.
    let text = std::fs::read_to_string(&path).unwrap();
    let kept: Vec<&str> = text
        .lines()
        .enumerate()
        .filter(|(i, _)| *i == 0 || *i > 50)
        .map(|(_, l)| l)
        .collect();
    std::fs::write(&path, kept.join("\n") + "\n").unwrap();
    env.store.invalidate(key).await;
    let full = env.store.session(key).await.unwrap();
    assert_eq!(full.messages.len(), 250);
    env.store.invalidate(key).await;
    assert_eq!(env.store.history(key, 400).await.unwrap(), full.history(400));
}
