//! The pairing store against the Python nanobot 0.3.5's own (`nanobot.pairing`, through
//! `fixtures/pairing_035.py` in its venv), on one `pairing.json`: codes issued by either are approved by the
//! other, approvals made by either count for both, and a store already open sees the other program's changes.

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

use chrono::Utc;
use nanobot_channels::PairingStore;
use nanobot_testkit::peers;
use serde_json::{Value, json};

/// Runs `ops` through 0.3.5's store with `home` as HOME; their results.
fn python(exe: &Path, home: &Path, ops: Value) -> Vec<Value> {
    let probe = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/fixtures/pairing_035.py");
    let mut child = Command::new(exe)
        .arg(probe)
        .env("HOME", home)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&serde_json::to_vec(&ops).unwrap())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "0.3.5's pairing store failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn pairing_goes_python_rust_python_on_one_file() {
    let Some(exe) = peers::require_nanobot_python() else {
        return;
    };
    let home = tempfile::tempdir().unwrap();
    let file = home.path().join(".nanobot/pairing.json");

    // 0.3.5 issues two codes and approves one.
    let out = python(
        &exe,
        home.path(),
        json!([
            ["generate_code", "telegram", "111|alice"],
            ["generate_code", "discord", "222"]
        ]),
    );
    let (alice_code, discord_code) = (out[0].as_str().unwrap().to_owned(), out[1].as_str().unwrap());
    python(&exe, home.path(), json!([["approve_code", discord_code]]));

    // nanobot-rs reads both, approves the other code and issues one of its own.
    let store = PairingStore::open(&file).unwrap();
    assert!(store.is_approved("discord", "222"));
    assert!(!store.is_approved("telegram", "111|alice"));
    let pending = store.pending_at(Utc::now());
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(
        (pending[0].code.as_str(), pending[0].sender_id.as_str()),
        (alice_code.as_str(), "111|alice")
    );
    store.approve(&alice_code).unwrap();
    let bob = store.request("slack", "333|bob", "D9").unwrap();

    // 0.3.5 sees nanobot-rs's approval and code, approves that code and revokes the first approval.
    let out = python(
        &exe,
        home.path(),
        json!([
            ["is_approved", "telegram", "111|alice"],
            ["list_pending"],
            ["approve_code", bob.code],
            ["revoke", "discord", "222"],
            ["list_pending"],
        ]),
    );
    assert_eq!(out[0], true, "0.3.5 approves what nanobot-rs approved");
    let listed = out[1].as_array().unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["code"], bob.code.as_str());
    assert_eq!(
        (listed[0]["channel"].as_str(), listed[0]["sender_id"].as_str()),
        (Some("slack"), Some("333|bob"))
    );
    assert_eq!(out[2], json!(["slack", "333|bob"]));
    assert_eq!(out[3], true);
    assert_eq!(out[4], json!([]));

    // The store nanobot-rs holds open sees all of it without being opened again.
    assert!(store.is_approved("slack", "333|bob"));
    assert!(store.is_approved("telegram", "111|alice"));
    assert!(!store.is_approved("discord", "222"));
    assert!(store.pending_at(Utc::now()).is_empty());
    // A code 0.3.5 issued and nanobot-rs denies is gone for 0.3.5 too.
    let out = python(&exe, home.path(), json!([["generate_code", "telegram", "444"]]));
    store.deny(out[0].as_str().unwrap()).unwrap();
    let out = python(
        &exe,
        home.path(),
        json!([["list_pending"], ["is_approved", "telegram", "444"]]),
    );
    assert_eq!(json!(out), json!([[], false]));
}
