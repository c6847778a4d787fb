//! `NANOBOT_…__…` environment overrides, read against the canonical (camelCase) JSON of the file's config: each
//! variable becomes a small document of its own, and figment layers them (`layers`).
//!
//! Each name is split at `__`, each level camelized and matched against the existing keys ignoring case and `_`
//! (so `NANOBOT_PROVIDERS__AZURE_OPENAI__API_KEY` reaches `providers.azureOpenai.apiKey`). The value is read as
//! the type already at that place: text for strings, `true`/`false` for booleans, a number for numbers, JSON for
//! lists and objects (an object is merged into what is there, by figment). Where nothing is there yet, JSON lists/objects are parsed and
//! anything else is text.

use std::borrow::Cow;

use nanobot_util::EnvMap;
use serde_json::{Map, Value};

use crate::doc::{JsonPath, Seg, camelize, find_key, join};
use crate::env_vars::{NESTED_DELIMITER, PREFIX, RESERVED};
use crate::{ConfigError, McpServerConfig, ProviderConfig};

/// One key set from the environment.
#[derive(Debug, Clone)]
pub(crate) struct EnvSet {
    pub(crate) path: JsonPath,
    pub(crate) var: String,
    /// The value before the override (`None` = the key did not exist).
    pub(crate) before: Option<Value>,
    /// The value the override produced: as read, then as typed in the final config (`record_typed`), so a
    /// save recognises it unchanged.
    pub(crate) after: Value,
}

/// What the environment changed, so that a save can leave the file's own values in place.
#[derive(Debug, Clone, Default)]
pub(crate) struct Overlay {
    pub(crate) sets: Vec<EnvSet>,
    /// Objects created only to hold an override (a provider that exists only in the environment), with their
    /// value in the final config once typed (`Null` until then).
    pub(crate) created: Vec<(JsonPath, Value)>,
    /// Variables whose name could not be used.
    pub(crate) ignored: Vec<(String, String)>,
    /// Variables that had no effect because the file sets their key (the file wins, as in 0.3.5), with the
    /// dotted field.
    pub(crate) shadowed: Vec<(String, String)>,
}

impl Overlay {
    /// The variable that set `path` or one of its parents, if any.
    pub(crate) fn var_for(&self, field: &str) -> Option<&str> {
        self.sets
            .iter()
            .rev()
            .find(|s| {
                let p = s.path.to_string();
                field == p || field.starts_with(&format!("{p}.")) || field.starts_with(&format!("{p}["))
            })
            .map(|s| s.var.as_str())
    }
}

/// Whether `name` is a config override (prefix matched case-insensitively, reserved names excluded).
pub(crate) fn is_override(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    upper.len() > PREFIX.len() && upper.starts_with(PREFIX) && !RESERVED.contains(&upper.as_str())
}

/// One variable's override: the variable and the document it sets (a single key, with its parents).
#[derive(Debug, Clone)]
pub(crate) struct VarDoc {
    pub(crate) var: String,
    pub(crate) doc: Value,
}

/// Reads every override in `env` against `target` (the canonical JSON of the config: the file typed over the
/// defaults, only read), typing each value by the key it lands on, and returns what each variable sets as a
/// document of its own: figment merges them (`layers`), nothing here does. A key that `file` (the file's own
/// JSON, any spelling) sets is left out and the variable recorded as shadowed: the file wins over the
/// environment, as in nanobot 0.3.5. An object-valued variable only fills the keys the file leaves out.
pub(crate) fn read(
    env: &EnvMap,
    target: &Value,
    file: &Value,
) -> Result<(Overlay, Vec<VarDoc>), ConfigError> {
    let mut overlay = Overlay::default();
    let mut docs = Vec::new();
    for (name, raw) in env.iter().filter(|(k, _)| is_override(k)) {
        let rest = &name[PREFIX.len()..];
        let segments: Vec<String> = rest
            .split(NESTED_DELIMITER)
            .map(|s| camelize(&s.to_ascii_lowercase()))
            .collect();
        if segments.iter().any(String::is_empty) {
            overlay.ignored.push((
                name.to_owned(),
                format!("empty level in the name (use `{NESTED_DELIMITER}` between keys)"),
            ));
            continue;
        }
        if let Some(doc) = read_one(target, file, name, raw, &segments, &mut overlay)? {
            docs.push(VarDoc {
                var: name.to_owned(),
                doc,
            });
        }
    }
    Ok((overlay, docs))
}

