//! Reading tool calls that a model wrote as text instead of native `tool_calls`, in the forms local servers and
//! models emit:
//!
//! - Hermes / Qwen: `<tool_call>{"name": …, "arguments": {…}}</tool_call>` (one or more);
//! - llama.cpp's own form: `functions.NAME: {…}` (an index such as `functions.NAME:0` is allowed);
//! - Mistral: `[TOOL_CALLS] [{"name": …, "arguments": {…}}]` and `[TOOL_CALLS]NAME[ARGS]{…}`;
//! - Llama 3.x: `<|python_tag|>{"name": …, "parameters": {…}}` (several separated by `;`), `<function=NAME>{…}
//!   </function>`, or an answer that is nothing but such a JSON object (optionally in a code fence).
//!
//! A call counts only when its name is one of the tools offered, so prose that merely looks like JSON stays text.
//! HTML-escaped JSON (`{&quot;path&quot;: …}`), which some chat templates produce, is decoded first.

use std::borrow::Cow;

use serde_json::Value;

use crate::json::{ParsedArguments, parse_arguments};

/// Markers that open a tool-call region, whatever tools are offered.
pub(crate) const FIXED_MARKERS: [&str; 4] = ["<tool_call>", "<|python_tag|>", "[TOOL_CALLS]", "<function="];

/// One call read from text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TextCall {
    /// Tool name.
    pub(crate) name: String,
    /// Arguments as JSON text.
    pub(crate) arguments: String,
}

/// The calls in `region` (text that starts at a marker, or a whole answer that starts with `{` or a code fence)
/// and the text left after them; `None` when the region holds no call to an offered tool.
pub(crate) fn parse_region(region: &str, tools: &[String]) -> Option<(Vec<TextCall>, String)> {
    let decoded = decode_if_escaped(region);
    let mut rest: &str = &decoded;
    let mut calls = Vec::new();
    loop {
        rest = rest.trim_start_matches(|c: char| c.is_whitespace() || c == ';' || c == ',');
        if rest.is_empty() {
            break;
        }
        let Some((found, after)) = one(rest, tools) else {
            break;
        };
        if found.is_empty() {
            break;
        }
        calls.extend(found);
        rest = after;
    }
    if calls.is_empty() {
        return None;
    }
    let leftover = strip_special_tokens(rest).trim().to_owned();
    Some((calls, leftover))
}

/// True when `text` contains a tool call written as text to one of `tools`, or the opening of one that does not
/// parse (cut off by the length limit, malformed): used to keep such text out of a final answer.
pub fn contains_text_tool_call(text: &str, tools: &[String]) -> bool {
    let t = text.trim_start();
    if (t.starts_with('{') || t.starts_with("```")) && parse_region(t, tools).is_some() {
        return true;
    }
    markers(tools)
        .iter()
        .filter_map(|m| text.find(m.as_str()))
        .any(|at| parse_region(&text[at..], tools).is_some())
        || opens_a_call(text, tools)
}

/// Whether `text` holds a marker that opens a call, parsable or not: one of the fixed markers (special tokens no
/// prose writes), or `functions.NAME` of an offered tool followed by `:` (prose naming the tool is not a call).
fn opens_a_call(text: &str, tools: &[String]) -> bool {
    FIXED_MARKERS.iter().any(|m| text.contains(m))
        || tools.iter().any(|t| {
            let marker = format!("functions.{t}");
            text.match_indices(marker.as_str())
                .any(|(at, _)| text[at + marker.len()..].trim_start().starts_with(':'))
        })
}

/// Every marker for these tools: the fixed ones and `functions.NAME` per tool.
pub(crate) fn markers(tools: &[String]) -> Vec<String> {
    FIXED_MARKERS
        .iter()
        .map(|m| (*m).to_owned())
        .chain(tools.iter().map(|t| format!("functions.{t}")))
        .collect()
}

