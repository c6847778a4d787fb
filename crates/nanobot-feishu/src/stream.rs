//! Streamed answers as CardKit cards: the per-stream state, and the card calls (create, write the text, switch
//! streaming mode), each with the strictly increasing `sequence` CardKit asks for.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use nanobot_channels::ChannelError;
use reqwest::Method;
use serde_json::json;

use crate::api::{Api, enc};

/// The id of the Markdown element the streamed text goes into.
pub(crate) const ELEMENT_ID: &str = "streaming_md";
/// Streams remembered at most; the oldest goes first.
const MAX_STREAMS: usize = 64;
/// A stream not ended within this time is forgotten (its end then goes out as a regular message).
const STREAM_TTL: Duration = Duration::from_secs(30 * 60);
/// After this many failed updates in a row, a stream stops updating its card until the end.
const MAX_FAILED_UPDATES: u32 = 3;
/// Longest text kept in a streaming card, in characters; the rest of a longer answer follows as messages.
pub(crate) const CARD_TEXT_LIMIT: usize = 8000;

/// Where a stream's card stands.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Card {
    /// Not created yet (nothing visible to show so far).
    Pending,
    /// Could not be created or sent: the end goes out as a regular message.
    Failed,
    /// Shown in the chat; `sequence` is the last one used.
    Open { card_id: String, sequence: u64 },
}

/// One streamed answer in the making.
#[derive(Debug)]
pub(crate) struct Stream {
    pub(crate) chat_id: String,
    /// The received message the answer belongs to (metadata `message_id`), if any.
    pub(crate) message_id: Option<String>,
    started: Instant,
    /// The deltas so far.
    body: String,
    /// Tool hints shown in the card: (byte offset in `body`, text).
    hints: Vec<(usize, String)>,
    pub(crate) card: Card,
    /// The text the card shows.
    pub(crate) shown: String,
    pub(crate) last_write: Option<Instant>,
    pub(crate) failed_updates: u32,
}

impl Stream {
    pub(crate) fn new(chat_id: &str, message_id: Option<&str>) -> Self {
        Self {
            chat_id: chat_id.to_owned(),
            message_id: message_id.map(str::to_owned),
            started: Instant::now(),
            body: String::new(),
            hints: Vec::new(),
            card: Card::Pending,
            shown: String::new(),
            last_write: None,
            failed_updates: 0,
        }
    }

    pub(crate) fn push(&mut self, delta: &str) {
        self.body.push_str(delta);
    }

    /// Shows `hint` at the current end of the text.
    pub(crate) fn add_hint(&mut self, hint: String) {
        self.hints.push((self.body.len(), hint));
    }

    /// Replaces the streamed text with the final one (the stream end's), keeping the hints where they were.
    pub(crate) fn finish(&mut self, text: &str) {
        if !text.trim().is_empty() {
            text.clone_into(&mut self.body);
        }
    }

    /// The text with the hints put in, as the card shows it.
    pub(crate) fn render(&self) -> String {
        let mut out = String::with_capacity(self.body.len() + 64);
        let mut at = 0;
        for (offset, hint) in &self.hints {
            let mut cut = (*offset).min(self.body.len());
            while !self.body.is_char_boundary(cut) {
                cut -= 1;
            }
            let cut = cut.max(at);
            out.push_str(&self.body[at..cut]);
            at = cut;
            out.push_str("\n\n");
            out.push_str(hint);
            out.push_str("\n\n");
        }
        out.push_str(&self.body[at..]);
        out.trim().to_owned()
    }

    /// Whether the card's updates gave up (too many failures in a row).
    pub(crate) fn stalled(&self) -> bool {
        self.failed_updates >= MAX_FAILED_UPDATES
    }

    /// Whether an update now would come sooner than `interval` after the last one.
    pub(crate) fn too_soon(&self, interval: Duration) -> bool {
        self.last_write.is_some_and(|t| t.elapsed() < interval)
    }
}

