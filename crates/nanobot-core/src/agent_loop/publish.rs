//! Publishing on the bus: replies, progress, tool hints and streamed answers.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use nanobot_bus::{Bus, InboundMessage, OutboundKind, OutboundMessage};
use nanobot_util::lock;
use serde_json::{Map, Value};
use tokio::sync::mpsc;

use super::inner::LoopInner;
use super::routes::reply_route;
use super::types::TurnReply;
use crate::error::BoxError;
use crate::hook::{AgentHook, ToolBatch, Veto};
use crate::runner::StopReason;
use crate::text::tool_hint;

impl LoopInner {
    pub(super) async fn publish_reply(&self, bus: &Arc<dyn Bus>, msg: &InboundMessage, r: &TurnReply) {
        // Streamed finals are closed by the turn itself (StreamEnd); cancelled turns and tool-delivered answers
        // send nothing more.
        if r.delivered_by_tool
            || r.replayed
            || r.streamed
            || r.stop_reason == Some(StopReason::Cancelled)
            || r.content.is_empty()
        {
            return;
        }
        let (channel, chat_id) = reply_route(msg);
        let mut out = OutboundMessage::reply(channel, chat_id, r.content.clone());
        if !msg.is_system_report() {
            out.metadata = msg.metadata.clone();
        }
        out.trace = r.trace.clone();
        if let Err(e) = bus.publish_outbound(out).await {
            tracing::warn!(error = %e, "cannot publish a reply");
        }
    }
}

/// Publishes progress text, tool hints and stream deltas of one turn on the bus.
pub(super) struct BusHook {
    pub(super) bus: Arc<dyn Bus>,
    channel: String,
    chat_id: String,
    metadata: Map<String, Value>,
    hint_len: usize,
    stream: bool,
    turn_id: u64,
    state: Mutex<StreamState>,
}

#[derive(Default)]
pub(super) struct StreamState {
    seq: u64,
    current: Option<String>,
    text: String,
    final_id: Option<String>,
}

impl BusHook {
    pub(super) fn new(
        bus: Arc<dyn Bus>,
        channel: &str,
        chat_id: &str,
        metadata: Map<String, Value>,
        hint_len: usize,
        stream: bool,
        turn_id: u64,
    ) -> Self {
        Self {
            bus,
            channel: channel.to_owned(),
            chat_id: chat_id.to_owned(),
            metadata,
            hint_len,
            stream,
            turn_id,
            state: Mutex::default(),
        }
    }

    pub(super) fn final_stream_id(&self) -> Option<String> {
        lock(&self.state).final_id.clone()
    }

    pub(super) async fn send(&self, kind: OutboundKind, content: String) {
        let mut out = OutboundMessage::of_kind(kind, &self.channel, &self.chat_id, content);
        out.metadata = self.metadata.clone();
        if let Err(e) = self.bus.publish_outbound(out).await {
            tracing::debug!(error = %e, "cannot publish progress");
        }
    }
}

#[async_trait]
impl AgentHook for BusHook {
    fn wants_streaming(&self) -> bool {
        self.stream
    }

    async fn on_stream(&self, delta: &str) -> Result<(), BoxError> {
        let id = {
            let mut st = lock(&self.state);
            if st.current.is_none() {
                st.seq += 1;
                st.current = Some(format!("t{}-{}", self.turn_id, st.seq));
            }
            st.text.push_str(delta);
            st.current.clone().unwrap_or_default()
        };
        self.send(OutboundKind::StreamDelta { stream_id: id }, delta.to_owned())
            .await;
        Ok(())
    }

    async fn on_stream_end(&self, resuming: bool) -> Result<(), BoxError> {
        let ended = {
            let mut st = lock(&self.state);
            if resuming {
                st.final_id = None;
                st.current.take().map(|id| (id, std::mem::take(&mut st.text)))
            } else {
                st.final_id = st.current.clone();
                None
            }
        };
        if let Some((stream_id, text)) = ended {
            let mut out = OutboundMessage::of_kind(
                OutboundKind::StreamEnd { stream_id },
                &self.channel,
                &self.chat_id,
                text,
            );
            out.metadata = self.metadata.clone();
            out.metadata
                .insert(nanobot_bus::META_STREAM_RESUMING.into(), Value::Bool(true));
            if let Err(e) = self.bus.publish_outbound(out).await {
                tracing::debug!(error = %e, "cannot publish progress");
            }
        }
        Ok(())
    }

    async fn before_execute_tools(&self, batch: &ToolBatch<'_>) -> Result<Vec<Veto>, BoxError> {
        if !self.stream
            && let Some(text) = batch.assistant_text
        {
            self.send(OutboundKind::Progress, text.to_owned()).await;
        }
        let hints: Vec<String> = batch.calls.iter().map(|c| tool_hint(c, self.hint_len)).collect();
        if !hints.is_empty() {
            self.send(OutboundKind::ToolHint, hints.join("\n")).await;
        }
        Ok(Vec::new())
    }
}

/// Forwards visible deltas to a channel (CLI streaming).
pub(super) struct ChannelStreamHook(pub(super) mpsc::UnboundedSender<String>);

#[async_trait]
impl AgentHook for ChannelStreamHook {
    fn wants_streaming(&self) -> bool {
        true
    }

    async fn on_stream(&self, delta: &str) -> Result<(), BoxError> {
        let _ = self.0.send(delta.to_owned());
        Ok(())
    }
}
