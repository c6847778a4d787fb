//! Cron jobs and local trigger deliveries as agent turns; system jobs go to
//! [`AgentLoop::run_system_job`](super::AgentLoop::run_system_job).

use std::sync::{Arc, Weak};

use nanobot_bus::{InboundMessage, OutboundMessage};
use nanobot_cron::{CronJob, JobHandler, PAYLOAD_SYSTEM_EVENT};
use serde_json::{Map, Value};
use tokio::sync::oneshot;

use super::api::AgentLoop;
use super::inner::LoopInner;
use super::types::{Job, TurnOptions, TurnReply};
use crate::error::{BoxError, CoreError};

/// The cron service's handler: each job runs as a turn of the loop (held weakly: the service lives in it).
pub(super) fn cron_handler(weak: Weak<LoopInner>) -> JobHandler {
    Arc::new(move |job: CronJob| {
        let weak = weak.clone();
        Box::pin(async move {
            let inner = weak
                .upgrade()
                .ok_or_else(|| -> BoxError { "the agent loop has stopped".into() })?;
            inner.run_cron_job(job).await
        })
    })
}

impl LoopInner {
    /// Why an unattended run of `what` must wait (control files hold unconfirmed changes), if it must.
    async fn held(self: &Arc<Self>, what: &str) -> Option<String> {
        let files = AgentLoop::from_inner(self.clone()).hold_unattended(what).await?;
        Some(format!(
            "held: the assistant changed control files the user has not confirmed ({}); send /confirm-files yes \
             after reviewing them",
            files.join(", ")
        ))
    }

    /// Runs `msg` as an unattended turn (nobody to ask, no progress published) and waits for it; `None` when the
    /// loop stopped before answering.
    async fn unattended_turn(self: &Arc<Self>, msg: InboundMessage) -> Option<Result<TurnReply, CoreError>> {
        let (tx, rx) = oneshot::channel();
        self.enqueue(Job {
            msg,
            opts: TurnOptions {
                is_cron: true,
                ..TurnOptions::default()
            },
            reply: Some(tx),
        });
        rx.await.ok()
    }

    pub(super) async fn run_cron_job(self: Arc<Self>, job: CronJob) -> Result<String, BoxError> {
        if job.payload.kind == PAYLOAD_SYSTEM_EVENT {
            return match crate::system_jobs::SystemJob::from_id(&job.id) {
                Some(system) => AgentLoop::from_inner(self).run_system_job(system).await,
                None => {
                    tracing::warn!(job = %job.id, "unknown system job ignored");
                    Ok(String::new())
                }
            };
        }
        if let Some(held) = self.held("cron job").await {
            return Err(held.into());
        }
        let p = &job.payload;
        let route = CronRoute::of(&job);
        let key = p
            .session_key
            .clone()
            .unwrap_or_else(|| format!("cron:{}", job.id));
        let mut msg = InboundMessage::unattended(
            nanobot_bus::UnattendedRun::Cron,
            route.channel.clone(),
            "cron",
            route.chat.clone(),
            p.message.clone(),
        )
        .with_session_key(key);
        msg.metadata = route.metadata.clone();
        let reply = self
            .unattended_turn(msg)
            .await
            .ok_or_else(|| -> BoxError { "the agent loop has stopped".into() })??;
        if (p.deliver || p.is_bound())
            && !reply.delivered_by_tool
            && !reply.content.is_empty()
            && let Some(bus) = self.bus()
        {
            bus.publish_outbound(route.reply(reply.content.clone())).await?;
        }
        Ok(reply.content)
    }

    /// Tells the chat of a cron job that nanobot-rs holds (not trusted yet: another program made it, or a file
    /// write changed it) why it did not run and how to let it, when the job names a chat and a bus is attached.
    /// Returns whether it was sent.
    pub(super) async fn tell_held_cron_job(&self, job: &CronJob) -> bool {
        let route = CronRoute::of(job);
        let (Some(bus), false) = (self.bus(), route.channel == "cron") else {
            return false;
        };
        let text = format!(
            "⏸ The scheduled job \"{}\" ({}) did not run: it was not made through nanobot-rs (another program, \
             such as the Python nanobot, made it, or a file write changed it), so it does not run here unattended. \
             It is left as it is; to let it run here, confirm it on this machine with `nanobot cron enable {}`.",
            job.name, job.id, job.id
        );
        match bus.publish_outbound(route.reply(text)).await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(job = %job.id, error = %e, "cannot tell the chat of a held cron job");
                false
            }
        }
    }

    pub(super) async fn run_trigger(
        self: Arc<Self>,
        trigger: nanobot_cron::LocalTrigger,
        delivery: nanobot_cron::TriggerDelivery,
    ) -> Result<String, nanobot_cron::triggers::DeliveryFailure> {
        use nanobot_cron::triggers::{DeliveryFailure, LOCAL_TRIGGER_META};
        let fail = |retry: bool, error: BoxError| DeliveryFailure { retry, error };
        if let Some(held) = self.held("local trigger").await {
            return Err(fail(false, held.into()));
        }
        let text = trigger.turn_text(&delivery.content);
        let mut msg = InboundMessage::unattended(
            nanobot_bus::UnattendedRun::Trigger,
            trigger.channel.clone(),
            trigger.sender_id.clone(),
            trigger.chat_id.clone(),
            text.clone(),
        )
        .with_session_key(trigger.session_key.clone());
        msg.metadata = trigger.origin_metadata.clone();
        msg.metadata.insert(
            LOCAL_TRIGGER_META.into(),
            serde_json::json!({
                "trigger_id": trigger.id,
                "trigger_name": trigger.name,
                "delivery_id": delivery.id,
                "created_at_ms": delivery.created_at_ms,
                "persist_content": text,
            }),
        );
        let reply = self
            .unattended_turn(msg)
            .await
            .ok_or_else(|| fail(true, "the agent loop has stopped".into()))?
            .map_err(|e| fail(false, e.into()))?;
        if !reply.delivered_by_tool
            && !reply.content.is_empty()
            && let Some(bus) = self.bus()
        {
            let mut out = OutboundMessage::reply(&trigger.channel, &trigger.chat_id, reply.content.clone());
            out.metadata = trigger.origin_metadata.clone();
            bus.publish_outbound(out)
                .await
                .map_err(|e| fail(true, e.into()))?;
        }
        Ok(reply.content)
    }
}

/// The chat a cron job's turn runs in and answers to: its delivery target, else the chat that made it, else a
/// `cron` chat of its own; with the channel metadata its messages carry there.
struct CronRoute {
    channel: String,
    chat: String,
    metadata: Map<String, Value>,
}

impl CronRoute {
    fn of(job: &CronJob) -> Self {
        let p = &job.payload;
        CronRoute {
            channel: p
                .channel
                .clone()
                .or_else(|| p.origin_channel.clone())
                .unwrap_or_else(|| "cron".into()),
            chat: p
                .to
                .clone()
                .or_else(|| p.origin_chat_id.clone())
                .unwrap_or_else(|| job.id.clone()),
            metadata: if p.is_bound() {
                p.origin_metadata.clone()
            } else {
                p.channel_meta.clone()
            },
        }
    }

    /// A message to that chat.
    fn reply(self, text: String) -> OutboundMessage {
        let mut out = OutboundMessage::reply(self.channel, self.chat, text);
        out.metadata = self.metadata;
        out
    }
}
