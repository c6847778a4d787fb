//! Property tests: the session-id → file-name mapping is injective and every name is safe.

use std::collections::HashMap;

use nanobot_sessions::keyname::{MAX_PLAIN_STEM, check_key, file_stem, key_from_stem};
use nanobot_sessions::{SessionError, SessionMessage};
use proptest::prelude::*;

/// A name a file system accepts and no path walk can misread.
fn assert_safe(stem: &str) {
    assert!(!stem.is_empty());
    assert!(stem.len() <= MAX_PLAIN_STEM, "{} bytes", stem.len());
    assert!(
        stem.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'~')),
        "{stem}"
    );
    assert!(!stem.starts_with('.'));
}

/// Keys with separators, dots, legacy underscores and whitespace at the ends: the cases that collided before.
fn tricky_key() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            Just(":".to_owned()),
            Just("_".to_owned()),
            Just("/".to_owned()),
            Just("\\".to_owned()),
            Just("..".to_owned()),
            Just(" ".to_owned()),
            Just("?".to_owned()),
            Just("é".to_owned()),
            "[a-c0-2]{1,3}",
        ],
        0..12,
    )
    .prop_map(|parts| parts.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn any_unicode_key_gets_a_safe_name(key in any::<String>()) {
        assert_safe(&file_stem(&key));
    }

    #[test]
    fn long_keys_get_safe_names(key in ".{100,3000}") {
        assert_safe(&file_stem(&key));
    }

    #[test]
    fn distinct_keys_get_distinct_names(a in any::<String>(), b in any::<String>()) {
        prop_assume!(a != b);
        prop_assert_ne!(file_stem(&a), file_stem(&b));
    }

    #[test]
    fn distinct_tricky_keys_get_distinct_names(a in tricky_key(), b in tricky_key()) {
        prop_assume!(a != b);
        prop_assert_ne!(file_stem(&a), file_stem(&b));
    }

    #[test]
    fn plain_names_decode_back_to_their_key(key in any::<String>()) {
        let stem = file_stem(&key);
        match key_from_stem(&stem) {
            Some(back) => prop_assert_eq!(back, key),
            None => prop_assert!(stem.starts_with('~')),
        }
    }

    #[test]
    fn control_characters_are_refused_anywhere(prefix in "[^\\p{Cc}]{0,20}", c in "\\p{Cc}", suffix in any::<String>()) {
        let key = format!("{prefix}{c}{suffix}");
        prop_assert!(matches!(check_key(&key), Err(SessionError::InvalidKey { .. })), "{:?}", key);
    }
}

#[test]
fn a_large_batch_of_tricky_and_long_keys_has_no_collision() {
    let mut seen: HashMap<String, String> = HashMap::new();
    let mut keys = Vec::new();
    for n in 0..300 {
        keys.push("a".repeat(n));
        keys.push(format!("api:{}", "/".repeat(n)));
        keys.push(format!("api:{}", "_".repeat(n)));
    }
    for sep in [":", "_", "/", " ", "\\", "?"] {
        keys.push(format!("telegram{sep}123"));
        keys.push(format!(" telegram{sep}123 "));
    }
    for key in keys {
        let stem = file_stem(&key);
        assert_safe(&stem);
        if let Some(other) = seen.insert(stem.clone(), key.clone()) {
            assert_eq!(other, key, "{stem} shared");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_that_used_to_collide_or_fail_are_separate_sessions() {
    let env = crate::Env::new();
    let keys = [
        "api:a".to_owned(),
        "api: a".to_owned(),
        "api:a ".to_owned(),
        "api:a/b".to_owned(),
        "api:a_b".to_owned(),
        "api:a:b".to_owned(),
        format!("api:{}", "x".repeat(5000)),
        format!("api:{}", "x".repeat(5001)),
    ];
    for (i, key) in keys.iter().enumerate() {
        env.store
            .append(key, vec![SessionMessage::new("user", format!("m{i}"))])
            .await
            .unwrap();
    }
    for (i, key) in keys.iter().enumerate() {
        env.store.invalidate(key).await;
        let s = env.store.session(key).await.unwrap();
        assert_eq!(s.messages.len(), 1, "{key:.20}");
        assert_eq!(s.messages[0].content_text(), Some(format!("m{i}")));
        let name = env.store.path_for(key);
        assert_eq!(name.parent().unwrap(), env.store.dir());
    }
    let listed = env.store.list_sessions().await.unwrap();
    assert_eq!(listed.len(), keys.len());
    let e = env.store.append("api:a\0b", vec![]).await.unwrap_err();
    assert!(matches!(e, SessionError::InvalidKey { .. }), "{e}");
    assert!(!e.to_string().contains(env.home.path().to_str().unwrap()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hashed_file_recording_another_key_is_refused() {
    let env = crate::Env::new();
    let key = format!("api:{}", "y".repeat(400));
    let path = env.store.path_for(&key);
    std::fs::create_dir_all(env.store.dir()).unwrap();
    std::fs::write(
        &path,
        "{\"_type\":\"metadata\",\"key\":\"api:other\",\"created_at\":\"2026-01-01T00:00:00\",\"metadata\":{},\"last_consolidated\":0}\n",
    )
    .unwrap();
    let e = env.store.session(&key).await.unwrap_err();
    assert!(matches!(e, SessionError::KeyMismatch { .. }), "{e}");
}
