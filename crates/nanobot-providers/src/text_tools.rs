//! The streaming filter for tool calls written as text (formats in [`crate::text_tool_calls`]): text passes
//! through until a tool-call marker; from there the rest of the answer is held back and read as calls when the
//! stream ends (or passed on as text when it holds none).

use crate::StreamEvent;
use crate::text_tool_calls::{markers, parse_region};

/// Streams text through, holding back tool-call regions and turning them into tool-call events.
#[derive(Debug, Default)]
pub(crate) struct TextToolCallFilter {
    buf: String,
    holding: bool,
    next_index: usize,
    emitted_text: bool,
    found_calls: bool,
    tools: Vec<String>,
    markers: Vec<String>,
}

impl TextToolCallFilter {
    /// A filter for calls to `tools`, numbered from `first_index` (after any native ones).
    pub(crate) fn new(first_index: usize, tools: Vec<String>) -> Self {
        Self {
            next_index: first_index,
            markers: markers(&tools),
            tools,
            ..Self::default()
        }
    }

    /// Feeds a text delta; returns what may be passed on now.
    pub(crate) fn push(&mut self, text: &str) -> Vec<StreamEvent> {
        self.buf.push_str(text);
        if self.holding {
            return Vec::new();
        }
        if !self.emitted_text {
            let t = self.buf.trim_start();
            if t.is_empty() {
                return Vec::new();
            }
            // An answer that starts like a JSON object may be a bare tool call: hold everything back.
            if t.starts_with('{') || t.starts_with("```") {
                self.holding = true;
                return Vec::new();
            }
        }
        let mut out = Vec::new();
        if let Some(at) = self
            .markers
            .iter()
            .filter_map(|m| self.buf.find(m.as_str()))
            .min()
        {
            let before: String = self.buf.drain(..at).collect();
            self.text(before, &mut out);
            self.holding = true;
            return out;
        }
        // Keep a tail that could be the start of a marker.
        let keep = self
            .markers
            .iter()
            .map(|m| partial_prefix_len(&self.buf, m))
            .max()
            .unwrap_or(0);
        let cut = self.buf.len() - keep;
        let text: String = self.buf.drain(..cut).collect();
        self.text(text, &mut out);
        out
    }

    fn text(&mut self, text: String, out: &mut Vec<StreamEvent>) {
        if !text.is_empty() {
            self.emitted_text = true;
            out.push(StreamEvent::TextDelta(text));
        }
    }

    /// Ends the text; returns what was held back.
    pub(crate) fn finish(&mut self) -> Vec<StreamEvent> {
        let held = std::mem::take(&mut self.buf);
        let mut out = Vec::new();
        if !self.holding {
            self.text(held, &mut out);
            return out;
        }
        self.holding = false;
        let trimmed = held.trim_start();
        let Some((calls, leftover)) = parse_region(trimmed, &self.tools) else {
            self.text(held, &mut out);
            return out;
        };
        for c in calls {
            out.push(StreamEvent::ToolCallDelta {
                index: self.next_index,
                id: Some(format!("call_text_{}", self.next_index)),
                name: Some(c.name),
                arguments: c.arguments,
            });
            self.next_index += 1;
            self.found_calls = true;
        }
        self.text(leftover, &mut out);
        out
    }

    /// True once any text tool call was found.
    pub(crate) fn found_calls(&self) -> bool {
        self.found_calls
    }
}

/// The length of the longest tail of `buf` that is a proper prefix of `tag` (on a character boundary).
fn partial_prefix_len(buf: &str, tag: &str) -> usize {
    (1..tag.len())
        .rev()
        .filter(|&n| tag.is_char_boundary(n))
        .find(|&n| buf.ends_with(&tag[..n]))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(pieces: &[&str]) -> Vec<StreamEvent> {
        let mut f = TextToolCallFilter::new(0, vec!["read_file".into(), "exec".into()]);
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
