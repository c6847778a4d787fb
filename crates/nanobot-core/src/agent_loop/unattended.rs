//! Unattended runs (heartbeat, Dream, cron jobs) wait while control files hold unconfirmed changes.

use nanobot_bus::OutboundMessage;

use super::api::AgentLoop;

impl AgentLoop {
    /// Whether unattended runs (`what`: heartbeat, Dream, a cron job) must wait because control files hold changes
    /// the model made and the user has not confirmed ([`crate::control`]). When they must: logs why, tells the most
    /// recently active private chat once per held set (with how to confirm; never a group, whose members need not
    /// see which files steer the assistant), and returns the held files.
    pub(crate) async fn hold_unattended(&self, what: &str) -> Option<Vec<String>> {
        // Shared memory: the held files are compared with the memory other replicas wrote, not a stale copy.
        self.inner
            .memory
            .sync(None, "before checking the held control files")
            .await;
        let held = self.inner.gate.held().await;
        let notice = crate::control::held_notice(&held)?;
        tracing::warn!(run = what, "{notice}");
        // Marked as told only when there is a private chat to tell; until then each run logs it.
        let route = self
            .last_private_route()
            .filter(|_| self.inner.gate.first_time_told(&notice));
        if let Some((channel, chat_id)) = route
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
