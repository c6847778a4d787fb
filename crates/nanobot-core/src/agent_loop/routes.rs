//! The routes part: the bus replies go out on, where a message's answer goes, the chats the heartbeat and the
//! notices about held files report to, and the host's restart handler.

use nanobot_util::{read_lock, write_lock};
use std::sync::{Arc, Mutex, RwLock};

use nanobot_bus::{Bus, InboundMessage, OutboundMessage};
use nanobot_util::lock;

use super::types::RestartHandler;

/// A channel and chat id.
pub(super) type Route = (String, String);

/// Where the loop's messages go.
pub(super) struct Routes {
    bus: RwLock<Option<Arc<dyn Bus>>>,
    restart: RwLock<Option<RestartHandler>>,
    /// The chat of the most recent message from a real channel (where the heartbeat reports).
    last: Mutex<Option<Route>>,
    /// The most recent of those chats that its channel says is private (where notices about the owner's files go).
    last_private: Mutex<Option<Route>>,
}

impl Routes {
    pub(super) fn new(bus: Option<Arc<dyn Bus>>) -> Self {
        Self {
            bus: RwLock::new(bus),
            restart: RwLock::default(),
            last: Mutex::default(),
            last_private: Mutex::default(),
        }
    }

    /// The attached bus, if any.
    pub(super) fn bus(&self) -> Option<Arc<dyn Bus>> {
        read_lock(&self.bus).clone()
    }

    pub(super) fn set_bus(&self, bus: Arc<dyn Bus>) {
        *write_lock(&self.bus) = Some(bus);
    }

    /// What `/restart` calls, when the host set it.
    pub(super) fn restart_handler(&self) -> Option<RestartHandler> {
        read_lock(&self.restart).clone()
    }

    pub(super) fn set_restart_handler(&self, handler: RestartHandler) {
        *write_lock(&self.restart) = Some(handler);
    }

    /// Remembers the chat of a message from a real channel (not the API, CLI, cron, …).
    pub(super) fn note(&self, msg: &InboundMessage) {
        if !nanobot_bus::is_internal_channel(&msg.channel) && !msg.chat_id.is_empty() {
            let route = (msg.channel.clone(), msg.chat_id.clone());
            if msg.is_group() == Some(false) {
                *lock(&self.last_private) = Some(route.clone());
            }
            *lock(&self.last) = Some(route);
        }
    }

    /// The chat of the most recent message from a real channel, if any since start.
    pub(super) fn last(&self) -> Option<Route> {
        lock(&self.last).clone()
    }

    /// The most recent private chat from a real channel (a chat whose adapter does not say it is private counts
    /// as a group), if any since start.
    pub(super) fn last_private(&self) -> Option<Route> {
        lock(&self.last_private).clone()
    }
}

/// `(channel, chat_id, session key)` a system report is routed back to (its typed origin,
/// [`InboundMessage::report_origin`]); `None` for chat messages.
pub(super) fn system_target(msg: &InboundMessage) -> Option<(String, String, String)> {
    let (c, id) = msg.report_origin()?;
    let key = msg
        .session_key_override
        .clone()
        .unwrap_or_else(|| format!("{c}:{id}"));
    Some((c, id, key))
}

/// Where the answer to `msg` goes: the origin of a system report, else the message's own chat.
pub(super) fn reply_route(msg: &InboundMessage) -> Route {
    match system_target(msg) {
        Some((c, id, _)) => (c, id),
        None => (msg.channel.clone(), msg.chat_id.clone()),
    }
}

/// A reply to `msg` in its own chat, with its metadata (thread ids).
pub(super) fn reply_for(msg: &InboundMessage, content: String) -> OutboundMessage {
    let mut out = OutboundMessage::reply(&msg.channel, &msg.chat_id, content);
    out.metadata = msg.metadata.clone();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_messages_route_to_their_origin() {
        let m = InboundMessage::system_report("subagent", "telegram", "42", "done");
        assert_eq!(
            system_target(&m),
            Some(("telegram".into(), "42".into(), "telegram:42".into()))
        );
        let m = InboundMessage::system_report("subagent", "matrix", "!room:example.org", "done");
        assert_eq!(reply_route(&m), ("matrix".into(), "!room:example.org".into()));
        assert_eq!(
            system_target(&InboundMessage::new("telegram", "u", "1", "hi")),
            None
        );
    }

    #[test]
    fn only_real_chats_are_remembered_and_private_ones_apart() {
        let routes = Routes::new(None);
        routes.note(&InboundMessage::new("cli", "u", "direct", "hi"));
        assert_eq!(routes.last(), None);
        routes.note(
            &InboundMessage::new("telegram", "u", "1", "hi").with_metadata(nanobot_bus::META_IS_GROUP, false),
        );
        routes.note(
            &InboundMessage::new("telegram", "u", "2", "hi").with_metadata(nanobot_bus::META_IS_GROUP, true),
        );
        assert_eq!(routes.last(), Some(("telegram".into(), "2".into())));
        assert_eq!(routes.last_private(), Some(("telegram".into(), "1".into())));
    }
}
