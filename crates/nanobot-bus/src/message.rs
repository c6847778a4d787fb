//! The messages that cross the bus.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Channel name of internal messages (subagent reports) routed back to the session that started them.
pub const SYSTEM_CHANNEL: &str = "system";

/// Channels of nanobot itself rather than chat apps: the API, the CLI, cron and heartbeat turns, Dream, subagent
/// reports ([`SYSTEM_CHANNEL`]) and 0.3.5's unified session. A message on one of them never makes its chat a
/// target for heartbeat reports or a "last real chat" for routing. The one list; see [`is_internal_channel`].
pub const INTERNAL_CHANNELS: [&str; 7] = [
    "api",
    "cli",
    "cron",
    "dream",
    "heartbeat",
    SYSTEM_CHANNEL,
    "unified",
];

/// The session every chat shares with 0.3.5's `unifiedSession` ([`InboundMessage::turn_session_key`]).
pub const UNIFIED_SESSION_KEY: &str = "unified:default";

/// Metadata key of [`InboundMessage::is_group`]: `true` for a message in a group chat, `false` in a private one.
/// Every adapter that can tell sets it (memory scopes, and anything else that must not show one person's data to
/// a group, depend on it).
pub const META_IS_GROUP: &str = "is_group";

/// Metadata key of an outbound message's inline buttons: rows of labels (`[["Yes", "No"]]`, JSON). A channel that
/// can show buttons does (a pressed button comes back as a message with its label); for the others the manager
/// adds them to the text as `[Yes] [No]` (see [`buttons_as_text`]).
pub const META_BUTTONS: &str = "_buttons";

/// Metadata key set to `true` on an [`OutboundKind::StreamEnd`] that closes a streamed piece of a turn that goes on
/// (the model called tools after it). Channels keep their "working on it" state (reactions, typing) until a
/// stream end without it, or a reply, ends the turn.
pub const META_STREAM_RESUMING: &str = "_stream_resuming";

/// The rows of labels [`META_BUTTONS`] holds in `metadata` (empty when there are none, or they are malformed).
pub fn buttons(metadata: &Map<String, Value>) -> Vec<Vec<String>> {
    metadata
        .get(META_BUTTONS)
        .and_then(Value::as_array)
        .map(|rows| {
            rows.iter()
                .filter_map(Value::as_array)
                .map(|row| {
                    row.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect::<Vec<_>>()
                })
                .filter(|row| !row.is_empty())
                .collect()
        })
        .unwrap_or_default()
}

/// Buttons shown as text, one row a line: `[Yes] [No]`.
pub fn buttons_as_text(rows: &[Vec<String>]) -> String {
    rows.iter()
        .map(|row| row.iter().map(|l| format!("[{l}]")).collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether `channel` is one of [`INTERNAL_CHANNELS`].
pub fn is_internal_channel(channel: &str) -> bool {
    INTERNAL_CHANNELS.contains(&channel)
}

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
    /// What kind of message this is: a chat message, or a report routed back to the chat that asked for it.
    #[serde(default, skip_serializing_if = "InboundKind::is_chat")]
    pub kind: InboundKind,
    /// Who the message speaks for: a person, or an unattended run that holds no person's rights.
    #[serde(default, skip_serializing_if = "Principal::is_person")]
    pub principal: Principal,
}

/// Who an inbound message speaks for. Set where the message enters, never from its text.
///
/// A [`Principal::Person`] is the [`InboundMessage::sender_id`] that the front door vouched for (a channel
/// adapter's platform user id, the API's key, the websocket's token, the local terminal). An
/// [`Principal::Unattended`] run (a cron job, the heartbeat, a trigger, a report from a subagent or another
/// session) acts for nobody: its text is never a command (`/approve` from a cron job is plain text for the model),
/// it never answers an approval question and no grant made for a person is spent by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Principal {
    /// A person, named by the message's `sender_id`.
    #[default]
    Person,
    /// An unattended run.
    Unattended {
        /// Which.
        run: UnattendedRun,
    },
}

impl Principal {
    /// True for [`Principal::Person`].
    pub fn is_person(&self) -> bool {
        matches!(self, Principal::Person)
    }
}

/// The unattended runs ([`Principal::Unattended`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum UnattendedRun {
    /// A cron job the model or a user scheduled.
    Cron,
    /// The heartbeat's periodic check.
    Heartbeat,
    /// A local trigger's delivery.
    Trigger,
    /// An internal report: a finished subagent, a message from another session, a timeout notice.
    Report,
}

impl UnattendedRun {
    /// Its name in logs and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            UnattendedRun::Cron => "cron",
            UnattendedRun::Heartbeat => "heartbeat",
            UnattendedRun::Trigger => "trigger",
            UnattendedRun::Report => "report",
        }
    }
}

