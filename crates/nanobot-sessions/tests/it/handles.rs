//! Session handles, streamed reads and the rollback copy (`SessionStore::handles`, `scan_messages`, `metadata`, `restore_to_workspace`).

use nanobot_sessions::{HANDLE_METADATA_KEY, SessionMessage, SessionStore};
use serde_json::json;

fn store(home: &tempfile::TempDir) -> SessionStore {
    SessionStore::new(home.path().join("data"), home.path().join("workspace")).unwrap()
}

#[tokio::test]
async fn handles_are_given_once_kept_across_stores_and_duplicates_are_renamed() {
    let home = tempfile::tempdir().unwrap();
    let s = store(&home);
    for key in ["telegram:1", "telegram:2", "cli:direct"] {
        s.append(key, vec![SessionMessage::new("user", key)])
            .await
            .unwrap();
    }
    let first = s.handles().await.unwrap();
    assert_eq!(first.len(), 3);
    let names: std::collections::HashSet<_> = first.iter().map(|h| h.name.clone()).collect();
    assert_eq!(names.len(), 3, "distinct: {first:?}");
    // Written into each session's metadata, so a new store (or the Python nanobot) reads the same names.
    let again = store(&home).handles().await.unwrap();
    for h in &first {
        assert!(
            again.iter().any(|a| a.key == h.key && a.name == h.name),
            "{again:?}"
        );
        let meta = s.metadata(&h.key).await.unwrap();
        assert_eq!(meta[HANDLE_METADATA_KEY], json!(h.name));
    }
    // A handle copied onto a second session (a hand edit) stays with the older session; the other is renamed.
    let (older, newer) = (&first[0], &first[1]);
    let stolen = older.name.clone();
    s.update_header(&newer.key, move |h| {
        h.metadata.insert(HANDLE_METADATA_KEY.into(), json!(stolen));
    })
    .await
    .unwrap();
    let fixed = s.handles().await.unwrap();
    let name_of = |key: &str| fixed.iter().find(|h| h.key == key).unwrap().name.clone();
    assert_eq!(name_of(&older.key), older.name);
    assert_ne!(name_of(&newer.key), older.name);
}

#[tokio::test]
async fn scans_stream_every_message_and_skip_records_and_a_cut_line() {
    let home = tempfile::tempdir().unwrap();
    let s = store(&home);
    assert!(
        s.scan_messages("nobody:0", 0, |_, _, _| {})
            .await
            .unwrap()
            .is_none()
    );
    s.append(
        "telegram:1",
        vec![
            SessionMessage::new("user", "one"),
            SessionMessage::new("assistant", "two"),
        ],
    )
    .await
    .unwrap();
    s.update_header("telegram:1", |h| {
        h.metadata.insert("title".into(), json!("t"));
    })
    .await
    .unwrap();
    s.append("telegram:1", vec![SessionMessage::new("user", "three")])
        .await
        .unwrap();
    // A reader in another process sees a file whose last line is being written.
    let path = s.path_for("telegram:1");
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str("{\"role\":\"user\",\"cont");
    std::fs::write(&path, text).unwrap();
    let fresh = store(&home);
    let seen = fresh
        .scan_messages("telegram:1", Vec::new(), |seen, i, m| {
            seen.push((i, m.content_text().unwrap()));
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        seen,
        [
            (0, "one".to_owned()),
            (1, "two".to_owned()),
            (2, "three".to_owned())
        ]
    );
    assert_eq!(fresh.metadata("telegram:1").await.unwrap()["title"], "t");
}

#[tokio::test]
async fn restoring_into_a_linked_sessions_folder_is_refused() {
    let home = tempfile::tempdir().unwrap();
    let s = store(&home);
    s.append("cli:x", vec![SessionMessage::new("user", "x")])
        .await
        .unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), home.path().join("workspace/sessions")).unwrap();
    let err = s.restore_to_workspace().await.unwrap_err().to_string();
    assert!(err.contains("symbolic link"), "{err}");
    assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
}
