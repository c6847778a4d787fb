//! [`AgentLoop`]: the handle hosts hold. [`AgentLoop::submit`] for bus messages (the one place that decides who
//! answers one), [`AgentLoop::process_direct`] for the CLI and cron, [`AgentLoop::shutdown`], and what the host
//! reads (settings, tools, sessions, services).

use std::sync::Arc;

use nanobot_bus::{Bus, InboundMessage};
#[cfg(feature = "cron")]
use nanobot_cron::{CronJob, CronService};
use nanobot_providers::Provider;
use nanobot_sessions::SessionStore;
use nanobot_tools::ToolRegistry;
use tokio::sync::oneshot;

use super::inner::LoopInner;
#[cfg(feature = "mcp")]
use super::kit::McpManager;
use super::routes::reply_for;
use super::types::{Job, RestartHandler, TurnOptions, TurnReply};
#[cfg(feature = "cron")]
use crate::error::BoxError;
use crate::error::CoreError;
use crate::memory::MemoryService;
use crate::settings::AgentSettings;

/// The agent loop. Cheap to clone; clones share everything.
///
/// Build it with [`AgentLoop::builder`] (the binaries use `nanobot_runtime::build_agent`), then hand it bus
/// messages with [`AgentLoop::submit`] or call [`AgentLoop::process_direct`]; stop it with
/// [`AgentLoop::shutdown`].
#[derive(Clone)]
pub struct AgentLoop {
    pub(super) inner: Arc<LoopInner>,
}

impl std::fmt::Debug for AgentLoop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentLoop")
            .field("model", &self.inner.settings.model)
            .field("workspace", &self.inner.settings.workspace)
            .field("tools", &self.inner.kit.tools.names())
            .finish_non_exhaustive()
    }
}

impl AgentLoop {
    /// The loop of `inner`.
    pub(super) fn from_inner(inner: Arc<LoopInner>) -> Self {
        Self { inner }
    }

    /// Usage recording and the budget.
    pub(crate) fn spending(&self) -> &super::spending::Spending {
        &self.inner.spending
    }

    /// The provider.
    pub fn provider(&self) -> &Arc<dyn Provider> {
        self.inner.kit.provider()
    }

    /// The attached bus, if any.
    pub fn bus(&self) -> Option<Arc<dyn Bus>> {
        self.inner.bus()
    }

    /// The settings.
    pub fn settings(&self) -> &AgentSettings {
        &self.inner.settings
    }

    /// The main agent's tools.
    pub fn tools(&self) -> &Arc<ToolRegistry> {
        &self.inner.kit.tools
    }

    /// What every request of an ordinary turn carries before the conversation: the system prompt and the tools
    /// offered (those of MCP servers once connected), estimated as the context budget estimates them.
    pub fn prompt_size(&self) -> super::types::PromptSize {
        let kit = &self.inner.kit;
        let estimator = crate::budget::TokenEstimator;
        let system = nanobot_providers::ChatMessage::system(kit.context.system_prompt());
        let tools = kit.offered_tools();
        super::types::PromptSize {
            system_tokens: estimator.rough_messages(std::slice::from_ref(&system)),
            tool_tokens: estimator.rough_tools(&tools),
            tools: tools.iter().map(|t| t.name.clone()).collect(),
            context_window_tokens: kit.default_model.context_window_tokens,
            max_tokens: kit.default_model.max_tokens,
        }
    }

    /// The control files the model changed and the user has not confirmed (docs/security.md, "Control files").
    pub fn control_files(&self) -> &crate::control::ControlLedger {
        self.inner.gate.control()
    }

    /// The session store.
    pub fn sessions(&self) -> &SessionStore {
        self.inner.ledger.store()
    }

    /// The cron service, when cron is enabled (the gateway runs `service.run(cancel)`).
    #[cfg(feature = "cron")]
    pub fn cron(&self) -> Option<&CronService> {
        self.inner.schedules.cron.as_ref()
    }

    /// Tells the chat of a cron job the scheduler holds ([`nanobot_cron::status::HELD`]) why it did not run and
    /// how to let it; the runtime calls it for each hold the cron service reports. Returns whether it was sent.
    #[cfg(feature = "cron")]
    pub async fn tell_held_cron_job(&self, job: &nanobot_cron::CronJob) -> bool {
        self.inner.tell_held_cron_job(job).await
    }

