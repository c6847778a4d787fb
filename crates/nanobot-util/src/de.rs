//! Lenient readers for settings written by hand (`deserialize_with`).

use serde::{Deserialize, Deserializer};

/// A list of strings that also takes numbers (`"allowFrom": [12345]`, read as `"12345"`) and `null` (an empty
/// list), as users write chat and user ids. Anything else is an error naming what was found.
///
/// ```
/// #[derive(serde::Deserialize)]
/// struct Block {
///     #[serde(deserialize_with = "nanobot_util::de::string_list")]
///     allow_from: Vec<String>,
/// }
/// let b: Block = serde_json::from_str(r#"{"allow_from": ["alice", 12345]}"#).unwrap();
/// assert_eq!(b.allow_from, ["alice", "12345"]);
/// let b: Block = serde_json::from_str(r#"{"allow_from": null}"#).unwrap();
/// assert!(b.allow_from.is_empty());
/// assert!(serde_json::from_str::<Block>(r#"{"allow_from": [true]}"#).is_err());
/// ```
pub fn string_list<'de, D: Deserializer<'de>>(de: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged, expecting = "a string or a number")]
    enum Item {
        Str(String),
        Int(i64),
        UInt(u64),
    }
    let items: Option<Vec<Item>> = Option::deserialize(de)?;
    Ok(items
        .unwrap_or_default()
        .into_iter()
        .map(|i| match i {
            Item::Str(s) => s,
            Item::Int(n) => n.to_string(),
            Item::UInt(n) => n.to_string(),
        })
        .collect())
}
