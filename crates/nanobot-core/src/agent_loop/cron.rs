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

impl AgentLoop {
    /// Whether unattended runs (`what`: heartbeat, Dream, a cron job) must wait because control files hold changes
    /// the model made and the user has not confirmed ([`crate::control`]). When they must: logs why, tells the most
    /// recently active chat once per held set (with how to confirm), and returns the held files.
    pub(crate) async fn hold_unattended(&self, what: &str) -> Option<Vec<String>> {
        let ledger = self.inner.control.clone();
        let held = tokio::task::spawn_blocking(move || ledger.held()).await.ok()?;
        let notice = crate::control::held_notice(&held)?;
        tracing::warn!(run = what, "{notice}");
        let first = {
            let mut last = nanobot_util::lock(&self.inner.held_notified);
            let first = last.as_deref() != Some(notice.as_str());
            *last = Some(notice.clone());
            first
        };
        if first
            && let Some((channel, chat_id)) = self.last_route()
            && let Some(bus) = self.bus()
        {
            let text = format!(
                "⚠️ Scheduled runs are paused. The assistant changed files that steer later turns, and nothing runs \
                 unattended on them until you confirm: {}. Review them (or edit them), then send /confirm-files yes.",
                held.iter()
                    .map(|h| h.path.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            if let Err(e) = bus
                .publish_outbound(OutboundMessage::reply(&channel, &chat_id, text))
                .await
            {
                tracing::warn!(error = %e, "could not tell the user that scheduled runs are paused");
            }
        }
        Some(held.into_iter().map(|h| h.path).collect())
    }
}
