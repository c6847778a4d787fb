//! Reading `im.message.receive_v1` events: who wrote, where, whether the bot was mentioned, and the text.

use serde_json::Value;

/// A received message, as far as the channel needs it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Received {
    pub(crate) event_id: String,
    pub(crate) message_id: String,
    pub(crate) sender: String,
    pub(crate) from_bot: bool,
    pub(crate) chat_id: String,
    pub(crate) group: bool,
    pub(crate) msg_type: String,
    /// The message `content`, parsed (it arrives as a JSON string).
    pub(crate) content: Value,
    pub(crate) raw_content: String,
    pub(crate) mentions: Vec<Mention>,
    pub(crate) parent_id: Option<String>,
    pub(crate) root_id: Option<String>,
    pub(crate) thread_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Mention {
    pub(crate) key: String,
    pub(crate) open_id: String,
    pub(crate) user_id: String,
    pub(crate) name: String,
}

fn s(v: &Value, key: &str) -> String {
    v.get(key).and_then(Value::as_str).unwrap_or_default().to_string()
}

fn opt(v: &Value, key: &str) -> Option<String> {
    v.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

impl Received {
    /// The message of an event payload; `None` for other event types or a message missing routing fields.
    pub(crate) fn from_event(payload: &Value) -> Option<Self> {
        let header = payload.get("header")?;
        if header.get("event_type").and_then(Value::as_str) != Some("im.message.receive_v1") {
            return None;
        }
        let event = payload.get("event")?;
        let sender = event.get("sender")?;
        let message = event.get("message")?;
        let raw_content = s(message, "content");
        let received = Self {
            event_id: s(header, "event_id"),
            message_id: s(message, "message_id"),
            sender: sender
                .get("sender_id")
                .map(|id| s(id, "open_id"))
                .unwrap_or_default(),
            from_bot: sender.get("sender_type").and_then(Value::as_str) == Some("bot"),
            chat_id: s(message, "chat_id"),
            group: message.get("chat_type").and_then(Value::as_str) == Some("group"),
            msg_type: s(message, "message_type"),
            content: serde_json::from_str(&raw_content).unwrap_or(Value::Null),
            raw_content,
            mentions: message
                .get("mentions")
                .and_then(Value::as_array)
                .map(|list| {
                    list.iter()
                        .map(|m| Mention {
                            key: s(m, "key"),
                            open_id: m.get("id").map(|id| s(id, "open_id")).unwrap_or_default(),
                            user_id: m.get("id").map(|id| s(id, "user_id")).unwrap_or_default(),
                            name: s(m, "name"),
                        })
                        .collect()
                })
                .unwrap_or_default(),
            parent_id: opt(message, "parent_id"),
            root_id: opt(message, "root_id"),
            thread_id: opt(message, "thread_id"),
        };
        let complete = [
            &received.message_id,
            &received.sender,
            &received.chat_id,
            &received.msg_type,
        ]
        .iter()
        .all(|f| !f.is_empty());
        complete.then_some(received)
    }

    /// Whether this mention names the bot: its open_id when known, else (like 0.3.5) an `ou_` id without user id.
    pub(crate) fn is_bot(mention: &Mention, bot_open_id: Option<&str>) -> bool {
        match bot_open_id.filter(|b| !b.is_empty()) {
            Some(bot) => mention.open_id == bot,
            None => mention.user_id.is_empty() && mention.open_id.starts_with("ou_"),
        }
    }

    /// `@_all` or an @mention of the bot.
    pub(crate) fn mentions_bot(&self, bot_open_id: Option<&str>) -> bool {
        self.raw_content.contains("@_all") || self.mentions.iter().any(|m| Self::is_bot(m, bot_open_id))
    }

    /// The text the agent sees (text and post messages; other kinds get a placeholder by the caller), with a
    /// leading bot mention removed and other `@_user_N` placeholders replaced by names and ids.
    pub(crate) fn text(&self, bot_open_id: Option<&str>) -> String {
        match self.msg_type.as_str() {
            "text" => {
                let raw = self
                    .content
                    .get("text")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let mut text = raw.trim_start().to_string();
                if let Some(m) = self.mentions.iter().find(|m| {
                    !m.key.is_empty() && placeholder_at(&text, &m.key, 0) && Self::is_bot(m, bot_open_id)
                }) {
                    let rest = text[m.key.len()..].trim().to_string();
                    if !rest.is_empty() {
                        text = rest;
                    }
                }
                self.resolve_mentions(&text)
            }
            "post" => post_text(&self.content).0,
            _ => String::new(),
        }
    }

    /// Image keys embedded in a post.
    pub(crate) fn post_images(&self) -> Vec<String> {
        post_text(&self.content).1
    }

    fn resolve_mentions(&self, text: &str) -> String {
        let mut out = text.to_string();
        for m in &self.mentions {
            if m.key.is_empty() {
                continue;
            }
            let name = if m.name.is_empty() { &m.key } else { &m.name };
            let with = match (m.open_id.is_empty(), m.user_id.is_empty()) {
                (false, false) => format!("@{name} ({}, user id: {})", m.open_id, m.user_id),
                (false, true) => format!("@{name} ({})", m.open_id),
                _ => format!("@{name}"),
            };
            out = replace_placeholder(&out, &m.key, &with);
        }
        out
    }
}

/// Whether `key` (`@_user_1`) starts at byte `at` of `text` and is not the prefix of a longer key (`@_user_10`).
fn placeholder_at(text: &str, key: &str, at: usize) -> bool {
    text[at..].starts_with(key)
        && !text[at + key.len()..]
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn replace_placeholder(text: &str, key: &str, with: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        if placeholder_at(text, key, i) {
            out.push_str(with);
            i += key.len();
        } else if let Some(c) = text[i..].chars().next() {
            out.push(c);
            i += c.len_utf8();
        } else {
            break;
        }
    }
    out
}

/// Longest quoted text shown in a `[Reply to: …]` line, in characters (0.3.5's `_REPLY_CONTEXT_MAX_LEN`).
pub(crate) const QUOTE_LIMIT: usize = 200;

/// The `[Reply to: …]` line for a quoted message of type `msg_type` whose `content` is the API's JSON string:
/// text and posts only, the text cut to [`QUOTE_LIMIT`] characters; `None` when there is no text to show.
pub(crate) fn quote_line(msg_type: &str, content: &str) -> Option<String> {
    let content: Value = serde_json::from_str(content).ok()?;
    let text = match msg_type {
        "text" => content
            .get("text")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        "post" => post_text(&content).0,
        _ => return None,
    };
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    let mut chars = text.char_indices();
    match chars.nth(QUOTE_LIMIT) {
        Some((cut, _)) => Some(format!("[Reply to: {}...]", &text[..cut])),
        None => Some(format!("[Reply to: {text}]")),
    }
}

/// The text of a post (rich text) and its image keys. Posts come as `{title, content}` or localised
/// (`{"zh_cn": {title, content}}`).
fn post_text(content: &Value) -> (String, Vec<String>) {
    let body = if content.get("content").is_some() {
        Some(content)
    } else {
        content
            .as_object()
            .and_then(|o| o.values().find(|v| v.get("content").is_some()))
    };
    let Some(body) = body else {
        return (String::new(), Vec::new());
    };
    let mut lines = Vec::new();
    let mut images = Vec::new();
    if let Some(title) = body
        .get("title")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
    {
        lines.push(title.to_string());
    }
    for para in body
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let mut line = String::new();
        for el in para.as_array().into_iter().flatten() {
            match el.get("tag").and_then(Value::as_str).unwrap_or_default() {
                "text" | "a" | "code_block" | "md" => line.push_str(&s(el, "text")),
                "at" => {
                    let name = opt(el, "user_name").unwrap_or_else(|| s(el, "user_id"));
                    line.push('@');
                    line.push_str(&name);
                }
                "img" => {
                    if let Some(k) = opt(el, "image_key") {
                        images.push(k);
                    }
                }
                _ => {}
            }
        }
        if !line.trim().is_empty() {
            lines.push(line.trim().to_string());
        }
    }
    (lines.join("\n"), images)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(message: Value) -> Value {
        json!({"schema": "2.0", "header": {"event_id": "e1", "event_type": "im.message.receive_v1"},
               "event": {"sender": {"sender_id": {"open_id": "ou_alice"}, "sender_type": "user"}, "message": message}})
    }

    #[test]
    fn text_with_mentions() {
        let r = Received::from_event(&event(json!({
            "message_id": "om_1", "chat_id": "oc_g", "chat_type": "group", "message_type": "text",
            "content": "{\"text\":\"@_user_1 hello @_user_2 and @_user_10\"}",
            "mentions": [
                {"key": "@_user_1", "id": {"open_id": "ou_bot"}, "name": "bot"},
                {"key": "@_user_2", "id": {"open_id": "ou_bob", "user_id": "u7"}, "name": "Bob"}
            ]
        })))
        .unwrap();
        assert!(r.group && r.mentions_bot(Some("ou_bot")));
        assert!(!r.mentions_bot(Some("ou_other")));
        assert_eq!(
            r.text(Some("ou_bot")),
            "hello @Bob (ou_bob, user id: u7) and @_user_10"
        );
    }

    #[test]
    fn quoted_messages_are_cut_and_only_text_is_quoted() {
        assert_eq!(
            quote_line("text", r#"{"text":" hi there "}"#).as_deref(),
            Some("[Reply to: hi there]")
        );
        let post = json!({"title": "T", "content": [[{"tag": "text", "text": "body"}]]}).to_string();
        assert_eq!(quote_line("post", &post).as_deref(), Some("[Reply to: T\nbody]"));
        let long = "é".repeat(QUOTE_LIMIT + 5);
        let line = quote_line("text", &json!({ "text": long }).to_string()).unwrap();
        assert_eq!(line, format!("[Reply to: {}...]", "é".repeat(QUOTE_LIMIT)));
        let exact = "x".repeat(QUOTE_LIMIT);
        assert_eq!(
            quote_line("text", &json!({ "text": exact }).to_string()).unwrap(),
            format!("[Reply to: {exact}]")
        );
        assert_eq!(quote_line("image", r#"{"image_key":"img_1"}"#), None);
        assert_eq!(quote_line("text", r#"{"text":"   "}"#), None);
        assert_eq!(quote_line("text", "not json"), None);
        assert_eq!(quote_line("text", r#"{"text":5}"#), None);
    }

    #[test]
    fn posts_and_incomplete_events() {
        let r = Received::from_event(&event(json!({
            "message_id": "om_2", "chat_id": "oc_p", "chat_type": "p2p", "message_type": "post",
            "content": json!({"zh_cn": {"title": "T", "content": [[{"tag": "text", "text": "see "},
                {"tag": "a", "text": "link", "href": "https://x"}], [{"tag": "img", "image_key": "img_1"}]]}}).to_string()
        })))
        .unwrap();
        assert_eq!(r.text(None), "T\nsee link");
        assert_eq!(r.post_images(), ["img_1"]);
        assert!(Received::from_event(&event(json!({"message_id": "", "chat_id": "c"}))).is_none());
        let mut other = event(json!({}));
        other["header"]["event_type"] = json!("im.message.reaction.created_v1");
        assert!(Received::from_event(&other).is_none());
    }
}
