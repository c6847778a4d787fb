//! `<stateDir>/account.json`, the file 0.3.5 keeps its login and the channel's state in, read and written in its
//! format so a home works with either program:
//!
//! ```json
//! {"token": "…", "get_updates_buf": "<the poll cursor>", "context_tokens": {"<user>": "<token>"},
//!  "typing_tickets": {"<user>": {"ticket": "…", "ever_succeeded": true, "next_fetch_at": 1.7e9, "retry_delay_s": 2}},
//!  "base_url": "https://ilinkai.weixin.qq.com", "replaced_config_token_sha256": "<when a login replaced it>"}
//! ```
//!
//! Written whole and atomically (`nanobot_util::write_atomic`, mode 0600), with Python's `json.dumps` separators.

use std::io;
use std::path::Path;

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

/// The file's name in the state directory.
pub const ACCOUNT_FILE: &str = "account.json";
/// The key 0.3.5 records a replaced configured token under (its sha256 in hex).
pub const REPLACED_KEY: &str = "replaced_config_token_sha256";
/// The largest `account.json` read.
const MAX_ACCOUNT_BYTES: u64 = 8 * 1024 * 1024;

/// What `account.json` holds. The token is never printed (`Debug` leaves it out).
#[derive(Clone, Default, PartialEq)]
pub(crate) struct Account {
    pub(crate) token: String,
    pub(crate) cursor: String,
    pub(crate) context_tokens: Map<String, Value>,
    pub(crate) typing_tickets: Map<String, Value>,
    pub(crate) base_url: String,
    pub(crate) replaced_hash: String,
}

impl std::fmt::Debug for Account {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Account")
            .field("token", &if self.token.is_empty() { "" } else { "[REDACTED]" })
            .field("cursor", &self.cursor)
            .field("context_tokens", &self.context_tokens.len())
            .field("base_url", &self.base_url)
            .finish_non_exhaustive()
    }
}

/// The sha256 of `token` in hex, as 0.3.5 fingerprints a configured token (empty for an empty token).
pub(crate) fn fingerprint(token: &str) -> String {
    if token.is_empty() {
        String::new()
    } else {
        crate::crypto::to_hex(&Sha256::digest(token.as_bytes()))
    }
}

fn text_at(v: &Value, key: &str) -> String {
    match &v[key] {
        Value::String(s) => s.clone(),
        _ => String::new(),
    }
}

impl Account {
    /// Reads `account.json` in `dir`: `Ok(None)` when there is none; a file that is no JSON object reads as empty
    /// (0.3.5 ignores it too).
    pub(crate) fn read(dir: &Path) -> io::Result<Option<Self>> {
        let path = dir.join(ACCOUNT_FILE);
        let text = match nanobot_util::read_to_string_bounded(&path, MAX_ACCOUNT_BYTES) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if !v.is_object() {
            tracing::warn!(file = %path.display(), "weixin: the saved state is not a JSON object; ignored");
            return Ok(Some(Self::default()));
        }
        let context_tokens = v["context_tokens"]
            .as_object()
            .map(|m| {
                m.iter()
                    .filter_map(|(user, token)| {
                        let token = match token {
                            Value::String(s) => s.clone(),
                            Value::Null => return None,
                            other => other.to_string(),
                        };
                        (!user.trim().is_empty() && !token.trim().is_empty())
                            .then(|| (user.clone(), json!(token)))
                    })
                    .collect()
            })
            .unwrap_or_default();
        let typing_tickets = v["typing_tickets"]
            .as_object()
            .map(|m| {
                m.iter()
                    .filter(|(user, t)| !user.trim().is_empty() && t.is_object())
                    .map(|(u, t)| (u.clone(), t.clone()))
                    .collect()
            })
            .unwrap_or_default();
        Ok(Some(Self {
            token: text_at(&v, "token").trim().to_owned(),
            cursor: text_at(&v, "get_updates_buf"),
            context_tokens,
            typing_tickets,
            base_url: text_at(&v, "base_url").trim().trim_end_matches('/').to_owned(),
            replaced_hash: text_at(&v, REPLACED_KEY),
        }))
    }

    /// The file's JSON, keys in 0.3.5's order.
    pub(crate) fn to_json(&self) -> Value {
        let mut v = json!({
            "token": self.token,
            "get_updates_buf": self.cursor,
            "context_tokens": self.context_tokens,
            "typing_tickets": self.typing_tickets,
            "base_url": self.base_url,
        });
        if !self.replaced_hash.is_empty() {
            v[REPLACED_KEY] = json!(self.replaced_hash);
        }
        v
    }