/// What an inbound message is, so the agent routes it by type instead of parsing its channel and chat id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum InboundKind {
    /// Something said in a chat (or by a scheduler): answered where it came from.
    #[default]
    Chat,
    /// An internal report (a finished subagent) for the chat `origin_channel`/`origin_chat_id`: the agent
    /// processes it in that chat's session and answers there.
    SystemReport {
        /// The channel of the chat the report belongs to.
        origin_channel: String,
        /// The chat id within that channel.
        origin_chat_id: String,
    },
}

impl InboundKind {
    /// True for [`InboundKind::Chat`].
    pub fn is_chat(&self) -> bool {
        matches!(self, InboundKind::Chat)
    }
}

impl InboundMessage {
    /// The id that names this message across deliveries, `channel:chat:message_id`, when the channel gave its own
    /// message id (`metadata.message_id`, a string or a number). A durable bus drops a second publish with it,
    /// and the agent answers a message delivered twice once. Reports and internal channels (cron, the
    /// heartbeat, subagents) have none: their metadata may repeat the id of the chat message that started them.
    /// The API's requests have one when the client sent an `Idempotency-Key` (the gateway puts it in
    /// `message_id`), so a retried request is answered once.
    pub fn delivery_id(&self) -> Option<String> {
        // Internal channels have no message ids, except the API, whose clients may send an `Idempotency-Key`.
        if self.is_system_report() || (is_internal_channel(&self.channel) && self.channel != "api") {
            return None;
        }
        let id = match self.metadata.get("message_id")? {
            Value::String(s) if !s.is_empty() => s.clone(),
            Value::Number(n) => n.to_string(),
            _ => return None,
        };
        Some(format!("{}:{}:{id}", self.channel, self.chat_id))
    }

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
            kind: InboundKind::Chat,
            principal: Principal::Person,
        }
    }

    /// A message of the unattended `run` ([`Principal::Unattended`]), answered in `channel`/`chat_id`.
    pub fn unattended(
        run: UnattendedRun,
        channel: impl Into<String>,
        sender_id: impl Into<String>,
        chat_id: impl Into<String>,
        content: impl Into<String>,
    ) -> Self {
        let mut msg = Self::new(channel, sender_id, chat_id, content);
        msg.principal = Principal::Unattended { run };
        msg
    }

    /// True when the message speaks for a person ([`Principal::Person`]), not an unattended run. Reports are
    /// never a person's, whatever a source without the field says.
    pub fn speaks_for_person(&self) -> bool {
        self.principal.is_person() && !self.is_system_report()
    }

    /// An internal report from `sender_id` for the chat `origin_channel`/`origin_chat_id` (channel
    /// [`SYSTEM_CHANNEL`], chat id `channel:chat` as nanobot 0.3.5 writes it, and the typed
    /// [`InboundKind::SystemReport`] the agent routes by).
    pub fn system_report(
        sender_id: impl Into<String>,
        origin_channel: impl Into<String>,
        origin_chat_id: impl Into<String>,
        content: impl Into<String>,
    ) -> Self {
        let (origin_channel, origin_chat_id) = (origin_channel.into(), origin_chat_id.into());
        let mut msg = Self::new(
            SYSTEM_CHANNEL,
            sender_id,
            format!("{origin_channel}:{origin_chat_id}"),
            content,
        );
        msg.kind = InboundKind::SystemReport {
            origin_channel,
            origin_chat_id,
        };
        msg.principal = Principal::Unattended {
            run: UnattendedRun::Report,
        };
        msg
    }

    /// The chat a [`InboundKind::SystemReport`] belongs to; `None` for chat messages. A report read from an
    /// older source without the typed kind (channel `system`, chat id `channel:chat`) is understood too.
    pub fn report_origin(&self) -> Option<(String, String)> {
        match &self.kind {
            InboundKind::SystemReport {
                origin_channel,
                origin_chat_id,
            } => Some((origin_channel.clone(), origin_chat_id.clone())),
            _ if self.channel == SYSTEM_CHANNEL => Some(match self.chat_id.split_once(':') {
                Some((c, id)) => (c.to_owned(), id.to_owned()),
                None => ("cli".to_owned(), self.chat_id.clone()),
            }),
            _ => None,
        }
    }

    /// What the adapter says of the chat ([`META_IS_GROUP`]): `Some(true)` a group, `Some(false)` a private chat,
    /// `None` when it does not say (treat it as a group wherever privacy matters).
    pub fn is_group(&self) -> Option<bool> {
        self.metadata.get(META_IS_GROUP).and_then(Value::as_bool)
    }

    /// True for internal reports (see [`InboundMessage::report_origin`]).
    pub fn is_system_report(&self) -> bool {
        self.report_origin().is_some()
    }

    /// The session this message belongs to: the override if set, else `channel:chat_id`.
    pub fn session_key(&self) -> String {
        match &self.session_key_override {
            Some(key) => key.clone(),
            None => format!("{}:{}", self.channel, self.chat_id),
        }
    }

    /// The session a turn of this message runs in. With `unified` (0.3.5's `agents.defaults.unifiedSession`)
    /// every chat message without a session of its own (no override; not a system report) shares
    /// [`UNIFIED_SESSION_KEY`]; otherwise [`InboundMessage::session_key`]. The one rule for the agent and for a
    /// bus that orders turns by session.
    pub fn turn_session_key(&self, unified: bool) -> String {
        if unified && self.session_key_override.is_none() && !self.is_system_report() {
            return UNIFIED_SESSION_KEY.to_owned();
        }
        self.session_key()
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

impl OutboundKind {
    /// The kind's name as it is serialised (`reply`, `progress`, `tool_hint`, `stream_delta`, `stream_end`).
    pub fn name(&self) -> &'static str {
        match self {
            Self::Reply => "reply",
            Self::Progress => "progress",
            Self::ToolHint => "tool_hint",
            Self::StreamDelta { .. } => "stream_delta",
            Self::StreamEnd { .. } => "stream_end",
        }
    }
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
    /// The W3C `traceparent` of the span that published it, when spans are exported ([`Self::stamp_trace`]): the
    /// send is that span's child, on this process or on the replica that holds the channel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<String>,
}

