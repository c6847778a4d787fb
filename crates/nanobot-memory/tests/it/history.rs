//! history.jsonl: concurrent appends (threads and processes) and the legacy migration.

use std::process::{Command, Stdio};

use nanobot_memory::MemoryStore;

use crate::support::env;

const CHILD_ENV: &str = "NANOBOT_MEMORY_TEST_CHILD_WS";

fn cursors_in_file_order(store: &MemoryStore) -> Vec<u64> {
    let text = std::fs::read_to_string(store.history_path()).unwrap();
    text.lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["cursor"]
                .as_u64()
                .unwrap()
        })
        .collect()
}

#[test]
fn concurrent_appends_keep_unique_increasing_cursors() {
    let env = env();
    let shared = env.store.clone();
    let handles: Vec<_> = (0..8)
        .map(|t| {
            // Half the threads share one store (in-process mutex), half open their own (file lock only).
            let store = if t % 2 == 0 {
                shared.clone()
            } else {
                MemoryStore::new(env.ws.path())
            };
            std::thread::spawn(move || {
                (0..25)
                    .map(|i| {
                        store
                            .append_history(&format!("thread {t} entry {i}"), Some("k"))
                            .unwrap()
                            .cursor
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut returned: Vec<u64> = handles.into_iter().flat_map(|h| h.join().unwrap()).collect();
    returned.sort_unstable();
    assert_eq!(returned, (1..=200).collect::<Vec<_>>());
    assert_eq!(cursors_in_file_order(&env.store), (1..=200).collect::<Vec<_>>());
    assert_eq!(env.store.last_history_cursor().unwrap(), 200);
}

/// Run as a child process by the test below; does nothing in a normal test run.
#[test]
fn child_appender() {
    let Ok(ws) = std::env::var(CHILD_ENV) else { return };
    let store = MemoryStore::new(ws);
    for i in 0..40 {
        store
            .append_history(&format!("child {} entry {i}", std::process::id()), None)
            .unwrap();
    }
}

#[test]
fn concurrent_processes_keep_unique_increasing_cursors() {
    let env = env();
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..3)
        .map(|_| {
            Command::new(&exe)
                .args([
                    "--exact",
                    "history::child_appender",
                    "--test-threads=1",
                    "--quiet",
                ])
                .env(CHILD_ENV, env.ws.path())
                .stdout(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for i in 0..40 {
        env.store
            .append_history(&format!("parent entry {i}"), None)
            .unwrap();
    }
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    assert_eq!(cursors_in_file_order(&env.store), (1..=160).collect::<Vec<_>>());
}

#[test]
fn legacy_history_is_migrated_once_with_a_backup() {
    let env = env();
    let dir = env.store.dir();
    std::fs::create_dir_all(dir).unwrap();
    let legacy = "[2025-11-02 08:15] User set up the home server.\nIt runs Debian.\n\n\
                  [2025-11-03 21:40] User asked for a pasta recipe.\n\n";
    std::fs::write(dir.join("HISTORY.md"), legacy).unwrap();
    env.store.append_history("already there", None).unwrap();

    assert_eq!(env.store.migrate_legacy_history().unwrap(), Some(2));
    assert_eq!(
        env.store.migrate_legacy_history().unwrap(),
        None,
        "second run migrates nothing"
    );
    assert!(!dir.join("HISTORY.md").exists());
    assert_eq!(
        std::fs::read_to_string(dir.join("HISTORY.md.bak")).unwrap(),
        legacy
    );

    let entries = env.store.read_history_after(0).unwrap();
    assert_eq!(entries.len(), 3);
    assert_eq!(entries[1].cursor, 2);
    assert_eq!(entries[1].timestamp, "2025-11-02 08:15");
    assert_eq!(
        entries[1].content,
        "User set up the home server.\nIt runs Debian."
    );
    assert_eq!(entries[2].content, "User asked for a pasta recipe.");
    assert_eq!(entries[2].session_key, None);
    assert_eq!(
        env.store.dream_cursor().unwrap(),
        0,
        "Dream had not seen entry 1: it reads the migrated ones with it"
    );

    // A later legacy file (an old version ran again) keeps the first backup.
    std::fs::write(dir.join("HISTORY.md"), "[2025-12-01 10:00] Again.\n").unwrap();
    assert_eq!(env.store.migrate_legacy_history().unwrap(), Some(1));
    assert!(dir.join("HISTORY.md.bak.1").exists());
    assert_eq!(
        std::fs::read_to_string(dir.join("HISTORY.md.bak")).unwrap(),
        legacy
    );
}

/// As 0.3.5: a migrated archive counts as seen by Dream, so its next run does not replay the user's whole past.
#[test]
fn a_migrated_archive_is_not_dreamed_again() {
    let env = env();
    let dir = env.store.dir();
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join("HISTORY.md"),
        "[2025-11-02 08:15] One.\n\n[2025-11-03 21:40] Two.\n",
    )
    .unwrap();
    assert_eq!(env.store.migrate_legacy_history().unwrap(), Some(2));
    assert_eq!(env.store.dream_cursor().unwrap(), 2);
    assert!(
        env.store
            .read_history_after(env.store.dream_cursor().unwrap())
            .unwrap()
            .is_empty()
    );
}

#[test]
fn python_written_entries_are_read() {
    let env = env();
    std::fs::create_dir_all(env.store.dir()).unwrap();
    std::fs::write(
        env.store.history_path(),
        "{\"cursor\": 1, \"timestamp\": \"2026-01-01 10:00\", \"content\": \"a\"}\nnot json\n\
         {\"cursor\": 2, \"timestamp\": \"2026-01-01 11:00\", \"content\": \"b\", \"future\": true}\n",
    )
    .unwrap();
    let entries = env.store.read_history_after(1).unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].extra["future"], true);
    assert_eq!(env.store.append_history("c", None).unwrap().cursor, 3);
}
