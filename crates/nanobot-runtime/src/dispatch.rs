//! The one bus dispatcher: takes inbound messages off the bus and hands each to
//! [`AgentLoop::submit`](nanobot_core::AgentLoop::submit) (which alone decides who answers), tracking every turn
//! so a shutdown can wait for them, and telling a [`TurnObserver`] (metrics) when turns start and end.

use std::sync::Arc;

use nanobot_bus::{Bus, InboundMessage, Interceptor, Receipt, Settlement};
use nanobot_core::{AgentLoop, CoreError, StopReason, SystemJob, TurnReply};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Watches bus-driven turns and system jobs (the gateway's metrics implement it).
pub trait TurnObserver: Send + Sync {
    /// A message was taken off the bus; the returned watch is told when its turn ends.
    fn turn_started(&self, msg: &InboundMessage) -> Box<dyn TurnWatch>;

    /// A system job ran: `Ok(output)` (for the heartbeat its decision: `empty`, `skip`, `run`) or `Err(error)`.
    fn system_job_finished(&self, job: SystemJob, result: Result<&str, &str>) {
        let _ = (job, result);
    }

    /// On a bus shared by replicas: this replica took (`true`) or gave up (`false`) the scheduler lease, so it
    /// runs cron and the heartbeat (or no longer does).
    fn scheduler_held(&self, held: bool) {
        let _ = held;
    }
}

/// One turn being watched (see [`TurnObserver::turn_started`]).
pub trait TurnWatch: Send {
    /// The turn ended with `result`.
    fn finished(self: Box<Self>, result: &Result<TurnReply, CoreError>);
}

/// The agent as the bus's [`Interceptor`]: answers and commands for a running turn are taken at once.
pub(crate) struct AgentInterceptor(pub(crate) AgentLoop);

impl Interceptor for AgentInterceptor {
    fn intercept(&self, msg: &InboundMessage) -> bool {
        self.0.intercept(msg)
    }
}

/// Hands `msg` to the agent and tracks its turn in `tracker`. The message is queued in its session before this
/// returns, so messages keep the order they were taken in. A durable bus's `receipt` is settled when the turn is
/// over: done once the turn has been saved (or failed for good), retried when the agent stopped before running it.
pub(crate) fn submit_tracked(
    agent: &AgentLoop,
    observer: Option<&Arc<dyn TurnObserver>>,
    tracker: &TaskTracker,
    msg: InboundMessage,
    receipt: Option<Box<dyn Receipt>>,
) {
    let watch = observer.map(|o| o.turn_started(&msg));
    let channel = msg.channel.clone();
    let turn = agent.submit(msg);
    let agent = agent.clone();
    tracker.spawn(async move {
        let result = turn.await;
        if let Err(e) = &result {
            tracing::warn!(channel = %channel, error = %e, "turn failed");
        }
        if let Some(receipt) = receipt {
            receipt.settle(settlement(&agent, &result)).await;
        }
        if let Some(w) = watch {
            w.finished(&result);
        }
    });
}

/// How a durable bus should settle a turn's message: again elsewhere when this agent stopped before the turn
/// could finish (queued and never run, or cancelled by the shutdown rather than by the user's `/stop`), else done.
fn settlement(agent: &AgentLoop, result: &Result<TurnReply, CoreError>) -> Settlement {
    match result {
        Err(CoreError::Stopped) => Settlement::Retry,
        Ok(reply) if reply.stop_reason == Some(StopReason::Cancelled) && agent.is_shut_down() => {
            Settlement::Retry
        }
        _ => Settlement::Done,
    }
}

/// Consumes inbound messages until `accept` fires (or the bus closes), then hands over what was already
/// queued: accepted messages are never dropped.
pub(crate) async fn dispatch(
    agent: AgentLoop,
    bus: Arc<dyn Bus>,
    observer: Option<Arc<dyn TurnObserver>>,
    tracker: TaskTracker,
    accept: CancellationToken,
) {
    loop {
        let msg = tokio::select! {
            biased;
            () = accept.cancelled() => break,
            m = bus.consume_inbound_delivery() => match m {
                Some(m) => m,
                None => return,
            },
        };
        let (msg, receipt) = msg.into_parts();
        submit_tracked(&agent, observer.as_ref(), &tracker, msg, receipt);
    }
    while bus.inbound_len() > 0 {
        match bus.consume_inbound_delivery().await {
            Some(d) => {
                let (msg, receipt) = d.into_parts();
                submit_tracked(&agent, observer.as_ref(), &tracker, msg, receipt);
            }
            None => break,
        }
    }
}
