//! The messages that cross the bus.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Channel name of internal messages (subagent reports) routed back to the session that started them.
pub const SYSTEM_CHANNEL: &str = "system";

/// Something said to the agent: a chat message, a cron job firing, a subagent report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InboundMessage {
    /// Channel it came from (`telegram`, `discord`, `cli`, `cron`, `system`, …).
    pub channel: String,
    /// Who sent it, in the channel's own id format (`12345` or `12345|alice`).
    pub sender_id: String,
    /// The chat (conversation, room, DM) it belongs to.
    pub chat_id: String,
    /// Its text.
    pub content: String,
    /// When it was received.
    pub timestamp: DateTime<Utc>,
    /// Local paths of attached files (downloaded images, voice notes, documents).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub media: Vec<String>,
    /// Channel-specific extras (message id, thread id, username, …).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub metadata: Map<String, Value>,
    /// Session to use instead of `channel:chat_id` (threads, unified sessions, cron jobs bound to a session).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key_override: Option<String>,
    /// The channel can show an answer while it is being written: the agent then publishes
    /// [`OutboundKind::StreamDelta`] pieces and one [`OutboundKind::StreamEnd`] instead of a single reply.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub wants_stream: bool,
}

impl InboundMessage {
    /// A text message received now, with no media or metadata.
    pub fn new(
        channel: impl Into<String>,
        sender_id: impl Into<String>,
        chat_id: impl Into<String>,
        content: impl Into<String>,
    ) -> Self {
        Self {
            channel: channel.into(),
            sender_id: sender_id.into(),
            chat_id: chat_id.into(),
            content: content.into(),
            timestamp: Utc::now(),
            media: Vec::new(),
            metadata: Map::new(),
            session_key_override: None,
            wants_stream: false,
        }
    }

    /// The session this message belongs to: the override if set, else `channel:chat_id`.
    pub fn session_key(&self) -> String {
        match &self.session_key_override {
            Some(key) => key.clone(),
            None => format!("{}:{}", self.channel, self.chat_id),
        }
    }

    /// Sets the session key override.
    #[must_use]
    pub fn with_session_key(mut self, key: impl Into<String>) -> Self {
        self.session_key_override = Some(key.into());
        self
    }

    /// Asks for a streamed answer (see [`InboundMessage::wants_stream`]).
    #[must_use]
    pub fn with_streaming(mut self, on: bool) -> Self {
        self.wants_stream = on;
        self
    }

    /// Adds one metadata entry.
    #[must_use]
    pub fn with_metadata(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }
}

/// What an outbound message is, so channels can treat each kind properly instead of sniffing metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum OutboundKind {
    /// The agent's answer (or a message sent with the `message` tool).
    #[default]
    Reply,
    /// Text the model wrote before calling tools ("Let me check that…").
    Progress,
    /// A short description of a tool call (`web_search("rust async")`).
    ToolHint,
    /// A piece of a streamed answer; pieces with the same `stream_id` belong to one message.
    StreamDelta {
        /// Identifies the streamed message the delta extends.
        stream_id: String,
    },
    /// The streamed message with this id is complete; `content` holds its full final text.
    StreamEnd {
        /// Identifies the streamed message that ended.
        stream_id: String,
    },
}

/// Something the agent says to a chat.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutboundMessage {
    /// Channel to deliver through.
    pub channel: String,
    /// Chat to deliver to.
    pub chat_id: String,
    /// Text (Markdown) to send.
    pub content: String,
    /// Platform message id to reply to, when the channel supports replies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<String>,
    /// Local paths of files to attach.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub media: Vec<String>,
    /// Channel-specific extras (thread id, message id of the inbound message, …).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub metadata: Map<String, Value>,
    /// What kind of message this is.
    #[serde(default)]
    pub kind: OutboundKind,
}

impl OutboundMessage {
    /// A final reply.
    pub fn reply(channel: impl Into<String>, chat_id: impl Into<String>, content: impl Into<String>) -> Self {
        Self::of_kind(OutboundKind::Reply, channel, chat_id, content)
    }

    /// A message of the given kind with no media, metadata or reply target.
    pub fn of_kind(
        kind: OutboundKind,
        channel: impl Into<String>,
        chat_id: impl Into<String>,
        content: impl Into<String>,
    ) -> Self {
        Self {
            channel: channel.into(),
            chat_id: chat_id.into(),
            content: content.into(),
            reply_to: None,
            media: Vec::new(),
            metadata: Map::new(),
            kind,
        }
    }

    /// True for progress text and tool hints, which channels may filter out by configuration.
    pub fn is_progress(&self) -> bool {
        matches!(self.kind, OutboundKind::Progress | OutboundKind::ToolHint)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_key_defaults_to_channel_and_chat() {
        let msg = InboundMessage::new("telegram", "42|alice", "12345", "hi");
        assert_eq!(msg.session_key(), "telegram:12345");
        assert_eq!(msg.with_session_key("cron:job1").session_key(), "cron:job1");
    }

    #[test]
    fn outbound_kind_round_trips_as_tagged_json() {
        let mut msg = OutboundMessage::reply("discord", "c1", "done");
        msg.kind = OutboundKind::StreamDelta {
            stream_id: "s1".into(),
        };
        let json = serde_json::to_value(&msg).unwrap();
        assert_eq!(
            json["kind"],
            serde_json::json!({"type": "stream_delta", "stream_id": "s1"})
        );
        let back: OutboundMessage = serde_json::from_value(json).unwrap();
        assert_eq!(back, msg);
        assert!(!back.is_progress());
        assert!(OutboundMessage::of_kind(OutboundKind::ToolHint, "a", "b", "c").is_progress());
    }
}