/// Reads the calls at the start of `s`; returns them and what follows.
fn one<'a>(s: &'a str, tools: &[String]) -> Option<(Vec<TextCall>, &'a str)> {
    if let Some(after) = s.strip_prefix("<tool_call>") {
        let (body, rest) = match after.find("</tool_call>") {
            Some(end) => (&after[..end], &after[end + "</tool_call>".len()..]),
            None => (after, ""),
        };
        return Some((calls_in_json_text(body, tools), rest));
    }
    if let Some(after) = s.strip_prefix("<|python_tag|>") {
        return Some(json_sequence(after, tools));
    }
    if let Some(after) = s.strip_prefix("[TOOL_CALLS]") {
        let after = after.trim_start();
        if after.starts_with('[') || after.starts_with('{') {
            return Some(json_sequence(after, tools));
        }
        // `NAME[ARGS]{…}` (Mistral's newer template), optionally `NAME[CALL_ID]id[ARGS]{…}`.
        let name_end = after.find(['[', '{'])?;
        let name = after[..name_end].trim();
        let mut rest = &after[name_end..];
        if let Some(r) = rest.strip_prefix("[CALL_ID]") {
            rest = &r[r.find('[').unwrap_or(r.len())..];
        }
        let rest = rest.strip_prefix("[ARGS]").unwrap_or(rest);
        let (args, rest) = take_json(rest)?;
        return Some((call(name, &args, tools).into_iter().collect(), rest));
    }
    if let Some(after) = s.strip_prefix("<function=") {
        let close = after.find('>')?;
        let name = after[..close].trim();
        let body = &after[close + 1..];
        let (body, rest) = match body.find("</function>") {
            Some(end) => (&body[..end], &body[end + "</function>".len()..]),
            None => (body, ""),
        };
        let args = arguments_value(body)?;
        return Some((call(name, &args, tools).into_iter().collect(), rest));
    }
    if let Some(after) = s.strip_prefix("functions.") {
        let name_end = after.find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-' || c == '.'))?;
        let name = &after[..name_end];
        let mut rest = after[name_end..].trim_start();
        rest = rest.strip_prefix(':').unwrap_or(rest);
        rest = rest.trim_start_matches(|c: char| c.is_ascii_digit());
        rest = rest.strip_prefix("<|tool_call_argument_begin|>").unwrap_or(rest);
        rest = rest.trim_start().strip_prefix(':').unwrap_or(rest);
        let (args, rest) = take_json(rest.trim_start())?;
        return Some((call(name, &args, tools).into_iter().collect(), rest));
    }
    if let Some(after) = s.strip_prefix("```") {
        let after = after.strip_prefix("json").unwrap_or(after);
        let (body, rest) = match after.find("```") {
            Some(end) => (&after[..end], &after[end + 3..]),
            None => (after, ""),
        };
        return Some((calls_in_json_text(body, tools), rest));
    }
    if s.starts_with('{') || s.starts_with('[') {
        return Some(json_sequence(s, tools));
    }
    None
}

/// Calls in a delimited JSON text (an object or an array of objects), repaired leniently.
fn calls_in_json_text(body: &str, tools: &[String]) -> Vec<TextCall> {
    let body = body.trim();
    let value = match serde_json::from_str::<Value>(body) {
        Ok(v) => v,
        Err(_) => match parse_arguments(body) {
            ParsedArguments::Ok(v) | ParsedArguments::Repaired(v) => v,
            ParsedArguments::Invalid(_) => return Vec::new(),
        },
    };
    calls_in_value(&value, tools)
}

/// JSON values one after another (separated by whitespace, `;` or `,`), each a call or an array of calls.
fn json_sequence<'a>(s: &'a str, tools: &[String]) -> (Vec<TextCall>, &'a str) {
    let mut rest = s;
    let mut calls = Vec::new();
    loop {
        let trimmed = rest.trim_start_matches(|c: char| c.is_whitespace() || c == ';' || c == ',');
        let Some((v, after)) = take_json(trimmed) else {
            break;
        };
        let found = calls_in_value(&v, tools);
        if found.is_empty() {
            break;
        }
        calls.extend(found);
        rest = after;
    }
    (calls, rest)
}