impl OutboundMessage {
    /// Records the current span as this message's origin, unless one is recorded already (every [`crate::Bus`]
    /// does this when the message is published).
    pub fn stamp_trace(&mut self) {
        if self.trace.is_none() {
            self.trace = nanobot_util::trace::current_traceparent();
        }
    }

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
            trace: None,
        }
    }

    /// True for progress text and tool hints, which channels may filter out by configuration.
    pub fn is_progress(&self) -> bool {
        matches!(self.kind, OutboundKind::Progress | OutboundKind::ToolHint)
    }
}

#[cfg(test)]
mod kind_name_tests {
    use super::*;

    #[test]
    fn a_kind_is_named_as_it_is_serialised() {
        for kind in [
            OutboundKind::Reply,
            OutboundKind::Progress,
            OutboundKind::ToolHint,
            OutboundKind::StreamDelta {
                stream_id: "s".into(),
            },
            OutboundKind::StreamEnd {
                stream_id: "s".into(),
            },
        ] {
            let v = serde_json::to_value(&kind).unwrap();
            assert_eq!(v["type"], kind.name(), "{kind:?}");
        }
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_delivery_id_is_the_channels_message_id_in_its_chat() {
        let mut m = InboundMessage::new("telegram", "1", "42", "hi");
        assert_eq!(m.delivery_id(), None);
        m.metadata.insert("message_id".into(), serde_json::json!(7));
        assert_eq!(m.delivery_id().as_deref(), Some("telegram:42:7"));
        m.metadata.insert("message_id".into(), serde_json::json!("ab"));
        assert_eq!(m.delivery_id().as_deref(), Some("telegram:42:ab"));
        m.metadata.insert("message_id".into(), serde_json::json!(""));
        assert_eq!(m.delivery_id(), None);
        let mut cron = InboundMessage::new("cron", "cron", "42", "hi");
        cron.metadata.insert("message_id".into(), serde_json::json!(7));
        assert_eq!(
            cron.delivery_id(),
            None,
            "internal channels repeat their origin's metadata"
        );
    }
    use super::*;

    #[test]
    fn session_key_defaults_to_channel_and_chat() {
        let msg = InboundMessage::new("telegram", "42|alice", "12345", "hi");
        assert_eq!(msg.session_key(), "telegram:12345");
        assert_eq!(msg.with_session_key("cron:job1").session_key(), "cron:job1");
    }

    #[test]
    fn system_reports_carry_their_origin_typed_and_old_ones_are_understood() {
        let r = InboundMessage::system_report("subagent", "telegram", "42:7", "done");
        assert_eq!(
            r.report_origin(),
            Some(("telegram".into(), "42:7".into())),
            "a chat id with ':' survives"
        );
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["kind"]["type"], "system_report");
        assert_eq!(serde_json::from_value::<InboundMessage>(json).unwrap(), r);
        let old = InboundMessage::new(SYSTEM_CHANNEL, "subagent", "discord:9", "done");
        assert_eq!(old.report_origin(), Some(("discord".into(), "9".into())));
        let chat = InboundMessage::new("telegram", "u", "1", "hi");
        assert!(!chat.is_system_report());
        assert!(
            serde_json::to_value(&chat).unwrap().get("kind").is_none(),
            "chat messages serialise as before"
        );
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
