//! [`Session`]: one conversation, and the history it replays to the model.

use std::borrow::Cow;
use std::collections::HashSet;

use chrono::NaiveDateTime;
use serde_json::{Map, Value};

use crate::message::SessionMessage;
use crate::time;

/// Content of the tool result that [`Session::history`] puts in place of a result that never arrived
/// (the run was interrupted between the tool call and its result).
pub const INTERRUPTED_TOOL_RESULT: &str =
    "Error: this tool call was interrupted before it returned a result; its outcome is unknown.";

/// Metadata key of the session's archived-context summary, as 0.3.5 keeps it: `{"text": …, "last_active": …}`,
/// the latest archive checkpoint of the messages before `last_consolidated`, shown to the model in the system
/// prompt. [`Session::clear`] removes it.
pub const LAST_SUMMARY_KEY: &str = "_last_summary";

/// One conversation (one session key, e.g. `telegram:12345`), as stored in one JSONL file.
///
/// `messages` only ever grows while the session lives (consolidation moves `last_consolidated` forward instead
/// of deleting), so indices stay stable; [`crate::SessionStore::reset`] starts a new, empty list.
#[derive(Clone, Debug, PartialEq)]
pub struct Session {
    /// The session key, `channel:chat_id` (or an override).
    pub key: String,
    /// Every message, oldest first.
    pub messages: Vec<SessionMessage>,
    /// When the session was created (local time, as the Python nanobot stores it).
    pub created_at: NaiveDateTime,
    /// When the session last changed.
    pub updated_at: NaiveDateTime,
    /// Free-form metadata (`_last_usage`, …), kept as written.
    pub metadata: Map<String, Value>,
    /// Index into `messages` of the first message not yet consolidated into memory.
    pub last_consolidated: usize,
    /// Fields of the metadata line this crate does not model (e.g. `last_archived`), kept as written.
    pub extra: Map<String, Value>,
}

/// The part of a [`Session`] stored in its metadata line that callers may change with
/// [`crate::SessionStore::update_header`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SessionHeader {
    /// Free-form metadata (`_last_usage`, …).
    pub metadata: Map<String, Value>,
    /// Index of the first message not yet consolidated.
    pub last_consolidated: usize,
    /// Unmodelled fields of the metadata line.
    pub extra: Map<String, Value>,
}

impl Session {
    /// An empty session created now.
    pub fn new(key: impl Into<String>) -> Self {
        let now = time::now();
        Self {
            key: key.into(),
            messages: Vec::new(),
            created_at: now,
            updated_at: now,
            metadata: Map::new(),
            last_consolidated: 0,
            extra: Map::new(),
        }
    }

    /// Appends a message (adding a `timestamp` if it has none) and touches `updated_at`.
    pub fn add_message(&mut self, mut message: SessionMessage) {
        message.ensure_timestamp();
        self.messages.push(message);
        self.updated_at = time::now();
    }

    /// The messages not yet consolidated (`messages[last_consolidated..]`, clamped).
    pub fn unconsolidated(&self) -> &[SessionMessage] {
        &self.messages[self.last_consolidated.min(self.messages.len())..]
    }

    /// Empties the session (for `/new`): no messages, `last_consolidated = 0`; metadata is kept but for the
    /// archived-context summary ([`LAST_SUMMARY_KEY`]), as 0.3.5 does.
    pub fn clear(&mut self) {
        self.messages.clear();
        self.last_consolidated = 0;
        self.metadata.remove(LAST_SUMMARY_KEY);
        self.updated_at = time::now();
    }

    /// The header fields (metadata line) of this session.
    pub fn header(&self) -> SessionHeader {
        SessionHeader {
            metadata: self.metadata.clone(),
            last_consolidated: self.last_consolidated,
            extra: self.extra.clone(),
        }
    }

    pub(crate) fn set_header(&mut self, header: SessionHeader) {
        self.metadata = header.metadata;
        self.last_consolidated = header.last_consolidated;
        self.extra = header.extra;
    }

