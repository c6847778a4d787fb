//! Size and depth limits for JSON that arrives from outside (tool-call arguments from the model, request
//! bodies), checked *before* anything recursive touches it.
//!
//! serde_json already stops at 128 levels when it parses, but the lenient repair of tool arguments, schema
//! casting and validation, and dropping a [`Value`] all recurse over the nesting. These checks are iterative
//! (no recursion, constant stack), so no input can overflow the stack on its way in.

use serde_json::Value;

/// Deepest nesting of arrays and objects accepted in tool-call arguments. Real tool arguments nest a few
/// levels; 64 leaves ample room and keeps every recursive walk shallow.
pub const MAX_ARGUMENT_DEPTH: usize = 64;

/// Largest tool-call argument text accepted (bytes). A `write_file` of a large file fits; more is refused
/// with a message the model can act on.
pub const MAX_ARGUMENT_BYTES: usize = 4 * 1024 * 1024;

/// The deepest nesting of `[`/`{` in JSON-like `text`, counting brackets outside double-quoted strings.
/// Over-counts text that is not JSON (single-quoted strings with brackets), which only makes a check stricter.
/// Stops counting once `stop_at` is exceeded.
pub fn text_depth(text: &str, stop_at: usize) -> usize {
    let (mut depth, mut max) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for b in text.bytes() {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    max = depth;
                    if max > stop_at {
                        return max;
                    }
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

/// The nesting depth of `value` (a scalar is 0, `[]` and `{}` are 1), walked without recursion.
pub fn value_depth(value: &Value) -> usize {
    let mut max = 0;
    let mut stack: Vec<(&Value, usize)> = vec![(value, 0)];
    while let Some((v, d)) = stack.pop() {
        match v {
            Value::Array(items) => {
                max = max.max(d + 1);
                stack.extend(items.iter().map(|i| (i, d + 1)));
            }
            Value::Object(map) => {
                max = max.max(d + 1);
                stack.extend(map.values().map(|i| (i, d + 1)));
            }
            _ => {}
        }
    }
    max
}

/// Why tool-call argument text is refused before parsing, if it is: too large or nested too deep.
pub fn check_argument_text(text: &str) -> Result<(), String> {
    if text.len() > MAX_ARGUMENT_BYTES {
        return Err(format!(
            "arguments are {} bytes; the limit is {MAX_ARGUMENT_BYTES}",
            text.len()
        ));
    }
    if text_depth(text, MAX_ARGUMENT_DEPTH) > MAX_ARGUMENT_DEPTH {
        return Err(format!(
            "arguments are nested deeper than {MAX_ARGUMENT_DEPTH} levels"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_counts_brackets_outside_strings_only() {
        assert_eq!(text_depth(r#"{"a": [1, {"b": "[[[[" }]}"#, 100), 3);
        assert_eq!(text_depth(r#"{"a": "\"[[[" }"#, 100), 1);
        assert_eq!(text_depth("", 100), 0);
        let deep = "[".repeat(1_000_000);
        assert_eq!(text_depth(&deep, 64), 65);
    }

    #[test]
    fn value_depth_is_iterative() {
        assert_eq!(value_depth(&serde_json::json!(1)), 0);
        assert_eq!(value_depth(&serde_json::json!({"a": [1, {"b": []}]})), 4);
    }

    #[test]
    fn oversized_and_deep_text_is_refused_with_a_reason() {
        assert!(
            check_argument_text(&"[".repeat(65))
                .unwrap_err()
                .contains("64 levels")
        );
        assert!(check_argument_text(&"[".repeat(64)).is_ok());
        let big = format!("{{\"a\": \"{}\"}}", "x".repeat(MAX_ARGUMENT_BYTES));
        assert!(check_argument_text(&big).unwrap_err().contains("bytes"));
    }
}
