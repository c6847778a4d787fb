//! Small helpers for walking and editing a JSON document by path.

use std::fmt;

use serde_json::{Map, Value};

/// One step of a path into a JSON document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Seg {
    Key(String),
    Index(usize),
}

/// A path into a JSON document, printed dotted: `tools.mcpServers.fs.args[0]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct JsonPath(pub(crate) Vec<Seg>);

impl JsonPath {
    pub(crate) fn child_key(&self, key: &str) -> Self {
        let mut p = self.clone();
        p.0.push(Seg::Key(key.to_owned()));
        p
    }

    pub(crate) fn child_index(&self, index: usize) -> Self {
        let mut p = self.clone();
        p.0.push(Seg::Index(index));
        p
    }
}

impl fmt::Display for JsonPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for seg in &self.0 {
            match seg {
                Seg::Key(k) => {
                    if !first {
                        f.write_str(".")?;
                    }
                    f.write_str(k)?;
                }
                Seg::Index(i) => write!(f, "[{i}]")?,
            }
            first = false;
        }
        Ok(())
    }
}

/// Joins a dotted prefix and a key.
pub(crate) fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_owned()
    } else {
        format!("{prefix}.{key}")
    }
}

/// `snake_case` / `SCREAMING_SNAKE` → `camelCase`; already camelCase input is returned unchanged.
pub(crate) fn camelize(s: &str) -> String {
    if !s.contains('_') {
        return s.to_owned();
    }
    let mut out = String::with_capacity(s.len());
    let mut upper_next = false;
    for (i, ch) in s.chars().enumerate() {
        if ch == '_' {
            upper_next = i > 0 && !out.is_empty();
        } else if upper_next {
            out.extend(ch.to_uppercase());
            upper_next = false;
        } else {
            out.extend(ch.to_lowercase());
        }
    }
    out
}

/// The key of `map` that spells `wanted` — exactly, or ignoring case, `_` and `-`.
pub(crate) fn find_key(map: &Map<String, Value>, wanted: &str) -> Option<String> {
    if map.contains_key(wanted) {
        return Some(wanted.to_owned());
    }
    let norm = crate::normalize_name(wanted);
    map.keys().find(|k| crate::normalize_name(k) == norm).cloned()
}

pub(crate) fn get<'a>(root: &'a Value, path: &JsonPath) -> Option<&'a Value> {
    let mut cur = root;
    for seg in &path.0 {
        cur = match seg {
            Seg::Key(k) => cur.as_object()?.get(k)?,
            Seg::Index(i) => cur.as_array()?.get(*i)?,
        };
    }
    Some(cur)
}

pub(crate) fn get_mut<'a>(root: &'a mut Value, path: &JsonPath) -> Option<&'a mut Value> {
    let mut cur = root;
    for seg in &path.0 {
        cur = match seg {
            Seg::Key(k) => cur.as_object_mut()?.get_mut(k)?,
            Seg::Index(i) => cur.as_array_mut()?.get_mut(*i)?,
        };
    }
    Some(cur)
}

/// Sets the value at `path` (its parent must exist); returns whether it was set.
pub(crate) fn set(root: &mut Value, path: &JsonPath, value: Value) -> bool {
    match get_mut(root, path) {
        Some(slot) => {
            *slot = value;
            true
        }
        None => {
            let Some((Seg::Key(last), parent)) = path.0.split_last() else {
                return false;
            };
            match get_mut(root, &JsonPath(parent.to_vec())).and_then(Value::as_object_mut) {
                Some(obj) => {
                    obj.insert(last.clone(), value);
                    true
                }
                None => false,
            }
        }
    }
}

/// Removes the object key at `path`.
pub(crate) fn remove(root: &mut Value, path: &JsonPath) {
    if let Some((Seg::Key(last), parent)) = path.0.split_last()
        && let Some(obj) = get_mut(root, &JsonPath(parent.to_vec())).and_then(Value::as_object_mut)
    {
        obj.shift_remove(last);
    }
}

/// Maps a path written with the file's spellings (snake_case keys) onto the canonical document, where struct
/// fields are camelCase and map keys are as written.
pub(crate) fn canonical_path(canon: &Value, raw: &JsonPath) -> Option<JsonPath> {
    let mut out = JsonPath::default();
    let mut cur = canon;
    for seg in &raw.0 {
        match seg {
            Seg::Key(k) => {
                let obj = cur.as_object()?;
                let key = if obj.contains_key(k) {
                    k.clone()
                } else {
                    find_key(obj, &camelize(k))?
                };
                cur = obj.get(&key)?;
                out.0.push(Seg::Key(key));
            }
            Seg::Index(i) => {
                cur = cur.as_array()?.get(*i)?;
                out.0.push(Seg::Index(*i));
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn camelize_handles_snake_and_screaming() {
        assert_eq!(camelize("max_tokens"), "maxTokens");
        assert_eq!(camelize("MAX_TOKENS"), "maxTokens");
        assert_eq!(camelize("AZURE_OPENAI"), "azureOpenai");
        assert_eq!(camelize("maxTokens"), "maxTokens");
        assert_eq!(camelize("interval_h"), "intervalH");
    }

    #[test]
    fn path_display_and_edit() {
        let mut v = json!({"a": {"b": [1, {"c": 2}]}});
        let p = JsonPath::default()
            .child_key("a")
            .child_key("b")
            .child_index(1)
            .child_key("c");
        assert_eq!(p.to_string(), "a.b[1].c");
        assert_eq!(get(&v, &p), Some(&json!(2)));
        assert!(set(&mut v, &p, json!(3)));
        assert!(set(
            &mut v,
            &JsonPath::default().child_key("a").child_key("new"),
            json!(true)
        ));
        remove(&mut v, &JsonPath::default().child_key("a").child_key("b"));
        assert_eq!(v, json!({"a": {"new": true}}));
    }

    #[test]
    fn canonical_path_follows_camel_fields() {
        let canon = json!({"agents": {"defaults": {"maxTokens": 1}}});
        let raw = JsonPath::default()
            .child_key("agents")
            .child_key("defaults")
            .child_key("max_tokens");
        assert_eq!(
            canonical_path(&canon, &raw).unwrap().to_string(),
            "agents.defaults.maxTokens"
        );
    }
}
