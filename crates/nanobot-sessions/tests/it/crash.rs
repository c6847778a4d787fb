//! A crash in the middle of a write: every complete line loads, the damaged file is kept, appends go on.

use nanobot_sessions::{SessionError, SessionMessage};

use crate::{Env, lines};

const HALF_LINE: &str = r#"{"role": "assistant", "content": "Hello from the fa"#;

fn backups(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().contains(".corrupt-"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_last_line_loads_complete_lines_and_keeps_a_copy() {
    let env = Env::new();
    let path = env.install("Y2xpOmRpcmVjdA.jsonl");
    let intact = std::fs::read(&path).unwrap();
    let mut damaged = intact.clone();
    damaged.extend_from_slice(HALF_LINE.as_bytes());
    std::fs::write(&path, &damaged).unwrap();

    let s = env.store.session("cli:direct").await.unwrap();
    assert_eq!(s.messages.len(), 26);

    let copies = backups(env.store.dir());
    assert_eq!(copies.len(), 1);
    assert_eq!(std::fs::read(&copies[0]).unwrap(), damaged);
    assert_eq!(std::fs::read(&path).unwrap(), intact);

    env.store
        .append("cli:direct", vec![SessionMessage::new("user", "after the crash")])
        .await
        .unwrap();
    env.store.invalidate("cli:direct").await;
    let s = env.store.session("cli:direct").await.unwrap();
    assert_eq!(s.messages.len(), 27);
    assert_eq!(s.messages[26].content_text().as_deref(), Some("after the crash"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn append_right_after_a_crash_does_not_glue_onto_the_cut_line() {
    let env = Env::new();
    let path = env.install("Y2xpOnRvb2x0ZXN0.jsonl");
    let mut damaged = std::fs::read(&path).unwrap();
    damaged.extend_from_slice(b"{\"role\": \"tool\", \"tool_call_id\": \"call_9\", \"cont");
    std::fs::write(&path, &damaged).unwrap();

    env.store
        .append("cli:tooltest", vec![SessionMessage::new("user", "next")])
        .await
        .unwrap();
    let all = lines(&path);
    assert_eq!(all.len(), 15);
    assert_eq!(all[14]["content"], "next");
    assert_eq!(backups(env.store.dir()).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn complete_last_line_without_newline_is_kept() {
    let env = Env::new();
    let path = env.install("Y2xpOnRvb2x0ZXN0.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.trim_end()).unwrap();
    env.store
        .append("cli:tooltest", vec![SessionMessage::new("user", "next")])
        .await
        .unwrap();
    assert_eq!(lines(&path).len(), 15);
    assert!(backups(env.store.dir()).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_middle_line_is_an_error_naming_file_and_line() {
    let env = Env::new();
    let path = env.install("Y2xpOnRvb2x0ZXN0.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut l: Vec<&str> = text.lines().collect();
    l[2] = "{\"role\": \"tool\", broken";
    std::fs::write(&path, l.join("\n") + "\n").unwrap();

    let err = env.store.session("cli:tooltest").await.unwrap_err();
    assert!(matches!(err, SessionError::Json { line: 3, .. }), "{err:?}");
    let shown = err.to_string();
    assert!(shown.contains("Y2xpOnRvb2x0ZXN0.jsonl:3"), "{shown}");
    // Nothing was rewritten.
    assert_eq!(std::fs::read_to_string(&path).unwrap(), l.join("\n") + "\n");
}