    /// Writes this state to `account.json` in `dir` (created), as 0.3.5's `_save_state` does. Unless `force`
    /// (a login committing its token), a file holding another token is left alone when that token is newer: a
    /// login in another process put it there, and this program's state must not replace it. It is newer unless
    /// this program runs on the configured token (`config_token`) and the file does not say a login replaced
    /// exactly that one. `Ok(false)` when left alone.
    pub(crate) fn save(&self, dir: &Path, config_token: &str, force: bool) -> io::Result<bool> {
        let path = dir.join(ACCOUNT_FILE);
        if !force && let Ok(Some(on_disk)) = Self::read(dir) {
            let replaces_config =
                !config_token.is_empty() && on_disk.replaced_hash == fingerprint(config_token);
            let config_is_authoritative =
                !config_token.is_empty() && self.token == config_token && !replaces_config;
            if !on_disk.token.is_empty() && on_disk.token != self.token && !config_is_authoritative {
                tracing::info!(
                    file = %path.display(),
                    "weixin: the saved state holds a newer login's token; not overwritten"
                );
                return Ok(false);
            }
        }
        std::fs::create_dir_all(dir)?;
        nanobot_util::write_atomic(&path, python_json(&self.to_json()).as_bytes())?;
        Ok(true)
    }
}

/// `v` as Python's `json.dumps(v, ensure_ascii=False)` writes it: `", "` between items, `": "` after keys.
pub(crate) fn python_json(v: &Value) -> String {
    struct PyFormatter;
    impl serde_json::ser::Formatter for PyFormatter {
        fn begin_array_value<W: ?Sized + io::Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
            if first { Ok(()) } else { w.write_all(b", ") }
        }
        fn begin_object_key<W: ?Sized + io::Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
            if first { Ok(()) } else { w.write_all(b", ") }
        }
        fn begin_object_value<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
            w.write_all(b": ")
        }
    }
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, PyFormatter);
    if serde::Serialize::serialize(v, &mut ser).is_err() {
        return v.to_string();
    }
    String::from_utf8(out).unwrap_or_else(|_| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn account(token: &str) -> Account {
        Account {
            token: token.into(),
            cursor: "Y3Vyc29y".into(),
            base_url: "https://ilinkai.weixin.qq.com".into(),
            ..Account::default()
        }
    }

    #[test]
    fn the_file_is_written_as_0_3_5_writes_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = account("tok-1");
        a.context_tokens.insert("alice@im.wechat".into(), json!("ctx-年"));
        assert!(a.save(dir.path(), "", false).unwrap());
        let text = std::fs::read_to_string(dir.path().join(ACCOUNT_FILE)).unwrap();
        assert_eq!(
            text,
            r#"{"token": "tok-1", "get_updates_buf": "Y3Vyc29y", "context_tokens": {"alice@im.wechat": "ctx-年"}, "typing_tickets": {}, "base_url": "https://ilinkai.weixin.qq.com"}"#
        );
        assert_eq!(Account::read(dir.path()).unwrap().unwrap(), a);
        assert!(!format!("{a:?}").contains("tok-1"));
    }

    #[test]
    fn a_newer_login_is_never_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        // Another process logged in: tok-2 replaced the configured tok-0.
        let mut login = account("tok-2");
        login.replaced_hash = fingerprint("tok-0");
        assert!(login.save(dir.path(), "tok-0", true).unwrap());
        // A runtime still on tok-1 (from an older file) must not write over it.
        assert!(!account("tok-1").save(dir.path(), "", false).unwrap());
        // Nor one on the configured tok-0, which the login replaced.
        assert!(!account("tok-0").save(dir.path(), "tok-0", false).unwrap());
        assert_eq!(Account::read(dir.path()).unwrap().unwrap().token, "tok-2");
        // A configured token the file does not say was replaced is authoritative (a manual edit).
        assert!(account("tok-9").save(dir.path(), "tok-9", false).unwrap());
        assert_eq!(Account::read(dir.path()).unwrap().unwrap().token, "tok-9");
        // The same token is always written.
        assert!(account("tok-9").save(dir.path(), "", false).unwrap());
    }

    #[test]
    fn odd_files_read_as_0_3_5_reads_them() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Account::read(dir.path()).unwrap(), None);
        std::fs::write(dir.path().join(ACCOUNT_FILE), "[1, 2]").unwrap();
        assert_eq!(Account::read(dir.path()).unwrap(), Some(Account::default()));
        std::fs::write(
            dir.path().join(ACCOUNT_FILE),
            r#"{"token": " t ", "context_tokens": {"a": "x", " ": "y", "b": "", "c": 5}, "typing_tickets": {"a": {"ticket": "k"}, "b": 1}, "base_url": "http://h/"}"#,
        )
        .unwrap();
        let a = Account::read(dir.path()).unwrap().unwrap();
        assert_eq!(a.token, "t");
        assert_eq!(a.cursor, "");
        assert_eq!(
            serde_json::to_value(&a.context_tokens).unwrap(),
            json!({"a": "x", "c": "5"})
        );
        assert_eq!(
            serde_json::to_value(&a.typing_tickets).unwrap(),
            json!({"a": {"ticket": "k"}})
        );
        assert_eq!(a.base_url, "http://h");
        assert_eq!(fingerprint(""), "");
        assert_eq!(
            fingerprint("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