fn calls_in_value(v: &Value, tools: &[String]) -> Vec<TextCall> {
    match v {
        Value::Array(items) => {
            let calls: Vec<TextCall> = items.iter().filter_map(|i| object_call(i, tools)).collect();
            if calls.len() == items.len() {
                calls
            } else {
                Vec::new()
            }
        }
        other => object_call(other, tools).into_iter().collect(),
    }
}

/// `{"name": …, "arguments" | "parameters": …}`, or OpenAI's `{"function": {"name": …, "arguments": …}}`.
fn object_call(v: &Value, tools: &[String]) -> Option<TextCall> {
    let v = v.get("function").filter(|f| f.is_object()).unwrap_or(v);
    let name = v.get("name")?.as_str()?;
    let args = v
        .get("arguments")
        .or_else(|| v.get("parameters"))
        .cloned()
        .unwrap_or(Value::Object(serde_json::Map::new()));
    call(name, &args, tools)
}

/// A call to `name` when it is offered; arguments given as a string are parsed leniently.
fn call(name: &str, args: &Value, tools: &[String]) -> Option<TextCall> {
    let name = name.trim();
    if !tools.iter().any(|t| t == name) {
        return None;
    }
    let arguments = match args {
        Value::String(s) => match parse_arguments(s) {
            ParsedArguments::Ok(v) | ParsedArguments::Repaired(v) => v.to_string(),
            ParsedArguments::Invalid(_) => s.clone(),
        },
        Value::Object(_) => args.to_string(),
        _ => return None,
    };
    Some(TextCall {
        name: name.to_owned(),
        arguments,
    })
}

/// The argument object at the start of a delimited body (lenient).
fn arguments_value(body: &str) -> Option<Value> {
    match parse_arguments(body) {
        ParsedArguments::Ok(v) | ParsedArguments::Repaired(v) => Some(v),
        ParsedArguments::Invalid(_) => None,
    }
}

/// One JSON value at the start of `s` and what follows it.
fn take_json(s: &str) -> Option<(Value, &str)> {
    let mut it = serde_json::Deserializer::from_str(s).into_iter::<Value>();
    match it.next() {
        Some(Ok(v)) => Some((v, &s[it.byte_offset()..])),
        _ => None,
    }
}

/// Decodes HTML entities when the JSON's own quotes were escaped (`&quot;`), as some chat templates do.
fn decode_if_escaped(s: &str) -> Cow<'_, str> {
    if s.contains("&quot;") || s.contains("&#34;") || s.contains("&#x22;") {
        html_escape::decode_html_entities(s)
    } else {
        Cow::Borrowed(s)
    }
}

