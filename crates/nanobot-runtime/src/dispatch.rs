//! The one bus dispatcher: takes inbound messages off the bus and hands each to
//! [`AgentLoop::submit`](nanobot_core::AgentLoop::submit) (which alone decides who answers), tracking every turn
//! so a shutdown can wait for them, and telling a [`TurnObserver`] (metrics) when turns start and end.

use std::sync::Arc;

use nanobot_bus::{Bus, InboundMessage};
use nanobot_core::{AgentLoop, CoreError, SystemJob, TurnReply};
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
}

/// One turn being watched (see [`TurnObserver::turn_started`]).
pub trait TurnWatch: Send {
    /// The turn ended with `result`.
    fn finished(self: Box<Self>, result: &Result<TurnReply, CoreError>);
}

/// Hands `msg` to the agent and tracks its turn in `tracker`. The message is queued in its session before this
/// returns, so messages keep the order they were taken in.
pub(crate) fn submit_tracked(
    agent: &AgentLoop,
    observer: Option<&Arc<dyn TurnObserver>>,
    tracker: &TaskTracker,
    msg: InboundMessage,
) {
    let watch = observer.map(|o| o.turn_started(&msg));
    let channel = msg.channel.clone();
    let turn = agent.submit(msg);
    tracker.spawn(async move {
        let result = turn.await;
        if let Err(e) = &result {
            tracing::warn!(channel = %channel, error = %e, "turn failed");
        }
        if let Some(w) = watch {
            w.finished(&result);
        }
    });
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
            m = bus.consume_inbound() => match m {
                Some(m) => m,
                None => return,
            },
        };
        submit_tracked(&agent, observer.as_ref(), &tracker, msg);
    }
    while bus.inbound_len() > 0 {
        match bus.consume_inbound().await {
            Some(m) => submit_tracked(&agent, observer.as_ref(), &tracker, m),
            None => break,
        }
    }
}
