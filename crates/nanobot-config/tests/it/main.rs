//! Integration tests of nanobot-config: the Python fixture, loading, environment, save round trips.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers outside #[test] functions"
)]

mod env;
mod errors;
mod load;
mod roundtrip;
mod schema;
mod secrets;

use nanobot_util::EnvMap;
use std::path::{Path, PathBuf};

/// A `config.json` written by the Python nanobot 0.3.5 (a copy kept in the repository, `tests/fixtures/`).
pub(crate) fn fixture_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/python-nanobot-config.json")
}

pub(crate) fn fixture_value() -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(fixture_path()).unwrap()).unwrap()
}

/// An environment map from pairs.
pub(crate) fn env(pairs: &[(&str, &str)]) -> EnvMap {
    pairs.iter().copied().collect()
}

/// Writes `text` as `config.json` in a new temp dir.
pub(crate) fn write_config(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

pub(crate) fn read_json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}