    /// The local triggers (`/trigger`), when cron is enabled: the gateway runs their delivery queue
    /// ([`nanobot_cron::TriggerQueue`]) with [`AgentLoop::run_trigger`] as its handler.
    #[cfg(feature = "cron")]
    pub fn triggers(&self) -> Option<&nanobot_cron::TriggerStore> {
        self.inner.schedules.triggers.as_ref()
    }

    /// The MCP manager, when MCP servers are configured.
    #[cfg(feature = "mcp")]
    pub fn mcp(&self) -> Option<&McpManager> {
        self.inner.kit.mcp.as_ref()
    }

    /// The long-term memory service, when configured.
    pub(crate) fn memory_service(&self) -> Option<&Arc<dyn MemoryService>> {
        self.inner.memory.service()
    }

    /// The chat of the most recent message from a real channel, if any since start.
    pub(crate) fn last_route(&self) -> Option<(String, String)> {
        self.inner.routes.last()
    }

    /// The most recent private chat from a real channel (a chat whose adapter does not say it is private counts
    /// as a group), if any since start.
    pub(crate) fn last_private_route(&self) -> Option<(String, String)> {
        self.inner.routes.last_private()
    }

    /// Token totals since start.
    pub fn usage(&self) -> crate::hook::UsageTotals {
        self.inner.kit.usage.totals()
    }

    /// The usage ledger every model call of this agent is recorded in (turns, subagents, the heartbeat), if one
    /// was given ([`AgentLoopBuilder::usage_ledger`](crate::AgentLoopBuilder::usage_ledger)).
    pub fn usage_ledger(&self) -> Option<&Arc<nanobot_usage::UsageLedger>> {
        self.spending().ledger()
    }

    /// Attaches a bus (where [`AgentLoop::submit`] publishes, and `message` and `spawn` deliver).
    pub fn set_bus(&self, bus: Arc<dyn Bus>) {
        self.inner.routes.set_bus(bus);
    }

    /// Lets `/restart` restart the process: `handler` is called with the chat that asked (the host shuts down
    /// gracefully and starts again, then tells that chat). Without one, `/restart` answers that it is not
    /// available.
    pub fn set_restart_handler(&self, handler: RestartHandler) {
        self.inner.routes.set_restart_handler(handler);
    }