    /// The history to send to the model: at most `max_messages` of the unconsolidated tail, always valid for an
    /// LLM API.
    ///
    /// Rules, in order:
    /// 1. Only `messages[last_consolidated..]` is considered; slash-command messages (`"_command": true`) and
    ///    lines without a `role` are skipped.
    /// 2. The last `max_messages` of those are taken, then everything before the first `user` message is
    ///    dropped. If the window holds no `user` message at all, it is widened back to the latest earlier `user`
    ///    message (so a long tool run is not replayed headless); with no user message anywhere, the history is
    ///    empty.
    /// 3. A tool result is kept only inside the run of tool messages that directly follows the assistant message
    ///    that called it (once per call id); any other tool result is an orphan and is dropped.
    /// 4. Each assistant tool call without a result gets one, placed after the call's other results, whose
    ///    content is [`INTERRUPTED_TOOL_RESULT`]; the call is never re-run.
    ///
    /// Messages are returned as stored (all fields); the caller picks what its wire format needs.
    pub fn history(&self, max_messages: usize) -> Vec<SessionMessage> {
        self.history_view(max_messages)
            .into_iter()
            .map(Cow::into_owned)
            .collect()
    }

    /// [`Session::history`] without copying: the stored messages borrowed, only the results added for
    /// interrupted calls (rule 4) owned.
    pub fn history_view(&self, max_messages: usize) -> Vec<Cow<'_, SessionMessage>> {
        history_from(self.unconsolidated(), max_messages, true).unwrap_or_default()
    }
}

/// [`Session::history`] over `tail`. When `complete` is false, `tail` is only the newest part of the
/// unconsolidated messages, and `None` means older messages are needed to apply the rules.
pub(crate) fn history_from(
    tail: &[SessionMessage],
    max_messages: usize,
    complete: bool,
) -> Option<Vec<Cow<'_, SessionMessage>>> {
    if max_messages == 0 {
        return Some(Vec::new());
    }
    let eligible = |m: &&SessionMessage| !m.is_command() && m.role().is_some();
    // Walk back from the end: O(max_messages + skipped), not O(session length).
    let mut window: Vec<&SessionMessage> = Vec::with_capacity(max_messages.min(tail.len()));
    let mut rest = tail.iter().rev().filter(eligible);
    for m in rest.by_ref() {
        window.push(m);
        if window.len() == max_messages {
            break;
        }
    }
    if window.len() < max_messages && !complete {
        return None;
    }
    // `window` is newest first: find the oldest user message in it.
    match window.iter().rposition(|m| m.role() == Some("user")) {
        Some(pos) => window.truncate(pos + 1),
        None => {
            let mut found = false;
            for m in rest {
                window.push(m);
                if m.role() == Some("user") {
                    found = true;
                    break;
                }
            }
            if !found {
                return complete.then(Vec::new);
            }
        }
    }
    window.reverse();
    Some(pair_tool_results(&window))
}

