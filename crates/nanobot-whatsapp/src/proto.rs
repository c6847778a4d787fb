//! The frames between nanobot and the bridge (JSON text, one object per frame; see `bridge/bridge.cjs`).

use serde::{Deserialize, Serialize};

/// A frame from the bridge.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub(crate) enum Event {
    /// A QR code to scan (the device is not linked).
    Qr { qr: String },
    /// Connected as `me` (and `lid`).
    Open { me: Option<String>, lid: Option<String> },
    /// The WhatsApp connection closed; the bridge exits next.
    #[serde(rename_all = "camelCase")]
    Closed { logged_out: bool, reason: String },
    /// A message was received.
    Message(Box<Incoming>),
    /// A send succeeded.
    Ack { r#ref: u64 },
    /// A request failed.
    Error { r#ref: Option<u64>, message: String },
}

/// A received message, as the bridge describes it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct Incoming {
    pub(crate) id: String,
    pub(crate) chat: String,
    pub(crate) from_me: bool,
    pub(crate) is_group: bool,
    pub(crate) sender: String,
    pub(crate) sender_alt: Option<String>,
    pub(crate) push_name: Option<String>,
    pub(crate) timestamp: i64,
    pub(crate) text: String,
    pub(crate) mentions: Vec<String>,
    pub(crate) quoted_participant: Option<String>,
    pub(crate) forwarded: bool,
    pub(crate) media: Option<IncomingMedia>,
}

/// A file attached to a received message.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct IncomingMedia {
    /// `image`, `video`, `audio`, `document` or `sticker`.
    pub(crate) kind: String,
    pub(crate) mimetype: String,
    pub(crate) file_name: Option<String>,
    /// A voice note (push-to-talk audio).
    pub(crate) voice: bool,
    /// The file, base64.
    pub(crate) data: String,
}

/// A frame to the bridge.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub(crate) enum Request {
    /// Send text or a file to a chat.
    Send {
        r#ref: u64,
        to: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        text: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        media: Option<OutgoingMedia>,
    },
    /// Mark a received message read.
    Read {
        chat: String,
        id: String,
        participant: Option<String>,
    },
}

/// A file to send.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct OutgoingMedia {
    pub(crate) kind: &'static str,
    pub(crate) mimetype: String,
    pub(crate) file_name: String,
    pub(crate) data: String,
}
