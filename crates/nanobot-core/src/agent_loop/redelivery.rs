//! A message delivered more than once (a durable bus redelivers a message whose turn was cut short or never
//! acknowledged; a channel repeats an update) is answered once. The channel message ids a session has seen
//! ([`InboundMessage::delivery_id`]) are kept in its metadata with how far their turn got: a message whose turn
//! was answered is settled without a turn; one whose turn was cut short runs again without a second copy of the
//! user's message.

use nanobot_providers::ChatMessage;
use serde_json::{Map, Value, json};

/// Session metadata key: `[[delivery id, "started" | "answered"], …]`, oldest first.
pub(crate) const DELIVERIES_KEY: &str = "_deliveries";
/// How many delivery ids a session remembers.
const KEEP: usize = 64;

/// How far the turn of an earlier delivery of the same message got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Earlier {
    /// It started (its user message is in the session) and was cut short.
    Started,
    /// It was answered and saved.
    Answered,
}

impl Earlier {
    fn label(self) -> &'static str {
        match self {
            Earlier::Started => "started",
            Earlier::Answered => "answered",
        }
    }
}

/// What `metadata` says about delivery `id`.
pub(super) fn earlier(metadata: &Map<String, Value>, id: &str) -> Option<Earlier> {
    let list = metadata.get(DELIVERIES_KEY)?.as_array()?;
    list.iter().rev().find_map(|entry| {
        let pair = entry.as_array()?;
        if pair.first()?.as_str()? != id {
            return None;
        }
        match pair.get(1)?.as_str()? {
            "answered" => Some(Earlier::Answered),
            _ => Some(Earlier::Started),
        }
    })
}

/// Records in `metadata` that delivery `id` got as far as `state` (replacing what was recorded; the oldest
/// entries beyond [`KEEP`] are forgotten).
pub(super) fn record(metadata: &mut Map<String, Value>, id: &str, state: Earlier) {
    let mut list: Vec<Value> = metadata
        .get(DELIVERIES_KEY)
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    list.retain(|e| e.get(0).and_then(Value::as_str) != Some(id));
    list.push(json!([id, state.label()]));
    if list.len() > KEEP {
        let extra = list.len() - KEEP;
        list.drain(..extra);
    }
    metadata.insert(DELIVERIES_KEY.into(), Value::Array(list));
}

/// The answer the session holds to its latest user message `user_text`: the last assistant text after it, before
/// the next user message.
pub(super) fn earlier_answer(history: &[ChatMessage], user_text: &str) -> Option<String> {
    let asked = history.iter().rposition(|m| match m {
        ChatMessage::User { content } => content.text() == user_text,
        _ => false,
    })?;
    history[asked + 1..]
        .iter()
        .take_while(|m| !matches!(m, ChatMessage::User { .. }))
        .filter_map(|m| match m {
            ChatMessage::Assistant { content, .. } => content.clone(),
            _ => None,
        })
        .filter(|t| !t.trim().is_empty())
        .last()
}

/// Leaves out of the replayed history what a cut-short attempt at this message left (its user message
/// `user_text` and the interruption note after it), so the model is asked the question once. An attempt that
/// got tool results stays in the replay: the model then sees what was already done (and closed as
/// interrupted) instead of doing it again, and the question comes once more after it.
pub(super) fn drop_cut_short_attempt(history: &mut Vec<ChatMessage>, user_text: &str) {
    let last = history.iter().rposition(|m| match m {
        ChatMessage::User { content } => content.text() == user_text,
        _ => false,
    });
    if let Some(i) = last
        && !history[i..].iter().any(|m| matches!(m, ChatMessage::Tool { .. }))
    {
        history.truncate(i);
    }
}

/// How far the session's last turn got, when its latest user message is `user_text` (a client repeating its
/// request): answered when an answer follows it, else cut short. `None` when the latest user message is another.
pub(super) fn last_turn(history: &[ChatMessage], user_text: &str) -> Option<Earlier> {
    let last = history
        .iter()
        .rposition(|m| matches!(m, ChatMessage::User { .. }))?;
    match &history[last] {
        ChatMessage::User { content } if content.text() == user_text => {}
        _ => return None,
    }
    let answered = history[last + 1..].iter().any(|m| match m {
        ChatMessage::Assistant {
            content: Some(t),
            tool_calls,
            ..
        } => tool_calls.is_empty() && !t.trim().is_empty() && t != super::types::TURN_INTERRUPTED_NOTE,
        _ => false,
    });
    Some(if answered {
        Earlier::Answered
    } else {
        Earlier::Started
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_request_finds_the_last_turn_answered_or_cut_short() {
        let q = "what is the time?";
        let mut h = vec![ChatMessage::user("earlier"), ChatMessage::assistant("ok")];
        assert_eq!(last_turn(&h, q), None, "another question last");
        h.push(ChatMessage::user(q));
        assert_eq!(last_turn(&h, q), Some(Earlier::Started));
        h.push(ChatMessage::assistant(super::super::types::TURN_INTERRUPTED_NOTE));
        assert_eq!(
            last_turn(&h, q),
            Some(Earlier::Started),
            "an interruption note is no answer"
        );
        h.push(ChatMessage::assistant("noon"));
        assert_eq!(last_turn(&h, q), Some(Earlier::Answered));
        assert_eq!(earlier_answer(&h, q).as_deref(), Some("noon"));
        h.push(ChatMessage::user("thanks"));
        assert_eq!(last_turn(&h, q), None);
    }

    #[test]
    fn states_are_recorded_replaced_and_bounded() {
        let mut meta = Map::new();
        assert_eq!(earlier(&meta, "t:1:1"), None);
        record(&mut meta, "t:1:1", Earlier::Started);
        assert_eq!(earlier(&meta, "t:1:1"), Some(Earlier::Started));
        record(&mut meta, "t:1:1", Earlier::Answered);
        assert_eq!(earlier(&meta, "t:1:1"), Some(Earlier::Answered));
        for i in 0..100 {
            record(&mut meta, &format!("t:1:{}", i + 2), Earlier::Answered);
        }
        assert_eq!(meta[DELIVERIES_KEY].as_array().map(Vec::len), Some(KEEP));
        assert_eq!(earlier(&meta, "t:1:1"), None, "the oldest are forgotten");
        assert_eq!(earlier(&meta, "t:1:101"), Some(Earlier::Answered));
    }

    #[test]
    fn the_cut_short_attempt_is_left_out_of_the_replay() {
        let mut history = vec![
            ChatMessage::user("earlier question"),
            ChatMessage::assistant("earlier answer"),
            ChatMessage::user("what is on my list?"),
            ChatMessage::assistant("(interrupted)"),
        ];
        drop_cut_short_attempt(&mut history, "what is on my list?");
        assert_eq!(history.len(), 2);
        drop_cut_short_attempt(&mut history, "not there");
        assert_eq!(history.len(), 2);
        let mut with_work = vec![
            ChatMessage::user("read my notes"),
            ChatMessage::assistant_tool_calls(None, Vec::new()),
            ChatMessage::tool_result("call-1", "read_file", "the notes"),
        ];
        drop_cut_short_attempt(&mut with_work, "read my notes");
        assert_eq!(with_work.len(), 3, "done work stays in the replay");
    }
}
