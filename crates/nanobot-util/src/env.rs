//! [`EnvMap`]: the environment a library is handed instead of reading the process.

use std::collections::BTreeMap;
use std::fmt;

/// Environment variables, passed in by a binary (`EnvMap::from_iter(std::env::vars())`) or built from pairs in
/// a test. Libraries never read the process environment; they take one of these.
///
/// `Debug` lists the variables' names only: their values include API keys and tokens.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct EnvMap(BTreeMap<String, String>);

impl EnvMap {
    /// An empty environment.
    pub fn new() -> Self {
        Self::default()
    }

    /// The value of `name`, when set.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    /// The value of `name` when set and not blank.
    pub fn non_empty(&self, name: &str) -> Option<&str> {
        self.get(name).filter(|v| !v.trim().is_empty())
    }

    /// Whether `name` is set.
    pub fn contains(&self, name: &str) -> bool {
        self.0.contains_key(name)
    }

    /// Sets `name` (in this map only; the process is never touched).
    pub fn insert(&mut self, name: impl Into<String>, value: impl Into<String>) -> Option<String> {
        self.0.insert(name.into(), value.into())
    }

    /// Unsets `name` (in this map only), returning its value.
    pub fn remove(&mut self, name: &str) -> Option<String> {
        self.0.remove(name)
    }

    /// The variables in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// The variables as an ordered map.
    pub fn as_map(&self) -> &BTreeMap<String, String> {
        &self.0
    }

    /// Number of variables.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for EnvMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for EnvMap {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        Self(iter.into_iter().map(|(k, v)| (k.into(), v.into())).collect())
    }
}

impl IntoIterator for EnvMap {
    type Item = (String, String);
    type IntoIter = std::collections::btree_map::IntoIter<String, String>;

    /// The variables in name order (for `Command::envs`, say).
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<'a> IntoIterator for &'a EnvMap {
    type Item = (&'a String, &'a String);
    type IntoIter = std::collections::btree_map::Iter<'a, String, String>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl<K: Into<String>, V: Into<String>> Extend<(K, V)> for EnvMap {
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, iter: I) {
        self.0.extend(iter.into_iter().map(|(k, v)| (k.into(), v.into())));
    }
}

impl From<BTreeMap<String, String>> for EnvMap {
    fn from(map: BTreeMap<String, String>) -> Self {
        Self(map)
    }
}

impl From<std::collections::HashMap<String, String>> for EnvMap {
    fn from(map: std::collections::HashMap<String, String>) -> Self {
        map.into_iter().collect()
    }
}

impl From<EnvMap> for BTreeMap<String, String> {
    fn from(env: EnvMap) -> Self {
        env.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_names_never_values() {
        let env = EnvMap::from_iter([("OPENAI_API_KEY", "sk-secret"), ("HOME", "/home/u")]);
        let dbg = format!("{env:?}");
        assert_eq!(dbg, r#"{"HOME", "OPENAI_API_KEY"}"#);
        assert_eq!(env.get("OPENAI_API_KEY"), Some("sk-secret"));
        assert_eq!(EnvMap::from_iter([("X", "  ")]).non_empty("X"), None);
    }
}
