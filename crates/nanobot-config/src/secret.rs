//! Values that must never reach a log: [`Secret`] and [`SecretMap`].

use std::fmt;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

/// Text printed instead of a non-empty secret.
pub const REDACTED: &str = "[REDACTED]";
/// Text printed for an empty secret (so "not set" is still visible in a dump).
pub const EMPTY_SECRET: &str = "[EMPTY]";

/// A secret string (API key, bot token, password).
///
/// `Debug` and `Display` print [`REDACTED`] (or [`EMPTY_SECRET`] when empty), never the value; serde is
/// transparent, so a config file round-trips unchanged. Read the value with [`Secret::expose`], only where it is
/// sent to the service it belongs to. `null` in a file reads as the empty secret.
///
/// ```
/// use nanobot_config::Secret;
/// let key = Secret::new("sk-live-123");
/// assert_eq!(format!("{key:?} {key}"), "[REDACTED] [REDACTED]");
/// assert_eq!(key.expose(), "sk-live-123");
/// ```
#[derive(Clone, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct Secret(String);

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: serde::Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        Ok(Self(Option::<String>::deserialize(de)?.unwrap_or_default()))
    }
}

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret value itself. Call only where the value is handed to the service it is for.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether the secret is the empty string (Python nanobot writes `""` for "not set").
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Self(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Self(value.to_owned())
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_empty() { EMPTY_SECRET } else { REDACTED })
    }
}

/// `Option<Secret>` helpers: Python configs write both `null` and `""` for "no key".
pub trait SecretOptionExt {
    /// The secret if it is present and not empty.
    fn non_empty(&self) -> Option<&Secret>;
}

impl SecretOptionExt for Option<Secret> {
    fn non_empty(&self) -> Option<&Secret> {
        self.as_ref().filter(|s| !s.is_empty())
    }
}

/// An ordered string map whose values may hold credentials (HTTP headers, a child process's environment).
///
/// Keys are printed by `Debug`, values are not. Order is kept as in the file.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SecretMap(pub IndexMap<String, String>);

impl SecretMap {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// The value for `key` (exact match).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    /// Sets `key` to `value`, keeping the position of an existing key.
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<String>) {
        self.0.insert(key.into(), value.into());
    }

    /// Iterates over `(key, value)` pairs in file order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for SecretMap {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        Self(iter.into_iter().map(|(k, v)| (k.into(), v.into())).collect())
    }
}

impl fmt::Debug for SecretMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.keys().map(|k| (k, RedactedValue)))
            .finish()
    }
}

struct RedactedValue;

impl fmt::Debug for RedactedValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

/// Debug helper for JSON the schema does not model: prints keys and redacts every leaf value, because an
/// unmodelled block (an e-mail channel, an unknown key) may hold a password.
pub(crate) struct RedactedJson<'a>(pub(crate) &'a serde_json::Value);

impl fmt::Debug for RedactedJson<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            serde_json::Value::Object(map) => f
                .debug_map()
                .entries(map.iter().map(|(k, v)| (k, RedactedJson(v))))
                .finish(),
            serde_json::Value::Array(items) => {
                f.debug_list().entries(items.iter().map(RedactedJson)).finish()
            }
            serde_json::Value::Null => f.write_str("null"),
            _ => f.write_str(REDACTED),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_never_prints_its_value() {
        let s = Secret::new("hunter2");
        assert!(!format!("{s:?}{s}{:?}", Some(&s)).contains("hunter2"));
        assert_eq!(format!("{:?}", Secret::default()), EMPTY_SECRET);
        assert_eq!(serde_json::to_string(&s).unwrap(), "\"hunter2\"");
        assert_eq!(serde_json::from_str::<Secret>("null").unwrap(), Secret::default());
        assert_eq!(serde_json::from_str::<Option<Secret>>("null").unwrap(), None);
    }

    #[test]
    fn secret_map_debug_shows_keys_only() {
        let m: SecretMap = [("Authorization", "Bearer abc")].into_iter().collect();
        let dbg = format!("{m:?}");
        assert!(dbg.contains("Authorization") && !dbg.contains("abc"), "{dbg}");
    }

    #[test]
    fn non_empty_filters_blank_keys() {
        assert!(Some(Secret::new("")).non_empty().is_none());
        assert!(None::<Secret>.non_empty().is_none());
        assert_eq!(Some(Secret::new("k")).non_empty().map(Secret::expose), Some("k"));
    }
}
