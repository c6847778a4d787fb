//! Values that must never reach a log: [`Secret`] and [`SecretMap`] (the one shared type of each, from
//! `nanobot-util`), and the redacted `Debug` of blocks the schema does not model.

use std::fmt;

pub use nanobot_util::secret::{EMPTY_SECRET, REDACTED, Secret, SecretMap};

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
    fn non_empty_filters_blank_keys() {
        assert!(Some(Secret::new("")).non_empty().is_none());
        assert!(None::<Secret>.non_empty().is_none());
        assert_eq!(Some(Secret::new("k")).non_empty().map(Secret::expose), Some("k"));
    }
}
