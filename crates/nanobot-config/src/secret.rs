//! Values that must never reach a log: [`Secret`] (the one shared type, from `nanobot-util`) and [`SecretMap`].

use std::fmt;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

pub use nanobot_util::secret::{EMPTY_SECRET, REDACTED, Secret};
/// The error for a header or environment map (a [`SecretMap`]) that is not an object of strings.
pub(crate) const SECRET_MAP_ERROR: &str =
    "expected an object of names to strings; its values may hold secrets, so they are not shown";

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
#[derive(Clone, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct SecretMap(pub IndexMap<String, String>);

impl<'de> Deserialize<'de> for SecretMap {
    fn deserialize<D: serde::Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        de.deserialize_any(SecretMapVisitor)
    }
}

/// Accepts an object whose values are strings (`null` reads as empty) and refuses anything else without echoing
/// a value.
struct SecretMapVisitor;

macro_rules! refuse_secret_map {
    ($($name:ident: $ty:ty),* $(,)?) => {
        $(fn $name<E: serde::de::Error>(self, _v: $ty) -> Result<Self::Value, E> {
            Err(E::custom(SECRET_MAP_ERROR))
        })*
    };
}

impl<'de> serde::de::Visitor<'de> for SecretMapVisitor {
    type Value = SecretMap;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object of names to strings")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<SecretMap, A::Error> {
        let mut out = IndexMap::new();
        while let Some(key) = map.next_key::<String>()? {
            let value: Secret = map.next_value()?;
            out.insert(key, value.expose().to_owned());
        }
        Ok(SecretMap(out))
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<SecretMap, E> {
        Ok(SecretMap::default())
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<SecretMap, E> {
        Ok(SecretMap::default())
    }

    refuse_secret_map!(
        visit_bool: bool,
        visit_i64: i64,
        visit_u64: u64,
        visit_i128: i128,
        visit_u128: u128,
        visit_f64: f64,
        visit_char: char,
        visit_str: &str,
        visit_bytes: &[u8],
    );

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, _seq: A) -> Result<SecretMap, A::Error> {
        Err(serde::de::Error::custom(SECRET_MAP_ERROR))
    }
}

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
