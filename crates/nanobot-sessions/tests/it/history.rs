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
