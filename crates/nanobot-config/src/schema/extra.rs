//! Keeping what the schema does not model, and small serde helpers.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::secret::RedactedJson;

/// Keys of a config object that this version does not model.
///
/// Every struct of the schema flattens one of these, so a key written by a newer (or older) nanobot survives a
/// load → save round trip. The loader reports them as warnings. `Debug` redacts the values.
#[derive(Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Extra(pub Map<String, Value>);

impl Extra {
    /// Whether there are no unmodelled keys.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The unmodelled keys, in file order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    /// The value of an unmodelled key.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.get(key)
    }
}

impl fmt::Debug for Extra {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.iter().map(|(k, v)| (k, RedactedJson(v))))
            .finish()
    }
}

/// Channel blocks that are kept as raw JSON (e-mail, Feishu, Matrix, DingTalk, plugins …), in file order.
///
/// They survive a round trip untouched; an adapter that needs one reads it with [`ChannelBlocks::get`] and
/// deserialises it itself. `Debug` redacts every leaf value (these blocks hold passwords and app secrets).
#[derive(Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ChannelBlocks(pub Map<String, Value>);

impl ChannelBlocks {
    /// The raw block of channel `name` (`"email"`, `"feishu"`, …), if present.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.0.get(name)
    }

    /// Channel names in file order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    /// Whether the raw block of `name` exists and has `"enabled": true`.
    pub fn is_enabled(&self, name: &str) -> bool {
        self.get(name)
            .and_then(|b| b.get("enabled"))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }
}

impl fmt::Debug for ChannelBlocks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.iter().map(|(k, v)| (k, RedactedJson(v))))
            .finish()
    }
}

pub(crate) use nanobot_util::de::string_list;
