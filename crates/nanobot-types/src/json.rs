//! Lenient JSON for tool-call arguments, and Python-`json.dumps`-style output.

use std::io;

use serde_json::Value;
use serde_json::ser::Formatter;

/// What became of a tool call's argument text.
#[derive(Debug, Clone, PartialEq)]
pub enum ParsedArguments {
    /// Valid JSON object as sent.
    Ok(Value),
    /// Not valid JSON, but repaired (as the Python nanobot does with `json_repair`).
    Repaired(Value),
    /// Could not be turned into an object; the message says why.
    Invalid(String),
}

/// Parses tool-call argument text: strict JSON first, then a lenient repair (trailing commas, single quotes,
/// code fences, truncated objects, raw newlines in strings, prose around the object). Empty text is `{}`.
/// Anything that does not end up as a JSON object is [`ParsedArguments::Invalid`], and so is text larger or
/// nested deeper than [`crate::json_limits`] allows (checked first, without recursion).
pub fn parse_arguments(raw: &str) -> ParsedArguments {
    if let Err(why) = crate::json_limits::check_argument_text(raw) {
        return ParsedArguments::Invalid(why);
    }
    let trimmed = raw.trim();
    if trimmed.is_empty() {
        return ParsedArguments::Ok(Value::Object(serde_json::Map::new()));
    }
    if let Ok(v) = serde_json::from_str::<Value>(trimmed) {
        return match v {
            Value::Object(_) => ParsedArguments::Ok(v),
            // Some models double-encode: "{\"a\":1}".
            Value::String(inner) => match serde_json::from_str::<Value>(&inner) {
                Ok(o @ Value::Object(_)) => ParsedArguments::Repaired(o),
                _ => {
                    ParsedArguments::Invalid(format!("arguments are a JSON string, not an object: {inner:?}"))
                }
            },
            other => ParsedArguments::Invalid(format!("arguments must be a JSON object, got `{other}`")),
        };
    }
    // Some chat templates HTML-escape the JSON itself (`{&quot;path&quot;: …}`).
    if trimmed.contains("&quot;") || trimmed.contains("&#34;") || trimmed.contains("&#x22;") {
        let decoded = html_escape::decode_html_entities(trimmed);
        if let ParsedArguments::Ok(v) | ParsedArguments::Repaired(v) = parse_arguments(&decoded) {
            return ParsedArguments::Repaired(v);
        }
    }
    let escaped = escape_controls_in_strings(trimmed);
    if let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(&escaped) {
        return ParsedArguments::Repaired(v);
    }
    let options = llm_json::RepairOptions {
        ensure_ascii: false,
        ..llm_json::RepairOptions::default()
    };
    match llm_json::loads(&escaped, &options) {
        Ok(v @ Value::Object(_)) => ParsedArguments::Repaired(v),
        Ok(other) => ParsedArguments::Invalid(format!(
            "arguments are not a JSON object even after repair: `{other}`"
        )),
        Err(e) => ParsedArguments::Invalid(format!(
            "arguments are not valid JSON and could not be repaired: {e}"
        )),
    }
}

/// Escapes raw control characters (newlines, tabs) inside JSON string literals, which local models emit.
fn escape_controls_in_strings(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    let (mut in_string, mut escaped) = (false, false);
    for c in s.chars() {
        if in_string {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            } else if (c as u32) < 0x20 {
                match c {
                    '\n' => out.push_str("\\n"),
                    '\r' => out.push_str("\\r"),
                    '\t' => out.push_str("\\t"),
                    other => out.push_str(&format!("\\u{:04x}", other as u32)),
                }
                continue;
            }
        } else if c == '"' {
            in_string = true;
        }
        out.push(c);
    }
    out
}

/// A serde_json formatter that writes like Python's `json.dumps(…, ensure_ascii=False)`: `", "` between items
/// and `": "` after keys, everything on one line.
struct PythonFormatter;

impl Formatter for PythonFormatter {
    fn begin_array_value<W: ?Sized + io::Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        if first { Ok(()) } else { w.write_all(b", ") }
    }

    fn begin_object_key<W: ?Sized + io::Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        if first { Ok(()) } else { w.write_all(b", ") }
    }

    fn begin_object_value<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        w.write_all(b": ")
    }
}

/// Serialises a value the way Python's `json.dumps(value, ensure_ascii=False)` does, so tool-call arguments in
/// session files look exactly like the Python nanobot's.
pub fn to_python_json(value: &Value) -> String {
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, PythonFormatter);
    match serde::Serialize::serialize(value, &mut ser) {
        Ok(()) => {
            String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
        }
        Err(_) => value.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn python_style_output() {
        assert_eq!(
            to_python_json(&json!({"a": [1, 2], "b": {"c": "é"}})),
            r#"{"a": [1, 2], "b": {"c": "é"}}"#
        );
        assert_eq!(to_python_json(&json!({})), "{}");
    }

    #[test]
    fn deeply_nested_arguments_are_refused_not_overflowing() {
        // Broken JSON that strict parsing rejects goes to the repairer, which recurses: the depth check must
        // come first. Run on a small stack so a recursive walk would show up as a crash here.
        let handle = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(|| {
                for text in [
                    format!("{{\"a\": {}", "[".repeat(200_000)),
                    format!("{{\"a\": {}1{}}}", "[".repeat(100_000), "]".repeat(100_000)),
                    format!("{{'a': {}", "{'b': ".repeat(50_000)),
                ] {
                    match parse_arguments(&text) {
                        ParsedArguments::Invalid(why) => assert!(why.contains("levels"), "{why}"),
                        other => panic!("accepted: {other:?}"),
                    }
                }
            })
            .unwrap();
        handle.join().unwrap();
    }

    #[test]
    fn repairs_common_breakage() {
        for raw in [
            r#"{"path": "a.txt",}"#,
            r#"{'path': 'a.txt'}"#,
            "```json\n{\"path\": \"a.txt\"}\n```",
            r#"{"path": "a.txt""#,
            "Sure! {\"path\": \"a.txt\"} done",
        ] {
            match parse_arguments(raw) {
                ParsedArguments::Repaired(v) => assert_eq!(v, json!({"path": "a.txt"}), "{raw}"),
                other => panic!("{raw}: {other:?}"),
            }
        }
    }

    #[test]
    fn raw_newlines_inside_strings_survive() {
        match parse_arguments("{\"content\": \"line1\nline2\"}") {
            ParsedArguments::Repaired(v) => assert_eq!(v, json!({"content": "line1\nline2"})),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn non_objects_are_invalid() {
        assert!(matches!(parse_arguments("[1, 2]"), ParsedArguments::Invalid(_)));
        assert!(matches!(parse_arguments("42"), ParsedArguments::Invalid(_)));
        assert!(matches!(parse_arguments("not json"), ParsedArguments::Invalid(_)));
        assert_eq!(parse_arguments("  "), ParsedArguments::Ok(json!({})));
    }
}