/// The child `key` of `cur`, borrowed from the target where the target has it.
fn child<'a>(cur: Cow<'a, Value>, key: &str) -> Option<Cow<'a, Value>> {
    match cur {
        Cow::Borrowed(v) => v.get(key).map(Cow::Borrowed),
        Cow::Owned(mut v) => v.as_object_mut()?.shift_remove(key).map(Cow::Owned),
    }
}

/// One variable: the document it sets, or `None` when the file shadows it.
fn read_one(
    target: &Value,
    file: &Value,
    var: &str,
    raw: &str,
    segments: &[String],
    overlay: &mut Overlay,
) -> Result<Option<Value>, ConfigError> {
    let origin = || format!("environment variable {var}");
    let not_an_object = |field: String| ConfigError::InvalidValue {
        field,
        origin: origin(),
        message: "is not an object, so it has no keys to set".into(),
        source: None,
    };
    let mut path = JsonPath::default();
    // The same place in the target (or, past its end, in the typed entry a new map entry starts from).
    let mut cur = Cow::Borrowed(target);
    // The same place in the file's own JSON, while the file has it.
    let mut in_file = Some(file);
    let (last, parents) = segments.split_last().ok_or_else(|| ConfigError::InvalidValue {
        field: String::new(),
        origin: origin(),
        message: "no key after the prefix".into(),
        source: None,
    })?;
    for seg in parents {
        let parent_field = path.to_string();
        let obj = cur
            .as_object()
            .ok_or_else(|| not_an_object(parent_field.clone()))?;
        let (key, next) = match find_key(obj, seg) {
            Some(k) => {
                let next = child(cur, &k);
                (k, next)
            }
            None => {
                let created = path.child_key(seg);
                if !overlay.created.iter().any(|(p, _)| *p == created) {
                    overlay.created.push((created, Value::Null));
                }
                (seg.clone(), Some(Cow::Owned(new_entry(&parent_field))))
            }
        };
        in_file = in_file
            .and_then(Value::as_object)
            .and_then(|o| find_key(o, &key).and_then(|k| o.get(&k)));
        path = path.child_key(&key);
        cur = next.unwrap_or(Cow::Owned(Value::Null));
    }
    let field_prefix = path.to_string();
    let obj = cur
        .as_object()
        .ok_or_else(|| not_an_object(field_prefix.clone()))?;
    let key = find_key(obj, last).unwrap_or_else(|| last.clone());
    let field = join(&field_prefix, &key);
    let before = obj.get(&key).cloned();
    let value = parse_as(raw, before.as_ref()).map_err(|message| ConfigError::InvalidValue {
        field: field.clone(),
        origin: origin(),
        message,
        source: None,
    })?;
    let value = spelled_like(value, before.as_ref());
    let file_value = in_file
        .and_then(Value::as_object)
        .and_then(|o| find_key(o, &key).and_then(|k| o.get(&k)));
    let value = match (file_value, value) {
        (None, v) => v,
        (Some(Value::Object(f)), Value::Object(mut v)) => {
            without_keys_of(&mut v, f);
            if v.is_empty() {
                overlay.shadowed.push((var.to_owned(), field));
                return Ok(None);
            }
            Value::Object(v)
        }
        (Some(_), _) => {
            overlay.shadowed.push((var.to_owned(), field));
            return Ok(None);
        }
    };
    let path = path.child_key(&key);
    let doc = path.0.iter().rev().fold(value.clone(), |inner, seg| match seg {
        Seg::Key(k) => Value::Object(Map::from_iter([(k.clone(), inner)])),
        Seg::Index(_) => inner,
    });
    overlay.sets.push(EnvSet {
        path,
        var: var.to_owned(),
        before,
        after: value,
    });
    Ok(Some(doc))
}

/// A new entry of the object at `parent`: a typed default for the maps of typed entries, else `{}`.
fn new_entry(parent: &str) -> Value {
    let typed = match parent {
        "providers" => serde_json::to_value(ProviderConfig::default()).ok(),
        "tools.mcpServers" => serde_json::to_value(McpServerConfig::default()).ok(),
        _ => None,
    };
    typed.unwrap_or_else(|| Value::Object(Map::new()))
}

