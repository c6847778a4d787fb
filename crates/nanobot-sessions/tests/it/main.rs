//! Integration tests of nanobot-sessions: the Python fixtures, crash recovery, history rules, the store.

#![allow(clippy::unwrap_used, reason = "test helpers: a failure should fail the test")]

mod bounds;
mod crash;
mod fixtures;
mod handles;
mod history;
mod keynames;
mod store;

use std::path::{Path, PathBuf};

use nanobot_sessions::SessionStore;
use serde_json::{Map, Value};

/// A temporary config dir (`~/.nanobot`) and workspace with a store over them.
pub(crate) struct Env {
    pub(crate) home: tempfile::TempDir,
    pub(crate) workspace: tempfile::TempDir,
    pub(crate) store: SessionStore,
}

impl Env {
    pub(crate) fn new() -> Self {
        let home = tempfile::tempdir().unwrap();
        let workspace = tempfile::tempdir().unwrap();
        let store = SessionStore::new(home.path(), workspace.path()).unwrap();
        Self {
            home,
            workspace,
            store,
        }
    }

    /// Copies a fixture of the current layout (`tests/fixtures/sessions/<name>`) into the store's directory.
    pub(crate) fn install(&self, name: &str) -> PathBuf {
        std::fs::create_dir_all(self.store.dir()).unwrap();
        let to = self.store.dir().join(name);
        std::fs::copy(fixture(&format!("sessions/{name}")), &to).unwrap();
        to
    }
}

/// A fixture file of this crate.
pub(crate) fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel)
}

/// Every non-empty line of a JSONL file, parsed.
pub(crate) fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// What the Python nanobot 0.3.5's loader makes of a file: every `_type: metadata` line replaces the metadata
/// read so far (its watermark is `last_archived` when that is an integer, else `last_consolidated`), a
/// `_type: provider_state` line is its provider cache, every other line is a message.
pub(crate) struct PythonView {
    pub(crate) messages: Vec<Value>,
    pub(crate) metadata: Map<String, Value>,
    pub(crate) last_consolidated: u64,
}

pub(crate) fn python_load(path: &Path) -> PythonView {
    let mut view = PythonView {
        messages: Vec::new(),
        metadata: Map::new(),
        last_consolidated: 0,
    };
    for v in lines(path) {
        if v.get("_type").and_then(Value::as_str) == Some("metadata") {
            view.metadata = v["metadata"].as_object().cloned().unwrap_or_default();
            view.last_consolidated = v["last_archived"]
                .as_i64()
                .or_else(|| v["last_consolidated"].as_i64())
                .and_then(|n| u64::try_from(n).ok())
                .unwrap_or(0);
        } else if v.get("_type").and_then(Value::as_str) == Some("provider_state") {
            continue;
        } else {
            view.messages.push(v);
        }
    }
    view
}
