//! Tool calls written as text by models without native tool calling: `<tool_call>{"name":…,"arguments":…}
//! </tool_call>`, or an answer that is nothing but such a JSON object (optionally in a code fence).

use serde_json::Value;

use crate::StreamEvent;
use crate::json::{ParsedArguments, parse_arguments};

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";

/// Streams text through, holding back `<tool_call>` blocks and turning them into tool-call events.
#[derive(Debug, Default)]
pub(crate) struct TextToolCallFilter {
    buf: String,
    inside: bool,
    next_index: usize,
    emitted_text: bool,
    maybe_json: bool,
    found_calls: bool,
}

impl TextToolCallFilter {
    /// A filter whose tool calls are numbered from `first_index` (after any native ones).
    pub(crate) fn new(first_index: usize) -> Self {
        Self {
            next_index: first_index,
            ..Self::default()
        }
    }

    /// Feeds a text delta; returns what may be passed on now.
    pub(crate) fn push(&mut self, text: &str) -> Vec<StreamEvent> {
        self.buf.push_str(text);
        if !self.emitted_text && !self.inside {
            let t = self.buf.trim_start();
            if t.is_empty() {
                return Vec::new();
            }
            // An answer that starts like a JSON object may be a bare tool call: hold everything back.
            if t.starts_with('{') || t.starts_with("```") {
                self.maybe_json = true;
            }
        }
        if self.maybe_json {
            return Vec::new();
        }
        self.drain(false)
    }

    fn drain(&mut self, at_end: bool) -> Vec<StreamEvent> {
        let mut out = Vec::new();
        loop {
            if self.inside {
                let Some(end) = self.buf.find(CLOSE) else {
                    if at_end {
                        let body = std::mem::take(&mut self.buf);
                        if !self.emit_call(&body, &mut out) {
                            out.push(StreamEvent::TextDelta(format!("{OPEN}{body}")));
                        }
                        self.inside = false;
                    }
                    return out;
                };
                let body: String = self.buf[..end].to_owned();
                self.buf.drain(..end + CLOSE.len());
                self.inside = false;
                if !self.emit_call(&body, &mut out) {
                    out.push(StreamEvent::TextDelta(format!("{OPEN}{body}{CLOSE}")));
                }
                continue;
            }
            if let Some(start) = self.buf.find(OPEN) {
                let before: String = self.buf[..start].to_owned();
                self.text(before, &mut out);
                self.buf.drain(..start + OPEN.len());
                self.inside = true;
                continue;
            }
            // Keep a tail that could be the start of `<tool_call>`.
            let keep = if at_end {
                0
            } else {
                partial_prefix_len(&self.buf, OPEN)
            };
            let cut = self.buf.len() - keep;
            let text: String = self.buf[..cut].to_owned();
            self.buf.drain(..cut);
            self.text(text, &mut out);
            return out;
        }
    }

    fn text(&mut self, text: String, out: &mut Vec<StreamEvent>) {
        if !text.is_empty() {
            self.emitted_text = true;
            out.push(StreamEvent::TextDelta(text));
        }
    }

    fn emit_call(&mut self, body: &str, out: &mut Vec<StreamEvent>) -> bool {
        let Some((name, args)) = parse_call(body) else {
            return false;
        };
        out.push(StreamEvent::ToolCallDelta {
            index: self.next_index,
            id: Some(format!("call_text_{}", self.next_index)),
            name: Some(name),
            arguments: args,
        });
        self.next_index += 1;
        self.found_calls = true;
        true
    }

    /// Ends the text; returns what was held back.
    pub(crate) fn finish(&mut self) -> Vec<StreamEvent> {
        if self.maybe_json {
            self.maybe_json = false;
            let whole = std::mem::take(&mut self.buf);
            let mut out = Vec::new();
            if !whole.contains(OPEN) && self.emit_call(strip_fence(whole.trim()), &mut out) {
                return out;
            }
            self.buf = whole;
        }
        self.drain(true)
    }

    /// True once any text tool call was found.
    pub(crate) fn found_calls(&self) -> bool {
        self.found_calls
    }
}

fn partial_prefix_len(buf: &str, tag: &str) -> usize {
    (1..tag.len())
        .rev()
        .find(|&n| buf.ends_with(&tag[..n]))
        .unwrap_or(0)
}

fn strip_fence(s: &str) -> &str {
    let Some(rest) = s.strip_prefix("```") else {
        return s;
    };
    let rest = rest.strip_prefix("json").unwrap_or(rest);
    rest.strip_suffix("```").unwrap_or(rest).trim()
}

/// `{"name": …, "arguments": {…}}` (or `parameters`) → name and argument JSON text.
fn parse_call(body: &str) -> Option<(String, String)> {
    let v = match parse_arguments(body) {
        ParsedArguments::Ok(v) | ParsedArguments::Repaired(v) => v,
        ParsedArguments::Invalid(_) => return None,
    };
    let name = v.get("name")?.as_str()?.to_owned();
    let args = match v.get("arguments").or_else(|| v.get("parameters")) {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => "{}".to_owned(),
    };
    Some((name, args))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(pieces: &[&str]) -> Vec<StreamEvent> {
        let mut f = TextToolCallFilter::new(0);
        let mut out: Vec<StreamEvent> = pieces.iter().flat_map(|p| f.push(p)).collect();
        out.extend(f.finish());
        out
    }

    #[test]
    fn tags_split_across_chunks() {
        let out = run(&[
            "Let me look. <tool",
            "_call>{\"name\": \"read_file\", \"argu",
            "ments\": {\"path\": \"a\"}}</tool_call>",
        ]);
        assert_eq!(out[0], StreamEvent::TextDelta("Let me look. ".into()));
        match &out[1] {
            StreamEvent::ToolCallDelta { name, arguments, .. } => {
                assert_eq!(name.as_deref(), Some("read_file"));
                assert_eq!(arguments, r#"{"path":"a"}"#);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(out.len(), 2);
    }

    #[test]
    fn bare_json_answer_is_a_call_and_plain_text_passes() {
        let out = run(&["```json\n{\"name\": \"exec\", \"arguments\": {\"command\": \"ls\"}}\n```"]);
        assert!(matches!(&out[0], StreamEvent::ToolCallDelta { name: Some(n), .. } if n == "exec"));
        let out = run(&["hello ", "<b>world</b>"]);
        let text: String = out
            .iter()
            .map(|e| match e {
                StreamEvent::TextDelta(t) => t.as_str(),
                _ => "",
            })
            .collect();
        assert_eq!(text, "hello <b>world</b>");
        let out = run(&["{not a call}"]);
        assert_eq!(out, vec![StreamEvent::TextDelta("{not a call}".into())]);
    }
}