/// Streams by stream id, bounded in number and age.
#[derive(Debug, Default)]
pub(crate) struct Streams(HashMap<String, Stream>);

impl Streams {
    /// The stream `id`, started for `chat_id` if new; stale streams (and the oldest, when full) are dropped first.
    pub(crate) fn entry(&mut self, id: &str, chat_id: &str, message_id: Option<&str>) -> &mut Stream {
        if !self.0.contains_key(id) {
            self.0.retain(|_, s| s.started.elapsed() < STREAM_TTL);
            while self.0.len() >= MAX_STREAMS {
                let Some(oldest) = self
                    .0
                    .iter()
                    .min_by_key(|(_, s)| s.started)
                    .map(|(k, _)| k.clone())
                else {
                    break;
                };
                tracing::debug!(stream = %oldest, "feishu: forgetting an unfinished stream");
                self.0.remove(&oldest);
            }
        }
        self.0
            .entry(id.to_owned())
            .or_insert_with(|| Stream::new(chat_id, message_id))
    }

    pub(crate) fn remove(&mut self, id: &str) -> Option<Stream> {
        self.0.remove(id)
    }

    /// The newest stream with an open card in `chat_id` (for the received message `message_id`, when both know it).
    pub(crate) fn open_in(&mut self, chat_id: &str, message_id: Option<&str>) -> Option<&mut Stream> {
        self.0
            .values_mut()
            .filter(|s| {
                s.chat_id == chat_id
                    && matches!(s.card, Card::Open { .. })
                    && s.started.elapsed() < STREAM_TTL
                    && match (message_id, s.message_id.as_deref()) {
                        (Some(a), Some(b)) => a == b,
                        _ => true,
                    }
            })
            .max_by_key(|s| s.started)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.len()
    }
}

