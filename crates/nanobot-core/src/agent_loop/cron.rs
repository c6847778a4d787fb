//! Cron jobs as agent turns; system jobs go to [`AgentLoop::run_system_job`](super::AgentLoop::run_system_job).

#[allow(unused_imports)]
use super::*;

impl LoopInner {
    pub(super) async fn run_cron_job(self: Arc<Self>, job: CronJob) -> Result<String, BoxError> {
        if job.payload.kind == PAYLOAD_SYSTEM_EVENT {
            return match crate::system_jobs::SystemJob::from_id(&job.id) {
                Some(system) => AgentLoop { inner: self }.run_system_job(system).await,
                None => {
                    tracing::warn!(job = %job.id, "unknown system job ignored");
                    Ok(String::new())
                }
            };
        }
        if let Some(files) = (AgentLoop { inner: self.clone() })
            .hold_unattended("cron job")
            .await
        {
            return Err(format!(
                "held: the assistant changed control files the user has not confirmed ({}); send /confirm-files yes \
                 after reviewing them",
                files.join(", ")
            )
            .into());
        }
        let p = &job.payload;
        let channel = p
            .channel
            .clone()
            .or_else(|| p.origin_channel.clone())
            .unwrap_or_else(|| "cron".into());
        let chat =
            p.to.clone()
                .or_else(|| p.origin_chat_id.clone())
                .unwrap_or_else(|| job.id.clone());
        let key = p
            .session_key
            .clone()
            .unwrap_or_else(|| format!("cron:{}", job.id));
        let mut msg = InboundMessage::new(channel.clone(), "cron", chat.clone(), p.message.clone())
            .with_session_key(key);
        msg.metadata = if p.is_bound() {
            p.origin_metadata.clone()
        } else {
            p.channel_meta.clone()
        };
        let (tx, rx) = oneshot::channel();
        self.enqueue(Job {
            msg,
            opts: TurnOptions {
                is_cron: true,
                ..TurnOptions::default()
            },
            reply: Some(tx),
        });
        let reply = rx
            .await
            .map_err(|_| -> BoxError { "the agent loop has stopped".into() })??;
        if (p.deliver || p.is_bound())
            && !reply.delivered_by_tool
            && !reply.content.is_empty()
            && let Some(bus) = self.bus()
        {
            let mut out = OutboundMessage::reply(channel, chat, reply.content.clone());
            out.metadata = if p.is_bound() {
                p.origin_metadata.clone()
            } else {
                p.channel_meta.clone()
            };
            bus.publish_outbound(out).await?;
        }
        Ok(reply.content)
    }
}