    /// Hands one bus message to the agent: the one place that decides who answers it. `/stop`, `/help`,
    /// `/status` and unknown commands are answered at once (even while a turn of the session runs); anything
    /// else is queued in its session (turns of one session keep their order, different sessions run
    /// concurrently up to `max_concurrent_sessions`). Every reply, progress message and stream goes out on the
    /// attached bus. The message is queued before this returns; the returned future resolves when its turn is
    /// done (awaiting it is optional).
    pub fn submit(
        &self,
        msg: InboundMessage,
    ) -> impl std::future::Future<Output = Result<TurnReply, CoreError>> + Send + 'static {
        self.inner.routes.note(&msg);
        let (tx, rx) = oneshot::channel();
        if let Some(taken) = self.take_at_once(&msg) {
            tokio::spawn(async move {
                let content = taken.await.unwrap_or_default();
                let _ = tx.send(Ok(TurnReply::command(content)));
            });
        } else {
            self.inner.enqueue(Job {
                msg,
                opts: TurnOptions {
                    publish: true,
                    ..TurnOptions::default()
                },
                reply: Some(tx),
            });
        }
        async move { rx.await.map_err(|_| CoreError::Stopped)? }
    }

    /// Takes `msg` at once when it must not wait in its session's queue: an answer to the approval question a
    /// running turn of its chat is waiting for, or a command answered at once (`/stop`, `/help`, `/status`, …).
    /// Its reply goes out on the bus; `true` when taken (it must then not be queued). A partitioned bus offers
    /// such messages to the process running their session's turn this way ([`nanobot_bus::Interceptor`]).
    pub fn intercept(&self, msg: &InboundMessage) -> bool {
        let taken = self.take_at_once(msg);
        if taken.is_some() {
            self.inner.routes.note(msg);
        }
        taken.is_some()
    }

    /// [`AgentLoop::intercept`]: the reply's text once it is out, or `None` when `msg` is for the queue.
    fn take_at_once(&self, msg: &InboundMessage) -> Option<oneshot::Receiver<String>> {
        // An answer to the approval question a running turn of this chat is waiting for: it goes to that turn,
        // not into the queue behind it.
        let key = self.inner.session_key(msg);
        let answered = self.inner.gate.try_answer(&key, msg);
        if answered.is_none() && !self.inner.is_immediate(msg) {
            return None;
        }
        let inner = self.inner.clone();
        let msg = msg.clone();
        let (tx, rx) = oneshot::channel();
        if let Some(ack) = answered {
            tokio::spawn(async move {
                if let Some(bus) = inner.bus()
                    && let Err(e) = bus.publish_outbound(reply_for(&msg, ack.clone())).await
                {
                    tracing::warn!(error = %e, "cannot publish an approval acknowledgement");
                }
                let _ = tx.send(ack);
            });
        } else {
            tokio::spawn(async move {
                let content = inner.immediate_command(&msg).await.unwrap_or_default();
                if let Some(bus) = inner.bus()
                    && let Err(e) = bus.publish_outbound(reply_for(&msg, content.clone())).await
                {
                    tracing::warn!(error = %e, "cannot publish a command reply");
                }
                let _ = tx.send(content);
            });
        }
        Some(rx)
    }

    /// Stops the agent for good: running turns are cancelled (they still save what they did), queued ones fail
    /// with [`CoreError::Stopped`], MCP servers are shut down. Idempotent.
    pub async fn shutdown(&self) {
        if !self.inner.workers.shut_down() {
            return;
        }
        if let Some(mcp) = &self.inner.kit.mcp {
            mcp.shutdown().await;
        }
        // What tools keep running between calls (exec sessions) ends with the agent.
        self.inner.kit.tools.shutdown().await;
        tracing::info!("agent loop stopped");
    }

    /// True once [`AgentLoop::shutdown`] was called.
    pub fn is_shut_down(&self) -> bool {
        self.inner.workers.is_shut_down()
    }

    /// Processes `text` in session `session_key` (`channel:chat_id`; `cli:direct` by default in the CLI) and
    /// returns the answer. Commands work too. Turns of one session are serialised with the bus-driven ones.
    pub async fn process_direct(&self, text: &str, session_key: &str) -> Result<String, CoreError> {
        let (channel, chat_id) = match session_key.split_once(':') {
            Some((c, id)) => (c.to_owned(), id.to_owned()),
            None => ("cli".to_owned(), session_key.to_owned()),
        };
        let msg = InboundMessage::new(channel, "user", chat_id, text).with_session_key(session_key);
        Ok(self.process_message(msg, TurnOptions::default()).await?.content)
    }

    /// Processes one message with `opts` (streaming, cron, publishing) and returns the reply.
    pub async fn process_message(
        &self,
        msg: InboundMessage,
        opts: TurnOptions,
    ) -> Result<TurnReply, CoreError> {
        if let Some(reply) = self.inner.immediate_command(&msg).await {
            return Ok(TurnReply::command(reply));
        }
        let (tx, rx) = oneshot::channel();
        self.inner.enqueue(Job {
            msg,
            opts,
            reply: Some(tx),
        });
        rx.await.map_err(|_| CoreError::Stopped)?
    }

    /// Cancels the running turn and the subagents of `session_key`; returns how many tasks were stopped. What its
    /// tools left running (exec sessions) is ended in the background.
    pub fn stop_session(&self, session_key: &str) -> usize {
        let n = self.inner.stop_session(session_key);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let (tools, key) = (self.inner.kit.tools.clone(), session_key.to_owned());
            rt.spawn(async move { tools.stop_session(&key).await });
        }
        n
    }

    /// Waits up to `limit` for the memory work started after turns (the `/new` archive, consolidation) to
    /// finish. True when nothing is left running; false when `limit` passed first (the work is left as it is:
    /// the session still holds what was not archived).
    pub async fn finish_background(&self, limit: std::time::Duration) -> bool {
        self.inner.memory.finish(limit).await
    }

    /// Runs a cron job as a turn (what the cron service's handler does); delivers when the job says so.
    #[cfg(feature = "cron")]
    pub async fn run_cron_job(&self, job: CronJob) -> Result<String, BoxError> {
        self.inner.clone().run_cron_job(job).await
    }

    /// Runs one delivery of a local trigger as a turn in the trigger's session and answers in its chat (what the
    /// trigger queue's handler does). Held while control files hold unconfirmed changes, like cron jobs.
    #[cfg(feature = "cron")]
    pub async fn run_trigger(
        &self,
        trigger: nanobot_cron::LocalTrigger,
        delivery: nanobot_cron::TriggerDelivery,
    ) -> Result<String, nanobot_cron::triggers::DeliveryFailure> {
        self.inner.clone().run_trigger(trigger, delivery).await
    }
}
