//! What a command run by the model can leave in the workspace (links leading out of it, hard links, FIFOs, a
//! tampered Dream record) never makes nanobot's own memory I/O read or write outside the workspace.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use nanobot_memory::{Dream, DreamSettings, MemoryStore};
use nanobot_testkit::MockLlm;

use crate::support::provider;

const SECRET: &str = "sk-outside-the-workspace";

/// A workspace and a folder beside it holding a secret, with a snapshot of that folder to compare against.
struct Attack {
    _base: tempfile::TempDir,
    ws: PathBuf,
    outside: PathBuf,
}

impl Attack {
    fn new() -> Self {
        let base = tempfile::tempdir().unwrap();
        let ws = base.path().join("workspace");
        let outside = base.path().join("outside");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        for name in ["MEMORY.md", "history.jsonl", ".dream_cursor", "secret"] {
            std::fs::write(outside.join(name), SECRET).unwrap();
        }
        Self {
            _base: base,
            ws,
            outside,
        }
    }

    /// Every file outside, with its contents: must stay as created.
    fn assert_outside_untouched(&self) {
        let mut names: Vec<String> = std::fs::read_dir(&self.outside)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [".dream_cursor", "MEMORY.md", "history.jsonl", "secret"],
            "files created outside"
        );
        for name in names {
            assert_eq!(
                std::fs::read_to_string(self.outside.join(&name)).unwrap(),
                SECRET,
                "{name} changed"
            );
        }
    }
}

/// The error with its causes, as nanobot shows it.
fn chain(e: &nanobot_memory::MemoryError) -> String {
    nanobot_util::error_chain(e)
}

fn assert_refused<T: std::fmt::Debug>(what: &str, r: nanobot_memory::Result<T>) {
    let Err(e) = r else { panic!("{what}: not refused") };
    let err = chain(&e);
    assert!(
        !err.contains(SECRET),
        "{what}: the error quotes the secret: {err}"
    );
}

#[test]
fn a_memory_folder_linked_out_of_the_workspace_is_never_followed() {
    for absolute in [true, false] {
        let a = Attack::new();
        let target = if absolute {
            a.outside.clone()
        } else {
            PathBuf::from("../outside")
        };
        symlink(&target, a.ws.join("memory")).unwrap();
        let store = MemoryStore::new(&a.ws);
        assert_refused("read_memory", store.read_memory());
        assert_refused("write_memory", store.write_memory("pwned"));
        assert_refused("append_history", store.append_history("pwned", None));
        assert_refused("read_history_after", store.read_history_after(0));
        assert_refused("last_history_cursor", store.last_history_cursor());
        assert_refused("dream_cursor", store.dream_cursor());
        assert_refused("set_dream_cursor", store.set_dream_cursor(9));
        assert_refused("migrate_legacy_history", store.migrate_legacy_history());
        a.assert_outside_untouched();
    }
}

#[test]
fn memory_files_linked_or_hard_linked_out_are_refused_and_replaced_not_followed() {
    let a = Attack::new();
    let mem = a.ws.join("memory");
    std::fs::create_dir_all(&mem).unwrap();
    symlink(a.outside.join("MEMORY.md"), mem.join("MEMORY.md")).unwrap();
    symlink(a.outside.join("history.jsonl"), mem.join("history.jsonl")).unwrap();
    std::fs::hard_link(a.outside.join(".dream_cursor"), mem.join(".dream_cursor")).unwrap();
    let store = MemoryStore::new(&a.ws);
    assert_refused("read_memory through a link", store.read_memory());
    assert_refused("append through a link", store.append_history("pwned", None));
    let err = chain(&store.dream_cursor().unwrap_err());
    assert!(err.contains("hard-linked"), "{err}");
    // Replacing a file replaces the link itself.
    store.write_memory("# mine\n").unwrap();
    assert_eq!(store.read_memory().unwrap(), "# mine\n");
    assert!(
        !std::fs::symlink_metadata(mem.join("MEMORY.md"))
            .unwrap()
            .is_symlink()
    );
    a.assert_outside_untouched();
}

#[test]
fn a_fifo_planted_as_memory_does_not_hang_nanobot() {
    let a = Attack::new();
    let mem = a.ws.join("memory");
    std::fs::create_dir_all(&mem).unwrap();
    let status = std::process::Command::new("mkfifo")
        .arg(mem.join("MEMORY.md"))
        .status()
        .unwrap();
    assert!(status.success());
    let err = chain(&MemoryStore::new(&a.ws).read_memory().unwrap_err());
    assert!(err.contains("not a regular file"), "{err}");
}

#[tokio::test]
async fn a_tampered_dream_record_cannot_restore_outside_the_workspace() {
    let a = Attack::new();
    let records = a.ws.join("memory/.dream");
    std::fs::create_dir_all(&records).unwrap();
    for path in ["../outside/secret", "/tmp/../outside/secret"] {
        let record = serde_json::json!({
            "version": 1, "kind": "dream", "timestamp": "2026-01-01 10:00", "summary": "planted",
            "changes": [{"path": path, "before": "pwned", "after": SECRET}]
        });
        std::fs::write(records.join("1.json"), record.to_string()).unwrap();
        let mock = MockLlm::start().await;
        let dream = Dream::new(MemoryStore::new(&a.ws), provider(&mock), DreamSettings::new("m"));
        let err = chain(&dream.restore(Some(1)).await.unwrap_err());
        assert!(err.contains("relative path of plain names"), "{path}: {err}");
        assert_eq!(mock.request_count(), 0);
        a.assert_outside_untouched();
    }
    assert!(Path::new(&a.ws).join("memory/.dream/1.json").exists());
}
