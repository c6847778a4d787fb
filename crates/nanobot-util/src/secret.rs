//! [`Secret`]: the one type for API keys, bot tokens and passwords.

use std::fmt;
use std::hash::{Hash, Hasher};

use indexmap::IndexMap;
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};

/// Text printed instead of a non-empty secret.
pub const REDACTED: &str = "[REDACTED]";
/// Text printed for an empty secret (so "not set" is still visible in a dump).
pub const EMPTY_SECRET: &str = "[EMPTY]";
/// The deserialisation error for a secret holding something other than a string. It names what was expected,
/// never the value: the schema, not the key's name, says this field is a secret.
pub const TYPE_ERROR: &str = "expected a string; this field holds a secret, so the value is not shown";

/// A secret string (API key, bot token, password), kept in a `secrecy::SecretString` (zeroised when dropped).
///
/// `Debug` and `Display` print [`REDACTED`] (or [`EMPTY_SECRET`] when empty), never the value. serde is
/// transparent (a config file round-trips unchanged); `null` reads as the empty secret, and any other
/// non-string is refused with [`TYPE_ERROR`], which does not echo it. Read the value with [`Secret::expose`],
/// only where it is sent to the service it belongs to.
///
/// ```
/// use nanobot_util::Secret;
/// let key = Secret::new("sk-live-123");
/// assert_eq!(format!("{key:?} {key}"), "[REDACTED] [REDACTED]");
/// assert_eq!(key.expose(), "sk-live-123");
/// assert_eq!(serde_json::to_string(&key).unwrap(), r#""sk-live-123""#);
/// ```
#[derive(Clone)]
pub struct Secret(SecretString);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(SecretString::from(value.into()))
    }

    /// The secret value itself. Call only where the value is handed to the service it is for.
    pub fn expose(&self) -> &str {
        self.0.expose_secret()
    }

    /// Whether the secret is the empty string (Python nanobot writes `""` for "not set").
    pub fn is_empty(&self) -> bool {
        self.expose().is_empty()
    }
}

impl Default for Secret {
    fn default() -> Self {
        Self::new(String::new())
    }
}

impl PartialEq for Secret {
    fn eq(&self, other: &Self) -> bool {
        self.expose() == other.expose()
    }
}

impl Eq for Secret {}

impl Hash for Secret {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.expose().hash(state);
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Self::new(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Self::new(value)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.is_empty() { EMPTY_SECRET } else { REDACTED })
    }
}

impl Serialize for Secret {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.expose())
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: serde::Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        de.deserialize_option(SecretVisitor)
    }
}

/// Accepts a string (or `null`, read as empty) and refuses anything else without echoing it: serde's own
/// "invalid type" messages quote the value.
struct SecretVisitor;

/// Visitor methods that refuse every scalar but a string (and the extra ones named) with `$message`, never
/// quoting the value.
macro_rules! refuse_scalars_with {
    ($message:expr $(; $($name:ident: $ty:ty),*)?) => {
        refuse_scalars_with!(@each $message;
            visit_bool: bool, visit_i64: i64, visit_u64: u64, visit_i128: i128, visit_u128: u128,
            visit_f64: f64, visit_char: char, visit_bytes: &[u8] $($(, $name: $ty)*)?);
    };
    (@each $message:expr; $($name:ident: $ty:ty),*) => {
        $(fn $name<E: serde::de::Error>(self, _v: $ty) -> Result<Self::Value, E> {
            Err(E::custom($message))
        })*
    };
}

impl<'de> serde::de::Visitor<'de> for SecretVisitor {
    type Value = Secret;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string (a secret)")
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Secret, E> {
        Ok(Secret::new(v))
    }

    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Secret, E> {
        Ok(Secret::new(v))
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Secret, E> {
        Ok(Secret::default())
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Secret, E> {
        Ok(Secret::default())
    }

    fn visit_some<D: serde::Deserializer<'de>>(self, de: D) -> Result<Secret, D::Error> {
        de.deserialize_any(SecretVisitor)
    }

    refuse_scalars_with!(TYPE_ERROR);

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, _seq: A) -> Result<Secret, A::Error> {
        Err(serde::de::Error::custom(TYPE_ERROR))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, _map: A) -> Result<Secret, A::Error> {
        Err(serde::de::Error::custom(TYPE_ERROR))
    }

    fn visit_enum<A: serde::de::EnumAccess<'de>>(self, _data: A) -> Result<Secret, A::Error> {
        Err(serde::de::Error::custom(TYPE_ERROR))
    }
}

/// The error for a header or environment map (a [`SecretMap`]) that is not an object of strings.
pub const SECRET_MAP_ERROR: &str =
    "expected an object of names to strings; its values may hold secrets, so they are not shown";

/// An ordered string map whose values may hold credentials (HTTP headers, a child process's environment).
///
/// Keys are printed by `Debug`, values are not (but for a few header names that never carry one, such as
/// `Content-Type`). Order is kept as in the file. serde reads an object of strings (`null` as empty) and refuses
/// anything else without quoting it.
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

    refuse_scalars_with!(SECRET_MAP_ERROR; visit_str: &str);

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

/// Header names whose values `Debug` may show: they never carry a credential.
const HARMLESS: &[&str] = &["content-type", "user-agent", "accept-language"];

impl fmt::Debug for SecretMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut map = f.debug_map();
        for (k, v) in &self.0 {
            if HARMLESS.contains(&k.to_ascii_lowercase().as_str()) {
                map.entry(k, v);
            } else {
                map.entry(k, &RedactedValue);
            }
        }
        map.finish()
    }
}

struct RedactedValue;

impl fmt::Debug for RedactedValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_is_transparent_and_never_echoes_a_wrong_type() {
        let s: Secret = serde_json::from_str(r#""abc""#).unwrap();
        assert_eq!(s.expose(), "abc");
        let n: Secret = serde_json::from_str("null").unwrap();
        assert!(n.is_empty());
        assert_eq!(format!("{n}"), EMPTY_SECRET);
        let e = serde_json::from_str::<Secret>("123456789")
            .unwrap_err()
            .to_string();
        assert!(e.contains(TYPE_ERROR) && !e.contains("123456789"), "{e}");
        assert_eq!(Secret::new("a"), Secret::from("a"));
        assert_ne!(Secret::new("a"), Secret::new("b"));
    }

    #[test]
    fn secret_map_debug_shows_keys_and_harmless_values_only() {
        let m: SecretMap = [
            ("Authorization", "Bearer abc"),
            ("Content-Type", "application/json"),
        ]
        .into_iter()
        .collect();
        let dbg = format!("{m:?}");
        assert!(dbg.contains("Authorization") && !dbg.contains("abc"), "{dbg}");
        assert!(dbg.contains("application/json"), "{dbg}");
        let err = serde_json::from_str::<SecretMap>(r#"{"X-Key": 12345}"#)
            .unwrap_err()
            .to_string();
        assert!(!err.contains("12345"), "{err}");
        assert_eq!(
            serde_json::from_str::<SecretMap>("null").unwrap(),
            SecretMap::new()
        );
    }
}