/// A tool hint as shown inside a card: each line behind `prefix`.
pub(crate) fn hint_text(prefix: &str, hint: &str) -> String {
    hint.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| {
            if prefix.is_empty() {
                l.to_owned()
            } else {
                format!("{prefix} {l}")
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first [`CARD_TEXT_LIMIT`] characters of `text`.
pub(crate) fn preview(text: &str) -> &str {
    match text.char_indices().nth(CARD_TEXT_LIMIT) {
        Some((cut, _)) => &text[..cut],
        None => text,
    }
}

/// `POST /open-apis/cardkit/v1/cards`: a card in streaming mode whose Markdown element shows `text`; its id.
pub(crate) async fn create_card(api: &Api, text: &str) -> Result<String, ChannelError> {
    let card = json!({
        "schema": "2.0",
        "config": {"wide_screen_mode": true, "update_multi": true, "streaming_mode": true},
        "body": {"elements": [{"tag": "markdown", "content": text, "element_id": ELEMENT_ID}]},
    });
    let body = json!({"type": "card_json", "data": card.to_string()});
    let answer = api
        .call(Method::POST, "/open-apis/cardkit/v1/cards", Some(&body))
        .await?;
    answer["data"]["card_id"]
        .as_str()
        .filter(|id| !id.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| ChannelError::rejected(crate::NAME, "cardkit: no card_id in the answer"))
}

/// `PUT …/elements/{ELEMENT_ID}/content`: the element's whole text.
async fn write_text(api: &Api, card_id: &str, text: &str, sequence: u64) -> Result<(), ChannelError> {
    let path = format!(
        "/open-apis/cardkit/v1/cards/{}/elements/{ELEMENT_ID}/content",
        enc(card_id)
    );
    let body = json!({"content": text, "sequence": sequence});
    api.call(Method::PUT, &path, Some(&body)).await.map(drop)
}

/// `PATCH …/settings`: streaming mode on or off.
pub(crate) async fn set_streaming(
    api: &Api,
    card_id: &str,
    on: bool,
    sequence: u64,
) -> Result<(), ChannelError> {
    let path = format!("/open-apis/cardkit/v1/cards/{}/settings", enc(card_id));
    let settings = json!({"config": {"streaming_mode": on}}).to_string();
    // The uuid makes a repeated request idempotent; card and sequence name this one operation.
    let body =
        json!({"settings": settings, "sequence": sequence, "uuid": format!("nb-{card_id}-{sequence}")});
    api.call(Method::PATCH, &path, Some(&body)).await.map(drop)
}

/// Writes `text` into the card; when that fails (streaming mode closed by Feishu after a while, say), turns
/// streaming mode back on and tries once more. `sequence` is advanced past every call made.
pub(crate) async fn write_reopening(
    api: &Api,
    card_id: &str,
    text: &str,
    sequence: &mut u64,
) -> Result<(), ChannelError> {
    *sequence += 1;
    let Err(first) = write_text(api, card_id, text, *sequence).await else {
        return Ok(());
    };
    tracing::debug!(error = %first, "feishu: card update failed; reopening streaming mode");
    *sequence += 1;
    set_streaming(api, card_id, true, *sequence).await?;
    *sequence += 1;
    write_text(api, card_id, text, *sequence).await
}

/// Turns streaming mode off (tried twice, as 0.3.5 does); failures are logged.
pub(crate) async fn close(api: &Api, card_id: &str, sequence: &mut u64) {
    for _ in 0..2 {
        *sequence += 1;
        match set_streaming(api, card_id, false, *sequence).await {
            Ok(()) => return,
            Err(e) => tracing::warn!(error = %e, "feishu: could not end a card's streaming mode"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_stay_where_they_were_shown() {
        let mut s = Stream::new("oc_1", None);
        s.push("Let me look.");
        s.add_hint(hint_text("🔧", "read_file(\"a\")\n\nweb_search(\"b\")"));
        s.push(" Found it.");
        assert_eq!(
            s.render(),
            "Let me look.\n\n🔧 read_file(\"a\")\n🔧 web_search(\"b\")\n\n Found it."
        );
        // The final text replaces the streamed one; a hint past its end goes last.
        s.finish("Let me look. Found it, done.");
        assert!(s.render().starts_with("Let me look.\n\n🔧 read_file"));
        s.finish("é");
        assert_eq!(s.render(), "é\n\n🔧 read_file(\"a\")\n🔧 web_search(\"b\")");
        s.finish("   ");
        assert_eq!(s.body, "é", "an empty final text keeps the streamed one");
        assert_eq!(hint_text("", " x \n"), "x");
    }

    #[test]
    fn offsets_inside_a_character_are_moved_back() {
        let mut s = Stream::new("oc_1", None);
        s.push("abc");
        s.add_hint("H".into());
        s.finish("éé");
        assert_eq!(s.render(), "é\n\nH\n\né");
    }

    #[test]
    fn streams_are_bounded_and_found_by_chat() {
        let mut all = Streams::default();
        for i in 0..(MAX_STREAMS + 10) {
            all.entry(&format!("s{i}"), "oc_1", Some("om_1"));
        }
        assert_eq!(all.len(), MAX_STREAMS);
        assert!(all.open_in("oc_1", None).is_none(), "no card is open yet");
        all.entry("s70", "oc_1", Some("om_1")).card = Card::Open {
            card_id: "c".into(),
            sequence: 0,
        };
        assert!(all.open_in("oc_1", Some("om_1")).is_some());
        assert!(all.open_in("oc_1", None).is_some());
        assert!(all.open_in("oc_1", Some("om_2")).is_none());
        assert!(all.open_in("oc_2", None).is_none());
        assert!(all.remove("s70").is_some());
    }

    #[test]
    fn previews_are_cut_on_characters() {
        let long = "ü".repeat(CARD_TEXT_LIMIT + 3);
        assert_eq!(preview(&long).chars().count(), CARD_TEXT_LIMIT);
        assert_eq!(preview("short"), "short");
    }
}
