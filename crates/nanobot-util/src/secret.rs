//! [`Secret`]: the one type for API keys, bot tokens and passwords.

use std::fmt;
use std::hash::{Hash, Hasher};

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

macro_rules! refuse_secret {
    ($($name:ident: $ty:ty),* $(,)?) => {
        $(fn $name<E: serde::de::Error>(self, _v: $ty) -> Result<Self::Value, E> {
            Err(E::custom(TYPE_ERROR))
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

    refuse_secret!(
        visit_bool: bool,
        visit_i64: i64,
        visit_u64: u64,
        visit_i128: i128,
        visit_u128: u128,
        visit_f64: f64,
        visit_char: char,
        visit_bytes: &[u8],
    );

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
}
