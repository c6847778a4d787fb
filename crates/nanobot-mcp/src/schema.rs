//! Normalising MCP tool schemas so that strict providers (OpenAI `strict`, Gemini, ...) accept them.
//!
//! MCP servers send whatever JSON Schema their SDK produced. Providers are pickier: the top level
//! must be an object with `properties`, nullable values must not use `type: [T, "null"]` or
//! `anyOf: [T, {type: null}]`, and meta keywords such as `$schema` are refused. This keeps the
//! meaning of the schema and only rewrites those shapes.

use serde_json::{Map, Value};

/// Keywords some providers reject and that carry no meaning for argument validation.
const DROPPED_KEYWORDS: &[&str] = &["$schema", "$id", "$comment"];

/// Returns a provider-friendly copy of `schema`. A non-object input becomes an empty object schema.
pub fn normalize_schema(schema: &Value) -> Value {
    let Value::Object(map) = schema else {
        return empty_object_schema();
    };
    let mut top = normalize_node(map);
    // The top level of a tool's parameters is always an object.
    if top.get("type").and_then(Value::as_str) != Some("object") {
        top.insert("type".into(), Value::String("object".into()));
    }
    ensure_object_shape(&mut top);
    Value::Object(top)
}

/// `{"type":"object","properties":{}}`
pub fn empty_object_schema() -> Value {
    serde_json::json!({"type": "object", "properties": {}})
}

fn normalize_node(input: &Map<String, Value>) -> Map<String, Value> {
    let mut node: Map<String, Value> = input
        .iter()
        .filter(|(k, _)| !DROPPED_KEYWORDS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();

    // `type: ["string", "null"]` -> `type: "string", nullable: true`
    if let Some(Value::Array(types)) = node.get("type") {
        let non_null: Vec<&Value> = types.iter().filter(|t| t.as_str() != Some("null")).collect();
        let had_null = non_null.len() != types.len();
        if non_null.len() == 1 {
            let only = non_null[0].clone();
            node.insert("type".into(), only);
            if had_null {
                node.insert("nullable".into(), Value::Bool(true));
            }
        }
    }

    // `anyOf: [{...}, {"type":"null"}]` -> the non-null branch, nullable.
    for key in ["anyOf", "oneOf"] {
        if let Some(branch) = node.get(key).and_then(nullable_branch) {
            node.remove(key);
            for (k, v) in branch {
                node.entry(k).or_insert(v);
            }
            node.insert("nullable".into(), Value::Bool(true));
            break;
        }
    }

    // Recurse into the places sub-schemas live.
    if let Some(Value::Object(props)) = node.get_mut("properties") {
        for value in props.values_mut() {
            if let Value::Object(child) = value {
                *value = Value::Object(normalize_node(child));
            }
        }
    }
    for key in ["items", "additionalProperties", "not"] {
        if let Some(Value::Object(child)) = node.get(key) {
            let child = normalize_node(child);
            node.insert(key.into(), Value::Object(child));
        }
    }
    for key in ["anyOf", "oneOf", "allOf", "prefixItems"] {
        if let Some(Value::Array(items)) = node.get_mut(key) {
            for value in items.iter_mut() {
                if let Value::Object(child) = value {
                    *value = Value::Object(normalize_node(child));
                }
            }
        }
    }
    for key in ["$defs", "definitions"] {
        if let Some(Value::Object(defs)) = node.get_mut(key) {
            for value in defs.values_mut() {
                if let Value::Object(child) = value {
                    *value = Value::Object(normalize_node(child));
                }
            }
        }
    }

    if node.get("type").and_then(Value::as_str) == Some("object") {
        ensure_object_shape(&mut node);
    }
    node
}

/// Objects always carry `properties` (and `required` only when it is a list).
fn ensure_object_shape(node: &mut Map<String, Value>) {
    if !matches!(node.get("properties"), Some(Value::Object(_))) {
        node.insert("properties".into(), Value::Object(Map::new()));
    }
    if node.get("required").is_some_and(|r| !r.is_array()) {
        node.remove("required");
    }
}

/// If `options` is `[X, {"type":"null"}]` (in any order), returns X's keywords.
fn nullable_branch(options: &Value) -> Option<Map<String, Value>> {
    let Value::Array(items) = options else {
        return None;
    };
    if items.len() != 2 {
        return None;
    }
    let is_null = |v: &Value| v.get("type").and_then(Value::as_str) == Some("null");
    let mut non_null = items.iter().filter(|v| !is_null(v));
    let branch = non_null.next()?;
    if non_null.next().is_some() || !items.iter().any(is_null) {
        return None;
    }
    branch.as_object().cloned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn missing_or_bad_schema_becomes_an_empty_object() {
        assert_eq!(normalize_schema(&Value::Null), empty_object_schema());
        assert_eq!(
            normalize_schema(&json!({"type": "object"})),
            json!({"type": "object", "properties": {}})
        );
    }

    #[test]
    fn meta_keywords_are_dropped_and_meaning_kept() {
        let raw = json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {"message": {"type": "string", "description": "Message to echo"}},
            "required": ["message"],
            "additionalProperties": false
        });
        let out = normalize_schema(&raw);
        assert_eq!(
            out,
            json!({
                "type": "object",
                "properties": {"message": {"type": "string", "description": "Message to echo"}},
                "required": ["message"],
                "additionalProperties": false
            })
        );
    }

    #[test]
    fn nullable_shapes_are_flattened_recursively() {
        let raw = json!({
            "type": "object",
            "properties": {
                "a": {"type": ["integer", "null"]},
                "b": {"anyOf": [{"type": "null"}, {"type": "string", "minLength": 1}], "description": "d"},
                "c": {"type": "array", "items": {"type": ["number", "null"]}},
                "d": {"type": "object"},
                "e": {"anyOf": [{"type": "string"}, {"type": "integer"}]}
            }
        });
        let out = normalize_schema(&raw);
        assert_eq!(
            out["properties"]["a"],
            json!({"type": "integer", "nullable": true})
        );
        assert_eq!(
            out["properties"]["b"],
            json!({"type": "string", "minLength": 1, "description": "d", "nullable": true})
        );
        assert_eq!(
            out["properties"]["c"]["items"],
            json!({"type": "number", "nullable": true})
        );
        assert_eq!(
            out["properties"]["d"],
            json!({"type": "object", "properties": {}})
        );
        // A real union is left alone.
        assert_eq!(
            out["properties"]["e"],
            json!({"anyOf": [{"type": "string"}, {"type": "integer"}]})
        );
    }
}