/// Reads `raw` as the type of `existing`. The error message never contains the value.
fn parse_as(raw: &str, existing: Option<&Value>) -> Result<Value, String> {
    let trimmed = raw.trim();
    match existing {
        Some(Value::String(_)) => Ok(Value::String(raw.to_owned())),
        Some(Value::Bool(_)) => match trimmed.to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => Ok(Value::Bool(true)),
            "false" | "0" | "no" | "off" => Ok(Value::Bool(false)),
            _ => Err("expected a boolean (true/false)".into()),
        },
        Some(Value::Number(n)) => {
            let parsed = if n.is_f64() {
                trimmed
                    .parse::<f64>()
                    .ok()
                    .and_then(|f| serde_json::Number::from_f64(f).map(Value::Number))
            } else {
                trimmed
                    .parse::<u64>()
                    .map(Value::from)
                    .or_else(|_| trimmed.parse::<i64>().map(Value::from))
                    .ok()
                    .or_else(|| {
                        trimmed
                            .parse::<f64>()
                            .ok()
                            .and_then(serde_json::Number::from_f64)
                            .map(Value::Number)
                    })
            };
            parsed.ok_or_else(|| "expected a number".into())
        }
        Some(Value::Array(_)) => match serde_json::from_str::<Value>(trimmed) {
            Ok(v @ Value::Array(_)) => Ok(v),
            _ => Err("expected a JSON list, e.g. [\"a\",\"b\"]".into()),
        },
        Some(Value::Object(_)) => match serde_json::from_str::<Value>(trimmed) {
            Ok(v @ Value::Object(_)) => Ok(v),
            _ => Err("expected a JSON object".into()),
        },
        Some(Value::Null) | None => {
            if trimmed.starts_with('{') || trimmed.starts_with('[') {
                serde_json::from_str(trimmed).map_err(|e| format!("looks like JSON but does not parse: {e}"))
            } else {
                Ok(Value::String(raw.to_owned()))
            }
        }
    }
}

/// Drops from `value` every key `file` sets (any spelling), recursively: what is left is what the environment
/// may fill.
fn without_keys_of(value: &mut Map<String, Value>, file: &Map<String, Value>) {
    let keys: Vec<String> = value.keys().cloned().collect();
    for k in keys {
        let Some(fk) = find_key(file, &camelize(&k)).or_else(|| find_key(file, &k)) else {
            continue;
        };
        match (value.get_mut(&k), file.get(&fk)) {
            (Some(Value::Object(v)), Some(Value::Object(f))) => {
                without_keys_of(v, f);
                if v.is_empty() {
                    value.shift_remove(&k);
                }
            }
            _ => {
                value.shift_remove(&k);
            }
        }
    }
}

