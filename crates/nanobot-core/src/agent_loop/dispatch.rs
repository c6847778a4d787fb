//! Dispatch: a queued message goes to its session's worker ([`super::workers::Workers`]), which runs it as a
//! queued command or a turn and publishes the outcome.

use std::sync::Arc;

use nanobot_bus::InboundMessage;
use tokio::sync::mpsc;

use super::inner::LoopInner;
use super::redelivery::Earlier;
use super::routes::{reply_for, reply_route, system_target};
use super::types::{Job, TurnOptions, TurnReply};
use crate::commands::{self, Command, Parsed};
use crate::error::CoreError;

impl LoopInner {
    /// Queues `job` in its session (a system report in the session it reports to).
    pub(super) fn enqueue(self: &Arc<Self>, job: Job) {
        let key = match system_target(&job.msg) {
            Some((_, _, key)) => key,
            None => self.session_key(&job.msg),
        };
        if let Some(rx) = self.workers.push(&key, job) {
            let this = self.clone();
            tokio::spawn(async move { this.worker(key, rx).await });
        }
    }

    /// Runs the jobs of session `key` in order, each once a concurrency permit is free; ends when the queue is
    /// empty.
    async fn worker(self: Arc<Self>, key: String, mut rx: mpsc::UnboundedReceiver<Job>) {
        while let Some(job) = self.workers.next(&key, &mut rx) {
            let Some(_permit) = self.workers.permit().await else {
                if let Some(tx) = job.reply {
                    let _ = tx.send(Err(CoreError::Stopped));
                }
                continue;
            };
            let Job { msg, opts, reply } = job;
            let publish = opts.publish;
            let result = self.handle(&key, &msg, opts).await;
            if publish && let Some(bus) = self.bus() {
                match &result {
                    Ok(r) => self.publish_reply(&bus, &msg, r).await,
                    Err(e) => {
                        tracing::error!(session = %key, error = %e, "turn failed");
                        let out = reply_for(&msg, format!("Sorry, something went wrong: {e}"));
                        let _ = bus.publish_outbound(out).await;
                    }
                }
            }
            if let Some(tx) = reply {
                let _ = tx.send(result);
            }
        }
    }

    /// A queued command, run once per channel message: a command that changes the session or the workspace
    /// (`/new`, `/compact`, `/dream`, `/model …`) delivered again (a durable bus redelivering it after a replica
    /// died, a channel repeating an update) is not run again, as a turn is not answered twice.
    async fn command_once(
        self: &Arc<Self>,
        key: &str,
        msg: &InboundMessage,
        cmd: Command,
        args: &str,
        scope: &nanobot_memory::ScopeKey,
    ) -> Result<TurnReply, CoreError> {
        let delivery = msg.delivery_id().filter(|_| changes_state(cmd));
        if let Some(id) = &delivery
            && self.ledger.answered_before(key, id).await
        {
            tracing::info!(session = %key, "a command run before was delivered again; not run twice");
            return Ok(TurnReply {
                replayed: true,
                ..TurnReply::command(String::new())
            });
        }
        let reply = self.queued_command(key, msg, cmd, args, scope).await?;
        if let Some(id) = delivery {
            self.ledger.record_delivery(key, &id, Earlier::Answered).await;
        }
        Ok(TurnReply::command(reply))
    }

    /// One queued message: what a crash left is recovered first, then a person's command runs as a command and
    /// anything else as a turn.
    async fn handle(
        self: &Arc<Self>,
        key: &str,
        msg: &InboundMessage,
        mut opts: TurnOptions,
    ) -> Result<TurnReply, CoreError> {
        self.ledger.recover_checkpoint(key).await;
        let scope = self.memory_scope(key, msg, &opts).await;
        // Only a person's text is a command: a cron job, the heartbeat, a trigger or a report saying `/approve`
        // is plain text for the model.
        if msg.speaks_for_person()
            && let Some(Parsed::Known(cmd, args)) = commands::parse(&msg.content)
        {
            // `/goal <task>` is a turn on the whole message that may record the goal (as 0.3.5 runs it).
            if cmd == Command::Goal && !args.is_empty() {
                opts.goal = true;
            } else {
                return self.command_once(key, msg, cmd, &args, &scope).await;
            }
        }
        let (channel, chat_id) = reply_route(msg);
        self.turn(key, msg, &channel, &chat_id, opts, &scope).await
    }
}

/// Whether `cmd` changes the session or the workspace (then a second delivery of it must not run it again).
fn changes_state(cmd: Command) -> bool {
    matches!(
        cmd,
        Command::New
            | Command::Compact
            | Command::Dream
            | Command::DreamRestore
            | Command::Model
            | Command::DreamPrompt
            | Command::EvaluatorPrompt
    )
}