fn pair_tool_results<'a>(window: &[&'a SessionMessage]) -> Vec<Cow<'a, SessionMessage>> {
    let mut out = Vec::with_capacity(window.len());
    let mut i = 0;
    while i < window.len() {
        let m = window[i];
        i += 1;
        match m.role() {
            Some("tool") => {
                tracing::debug!(tool_call_id = ?m.tool_call_id(), "history: dropped orphan tool result");
            }
            Some("assistant") if !m.tool_call_ids().is_empty() => {
                out.push(Cow::Borrowed(m));
                let ids = m.tool_call_ids();
                let mut answered: HashSet<&str> = HashSet::new();
                while i < window.len() && window[i].role() == Some("tool") {
                    let r = window[i];
                    i += 1;
                    match r.tool_call_id() {
                        Some(id) if ids.contains(&id) && answered.insert(id) => out.push(Cow::Borrowed(r)),
                        other => {
                            tracing::debug!(tool_call_id = ?other, "history: dropped orphan tool result")
                        }
                    }
                }
                for id in ids.iter().filter(|id| !answered.contains(*id)) {
                    let mut map = Map::new();
                    map.insert("role".into(), "tool".into());
                    map.insert("tool_call_id".into(), (*id).into());
                    if let Some(name) = m.tool_call_name(id) {
                        map.insert("name".into(), name.into());
                    }
                    map.insert("content".into(), INTERRUPTED_TOOL_RESULT.into());
                    out.push(Cow::Owned(SessionMessage::from_map(map)));
                }
            }
            _ => out.push(Cow::Borrowed(m)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn msg(v: Value) -> SessionMessage {
        serde_json::from_value(v).unwrap()
    }

    fn call(id: &str) -> SessionMessage {
        msg(json!({"role": "assistant", "content": null,
            "tool_calls": [{"id": id, "type": "function", "function": {"name": "exec", "arguments": "{}"}}]}))
    }

    fn result(id: &str) -> SessionMessage {
        msg(json!({"role": "tool", "tool_call_id": id, "name": "exec", "content": "ok"}))
    }

    fn roles(h: &[SessionMessage]) -> Vec<&str> {
        h.iter().map(|m| m.role().unwrap()).collect()
    }

    #[test]
    fn window_starts_at_a_user_turn() {
        let mut s = Session::new("k");
        s.messages = vec![
            SessionMessage::new("user", "a"),
            call("c1"),
            result("c1"),
            SessionMessage::new("assistant", "done"),
            SessionMessage::new("user", "b"),
            SessionMessage::new("assistant", "B"),
        ];
        // window of 4 = [result, assistant, user, assistant] -> starts at "b"
        assert_eq!(roles(&s.history(4)), ["user", "assistant"]);
        assert_eq!(s.history(6).len(), 6);
        assert!(s.history(0).is_empty());
    }

    #[test]
    fn last_consolidated_is_respected_and_clamped() {
        let mut s = Session::new("k");
        s.messages = vec![
            SessionMessage::new("user", "old"),
            SessionMessage::new("user", "new"),
        ];
        s.last_consolidated = 1;
        assert_eq!(s.history(10)[0].content_text().as_deref(), Some("new"));
        s.last_consolidated = 99;
        assert!(s.history(10).is_empty());
    }

    #[test]
    fn headless_window_widens_to_previous_user() {
        let mut s = Session::new("k");
        s.messages = vec![
            SessionMessage::new("user", "go"),
            call("a"),
            result("a"),
            call("b"),
            result("b"),
        ];
        let h = s.history(2);
        assert_eq!(roles(&h), ["user", "assistant", "tool", "assistant", "tool"]);
    }

    #[test]
    fn orphans_dropped_and_interrupted_calls_closed() {
        let mut s = Session::new("k");
        let mut two = call("x");
        two.as_map_mut().insert(
            "tool_calls".into(),
            json!([{"id": "x", "function": {"name": "read_file"}}, {"id": "y", "function": {"name": "exec"}}]),
        );
        s.messages = vec![
            SessionMessage::new("user", "q"),
            result("ghost"),
            two,
            result("y"),
            result("y"),
            SessionMessage::new("user", "again"),
            result("x"),
        ];
        let h = s.history(100);
        assert_eq!(roles(&h), ["user", "assistant", "tool", "tool", "user"]);
        assert_eq!(h[2].tool_call_id(), Some("y"));
        assert_eq!(h[3].tool_call_id(), Some("x"));
        assert_eq!(h[3].name(), Some("read_file"));
        assert_eq!(h[3].content_text().as_deref(), Some(INTERRUPTED_TOOL_RESULT));
    }

    #[test]
    fn commands_never_reach_the_model() {
        let mut s = Session::new("k");
        s.messages = vec![
            SessionMessage::new("user", "hi"),
            SessionMessage::new("user", "/help").with("_command", true),
            SessionMessage::new("assistant", "help text").with("_command", true),
            SessionMessage::new("assistant", "hello"),
        ];
        let h = s.history(10);
        assert_eq!(roles(&h), ["user", "assistant"]);
        assert_eq!(h[1].content_text().as_deref(), Some("hello"));
    }
}