/// `value` with the keys of its objects spelled as in `like` where `like` has them (`allow_from` given for an
/// existing `allowFrom` becomes `allowFrom`), so figment's merge meets them as one key.
fn spelled_like(value: Value, like: Option<&Value>) -> Value {
    match (value, like) {
        (Value::Object(v), Some(Value::Object(l))) => Value::Object(
            v.into_iter()
                .map(|(k, inner)| {
                    let key = find_key(l, &camelize(&k)).unwrap_or(k);
                    let inner = spelled_like(inner, l.get(&key));
                    (key, inner)
                })
                .collect(),
        ),
        (v, _) => v,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn env(pairs: &[(&str, &str)]) -> EnvMap {
        pairs.iter().copied().collect()
    }

    /// The variables' documents, by variable.
    fn docs(d: &[VarDoc]) -> Vec<(&str, &Value)> {
        d.iter().map(|d| (d.var.as_str(), &d.doc)).collect()
    }

    #[test]
    fn typed_by_the_existing_value_each_variable_a_document_of_its_own() {
        let target = json!({"agents": {"defaults": {"model": "a", "maxTokens": 1, "temperature": 0.1}},
                           "channels": {"sendProgress": true, "telegram": {"allowFrom": []}}});
        let (o, d) = read(
            &env(&[
                ("NANOBOT_AGENTS__DEFAULTS__MODEL", "123"),
                ("NANOBOT_AGENTS__DEFAULTS__MAX_TOKENS", "4096"),
                ("NANOBOT_AGENTS__DEFAULTS__TEMPERATURE", "1"),
                ("NANOBOT_CHANNELS__SEND_PROGRESS", "false"),
                ("nanobot_channels__telegram__allow_from", "[\"42\"]"),
                ("NANOBOT_LOG", "debug"),
                ("OTHER", "x"),
            ]),
            &target,
            &json!({}),
        )
        .unwrap();
        assert_eq!(
            docs(&d),
            [
                (
                    "NANOBOT_AGENTS__DEFAULTS__MAX_TOKENS",
                    &json!({"agents": {"defaults": {"maxTokens": 4096}}})
                ),
                (
                    "NANOBOT_AGENTS__DEFAULTS__MODEL",
                    &json!({"agents": {"defaults": {"model": "123"}}})
                ),
                (
                    "NANOBOT_AGENTS__DEFAULTS__TEMPERATURE",
                    &json!({"agents": {"defaults": {"temperature": 1.0}}})
                ),
                (
                    "NANOBOT_CHANNELS__SEND_PROGRESS",
                    &json!({"channels": {"sendProgress": false}})
                ),
                (
                    "nanobot_channels__telegram__allow_from",
                    &json!({"channels": {"telegram": {"allowFrom": ["42"]}}})
                ),
            ]
        );
        assert_eq!(o.sets.len(), 5);
        assert_eq!(
            o.var_for("channels.telegram.allowFrom[0]"),
            Some("nanobot_channels__telegram__allow_from")
        );
    }

    #[test]
    fn a_new_map_entry_is_typed_by_its_kind_and_recorded_as_created_once() {
        let target = json!({"providers": {}});
        let (o, d) = read(
            &env(&[
                ("NANOBOT_PROVIDERS__MY_LLM__API_KEY", "12345"),
                ("NANOBOT_PROVIDERS__MY_LLM__EXTRA_HEADERS", r#"{"x-a": "b"}"#),
            ]),
            &target,
            &json!({}),
        )
        .unwrap();
        assert_eq!(
            docs(&d),
            [
                (
                    "NANOBOT_PROVIDERS__MY_LLM__API_KEY",
                    &json!({"providers": {"myLlm": {"apiKey": "12345"}}})
                ),
                (
                    "NANOBOT_PROVIDERS__MY_LLM__EXTRA_HEADERS",
                    &json!({"providers": {"myLlm": {"extraHeaders": {"x-a": "b"}}}})
                ),
            ]
        );
        assert_eq!(o.created.len(), 1);
    }

    #[test]
    fn bad_values_name_the_variable_not_the_value() {
        let target = json!({"gateway": {"port": 1}});
        let err = read(
            &env(&[("NANOBOT_GATEWAY__PORT", "secret-ish")]),
            &target,
            &json!({}),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("NANOBOT_GATEWAY__PORT") && err.contains("gateway.port"),
            "{err}"
        );
        assert!(!err.contains("secret-ish"), "{err}");
        let err = read(&env(&[("NANOBOT_GATEWAY__PORT__X", "1")]), &target, &json!({}))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("gateway.port") && err.contains("not an object"),
            "{err}"
        );
    }

    #[test]
    fn the_file_wins_and_object_values_fill_only_what_it_leaves_out_in_its_spelling() {
        let target = json!({"agents": {"defaults": {"model": "file-model", "maxTokens": 8192}},
                           "channels": {"telegram": {"enabled": false, "token": "t", "allowFrom": []}}});
        let file = json!({"agents": {"defaults": {"model": "file-model"}},
                          "channels": {"telegram": {"token": "t"}}});
        let (o, d) = read(
            &env(&[
                ("NANOBOT_AGENTS__DEFAULTS__MODEL", "env-model"),
                ("NANOBOT_AGENTS__DEFAULTS__MAX_TOKENS", "1234"),
                (
                    "NANOBOT_CHANNELS__TELEGRAM",
                    r#"{"enabled": true, "token": "env-token", "allow_from": ["7"]}"#,
                ),
            ]),
            &target,
            &file,
        )
        .unwrap();
        assert_eq!(
            docs(&d),
            [
                (
                    "NANOBOT_AGENTS__DEFAULTS__MAX_TOKENS",
                    &json!({"agents": {"defaults": {"maxTokens": 1234}}})
                ),
                (
                    "NANOBOT_CHANNELS__TELEGRAM",
                    &json!({"channels": {"telegram": {"enabled": true, "allowFrom": ["7"]}}})
                ),
            ]
        );
        assert_eq!(
            o.shadowed,
            [(
                "NANOBOT_AGENTS__DEFAULTS__MODEL".to_string(),
                "agents.defaults.model".to_string()
            )]
        );
    }
}
