//! The harness behind the `tool_arguments` fuzz target (`fuzz/`, run with `cargo fuzz`), public so that a
//! normal test can run the same code on generated inputs without a nightly compiler.
//!
//! It takes arbitrary bytes as the argument text of a tool call and drives it through what the agent does
//! with it: lenient parsing ([`nanobot_types::json::parse_arguments`]), then casting and validation
//! against a schema with nested objects, arrays and every scalar type ([`crate::ArgsSchema::prepare`]). The
//! property is that it returns: no panic, no stack overflow, no unbounded allocation.

use std::sync::OnceLock;

use nanobot_types::json::{ParsedArguments, parse_arguments};
use serde_json::{Value, json};

use crate::ArgsSchema;

fn schema() -> &'static ArgsSchema {
    static SCHEMA: OnceLock<ArgsSchema> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        ArgsSchema::new(json!({
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "count": {"type": "integer", "minimum": 0, "maximum": 600},
                "ratio": {"type": "number"},
                "flag": {"type": "boolean"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "nested": {
                    "type": "object",
                    "properties": {
                        "deep": {"type": "array", "items": {"type": "object", "properties": {"n": {"type": "integer"}}}},
                        "mode": {"type": "string", "enum": ["a", "b"]}
                    }
                }
            },
            "required": ["path"]
        }))
    })
}

/// Runs one input through parsing, casting and validation. Returns what parsing made of it (for tests).
pub fn tool_arguments(data: &[u8]) -> Option<Value> {
    let text = String::from_utf8_lossy(data);
    let value = match parse_arguments(&text) {
        ParsedArguments::Ok(v) | ParsedArguments::Repaired(v) => v,
        ParsedArguments::Invalid(_) => return None,
    };
    let _ = schema().prepare(value.clone());
    Some(value)
}