/// Drops end-of-turn tokens some servers leave in the text after a call.
fn strip_special_tokens(s: &str) -> String {
    let mut out = s.to_owned();
    for t in [
        "<|eom_id|>",
        "<|eot_id|>",
        "<|im_end|>",
        "</s>",
        "<|tool_calls_section_end|>",
        "<|tool_call_end|>",
    ] {
        out = out.replace(t, "");
    }
    out
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_call_cut_short_or_malformed_still_counts_as_a_call_but_prose_does_not() {
        let tools = vec!["write_file".to_owned()];
        for cut in [
            "functions.write_file:{&#34;path&#34;: &#34;notes.txt&#34;, &#34;content&#34;: &#34;buy mi",
            "I will write it now.\nfunctions.write_file: {\"path\": \"a\", \"content\": ",
            "<tool_call>{\"name\": \"write_file\", \"arguments\": {\"path\"",
        ] {
            assert!(contains_text_tool_call(cut, &tools), "{cut}");
        }
        for prose in [
            "I used functions.write_file earlier to save it.",
            "The notes are saved; nothing else to do.",
        ] {
            assert!(!contains_text_tool_call(prose, &tools), "{prose}");
        }
    }
    use super::*;

    fn tools() -> Vec<String> {
        vec!["read_file".into(), "exec".into()]
    }

    fn names(r: &Option<(Vec<TextCall>, String)>) -> Vec<&str> {
        r.as_ref()
            .map(|(c, _)| c.iter().map(|c| c.name.as_str()).collect())
            .unwrap_or_default()
    }

    #[test]
    fn llama_cpp_python_chatml_function_calling_text_is_read() {
        // What llama-cpp-python's `chatml-function-calling` streams back as plain text (SmolLM2-135M, the bench).
        let tools: Vec<String> = ["cron", "run_cli_app"].map(String::from).to_vec();
        let text =
            "functions.cron:\n{&#34;action&#34;: &#34;add&#34;, &#34;name&#34;: &#34;cron_note.txt&#34;}";
        let r = parse_region(text, &tools);
        assert_eq!(names(&r), ["cron"], "{r:?}");
        assert!(contains_text_tool_call(text, &tools));
        // Malformed arguments are still a call, never an answer.
        assert!(contains_text_tool_call(
            "functions.run_cli_app:\n{&#34;name&#34;, &#34;function_1&#34;}",
            &tools
        ));
    }

    #[test]
    fn every_local_format_is_read() {
        let cases = [
            r#"<tool_call>{"name": "read_file", "arguments": {"path": "a"}}</tool_call>"#,
            r#"functions.read_file: {"path": "a"}"#,
            r#"functions.read_file:0 {"path": "a"}"#,
            r#"[TOOL_CALLS] [{"name": "read_file", "arguments": {"path": "a"}}]"#,
            r#"[TOOL_CALLS]read_file[ARGS]{"path": "a"}"#,
            r#"<|python_tag|>{"name": "read_file", "parameters": {"path": "a"}}<|eom_id|>"#,
            r#"<function=read_file>{"path": "a"}</function>"#,
            "```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"a\"}}\n```",
            r#"{"name": "read_file", "arguments": "{\"path\": \"a\"}"}"#,
            r#"{&quot;name&quot;: &quot;read_file&quot;, &quot;arguments&quot;: {&quot;path&quot;: &quot;a&quot;}}"#,
            r#"functions.read_file: {&quot;path&quot;: &quot;a&quot;}"#,
        ];
        for case in cases {
            let r = parse_region(case, &tools());
            let (calls, left) = r.unwrap_or_else(|| panic!("not read: {case}"));
            assert_eq!(calls.len(), 1, "{case}");
            assert_eq!(calls[0].name, "read_file", "{case}");
            let args: Value = serde_json::from_str(&calls[0].arguments).unwrap();
            assert_eq!(args["path"], "a", "{case}");
            assert_eq!(left, "", "{case}");
        }
    }

    #[test]
    fn several_calls_and_trailing_text() {
        let r = parse_region(
            r#"<|python_tag|>{"name": "exec", "parameters": {"command": "ls"}}; {"name": "read_file", "parameters": {"path": "b"}}"#,
            &tools(),
        );
        assert_eq!(names(&r), ["exec", "read_file"]);
        let r = parse_region(
            "<tool_call>{\"name\": \"exec\", \"arguments\": {\"command\": \"a &amp;&amp; b\"}}</tool_call>\n<tool_call>{\"name\": \"read_file\", \"arguments\": {}}</tool_call> done",
            &tools(),
        );
        assert_eq!(names(&r), ["exec", "read_file"]);
        let (calls, left) = r.unwrap();
        // Entities inside an otherwise valid JSON are the model's text, not escaping: kept.
        assert!(calls[0].arguments.contains("&amp;&amp;"), "{calls:?}");
        assert_eq!(left, "done");
    }

    #[test]
    fn unknown_tools_and_prose_stay_text() {
        assert!(parse_region(r#"{"name": "rm_rf", "arguments": {}}"#, &tools()).is_none());
        assert!(parse_region(r#"{"name": "Ada", "age": 36}"#, &tools()).is_none());
        assert!(parse_region("functions.read_file is a helper", &tools()).is_none());
        assert!(parse_region("[TOOL_CALLS] nothing here", &tools()).is_none());
        assert!(!contains_text_tool_call("I read functions.py for you.", &tools()));
        assert!(contains_text_tool_call(
            "Sure. functions.exec: {\"command\": \"ls\"}",
            &tools()
        ));
    }
}
